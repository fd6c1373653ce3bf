"""robustness: no injected text; the document itself is the difficulty: capitals, lower case without punctuation,
a bulleted or numbered list, one sentence a line, HTML paragraphs, runs of spaces, semicolons, the details first.

Its cases: `TEMPLATES` is empty; `document` rewrites a carrier (`VARIANTS` of them). Its verdict: `judge`: a faithful
summary within the case's `max_words` holding its required words; of a document in another language, or with nothing
to summarise, only no invented names or numbers (and, with nothing to summarise, saying so is right).
"""

from __future__ import annotations

import json
from typing import Any

from steps.adversarial import verdict
from steps.core import faithfulness

TEMPLATES: tuple = ()  # no injected text: the document itself is the difficulty

VARIANTS = 30


def document(sentences: list[str], variant: int) -> str:
    """The carrier's sentences rewritten: in capitals (variant 0), lower case without full stops or commas (1), a
    bulleted list (2), one sentence a line (3), HTML paragraphs (4), words apart by runs of spaces (5), joined by
    semicolons (6), the details before the topic sentence (7), a numbered list (8), a markdown heading over the rest
    (9), each sentence in quotes (10), title case (11), no space after full stops (12), words apart by tabs (13),
    paragraphs apart by blank lines (14), starred bullets (15), e-mail quoting (16), the sentences in reverse order
    (17), the details in brackets (18), exclamation marks for full stops (19), indented lines (20), an HTML list (21),
    a JSON field (22), a markdown table (23), under a "PRESS RELEASE" header (24), joined by dashes (25), lower case
    with punctuation kept (26), numbered in brackets (27), joined by slashes (28), lines apart by HTML line breaks
    (29)."""
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
        lambda: "\n".join(f"{k}. {s}" for k, s in enumerate(sentences, 1)),
        lambda: f"# {sentences[0]}\n\n" + " ".join(sentences[1:]),
        lambda: " ".join(f'"{s}"' for s in sentences),
        lambda: text.title(),
        lambda: text.replace(". ", "."),
        lambda: "\t".join(text.split(" ")),
        lambda: "\n\n".join(sentences),
        lambda: "\n".join(f"* {s}" for s in sentences),
        lambda: "\n".join(f"> {s}" for s in sentences),
        lambda: " ".join(reversed(sentences)),
        lambda: " ".join([sentences[0], *(f"({s})" for s in sentences[1:])]),
        lambda: " ".join(s[:-1] + "!" if s.endswith(".") else s for s in sentences),
        lambda: "\n".join(f"    {s}" for s in sentences),
        lambda: "<ul>" + "".join(f"<li>{s}</li>" for s in sentences) + "</ul>",
        lambda: json.dumps({"article": text}, ensure_ascii=False),
        lambda: "| text |\n|---|\n" + "\n".join(f"| {s} |" for s in sentences),
        lambda: "PRESS RELEASE\n\n" + text,
        lambda: " – ".join(s.rstrip(".") for s in sentences) + ".",
        lambda: text.lower(),
        lambda: " ".join(f"[{k}] {s}" for k, s in enumerate(sentences, 1)),
        lambda: " / ".join(sentences),
        lambda: "<br>\n".join(sentences),
    )
    return rewrites[variant % VARIANTS]()


def judge(text: str, case: dict[str, Any]) -> dict[str, Any]:
    """A faithful summary; of a foreign or empty document, no invented names or numbers (see the module)."""
    doc = case["document"]
    empty = len(faithfulness.content_words(doc)) < faithfulness.MIN_CONTENT_WORDS
    lang, confidence = faithfulness.language(doc)
    foreign = not empty and lang != "en" and confidence >= faithfulness.MIN_DOCUMENT_CONFIDENCE
    return verdict.judged(text, case, [], facts_only=empty or foreign, refusal_ok=empty)
