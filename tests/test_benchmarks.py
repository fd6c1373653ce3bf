"""The benchmarks run from the repository root as modules (`python -m benchmarks.<name>`), importing `steps` and
`tests.tiny` as packages: none edits `sys.path`, and each docstring's command line says so."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")


def test_the_benchmarks_are_found():
    assert {p.stem for p in BENCHMARKS} >= {"train_throughput", "gpu_train", "convert_overhead", "evaluate_speed"}


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_leaves_sys_path_alone(path):
    tree = ast.parse(path.read_text())
    touches = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys"
    ]
    assert not touches, f"{path.name}:{touches}: import from the root as a package (python -m benchmarks.{path.stem})"


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmarks_command_lines_run_it_as_a_module(path):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    commands = [line.strip() for line in doc.splitlines() if line.strip().startswith("python ")]
    assert commands and all(c.startswith(f"python -m benchmarks.{path.stem} ") for c in commands), commands


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_starts_as_a_module_from_the_root(path):
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{path.stem}", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
