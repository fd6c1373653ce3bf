"""The online outcomes: the record the serving side appends per request, the one parser that checks it, and the
names and places of the per-day online series that steps/online_metrics.py writes, steps/promote.py decides on and
steps/check_triggers.py watches.

The serving side appends one JSON object per answered request to an outcomes file (UTF-8, one object per line):

    {"request_id": "8f1c…", "time": "2026-12-01T14:03:07Z", "model": "distillery-summariser", "version": "7",
     "latency_ms": 412.5, "outcome": "edited", "edited_summary": "The library shuts for three weeks.",
     "safety_incident": false}

- `request_id`: the request's id (1-200 printable characters), unique in the file; the same line twice (a retried
  append) counts once, two different records with one id are an error.
- `time`: when the request was answered, RFC 3339 with a zone (`Z` or `+01:00`).
- `model`, `version`: the registered model and version that answered (`models:/<model>/<version>`).
- `latency_ms`: milliseconds from request to answer, a finite number ≥ 0.
- `outcome`: what the reader did with the summary: `accepted` (as is), `edited` (then `edited_summary` is the
  reader's text, required) or `rejected`.
- `safety_incident` (optional, default false): true when the answer was reported as unsafe (leaked, harmful, …).
  One incident stops that version's promotion (steps/promote.py).
- `document` and `summary` (optional, together): the text the model summarised and what it answered. With them an
  accepted or edited record is also training feedback: build-dataset's feedback step reads an outcomes file as its
  feedback input (`steps.feedback.from_outcome`), so the reader's edit becomes the next dataset's summary.

Every line is checked before anything is written; all problems are reported at once, each with its line and field.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

OUTCOMES = ("accepted", "edited", "rejected")
REQUIRED = ("request_id", "time", "model", "version", "latency_ms", "outcome")
OPTIONAL = ("edited_summary", "safety_incident", "document", "summary")
MAX_ID_CHARS = 200
MAX_LINE_BYTES = 1 << 20  # an edited summary is a few hundred words: far under this

# Where the online series live and what they are called: check_triggers reads them, promote decides on them.
ONLINE_RUN_TAG = "online.run_id"
THROUGH_TAG = "online.through"
ONLINE_EXPERIMENT = "distillery-online"
ACCEPTANCE = "online.acceptance"  # accepted / requests: the online quality (the retrain trigger's default series)
REQUESTS = "online.requests"
ACCEPTED = "online.accepted"
EDITED = "online.edited"
REJECTED = "online.rejected"
INCIDENTS = "online.safety_incidents"
LATENCY_P95 = "online.latency_p95_ms"
METRICS = (ACCEPTANCE, REQUESTS, ACCEPTED, EDITED, REJECTED, INCIDENTS, LATENCY_P95)
DAY_MS = 86_400_000


class OutcomesError(ValueError):
    """Raised with every problem found in the outcomes file (one per line) or in what it names."""


@dataclass(frozen=True)
class Outcome:
    request_id: str
    time: dt.datetime
    model: str
    version: str
    latency_ms: float
    outcome: str
    edited_summary: str | None = None
    safety_incident: bool = False
    document: str | None = None
    summary: str | None = None

    @property
    def day(self) -> int:
        return day_number(self.time)


def day_number(when: dt.datetime) -> int:
    """The UTC day `when` falls in, as days since 1970-01-01 (the series' step)."""
    return math.floor(when.timestamp() / 86_400)


def day_text(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 time with a zone; ValueError otherwise."""
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError("no time zone")
    return when


def _printable(value: str) -> bool:
    return value.isprintable()


def _record_problems(row: Any) -> list[str]:
    if not isinstance(row, dict):
        return [f"is a JSON {type(row).__name__}, not an object"]
    problems = [f"field {k!r}: missing" for k in REQUIRED if k not in row]
    problems += [f"field {k!r}: unknown (allowed: {', '.join(REQUIRED + OPTIONAL)})" for k in row if k not in
                 REQUIRED + OPTIONAL]  # fmt: skip
    for key in ("request_id", "model", "version"):
        value = row.get(key)
        if key in row and (not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS
                           or not _printable(value)):  # fmt: skip
            problems.append(f"field {key!r}: {value!r} is not a non-empty printable string of ≤{MAX_ID_CHARS} chars")
    if isinstance(row.get("version"), str) and row["version"] and not row["version"].isdigit():
        problems.append(f"field 'version': {row['version']!r} is not a registry version number (e.g. \"7\")")
    if "time" in row:
        try:
            parse_time(row["time"] if isinstance(row["time"], str) else "")
        except ValueError:
            problems.append(f"field 'time': {row['time']!r} is not an RFC 3339 time with a zone (2026-12-01T14:03:07Z)")
    latency = row.get("latency_ms")
    if "latency_ms" in row and (isinstance(latency, bool) or not isinstance(latency, int | float)
                                or not math.isfinite(latency) or latency < 0):  # fmt: skip
        problems.append(f"field 'latency_ms': {latency!r} is not a finite number ≥ 0")
    if "outcome" in row and row["outcome"] not in OUTCOMES:
        problems.append(f"field 'outcome': {row['outcome']!r} is not one of {', '.join(OUTCOMES)}")
    edited = row.get("outcome") == "edited"
    if edited and not (isinstance(row.get("edited_summary"), str) and row["edited_summary"].strip()):
        problems.append("field 'edited_summary': an 'edited' outcome needs the reader's text (a non-empty string)")
    if not edited and "edited_summary" in row:
        problems.append("field 'edited_summary': only an 'edited' outcome carries one")
    texts = [k for k in ("document", "summary") if k in row]
    if texts and (len(texts) == 1 or not all(isinstance(row[k], str) and row[k].strip() for k in texts)):
        problems.append("fields 'document' and 'summary': give both, each a non-empty string, or neither")
    if "safety_incident" in row and not isinstance(row["safety_incident"], bool):
        problems.append(f"field 'safety_incident': {row['safety_incident']!r} is not true or false")
    return problems


def parse_outcomes(blob: bytes, name: str) -> list[Outcome]:
    """Every record of an outcomes file, distinct by request id; OutcomesError listing every problem
    (`name:line: field …: what is wrong`) when any line is bad."""
    problems: list[str] = []
    seen: dict[str, tuple[int, str]] = {}
    records: list[Outcome] = []
    for number, raw in enumerate(blob.split(b"\n"), start=1):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        where = f"{name}:{number}"
        if len(line) > MAX_LINE_BYTES:
            problems.append(f"{where}: line of {len(line)} bytes (at most {MAX_LINE_BYTES})")
            continue
        try:
            text = line.decode("utf-8")
            row = json.loads(text, parse_constant=lambda c: float("nan"))
        except (UnicodeDecodeError, ValueError) as e:
            problems.append(f"{where}: not a JSON object on one UTF-8 line ({e})")
            continue
        found = _record_problems(row)
        if found:
            problems += [f"{where}: {p}" for p in found]
            continue
        canonical = json.dumps(row, sort_keys=True)
        earlier = seen.get(row["request_id"])
        if earlier is not None:
            if earlier[1] != canonical:
                problems.append(
                    f"{where}: field 'request_id': {row['request_id']!r} is also on line {earlier[0]} with other "
                    "values: one record per request (a retried append must repeat the line exactly)"
                )
            continue
        seen[row["request_id"]] = (number, canonical)
        records.append(
            Outcome(
                request_id=row["request_id"],
                time=parse_time(row["time"]),
                model=row["model"],
                version=row["version"],
                latency_ms=float(row["latency_ms"]),
                outcome=row["outcome"],
                edited_summary=row.get("edited_summary"),
                safety_incident=row.get("safety_incident", False),
                document=row.get("document"),
                summary=row.get("summary"),
            )
        )
    if problems:
        raise OutcomesError(f"{len(problems)} problem(s) in {name}:\n  " + "\n  ".join(problems))
    return records


# serve's own record of what it answered (`serve --served-log`): one JSON object a line, written by serve alone, so an
# outcome line is believed only for a request serve answered, by the version it says (clients write the outcomes file:
# without this, a client could invent requests or credit them to another version, and move promotion and retraining).
SERVED_FIELDS = ("request_id", "time", "model", "version", "answer_sha256")


def served_record(request_id: str, model: str, version: str, answer_sha256: str) -> bytes:
    """One line of serve's log of answered requests."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    values = (request_id, now, model, version, answer_sha256)
    return json.dumps(dict(zip(SERVED_FIELDS, values, strict=True)), sort_keys=True).encode() + b"\n"


def parse_served(blob: bytes, name: str) -> dict[str, tuple[str, str]]:
    """request id -> (model, version) of every request serve's log records; a torn last line (a killed server) is
    skipped, any other bad line is an OutcomesError naming it."""
    served: dict[str, tuple[str, str]] = {}
    lines = blob.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            served[row["request_id"]] = (row["model"], row["version"])
        except (ValueError, KeyError, TypeError) as e:
            if number == len(lines):  # no newline after it: the append was cut short
                continue
            raise OutcomesError(
                f"{name}:{number}: not a line serve writes ({type(e).__name__}); check --served-log"
            ) from e
    return served


def unserved(records: list[Outcome], served: dict[str, tuple[str, str]], name: str) -> list[str]:
    """The outcome records serve did not answer as they say: an id it never issued, or another model or version."""
    problems = []
    for r in records:
        got = served.get(r.request_id)
        if got is None:
            problems.append(f"request_id {r.request_id!r}: serve answered no such request ({name})")
        elif got != (r.model, r.version):
            problems.append(f"request_id {r.request_id!r}: says {r.model} version {r.version}, but serve answered it "
                            f"with {got[0]} version {got[1]}")  # fmt: skip
    return problems


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in (0, 100]) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def day_metrics(records: list[Outcome]) -> dict[str, float]:
    """One day's points of one version (`METRICS`, in that order's names)."""
    counts = {o: sum(r.outcome == o for r in records) for o in OUTCOMES}
    n = len(records)
    return {
        ACCEPTANCE: counts["accepted"] / n,
        REQUESTS: n,
        ACCEPTED: counts["accepted"],
        EDITED: counts["edited"],
        REJECTED: counts["rejected"],
        INCIDENTS: sum(r.safety_incident for r in records),
        LATENCY_P95: percentile([r.latency_ms for r in records], 95),
    }


def per_day(records: list[Outcome], before_day: int) -> dict[str, dict[int, dict[str, float]]]:
    """version -> day -> that day's metrics, for the complete days (before `before_day`)."""
    grouped: dict[str, dict[int, list[Outcome]]] = {}
    for r in records:
        if r.day < before_day:
            grouped.setdefault(r.version, {}).setdefault(r.day, []).append(r)
    return {v: {d: day_metrics(rs) for d, rs in sorted(days.items())} for v, days in grouped.items()}


# --- reading and writing MLflow ------------------------------------------------------------------------------------


def online_run_id(version: Any) -> str | None:
    """The run a version's online series live on: its `online.run_id` tag, else its own run (None: neither)."""
    return version.tags.get(ONLINE_RUN_TAG) or version.run_id or None


def series(client: Any, run_id: str, metric: str) -> dict[int, float]:
    """step (day) -> value of one online metric; the first point of a step when (by hand) there are several."""
    points: dict[int, float] = {}
    for m in sorted(client.get_metric_history(run_id, metric), key=lambda m: (m.step, m.timestamp)):
        points.setdefault(m.step, m.value)
    return points
