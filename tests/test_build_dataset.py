"""build-dataset's steps: ingest (PDFs made here with PyMuPDF, broken and image-only ones among them), feedback, the
teacher's terms gate (a loopback server counts what reaches it), filter-split (near-duplicates across splits, stable
splits, wrong-language outputs), and — integration — the whole build against a real llama.cpp teacher server,
published with DVC to the S3 server, read back by fetch-dataset with its data card, and trained on for a step."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from steps import feedback, filter_split, ingest, publish, teacher, train
from steps.core import curation, terms
from steps.core.card import FEEDBACK_FILE, card_tags
from steps.core.curation import text_key
from steps.core.dataset import SPLITS, document_sha256, estimate_tokens
from steps.core.io import read_jsonl, write_json, write_jsonl
from tests.conftest import ROOT, make_bucket, s3_client

TEACHERS = ROOT / "data/teachers.yaml"
ADVERSARIAL = ROOT / "data/summaries/adversarial.jsonl"

TEXTS = [
    "The water utility replaced the old cast-iron pipes under the harbour district this spring. Leaks fell by a third "
    "within two months, and the utility expects the savings to pay for the work within four years.",
    "The school board voted to move the start of classes to half past eight from next autumn. Parents' groups had "
    "asked for the change for years, citing studies of teenagers' sleep and their results in morning lessons.",
    "A regional bakery chain opened its tenth shop on Market Street on Saturday. The owners said they would hire "
    "twelve people locally and buy flour from two mills in the valley rather than from an importer.",
    "The city library extended its weekend opening hours after a survey of two thousand readers. Sunday afternoons "
    "were the most requested time, and volunteers from the friends of the library will staff the extra shifts.",
]


def gist(text: str) -> str:
    """A faithful summary of `text` that is not a verbatim span of it: its first sentence, a sentence still (the
    faithfulness rule refuses keyword lists), with its third word left out."""
    words = text.split(". ")[0].rstrip(".").split()
    del words[2]
    return " ".join(words) + "."


def split_of(source_sha256: str, eval_share: float) -> str:
    """'eval' or 'train' by the hash alone, as filter-split's `hold_out` decides before it adds the minimum."""
    return "eval" if filter_split.split_point(source_sha256) < eval_share else "train"


def steer(text: str, split: str, eval_share: float = 0.2) -> bytes:
    """`text` (a sentence appended if need be) as file bytes that filter-split's stable hash puts in `split`."""
    for n in range(200):
        blob = (text + (f" It was reported on day {n}." if n else "")).encode()
        if split_of(hashlib.sha256(blob).hexdigest(), eval_share) == split:
            return blob
    raise AssertionError("no variant lands in the split")


# --- ingest ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def budget(base_model_dir: Path) -> ingest.Budget:
    return ingest.tokenizer_budget(str(base_model_dir), "main")


def ingest_cfg(out: Path, documents: Path | str, base: Path) -> ingest.IngestConfig:
    return ingest.IngestConfig(out=out, documents=str(documents), base_model=str(base))


def write_pdfs(folder: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    for i, text in enumerate(["Budget report. The council approved a new budget for the parks depart-\nment."] * 3):
        page = doc.new_page()
        page.insert_text((72, 40), "ACME Council Minutes")
        page.insert_textbox(pymupdf.Rect(72, 100, 520, 700), f"{text} Item {i} was deferred to the next session.")
        page.insert_text((72, 800), f"Page {i + 1} of 3")
    # The same bytes every run (no fresh /ID from the clock): the split is by the file's hash, so a new ID each run
    # put the minutes in eval one run in five and left the build nothing to train on.
    doc.save(folder / "minutes.pdf", no_new_id=True)
    scan = pymupdf.open()
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 16, 16), False)
    pix.clear_with(180)
    scan.new_page().insert_image(pymupdf.Rect(50, 50, 300, 300), pixmap=pix)
    scan.save(folder / "scan.pdf")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage")
    locked = pymupdf.open()
    locked.new_page().insert_text((72, 72), "secret")
    locked.save(folder / "locked.pdf", encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="u", owner_pw="o")
    (folder / "empty.pdf").write_bytes(b"")
    (folder / "cut.pdf").write_bytes(truncated_pdf())


def truncated_pdf() -> bytes:
    """A six-page PDF cut inside its fourth page's text, as a download that stopped: MuPDF still reads the first
    pages' text."""
    import pymupdf

    doc = pymupdf.open()
    for i in range(6):
        doc.new_page().insert_text((72, 72), f"Section {i}. The strike lasts 48 hours and routes 4 and 12 stop.")
    whole = doc.tobytes(no_new_id=True)
    return whole[: whole.index(b"\n15 0 obj") + 80]  # object 15: page 4's content stream


@pytest.mark.slow
def test_ingest_reads_pdf_markdown_html_and_skips_bad_pdfs_by_name(tmp_path: Path, base_model_dir: Path, capfd):
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdfs(docs)
    (docs / "note.md").write_text("# Parks\n\nThe **parks** budget [rose](http://x) by ten per cent.\n")
    (docs / "page.html").write_text("<html><head><script>x()</script></head><body><p>Trams &amp; buses.</p></body>")
    capfd.readouterr()
    argv = ["--out", str(tmp_path / "out"), "--documents", str(docs), "--base-model", str(base_model_dir)]
    assert ingest.main(argv) == 0
    result = json.loads((tmp_path / "out/result.json").read_text())
    rows = {Path(r["source_uri"]).name: r for r in read_jsonl(tmp_path / "out/documents.jsonl")}
    skipped = {Path(s["source_uri"]).name: s["reason"] for s in json.loads((tmp_path / "out/skipped.json").read_text())}
    assert sorted(rows) == ["minutes.pdf", "note.md", "page.html"]
    assert skipped["scan.pdf"].startswith("image-only PDF")
    assert skipped["broken.pdf"].startswith("unreadable PDF")
    assert skipped["locked.pdf"].startswith("encrypted PDF")
    assert skipped["empty.pdf"] == "empty file"
    # The truncated PDF is named, on stderr too, not ingested cut mid-sentence; MuPDF's own lines name no file.
    assert skipped["cut.pdf"].startswith("damaged PDF (truncated")
    err = capfd.readouterr().err
    assert f"ingest: skipped {docs / 'cut.pdf'}: damaged PDF" in err and "MuPDF error" not in err
    assert (result["skipped"], result["documents"]) == (5, 3)
    minutes = rows["minutes.pdf"]["document"]
    assert "ACME Council Minutes" not in minutes and "Page 1 of 3" not in minutes  # running header and footer
    assert "department" in minutes  # hyphenation at the line end joined
    assert rows["note.md"]["document"] == "Parks\n\nThe parks budget rose by ten per cent."
    assert rows["page.html"]["document"] == "Trams & buses."
    assert rows["minutes.pdf"]["source_sha256"] == hashlib.sha256((docs / "minutes.pdf").read_bytes()).hexdigest()


def test_a_damaged_pdf_is_called_damaged_not_empty():
    import pymupdf

    doc = pymupdf.open()
    for _ in range(3):
        doc.new_page().insert_text((72, 72), "The strike lasts 48 hours. " * 10)
    whole = doc.tobytes()
    no_pages = b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
    for blob in (whole[: len(whole) * 3 // 10], no_pages):  # a truncated download; a file MuPDF finds no page in
        with pytest.raises(ingest.Unusable) as e:
            ingest._pdf_text(blob)
        assert str(e.value).startswith("damaged PDF") and "empty" not in str(e.value)
    assert "The strike lasts 48 hours." in ingest._pdf_text(whole)


def test_a_truncated_pdf_that_still_gives_text_is_skipped_saying_how_many_pages_read():
    with pytest.raises(ingest.Unusable) as e:
        ingest._pdf_text(truncated_pdf())
    said = str(e.value)
    assert said.startswith("damaged PDF (truncated: no end-of-file marker; MuPDF: ")
    assert re.search(r"text on [1-5] of 6 page\(s\), possibly cut short: download or export it again$", said)


def test_a_pdf_whose_only_fault_is_a_rebuilt_cross_reference_table_is_read():
    import pymupdf

    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "The strike lasts 48 hours.")
    whole = doc.tobytes()
    bad_offset = re.sub(rb"startxref\s+\d+", b"startxref\n12", whole)  # MuPDF repairs it from the objects
    assert pymupdf.open(stream=bad_offset, filetype="pdf").is_repaired
    assert ingest._pdf_text(bad_offset) == ingest._pdf_text(whole)


def test_a_long_document_is_chunked_to_what_the_served_prompt_holds_in_tokens(budget: ingest.Budget):
    from steps.contract import serving_config

    # Digits cost a token each in SmolLM2's tokenizer: a character budget would overfill the prompt.
    paragraph = " ".join(f"Row {i} holds 31415 and 27182 at 16180." for i in range(60))
    chunks = ingest.chunk("\n\n".join([paragraph] * 6), budget)
    serving = serving_config.SERVING
    assert len(chunks) > 1
    assert all(budget.prompt_tokens(c) <= serving.n_ctx - serving.max_tokens for c in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(" ".join([paragraph] * 6).split())  # nothing lost


def test_a_folder_without_any_usable_document_is_an_error(tmp_path: Path, base_model_dir: Path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-garbage")
    with pytest.raises(ingest.IngestError, match=r"no usable document among 1 file\(s\)\n  .*broken.pdf: unreadable"):
        ingest.run(ingest_cfg(tmp_path / "out", tmp_path, base_model_dir))


# --- feedback --------------------------------------------------------------------------------------------------------


def fb(
    id_: str, document: str, action: str, when: str, edited: str | None = None, summary: str = "Model said so."
) -> dict:
    row = {"id": id_, "document": document, "summary": summary, "model_version": "3", "timestamp": when}
    row["action"] = action
    return row | ({"edited_summary": edited} if edited else {})


def test_an_edited_summary_supersedes_the_models_and_rejections_teach_nothing(tmp_path: Path):
    path = tmp_path / "feedback.jsonl"
    write_jsonl(path, [
        fb("a", TEXTS[0], "accepted", "2026-11-01T10:00:00+00:00", summary="Pipes were replaced."),
        fb("b", TEXTS[0], "edited", "2026-10-01T10:00:00+00:00", edited="The utility replaced pipes; leaks fell."),
        fb("c", TEXTS[1], "rejected", "2026-11-02T10:00:00+00:00"),
    ])  # fmt: skip
    result = feedback.run(feedback.FeedbackConfig(out=tmp_path / "out", feedback=str(path)))
    curated = read_jsonl(tmp_path / "out/curated.jsonl")
    assert [c["summary"] for c in curated] == ["The utility replaced pipes; leaks fell."]  # the edit, though older
    assert curated[0]["document_sha256"] == document_sha256(TEXTS[0])
    assert (result.rows, result.superseded, result.rejected) == (3, 1, 1)


def test_a_malformed_feedback_row_is_named_by_line_and_field(tmp_path: Path):
    path = tmp_path / "feedback.jsonl"
    write_jsonl(path, [fb("a", TEXTS[0], "accepted", "2026-11-01"), fb("b", TEXTS[1], "edited", "yesterday")])
    with pytest.raises(feedback.FeedbackError) as e:
        feedback.run(feedback.FeedbackConfig(out=tmp_path / "out", feedback=str(path)))
    assert str(e.value).splitlines() == [
        f"{path}:2: field 'edited_summary' is missing; an edited row carries the reviewer's summary",
        f"{path}:2: field 'timestamp' 'yesterday' is not ISO 8601 (2026-12-01T09:30:00+00:00)",
    ]


def outcome(id_: str, outcome_: str, **over: object) -> dict:
    """An online outcome record (steps/core/outcomes.py), as the serving side appends it."""
    row = {"request_id": id_, "time": "2026-11-03T09:00:00Z", "model": "m", "version": "4", "latency_ms": 300,
           "outcome": outcome_}  # fmt: skip
    return row | over


def test_an_outcomes_file_is_feedback_its_edits_curated_and_records_without_text_left_out(tmp_path: Path):
    path = tmp_path / "outcomes.jsonl"
    write_jsonl(path, [
        outcome("r1", "accepted", document=TEXTS[0], summary="Pipes were replaced."),
        outcome("r2", "edited", document=TEXTS[0], summary="Pipes.", edited_summary="The utility replaced pipes.",
                time="2026-11-03T10:00:00Z"),
        outcome("r3", "accepted"),  # no text: counts online only
        outcome("r4", "rejected", document=TEXTS[1], summary="Nonsense."),
    ])  # fmt: skip
    result = feedback.run(feedback.FeedbackConfig(out=tmp_path / "out", feedback=str(path)))
    curated = read_jsonl(tmp_path / "out/curated.jsonl")
    assert [c["summary"] for c in curated] == ["The utility replaced pipes."]
    assert curated[0]["feedback"]["id"] == "r2" and curated[0]["feedback"]["model_version"] == "4"
    assert (result.rows, result.edited, result.rejected) == (3, 1, 1)
    published = read_jsonl(tmp_path / "out" / FEEDBACK_FILE)  # what publish keeps and the retrain trigger counts
    assert [r["id"] for r in published] == ["r1", "r2", "r4"]
    assert feedback.parse((tmp_path / "out" / FEEDBACK_FILE).read_bytes(), "published") == published  # valid rows


def test_a_bad_outcome_record_is_named_by_line_and_field_as_feedback(tmp_path: Path):
    path = tmp_path / "outcomes.jsonl"
    write_jsonl(path, [outcome("r1", "accepted", document=TEXTS[0]), outcome("r2", "maybe")])
    with pytest.raises(feedback.FeedbackError) as e:
        feedback.run(feedback.FeedbackConfig(out=tmp_path / "out", feedback=str(path)))
    assert f"{path}:1: fields 'document' and 'summary': give both" in str(e.value)
    assert f"{path}:2: field 'outcome': 'maybe'" in str(e.value)
    assert not (tmp_path / "out").exists()


def human(id_: str, summary: str, **names: str) -> dict:
    """A summary a person wrote, as docs/dataset.md says to write one: no model wrote it."""
    row = {"id": id_, "summary": summary, "model_version": "human", "timestamp": "2026-12-03T09:00:00+00:00"}
    return row | {"action": "accepted"} | names


def test_a_reviewed_summary_over_the_answer_cap_is_refused_naming_the_row_and_the_cap(tmp_path: Path, capsys):
    from steps.core.dataset import summary_token_budget

    path = tmp_path / "mine.jsonl"
    long = " ".join(["The utility replaced the old cast-iron pipes under the harbour district this spring."] * 4)
    write_jsonl(path, [human("me-1", gist(TEXTS[1]), document=TEXTS[1]), human("me-2", long, document=TEXTS[0])])
    with pytest.raises(feedback.FeedbackError) as e:
        feedback.run(feedback.FeedbackConfig(out=tmp_path / "out", feedback=str(path)))
    said = str(e.value)
    assert said.startswith(f"{path}: row id 'me-2': its summary (52 words) needs about ")
    assert f"over the answer cap of {summary_token_budget()} every summary is held to" in said
    assert "me-1" not in said and not (tmp_path / "out").exists()
    # From the serving side's outcomes file (unattended) it is named on stderr and left to filter-split's too-long.
    outcomes_path = tmp_path / "outcomes.jsonl"
    write_jsonl(outcomes_path, [outcome("r1", "edited", document=TEXTS[0], summary="Pipes.", edited_summary=long)])
    feedback.run(feedback.FeedbackConfig(out=tmp_path / "out", feedback=str(outcomes_path)))
    assert "row id 'r1': its edited_summary (52 words)" in capsys.readouterr().err


def chunk_row(uri: str, relative: str, text: str, i: int = 0, chunks: int = 1, raw: str | None = None) -> dict:
    """An ingest row (steps/ingest.py's documents.jsonl) for chunk `i` of a file, without the tokenizer."""
    keys = [text_key(text)] + ([text_key(raw)] if raw else [])
    return {"id": f"{relative}-{i}", "document": text, "document_sha256": document_sha256(text), "source_uri": uri,
            "source_sha256": hashlib.sha256(uri.encode()).hexdigest(), "relative_path": relative,
            "file_text_keys": keys, "kind": "text", "chunk": i, "chunks": chunks}  # fmt: skip


def curated_rows(rows: list[dict]) -> list[dict]:
    return feedback.merge(rows)[0]


def test_a_reviewed_summary_attaches_by_file_by_the_files_text_or_by_its_chunk():
    shown = "The school board voted to move the start of classes to half past eight."
    markdown = "# Schools\n\nThe school board voted to move the start of classes to *half past eight*."
    documents = [
        chunk_row("/home/you/docs/notes/pipes.txt", "notes/pipes.txt", TEXTS[0]),
        chunk_row("/home/you/docs/school.md", "school.md", f"Schools\n\n{shown}", raw=markdown),
        chunk_row("/home/you/docs/bakery.txt", "bakery.txt", TEXTS[2]),
        chunk_row("/home/you/docs/library.txt", "library.txt", TEXTS[3]),
    ]
    found = curation.attach(curated_rows([
        human("by-file", "Pipes were replaced.", file="notes/pipes.txt"),
        human("by-markdown", "Classes start later.", document=markdown + "\n"),  # the file as written, pasted
        human("by-chunk", "A bakery opened.", document=TEXTS[2].replace(". ", ".\n")),  # other line breaks
        human("elsewhere", "Ferries run more often.", document="The harbour ferry will run every twenty minutes."),
    ]), documents)  # fmt: skip
    assert found.problems == []
    attached = {row["feedback"]["id"]: key for key, row in found.by_chunk.items()}
    assert attached == {"by-file": documents[0]["document_sha256"], "by-markdown": documents[1]["document_sha256"],
                        "by-chunk": documents[2]["document_sha256"]}  # fmt: skip
    assert [r["feedback"]["id"] for r in found.unattached] == ["elsewhere"]  # a document only the serving side saw


def test_a_reviewed_summary_that_cannot_attach_is_named_not_dropped():
    documents = [
        chunk_row("/d/long.txt", "long.txt", TEXTS[0], 0, 2),
        chunk_row("/d/long.txt", "long.txt", TEXTS[1], 1, 2),
        chunk_row("/d/pipes.txt", "pipes.txt", TEXTS[2]),
    ]
    documents[0]["file_text_keys"] = documents[1]["file_text_keys"] = [text_key(TEXTS[0] + " " + TEXTS[1])]
    found = curation.attach(curated_rows([
        human("whole", "Two things happened.", document=f"{TEXTS[0]}\n\n{TEXTS[1]}"),
        human("typo", "Pipes.", file="pipe.txt"),
        human("twice-a", "A bakery opened.", file="pipes.txt"),
        human("twice-b", "A bakery opened its tenth shop.", document=TEXTS[2]),
    ]), documents)  # fmt: skip
    assert [p.split(":")[0] for p in found.problems] == [
        "feedback row 'whole'", "feedback row 'typo'", "feedback row 'twice-b' and feedback row 'twice-a' both "
        "summarise /d/pipes.txt (chunk 0)"]  # fmt: skip
    assert "cut into 2 chunks" in found.problems[0] and "ingested: long.txt, pipes.txt" in found.problems[1]


def test_filter_split_trains_on_the_summary_a_reviewer_attached_by_file(tmp_path: Path):
    texts = {f"t{i}": steer(t, "train" if i else "eval") for i, t in enumerate(TEXTS)}
    cfg = stage_inputs(tmp_path, texts, {n: gist(b.decode()) for n, b in texts.items()}, eval_references="curated")
    documents = read_jsonl(cfg.chunks / "documents.jsonl")
    for doc in documents:
        doc["relative_path"] = f"{doc['id']}.txt"
    write_jsonl(cfg.chunks / "documents.jsonl", documents)
    write_jsonl(cfg.curated / "curated.jsonl", curated_rows([human("me-1", "Library hours were extended.",
                                                                   file="t3.txt")]))  # fmt: skip
    filter_split.run(cfg)
    assert [(r["id"], r["lineage"]["summary_by"]) for r in read_jsonl(tmp_path / "examples/eval.jsonl")] == [
        ("t3", "feedback")
    ]


# --- the terms gate --------------------------------------------------------------------------------------------------


class _Counting(http.server.BaseHTTPRequestHandler):
    count = 0
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        type(self).count += 1
        type(self).paths.append(self.path)
        body = json.dumps({"choices": [{"message": {"content": "A summary."}, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def counting_server() -> Iterator[tuple[str, type[_Counting]]]:
    handler = type("Counter", (_Counting,), {"count": 0, "paths": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()


def one_document(tmp_path: Path) -> tuple[Path, Path]:
    documents, curated = tmp_path / "documents", tmp_path / "curated"
    documents.mkdir()
    curated.mkdir()
    row = {"id": "d", "document": TEXTS[0], "document_sha256": document_sha256(TEXTS[0]), "source_uri": "/d/d.txt"}
    write_jsonl(documents / "documents.jsonl", [row | {"chunk": 0}])
    (curated / "curated.jsonl").write_text("")
    return documents, curated


def test_an_unlisted_teacher_is_refused_before_any_request(tmp_path: Path, counting_server):
    url, handler = counting_server
    documents, curated = one_document(tmp_path)
    cfg = teacher.TeacherConfig(out=tmp_path / "out", chunks=documents, curated=curated, teacher="gpt-9",
                                teachers_file=str(TEACHERS), teacher_url=url,
                                cache=str(tmp_path / "cache"))  # fmt: skip
    with pytest.raises(teacher.TermsError, match=r"teacher 'gpt-9' is not listed in .*teachers.yaml .*no request"):
        teacher.run(cfg)
    assert handler.count == 0 and not (tmp_path / "out").exists()


def hosted_teachers(tmp_path: Path, url: str, allowed: bool) -> Path:
    entry = {"provider": "Example AI", "model": "example-large", "terms_url": "https://example.com/terms",
             "outputs_may_train_models": allowed, "reviewed_by": "legal", "reviewed_on": "2026-11-30",
             "hosted": True, "endpoint": url}  # fmt: skip
    path = tmp_path / "teachers.yaml"
    path.write_text(yaml.safe_dump({"teachers": {"example-large": entry}}))
    return path


def test_a_teacher_whose_terms_forbid_distillation_is_refused_before_any_request(tmp_path: Path, counting_server):
    url, handler = counting_server
    documents, curated = one_document(tmp_path)
    cfg = teacher.TeacherConfig(out=tmp_path / "out", chunks=documents, curated=curated, teacher="example-large",
                                teachers_file=str(hosted_teachers(tmp_path, url, allowed=False)), teacher_url=url,
                                cache=str(tmp_path / "cache"))  # fmt: skip
    with pytest.raises(teacher.TermsError, match=r"teachers.example-large: the provider's terms \(https://example.com"):
        teacher.run(cfg)
    assert handler.count == 0
    # The same hosted teacher, listed as allowing it: the gate lets it through, and the counter sees the request.
    cfg.teachers_file = str(hosted_teachers(tmp_path, url, allowed=True))
    assert teacher.run(cfg).requests == 1 and handler.count == 1


def test_a_reviewed_summary_naming_no_ingested_file_stops_the_teacher_before_any_request(
    tmp_path: Path, counting_server
):
    url, handler = counting_server
    documents, curated = one_document(tmp_path)
    write_jsonl(curated / "curated.jsonl", curated_rows([human("me-1", "Pipes were replaced.", file="pipe.txt")]))
    cfg = teacher.TeacherConfig(out=tmp_path / "out", chunks=documents, curated=curated, teacher="example-large",
                                teachers_file=str(hosted_teachers(tmp_path, url, allowed=True)), teacher_url=url,
                                cache=str(tmp_path / "cache"))  # fmt: skip
    with pytest.raises(teacher.TeacherError, match=r"do not attach:\n  feedback row 'me-1': file 'pipe.txt' names no"):
        teacher.run(cfg)
    assert handler.count == 0
    # Named by its file as ingest found it, it attaches: the teacher has nothing left to ask.
    write_jsonl(curated / "curated.jsonl", curated_rows([human("me-1", "Pipes were replaced.", file="/d/d.txt")]))
    assert (teacher.run(cfg).requests, teacher.run(cfg).curated, handler.count) == (0, 1, 0)


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_a_teacher_url_with_or_without_v1_reaches_the_chat_endpoint(suffix: str, tmp_path: Path, counting_server):
    url, handler = counting_server
    documents, curated = one_document(tmp_path)
    # The entry names the endpoint one way, the flag the other: the same endpoint for the terms gate.
    endpoint = f"{url}/v1" if suffix in ("", "/") else url
    cfg = teacher.TeacherConfig(out=tmp_path / "out", chunks=documents, curated=curated, teacher="example-large",
                                teachers_file=str(hosted_teachers(tmp_path, endpoint, allowed=True)),
                                teacher_url=url + suffix, cache=str(tmp_path / "cache"))  # fmt: skip
    assert teacher.run(cfg).requests == 1
    assert handler.paths == ["/v1/chat/completions"]


def test_an_open_weights_entry_cannot_be_pointed_at_a_public_api(tmp_path: Path):
    documents, curated = one_document(tmp_path)
    cfg = teacher.TeacherConfig(out=tmp_path / "out", chunks=documents, curated=curated,
                                teachers_file=str(TEACHERS), teacher_url="https://api.example.com")  # fmt: skip
    with pytest.raises(teacher.TermsError, match="is a public host: a hosted API needs an entry of its own"):
        teacher.run(cfg)


def test_an_incomplete_terms_entry_is_refused_naming_the_field(tmp_path: Path):
    path = tmp_path / "teachers.yaml"
    path.write_text(yaml.safe_dump({"teachers": {"x": {"provider": "p", "model": "m", "hosted": False}}}))
    with pytest.raises(teacher.TermsError) as e:
        terms.load_teachers(str(path))
    assert f"{path}: teachers.x.outputs_may_train_models is missing" in str(e.value)
    assert f"{path}: teachers.x.reviewed_by is missing" in str(e.value)


# --- filter-split ----------------------------------------------------------------------------------------------------


def stage_inputs(
    tmp_path: Path,
    texts: dict[str, bytes],
    summaries: dict[str, str | tuple[str, str]],
    eval_references: str = "curated-or-teacher",
) -> filter_split.FilterConfig:
    """ingest/feedback/teacher folders for documents `texts` (name -> file bytes) with teacher summaries. The teacher's
    summaries may be eval references here (these tests are about the filters and the split; the default, curated
    references only, has tests of its own)."""
    docs, gen = [], []
    for name, blob in texts.items():
        text = blob.decode()
        key = document_sha256(text)
        docs.append({"id": name, "document": text, "document_sha256": key, "source_uri": f"s3://docs/{name}.txt",
                     "source_sha256": hashlib.sha256(blob).hexdigest(), "kind": "text",
                     "chunk": 0, "chunks": 1, "prompt_tokens": 40 + len(text) // 4})  # fmt: skip
        summary, finish = summaries[name] if isinstance(summaries[name], tuple) else (summaries[name], "stop")
        gen.append({"document_sha256": key, "summary": summary, "finish_reason": finish,
                    "teacher": {"name": "t", "model": "m", "revision": "r"}, "prompt_sha256": "0" * 64,
                    "decoding": {}, "generated_at": "2026-12-01T00:00:00+00:00"})  # fmt: skip
    for sub, rows, name in (
        ("documents", docs, "documents"),
        ("curated", [], "curated"),
        ("teacher", gen, "summaries"),
    ):
        (tmp_path / sub).mkdir(exist_ok=True)
        write_jsonl(tmp_path / sub / f"{name}.jsonl", rows)
    return filter_split.FilterConfig(out=tmp_path / "examples", chunks=tmp_path / "documents",
                                     curated=tmp_path / "curated", summaries=tmp_path / "teacher",
                                     adversarial_file=str(ADVERSARIAL), eval_references=eval_references)  # fmt: skip


def test_a_near_duplicate_of_a_train_document_in_eval_is_caught_and_train_is_decontaminated(tmp_path: Path):
    original = steer(TEXTS[0], "train")
    reworded = steer(TEXTS[0].replace("this spring", "last spring").replace("two months", "eight weeks"), "eval")
    texts = {
        "a-original": original,
        "a-reworded": reworded,
        "b": steer(TEXTS[1], "train"),
        "c": steer(TEXTS[2], "eval"),
        "d": steer(TEXTS[3], "train"),
    }
    summaries = {n: gist(b.decode()) for n, b in texts.items()}
    result = filter_split.run(stage_inputs(tmp_path, texts, summaries))
    dropped = {d["id"]: d["reason"] for d in read_jsonl(tmp_path / "examples/dropped.jsonl")}
    assert dropped["a-original"].startswith("near-duplicate of eval row a-reworded")
    assert [r["id"] for r in read_jsonl(tmp_path / "examples/train.jsonl")] == ["b", "d"]
    assert (result.train_rows, result.eval_rows) == (2, 2)


def test_exact_and_near_duplicates_within_a_split_keep_the_first(tmp_path: Path):
    reworded = TEXTS[1].replace("voted", "decided").replace("for years", "for a long time")
    texts = {"b1": steer(TEXTS[1], "train"), "b2": steer(reworded, "train")}
    # The same text in another file (trailing blank lines): exactly the same document, in the same split.
    texts["b3"] = next(
        b for k in range(1, 50) if split_of(hashlib.sha256(b := texts["b1"] + b"\n" * k).hexdigest(), 0.2) == "train"
    )
    texts["c"] = steer(TEXTS[2], "eval")
    texts["d"] = steer(TEXTS[3], "train")
    filter_split.run(stage_inputs(tmp_path, texts, {n: gist(b.decode()) for n, b in texts.items()}))
    dropped = {d["id"]: d["reason"] for d in read_jsonl(tmp_path / "examples/dropped.jsonl")}
    assert dropped["b2"] == "near-duplicate of train row b1"
    assert dropped["b3"] == "duplicate of train row b1"
    assert [r["id"] for r in read_jsonl(tmp_path / "examples/train.jsonl")] == ["b1", "d"]


def test_filters_drop_and_count_bad_teacher_outputs(tmp_path: Path):
    texts = {f"d{i}": steer(t, "train" if i else "eval") for i, t in enumerate(TEXTS)}
    texts["d4"] = steer(
        "Volunteers planted four hundred trees along the river path over the weekend, organised by the rowing club and "
        "funded by a grant from the regional environment fund.",
        "train",
    )
    summaries = {"d0": "Old pipes were replaced.", "d4": "Trees were planted by volunteers.",
                 "d1": "I'm sorry, but I cannot summarise this document.",
                 "d2": "Bakery.", "d3": " ".join([TEXTS[3]] * 2)}  # fmt: skip
    # Cut off at the answer cap: after a complete sentence (kept, trimmed to it), or inside the first (dropped).
    texts["d5"] = steer(TEXTS[2].replace("bakery", "butcher's"), "train")
    texts["d6"] = steer(TEXTS[1].replace("school board", "college"), "eval")
    summaries["d5"] = ("A butcher's shop opened on Market Street. It will hire twelve people and buy", "length")
    summaries["d6"] = ("The college voted to move the start of classes to half past eight and", "length")
    # An English document summarised in French (small teachers drift into another language now and then).
    texts["d7"] = steer(TEXTS[0].replace("harbour district", "old town"), "train")
    summaries["d7"] = "La compagnie des eaux a remplacé les vieilles conduites et les fuites ont baissé d'un tiers."
    filter_split.run(stage_inputs(tmp_path, texts, summaries))
    found = json.loads((tmp_path / "examples/filters.json").read_text())
    assert found["filters"] == {"empty": 1, "truncated": 1, "refusing": 1, "wrong-language": 1, "length-ratio": 1,
                                "too-long": 0, "verbatim": 0, "unfaithful": 0}  # fmt: skip
    reasons = {d["id"]: d["reason"] for d in read_jsonl(tmp_path / "examples/dropped.jsonl")}
    assert reasons["d7"] == "wrong-language" and "d4" not in reasons  # a three-word English summary is not
    assert found["trimmed"] == 1
    d5 = next(r for r in read_jsonl(tmp_path / "examples/train.jsonl") if r["id"] == "d5")
    assert d5["summary"] == "A butcher's shop opened on Market Street." and d5["lineage"]["trimmed"] is True


def test_too_few_documents_are_refused_naming_the_settings(tmp_path: Path):
    texts = {"b": steer(TEXTS[1], "train")}
    with pytest.raises(filter_split.SplitError, match=r"1 document\(s\) passed .* -S min-eval-documents=1\), none is"):
        filter_split.run(stage_inputs(tmp_path, texts, {"b": gist(TEXTS[1])}))


MUSEUM = (
    "The museum added a late opening on Thursdays until nine in the evening, after visitor numbers rose by a fifth "
    "during the summer exhibition."
)
# The case: a small teacher turned a 48-hour strike into a "48-hour pay freeze", which became a reference.
STRIKE = (
    "Bus drivers at Northgate Transport will hold a 48-hour strike from Monday after talks over pay broke down. "
    "The union said the company had offered a two per cent rise, below inflation; routes 4 and 12 will not run."
)


def test_teacher_summaries_the_document_does_not_support_are_dropped_and_counted_by_kind(tmp_path: Path):
    texts = {"strike": steer(STRIKE, "train"), "invented": steer(TEXTS[0], "train"), "copy": steer(TEXTS[1], "train"),
             "good": steer(TEXTS[2], "eval"), "fine": steer(TEXTS[3], "train"),
             "museum": steer(MUSEUM, "train")}  # fmt: skip
    summaries = {
        "strike": "Northgate Transport announced a 48-hour pay freeze for drivers.",  # words the document lacks
        "invented": "Harbour pipes were replaced in 2019 by Acme Utilities.",  # a year and a firm it never names
        "copy": TEXTS[1].split(". ")[0] + ".",  # its first sentence, word for word
        "good": "A regional bakery chain opened its tenth shop and will hire twelve people.",
        "fine": gist(TEXTS[3]),
        "museum": gist(MUSEUM),
    }
    filter_split.run(stage_inputs(tmp_path, texts, summaries))
    found = json.loads((tmp_path / "examples/filters.json").read_text())
    assert (found["filters"]["unfaithful"], found["filters"]["verbatim"]) == (2, 1)
    assert found["unfaithful"] == {"names-or-numbers": 1, "content-words": 1, "too-few-content-words": 0}
    dropped = {d["id"]: d for d in read_jsonl(tmp_path / "examples/dropped.jsonl")}
    assert "freeze" in dropped["strike"]["detail"].split("not found: ")[1]
    assert "2019" in dropped["invented"]["detail"] and "Acme" in dropped["invented"]["detail"]
    assert dropped["copy"]["reason"] == "verbatim"
    kept = [r["id"] for split in ("train", "eval") for r in read_jsonl(tmp_path / f"examples/{split}.jsonl")]
    assert sorted(kept) == ["fine", "good", "museum"]


def test_eval_references_come_from_curated_rows_unless_the_teacher_is_opted_in(tmp_path: Path):
    texts = {f"t{i}": steer(t, "train" if i else "eval") for i, t in enumerate(TEXTS)}  # t0 the hash holds out
    summaries = {n: gist(b.decode()) for n, b in texts.items()}
    # Without a reviewed summary there is nothing to hold out as a reference: refused, naming the settings.
    with pytest.raises(filter_split.SplitError, match=r"0 document\(s\) can be eval references \(eval-references="
                       r"curated\).*-S feedback=FILE.*-S eval-references=curated-or-teacher"):  # fmt: skip
        filter_split.run(stage_inputs(tmp_path, texts, summaries, eval_references="curated"))
    # One reviewed summary: it is the eval split; the teacher-summarised document the hash held out is in neither.
    cfg = stage_inputs(tmp_path, texts, summaries, eval_references="curated")
    t3 = texts["t3"].decode()
    write_jsonl(cfg.curated / "curated.jsonl", [{"document_sha256": document_sha256(t3), "document": t3,
                "summary": "Library weekend hours were extended.", "feedback": {"id": "f1", "action": "edited",
                "model_version": "3", "timestamp": "2026-12-01T09:00:00+00:00"}}])  # fmt: skip
    filter_split.run(cfg)
    evaluation = read_jsonl(tmp_path / "examples/eval.jsonl")
    assert [(r["id"], r["lineage"]["summary_by"]) for r in evaluation] == [("t3", "feedback")]
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "examples/train.jsonl")) == ["t1", "t2"]
    dropped = {d["id"]: d["reason"] for d in read_jsonl(tmp_path / "examples/dropped.jsonl")}
    assert dropped == {"t0": filter_split.TEACHER_IN_EVAL}
    filters = json.loads((tmp_path / "examples/filters.json").read_text())
    assert (filters["eval_references"], filters["teacher_eval_references_left_out"]) == ("curated", 1)
    # Opted in, the teacher's summary of the document the hash holds out is the reference; the curated one trains.
    cfg.eval_references = "curated-or-teacher"
    filter_split.run(cfg)
    assert [r["id"] for r in read_jsonl(tmp_path / "examples/eval.jsonl")] == ["t0"]
    assert "t3" in [r["id"] for r in read_jsonl(tmp_path / "examples/train.jsonl")]


def test_a_small_build_holds_out_the_minimum_nearest_the_boundary(tmp_path: Path):
    texts = {f"t{i}": steer(t, "train") for i, t in enumerate(TEXTS)}  # the hash holds out none of the four
    cfg = stage_inputs(tmp_path, texts, {n: gist(b.decode()) for n, b in texts.items()})
    result = filter_split.run(cfg)
    points = {n: filter_split.split_point(hashlib.sha256(b).hexdigest()) for n, b in texts.items()}
    assert [r["id"] for r in read_jsonl(tmp_path / "examples/eval.jsonl")] == [min(points, key=points.get)]
    assert (result.train_rows, result.eval_rows, result.eval_documents) == (3, 1, 1)
    cfg.min_eval_documents = 2
    assert filter_split.run(cfg).eval_documents == 2


def test_a_split_below_the_minimum_is_refused_saying_what_was_kept_and_why_the_rest_went(tmp_path: Path):
    texts = {"kept": steer(TEXTS[0], "train"), "held": steer(TEXTS[1], "eval"), "strike": steer(STRIKE, "train"),
             "copy": steer(TEXTS[2], "train"), "also-copy": steer(TEXTS[3], "train")}  # fmt: skip
    summaries = {n: gist(b.decode()) for n, b in texts.items()}
    summaries["strike"] = "Northgate Transport announced a 48-hour pay freeze for drivers."
    summaries["copy"], summaries["also-copy"] = (TEXTS[i].split(". ")[0] + "." for i in (2, 3))
    with pytest.raises(filter_split.SplitError) as e:
        filter_split.run(stage_inputs(tmp_path, texts, summaries))
    said = str(e.value)
    assert said.startswith(f"too few examples to publish: train 1 (at least {filter_split.MIN_EXAMPLES['train']})")
    assert "Of 5 examples 1 train and 1 eval were kept and 3 dropped: verbatim 2 (also-copy, copy); unfaithful 1 " \
           "(strike)" in said  # fmt: skip
    assert "Add documents; add reviewed summaries (-S feedback=FILE" in said and "stronger model" in said
    assert not (tmp_path / "examples").exists()  # nothing for publish to take


def test_train_examples_longer_than_trains_max_seq_len_are_said_before_anyone_trains(tmp_path: Path, capsys):
    texts = {f"t{i}": steer(t, "train" if i else "eval") for i, t in enumerate(TEXTS)}
    cfg = stage_inputs(tmp_path, texts, {n: gist(b.decode()) for n, b in texts.items()})
    documents = read_jsonl(cfg.chunks / "documents.jsonl")
    documents[1]["prompt_tokens"] = 818  # the example: sized for the served context, longer than train's 512
    write_jsonl(cfg.chunks / "documents.jsonl", documents)
    argv = ["--out", str(cfg.out), "--chunks", str(cfg.chunks), "--curated", str(cfg.curated),
            "--summaries", str(cfg.summaries), "--adversarial-file", str(ADVERSARIAL),
            "--eval-references", "curated-or-teacher"]  # fmt: skip
    assert filter_split.main(argv) == 0
    fit = json.loads((cfg.out / "filters.json").read_text())["train_fit"]
    longest = 818 + estimate_tokens(gist(texts["t1"].decode())) + 1
    assert fit == {"max_seq_len": 512, "examples": 3, "examples_over": 1, "longest_tokens": longest}
    said = capsys.readouterr().out
    assert f"1 of 3 train examples are longer than train's --max-seq-len 512 (the longest about {longest}" in said
    assert f"train with -S max-seq-len={longest}" in said


def test_a_documents_split_depends_on_its_own_hash_only():
    keys = [hashlib.sha256(t.encode()).hexdigest() for t in TEXTS]
    before = {k: split_of(k, 0.2) for k in keys}
    assert before == {k: split_of(k, 0.2) for k in reversed(keys)}
    shares = [split_of(hashlib.sha256(str(i).encode()).hexdigest(), 0.2) for i in range(2000)]
    assert 0.17 < shares.count("eval") / 2000 < 0.23


def test_publish_names_the_local_and_the_argo_command_and_repeats_no_dvc_hint(tmp_path: Path, capfd):
    texts = {f"t{i}": steer(t, "train" if i else "eval") for i, t in enumerate(TEXTS[:3])}
    cfg = stage_inputs(tmp_path, texts, {n: gist(b.decode()) for n, b in texts.items()})
    filter_split.run(cfg)
    write_json(cfg.chunks / "skipped.json", [])
    write_json(cfg.chunks / "result.json", {"files": 3})
    (cfg.curated / FEEDBACK_FILE).write_text("")
    entry = terms.load_teachers(str(TEACHERS))["smollm2-135m-instruct"]
    write_json(cfg.summaries / "teacher.json", {"name": "smollm2-135m-instruct", **entry, "decision": "allowed"})
    repo = tmp_path / "dataset-repo"
    argv = ["--out", str(tmp_path / "published"), "--examples", str(cfg.out), "--chunks", str(cfg.chunks),
            "--curated", str(cfg.curated), "--summaries", str(cfg.summaries), "--dataset-repo", str(repo),
            "--dvc-remote", str(tmp_path / "remote")]  # fmt: skip
    capfd.readouterr()
    assert publish.main(argv) == 0
    said = capfd.readouterr()
    rev = json.loads((tmp_path / "published/result.json").read_text())["dataset_rev"]
    assert f"scripts/run_local.sh -S dataset-repo={repo} -S dataset-rev={rev}" in said.out
    assert f"-p dataset-rev={rev}" in said.out and "git checkout params.yaml dvc.lock" in said.out
    # The files are added, pushed and committed by the step: DVC's hints to do that by hand are not passed on.
    both = said.out + said.err
    assert "git add" not in both and "autostage" not in both and "dvc push" not in both
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    # The card says where each split's references came from, and the rule eval was held to.
    card = json.loads((tmp_path / "published/card.json").read_text())
    assert card["references"]["eval_references"] == "curated-or-teacher"
    assert card["references"]["by_split"] == {"train": {"teacher": 2}, "eval": {"teacher": 1}}
    markdown = (tmp_path / "published/card.md").read_text()
    assert "**References** (eval-references=curated-or-teacher: " in markdown and "- eval: 1 by the teacher" in markdown
    assert card_tags(card)["dataset.card.references"] == "curated-or-teacher"
    # The bundled teacher's caveat (data/teachers.yaml), with what its summaries came to on this build, said at publish.
    assert card["teacher"]["on_this_build"] == {"summaries": 3, "dropped_by_filters": {}, "passed_filters": 3}
    caveat = f"smollm2-135m-instruct is {entry['caveat']}. On this build it wrote 3 summaries: the filters dropped 0"
    assert f"  teacher:     {caveat}" in said.out and f"**Teacher caveat**: {caveat}" in markdown


def fetched_rows(folder: Path, split: str) -> int:
    return len(read_jsonl(folder / f"{split}.jsonl"))


# --- the whole build, a real teacher ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def teacher_server() -> Iterator[str]:
    """The default teacher (data/teachers.yaml's open-weights entry) on llama-cpp-python's server, once a session."""
    entry = terms.load_teachers(str(TEACHERS))["smollm2-135m-instruct"]
    with teacher.llama_server(teacher.resolve_gguf(entry["gguf"]), threads=2) as url:
        yield url


def build(tmp_path: Path, docs: Path, feedback_file: Path, repo: Path, url: str, base: Path) -> dict:
    out = tmp_path / "out"
    ingest.run(ingest.IngestConfig(out=out / "documents", documents=str(docs), base_model=str(base)))
    feedback.run(feedback.FeedbackConfig(out=out / "curated", feedback=str(feedback_file)))
    taught = teacher.run(teacher.TeacherConfig(out=out / "teacher", chunks=out / "documents",
                                               curated=out / "curated", teachers_file=str(TEACHERS), teacher_url=url,
                                               cache=str(tmp_path / "teacher-cache")))  # fmt: skip
    filter_split.run(filter_split.FilterConfig(out=out / "examples", chunks=out / "documents",
                                               curated=out / "curated", summaries=out / "teacher",
                                               adversarial_file=str(ADVERSARIAL)))  # fmt: skip
    published = publish.run(publish.PublishConfig(out=out / "published", examples=out / "examples",
                                                  chunks=out / "documents", curated=out / "curated",
                                                  summaries=out / "teacher", dataset_repo=str(repo)))  # fmt: skip
    splits = {r["id"]: s for s in ("train", "eval") for r in read_jsonl(out / f"examples/{s}.jsonl")}
    return {"requests": taught.requests, "published": published, "splits": splits}


@pytest.mark.integration
def test_build_publish_fetch_back_and_train(
    tmp_path: Path, teacher_server: str, s3_server: str, aws_env: dict, base_model_dir: Path, tiny_model_dir: Path
):
    import subprocess

    from steps import fetch_dataset

    make_bucket(s3_server, "datasets")
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdfs(docs)
    (docs / "pipes.txt").write_bytes(steer(TEXTS[0], "eval"))
    (docs / "school.md").write_bytes(steer(TEXTS[1], "train"))
    # A reviewer's summary naming its file: the build holds it whatever the 135M teacher writes (filter-split refuses
    # a train split under MIN_EXAMPLES; this teacher's summary of school.md fails length-ratio).
    (docs / "museum.txt").write_bytes(steer(MUSEUM, "train"))
    feedback_file = tmp_path / "feedback.jsonl"
    write_jsonl(feedback_file, [fb("f1", TEXTS[2], "edited", "2026-11-30T09:00:00+00:00", edited="A bakery opened."),
                                human("f0", gist(MUSEUM), file="museum.txt")])  # fmt: skip
    repo = tmp_path / "dataset-repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["dvc", "remote", "add", "-d", "s3", "s3://datasets/dvc"], cwd=repo, check=True)
    subprocess.run(["dvc", "remote", "modify", "s3", "endpointurl", s3_server], cwd=repo, check=True)

    first = build(tmp_path, docs, feedback_file, repo, teacher_server, base_model_dir)
    # The same files under an S3 prefix give the same chunks, each named by its s3:// URI.
    s3 = s3_client(s3_server)
    for path in docs.iterdir():
        s3.put_object(Bucket="datasets", Key=f"incoming/{path.name}", Body=path.read_bytes())
    ingest.run(ingest_cfg(tmp_path / "from-s3", "s3://datasets/incoming/", base_model_dir))
    from_s3 = read_jsonl(tmp_path / "from-s3/documents.jsonl")
    from_folder = read_jsonl(tmp_path / "out/documents/documents.jsonl")
    assert sorted(r["document_sha256"] for r in from_s3) == sorted(r["document_sha256"] for r in from_folder)
    assert all(r["source_uri"].startswith("s3://datasets/incoming/") for r in from_s3)
    assert first["requests"] == 3  # minutes.pdf, pipes.txt, school.md; the bakery's and the museum's are reviewers'
    # attached by its file (a reviewed summary, so filter-split may hold it out as an eval reference: either split)
    built = [r for s in ("train", "eval") for r in read_jsonl(tmp_path / f"out/examples/{s}.jsonl")]
    museum = [r for r in built if r["id"].startswith("museum-")]
    assert [r["lineage"]["feedback_id"] for r in museum] == ["f0"], [r["id"] for r in built]
    rev = first["published"].dataset_rev
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    fetched = fetch_dataset.run(fetch_dataset.FetchConfig(out=tmp_path / "fetched", dataset_repo=str(clone),
                                                          dataset_rev=rev, dataset_path="data/summaries"))  # fmt: skip
    assert fetched.dataset_hash == first["published"].dataset_hash
    rows = read_jsonl(tmp_path / "fetched/train.jsonl") + read_jsonl(tmp_path / "fetched/eval.jsonl")
    by = {r["lineage"]["summary_by"] for r in rows}
    assert by == {"teacher", "feedback"}
    for row in rows:
        if row["lineage"]["summary_by"] == "teacher":
            assert row["lineage"]["teacher"]["revision"] and row["lineage"]["prompt_sha256"]
    # The card comes back with the revision; its tags (what register puts on a model version) carry the terms decision.
    card = json.loads((tmp_path / "fetched/card.json").read_text())
    assert card == json.loads((tmp_path / "out/published/card.json").read_text())
    tags = card_tags(card)
    assert json.loads(tags["dataset.card.teacher_terms"])["decision"] == "allowed"
    assert json.loads(tags["dataset.card.rows"]) == {s: fetched_rows(tmp_path / "fetched", s) for s in SPLITS}
    # A short training run on the published revision, as distill's train step takes it.
    trained = train.run(train.TrainConfig(dataset=str(tmp_path / "fetched"), out=str(tmp_path / "adapter"),
                                          base_model=str(tiny_model_dir), batch_size=2, epochs=0.01, threads=2,
                                          checkpoint_every=0))  # fmt: skip
    assert trained.steps == 1 and trained.final_loss > 0
    assert json.loads((tmp_path / "adapter/training_summary.json").read_text())["dataset"]["dataset_rev"] == rev

    (docs / "library.txt").write_bytes(steer(TEXTS[3], "train"))
    with feedback_file.open("a") as f:  # one more reviewed summary arrives
        text = "The harbour ferry will run every twenty minutes at weekends from May, up from every half hour."
        f.write(json.dumps(fb("f2", text, "accepted", "2026-12-01T09:00:00+00:00")) + "\n")
    second = build(tmp_path, docs, feedback_file, repo, teacher_server, base_model_dir)
    assert second["requests"] == 1
    assert {k: v for k, v in second["splits"].items() if k in first["splits"]} == first["splits"]
    assert second["published"].dataset_rev != rev
    # Publishing the same content again changes nothing and names the same revision.
    again = publish.run(publish.PublishConfig(out=tmp_path / "again", examples=tmp_path / "out/examples",
                                              chunks=tmp_path / "out/documents", curated=tmp_path / "out/curated",
                                              summaries=tmp_path / "out/teacher", dataset_repo=str(repo)))  # fmt: skip
    assert (again.dataset_rev, again.dataset_commit, again.committed) == (
        second["published"].dataset_rev,
        second["published"].dataset_commit,
        False,
    )
    # The card's "new feedback" and the retrain trigger's count the same rows between the two revisions.
    card = json.loads((tmp_path / "out/published/card.json").read_text())
    assert card["feedback"] == {"rows": 3, "new_since_previous_revision": 1}
    from steps import check_triggers

    path = "data/summaries/feedback.jsonl"
    old, new = (check_triggers.read_at(check_triggers._dvc_fs(str(repo), r), path) for r in (rev, "HEAD"))
    cfg = check_triggers.TriggersConfig(out=tmp_path / "triggers", min_feedback_rows=1)
    check = check_triggers.check_feedback(old, new, first["published"].dataset_commit, cfg, "HEAD")
    assert check.fired and check.reason.startswith("feedback: 1 new row(s)")
