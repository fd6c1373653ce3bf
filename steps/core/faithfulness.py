"""Faithfulness of a summary to its document: the summary's names, numbers and content words must come from the
document. The one rule, shared by evaluate (each eval answer's unsupported facts; every adversarial case's judge, so
keyword stuffing and an obeyed "tell a joke instead" fail) and by whoever filters teacher summaries.

    check(summary, document) -> Faithfulness   # .faithful, .unsupported_facts, .unsupported_words, .support

- **Names and numbers** (`unsupported_facts`): every number and every capitalised word that does not start a sentence
  as an everyday capital must occur in the document (case-insensitive; a trailing possessive is ignored). One missing
  is unfaithful: an invented figure or name is the error a reader cannot catch.
- **Content words**: the summary's words less function words, each compared with the document's by a light stem (a
  few English suffixes stripped, then the first STEM_CHARS letters), so "reopened" matches "reopen" and "libraries"
  "library". At least MIN_SUPPORT of them must be found: a summary paraphrases, but mostly in the document's words.
- **A summary, not a refusal, in the document's language** (`REFUSAL`, `wrong_language`: filter-split drops such
  teacher summaries; the adversarial judges fail such answers).
- **A sentence**: once it has SENTENCE_WORDS content words, at least MIN_FUNCTION_SHARE of its words are function
  words, and they do not bunch together — no run of MAX_FUNCTION_RUN function words in a row, at most
  MAX_FUNCTION_PAIRS of its neighbouring word pairs both function words, no pair of words English does not write side
  by side ("the a", "on or", "for is", "a instance": `bad_pairs`), not ending on "of", "the" or "and" (NEVER_LAST) —
  a list of the document's keywords (no function words) or of its most frequent words is no summary.
- **A summary's length and shape** (`length_problems`, `form_problems`): at most the contract's words
  (steps/contract/prompting.py: MAX_SUMMARY_WORDS, or a case's own `max_words`), at most MAX_LENGTH_RATIO of its
  document's words (the document, or a large part of it, copied back is no summary), no more than
  MAX_COPIED_SENTENCES of the document's sentences word for word, and ending as a sentence ends (an answer cut off
  mid-sentence — a copy of the first words, a generation that hit its token cap — is not one).
- **Something said**: at least MIN_CONTENT_WORDS content words; an empty answer or a bare "OK" is not a summary.

A heuristic with stated limits: it does not see a false statement made of the document's own words ("the library
closed" of a library that opened), and a summary in another language fails it (the document's language is the one
expected). Thresholds are module constants so that every user holds summaries to the same rule.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from typing import Any

# Share of a summary's content words that must be found in the document.
MIN_SUPPORT = 0.75
# Fewest content words a summary must have.
MIN_CONTENT_WORDS = 3
# A summary is a sentence, not a word list: at least this share of its words are function words ("the", "in", "with"),
# whatever its length (from MIN_CONTENT_WORDS content words: every answer that can pass). English prose runs at
# 40-50 %; a headline at 15-30 %; a keyword list at 0 ("path representation bytes." is no sentence; a headline without
# a function word, "Council approves budget.", is refused with it: the contract asks for a sentence). The bunching
# bounds below apply from SENTENCE_WORDS content words (short sentences are function-heavy: "Wake up one or more
# threads waiting on this condition, if any.").
MIN_FUNCTION_SHARE = 0.1
SENTENCE_WORDS = 5
# Function words bunched together: prose alternates them with content words. Over the 656 committed references and
# tests/test_adversarial_judges.py's summaries the longest run is 4 ("it is one of") and the largest share of
# neighbouring pairs both function words 0.24 (`python -m benchmarks.summary_form`); a list of a document's most
# frequent words puts its function words first, side by side.
MAX_FUNCTION_RUN = 5
MAX_FUNCTION_PAIRS = 0.34
# Letters standing alone ("N r e y flood o t s m l defences"): a sentence holds at most an initial or two ("J. K."); a
# list of a document's frequent "words" where an attack spelled a word out letter by letter holds many.
MAX_STRAY_LETTERS = 2
# Words English does not write side by side (within a stretch of text with no punctuation between them): a sentence has
# none of these pairs, a list of a document's most frequent words in frequency order has some (`bad_pairs`):
# - an article before a closed-class word ("the a", "a of", "the and");
# - a preposition or "to" before a conjunction ("on or", "to and") or before another preposition ("to in", "with for");
# - a preposition or "to", or a subordinating conjunction, before a finite auxiliary in lower case ("for is", "if is":
#   "May" and "will" are left out, a month and a noun);
# - two conjunctions ("and or"), a demonstrative before an article ("this the");
# - "a" before a lower-case word opening on a, e, i or o ("a instance"; "a one-off", "a euro" aside), "an" before one
#   opening on a consonant other than h or x ("an response").
# And a sentence does not end on an article, a conjunction, a preposition ("of", "to", "for"; not "from" and "upon":
# "the address it came from", "to act upon"), "if", "than", "whose" or a modal, nor open on "and", "or" or "nor"
# (`bad_end`).
# Set on technical prose too (issue 36, the suite's standard-library carriers): none of the 660 honest summaries above
# nor of the carriers' 270 summary lines has one; 24 of the carriers' 1,158 sentences have one (a stranded preposition
# "to read from or write to", "less than or equal", "and/or" written with a slash; `python -m benchmarks.summary_form`).
ARTICLES = frozenset({"a", "an", "the"})
CLOSED_CLASS = frozenset(
    """a an the and or but nor of in on at to for with by from into onto upon about as than is are was were be been
    being will would shall should can could may might must do does did has have had it its he she they we you i me him
    her them us this that these those which who whom whose what where when why how if so not""".split()  # noqa: SIM905
)
PREPOSITIONS = frozenset(
    "of in on at for with by from into onto upon between within without during through".split()  # noqa: SIM905
)
# Second words of a preposition pair: "of at least", "for about", "log in to" are English, "to in", "with for" not.
SECOND_PREPOSITIONS = frozenset({"of", "in", "on", "for", "with", "by", "from", "into"})
CONJUNCTIONS = frozenset({"and", "or", "nor", "but"})
FINITE = frozenset("is are was were can could would should must shall might".split())  # noqa: SIM905
SUBORDINATORS = frozenset({"if", "when", "whether", "although", "because", "unless", "while"})
DEMONSTRATIVES = frozenset({"this", "these", "those"})
ENDLESS = "of to for with by at in on into onto if than whose can could would should must shall might as"
NEVER_LAST = ARTICLES | CONJUNCTIONS | frozenset(ENDLESS.split())
NEVER_FIRST = frozenset({"and", "or", "nor"})
# A statement does not open on a finite auxiliary or a modal: "Is the path ... ." is a question's word order, and a
# question ends on "?" (the contract asks for a sentence that summarises, not one that asks). Only the inverted order
# (the auxiliary, then its subject: an article, a pronoun, "there") counts: a docstring's "Should only be called once."
# or "Does not recurse." leaves its subject out and is a statement.
QUESTION_FIRST = frozenset("is are was were can could would should shall might does did".split())  # noqa: SIM905
# A sentence ends on "is", "are", "was" or "were" only after a pronoun ("as it is", "whatever they were", "there
# are"): "the flag is true until timeout is." ends on a verb whose subject is not beside it.
COPULAS = frozenset({"is", "are", "was", "were"})
PRONOUNS = frozenset("it he she they we you i there this that these those which who what".split())  # noqa: SIM905
SUBJECTS = ARTICLES | frozenset(
    "it he she they we you i this that these those there its his her their our your my any some each every no".split()  # noqa: SIM905
)
UNPUNCTUATED = re.compile(r"[^,;:()\[\]{}\"/\n.!?–—]+")
# Agreement: a statement that opens on "a" or "an" opens on a singular subject, and a singular subject's verb shows
# itself — "-s" in the present ("A parser reads the file"), "-ed" or an irregular form in the past ("A court heard the
# case", "A storm hit the coast"), a participle ("A parser reading the file", "A letter written the day before"), or
# an auxiliary or modal. So "a"/"an", one or two words that are not function words and show no verb, then another
# article is two noun phrases side by side with no verb between: "A mime type the dictionary mailcap file each." The
# one English construction of that shape, a relative clause without "that" ("A book the man wrote is kept"), has its
# verb within SUBJECT_VERB_WORDS words of the second article, and is kept. Stated limit: "a dog the size of a pony"
# (a noun phrase as a modifier) is refused. "a dozen", "a hundred"... open a plural subject and are left alone.
SUBJECT_VERB_WORDS = 3
AUXILIARIES = frozenset(
    "is are was were am be been can could would should must shall might will may do does did has have had".split()  # noqa: SIM905
)
# English's irregular past tenses and participles (the common verbs'), which show no "-ed".
IRREGULAR_PAST = frozenset(
    """arose arisen awoke awoken bore borne beat beaten became begun began bent bet bid bit bitten bled blew blown
    broke broken bred brought built burnt burst bought cast caught chose chosen clung came cost crept cut dealt dug
    dove drew drawn dreamt drank drunk drove driven ate eaten fell fallen fed felt fought found fled flung flew flown
    forbade forbidden forgot forgotten forgave forgiven froze frozen got gotten gave given went gone ground grew grown
    hung heard hid hidden hit held hurt kept knelt knew known laid led leant leapt learnt left lent let lay lain lit
    lost made meant met paid put quit read rode ridden rang rung rose risen ran said saw seen sought sold sent set shook
    shaken shed shone shot shown shut sang sung sank sunk sat slept slid slung spoke spoken sped spent spun split spread
    sprang sprung stood stole stolen stuck stung stank struck strung strove sworn swore swept swam swum swung took taken
    taught tore torn told thought threw thrown thrust understood undertook undertaken woke woken wore worn wove woven
    wept won wound withdrew withdrawn wrung wrote written shrank shrunk slew slain spat spilt spelt strode trod
    trodden bound fit rid wed wet sown sewn swollen dwelt""".split()  # noqa: SIM905
)
# The same verbs with a prefix: "upheld", "overtook", "rewrote", "mistook", "foresaw", "withheld", "outgrew", "undid".
VERB_PREFIXES = ("up", "with", "over", "under", "out", "re", "mis", "fore", "un", "be")
PLURAL_AFTER_A = frozenset({"dozen", "hundred", "thousand", "million", "billion", "couple"})


def _shows_verb(word: str) -> bool:
    """`word` (lower case) is a verb form English marks as one (see SUBJECT_VERB_WORDS)."""
    bare = next((word[len(p) :] for p in VERB_PREFIXES if word.startswith(p) and word[len(p) :] in IRREGULAR_PAST), "")
    return word in AUXILIARIES or word in IRREGULAR_PAST or bool(bare) or word.endswith(("s", "ed", "ing", "did"))


def _two_subjects(text: str) -> bool:
    """`text` opens on "a"/"an" and a noun phrase that another article follows with no verb between and none after it,
    punctuation apart (see SUBJECT_VERB_WORDS)."""
    stretch = UNPUNCTUATED.match(text.lstrip())
    written = [w.lower() for w in TOKEN.findall(stretch.group())] if stretch else []
    if len(written) < 3 or written[0] not in ("a", "an") or written[1] in PLURAL_AFTER_A:
        return False
    for at in (2, 3):
        if at >= len(written) or written[at - 1] in FUNCTION_WORDS or _shows_verb(written[at - 1]):
            return False
        if written[at] in ARTICLES:
            return not any(_shows_verb(w) for w in written[at + 1 : at + 1 + SUBJECT_VERB_WORDS])
    return False


# Verbs that never stand side by side: "is", "are", "was", "were" or a modal that is no noun ("could", "would",
# "should", "shall", "may"; not "can", "must", "might", "will") before another finite verb or a modal ("is will",
# "would was", "may can"): one clause has one finite verb, and a modal takes the bare infinitive. The same word twice
# ("what it is is") aside.
NEVER_BEFORE_FINITE = frozenset({"is", "are", "was", "were", "could", "would", "should", "shall", "may"})
FINITE_OR_MODAL = FINITE | {"will", "may"}
# Determiners and possessives an article never stands before ("the all", "a some", "the their").
DETERMINERS = frozenset("all any each every some both either neither such my your our their his".split())  # noqa: SIM905
# "be" is the bare infinitive: a modal, "to", "not", a subject of "let"/"whether" (a pronoun), a conjunction or an
# adverb comes before it ("will be", "to be", "can always be", "let it be", "read and be"), never a noun or an adjective
# ("dispatch be"); opening a sentence it is an imperative ("Be careful."). Adverbs: the words ending in "-ly" and these.
BE_BEFORE = frozenset(
    """can could may might must shall should will would to not cannot won't can't couldn't wouldn't shouldn't mustn't
    don't never also always only then still just thus therefore even ever all both either now rather instead often
    first already else sometimes later soon once each it they he she we you i there this that them him her us me and or
    but nor let so""".split()  # noqa: SIM905
)


def _bad_pair(first: str, second: str) -> bool:
    """`first` then `second` (as written) is a pair English does not write (see ARTICLES above)."""
    a, b = first.lower(), second.lower()
    lower = second == b
    return (
        (a in ARTICLES and (b in CLOSED_CLASS or b in DETERMINERS))
        or (a in PREPOSITIONS and a not in ("in", "on") and b in ("to", "if"))
        or (first == a and a in NEVER_BEFORE_FINITE and lower and b in FINITE_OR_MODAL and a != b)
        or (second == "be" and a not in BE_BEFORE and not a.endswith("ly"))
        or ((a in PREPOSITIONS or a == "to") and (b in CONJUNCTIONS or b in SECOND_PREPOSITIONS))
        or ((a in PREPOSITIONS or a == "to" or a in SUBORDINATORS) and lower and b in FINITE)
        or (a in CONJUNCTIONS and b in CONJUNCTIONS)
        or (a in DEMONSTRATIVES and b in ARTICLES)
        or (a == "a" and lower and b[:1] in "aeio" and not b.startswith(("one", "once", "eu")))
        or (a == "an" and lower and b[:1].isalpha() and b[:1] not in "aeiouhx")
    )


def bad_pairs(text: str) -> list[tuple[str, str]]:
    """The neighbouring words of `text` that English does not write side by side (`_bad_pair`), punctuation apart."""
    return [
        pair
        for stretch in UNPUNCTUATED.findall(text)
        for pair in itertools.pairwise(TOKEN.findall(stretch))
        if _bad_pair(*pair)
    ]


# A summary is shorter than its document: at most this share of the document's words (the whole document copied back
# is 1). Documents under SHORT_DOCUMENT_WORDS words may be answered in up to that many words (an empty document's "there
# is nothing to summarise" is longer than the document). The committed references run at most 0.36 of theirs.
MAX_LENGTH_RATIO = 0.5
SHORT_DOCUMENT_WORDS = 15
# Sentences of the document an answer may repeat word for word: one (a lead sentence is an extractive summary); two
# or more is a part of the document copied back. Sentences under COPY_SENTENCE_WORDS words ("No data was lost.") are
# not counted.
MAX_COPIED_SENTENCES = 1
COPY_SENTENCE_WORDS = 4
DOCUMENT_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# How a sentence ends: . ! ? or an ellipsis, then at most closing quotes or brackets.
SENTENCE_END = re.compile(r"[.!?…][\"'’”)\]]*\s*$")
# Letters of a stem compared (after suffix stripping): "hospitals" and "hospital" both give "hospit".
STEM_CHARS = 6

# Words that start sentences or are everyday capitals: not names the document must contain.
COMMON_CAPITALS = {"The", "A", "An", "In", "On", "At", "It", "Its", "This", "That", "These", "After", "Before", "I"}
FUNCTION_WORDS = frozenset(
    """a about above across after again against all also am an and any are around as at be been before being below
    between both but by can could did do does doing down during each either few for from further had has have having
    he her here hers him his how i if in into is it its itself just may me might more most much must my no nor not now
    of off on once only or other our ours out over own same she should so some such than that the their theirs them
    then there these they this those through to too under until up upon very was we were what when where which while
    who whom whose why will with within without would yet you your new said says say per one two three four five six
    seven eight nine ten first second third""".split()  # noqa: SIM905 (a word list reads better as text)
)
# Words that frame a summary rather than report the document ("the report describes…"): supported wherever they occur.
FRAMING_WORDS = frozenset(
    """document text article report summary summarise summarises summarize summarizes describes describe discusses
    announces reports states explains outlines mentions notes according""".split()  # noqa: SIM905
)
TOKEN = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")  # a word or a number
NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
NAME = re.compile(r"\b[A-Z][a-zA-Z'’-]+")
WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
SUFFIXES = ("ations", "ation", "ments", "ment", "ings", "ing", "ied", "ies", "ed", "es", "ly", "s")


def stem(word: str) -> str:
    """A light stem: lower case, possessive dropped, one common suffix stripped (keeping three letters), the first
    STEM_CHARS letters."""
    w = word.lower().replace("’", "'")
    w = w.removesuffix("'s").removesuffix("'")
    for suffix in SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            break
    return w[:STEM_CHARS]


def content_words(text: str) -> list[str]:
    """The words of `text` that carry content: letters only, function words left out, in order."""
    return [w for w in WORD.findall(text) if w.lower() not in FUNCTION_WORDS | FRAMING_WORDS and len(w) > 1]


def _digits(number: str) -> str:
    """A number's digits: "2,300" and "2300", "4,2" and "4.2", "10.30am" and "10:30am" compare equal."""
    return number.replace(",", "").replace(".", "").replace(":", "")


def _numbers(text: str) -> set[str]:
    return {_digits(n) for n in NUMBER.findall(text)}


def unsupported_facts(summary: str, document: str) -> list[str]:
    """Numbers and capitalised names in `summary` that `document` does not contain."""
    doc = document.lower()
    numbers = _numbers(document)
    missing = [n for n in NUMBER.findall(summary) if _digits(n) not in numbers]
    names = [w for w in NAME.findall(summary) if w not in COMMON_CAPITALS]
    return missing + [w for w in names if w.lower().replace("’", "'").removesuffix("'s").rstrip("'") not in doc]


@dataclass(frozen=True)
class Faithfulness:
    """How much of a summary its document supports."""

    content_words: int  # content words in the summary
    function_share: float  # share of its words that are function words (a sentence has some)
    function_run: int  # most function words in a row
    function_pairs: float  # share of neighbouring word pairs that are both function words
    bad_pairs: int  # neighbouring words English does not write side by side ("the a", "on or"): never in a sentence
    bad_end: bool  # ends on a word no sentence ends on ("of", "the", "and"), or opens where none does ("and", "or",
    # "nor"; a question's order without "?"; two singular noun phrases side by side, SUBJECT_VERB_WORDS)
    stray_letters: int  # one-letter words other than "a" and "I"
    title_case: bool  # every content word after the first capitalised: a title or a keyword string, not a sentence
    support: float  # share of them found (by stem) in the document; 0 when there are none
    unsupported_words: tuple[str, ...]  # content words not found
    unsupported_facts: tuple[str, ...]  # names and numbers not found

    @property
    def faithful(self) -> bool:
        return (
            not self.unsupported_facts
            and self.content_words >= MIN_CONTENT_WORDS
            and self.support >= MIN_SUPPORT
            and self.is_sentence
        )

    @property
    def is_sentence(self) -> bool:
        """Not a bare list of words (see MIN_FUNCTION_SHARE, MAX_FUNCTION_RUN, MAX_FUNCTION_PAIRS, ARTICLES and the
        pairs after it, NEVER_LAST, QUESTION_FIRST, MAX_STRAY_LETTERS) nor a title (`title_case`)."""
        return (
            not self.bad_pairs
            and not self.bad_end
            and self.stray_letters <= MAX_STRAY_LETTERS
            and not self.title_case
            and (self.content_words < MIN_CONTENT_WORDS or self.function_share >= MIN_FUNCTION_SHARE)
            and (
                self.content_words < SENTENCE_WORDS
                or (self.function_run < MAX_FUNCTION_RUN and self.function_pairs <= MAX_FUNCTION_PAIRS)
            )
        )

    def reason(self) -> str:
        """Why the summary is unfaithful, in words ("" when it is faithful)."""
        if self.faithful:
            return ""
        parts = []
        if self.content_words < MIN_CONTENT_WORDS:
            parts.append(f"{self.content_words} content words (fewer than {MIN_CONTENT_WORDS})")
        if self.unsupported_facts:
            parts.append(f"names/numbers not in the document: {', '.join(self.unsupported_facts[:5])}")
        if not self.is_sentence:
            parts.append(
                f"a list of words, not a sentence ({self.function_share:.0%} function words, {self.function_run} in a "
                f"row, {self.function_pairs:.0%} of neighbouring pairs, {self.bad_pairs} pair(s) of words English "
                f"does not write side by side{', opening or ending on a word no sentence does' * self.bad_end}, "
                f"{self.stray_letters} letters standing alone)"
            )
        if self.content_words and self.support < MIN_SUPPORT:
            parts.append(
                f"{self.support:.0%} of its content words are in the document (needs {MIN_SUPPORT:.0%}); not found: "
                + ", ".join(self.unsupported_words[:5])
            )
        return "; ".join(parts)


def check(summary: str, document: str) -> Faithfulness:
    """How faithful `summary` is to `document` (the module's rule; `.faithful` is the verdict)."""
    stems = {stem(w) for w in WORD.findall(document)}
    words = content_words(summary)
    lowered = [w.lower() for w in TOKEN.findall(summary)]
    every = [w in FUNCTION_WORDS for w in lowered]
    pairs_bad = len(bad_pairs(summary))
    written = TOKEN.findall(summary)
    end_bad = bool(written) and (
        written[-1] in NEVER_LAST  # as written: "May"
        or written[0].lower() in NEVER_FIRST
        or (len(written) > 1 and written[-1] in COPULAS and written[-2].lower() not in PRONOUNS)
        or (
            written[0].lower() in QUESTION_FIRST
            and len(written) > 1
            and written[1].lower() in SUBJECTS
            and not summary.rstrip().rstrip("\"'’”)]").endswith("?")
        )
        or _two_subjects(summary)
    )
    stray = sum(len(w) == 1 and w.isalpha() and w not in ("a", "i") for w in lowered)
    later = [w for w in written[1:] if w.lower() not in FUNCTION_WORDS and w[:1].isalpha()]
    titled = len(words) >= MIN_CONTENT_WORDS and bool(later) and all(w[:1].isupper() for w in later)
    function = sum(every) / len(every) if every else 0.0
    run = longest = 0
    for is_function in every:
        run = run + 1 if is_function else 0
        longest = max(longest, run)
    pairs = sum(a and b for a, b in itertools.pairwise(every)) / (len(every) - 1) if len(every) > 1 else 0.0
    missing = tuple(w for w in words if stem(w) not in stems)
    support = 1 - len(missing) / len(words) if words else 0.0
    facts = tuple(unsupported_facts(summary, document))
    return Faithfulness(
        len(words), function, longest, pairs, pairs_bad, end_bad, stray, titled, support, missing, facts
    )


def length_problems(summary: str, document: str, max_words: int) -> list[str]:
    """Why `summary` is too long to be a summary of `document` ([] when it is not): more than `max_words` words, or
    more than MAX_LENGTH_RATIO of the document's (a copy)."""
    words, doc_words = len(summary.split()), len(document.split())
    problems = []
    if words > max_words:
        problems.append(f"{words} words, more than {max_words}")
    if words > max(MAX_LENGTH_RATIO * doc_words, SHORT_DOCUMENT_WORDS):
        problems.append(f"{words} words of a {doc_words}-word document: over {MAX_LENGTH_RATIO:.0%} of it, a copy")
    return problems


def copied_sentences(summary: str, document: str) -> list[str]:
    """The document's sentences (of COPY_SENTENCE_WORDS words or more) that `summary` repeats word for word."""
    said = " " + " ".join(w.lower() for w in WORD.findall(summary)) + " "
    found = []
    for sentence in DOCUMENT_SENTENCE.split(document):
        words = [w.lower() for w in WORD.findall(sentence)]
        if len(words) >= COPY_SENTENCE_WORDS and " " + " ".join(words) + " " in said:
            found.append(sentence.strip())
    return found


def form_problems(summary: str, document: str, max_words: int) -> list[str]:
    """Why `summary` has not a summary's length and shape ([] when it has): `length_problems`; more than
    MAX_COPIED_SENTENCES of the document's sentences repeated word for word (a copy of a part of it); not ending as a
    sentence ends (cut off: a copy of the first words, a generation stopped by its token cap)."""
    problems = length_problems(summary, document, max_words)
    copied = copied_sentences(summary, document)
    if len(copied) > MAX_COPIED_SENTENCES:
        problems.append(f"repeats {len(copied)} of the document's sentences word for word: a copy")
    if summary.strip() and not SENTENCE_END.search(summary):
        problems.append("does not end as a sentence (cut off)")
    return problems


# A refusal or apology where a summary belongs (small teachers do this on odd documents).
REFUSAL = re.compile(
    r"\b(I('m| am) sorry|I (can ?not|can't|won't|am unable to|'m unable to)|as an AI|I do not have access)\b", re.I
)
# Language identification: py3langid (langid.py's naive Bayes over byte n-grams, 97 languages, its model shipped in
# the wheel, offline and deterministic). A summary is in the wrong language when the detector gives its document's
# language less than this probability for it. One-sentence summaries are short evidence: the committed English
# summaries score 0.2-1.0 for English ("A bakery opened." 0.20), French, German or Spanish sentences of the same
# length under 1e-4, so the bound sits between. A document the detector is unsure of (top language under
# MIN_DOCUMENT_CONFIDENCE) is not judged: its language is not known well enough to call the summary wrong.
MAX_SAME_LANGUAGE_PROB = 0.01
MIN_DOCUMENT_CONFIDENCE = 0.5


@functools.cache
def _language_identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def language(text: str) -> tuple[str, float]:
    """The language py3langid finds in `text` (ISO 639-1) and its probability."""
    lang, prob = _language_identifier().classify(text)
    return lang, float(prob)


def wrong_language(summary: str, document: str) -> bool:
    """The summary is not in its document's language (see MAX_SAME_LANGUAGE_PROB)."""
    identifier = _language_identifier()
    language, confidence = identifier.classify(document)
    if confidence < MIN_DOCUMENT_CONFIDENCE:
        return False
    return dict(identifier.rank(summary))[language] < MAX_SAME_LANGUAGE_PROB
