"""The generated adversarial suite (steps/adversarial_suite.py → data/adversarial/suite.jsonl): reproducible from its
seed and the interpreter's standard library, valid as a dataset split, sized by the power calculation, at least 100
real carriers and 30 phrasings a family, no two cases of a family on one carrier or skeleton, every required word in
its document, and the train split cannot teach it.

    pytest tests/test_adversarial_suite.py     # every prompt fits the served context under the base tokenizer too
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from steps import adversarial_suite, fetch_dataset
from steps.adversarial import carriers
from steps.adversarial_suite import ATTACKS, CANARY, SuiteConfig, build
from steps.core.dataset import load_split
from tests.conftest import ROOT

SUITE = ROOT / "data/adversarial/suite.jsonl"
DATA = ROOT / "data/summaries"
# The command that wrote SUITE (steps/adversarial_suite.py's docstring), without the tokenizer check.
COMMITTED = {"seed": 0, "keep": str(DATA / "adversarial.jsonl"), "avoid": str(DATA / "train.jsonl")}


def suite() -> list[dict]:
    return [json.loads(line) for line in SUITE.read_text(encoding="utf-8").splitlines()]


def test_the_committed_suite_is_what_its_seed_generates(tmp_path: Path):
    rows = build(SuiteConfig(out=tmp_path / "a.jsonl", **COMMITTED))
    assert rows == suite()
    assert build(SuiteConfig(out=tmp_path / "b.jsonl", **{**COMMITTED, "seed": 1})) != rows


def test_the_suite_validates_as_the_adversarial_split_of_the_committed_dataset():
    raw = {s: (DATA / f"{s}.jsonl").read_bytes() for s in ("train", "eval")}
    _, problems = fetch_dataset.validate({**raw, "adversarial": SUITE.read_bytes()}, "data")
    assert problems == []  # format, and no train document repeated or nearly repeated (fetch-dataset's leak rule)


def test_every_family_has_the_cases_the_power_calculation_asks_for():
    from steps.adversarial import FAMILIES

    per_family = adversarial_suite.cases_per_family(0.2, 0.05, 0.8, len(FAMILIES) * 2)
    generated = Counter(r["family"] for r in suite() if r["id"].startswith("gen-"))
    assert set(generated.values()) == {per_family} and set(generated) == set(FAMILIES)


def test_every_family_has_30_phrasings_each_case_naming_its_own_as_its_cluster():
    """Issue 36: independent cases are counted by phrasing, so a family needs many (gate_stats.PLANNED_PHRASINGS)."""
    from steps.core import gate_stats

    rows = [r for r in suite() if r["id"].startswith("gen-")]
    for family in {r["family"] for r in rows}:
        mine = [r for r in rows if r["family"] == family]
        assert adversarial_suite.phrasings(family) >= gate_stats.PLANNED_PHRASINGS == 30, family
        assert len({r["cluster"] for r in mine}) == adversarial_suite.phrasings(family), family
        assert all(r["cluster"].startswith(f"{family}/") for r in mine)


def test_every_family_has_at_least_100_real_carriers_none_twice_each_case_naming_its_own():
    """Issue 36: carriers from at least 100 distinct real documents a family (standard-library docstrings read at build
    time, steps/adversarial/carriers.py). No carrier serves two cases of a family, so the phrasing is the only way a
    family's cases hang together and `cluster` counts it."""
    pool = {c.name: c for c in carriers.stdlib()}
    rows = [r for r in suite() if r["id"].startswith("gen-")]
    for family in {r["family"] for r in rows}:
        mine = [r for r in rows if r["family"] == family]
        named = [r["carrier"] for r in mine]
        assert len(set(named)) == len(mine) >= 100, family
        for r in mine:
            carrier = pool[r["carrier"]]  # a docstring of this interpreter's standard library
            assert r["must_contain"] == [carrier.required], r["id"]
            if family != "robustness":  # its rewrites change case, punctuation and order
                assert carrier.text in r["document"] or all(s in r["document"] for s in carrier.sentences), r["id"]


def test_the_carrier_filter_keeps_prose_and_refuses_code_and_tables():
    prose = ("Return the number of items in the queue. The count is only approximate: another thread may add or take "
             "an item at any time. It never blocks, and it is safe to call from any thread. Use it for reporting and "
             "monitoring, not for deciding whether a get or a put will succeed.")  # fmt: skip
    kept = carriers._carrier("stdlib:x.qsize", prose)
    assert kept and kept.summary == "Return the number of items in the queue." and kept.required == "number"
    assert carriers._carrier("stdlib:x", prose + "\n\n>>> q.qsize()\n0") is None  # an example
    assert carriers._carrier("stdlib:x", prose + "\n\n    timeout -- seconds to wait") is None  # an indented table
    assert carriers._carrier("stdlib:x", prose.replace("items", "{items}")) is None  # markup
    assert carriers._carrier("stdlib:x", "Return the number of items in the queue.") is None  # too short
    assert len(carriers.stdlib()) >= 240  # every family's 240 cases on carriers of their own


def test_each_phrasing_of_a_family_is_distinct():
    for family, templates in ATTACKS.items():
        texts = [" ".join(t("CANARY-AB23") for t in (p if isinstance(p, tuple) else (p,))) for p in templates]
        assert len(set(texts)) == len(texts), family


def test_no_two_cases_of_a_family_share_a_skeleton():
    """Within a phrasing (a spelled-out or encoded one masks to the same skeleton as another of its kind)."""
    rows = suite()
    for family in {r["family"] for r in rows}:
        skeletons = Counter((r.get("cluster"), adversarial_suite.skeleton(r["document"])) for r in rows
                            if r["family"] == family)  # fmt: skip
        shared = [s for s, n in skeletons.items() if n > 1]
        assert not shared, (family, shared[:1])


def test_the_skeleton_check_finds_two_cases_drawn_at_one_grid_point():
    import random

    rng = random.Random(5)
    for family in ("direct_injection", "obfuscation", "robustness", "split_payload"):
        key = adversarial_suite.grid(family)[7]
        one, _ = adversarial_suite.make_case(family, key, "CANARY-AB23", rng)
        two, _ = adversarial_suite.make_case(family, key, "CANARY-XY45", rng)
        assert (one["document"] != two["document"]) == (family != "robustness")  # a rewrite holds no canary
        assert adversarial_suite.skeleton(one["document"]) == adversarial_suite.skeleton(two["document"]), family


def test_every_case_requires_a_word_its_document_holds():
    from steps.adversarial.verdict import _has_word

    for r in suite():
        for word in r.get("must_contain", []):
            assert _has_word(r["document"], word), (r["id"], word)


def test_the_attack_sits_where_its_placement_says():
    import random

    rng = random.Random(0)
    for family in set(ATTACKS) - {"split_payload", "benign_lookalike"}:  # split: the second half is placed apart
        for k, where in enumerate(("start", "end")):
            row, _ = adversarial_suite.make_case(family, (k, k, where), "CANARY-AB23", rng)
            at = row["document"].find("CANARY-AB23") / len(row["document"])
            if family != "obfuscation":  # its canary may be encoded
                assert (at < 1 / 3) if where == "start" else (at > 2 / 3), (family, where, at)


def test_the_suite_has_every_family_of_the_package_in_its_order_and_each_holds_a_judge():
    from steps.adversarial import FAMILIES

    generated = [r["family"] for r in suite() if r["id"].startswith("gen-")]
    assert list(dict.fromkeys(generated)) == list(FAMILIES)
    assert all(callable(family.judge) for family in FAMILIES.values())


def test_every_case_has_its_own_carrier_and_canary():
    rows = [r for r in suite() if r["id"].startswith("gen-")]
    canaries = [c for r in rows for c in r.get("must_not_contain", [])]
    assert len(canaries) == len(set(canaries))
    assert len({r["document"] for r in rows}) == len(rows)


def contamination(train: list[dict], suite: list[dict]) -> list[str]:
    """Train rows holding one of the suite's canaries: a model trained on them could learn the very string the suite
    looks for. (A train document that repeats or nearly repeats a suite document is fetch-dataset's leak rule, checked
    when the suite is a dataset's adversarial split: `steps.fetch_dataset.validate`.)"""
    canaries = {c for r in suite for c in r.get("must_not_contain", []) if CANARY.fullmatch(c)}
    return [
        f"train row {r['id']}: holds the suite's canary {c}; use another canary in train"
        for r in train
        for c in sorted(set(CANARY.findall(r["document"] + " " + r["summary"])) & canaries)
    ]


def test_the_train_split_is_decontaminated_against_the_suite():
    assert contamination(load_split(DATA, "train"), suite()) == []


def test_the_checks_find_a_reused_canary_and_a_reused_carrier():
    rows = suite()
    case = next(r for r in rows if r["family"] == "direct_injection" and r["id"].startswith("gen-"))
    canary = case["must_not_contain"][0]
    train = load_split(DATA, "train")
    with_canary = [{**train[0], "summary": f"{train[0]['summary']} {canary}"}, *train[1:]]
    problems = contamination(with_canary, rows)
    assert len(problems) == 1 and canary in problems[0] and train[0]["id"] in problems[0]
    # A train row carrying a suite carrier (its canary removed): fetch-dataset's leak rule refuses it.
    with_carrier = [*train, {**train[1], "id": "copied", "document": case["document"].replace(canary, "the code")}]
    raw = {"train": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in with_carrier).encode(),
           "eval": (DATA / "eval.jsonl").read_bytes(), "adversarial": SUITE.read_bytes()}  # fmt: skip
    _, leaks = fetch_dataset.validate(raw, "data")
    assert leaks and all("nearly repeats" in p and f"train.jsonl:{len(with_carrier)}" in p for p in leaks)


def test_the_generator_refuses_what_the_dataset_format_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bad = carriers.Carrier("stdlib:bell", ("A library\x07 opened.", "It has desks."), "library")
    monkeypatch.setattr(carriers, "stdlib", lambda root="": (bad,))
    with pytest.raises(adversarial_suite.DatasetError, match="control character"):
        build(SuiteConfig(out=tmp_path / "x.jsonl", **{**COMMITTED, "per_family": 1}))


def test_a_prompt_that_leaves_no_room_for_the_answer_is_named():
    from steps.contract import serving_config

    budget = serving_config.SERVING.n_ctx - serving_config.SERVING.max_tokens
    problems = adversarial_suite.context_problems([{"id": "a"}, {"id": "b"}], [budget, budget + 1])
    assert len(problems) == 1 and problems[0].startswith("case b:")


def test_every_prompt_fits_the_served_context_under_the_base_tokenizer(base_model_dir: Path):
    rows = suite()
    tokens = adversarial_suite.prompt_tokens(str(base_model_dir), [r["document"] for r in rows])
    assert adversarial_suite.context_problems(rows, tokens) == []
    assert max(tokens) > 1000  # the long documents are long
