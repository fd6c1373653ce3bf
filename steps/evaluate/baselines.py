"""The extractive baselines: answers a program without a model gives, scored on the eval split beside the contenders.
A candidate that cannot beat them has learnt nothing a summariser needs (the gate's `rougeL_vs_<baseline>` checks).

- `lead_sentence`: the document's first sentence (lead-1, the first baseline every summarisation paper reports; on
  news-like text it is hard to beat, since writers put the point first).
- `lead_words`: the document's first LEAD_WORDS (25) words, cut mid-sentence if need be: the first words cut to the
  reference length. 25 is the median length of the committed references (eval 20–27 words, median 25; train 21–28,
  median 25), inside the serving contract's 30, so the baseline is as long as the answers it is held against and
  neither wins nor loses ROUGE-L F1 by length alone.
- `whole_document`: the document copied back. It fails every length bound; it is scored so that the report shows
  what a copier's ROUGE looks like (recall 1, precision low).

Free to compute and deterministic: no model, no cache.
"""

from __future__ import annotations

import re
from collections.abc import Callable

LEAD_WORDS = 25
# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) before white space and a capital,
# digit or opening quote: "£3.4 million" and "e.g. the" do not end one.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"'’”)\]]*\s+(?=[\"'‘“(\[]?[A-Z0-9£$€])")


def lead_sentence(document: str) -> str:
    """The document's first sentence (the whole document when it has no sentence break)."""
    text = " ".join(document.split())
    return SENTENCE_END.split(text, maxsplit=1)[0].strip()


def lead_words(document: str) -> str:
    """The document's first LEAD_WORDS words."""
    return " ".join(document.split()[:LEAD_WORDS])


def whole_document(document: str) -> str:
    """The document, white space folded."""
    return " ".join(document.split())


BASELINES: dict[str, Callable[[str], str]] = {
    "lead_sentence": lead_sentence,
    "lead_words": lead_words,
    "whole_document": whole_document,
}


def answers(name: str, documents: list[str]) -> list[dict]:
    """Baseline `name`'s answers to `documents`, as a contender's outputs (`text`, `stopped`: a program always
    stops)."""
    make = BASELINES[name]
    return [{"text": make(d), "stopped": True} for d in documents]
