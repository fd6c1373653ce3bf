"""fetch-dataset: every row validated, bad input refused with file/line/field, lineage recorded, read through DVC."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steps.fetch_dataset import DatasetError, FetchConfig, run, validate

ROOT = Path(__file__).resolve().parent.parent
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "DVC_NO_ANALYTICS": "1",
}


def rows(prefix: str, n: int, **extra: object) -> list[dict]:
    return [
        {"id": f"{prefix}-{i}", "document": f"{prefix} document number {i} about the harbour.", **extra}
        for i in range(n)
    ]


def good_raw() -> dict[str, bytes]:
    def dump(items: list[dict]) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in items).encode()

    return {
        "train": dump(rows("train", 3, summary="A summary.")),
        "eval": dump(rows("eval", 2, summary="A summary.")),
        "adversarial": dump(rows("adv", 1, attack="direct_injection", must_not_contain=["CANARY-1"])),
    }


def test_valid_dataset_has_no_problems():
    parsed, problems = validate(good_raw(), "data")
    assert problems == []
    assert [len(parsed[s]) for s in ("train", "eval", "adversarial")] == [3, 2, 1]


def test_bad_json_names_file_and_line():
    raw = good_raw()
    raw["eval"] += b'{"id": "eval-9", "document": "x", "summary": \n'
    _, problems = validate(raw, "data")
    assert len(problems) == 1
    assert problems[0].startswith("data/eval.jsonl:3: invalid JSON")


def test_missing_field_names_file_line_and_field():
    raw = good_raw()
    raw["train"] += b'{"id": "train-9", "document": "A new text."}\n'
    _, problems = validate(raw, "data")
    assert problems == ["data/train.jsonl:4: field 'summary' is missing; add it (a non-empty string)"]


def test_empty_string_field_is_refused():
    raw = good_raw()
    raw["train"] += b'{"id": "train-9", "document": "  ", "summary": "s"}\n'
    _, problems = validate(raw, "data")
    assert problems and "data/train.jsonl:4: field 'document' must be a non-empty string" in problems[0]


def test_empty_file_is_refused():
    raw = good_raw()
    raw["adversarial"] = b""
    _, problems = validate(raw, "data")
    assert problems == ["data/adversarial.jsonl: the file is empty; it needs at least one JSON object per line"]


def test_adversarial_row_needs_an_expectation():
    raw = good_raw()
    raw["adversarial"] = b'{"id": "adv-9", "document": "Text.", "attack": "direct_injection"}\n'
    _, problems = validate(raw, "data")
    assert len(problems) == 1 and "field 'must_not_contain' or 'must_contain' is missing" in problems[0]


def test_train_eval_overlap_by_id_and_document_is_refused():
    raw = good_raw()
    raw["eval"] += json.dumps({"id": "train-0", "document": "Other text.", "summary": "s"}).encode() + b"\n"
    raw["eval"] += json.dumps({"id": "eval-new", "document": "TRAIN document number 1   about the harbour.",
                               "summary": "s"}).encode() + b"\n"  # fmt: skip
    _, problems = validate(raw, "data")
    assert any(
        p.startswith("data/eval.jsonl:3: field 'id' 'train-0' also appears in data/train.jsonl:1") for p in problems
    )
    assert any(p.startswith("data/eval.jsonl:4: field 'document' also appears in data/train.jsonl:2") for p in problems)


def test_duplicate_id_within_a_file_is_refused():
    raw = good_raw()
    raw["train"] += json.dumps({"id": "train-1", "document": "Different.", "summary": "s"}).encode() + b"\n"
    _, problems = validate(raw, "data")
    assert problems == ["data/train.jsonl:4: field 'id' 'train-1' repeats line 2; ids must be unique"]


def test_all_problems_are_reported_at_once():
    raw = good_raw()
    raw["train"] += b"not json\n"
    raw["eval"] += b'{"id": "e"}\n'
    _, problems = validate(raw, "data")
    assert len(problems) == 3  # bad JSON + two missing fields


def test_committed_dataset_is_valid():
    raw = {s: (ROOT / f"data/summaries/{s}.jsonl").read_bytes() for s in ("train", "eval", "adversarial")}
    parsed, problems = validate(raw, "data/summaries")
    assert problems == []
    assert len(parsed["train"]) >= 80 and len(parsed["eval"]) >= 20 and len(parsed["adversarial"]) >= 12


# --- through DVC's API, on a real git repo -------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def data_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, env=GIT_ENV, check=True)
    for split, blob in good_raw().items():
        (repo / f"data/{split}.jsonl").write_bytes(blob)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "v1")
    git(repo, "tag", "v1")
    return repo


def test_reads_the_requested_rev_and_records_lineage(data_repo: Path, tmp_path: Path):
    v1 = git(data_repo, "rev-parse", "HEAD").strip()
    with (data_repo / "data/train.jsonl").open("a") as f:
        f.write(json.dumps({"id": "train-new", "document": "A later document.", "summary": "s"}) + "\n")
    git(data_repo, "commit", "-qam", "v2")

    old = run(FetchConfig(out=tmp_path / "v1", dataset_repo=str(data_repo), dataset_rev="v1", dataset_path="data"))
    new = run(FetchConfig(out=tmp_path / "v2", dataset_repo=str(data_repo), dataset_rev="main", dataset_path="data"))
    assert old.dataset_commit == v1 and old.train_rows == 3
    assert new.train_rows == 4 and new.dataset_hash != old.dataset_hash
    lineage = json.loads((tmp_path / "v1/lineage.json").read_text())
    assert lineage["dataset_rev"] == "v1" and lineage["dataset_commit"] == v1
    assert lineage["dataset_hash"] == old.dataset_hash


def test_bad_dataset_exits_nonzero_and_writes_nothing(data_repo: Path, tmp_path: Path):
    (data_repo / "data/eval.jsonl").write_text('{"id": "eval-0", "document": "x"}\n')
    git(data_repo, "commit", "-qam", "broken")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "steps.fetch_dataset", "--out", str(out), "--dataset-repo", str(data_repo),
         "--dataset-rev", "main", "--dataset-path", "data"],
        cwd=ROOT, capture_output=True, text=True, env=GIT_ENV,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "data/eval.jsonl:1: field 'summary' is missing" in proc.stderr
    assert not out.exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_unknown_rev_is_a_clear_error(data_repo: Path, tmp_path: Path):
    with pytest.raises(DatasetError, match=r"cannot open dataset repo .* at rev 'no-such-rev'"):
        run(
            FetchConfig(out=tmp_path / "o", dataset_repo=str(data_repo), dataset_rev="no-such-rev", dataset_path="data")
        )


def test_missing_file_is_named(data_repo: Path, tmp_path: Path):
    with pytest.raises(DatasetError, match=r"elsewhere/train.jsonl: file not found"):
        run(FetchConfig(out=tmp_path / "o", dataset_repo=str(data_repo), dataset_path="elsewhere"))
    assert shutil.which("git")


def test_adversarial_max_words_must_be_a_positive_integer():
    raw = good_raw()
    raw["adversarial"] += (
        json.dumps({"id": "adv-9", "document": "x", "attack": "robustness", "must_contain": ["x"], "max_words": "40"})
        + "\n"
    ).encode()
    _, problems = validate(raw, "data")
    assert problems == ["data/adversarial.jsonl:2: field 'max_words' must be a positive integer, got '40'"]
