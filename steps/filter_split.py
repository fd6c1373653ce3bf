"""filter-split: the examples (curated summaries first, the teacher's for the rest), filtered, de-duplicated,
decontaminated and split by a stable hash of their document.

    python -m steps.filter_split --chunks out/chunks --curated out/curated --summaries out/summaries \
        --adversarial-file data/summaries/adversarial.jsonl --eval-share 0.2 --out out/examples

1. **Examples**: each ingested chunk with its curated summary (steps/feedback.py; which chunk a reviewed summary
   belongs to: `steps.core.curation.attach`, by file, chunk text or the whole file's text) if there is one, else the
   teacher's; a curated document that was not ingested (the serving side saw it) is an example of its own.
2. **Filters**, each counted by reason: `empty` (no summary, or one word), `truncated` (the teacher hit the answer
   cap, `finish_reason` length, before ending a sentence; one that ended sentences first and then ran on is cut back
   to as many of them as the summary bound holds — `trimmed`, counted and marked in its lineage: the prompt asks for
   one sentence, small teachers add more), `refusing` (an apology or refusal instead of a summary), `wrong-language`
   (not in its document's language, `wrong_language`), `length-ratio` (more words than the document: a copy, not a
   summary), `too-long` (over the answer cap the dataset's rows are held to, steps/core/dataset.py), `verbatim` (a
   span of the document copied word for word: an extract, not a summary) and `unfaithful` (names, numbers or content
   words the document does not support: `steps.core.faithfulness`, the rule evaluate's judge applies too; what each
   dropped summary lacked is in `dropped.jsonl` and counted by kind in `filters.json`). Curated summaries pass all
   but `empty` and `too-long`: a reviewer chose them.
3. **Split**: a document's split is decided by a hash of its file's sha256 (`split_of`), so all chunks of one file
   share a split and no document moves between splits when others are added or removed. A small build would often
   hold out nothing (4 documents at `--eval-share` 0.2: no eval document 41 % of the time), so at least
   `--min-eval-documents` (1) are held out: when the hash holds out fewer, the documents nearest the boundary (the
   lowest hash points) are held out too. That minimum is the one exception to stability: once the hash alone holds
   out enough (about `min-eval-documents / eval-share` documents), it decides alone. A build with no more documents
   than the minimum is refused, naming both settings.
   **Eval references**: a teacher's summary is a guess, and an eval reference is the answer the gate scores every
   model against; a wrong one (a small teacher's "48-hour pay freeze" for a 48-hour strike) rewards the model that
   repeats the mistake. So by default (`--eval-references curated`) only curated summaries — a reviewer's — are eval
   references: the minimum counts documents with one, and a teacher-summarised document held out for eval is left
   out of both splits (`teacher-eval-reference` in dropped.jsonl: not trained on either, so it can become an eval
   reference once reviewed). `--eval-references curated-or-teacher` lets the teacher's summaries be references too
   (evaluate then measures agreement with the teacher); the data card says which applied.
4. **De-duplication and decontamination**, by the rule fetch-dataset checks (`leakage.near_duplicates`: the
   same share of shared word shingles): exact (normalised text) and near duplicates within a split keep the first by
   id; a train row that repeats or nearly repeats an eval or adversarial document is dropped from train.

5. **Refusals and notes**: a split with fewer examples than `MIN_EXAMPLES` (train 2, eval 1) is refused, naming how
   many were kept, how many each reason dropped (with a few ids) and what to do, and nothing is written for publish.
   Train examples longer than train's default `--max-seq-len` (ingest sizes chunks for the served context, which is
   longer) are counted (`train_fit` in filters.json) and said on stdout, with the `-S max-seq-len=` that fits them;
   publish repeats it beside the training command and in the card. stdout also gives the drops by reason.

Produces in `--out`: `train.jsonl`, `eval.jsonl`, `adversarial.jsonl` (the dataset format of steps/core/dataset.py, each
train/eval row with its `lineage`), `dropped.jsonl` (every dropped example with its reason), `filters.json`
(counts per reason) and `result.json`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from steps.core import faithfulness
from steps.core.card import train_fit_line
from steps.core.cli import parse_config, timed, write_result
from steps.core.curation import attach
from steps.core.dataset import DatasetError, estimate_tokens, parse_split, summary_token_budget
from steps.core.faithfulness import MAX_SAME_LANGUAGE_PROB, REFUSAL, wrong_language
from steps.core.io import atomic_dir, read_jsonl, write_json, write_jsonl
from steps.core.leakage import NEAR_DUPLICATE_SHARE, near_duplicates, near_duplicates_within, normalise
from steps.pipeline import param

FILTERS = ("empty", "truncated", "refusing", "wrong-language", "length-ratio", "too-long", "verbatim", "unfaithful")
CURATED_FILTERS = ("empty", "too-long")
# Who may write an eval reference (see the module docstring).
EVAL_REFERENCES = ("curated", "curated-or-teacher")
TEACHER_IN_EVAL = "teacher-eval-reference"  # the dropped reason of a teacher-summarised eval document
# The fewest examples a split may hold for the build to publish. A floor, not a recommendation: it refuses the
# degenerate build (one example to train on, issue #39) while the trials the pages run (a folder of four documents,
# three of them reviewed) still publish; a dataset meant to improve a model needs hundreds.
MIN_EXAMPLES = {"train": 2, "eval": 1}
# train's --max-seq-len by default (the distill pipeline's parameter): a longer example has its document cut there.
TRAIN_MAX_SEQ_LEN = int(param("max-seq-len").local)
# A summary with more words than its document is a copy or a ramble.
MAX_LENGTH_RATIO = 1.0
MIN_SUMMARY_WORDS = 2
# Where a sentence ends: . ! or ? (closing quotes or brackets allowed), then space or the end.
SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")


def trim_to_sentences(summary: str) -> str | None:
    """A summary cut off at the answer cap, back to its complete sentences — as many as the dataset's summary bound
    holds (`too-long`); None if not even the first fits or it never ended one."""
    for end in reversed([m.end() for m in SENTENCE_END.finditer(summary)]):
        if estimate_tokens(kept := summary[:end].strip()) <= summary_token_budget():
            return kept
    return None


class SplitError(ValueError):
    """Raised when the build cannot give a valid dataset (a split ends empty, the adversarial file is invalid)."""


@dataclass
class FilterConfig:
    out: Path = field(metadata={"help": "folder to write the splits, dropped.jsonl and filters.json into"})
    chunks: Path = field(metadata={"help": "ingest's folder"})
    curated: Path = field(metadata={"help": "feedback's folder"})
    summaries: Path = field(metadata={"help": "teacher's folder"})
    adversarial_file: str = field(
        default="data/summaries/adversarial.jsonl",
        metadata={"help": "the hand-written adversarial split (kept as is; train is decontaminated against it)"},
    )
    eval_share: float = field(default=0.2, metadata={"help": "share of documents (by hash) held out for eval"})
    eval_references: str = field(
        default="curated",
        metadata={
            "help": "who may write eval references: curated (reviewed feedback only) or curated-or-teacher (the "
            "teacher's summaries too: evaluate then measures agreement with the teacher)"
        },
    )
    min_eval_documents: int = field(
        default=1,
        metadata={
            "help": "fewest documents held out for eval whatever --eval-share gives (those nearest the boundary); "
            "a build needs one document more"
        },
    )


@dataclass
class FilterResult:
    train_rows: int
    eval_rows: int
    adversarial_rows: int
    dropped: int
    eval_documents: int


def split_point(source_sha256: str) -> float:
    """Where a document falls in [0, 1), from its own hash: stable across rebuilds, whatever else is in the build."""
    return int(hashlib.sha256(f"split:{source_sha256}".encode()).hexdigest()[:16], 16) / 16**16


def split_of(source_sha256: str, eval_share: float) -> str:
    """'eval' or 'train' by the hash alone (`hold_out` adds the minimum)."""
    return "eval" if split_point(source_sha256) < eval_share else "train"


def references_problem(references: int, minimum: int, eval_references: str) -> str | None:
    """The refusal when fewer documents than `minimum` can be eval references, or None. scripts/build_dataset.py asks
    it before a build starts, with the reviewed summaries the feedback holds: at most that many can be references."""
    if references >= minimum:
        return None
    fix = (
        "add reviewed summaries (-S feedback=FILE: the serving side's feedback or outcomes), or let the teacher's "
        "summaries be eval references with -S eval-references=curated-or-teacher (evaluate then measures "
        "agreement with the teacher)"
        if eval_references == "curated"
        else "add documents (or feedback)"
    )
    return (
        f"{references} document(s) can be eval references (eval-references={eval_references}), but a build "
        f"holds out at least {minimum} for eval (--min-eval-documents / -S min-eval-documents={minimum}): {fix}"
    )


def settings_problems(eval_share: float, eval_references: str, min_eval_documents: int) -> list[str]:
    """What is wrong with the split's settings (checked by run, and by scripts/build_dataset.py before a build)."""
    problems = []
    if eval_references not in EVAL_REFERENCES:
        problems.append(f"--eval-references {eval_references!r}: use one of {', '.join(EVAL_REFERENCES)}")
    if not 0 < eval_share < 1:
        problems.append(f"--eval-share {eval_share}: use a share between 0 and 1 (e.g. 0.2)")
    if min_eval_documents < 1:
        problems.append(f"--min-eval-documents {min_eval_documents}: use 1 or more")
    return problems


def hold_out(keys: set[str], references: set[str], eval_share: float, minimum: int, eval_references: str) -> set[str]:
    """The documents (split keys) held out for eval: those the hash puts there, and more of those that can be eval
    references (`references`), lowest hash points first, until at least `minimum` of them are. SplitError when there
    are not that many, or none is left to train on."""
    if problem := references_problem(len(references), minimum, eval_references):
        raise SplitError(problem)
    held = {k for k in keys if split_point(k) < eval_share}
    for key in sorted(references - held, key=split_point):
        if len(held & references) >= minimum:
            break
        held.add(key)
    if not keys - held:
        raise SplitError(
            f"{len(keys)} document(s) passed the filters and all are held out for eval (eval-share {eval_share}, "
            f"at least {minimum} with references: -S min-eval-documents={minimum}), none is left to train on: add "
            "documents, or lower min-eval-documents"
        )
    return held


def filter_reason(summary: str, document: str, finish_reason: str, curated: bool) -> str | None:
    """The first filter `summary` fails, or None."""
    words = len(summary.split())
    checks = {
        "empty": lambda: words < MIN_SUMMARY_WORDS,
        "truncated": lambda: finish_reason == "length",
        "refusing": lambda: bool(REFUSAL.search(summary)),
        "wrong-language": lambda: wrong_language(summary, document),
        "length-ratio": lambda: words > MAX_LENGTH_RATIO * len(document.split()),
        "too-long": lambda: estimate_tokens(summary) > summary_token_budget(),
        "verbatim": lambda: normalise(summary).rstrip(".") in normalise(document),
        "unfaithful": lambda: not faithfulness.check(summary, document).faithful,
    }
    return next((r for r in FILTERS if (not curated or r in CURATED_FILTERS) and checks[r]()), None)


def unfaithful_kinds(summary: str, document: str) -> list[str]:
    """What an unfaithful summary lacks, by kind (one summary may lack several)."""
    found = faithfulness.check(summary, document)
    kinds = []
    if found.unsupported_facts:
        kinds.append("names-or-numbers")
    if found.content_words < faithfulness.MIN_CONTENT_WORDS:
        kinds.append("too-few-content-words")
    elif found.support < faithfulness.MIN_SUPPORT:
        kinds.append("content-words")
    return kinds


def can_be_reference(example: dict, eval_references: str) -> bool:
    """May this example's summary be an eval reference under `--eval-references`?"""
    return eval_references == "curated-or-teacher" or example["lineage"]["summary_by"] == "feedback"


def _examples(cfg: FilterConfig) -> list[dict]:
    documents = read_jsonl(cfg.chunks / "documents.jsonl")
    attached = attach(read_jsonl(cfg.curated / "curated.jsonl"), documents)
    if attached.problems:
        raise SplitError("the feedback's reviewed summaries do not attach:\n  " + "\n  ".join(attached.problems))
    curated = attached.by_chunk
    generated = {r["document_sha256"]: r for r in read_jsonl(cfg.summaries / "summaries.jsonl")}
    examples = []
    for doc in documents:
        key = doc["document_sha256"]
        source = {"uri": doc["source_uri"], "source_sha256": doc["source_sha256"], "document_sha256": key}
        source |= {"chunk": doc["chunk"], "chunks": doc["chunks"]}
        if key in curated:
            row = curated.pop(key)
            examples.append(_curated_example(doc["id"], doc["document"], source, row, split_key=doc["source_sha256"]))
        elif key in generated:
            g = generated[key]
            lineage = {k: g[k] for k in ("teacher", "prompt_sha256", "decoding", "generated_at", "finish_reason")}
            summary, finish = g["summary"], g["finish_reason"]
            if finish == "length" and (trimmed := trim_to_sentences(summary)):
                summary, finish, lineage["trimmed"] = trimmed, "stop", True
            examples.append(
                {
                    "id": doc["id"],
                    "document": doc["document"],
                    "summary": summary,
                    "lineage": {**source, "summary_by": "teacher", **lineage},
                    "_split_key": doc["source_sha256"],
                    "_finish": finish,
                }
            )
    for row in attached.unattached:  # documents only the serving side saw
        key = row["document_sha256"]
        source = {"uri": f"feedback:{row['feedback']['id']}", "source_sha256": key, "document_sha256": key}
        examples.append(_curated_example(f"feedback-{key[:12]}", row["document"], source, row, split_key=key))
    return sorted(examples, key=lambda e: e["id"])


def _curated_example(id_: str, document: str, source: dict, row: dict, split_key: str) -> dict:
    fb = row["feedback"]
    lineage = {k: fb[k] for k in ("action", "model_version", "timestamp")} | {"feedback_id": fb["id"]}
    return {
        "id": id_,
        "document": document,
        "summary": row["summary"],
        "lineage": {**source, "summary_by": "feedback", **lineage},
        "_split_key": split_key,
        "_finish": "stop",
    }


def _adversarial(path: str) -> tuple[bytes, list[dict]]:
    try:
        blob = Path(path).read_bytes()
    except OSError as e:
        raise SplitError(f"--adversarial-file {path}: {e}; the adversarial split is hand-written and kept") from e
    rows, problems = parse_split(blob, path, "adversarial")
    if problems:
        raise SplitError("\n".join(problems))
    return blob, [r for _, r in rows]


def too_small(
    small: list[str], splits: dict[str, list[dict]], dropped: list[dict], counts: Counter, cfg: FilterConfig
) -> str:
    """The refusal of a split below MIN_EXAMPLES: what was kept, what was dropped by which reason (a few ids each),
    and what to do."""
    kept = sum(map(len, splits.values()))
    ids: dict[str, list[str]] = {}
    for d in dropped:
        ids.setdefault(d["reason"].split(" ")[0], []).append(d["id"])
    why = "; ".join(
        f"{reason} {n} ({', '.join(ids[reason][:3])}{', …' if n > 3 else ''})" for reason, n in counts.most_common()
    )
    return (
        f"too few examples to publish: {', '.join(small)} (filter-split's MIN_EXAMPLES). Of {kept + len(dropped)} "
        f"examples {len(splits['train'])} train and {len(splits['eval'])} eval were kept and {len(dropped)} dropped"
        f"{': ' + why if why else ''} (--eval-share {cfg.eval_share}, --min-eval-documents {cfg.min_eval_documents}). "
        "Add documents; add reviewed summaries (-S feedback=FILE: a reviewer's summary passes every filter but "
        "empty and too-long); or point the teacher at a stronger model, whose summaries the filters keep "
        "(docs/dataset.md, Which teacher)"
    )


def train_fit(rows: list[dict], chunks: Path) -> dict:
    """How the train split fits train's default --max-seq-len: the served prompt's tokens (ingest counts them with the
    base's tokenizer; estimated for a document only the serving side saw) plus the summary's estimate and its end of
    turn. Ingest sizes chunks for the served context, which is longer, so an example can fit serving and be cut in
    training: said here, before anyone trains."""
    prompt = {d["document_sha256"]: d["prompt_tokens"] for d in read_jsonl(chunks / "documents.jsonl")}
    lengths = [
        prompt.get(r["lineage"]["document_sha256"], estimate_tokens(r["document"])) + estimate_tokens(r["summary"]) + 1
        for r in rows
    ]
    over = [n for n in lengths if n > TRAIN_MAX_SEQ_LEN]
    return {
        "max_seq_len": TRAIN_MAX_SEQ_LEN,
        "examples": len(rows),
        "examples_over": len(over),
        "longest_tokens": max(lengths, default=0),
    }


@timed
def run(cfg: FilterConfig) -> FilterResult:
    if problems := settings_problems(cfg.eval_share, cfg.eval_references, cfg.min_eval_documents):
        raise SplitError("invalid filter-split config:\n  " + "\n  ".join(problems))
    adversarial_blob, adversarial = _adversarial(cfg.adversarial_file)
    dropped: list[dict] = []
    kept: list[dict] = []
    unfaithful: Counter[str] = Counter()
    for ex in _examples(cfg):
        curated = ex["lineage"]["summary_by"] == "feedback"
        reason = filter_reason(ex["summary"], ex["document"], ex["_finish"], curated)
        if reason:
            row = {"id": ex["id"], "reason": reason, "summary": ex["summary"], "source": ex["lineage"]}
            if reason == "unfaithful":
                row["detail"] = faithfulness.check(ex["summary"], ex["document"]).reason()
                unfaithful.update(unfaithful_kinds(ex["summary"], ex["document"]))
            dropped.append(row)
        else:
            kept.append(ex)
    references = {ex["_split_key"] for ex in kept if can_be_reference(ex, cfg.eval_references)}
    keys = {ex["_split_key"] for ex in kept}
    eval_keys = hold_out(keys, references, cfg.eval_share, cfg.min_eval_documents, cfg.eval_references)
    splits: dict[str, list[dict]] = {"train": [], "eval": []}
    for ex in kept:
        held = ex.pop("_split_key") in eval_keys
        ex.pop("_finish")
        if held and not can_be_reference(ex, cfg.eval_references):
            dropped.append({"id": ex["id"], "reason": TEACHER_IN_EVAL, "split": "eval", "lineage": ex["lineage"]})
            continue
        splits["eval" if held else "train"].append(ex)

    def drop(split: str, keep: list[bool], reasons: dict[int, str]) -> None:
        for i, row in enumerate(splits[split]):
            if not keep[i]:
                dropped.append({"id": row["id"], "reason": reasons[i], "split": split, "lineage": row["lineage"]})
        splits[split] = [row for i, row in enumerate(splits[split]) if keep[i]]

    # Within each split: exact, then near duplicates keep the first (by id).
    for split, rows in splits.items():
        keep, reasons, seen = [True] * len(rows), {}, {}
        for i, row in enumerate(rows):
            text = normalise(row["document"])
            if text in seen:
                keep[i], reasons[i] = False, f"duplicate of {split} row {rows[seen[text]]['id']}"
            seen.setdefault(text, i)
        for i, j in near_duplicates_within([r["document"] for r in rows]).items():
            if keep[i]:
                keep[i], reasons[i] = False, f"near-duplicate of {split} row {rows[j]['id']}"
        drop(split, keep, reasons)
    # Decontamination: train loses what repeats a held-out document, exactly or nearly.
    held_out = [("eval", r) for r in splits["eval"]] + [("adversarial", r) for r in adversarial]
    held_text = {normalise(r["document"]): (s, r["id"]) for s, r in held_out}
    keep, reasons = [True] * len(splits["train"]), {}
    for i, row in enumerate(splits["train"]):
        if (hit := held_text.get(normalise(row["document"]))) is not None:
            keep[i], reasons[i] = False, f"duplicate of {hit[0]} row {hit[1]}"
    near = near_duplicates([r["document"] for _, r in held_out], [r["document"] for r in splits["train"]])
    for i, j, share in near:
        if keep[i]:
            keep[i], reasons[i] = False, f"near-duplicate of {held_out[j][0]} row {held_out[j][1]['id']} ({share:.0%})"
    drop("train", keep, reasons)

    counts = Counter(d["reason"].split(" ")[0] for d in dropped)
    if small := [f"{s} {len(rows)} (at least {MIN_EXAMPLES[s]})" for s, rows in splits.items() if
                 len(rows) < MIN_EXAMPLES[s]]:  # fmt: skip
        raise SplitError(too_small(small, splits, dropped, counts, cfg))
    fit = train_fit(splits["train"], cfg.chunks)
    filters = {
        "filters": {r: counts.get(r, 0) for r in FILTERS},
        "unfaithful": {k: unfaithful.get(k, 0) for k in ("names-or-numbers", "content-words", "too-few-content-words")},
        "faithfulness": {"min_support": faithfulness.MIN_SUPPORT, "min_content_words": faithfulness.MIN_CONTENT_WORDS},
        "eval_references": cfg.eval_references,
        "teacher_eval_references_left_out": counts.get(TEACHER_IN_EVAL, 0),
        "deduplication": {r: counts.get(r, 0) for r in ("duplicate", "near-duplicate")},
        "trimmed": sum(bool(r["lineage"].get("trimmed")) for rows in splits.values() for r in rows),
        "language": {"detector": "py3langid", "max_same_language_prob": MAX_SAME_LANGUAGE_PROB},
        "eval_share": cfg.eval_share,
        "min_eval_documents": cfg.min_eval_documents,
        "eval_documents": len(eval_keys),
        "max_length_ratio": MAX_LENGTH_RATIO,
        "train_fit": fit,
        "near_duplicate_share": NEAR_DUPLICATE_SHARE,
    }
    result = FilterResult(len(splits["train"]), len(splits["eval"]), len(adversarial), len(dropped), len(eval_keys))
    with atomic_dir(cfg.out) as tmp:
        for split, rows in splits.items():
            write_jsonl(tmp / f"{split}.jsonl", rows)
        (tmp / "adversarial.jsonl").write_bytes(adversarial_blob)
        write_jsonl(tmp / "dropped.jsonl", dropped)
        write_json(tmp / "filters.json", filters)
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(FilterConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (SplitError, DatasetError) as e:
        print(f"filter-split: {e}", file=sys.stderr)
        return 1
    print(f"{result.train_rows} train, {result.eval_rows} eval ({result.eval_documents} document(s) held out: "
          f"--eval-share {cfg.eval_share} by hash, at least --min-eval-documents {cfg.min_eval_documents}), "
          f"{result.adversarial_rows} adversarial; {result.dropped} dropped ({cfg.out}/dropped.jsonl)")  # fmt: skip
    filters = json.loads((cfg.out / "filters.json").read_text())
    by_reason = {r: n for r, n in {**filters["filters"], **filters["deduplication"]}.items() if n}
    if left_out := filters["teacher_eval_references_left_out"]:
        by_reason[TEACHER_IN_EVAL] = left_out
    if by_reason:
        print("dropped by reason: " + ", ".join(f"{r} {n}" for r, n in by_reason.items()))
    if line := train_fit_line(filters["train_fit"]):
        print(f"filter-split: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
