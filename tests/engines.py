"""The real engines, built from their Go modules by scripts/engines.sh (scripts/test.sh runs it first): Argo's `argo`
CLI, and the harness (engines/harness/) that runs Argo's expression evaluation, its `when` evaluation, its
template-referencing allow-list and apimachinery's label-selector parser on what the tests hand it.

A missing binary fails the test that needs it, naming the command that builds it: an engine check never skips.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

ENGINES_SH = ROOT / "scripts/engines.sh"
# The Argo releases `argo lint` runs as: scripts/engines.sh's ARGO_VERSIONS, read from there.
ARGO_VERSIONS = tuple(
    subprocess.run([ENGINES_SH, "--argo-versions"], check=True, capture_output=True, text=True).stdout.split()
)


@functools.cache
def binary(name: str) -> Path:
    """The built engine `name` (harness, argo-<version>); fails the test when it is not built."""
    path = Path(subprocess.run([ENGINES_SH, "--path", name], check=True, capture_output=True, text=True).stdout.strip())
    if not path.is_file():
        pytest.fail(f"{name}: {path} is not built; run scripts/engines.sh (scripts/test.sh runs it)", pytrace=False)
    return path


def argo_lint(version: str, *files: Path) -> subprocess.CompletedProcess:
    """`argo lint --offline --strict` over `files` together (a workflowTemplateRef finds its template among them)."""
    cmd = [str(binary(f"argo-{version}")), "lint", "--offline", "--strict", "--output", "simple", *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={"HOME": "/nonexistent"})


def harness(requests: list[dict]) -> list[dict]:
    """Each request answered by the harness: {"value": …} or {"error": "…"} (engines/harness/main.go lists the ops)."""
    proc = subprocess.run(
        [str(binary("harness"))],
        input=json.dumps({"requests": requests}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"harness exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)["results"]


def ask(request: dict) -> dict:
    return harness([request])[0]


def pod_security(pods: dict[str, dict], level: str = "restricted", version: str = "latest") -> dict[str, dict]:
    """Each pod judged by Kubernetes' Pod Security evaluator (engines/podsecurity/): name → {allowed, reason,
    detail}, the reason and detail as the API server's "violates PodSecurity" refusal words them."""
    proc = subprocess.run(
        [str(binary("podsecurity"))],
        input=json.dumps({"level": level, "version": version, "pods": pods}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"podsecurity exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)["results"]
