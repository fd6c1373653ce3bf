"""GGUF parity on the eval split is judged at its interval's bound, with documents as the unit resampled: the
statistics (steps/gguf/parity.py `intervals`) and the decision (steps/convert_gguf/verdict.py `judge_eval`) on
constructed per-document figures, where the answer is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from steps import convert_gguf
from steps.gguf import parity, quants, settings


def docs(agreements: list[tuple[int, int]], kl: float = 0.001, eos: tuple[bool, bool] = (True, True)) -> list[dict]:
    return [
        {"id": f"d{i}", "tokens_equal": True, "positions": n, "agree": a, "kl_sum": kl * n, "hf_eos": eos[0],
         "gguf_eos": eos[1]}
        for i, (a, n) in enumerate(agreements)
    ]  # fmt: skip


def summary(d: list[dict]) -> dict:
    return {"file": "m-Q8_0.gguf", "tokens_equal": True, "tokens_differ": [],
            **parity.intervals(d, settings.PARITY_CONFIDENCE, settings.PARITY_RESAMPLES)}  # fmt: skip


CFG = convert_gguf.ConvertConfig(adapter=Path("a"), dataset=Path("d"), out=Path("o"))
LIMITS = convert_gguf.thresholds(CFG)


def test_the_bound_refuses_what_the_point_figure_would_pass():
    # 20 documents the GGUF reproduces exactly and 4 where it parts on half the positions: 92.5 % agreement overall,
    # above the 0.9 threshold; but the documents disagree so much that the interval reaches well below it.
    d = docs([(40, 40)] * 20 + [(20, 40)] * 4)
    s = summary(d)
    assert s["top1_agreement"]["point"] == pytest.approx(0.9167, abs=1e-4)
    assert s["top1_agreement"]["low"] < 0.9 < s["top1_agreement"]["point"] <= s["top1_agreement"]["high"]
    assert convert_gguf.judge_eval(s, "Q8_0", LIMITS, bound=False) == []
    why = convert_gguf.judge_eval(s, "Q8_0", LIMITS)
    assert len(why) == 1 and "top-1 agreement 95% bound" in why[0] and "< 0.9" in why[0] and "24 documents" in why[0]


def test_the_same_point_figure_spread_evenly_passes_at_the_bound():
    # The same overall agreement, but every document alike: the documents agree, the interval is narrow, it passes.
    s = summary(docs([(37, 40)] * 24))
    assert s["top1_agreement"]["low"] == s["top1_agreement"]["point"] == pytest.approx(0.925)
    assert convert_gguf.judge_eval(s, "Q8_0", LIMITS) == []


def test_documents_are_the_unit_not_positions():
    # One document of 1000 positions that all agree and one of 1000 that all differ: 50 % either way, but with two
    # documents the interval must span almost everything (a resample of positions would give ±3 points).
    s = summary(docs([(1000, 1000), (0, 1000)]))
    assert s["top1_agreement"]["low"] == 0.0 and s["top1_agreement"]["high"] == 1.0


def test_kl_and_stop_rate_are_judged_at_their_upper_bounds():
    good = [(40, 40)] * 24
    # KL: 22 documents at 0.01, 2 at 0.4 per position: mean 0.042 under 0.05, upper bound over it.
    d = docs(good[:22], kl=0.01) + docs(good[:2], kl=0.4)
    s = summary(d)
    assert s["mean_kl"]["point"] < 0.05 < s["mean_kl"]["high"]
    assert convert_gguf.judge_eval(s, "Q8_0", LIMITS, bound=False) == []
    assert any("mean KL 95% bound" in w for w in convert_gguf.judge_eval(s, "Q8_0", LIMITS))
    # Stop rate: HF stops after every summary, the GGUF misses 4 of 24 (17 % drop, under the 20 % allowed).
    d = docs(good[:20]) + docs(good[:4], eos=(True, False))
    s = summary(d)
    assert s["eos_rate_drop"]["point"] == pytest.approx(4 / 24) and s["eos_rate_drop"]["high"] > 0.2
    assert convert_gguf.judge_eval(s, "Q8_0", LIMITS, bound=False) == []
    assert any("stops after the summary less often" in w for w in convert_gguf.judge_eval(s, "Q8_0", LIMITS))
    # The GGUF's own stop rate carries an exact (Clopper-Pearson) interval: 20 of 24.
    assert s["eos_rate"]["low"] == pytest.approx(0.6262, abs=1e-3) and s["eos_rate"]["high"] == pytest.approx(
        0.9526, abs=1e-3
    )


def test_the_thresholds_are_the_gguf_package_s_and_recorded():
    recorded = convert_gguf.thresholds(CFG)
    assert recorded["min_top1_agreement"] == {q: quants.QUANTS[q].min_top1 for q in quants.QUANTIZATIONS}
    assert recorded["max_mean_kl"] == {q: quants.QUANTS[q].max_kl for q in quants.QUANTIZATIONS}
    assert recorded["max_eos_rate_drop"] == settings.PARITY_MAX_EOS_DROP
    assert recorded["eval_split"]["confidence"] == settings.PARITY_CONFIDENCE


def test_probes_of_similar_length_are_generated_together():
    assert parity._length_groups([100, 1100, 90, 120, 110]) == [[2, 0, 4, 3], [1]]
    assert parity._length_groups([5]) == [[0]]
