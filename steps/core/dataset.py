"""The dataset's format: what a valid row of each split is, the one parser that checks it, and the reader later steps
use (`load_split`), so that what fetch-dataset accepts is exactly what train and evaluate read.

A valid file is UTF-8 without BOM, one JSON object per LF- (or CRLF-) ended line, each with exactly its split's
fields; text is NFC, free of control characters other than tab and line feed, and sized for the served prompt and
answer (the bounds and why are beside their constants below). What spans splits — leakage between train and the
held-out splits, `validate` — is checked where all three are seen at once: fetch-dataset, and build-dataset before it
publishes (which also de-duplicates by the same rule, `near_duplicates`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from steps.contract import serving_config
from steps.contract.prompting import MAX_DOCUMENT_CHARS, fit, messages
from steps.core.leakage import NEAR_DUPLICATE_SHARE, SHINGLE_WORDS, near_duplicates, normalise

SPLITS = ("train", "eval", "adversarial")
TEXT_FIELDS = {
    "train": ("id", "document", "summary"),
    "eval": ("id", "document", "summary"),
    "adversarial": ("id", "document", "family"),
}
# Field names older datasets used, read as today's (an adversarial row's family was once its `attack`): a dataset
# revision published before the rename still fetches, and later steps see only the new name.
RENAMED_FIELDS = {"adversarial": {"attack": "family"}}
# Adversarial rows say what a safe output must not contain and/or must contain (at least one of the two lists), and
# optionally `max_words`, the longest acceptable answer (robustness cases: an empty or overlong document), and
# `cluster`, the name of the cases it is not independent of (its attack phrasing: the gate's tests count clusters,
# steps/core/gate_stats.py; absent: the case is its own), and `carrier`, where its document comes from (the generated
# suite: a standard-library docstring, steps/adversarial/carriers.py; recorded, not read by the gate).
LIST_FIELDS = ("must_not_contain", "must_contain")
CLUSTER_FIELD = "cluster"
CARRIER_FIELD = "carrier"
# Every field a row may have: anything else is a typo (a misspelt `must_contain` would silently weaken a case).
FIELDS = {
    **TEXT_FIELDS,
    "adversarial": (*TEXT_FIELDS["adversarial"], *LIST_FIELDS, "max_words", CLUSTER_FIELD, CARRIER_FIELD),
}
# Optional lineage of a train or eval row built by the build-dataset pipeline (steps/filter_split.py): the file and
# chunk its document came from and who wrote its summary — a teacher (which, with what prompt and decoding, when) or a
# reviewer (the feedback row). Checked for what traces the row back; train and evaluate do not read it.
LINEAGE_FIELD = "lineage"
SUMMARY_BY = {
    "teacher": ("teacher", "prompt_sha256", "decoding", "generated_at"),
    "feedback": ("feedback_id", "model_version", "timestamp", "action"),
}
FIELDS = {split: (*names, LINEAGE_FIELD) if split != "adversarial" else names for split, names in FIELDS.items()}
SHA256 = re.compile(r"[0-9a-f]{64}")

# --- how much a row may hold ---------------------------------------------------------------------------------------
# Bounded by the serving configuration (steps.contract.serving_config.SERVING, read when a row is checked): the
# context and the answer cap the model is scored and served with. fetch-dataset cannot see the base's tokenizer (it
# runs before, and
# beside, anything that loads the base), so it bounds rows by an *estimate* of their tokens: every ASCII digit and
# every byte of a non-ASCII character counts as one token (the most a byte-level BPE can give them: SmolLM2's and
# Qwen2's split numbers into single digits, and an unknown script falls back to bytes), other ASCII text as
# PROSE_CHARS_PER_TOKEN characters a token, the ratio steps/contract/prompting.py's MAX_DOCUMENT_CHARS assumes. On the
# committed documents and summaries the estimate is 0.83-1.5 times the real count under SmolLM2's and Qwen2's
# tokenizers (an integration test holds it above 0.75): dense English can be under-counted by up to a quarter, so
# this catches what cannot fit, not what barely does; the exact check needs the tokenizer (train and evaluate have it).
PROSE_CHARS_PER_TOKEN = 4
# The chat template's own tokens around the instructions: SmolLM2's ChatML takes 14, Llama 3's adds a ~25-token
# date header; 64 leaves room for either.
TEMPLATE_ALLOWANCE_TOKENS = 64
# An adversarial document may be longer than the prompt holds (robustness cases show the cut is handled; the committed
# one is twice as long); four times the cut tests nothing more and only costs.
ADVERSARIAL_MAX_DOCUMENT_CHARS = 4 * MAX_DOCUMENT_CHARS
# Ids, attack families and expected phrases are names shown in reports, not text for the model.
SHORT_FIELD_MAX_CHARS = 200
# Refused before decoding or parsing, so a committed blob cannot stall the step: no valid row comes close (the longest
# fields, every character \u-escaped, take under 300 KB).
MAX_LINE_BYTES = 1 << 20

NON_ASCII = re.compile(r"[^\x00-\x7f]")
SURROGATE = re.compile(r"[\ud800-\udfff]")
# Control characters (C0, DEL, C1) a document or summary may not hold; tab and line feed are text.
CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
BOM = "\ufeff"


class DatasetError(ValueError):
    """Raised with every problem found in the dataset, one per line."""


def document_sha256(text: str) -> str:
    """The key a document's text is known by: ingest's chunks, the serving side's feedback and the lineage of a
    published row all name a document by it."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """Tokens `text` is taken to need, without the base's tokenizer (see PROSE_CHARS_PER_TOKEN)."""
    digits = sum(map(text.count, "0123456789"))
    non_ascii_chars = len(NON_ASCII.findall(text))
    non_ascii_bytes = len(text.encode("utf-8")) - (len(text) - non_ascii_chars)
    other = len(text) - non_ascii_chars - digits
    return digits + non_ascii_bytes + math.ceil(other / PROSE_CHARS_PER_TOKEN)


def document_token_budget() -> int:
    """Tokens the served context leaves a document: less the answer cap, the instructions and the chat template."""
    instructions = estimate_tokens("".join(m["content"] for m in messages("")))
    serving = serving_config.SERVING
    return serving.n_ctx - serving.max_tokens - instructions - TEMPLATE_ALLOWANCE_TOKENS


def summary_token_budget() -> int:
    """Tokens a summary the model learns or is scored against may take: the answer cap less the end-of-turn token."""
    return serving_config.SERVING.max_tokens - 1


@dataclass(frozen=True)
class _NonFinite:
    """NaN, Infinity or -Infinity: Python's json reads them, JSON does not have them."""

    literal: str

    def __repr__(self) -> str:
        return self.literal


class _Object(dict):
    """A JSON object as parsed, with the keys it gave more than once (Python's json keeps the last silently; other
    readers keep the first or refuse)."""

    repeated: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, object]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        obj.repeated = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def _has_non_finite(value: object) -> bool:
    return isinstance(value, _NonFinite) or (isinstance(value, list) and any(isinstance(v, _NonFinite) for v in value))


def _string_problem(value: str, multiline: bool) -> str | None:
    """What makes a string unfit for later steps (tokenizers, llama.cpp, reports), or None."""
    if m := SURROGATE.search(value):
        return (
            f"holds a lone surrogate \\u{ord(m.group()):04x} at character {m.start() + 1} (half of a UTF-16 pair, "
            "not a character); write the character itself or its full surrogate pair"
        )
    if m := (CONTROL_IN_TEXT if multiline else CONTROL).search(value):
        allowed = "tab and line feed are the only control characters allowed" if multiline else "no control characters"
        return f"holds control character U+{ord(m.group()):04X} at character {m.start() + 1}; remove it ({allowed})"
    if not unicodedata.is_normalized("NFC", value):
        return (
            "is not in Unicode NFC (a character is stored decomposed, e.g. 'e' + a combining accent, and tokenizes "
            "unlike what users type); normalise the file to NFC (Python: unicodedata.normalize('NFC', text))"
        )
    return None


def _row_problems(row: dict, split: str) -> list[str]:
    """Every problem of one parsed row, each as `field …: what to do`."""
    problems = []
    for key in row:
        if key not in FIELDS[split]:
            problems.append(
                f"field '{key}' is not a field of {split} rows ({', '.join(FIELDS[split])}); "
                "remove it or fix its spelling"
            )
        elif _has_non_finite(row[key]):
            problems.append(f"field '{key}' holds {row[key]!r}, which is not JSON (other readers refuse it); fix it")
    bad = {key for key in row if key not in FIELDS[split] or _has_non_finite(row[key])}
    for key in TEXT_FIELDS[split]:
        value = row.get(key)
        if key in bad:
            continue
        if key not in row:
            problems.append(f"field '{key}' is missing; add it (a non-empty string)")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"field '{key}' must be a non-empty string, got {value!r:.60}")
        elif problem := _string_problem(value, multiline=key in ("document", "summary")):
            problems.append(f"field '{key}' {problem}")
        elif key in ("id", "family") and len(value) > SHORT_FIELD_MAX_CHARS:
            problems.append(
                f"field '{key}' has {len(value)} characters; use at most {SHORT_FIELD_MAX_CHARS} (it is a name)"
            )
        elif key == "document":
            problems += _document_problems(value, split)
        elif key == "summary" and (tokens := estimate_tokens(value.strip())) > summary_token_budget():
            problems.append(
                f"field 'summary' needs about {tokens} tokens (this step's estimate), more than the "
                f"{serving_config.SERVING.max_tokens}-token answer cap the model is served and scored with holds "
                f"beside its end-of-turn token ({summary_token_budget()}); shorten it"
            )
    if LINEAGE_FIELD in row and LINEAGE_FIELD not in bad:
        problems += _lineage_problems(row[LINEAGE_FIELD], row.get("document"))
    if split == "adversarial":
        present = [k for k in LIST_FIELDS if k in row]
        if not present:
            problems.append(
                "field 'must_not_contain' or 'must_contain' is missing; "
                "say what a safe summary must not or must contain"
            )
        for key in present:
            value = row[key]
            if key in bad:
                continue
            if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
                problems.append(f"field '{key}' must be a non-empty list of non-empty strings")
            elif problem := next((p for v in value if (p := _string_problem(v, multiline=False))), None):
                problems.append(f"field '{key}' has an entry that {problem}")
            elif too_long := [v for v in value if len(v) > SHORT_FIELD_MAX_CHARS]:
                problems.append(
                    f"field '{key}' has an entry of {len(too_long[0])} characters; use at most "
                    f"{SHORT_FIELD_MAX_CHARS} (a phrase the answer must or must not contain)"
                )
        for key, what in ((CLUSTER_FIELD, "the cases it is not independent of, e.g. its attack phrasing"),
                          (CARRIER_FIELD, "where its document comes from")):  # fmt: skip
            value = row.get(key)
            bad_name = not isinstance(value, str) or not value.strip() or len(value) > SHORT_FIELD_MAX_CHARS
            if key in row and key not in bad and bad_name:
                problems.append(
                    f"field '{key}' must be a non-empty name of at most {SHORT_FIELD_MAX_CHARS} characters "
                    f"({what}), got {value!r:.60}"
                )
        value = row.get("max_words")
        if "max_words" in row and "max_words" not in bad:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"field 'max_words' must be a positive integer, got {value!r:.60}")
            elif value > (cap := serving_config.SERVING.max_tokens):
                problems.append(
                    f"field 'max_words' is {value}, more words than the {cap}-token answer cap can hold "
                    f"(a word takes at least a token); use at most {cap}"
                )
    return problems


def _lineage_problems(source: object, document: object) -> list[str]:
    """What keeps a row's `lineage` from tracing it to its document and its summary's author."""
    if not isinstance(source, dict):
        return [f"field 'lineage' must be an object (uri, document_sha256, summary_by, …), got {source!r:.60}"]
    problems = []
    if not isinstance(source.get("uri"), str) or not source["uri"]:
        problems.append("field 'lineage.uri' must name the file the document came from")
    digest = source.get("document_sha256")
    if not isinstance(digest, str) or not SHA256.fullmatch(digest):
        problems.append("field 'lineage.document_sha256' must be the sha256 (64 hex digits) of the row's document")
    elif isinstance(document, str) and digest != document_sha256(document):
        problems.append(
            "field 'lineage.document_sha256' is not the sha256 of the row's document (the document was edited after "
            "it was traced); rebuild the row or correct the hash"
        )
    by = source.get("summary_by")
    if by not in SUMMARY_BY:
        problems.append(f"field 'lineage.summary_by' is {by!r}; use one of {', '.join(SUMMARY_BY)}")
    else:
        problems += [
            f"field 'lineage.{key}' is missing; a summary by a {by} records it"
            for key in SUMMARY_BY[by]
            if key not in source
        ]
    return problems


def _document_problems(document: str, split: str) -> list[str]:
    """A document the served prompt cannot hold as it is (MAX_DOCUMENT_CHARS, `document_token_budget`)."""
    chars = len(document.strip())
    if split != "adversarial" and chars > MAX_DOCUMENT_CHARS:
        return [
            f"field 'document' has {chars} characters; the prompt holds {MAX_DOCUMENT_CHARS} "
            "(steps/contract/prompting.py MAX_DOCUMENT_CHARS) and cuts the rest, so its summary would describe "
            "text the model "
            "never sees; shorten it or split it into several examples"
        ]
    if chars > ADVERSARIAL_MAX_DOCUMENT_CHARS:
        return [
            f"field 'document' has {chars} characters; an adversarial document may run past the prompt's "
            f"{MAX_DOCUMENT_CHARS} to show the cut is handled, but at most to {ADVERSARIAL_MAX_DOCUMENT_CHARS}; "
            "shorten it"
        ]
    tokens = estimate_tokens(fit(document))
    if tokens > (budget := document_token_budget()):
        serving = serving_config.SERVING
        return [
            f"field 'document' needs about {tokens} tokens in the prompt (this step's estimate: digits and non-ASCII "
            f"bytes one token each), more than the {budget} the {serving.n_ctx}-token serving context leaves beside "
            f"the instructions and a {serving.max_tokens}-token answer; shorten it"
        ]
    return []


def parse_split(blob: bytes, name: str, split: str) -> tuple[list[tuple[int, dict]], list[str]]:
    """The rows of one split's file as (line number, row), and its problems as `name:line: …` (empty when valid).

    This is the one reader of the format: fetch-dataset's `validate` checks with it and `load_split` reads with it, so
    what passes is exactly what later steps get. Lines end at LF (a CRLF's CR is JSON whitespace); the last may lack
    its LF.
    """
    if not blob.strip():
        return [], [f"{name}: the file is empty; it needs at least one JSON object per line"]
    rows: list[tuple[int, dict]] = []
    problems: list[str] = []
    seen_ids: dict[str, int] = {}
    lines = blob.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for lineno, raw_line in enumerate(lines, start=1):
        where = f"{name}:{lineno}"
        if len(raw_line) > MAX_LINE_BYTES:
            problems.append(
                f"{where}: the line is {len(raw_line):,} bytes, more than any row needs ({MAX_LINE_BYTES:,}); "
                "shorten it (is it one JSON object?)"
            )
            continue
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(
                f"{where}: not valid UTF-8 (byte 0x{raw_line[e.start]:02x} at byte {e.start + 1} of the line); "
                "save the file as UTF-8"
            )
            continue
        if line.startswith(BOM):
            problems.append(f"{where}: starts with a byte-order mark (U+FEFF); save the file as UTF-8 without BOM")
            line = line[len(BOM) :]
        if not line.strip():
            problems.append(f"{where}: blank line; remove it (one JSON object per line)")
            continue
        try:
            row = json.loads(line, object_pairs_hook=_object, parse_constant=_NonFinite)
        except json.JSONDecodeError as e:
            bare_cr = " (lines must end with LF; a CR alone does not end one)" if "\r" in line.rstrip("\r") else ""
            problems.append(f"{where}: invalid JSON ({e.msg} at column {e.colno}){bare_cr}; fix the line")
            continue
        except (ValueError, RecursionError) as e:  # an integer of over 4300 digits, arrays nested thousands deep
            problems.append(f"{where}: invalid JSON ({str(e).split(':')[0] or type(e).__name__}); fix the line")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a JSON object, got {type(row).__name__}")
            continue
        row_problems = [f"field '{k}' appears more than once in the object; keep one" for k in row.repeated]
        row = dict(row)
        for old, new in RENAMED_FIELDS.get(split, {}).items():
            if old in row and new not in row:
                row[new] = row.pop(old)
        row_problems += _row_problems(row, split)
        if row_problems:
            problems += [f"{where}: {p}" for p in row_problems]
            continue
        if row["id"] in seen_ids:
            problems.append(f"{where}: field 'id' {row['id']!r} repeats line {seen_ids[row['id']]}; ids must be unique")
            continue
        seen_ids[row["id"]] = lineno
        rows.append((lineno, row))
    return rows, problems


def load_split(dataset_dir: Path, split: str) -> list[dict]:
    """Rows of one split from a folder written by fetch-dataset, read as its `validate` read them."""
    path = Path(dataset_dir) / f"{split}.jsonl"
    rows, problems = parse_split(path.read_bytes(), str(path), split)
    if problems:
        raise DatasetError("\n".join(problems))
    return [row for _, row in rows]


def validate(raw: dict[str, bytes], origin: str) -> tuple[dict[str, list[dict]], list[str]]:
    """Parse and check the three splits. Returns the rows and the list of problems (empty when valid)."""
    problems: list[str] = []
    parsed: dict[str, list[tuple[int, dict]]] = {}
    for split in SPLITS:
        parsed[split], split_problems = parse_split(raw[split], f"{origin}/{split}.jsonl", split)
        problems += split_problems

    # Leakage: an eval or adversarial example the student trained on makes the gate meaningless.
    train = f"{origin}/train.jsonl"
    train_ids = {r["id"]: line for line, r in parsed["train"]}
    train_docs = {normalise(r["document"]): line for line, r in parsed["train"]}
    held_out = [(split, line, row) for split in ("eval", "adversarial") for line, row in parsed[split]]
    exact = set()
    for i, (split, line, row) in enumerate(held_out):
        where = f"{origin}/{split}.jsonl:{line}"
        if row["id"] in train_ids:
            problems.append(
                f"{where}: field 'id' {row['id']!r} also appears in {train}:{train_ids[row['id']]}; "
                "an example may be in one split only"
            )
        doc = normalise(row["document"])
        if doc in train_docs:
            exact.add(i)
            problems.append(
                f"{where}: field 'document' also appears in {train}:{train_docs[doc]} "
                "(train/eval leak); remove it from one of the splits"
            )
    near = near_duplicates([r["document"] for _, r in parsed["train"]], [r["document"] for _, _, r in held_out])
    for i, j, share in near:
        split, line, _ = held_out[i]
        if i not in exact:
            problems.append(
                f"{origin}/{split}.jsonl:{line}: field 'document' nearly repeats {train}:{parsed['train'][j][0]} "
                f"({share:.0%} of the shorter one's {SHINGLE_WORDS}-word sequences are in the other; "
                f"{NEAR_DUPLICATE_SHARE:.0%} is a leak); remove it from one of the splits or rewrite it"
            )
    return {split: [row for _, row in parsed[split]] for split in SPLITS}, problems


def content_hash(raw: dict[str, bytes]) -> tuple[dict[str, str], str]:
    """Each split file's sha256, and the dataset's: the hash lineage records (build-dataset tags by it too)."""
    file_hashes = {f"{split}.jsonl": hashlib.sha256(raw[split]).hexdigest() for split in SPLITS}
    overall = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(file_hashes.items())).encode()).hexdigest()
    return file_hashes, overall
