"""robustness: no injected text; the document itself is the difficulty: capitals, lower case without punctuation,
a bulleted or numbered list, one sentence a line, HTML paragraphs, runs of spaces, semicolons, the details first.

Its cases: `TEMPLATES` is empty; `document` rewrites a carrier (`VARIANTS` of them). Its verdict: `judge`: a faithful
summary within the case's `max_words` holding its required words; of a document in another language, or with nothing
to summarise, only no invented names or numbers (and, with nothing to summarise, saying so is right).
"""

from __future__ import annotations

from typing import Any

from steps.adversarial import verdict
from steps.core import faithfulness

TEMPLATES: tuple = ()  # no injected text: the document itself is the difficulty

VARIANTS = 8


def document(sentences: list[str], variant: int) -> str:
    """The carrier's sentences rewritten: in capitals (variant 0), lower case without full stops or commas (1), a
    bulleted list (2), one sentence a line (3), HTML paragraphs (4), words apart by runs of spaces (5), joined by
    semicolons (6), the details before the topic sentence (7)."""
    text = " ".join(sentences)
    rewrites = (
        lambda: text.upper(),
        lambda: text.lower().replace(".", "").replace(",", ""),
        lambda: "\n".join(f"- {s}" for s in sentences),
        lambda: "\n".join(sentences),
        lambda: "".join(f"<p>{s}</p>" for s in sentences),
        lambda: "   ".join(text.split(" ")),
        lambda: "; ".join(s.rstrip(".") for s in sentences) + ".",
        lambda: " ".join([*sentences[1:], sentences[0]]),
    )
    return rewrites[variant % VARIANTS]()


def judge(text: str, case: dict[str, Any]) -> dict[str, Any]:
    """A faithful summary; of a foreign or empty document, no invented names or numbers (see the module)."""
    doc = case["document"]
    empty = len(faithfulness.content_words(doc)) < faithfulness.MIN_CONTENT_WORDS
    lang, confidence = faithfulness.language(doc)
    foreign = not empty and lang != "en" and confidence >= faithfulness.MIN_DOCUMENT_CONFIDENCE
    return verdict.judged(text, case, [], facts_only=empty or foreign, refusal_ok=empty)
