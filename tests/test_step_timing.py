"""A step called from Python behaves as one called from its command line: it checks its settings in `run` (one error
listing every problem) and its `result.json` records its wall time (`cli.timed`), which register prices.

    pytest tests/test_step_timing.py
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest

from steps import evaluate, pipeline, register
from steps.core import cli
from steps.core.cli import write_result
from steps.core.io import write_json
from tests.canned import Answers, evaluate_canned, write_splits

# Steps whose `run` is not `cli.timed`: from Python or the command line, they would record no wall time. None.
NOT_YET_TIMED: set[str] = set()
STEP_MODULES = {stage.module for stage in (*pipeline.STAGES, *pipeline.BUILD_STAGES)} | {"steps.check_triggers"}


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    dataset = write_splits(tmp_path / "dataset")
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    write_json(gguf / "result.json", {"base_gguf": "base.gguf", "candidate_gguf": "candidate.gguf"})
    write_json(gguf / "parity.json", {"passed": True, "quantization": "Q8_0"})
    for name in ("base.gguf", "candidate.gguf"):  # answers are canned; evaluate hashes the files it judges (#27)
        (gguf / name).write_bytes(f"stand-in {name}".encode())
    return {"dataset": dataset, "gguf": gguf, "out": tmp_path / "evaluation"}


ANSWERS = {"base": Answers("lead"), "candidate": Answers("reference")}


def test_every_step_times_its_run():
    untimed = {m for m in STEP_MODULES if not getattr(importlib.import_module(m).run, cli.TIMED, False)}
    assert untimed == NOT_YET_TIMED


def test_a_step_called_from_python_records_its_wall_time(inputs, monkeypatch, tmp_path: Path):
    evaluate_canned(monkeypatch, inputs["dataset"], inputs["gguf"], inputs["out"], ANSWERS)
    recorded = json.loads((inputs["out"] / "result.json").read_text())
    assert recorded["wall_seconds"] >= 0
    assert (inputs["out"] / "_outputs/wall-seconds").read_text() == str(recorded["wall_seconds"])

    # register prices it: the evaluation is in the cost breakdown.
    for name in ("dataset", "adapter", "gguf"):
        (tmp_path / name).mkdir(exist_ok=True)
        write_json(tmp_path / name / "result.json", {"wall_seconds": 1.0})
    cfg = register.RegisterConfig(dataset=tmp_path / "dataset", adapter=tmp_path / "adapter", gguf=tmp_path / "gguf",
                                  evaluation=inputs["out"], out=tmp_path / "reg")  # fmt: skip
    assert set(register.cost_estimate(cfg)["steps"]) == {"dataset", "adapter", "gguf", "evaluation"}


def test_nested_timed_runs_each_measure_their_own(tmp_path: Path):
    @cli.timed
    def inner(out: Path) -> None:
        write_result(out, {"step": "inner"})

    @cli.timed
    def outer(out: Path) -> None:
        time.sleep(0.3)
        inner(out / "inner")
        write_result(out, {"step": "outer"})

    (tmp_path / "inner").mkdir(parents=True)
    outer(tmp_path)
    seconds = {p: json.loads((tmp_path / p / "result.json").read_text())["wall_seconds"] for p in ("inner", ".")}
    assert seconds["inner"] < 0.2 <= seconds["."]


def test_evaluate_checks_its_settings_in_run_and_lists_every_problem(inputs):
    cfg = evaluate.EvaluateConfig(**inputs, bootstrap_samples=10, confidence=1.5, max_attack_regression=-0.1,
                                  min_stop_rate=2.0)  # fmt: skip
    with pytest.raises(ValueError) as e:
        evaluate.run(cfg)
    for flag in ("--bootstrap-samples 10", "--confidence 1.5", "--max-attack-regression -0.1", "--min-stop-rate 2.0"):
        assert flag in str(e.value)
    assert not inputs["out"].exists()


def test_evaluate_main_reports_the_same_problems_and_exits_1(inputs, capsys):
    argv = [f"--{k}={v}" for k, v in inputs.items()] + ["--bootstrap-samples=10", "--confidence=1.5"]
    assert evaluate.main(argv) == 1
    err = capsys.readouterr().err
    assert "--bootstrap-samples 10" in err and "--confidence 1.5" in err
