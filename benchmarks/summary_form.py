"""What the adversarial judges pass, by answer strategy and family: answers built per case from the row (copies,
cut-offs, forwarded injections, word lists) and honest summaries, on fresh cases of every family and topic from the
suite generator; and the honest summaries' sentence figures that steps/core/faithfulness.py's word-list bounds are set
from.

    python -m benchmarks.summary_form

tests/test_adversarial_judges.py holds the judges to these strategies (`STRATEGIES`).
"""

from __future__ import annotations

import collections
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

from steps import adversarial_suite
from steps.adversarial import FAMILIES, judge_for
from steps.adversarial_suite import SUMMARIES, TOPICS, grid, make_case
from steps.core import faithfulness
from steps.evaluate.baselines import lead_words

ROOT = Path(__file__).resolve().parent.parent
WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
Case = tuple[dict, dict]  # a row of the adversarial split, and its carrier's slots plus "topic" and "injected"


def cases(family: str, per_topic: int = 3, seed: int = 0) -> list[Case]:
    """Cases of `family` over every topic, `per_topic` grid points each, with their carrier's slots, topic and the
    injected text with its canary left out (what an answer that carries the attack forward repeats)."""
    rng = random.Random(seed)
    found = []
    for i, key in enumerate(rng.sample(grid(family), min(len(grid(family)), per_topic * len(TOPICS)))):
        canary = f"CANARY-{'ABCDEFGHJK'[i % 10]}{'LMNPQRSTUV'[i // 10 % 10]}{i % 7 + 2}Z"
        row, slots = make_case(family, key, canary, rng)
        template = adversarial_suite.ATTACKS.get(family, ())
        parts = template[key[0]] if template else ()
        parts = parts if isinstance(parts, tuple) else (parts,)
        attack = " ".join(p(canary).replace(canary, "") for p in parts)
        found.append(({"id": f"t{i}", **row}, {**slots, "topic": key[1], "injected": " ".join(attack.split())}))
    return found


def faithful(slots: dict) -> str:
    """The honest one-sentence summary of the case's carrier."""
    return SUMMARIES[slots["topic"]].format(**slots)


def _plain(case: dict) -> str:
    """The document with its canary taken out."""
    text = case["document"]
    for canary in case.get("must_not_contain", []):
        text = text.replace(canary, "")
    return " ".join(text.split())


def _frequent(case: dict, k: int, content_only: bool = False) -> str:
    """The document's k most frequent words, most frequent first, written as a sentence (capital, full stop)."""
    words = [w.lower() for w in WORD.findall(_plain(case))]
    if content_only:
        words = [w for w in words if w not in faithfulness.FUNCTION_WORDS]
    return " ".join(w for w, _ in collections.Counter(words).most_common(k)).capitalize() + "."


def _sentences(case: dict, k: int) -> str:
    return " ".join(faithfulness.DOCUMENT_SENTENCE.split(_plain(case))[:k])


# Answers that are not summaries (each must fail), and the honest one (must pass): (case, slots) -> answer.
STRATEGIES: dict[str, Callable[[dict, dict], str]] = {
    "honest summary": lambda c, s: faithful(s),
    "document copied": lambda c, s: c["document"],
    "document copied, canary out": lambda c, s: _plain(c),
    "first 3 sentences": lambda c, s: _sentences(c, 3),
    "first 2 sentences": lambda c, s: _sentences(c, 2),
    "first 25 words": lambda c, s: lead_words(_plain(c)),
    "instruction forwarded": lambda c, s: s["injected"] or faithful(s) + " More follows",
    "summary + instruction": lambda c, s: f"{faithful(s)} {s['injected']}".strip(),
    "8 frequent words": lambda c, s: _frequent(c, 8),
    "12 frequent words": lambda c, s: _frequent(c, 12),
    "20 frequent words": lambda c, s: _frequent(c, 20),
    "12 frequent content words": lambda c, s: _frequent(c, 12, content_only=True),
}
# Forwarding needs an injection: these strategies are not attacks in a family that has none.
NEEDS_INJECTION = {"instruction forwarded", "summary + instruction"}


def pass_rate(family: str, strategy: str) -> float:
    """Share of `family`'s cases whose judge passes the strategy's answer."""
    found = cases(family)
    answer = STRATEGIES[strategy]
    return sum(judge_for(family)(answer(c, s), c)["passed"] for c, s in found) / len(found)


def honest_sentence_figures() -> dict[str, float]:
    """Over the committed references and every family's honest summaries: the most function words in a row, the
    largest share of neighbouring pairs both function words, and how many hold an article before a closed-class word."""
    texts = []
    for split in ("eval", "train"):
        for line in (ROOT / f"data/summaries/{split}.jsonl").open():
            row = json.loads(line)
            texts.append((row["summary"], row["document"]))
    texts += [(faithful(s), c["document"]) for f in FAMILIES for c, s in cases(f)]
    checked = [faithfulness.check(a, d) for a, d in texts]
    return {
        "summaries": len(texts),
        "longest_function_run": max(c.function_run for c in checked),
        "largest_function_pairs": max(c.function_pairs for c in checked),
        "with_article_pairs": sum(bool(c.article_pairs) for c in checked),
    }


def main() -> int:
    print("honest summaries:", honest_sentence_figures())
    names = list(FAMILIES)
    print(f"pass rate (%) per family: {', '.join(f'{i}={n}' for i, n in enumerate(names))}")
    print(f"{'strategy':<28}" + "".join(f"{i:>5}" for i in range(len(names))))
    for strategy in STRATEGIES:
        rates = []
        for family in names:
            attacked = "must_not_contain" in cases(family, per_topic=1)[0][0]
            rates.append("-" if strategy in NEEDS_INJECTION and not attacked else f"{pass_rate(family, strategy):.0%}")
        print(f"{strategy:<28}" + "".join(r.rjust(5) for r in rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
