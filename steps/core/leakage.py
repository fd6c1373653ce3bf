"""Leakage between splits: word-shingle near-duplicates, the rule fetch-dataset checks and filter-split applies
(an eval or adversarial document that nearly repeats a training one measures memory, not summarising).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict

# An eval or adversarial document is a near-duplicate of a train one when at least NEAR_DUPLICATE_SHARE of the shorter
# one's SHINGLE_WORDS-word sequences (NFKC, case-folded words) also occur in the other (the overlap coefficient of
# the shingle sets). Measured on the committed train documents: a copy with 10 % of its words replaced still shares
# >= 70 %, one with a sentence dropped or an injected instruction added >= 95 %, its first half 100 %, while the
# most similar unrelated pair across the committed splits shares 7 %.
SHINGLE_WORDS = 3
NEAR_DUPLICATE_SHARE = 0.5

# Documents of fewer shingles (about a dozen words) are compared exactly only: a few shared phrases decide nothing.
MIN_SHINGLES = 8


# A shingle in more train documents than this is boilerplate (a byline, a licence line): evidence neither for nor
# against a particular pair, so it is left out of both sides. It also keeps the comparison linear: 5,000 train and
# 1,200 eval documents sharing a 30-word footer took 50 s with it in, 2-3 s without.
COMMON_SHINGLE_DOCS = 50


WORD = re.compile(r"\w+")


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def shingle_set(text: str) -> set[tuple[str, ...]]:
    words = WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return set(zip(*(words[i:] for i in range(SHINGLE_WORDS)), strict=False))


def near_duplicates(references: list[str], documents: list[str]) -> list[tuple[int, int, float]]:
    """(document index, reference index, share) for each document whose most similar reference shares at least
    NEAR_DUPLICATE_SHARE of the shorter one's shingles, boilerplate left out. An inverted index from shingle to
    references keeps this to the pairs that share any shingle at all."""
    referenced = [shingle_set(text) for text in references]
    frequency = Counter(s for shingles in referenced for s in shingles)
    common = {s for s, n in frequency.items() if n > COMMON_SHINGLE_DOCS}
    referenced = [shingles - common for shingles in referenced]
    shingled = [shingle_set(text) - common for text in documents]
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for j, shingles in enumerate(referenced):
        if len(shingles) >= MIN_SHINGLES:
            for s in shingles:
                index[s].append(j)
    found = []
    for i, shingles in enumerate(shingled):
        if best := _most_similar(shingles, index, referenced):
            found.append((i, best[1], best[0]))
    return found


def _most_similar(
    shingles: set[tuple[str, ...]], index: dict[tuple[str, ...], list[int]], referenced: list[set[tuple[str, ...]]]
) -> tuple[float, int] | None:
    """(share, reference index) of the indexed reference `shingles` nearly repeats, or None."""
    if len(shingles) < MIN_SHINGLES:
        return None
    shared = Counter(j for s in shingles for j in index.get(s, ()))
    best = max(((n / min(len(shingles), len(referenced[j])), j) for j, n in shared.items()), default=None)
    return best if best and best[0] >= NEAR_DUPLICATE_SHARE else None


def near_duplicates_within(documents: list[str]) -> dict[int, int]:
    """{later index: earlier index it nearly repeats} among `documents`, by the same rule, each compared with the
    earlier ones not already found repeating another."""
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    shingled = [shingle_set(text) for text in documents]
    found = {}
    for i, shingles in enumerate(shingled):
        if best := _most_similar(shingles, index, shingled):
            found[i] = best[1]
        else:
            for s in shingles:
                index[s].append(i)
    return found
