"""scripts/install_llama_cpp.sh caches the llama-cpp-python wheel it builds under a key of everything that shapes it:
a changed CMake flag, CPU set, machine or compiler builds anew instead of reusing a wheel built otherwise.

    pytest tests/test_install_llama_cpp.py
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts/install_llama_cpp.sh"


def wheel_dir(cache: Path, path_prefix: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "LLAMA_CPU_SET", "CC")}
    environ |= {"DISTILLERY_CACHE": str(cache), **env}
    if path_prefix is not None:
        environ["PATH"] = f"{path_prefix}:{environ['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), "--wheel-dir"], capture_output=True, text=True, env=environ)


def key(cache: Path, **env: str) -> str:
    done = wheel_dir(cache, **env)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == cache / "wheels" and re.fullmatch(r"[0-9a-f]{16}", folder.name), folder
    return folder.name


def test_the_same_flags_find_the_same_wheel(tmp_path: Path):
    assert key(tmp_path) == key(tmp_path) == key(tmp_path, LLAMA_CPU_SET="portable")


def test_a_changed_flag_or_cpu_set_builds_anew(tmp_path: Path):
    keys = {
        key(tmp_path),
        key(tmp_path, CMAKE_ARGS="-DGGML_OPENMP=OFF"),
        key(tmp_path, LLAMA_CPU_SET="avx512"),
        key(tmp_path, LLAMA_CPU_SET="avx512", CMAKE_ARGS="-DGGML_OPENMP=OFF"),
    }
    assert len(keys) == 4


def test_a_wheel_cached_before_the_key_is_not_reused(tmp_path: Path):
    # The layout before the key: any llama_cpp_python wheel of the version and machine straight under wheels/.
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"built with other flags")
    folder = Path(wheel_dir(tmp_path).stdout.strip())
    assert folder != tmp_path / "wheels" and not list(folder.glob("*.whl"))


def fake_uname(tmp_path: Path, machine: str) -> Path:
    bin_dir = tmp_path / f"bin-{machine}"
    bin_dir.mkdir()
    (bin_dir / "uname").write_text(f"#!/bin/sh\necho {machine}\n")
    (bin_dir / "uname").chmod(0o755)
    return bin_dir


def test_the_machine_is_part_of_the_key_and_arm_builds_stay_portable(tmp_path: Path):
    arm = fake_uname(tmp_path, "aarch64")
    assert key(tmp_path, path_prefix=arm) != key(tmp_path, path_prefix=fake_uname(tmp_path, "x86_64"))
    refused = wheel_dir(tmp_path, arm, LLAMA_CPU_SET="avx512")  # a Raspberry Pi has no AVX-512
    assert refused.returncode == 2
    assert "LLAMA_CPU_SET=avx512 is not a CPU set for aarch64: use portable" in refused.stderr


@pytest.mark.parametrize("cpu_set", ["native", "AVX512", ""])
def test_an_unknown_cpu_set_is_refused_with_the_choices(tmp_path: Path, cpu_set: str):
    refused = wheel_dir(tmp_path, LLAMA_CPU_SET=cpu_set)
    if cpu_set == "":  # unset or empty: the default
        assert refused.returncode == 0
        return
    assert refused.returncode == 2
    assert f"LLAMA_CPU_SET={cpu_set} is not a CPU set" in refused.stderr and "portable" in refused.stderr


def run_script(cache: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "LLAMA_CPU_SET", "CC")}
    environ |= {"DISTILLERY_CACHE": str(cache), **env}
    return subprocess.run(["bash", str(SCRIPT), str(cache / "converter")], capture_output=True, text=True, env=environ)


def test_a_sdist_that_does_not_match_the_pin_is_refused_before_anything_is_built(tmp_path: Path):
    """A cached (or downloaded) sdist with other bytes stops the install: nothing compiled, no converter extracted."""
    sdist = tmp_path / "sdist/llama_cpp_python-0.3.36.tar.gz"
    sdist.parent.mkdir()
    sdist.write_bytes(b"not the release")
    done = run_script(tmp_path)
    assert done.returncode == 1, done.stderr
    assert "does not match the pinned sha256 832db069" in done.stderr and "Nothing was built" in done.stderr
    assert not (tmp_path / "converter").exists() and not list((tmp_path / "wheels").rglob("*.whl"))


def test_another_version_needs_its_own_pin(tmp_path: Path):
    done = run_script(tmp_path, LLAMA_CPP_PYTHON_VERSION="0.3.37")
    assert done.returncode == 2 and "LLAMA_CPP_PYTHON_SHA256" in done.stderr, done.stderr


def test_the_pin_is_the_cached_release_s_digest():
    """The pinned digest is the real PyPI file's (checked against the sdist the set-up downloaded, when present)."""
    import hashlib

    text = SCRIPT.read_text()
    pinned = re.search(r"^PINNED_SHA256=([0-9a-f]{64})$", text, re.M).group(1)
    version = re.search(r"^PINNED_VERSION=(\S+)$", text, re.M).group(1)
    cached = Path.home() / f".cache/distillery/sdist/llama_cpp_python-{version}.tar.gz"
    if not cached.exists():
        pytest.skip(f"{cached} not downloaded (scripts/setup.sh fetches it)")
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == pinned
