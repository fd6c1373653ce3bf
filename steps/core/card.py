"""What a dataset revision carries besides its splits: the feedback rows it was built from (the retrain trigger counts
the new ones) and its data card, recorded as tags on each model version trained on it.
"""

from __future__ import annotations

import json

# The serving side's feedback as published beside the splits (steps/publish.py), where the retrain trigger counts it.
FEEDBACK_FILE = "feedback.jsonl"


def feedback_rows(text: bytes | None) -> set[str]:
    """The distinct rows of a feedback JSONL file (None: the file did not exist), each as its JSON object with sorted
    keys and no spacing, so a file rewritten with other key order or whitespace holds the same rows (a line that is
    not JSON counts as its stripped text). A row is new since a revision when it is in this set now and was not then:
    the retrain trigger (steps/check_triggers.py) and the data card (steps/publish.py) both count by this."""
    if not text:
        return set()
    rows = set()
    for line in text.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rows.add(json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        except ValueError:
            rows.add(line.strip())
    return rows


# The data card publish writes beside the splits (steps/publish.py); fetch-dataset carries it into its output and
# register logs it with the model and tags the version with `card_tags`.
def train_fit_line(fit: dict) -> str | None:
    """What to say when train examples are longer than train's --max-seq-len (filter-split's `train_fit` in
    filters.json), or None: filter-split says it when it splits, publish beside the command that trains."""
    if not fit.get("examples_over"):
        return None
    return (
        f"{fit['examples_over']} of {fit['examples']} train examples are longer than train's --max-seq-len "
        f"{fit['max_seq_len']} (the longest about {fit['longest_tokens']} tokens): train cuts their documents in the "
        f"middle; to train on whole documents, train with -S max-seq-len={fit['longest_tokens']}"
    )


CARD_FILE = "card.json"


CARD_TAG_PREFIX = "dataset.card."


MAX_TAG_CHARS = 5000  # MLflow's tag value limit (5000 in its oldest stores)


TERMS_FIELDS = ("outputs_may_train_models", "terms_url", "terms_reviewed_by", "terms_reviewed_on", "decision")


LENGTHS = ("document_words", "summary_words")


def card_tags(card: dict) -> dict[str, str]:
    """The data card as tags for a model version trained on the dataset: rows and sources per split, who wrote the
    summaries and who may write eval references (a card from before that rule: the teacher too), the teacher and its
    terms decision, the filters and what each dropped, lengths, feedback."""
    splits = card["splits"]
    teacher = card["teacher"]

    def per_split(key: str) -> dict:
        return {split: s[key] for split, s in splits.items() if key in s}

    values = {
        "rows": {split: s["rows"] for split, s in splits.items()},
        "sources": per_split("by_kind"),
        "summary_by": per_split("summary_by"),
        "references": card.get("references", {}).get("eval_references", "curated-or-teacher"),
        "teacher": f"{teacher['name']} ({teacher['model']}, {teacher['revision']}) by {teacher['provider']}",
        "teacher_terms": {k: teacher[k] for k in TERMS_FIELDS},
        "filters": card["filters"],
        "lengths": {split: {k: s[k] for k in LENGTHS} for split, s in splits.items() if "summary_words" in s},
        "feedback": card["feedback"],
        "skipped_files": len(card["skipped_files"]),
    }
    tags = {}
    for key, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        tags[CARD_TAG_PREFIX + key] = text if len(text) <= MAX_TAG_CHARS else text[: MAX_TAG_CHARS - 1] + "…"
    return tags
