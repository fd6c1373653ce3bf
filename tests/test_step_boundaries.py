"""What two steps share is written once, in a shared module named for what it is (the import rules between the groups
are tests/test_layout.py's)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from steps.core import mlflow_client

STEPS = Path(__file__).resolve().parent.parent / "steps"


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
    """Every `k=v,…` flag is read by `cli.number_table`: no other module of steps/ splits on "=" itself."""
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
    assert splitters == ["cli.py"]
