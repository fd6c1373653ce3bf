"""Bad settings are refused before any work, naming the setting: a base-model folder that is not there is said as
such by every step that loads the base (not the hub client's "Repo id must be in the form …" traceback), and the
numeric settings' ranges are each step's `config_problems`, asked by the step itself and by check-parameters."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from steps import adversarial_suite, ingest, kd_targets, preflight, teacher, train
from steps import convert_gguf as convert
from steps.core.base_model import folder_problem
from tests.conftest import ROOT

MISSING = ".cache/models/No-Such-Model"  # the default's shape: a relative folder, three parts deep


def test_a_missing_folder_is_named_with_where_it_was_looked_for_and_the_fix(tmp_path: Path):
    problem = folder_problem(MISSING, tmp_path)
    assert problem is not None
    assert problem.startswith(f"no such folder ({tmp_path / MISSING})")
    assert f"python scripts/prepare_base_model.py --out {MISSING}" in problem


def test_a_folder_that_is_not_a_model_and_a_file_are_refused(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"\0")
    assert "holds no config.json: not a model" in (folder_problem("empty", tmp_path) or "")
    assert "is a file, not a model's folder" in (folder_problem("weights.bin", tmp_path) or "")


def test_a_model_folder_and_a_hub_id_pass(tmp_path: Path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model/config.json").write_text("{}")
    assert folder_problem("model", tmp_path) is None
    assert folder_problem(str(tmp_path / "model")) is None
    assert folder_problem("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path) is None  # left to the hub


def test_a_hub_shaped_name_under_a_folder_that_is_here_is_a_missing_folder(tmp_path: Path):
    """`models/smol` would pass the hub's repo-id rule, but with a `models/` folder here it is a folder not there."""
    (tmp_path / "models").mkdir()
    assert (folder_problem("models/smol", tmp_path) or "").startswith("no such folder")


def _step_mains(tmp_path: Path) -> dict:
    """Each step that loads the base, as its command line with a base-model folder that is not there."""
    data, out = str(tmp_path / "dataset"), str(tmp_path / "out")
    base = ["--base-model", MISSING]
    return {
        "preflight": (preflight.main, ["--out", out, *base]),
        "ingest": (ingest.main, ["--out", out, "--documents", str(ROOT / "data/documents"), *base]),
        "train": (train.main, ["--dataset", data, "--out", out, *base]),
        "kd-targets": (kd_targets.main, ["--dataset", data, "--out", out, *base]),
        "convert-gguf": (convert.main, ["--adapter", data, "--dataset", data, "--out", out, *base]),
    }


@pytest.mark.parametrize("step", ["preflight", "ingest", "train", "kd-targets", "convert-gguf"])
def test_every_step_that_loads_the_base_says_no_such_folder(
    step: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(ROOT)  # the steps' relative defaults (data/teachers.yaml) are the repository's
    main, argv = _step_mains(tmp_path)[step]
    assert main(argv) == 1
    err = capsys.readouterr().err
    # The step names the folder resolved (a worktree's .cache may be a link to another checkout's).
    assert f"--base-model {MISSING}: no such folder ({(ROOT / MISSING).resolve()})" in err, err
    assert "Repo id" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], r"--batch-size 0: needs at least 1"),
        (["--epochs", "-1"], r"--epochs -1.0: use more than 0 passes"),
        (["--lora-r", "0"], r"--lora-r 0: needs at least 1"),
        (["--gradient-checkpointing", "sometimes"], r"--gradient-checkpointing 'sometimes' is not one of auto"),
        (["--price-table", "cpu=free"], r"--price-table 'cpu=free'"),
    ],
)
def test_preflight_refuses_its_sizing_settings_out_of_range_before_reading_the_base(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
):
    """The same ranges train refuses (sizing.knob_problems), named, and with the base's folder also missing: every
    problem at once."""
    assert preflight.main(["--out", str(tmp_path / "pf"), "--base-model", MISSING, *argv]) == 1
    err = capsys.readouterr().err
    assert re.search(message, err) and "no such folder" in err, err


def test_train_and_preflight_refuse_a_sizing_setting_with_the_same_words():
    """One rule: the sizing settings' ranges are sizing.knob_problems, which both configs ask."""
    bad = {"batch_size": 0, "micro_batch": -2, "epochs": 0.0, "lora_r": 0, "max_seq_len": 0}
    from_train = train.config_problems(train.TrainConfig(dataset="d", out="o", **bad))
    from_preflight = preflight.config_problems(preflight.PreflightConfig(out=Path("o"), **bad))
    assert set(from_preflight) <= set(from_train) and len(from_preflight) == len(bad)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_eos_rate_drop": 1.5}, r"--max-eos-rate-drop 1.5: a difference of rates"),
        ({"merge_tolerance": 0.0}, r"--merge-tolerance 0.0: .* use more than 0"),
        ({"parity_tokens": 0}, r"--parity-tokens 0: use at least 1"),
    ],
)
def test_convert_gguf_refuses_its_parity_settings_out_of_range(changes: dict, message: str, tmp_path: Path):
    cfg = convert.ConvertConfig(adapter=tmp_path, dataset=tmp_path, out=tmp_path / "o", **changes)
    assert any(re.search(message, p) for p in convert.config_problems(cfg))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"per_family": -1}, r"--per-family -1: use 0"),
        ({"margin": 0.0}, r"--margin 0.0: use a value between 0 and 1"),
        ({"alpha": 0.7}, r"--alpha 0.7: use a value between 0 and 0.5"),
        ({"power": 1.0}, r"--power 1.0: use a value between 0 and 1"),
        ({"rivals": 0}, r"--rivals 0: use at least 1"),
    ],
)
def test_the_adversarial_suite_refuses_its_power_settings_out_of_range(
    changes: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture
):
    out = tmp_path / "adversarial.jsonl"
    argv = ["--out", str(out), *(a for k, v in changes.items() for a in (f"--{k.replace('_', '-')}", str(v)))]
    assert adversarial_suite.main(argv) == 1
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()


def test_the_teacher_refuses_negative_threads_before_any_request(tmp_path: Path, capsys: pytest.CaptureFixture):
    (tmp_path / "chunks").mkdir()
    (tmp_path / "chunks/documents.jsonl").write_text(json.dumps({"document_sha256": "x"}) + "\n")
    argv = ["--chunks", str(tmp_path / "chunks"), "--curated", str(tmp_path), "--out", str(tmp_path / "t")]
    assert teacher.main([*argv, "--threads", "-1"]) == 1
    assert "--threads -1: use 0" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
