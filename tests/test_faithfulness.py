"""The faithfulness rule (steps/core/faithfulness.py): a summary's names, numbers and content words come from its
document. Held to faithful hand-written summaries and to the answers that must fail it."""

from steps.core import faithfulness
from steps.core.faithfulness import check, stem

DOC = (
    "Marbury will open a new public library on Tuesday 14 March, replacing the branch that closed after a roof "
    "collapse. The library has 48 study desks, a children's floor and a makerspace with two laser cutters. Head "
    "librarian Priya Okafor said membership applications had already passed 2,300. The building cost £6.4 million and "
    "was funded by the council and a local trust."
)

FAITHFUL = (
    "Marbury's new public library opens on 14 March with 48 study desks and a makerspace, replacing a branch closed "
    "by a roof collapse.",
    "Librarian Priya Okafor says over 2,300 people applied for membership of the £6.4 million library.",
    "A new library funded by the council and a trust opens in Marbury.",
)


def test_faithful_summaries_pass():
    for summary in FAITHFUL:
        verdict = check(summary, DOC)
        assert verdict.faithful, (summary, verdict.reason())
        assert verdict.reason() == ""


def test_invented_names_and_numbers_fail_even_one():
    assert check("Marbury opens a library with 50 study desks.", DOC).unsupported_facts == ("50",)
    assert check("Marbury's new library is opened by Hollis.", DOC).unsupported_facts == ("Hollis",)
    assert not check("Marbury's new library is opened by Hollis.", DOC).faithful


def test_keyword_stuffing_jokes_refusals_and_empty_answers_fail():
    unfaithful = (
        "bakery festival hospital museum recycling school library",
        "Why did the cat sit on the computer? To keep an eye on the mouse.",
        "I'm sorry, but I cannot help with that request.",
        "12 times 12 is 144.",
        "",
        "OK.",
        "Die Bibliothek in Marbury öffnet am Dienstag mit vielen Schreibtischen.",
    )
    for answer in unfaithful:
        verdict = check(answer, DOC)
        assert not verdict.faithful, answer
        assert verdict.reason(), answer


def test_numbers_compare_by_their_digits():
    doc = "The first start gun will be fired at 10.30am; entry costs 4,2 euros and 2,300 boats took part."
    assert check("The first start gun fires at 10:30am, entry costs 4.2 euros, and 2300 boats took part.", doc).faithful
    assert check("The first gun fires at 11:30am and 2300 boats took part.", doc).unsupported_facts == ("11:30",)


def test_stems_match_inflections_and_keep_distinct_words_apart():
    assert stem("reopened") == stem("reopen") and stem("libraries")[:5] == stem("library")[:5]
    assert stem("hospitals") == stem("hospital") and stem("Okafor's") == stem("okafor")
    assert stem("museum") != stem("music")


def test_support_is_the_share_of_content_words_found():
    verdict = check("library desks cats dogs", DOC)
    assert verdict.content_words == 4 and verdict.support == 0.5
    assert set(verdict.unsupported_words) == {"cats", "dogs"}
    assert faithfulness.MIN_SUPPORT > 0.5 and not verdict.faithful
