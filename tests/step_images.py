"""Where the step images scripts/images.sh builds are: the one rule is the script's (its cache folder, the hash of each
image's inputs in the archive's name), asked here, never re-derived. The real node (tests/node.py) imports these
archives into containerd; tests/test_images_built.py runs the images they came from.

    archive("cpu")   ~/.cache/distillery/images/cpu-<hash>.tar for the current inputs; fails naming the build command
    built()          the archives of those kinds that are built for the current inputs (the node imports them)
    pinned(kinds)    workflows.images.Images of those archives (registry localhost, the project's version, their
                     digests): what the rendered templates must reference for the node to run these exact images
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workflows.images import KINDS, VERSION, Images

IMAGES_SH = ROOT / "scripts/images.sh"
# The registry the archives name their images under (images.sh: localhost/distillery-<kind>:<version>).
REGISTRY = "localhost"


def _ask(*args: str) -> str:
    return subprocess.run([str(IMAGES_SH), *args], check=True, capture_output=True, text=True).stdout.strip()


@functools.cache
def cache_dir() -> Path:
    """images.sh's output folder ($DISTILLERY_CACHE/images, by default ~/.cache/distillery/images)."""
    return Path(_ask("--dir"))


@functools.cache
def path(kind: str) -> Path:
    """The OCI archive `kind`'s current inputs give, built or not."""
    if kind not in KINDS:
        raise ValueError(f"unknown image kind {kind!r}; kinds are {', '.join(KINDS)}")
    return Path(_ask("--path", kind))


def ref(kind: str) -> str:
    """Its reference in the local containers-storage (podman run)."""
    return _ask("--ref", kind)


def archive(kind: str) -> Path:
    """The built archive of `kind`; fails the test, naming the command that builds it, when it is not built."""
    tar = path(kind)
    if not tar.is_file() or not tar.with_suffix(".digest").is_file():
        message = f"the {kind} image is not built for these inputs ({tar}): run scripts/images.sh {kind}"
        pytest.fail(message, pytrace=False)
    return tar


def digest(kind: str) -> str:
    """The manifest digest of `kind`'s archive (sha256:…), which `ctr images import` keeps."""
    return archive(kind).with_suffix(".digest").read_text().strip()


def built(kinds: tuple[str, ...] = ("cpu", "ray")) -> list[Path]:
    """The archives among `kinds` built for the current inputs (a stale archive of older inputs is not one)."""
    return [path(k) for k in kinds if path(k).is_file() and path(k).with_suffix(".digest").is_file()]


def pinned(kinds: tuple[str, ...] = ("cpu", "ray")) -> Images:
    """The image settings that make rendered templates run exactly these archives (fails if one is not built)."""
    return Images(REGISTRY, VERSION, {k: digest(k) for k in kinds})
