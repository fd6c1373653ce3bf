"""feedback: the serving side's curated summaries, merged into training data; an edited summary supersedes the model's.

    python -m steps.feedback --feedback data/feedback/feedback.jsonl --out out/curated

`--feedback` is a JSONL file (a path or an s3:// URI; empty: none) the serving side appends to, or a reviewer writes,
one row per reviewed summary: `id`, `document` (the text the model summarised: a chunk, or a whole file's text) or
`file` (the file's path relative to the documents folder), `summary` (what the model wrote, or the reviewer),
`model_version`, `timestamp` (ISO 8601), `action` (accepted | edited | rejected) and, when edited, `edited_summary`. Per
document (its `file`, else its text whatever the spacing: `steps.core.curation.text_key`) the curated summary is the
latest edit, else the latest accepted summary; a rejected summary teaches nothing and leaves the document to the
teacher. Which ingested chunk a curated summary belongs to is decided later, by `steps.core.curation.attach`, where the
chunks are known (teacher, filter-split).

A reviewer's summary longer than the answer cap every summary is held to (`steps.core.dataset.summary_token_budget`,
estimated tokens) is refused, naming the row and the cap: a summary someone wrote is never dropped silently. From an
outcomes file (the serving side's, unattended) it is named on stderr instead and left to filter-split's `too-long`.

Produces in `--out`: `curated.jsonl` (`document_sha256`, `document`, `summary`, `feedback` = the row it came from),
`feedback.jsonl` (the rows read, each once: publish puts it beside the dataset) and `result.json` (rows read, per
action, superseded). A malformed row stops the step with every problem by line.

`--feedback` may also be the serving side's outcomes file (steps/core/outcomes.py's records, told apart by their
`request_id`): each record that carries its `document` and `summary` is a feedback row (`from_outcome`, the one
mapping), so what readers accepted or edited online trains the next model; records without them only count online.

What counts as a feedback row, and so what is new since a revision, is defined once
(`steps.core.card.feedback_rows`): the
retrain trigger (steps/check_triggers.py) counts new rows in the published `feedback.jsonl` by it, and so does the data
card (steps/publish.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from steps.core import outcomes
from steps.core.card import FEEDBACK_FILE
from steps.core.cli import parse_config, timed, write_result
from steps.core.curation import text_key
from steps.core.dataset import document_sha256, estimate_tokens, summary_token_budget
from steps.core.io import atomic_dir, is_uri, write_jsonl

CURATED_FILE = "curated.jsonl"

ACTIONS = ("accepted", "edited", "rejected")
REQUIRED = ("id", "summary", "model_version", "timestamp", "action")
# A row names its document by one of these (steps.core.curation says how each is matched).
NAMED_BY = ("document", "file")


class FeedbackError(ValueError):
    """Raised with every malformed feedback row, one per line."""


@dataclass
class FeedbackConfig:
    out: Path = field(metadata={"help": "folder to write curated.jsonl into"})
    feedback: str = field(
        default="", metadata={"help": "feedback JSONL (path or s3:// URI) from the serving side; empty: none"}
    )


@dataclass
class FeedbackResult:
    rows: int
    accepted: int
    edited: int
    rejected: int
    superseded: int
    curated: int


def _read(location: str) -> bytes:
    if is_uri(location):
        import fsspec

        with fsspec.open(location, "rb") as f:
            return f.read()
    return Path(location).read_bytes()


def parse(blob: bytes, name: str) -> list[dict]:
    """The rows of a feedback file; raises FeedbackError naming every bad line and field."""
    rows, problems = [], []
    for lineno, line in enumerate(blob.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: invalid JSON ({e.msg} at column {e.colno}); fix the line")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a JSON object")
            continue
        bad = [f"field '{k}' is missing or not a non-empty string" for k in REQUIRED if not _text(row.get(k))]
        if not any(_text(row.get(k)) for k in NAMED_BY):
            bad.append("fields 'document' and 'file' are both missing; give the text summarised as 'document', or the "
                       "file's path relative to the documents folder as 'file'")  # fmt: skip
        if _text(row.get("action")) and row["action"] not in ACTIONS:
            bad.append(f"field 'action' is {row['action']!r}; use one of {', '.join(ACTIONS)}")
        if row.get("action") == "edited" and not _text(row.get("edited_summary")):
            bad.append("field 'edited_summary' is missing; an edited row carries the reviewer's summary")
        if _text(row.get("timestamp")):
            try:
                datetime.fromisoformat(row["timestamp"])
            except ValueError:
                bad.append(f"field 'timestamp' {row['timestamp']!r} is not ISO 8601 (2026-12-01T09:30:00+00:00)")
        problems += [f"{where}: {b}" for b in bad]
        if not bad:
            rows.append(row)
    if problems:
        raise FeedbackError("\n".join(problems))
    return rows


def from_outcome(outcome: outcomes.Outcome) -> dict | None:
    """An online outcome as a feedback row, or None when the record does not carry the document and the summary."""
    if outcome.document is None or outcome.summary is None:
        return None
    row = {
        "id": outcome.request_id,
        "document": outcome.document,
        "summary": outcome.summary,
        "model_version": outcome.version,
        "timestamp": outcome.time.isoformat(),
        "action": outcome.outcome,
    }
    if outcome.edited_summary is not None:
        row["edited_summary"] = outcome.edited_summary
    return row


def is_outcomes(blob: bytes) -> bool:
    """An outcomes file (steps/core/outcomes.py) rather than a feedback file: its first row has a `request_id`."""
    for line in blob.decode("utf-8", errors="replace").splitlines():
        if line.strip():
            try:
                return "request_id" in json.loads(line)
            except (ValueError, TypeError):
                return False
    return False


def read_rows(blob: bytes, name: str) -> list[dict]:
    """The feedback rows of a feedback file or of an outcomes file; FeedbackError naming every bad line."""
    if not is_outcomes(blob):
        return parse(blob, name)
    try:
        records = outcomes.parse_outcomes(blob, name)
    except outcomes.OutcomesError as e:
        raise FeedbackError(str(e)) from e
    return [row for row in map(from_outcome, records) if row is not None]


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _when(row: dict) -> datetime:
    moment = datetime.fromisoformat(row["timestamp"])
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.now().astimezone().tzinfo)


def _document(row: dict) -> str:
    """The key rows about one document share: its file, else its text whatever the spacing."""
    return f"file:{row['file']}" if _text(row.get("file")) else text_key(row["document"])


def curated_summary(row: dict) -> str:
    return (row["edited_summary"] if row["action"] == "edited" else row["summary"]).strip()


def merge(rows: list[dict]) -> tuple[list[dict], int]:
    """Per document, the curated row: the latest edit, else the latest acceptance. Returns them (in first-seen
    order) and how many rows they superseded. `document_sha256` is the key of the row's text (a chunk's, when the
    serving side saw a chunk); a row naming only its file has none."""
    by_document: dict[str, list[dict]] = {}
    for row in rows:
        if row["action"] != "rejected":
            by_document.setdefault(_document(row), []).append(row)
    curated = []
    for candidates in by_document.values():
        edits = [r for r in candidates if r["action"] == "edited"]
        best = max(edits or candidates, key=_when)
        text = best.get("document", "").strip()
        curated.append(
            {
                "document_sha256": document_sha256(text) if text else None,
                "document": text,
                "summary": curated_summary(best),
                "feedback": best,
            }
        )
    return curated, sum(len(c) for c in by_document.values()) - len(curated)


def too_long(curated: list[dict], name: str) -> list[str]:
    """Each curated summary over the answer cap, named by its row, with the cap and how short to make it."""
    cap = summary_token_budget()
    found = []
    for row in curated:
        tokens, words = estimate_tokens(row["summary"]), len(row["summary"].split())
        if tokens > cap:
            field_ = "edited_summary" if row["feedback"]["action"] == "edited" else "summary"
            found.append(
                f"{name}: row id {row['feedback']['id']!r}: its {field_} ({words} words) needs about {tokens} tokens "
                f"(estimated), over the answer cap of {cap} every summary is held to (the served max_tokens less the "
                f"end-of-turn token); shorten it to about {max(1, words * cap // tokens)} words"
            )
    return found


@timed
def run(cfg: FeedbackConfig) -> FeedbackResult:
    blob = _read(cfg.feedback) if cfg.feedback else b""
    rows = read_rows(blob, cfg.feedback) if blob else []
    curated, superseded = merge(rows)
    if over := too_long(curated, cfg.feedback):
        if not is_outcomes(blob):
            raise FeedbackError("\n".join(over))
        for line in over:  # unattended rows: named here, dropped and counted by filter-split (too-long)
            print(f"feedback: {line}; filter-split drops it (too-long)", file=sys.stderr)
    count = {a: sum(r["action"] == a for r in rows) for a in ACTIONS}
    result = FeedbackResult(len(rows), count["accepted"], count["edited"], count["rejected"], superseded, len(curated))
    with atomic_dir(cfg.out) as tmp:
        write_jsonl(tmp / CURATED_FILE, curated)
        # What publish puts beside the dataset, and the retrain trigger counts: feedback rows (an outcomes file's
        # records as their feedback rows, the ones without text left out).
        lines = (
            [json.dumps(r, sort_keys=True) for r in rows]
            if is_outcomes(blob)
            else [line.strip() for line in blob.decode("utf-8").splitlines() if line.strip()]
        )
        distinct = dict.fromkeys(lines)
        (tmp / FEEDBACK_FILE).write_text("".join(f"{line}\n" for line in distinct))
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(FeedbackConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (FeedbackError, OSError) as e:
        print(f"feedback: {e}", file=sys.stderr)
        return 1
    print(f"{result.curated} curated summaries from {result.rows} feedback rows ({result.superseded} superseded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
