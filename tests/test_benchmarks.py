"""The benchmarks run from the repository root as modules (`python -m benchmarks.<name>`), importing `steps` and
`tests.tiny` as packages: none edits `sys.path`, and each docstring's command line says so."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# A leading underscore: code the benchmarks share (benchmarks/_train_child.py), no benchmark of its own.
BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def test_the_benchmarks_are_found():
    assert {p.stem for p in BENCHMARKS} >= {
        "train_throughput",
        "gpu_train",
        "convert_overhead",
        "evaluate_speed",
        "pipeline_speed",
        "targets",
    }


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
    module = f"python -m benchmarks.{path.stem}"
    assert commands and all(c == module or c.startswith(f"{module} ") for c in commands), commands


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_starts_as_a_module_from_the_root(path):
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{path.stem}", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _pipeline_run(stages: dict[str, float], decision: str = "pass") -> dict:
    return {"wall": stages, "own": {k: v - 5 for k, v in stages.items()}, "total": sum(stages.values()),
            "decision": decision}  # fmt: skip


def test_the_targets_report_reads_what_the_benchmarks_write():
    from benchmarks import pipeline_speed, targets

    runs = {
        "now": [_pipeline_run({"train": 300, "evaluate": 270}), _pipeline_run({"train": 320, "evaluate": 250})],
        "after": [_pipeline_run({"train": 100, "evaluate": 50}), _pipeline_run({"train": 110, "evaluate": 70})],
    }
    pipeline = pipeline_speed.summarise(runs, {"now": "a" * 40, "after": "b" * 40}, 2)
    assert [r["stage"] for r in pipeline["table"]] == ["train", "evaluate", "pipeline"]
    assert pipeline["table"][-1]["now_s"] == 570 and pipeline["table"][-1]["after_s"] == 165
    rows = {
        r["what"].split(",")[0]: r
        for r in targets.report({
            "pipeline": pipeline,
            "convert": {"ratio_now_over_direct": 11.4, "ratio_ours_over_direct": 1.9},
            "train": {"ours_vs_hf": 1.3},
            "ray": None,
        })
    }  # fmt: skip
    assert rows["embedded pipeline after set-up"]["verdict"] == "met"  # 165 <= 230
    assert rows["evaluate"]["now"] == 260 and rows["evaluate"]["after"] == 60 and rows["evaluate"]["verdict"] == "met"
    assert rows["convert-gguf vs llama.cpp converter + quantiser"]["verdict"] == "met"
    assert rows["CPU training loop vs HF Trainer + PEFT"]["verdict"] == "not met"  # higher is better: 1.3 < 2
    assert rows["Ray 2 workers x 1 thread vs 1 x 1 (scaling efficiency)"]["verdict"] == "not measured"
    assert rows["gpu launcher"]["verdict"] == "not measured"


def test_the_keys_the_targets_report_reads_are_the_ones_the_benchmarks_write():
    sources = {p.stem: p.read_text() for p in BENCHMARKS}
    assert 'f"ratio_{side}_over_direct"' in sources["convert_overhead"]
    assert '("ours", "ours-cached", "now")' in sources["convert_overhead"]
    assert 'summary["ours_vs_hf"]' in sources["train_throughput"]
    assert 'summary["ray_scaling_efficiency_2x1_vs_1x1"]' in sources["train_throughput"]
    assert '"mfu": statistics.median' in sources["gpu_train"]
    for name in ("convert_overhead", "train_throughput", "gpu_train", "pipeline_speed"):
        assert '"--json"' in sources[name], name


def test_the_paths_sweep_runs_only_what_is_missing(tmp_path, monkeypatch):
    """benchmarks.evaluate_paths --every-shard K: each shard, contender and path once, the runs already written in
    --out skipped, so an interrupted sweep resumes where it stopped."""
    import argparse

    from benchmarks import evaluate_paths

    (tmp_path / "base-batched-0-2.json").write_text("{}")
    (tmp_path / "candidate-served-1-2.json").write_text("{}")
    made: list[tuple[str, str, str]] = []
    monkeypatch.setattr(evaluate_paths, "generate", lambda a: made.append((a.shard, a.contender, a.path)))
    evaluate_paths.sweep(argparse.Namespace(out=tmp_path, every_shard=2, shard="0/16", contender="x", path="y"))
    assert made == [
        ("0/2", "base", "served"), ("0/2", "candidate", "batched"), ("0/2", "candidate", "served"),
        ("1/2", "base", "batched"), ("1/2", "base", "served"), ("1/2", "candidate", "batched"),
    ]  # fmt: skip


def test_the_gpu_plan_check_reads_the_runs_speed_from_what_train_wrote(tmp_path):
    from benchmarks.gpu_train import train_speed

    assert train_speed(tmp_path) == {}
    (tmp_path / "result.json").write_text(json.dumps({"tokens_per_second": 2586.4}))
    (tmp_path / "loss.csv").write_text("step,loss,lr,seconds\n1,2.0,1e-4,9.00\n2,1.9,1e-4,11.50\n3,1.8,1e-4,14.00\n")
    assert train_speed(tmp_path) == {"tokens_per_second": 2586.4, "seconds_per_step": 2.5}
