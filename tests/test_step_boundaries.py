"""Steps do not reach into each other: what two steps share lives in a shared module named for what it is
(steps/mlflow_client.py, steps/dataset.py, steps/common.py, steps/pipeline.py), never in one of the two steps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from steps import mlflow_client

STEPS = Path(__file__).resolve().parent.parent / "steps"


def _is_step(path: Path) -> bool:
    """A step is a module with its own command line (`main`), or a package whose `__init__.py` has it."""
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)


def _files(step: str) -> list[Path]:
    """The source files of step `step`: steps/<step>.py, or every file of the package steps/<step>/."""
    package = STEPS / step
    return sorted(package.rglob("*.py")) if package.is_dir() else [STEPS / f"{step}.py"]


STEP_MODULES = sorted(
    [p.stem for p in STEPS.glob("*.py") if _is_step(p)]
    + [p.parent.name for p in STEPS.glob("*/__init__.py") if _is_step(p)]
)


def _imported_step_modules(path: Path) -> set[str]:
    """Every steps.* module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "steps":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("steps."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("steps.")}
    return found


def test_the_steps_are_found():
    assert {"fetch_dataset", "train", "evaluate", "register", "check_triggers"} <= set(STEP_MODULES)


@pytest.mark.parametrize("module", STEP_MODULES)
def test_a_step_imports_no_other_step(module: str):
    imported = set().union(*(_imported_step_modules(path) for path in _files(module)))
    others = imported & (set(STEP_MODULES) - {module})
    assert not others, f"steps/{module} imports step(s) {sorted(others)}: move what they share to a shared module"


def test_the_tracking_uri_given_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://from-env:5000")
    assert mlflow_client.tracking_uri("http://given:5000") == "http://given:5000"
    assert mlflow_client.tracking_uri("") == "http://from-env:5000"


def test_no_tracking_uri_is_empty_for_the_caller_to_judge(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert mlflow_client.tracking_uri("") == ""


def test_the_tracking_uri_fallback_is_written_once():
    """MLFLOW_TRACKING_URI is read in mlflow_client only; every step asks `mlflow_client.tracking_uri`."""
    readers = [p.name for p in STEPS.rglob("*.py") if 'environ.get("MLFLOW_TRACKING_URI"' in p.read_text()]
    assert readers == ["mlflow_client.py"]


def test_the_name_number_table_parser_is_written_once():
    """Every `k=v,…` flag is read by `common.number_table`: no other module of steps/ splits on "=" itself."""
    splitters = []
    for path in sorted(STEPS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("split", "partition")
                and any(isinstance(a, ast.Constant) and a.value == "=" for a in node.args)
            ):
                splitters.append(path.name)
    assert splitters == ["common.py"]
