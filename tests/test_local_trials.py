"""The two local trials a newcomer runs after the embedded pipeline: a dataset built from their own folder
(scripts/build_dataset.sh → scripts/build_dataset.py) and the serving loop on a copy of the local registry
(scripts/try_promotion.sh → scripts/try_promotion.py). Settings and refusals (unit tier); each trial run end to end
against the real teacher server, MLflow store and llama.cpp server (integration tier).

pytest tests/test_local_trials.py                     # unit tier
pytest -m integration tests/test_local_trials.py      # the trials themselves (~2-3 min on 2 cores)
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import build_dataset
from steps import register
from steps.core.io import read_jsonl, write_jsonl
from steps.pipeline import BUILD_DATASET
from tests.conftest import ROOT
from tests.test_build_dataset import TEXTS, fb, gist, steer
from tests.test_registry import pipeline_outputs, reg_config

integration = pytest.mark.integration


def test_the_build_takes_every_parameter_but_documents_from_dash_s_and_names_a_bad_one(tmp_path: Path):
    found = build_dataset.values([str(tmp_path)], ["eval-share=0.3"])
    assert found["documents"] == str(tmp_path) and found["eval-share"] == "0.3"
    assert found["feedback"] == ""  # the committed feedback describes the sample documents, not yours
    assert set(found) == {p.name for p in BUILD_DATASET.params}
    with pytest.raises(SystemExit, match=r"-S eval_share=0.3: use NAME=VALUE with NAME one of .*min-eval-documents"):
        build_dataset.values([str(tmp_path)], ["eval_share=0.3"])
    with pytest.raises(SystemExit, match=r"nowhere: not a folder"):
        build_dataset.values(["nowhere"], [])


def test_the_smallest_build_it_accepts_is_said_before_it_starts(tmp_path: Path):
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    (tmp_path / "b.txt").write_text("x")
    said = build_dataset.preamble([str(tmp_path)], build_dataset.values([str(tmp_path)], ["min-eval-documents=2"]))
    assert f"{tmp_path}: 2 file(s) (pdf 1, text 1)" in said[0]
    assert any("at least 2 (min-eval-documents) with a summary that may be an eval reference: a reviewed one, from "
               "feedback (eval-references=curated); a build needs 3 or more usable documents" in line
               for line in said)  # fmt: skip


# What `dvc repro` / `dvc exp run -S` would have changed or left behind: none of it may change.
GENERATED = ("params.yaml", "dvc.yaml", "dvc.lock", "build-dataset")


def git_status() -> str:
    argv = ["git", "status", "--porcelain", "--untracked-files=all", "--", *GENERATED]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True).stdout


def reviewed(path: Path, texts: list[str]) -> Path:
    """A feedback file with a reviewer's accepted summary of each of `texts`."""
    rows = [fb(f"r{i}", t, "accepted", "2026-12-01T09:00:00+00:00", summary=gist(t)) for i, t in enumerate(texts)]
    write_jsonl(path, rows)
    return path


def build(docs: Path, out: Path, *settings: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "scripts/build_dataset.py", str(docs), *settings, "--out", str(out)]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)


@integration
def test_a_dataset_is_built_from_your_own_folder_without_editing_a_tracked_file(tmp_path: Path, base_model_dir: Path):
    docs = tmp_path / "my documents"
    docs.mkdir()
    texts = [steer(text, "train").decode() for text in TEXTS[:3]]  # three documents the hash puts in train
    for i, text in enumerate(texts):
        (docs / f"note-{i}.txt").write_text(text)
    settings = ["-S", f"dataset-repo={tmp_path / 'repo'}", "-S", f"dvc-remote={tmp_path / 'remote'}",
                "-S", f"base-model={base_model_dir}"]  # fmt: skip
    before = git_status()

    # No reviewed summary: nothing may be an eval reference, and the refusal names both ways on.
    refused = build(docs, tmp_path / "out-0", *settings)
    assert refused.returncode != 0
    assert "0 document(s) can be eval references (eval-references=curated)" in refused.stderr
    assert "-S feedback=FILE" in refused.stderr and "-S eval-references=curated-or-teacher" in refused.stderr
    assert "the filter-split stage failed" in refused.stderr and "nothing was published" in refused.stderr

    feedback = reviewed(tmp_path / "reviewed.jsonl", texts[:2])
    done = build(docs, tmp_path / "out", *settings, "-S", f"feedback={feedback}")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.index("a build needs 2 or more usable documents") < out.index("$ python -m steps.ingest")
    evaluation = read_jsonl(tmp_path / "out/examples/eval.jsonl")
    assert evaluation and {r["lineage"]["summary_by"] for r in evaluation} == {"feedback"}  # the minimum, reviewed
    rev = json.loads((tmp_path / "out/published/result.json").read_text())["dataset_rev"]
    assert f"scripts/run_local.sh -S dataset-repo={tmp_path / 'repo'} -S dataset-rev={rev}" in out
    assert git_status() == before  # params.yaml, dvc.yaml, the lock files: all as they were

    one = tmp_path / "one"
    one.mkdir()
    (one / "note.txt").write_text(texts[0])
    refused = build(
        one, tmp_path / "out-one", *settings, "-S", f"feedback={reviewed(tmp_path / 'one.jsonl', texts[:1])}"
    )
    assert refused.returncode != 0
    assert "all are held out for eval" in refused.stderr and "-S min-eval-documents=1), none is left" in refused.stderr


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@integration
def test_the_promotion_trial_walks_the_loop_on_a_copy_and_ends_clean(tiny_gguf: Path, tmp_path: Path):
    from mlflow import MlflowClient

    store = tmp_path / "checkout/.cache/mlflow"
    store.mkdir(parents=True)
    uri = f"sqlite:///{store}/mlflow.db"
    outputs = pipeline_outputs(tmp_path / "run", tiny_gguf)
    name = "trial-summariser"
    register.run(reg_config(outputs, tmp_path / "run/registration", uri, name, "wf-trial",
                            artifact_location=str(store / "artifacts")))  # fmt: skip
    before = sorted(p.relative_to(store) for p in store.rglob("*"))

    done = subprocess.run([sys.executable, "scripts/try_promotion.py", "--tracking-uri", uri, "--model-name", name,
                           "--requests", "2"], cwd=ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for expected in ("a simulated week: 32 records", ": held (champion", ": promoted (champion",
                     ": rolled-back (champion", "aliases: {'champion': '2'}"):  # fmt: skip
        assert expected in out, expected
    # Ends clean: the servers are gone, the trial's folder removed, and the registry it copied untouched.
    work = Path(re.search(r"in (/\S+distillery-promotion-trial-\S+)", out).group(1))
    assert not work.exists()
    for port in map(int, re.findall(r"--port (\d+)", out)):
        assert not listening(port)
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
    assert MlflowClient(uri).get_registered_model(name).aliases == {}
