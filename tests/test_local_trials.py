"""The two local trials a newcomer runs after the embedded pipeline: a dataset built from their own folder
(scripts/build_dataset.sh → scripts/build_dataset.py) and the serving loop on a copy of the local registry
(scripts/try_promotion.sh → scripts/try_promotion.py). Settings and refusals here (unit tier); each trial is run end to
end as README.md's commands by the walk (tests/test_doc_commands.py), which checks what these two print and leave.

pytest tests/test_local_trials.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import build_dataset
from steps.core.dataset import summary_token_budget
from steps.core.io import write_jsonl
from steps.pipeline import BUILD_DATASET


def test_the_build_takes_every_parameter_but_documents_from_dash_s_and_names_a_bad_one(tmp_path: Path):
    found = build_dataset.values([str(tmp_path)], ["eval-share=0.3"])
    assert found["documents"] == str(tmp_path) and found["eval-share"] == "0.3"
    assert found["feedback"] == ""  # the committed feedback describes the sample documents, not yours
    assert set(found) == {p.name for p in BUILD_DATASET.params}
    with pytest.raises(SystemExit, match=r"-S eval_share=0.3: use NAME=VALUE with NAME one of .*min-eval-documents"):
        build_dataset.values([str(tmp_path)], ["eval_share=0.3"])
    with pytest.raises(SystemExit, match=r"nowhere: not a folder \(/.*/nowhere\)"):
        build_dataset.values(["nowhere"], [])


def test_dash_s_paths_are_taken_from_where_the_command_runs_and_checked_before_anything_runs(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "my-reviewed.jsonl").write_text("")
    # README's example, run from the user's own directory: the folder and the feedback file are both found there.
    found = build_dataset.values(["docs"], ["feedback=my-reviewed.jsonl", "dataset-repo=out-repo"], cwd=tmp_path)
    assert found["documents"] == str(tmp_path / "docs")
    assert found["feedback"] == str(tmp_path / "my-reviewed.jsonl")
    assert found["dataset-repo"] == str(tmp_path / "out-repo")  # publish creates it
    assert found["teachers-file"] == "data/teachers.yaml"  # a default: the repository's own file
    found = build_dataset.values(["docs"], ["feedback=s3://bucket/feedback.jsonl"], cwd=tmp_path)
    assert found["feedback"] == "s3://bucket/feedback.jsonl"
    with pytest.raises(SystemExit) as e:
        build_dataset.values(["docs"], ["feedback=missing.jsonl", "teachers-file=t.yaml"], cwd=tmp_path)
    assert str(e.value).splitlines() == [
        "build-dataset: nothing was run:",
        f"  -S feedback=missing.jsonl: no such file {tmp_path / 'missing.jsonl'} (a relative path is taken from where "
        f"the command runs, {tmp_path}); give the file's path",
        f"  -S teachers-file=t.yaml: no such file {tmp_path / 't.yaml'} (a relative path is taken from where the "
        f"command runs, {tmp_path}); give the file's path",
    ]


def a_model_folder(where: Path) -> str:
    """A folder that is a base model's as far as the preamble looks (its config.json), as a -S setting."""
    (where / "model").mkdir()
    (where / "model/config.json").write_text("{}")
    return "base-model=model"


def test_a_missing_base_model_folder_is_refused_before_any_stage_runs(tmp_path: Path, monkeypatch):
    """Given with -S (taken from where the command runs) or left at its default (the repository's, which
    scripts/setup.sh prepares): a folder that is not there is named, not found by ingest's tokenizer load."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "models").mkdir()  # `models/mine` would pass the hub's repo-id rule: with models/ here, a folder
    with pytest.raises(SystemExit) as e:
        build_dataset.values(["docs"], ["base-model=models/mine"], cwd=tmp_path)
    said = str(e.value).splitlines()[1]
    assert said.startswith(f"  -S base-model=models/mine: no such folder ({tmp_path / 'models/mine'}); give the folder")
    assert said.endswith(f"(a relative path is taken from where the command runs, {tmp_path})")
    found = build_dataset.values(["docs"], [a_model_folder(tmp_path)], cwd=tmp_path)
    assert found["base-model"] == str(tmp_path / "model")
    hub = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert build_dataset.values(["docs"], [f"base-model={hub}"], cwd=tmp_path)["base-model"] == hub  # the hub's
    monkeypatch.chdir(tmp_path)  # a checkout whose set-up has not prepared the default base
    found = build_dataset.values(["docs"], ["eval-references=curated-or-teacher"], cwd=tmp_path)
    default = found["base-model"]
    assert [p for p in build_dataset.refusals(found) if p.startswith(f"base-model {default}: no such folder")]


def test_the_smallest_build_it_accepts_is_said_before_it_starts(tmp_path: Path):
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    (tmp_path / "b.txt").write_text("x")
    said = build_dataset.preamble([str(tmp_path)], build_dataset.values([str(tmp_path)], ["min-eval-documents=2"]))
    assert f"{tmp_path}: 2 file(s) (pdf 1, text 1)" in said[0]
    assert any("at least 2 (min-eval-documents) with a summary that may be an eval reference: a reviewed one, from "
               "feedback (eval-references=curated); a build needs 3 or more usable documents" in line
               for line in said)  # fmt: skip
    # The length a reviewed summary may take is said before the build, not found out from a refusal.
    assert any(f"a reviewed summary may take {summary_token_budget()} tokens" in line for line in said)


def test_a_build_bound_to_be_refused_is_refused_before_any_stage_runs(tmp_path: Path, capsys):
    from tests.test_build_dataset import TEXTS, human

    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(TEXTS):
        (docs / f"note-{i}.txt").write_text(text)
    # No feedback, and only reviewed summaries may be eval references: filter-split would refuse after ingest and the
    # teacher had run; the preamble knows it already.
    assert build_dataset.main([str(docs)]) == 1
    said = capsys.readouterr()
    assert "$ python -m steps.ingest" not in said.out and "build-dataset: " in said.out  # the preamble, then nothing
    assert said.err.startswith("build-dataset: refused before any stage ran (nothing was run, nothing published):")
    assert "0 document(s) can be eval references (eval-references=curated)" in said.err
    assert "-S feedback=FILE" in said.err and "-S eval-references=curated-or-teacher" in said.err
    # One reviewed summary cannot make two eval references; one over the length cap is named; too few documents.
    mine = tmp_path / "mine.jsonl"
    write_jsonl(mine, [human("me-1", "Pipes were replaced. " * 20, file="note-0.txt")])
    model = a_model_folder(tmp_path)  # the base's folder is there (checked too: test_a_missing_base_model_folder…)
    problems = build_dataset.refusals(
        build_dataset.values([str(docs)], [f"feedback={mine}", "min-eval-documents=4", model], cwd=tmp_path)
    )
    assert len(problems) == 3 and problems[0].startswith(f"{mine}: row id 'me-1': its summary (60 words)")
    assert problems[1].startswith("1 document(s) can be eval references (eval-references=curated), but a build holds "
                                  "out at least 4 for eval")  # fmt: skip
    assert problems[2].startswith("4 file(s) of a kind ingest reads (.htm, .html, .markdown, .md, .pdf, .text, .txt), "
                                  "but a build needs 5 or more usable documents")  # fmt: skip
    # The teacher's summaries allowed as references, and a feedback file that is not valid: said too, by line.
    mine.write_text('{"id": "me-1"}\n')
    problems = build_dataset.refusals(
        build_dataset.values(
            [str(docs)], [f"feedback={mine}", "eval-references=curated-or-teacher", model], cwd=tmp_path
        )
    )
    assert problems[0].startswith(f"-S feedback={mine}: {mine}:1: field 'summary' is missing")
    assert len(problems) == 1
    write_jsonl(mine, [human("me-1", "Pipes were replaced.", file="note-0.txt")])
    assert build_dataset.refusals(build_dataset.values([str(docs)], [f"feedback={mine}", model], cwd=tmp_path)) == []
