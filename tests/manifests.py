"""Helpers for tests that read the rendered WorkflowTemplate's Ray path: the RayJob inside its resource template, with
Argo's `{{…}}` placeholders filled in, and a small evaluator for the Argo expressions the template relies on; and the
serving set in infra/serving/."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from tests.conftest import ROOT, console_script
from workflows import rayjob

TEMPLATE_FILE = ROOT / "infra/argo/distill-workflowtemplate.yaml"
SERVING_DIR = ROOT / "infra/serving"
WORKFLOW_UID = "4f1c9a52-7d3e-4b8a-9e61-0c2d5f8a7b13"
WORKFLOW_NAME = "distill-x7k2p"


def rendered_template() -> dict:
    # libyaml's loader when there is one: ten times faster on this file, and many tests read it.
    return yaml.load(TEMPLATE_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def serving_docs() -> list[dict]:
    """Every object in infra/serving/ (the committed files: the golden test holds them equal to what is rendered)."""
    return [d for path in sorted(SERVING_DIR.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def serving_pods() -> dict[str, dict]:
    """alias -> the pod its Deployment creates (metadata and spec of the pod template)."""
    return {
        d["metadata"]["labels"]["distillery/alias"]: d["spec"]["template"]
        for d in serving_docs()
        if d["kind"] == "Deployment"
    }


def default_artifact_repository() -> dict:
    """The namespace's default Argo artifact repository (infra/artifact-repository.yaml), as Argo reads it."""
    config_map = yaml.safe_load((ROOT / "infra/artifact-repository.yaml").read_text())
    default = config_map["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    return yaml.safe_load(config_map["data"][default])


def templates(doc: dict | None = None) -> dict[str, dict]:
    return {t["name"]: t for t in (doc or rendered_template())["spec"]["templates"]}


def rayjob_template(doc: dict | None = None) -> dict:
    """The Argo resource template that creates the RayJob."""
    return next(t for t in templates(doc).values() if "RayJob" in t.get("resource", {}).get("manifest", ""))


def substitute(text: str, parameters: dict[str, str]) -> str:
    """What Argo does before it creates the resource: every `{{…}}` replaced by its value.

    The CRD cannot judge the manifest as written: its replica counts are bare `{{inputs.parameters.…}}` placeholders
    (not even YAML until filled in) where the schema wants integers. So they get plausible values first: the named
    `parameters`, the workflow's uid and name, and a recognisable string for any other input.
    """

    def value(match: re.Match) -> str:
        name = match.group(1).strip()
        if name == "workflow.uid":
            return WORKFLOW_UID
        if name == "workflow.name":
            return WORKFLOW_NAME
        key = name.removeprefix("inputs.parameters.")
        return parameters.get(key, f"{key}-value")

    filled = re.sub(r"\{\{([^{}]+)\}\}", value, text)
    assert "{{" not in filled, "a placeholder the test does not know"
    return filled


def rendered_rayjob(
    replicas: dict[str, int] | None = None,
    ray_workers: int = 6,
    cpus: dict[str, int] | None = None,
    memory: dict[str, str] | None = None,
    disk: dict[str, str] | None = None,
    threads: int = 2,
) -> dict:
    """The RayJob as the API server would receive it, for the given values of the resource template's per-group
    inputs, each keyed by its parameter (`ray-large-workers`: replicas, `ray-large-cpus`, `ray-large-memory`: the pods'
    size). A group not named gets one replica of pods as large as its node group allows (`rayjob.WORKER_GROUPS`); the
    GPU group none (`ray-gpu-workers`, with `ray-gpu` false), unless `replicas` names it; every worker `threads`
    threads (`ray-threads`)."""
    parameters = {"ray-workers": str(ray_workers), rayjob.GPU_GROUP.parameter: "0", rayjob.RAY_GPU_INPUT: "false",
                  rayjob.THREADS_INPUT: str(threads)}  # fmt: skip
    for g in rayjob.WORKER_GROUPS:
        parameters |= {g.parameter: "1", g.cpus_parameter: str(g.cpus), g.memory_parameter: g.memory}
        parameters[g.disk_parameter] = "20Gi"
    for given in (replicas, cpus, memory, disk):
        parameters |= {name: str(value) for name, value in (given or {}).items()}
    return yaml.safe_load(substitute(rayjob_template()["resource"]["manifest"], parameters))


class _Map(dict):
    """A map that expr-lang lets you read both ways: `m['key']` and `m.key`."""

    def __getattr__(self, key: str) -> object:
        return self[key]


def _map(value: object) -> object:
    return _Map({k: _map(v) for k, v in value.items()}) if isinstance(value, dict) else value


def _python(expr: str) -> str:
    """expr-lang → Python for the subset the template uses: `asInt`, arithmetic, `==`, string literals, lookups, and
    right-nested ternaries `c1 ? a : c2 ? b : c` whose conditions and branches hold no `?` themselves."""
    ternary = re.fullmatch(r"(.+?) \? (.+?) : (.+)", expr)
    if ternary:
        cond, yes, no = ternary.groups()
        return f"(({_python(yes)}) if ({_python(cond)}) else ({_python(no)}))"
    return expr.replace("asInt(", "int(")


def argo_expression(expr: str, env: dict) -> object:
    """Evaluate an Argo expression (a `fromExpression`, or the inside of a `{{=…}}` tag) against `env`."""
    if expr.startswith("{{="):
        assert expr.endswith("}}"), expr
        expr = expr[3:-2]
    return eval(_python(expr), {"__builtins__": {"int": int}}, {k: _map(v) for k, v in env.items()})


def kubernetes_validate(files: list, version: str = "1.33.0") -> dict:
    """`kubernetes-validate --strict` against Kubernetes `version`, once over all `files` (it is slow to start):
    file → its report lines ("INFO … passed …" or "ERROR … did not validate …")."""
    import subprocess

    done = subprocess.run(
        [console_script("kubernetes-validate"), "--strict", "--kubernetes-version", version, *map(str, files)],
        capture_output=True,
        text=True,
    )
    lines = (done.stdout + done.stderr).splitlines()
    return {f: "\n".join(line for line in lines if f" {f} " in line) for f in files}


def argo_install(folder: Path, configmap: dict) -> Path:
    """`folder` as a user's Argo installation: Argo's controller ConfigMap `configmap` and the shipped Component
    (infra/argo-controller, which kustomize wants as a relative path); returns the folder to kustomize."""
    (folder / "configmap.yaml").write_text(yaml.safe_dump(configmap))
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["configmap.yaml"],
                "components": [os.path.relpath(ROOT / "infra/argo-controller", folder)],
            }
        )
    )
    return folder
