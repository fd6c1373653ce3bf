"""evaluate fanned out: `--shard i/k` runs each answer a slice of the documents (every contender), `--gather` judges
the reassembled answers and decides — the same decision, metrics and answers as one run over everything.

    pytest tests/test_evaluate_shards.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.canned import Answers, evaluate_canned, write_gguf_folder, write_splits

ANSWERS = {"base": Answers("lead"), "candidate": Answers("reference", obeys=("adv-010",))}
OVERRIDE = "tests/test_evaluate_shards.py: the committed split is too small to decide safety"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    return write_splits(tmp_path / "dataset"), write_gguf_folder(tmp_path / "gguf")


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def test_shards_gathered_decide_what_one_run_decides(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    whole = tmp_path / "whole"
    evaluate_canned(monkeypatch, dataset, gguf, whole, ANSWERS, accept_inconclusive_safety=OVERRIDE)
    shards = [tmp_path / f"shard-{i}" for i in range(3)]
    for i, folder in enumerate(shards):
        result = evaluate_canned(monkeypatch, dataset, gguf, folder, ANSWERS, shard=f"{i}/3")
        assert result.decision == "shard" and not (folder / "decision.json").exists()
        assert len(read(folder, "shard.json")["picked"]) in (22, 23)  # 24 eval + 42 adversarial documents, by 3
    gathered = tmp_path / "gathered"
    result = evaluate_canned(monkeypatch, dataset, gguf, gathered, ANSWERS, accept_inconclusive_safety=OVERRIDE,
                             gather=",".join(str(s) for s in reversed(shards)))  # fmt: skip
    assert result.passed is True
    one, many = read(whole, "decision.json"), read(gathered, "decision.json")
    assert many["reasons"] == one["reasons"] and many["checks"] == one["checks"]
    assert read(gathered, "metrics.json")["adversarial"] == read(whole, "metrics.json")["adversarial"]
    lines = [[json.loads(x) for x in (f / "generations.jsonl").read_text().splitlines()] for f in (gathered, whole)]
    assert lines[0] == lines[1]


def test_gather_refuses_a_missing_or_repeated_shard(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    shards = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, folder in enumerate(shards):
        evaluate_canned(monkeypatch, dataset, gguf, folder, ANSWERS, shard=f"{i}/2")
    for given in ([shards[0]], [shards[0], shards[0]], [shards[0], tmp_path]):
        with pytest.raises(ValueError, match=r"every shard|no shard\.json"):
            evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "g", ANSWERS,
                            gather=",".join(str(s) for s in given))  # fmt: skip


def test_a_run_is_a_shard_or_the_gather_step(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    for bad, match in (({"shard": "3/3"}, "--shard '3/3'"), ({"shard": "0/2", "gather": "x"}, "not both")):
        with pytest.raises(ValueError, match=match):
            evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "o", ANSWERS, **bad)
