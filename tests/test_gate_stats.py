"""The gate's statistics (steps/core/gate_stats.py) checked against what they claim: the exact test's size never exceeds
α, its p-values against a direct enumeration, Holm against its definition, the interval's coverage, and the error
rates the gate reports against the gate itself run on reseeded synthetic suites of known quality.

    pytest tests/test_gate_stats.py
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from steps.core import gate_stats
from steps.core.gate_stats import Comparison, Paired, holm, newcombe_interval, p_value, p_value_table
from steps.evaluate import EvaluateConfig
from steps.evaluate.gate import decide, operating_characteristics


def trinomial(n: int, p10: float, p01: float) -> np.ndarray:
    """P(worse = w, better = b) for n cases, by direct enumeration."""
    out = np.zeros((n + 1, n + 1))
    for w in range(n + 1):
        for b in range(n + 1 - w):
            out[w, b] = math.comb(n, w) * math.comb(n - w, b) * p10**w * p01**b * (1 - p10 - p01) ** (n - w - b)
    return out


@pytest.mark.parametrize("n, margin", [(12, 0.0), (25, 0.0), (25, 0.1)])
def test_the_exact_test_never_refuses_more_often_than_alpha_under_its_null(n: int, margin: float):
    table = p_value_table(n, margin)
    for alpha in (0.01, 0.05):
        refused = table <= alpha
        for q in np.linspace(0, (1 - margin) / 2, 37):  # on the boundary p10 - p01 = margin, other grid points
            size = trinomial(n, q + margin, q)[refused].sum()
            assert size <= alpha + 1e-3, (n, margin, alpha, q, size)


def test_p_values_match_a_direct_enumeration_of_the_tail():
    n, margin = 14, 0.0
    z = lambda w, b: (w - b - n * margin) / math.sqrt(max(w + b, 1))  # noqa: E731
    for w, b in [(5, 0), (3, 1), (0, 0), (1, 4)]:
        worst = 0.0
        for q in np.linspace(0, 0.5, gate_stats.NUISANCE_GRID):
            probs = trinomial(n, q, q)
            worst = max(worst, sum(probs[i, j] for i in range(n + 1) for j in range(n + 1 - i)
                                   if z(i, j) >= z(w, b) - 1e-12))  # fmt: skip
        assert p_value(Paired(n, w, b, 0, 0), margin) == pytest.approx(worst, abs=1e-9)


def test_the_nuisance_grid_finds_the_supremum():
    n = 60
    coarse = p_value_table(n, 0.0)
    saved = gate_stats.NUISANCE_GRID
    try:
        gate_stats.NUISANCE_GRID = 2000
        p_value_table.cache_clear()
        fine = p_value_table(n, 0.0)
    finally:
        gate_stats.NUISANCE_GRID = saved
        p_value_table.cache_clear()
    assert np.abs(fine - coarse).max() < 1e-3


def test_more_losses_give_smaller_p_values_and_a_margin_larger_ones():
    ps = [p_value(Paired(30, w, 1, 0, 0), 0.0) for w in range(1, 10)]
    assert ps == sorted(ps, reverse=True) and ps[-1] < 0.01 < ps[0]
    assert p_value(Paired(30, 8, 1, 0, 0), 0.1) > p_value(Paired(30, 8, 1, 0, 0), 0.0)
    assert p_value(Paired(30, 0, 0, 0, 0), 0.0) == 1.0


def test_holm_matches_its_definition():
    rejected, adjusted = holm([0.01, 0.04, 0.03, 0.2], 0.05)
    # sorted: 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08 -> max(0.09, 0.08)=0.09, 0.2*1 -> 0.2
    assert adjusted == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert rejected == [True, False, False, False]


def test_the_paired_interval_covers_the_true_difference_at_its_level():
    rng = np.random.default_rng(0)
    n, p10, p01 = 30, 0.15, 0.05  # p_candidate - p_rival = p01 - p10 = -0.10
    covered = 0
    for _ in range(2000):
        outcome = rng.choice(4, size=n, p=[p10, p01, 0.5, 1 - p10 - p01 - 0.5])
        rival = np.isin(outcome, (0, 2))
        cand = np.isin(outcome, (1, 2))
        lower, upper = newcombe_interval(Paired.of(cand, rival), 0.95)
        covered += lower <= p01 - p10 <= upper
    # A score interval, not an exact one: near its level, a little under at some points (92.8 % here; Newcombe 1998
    # reports the same for method 10). It is reported beside the exact test, which decides.
    assert covered / 2000 >= 0.92


# --- the gate's error rates, on synthetic suites of known quality ----------------------------------------------------
FAMILIES = 14  # as many as the committed suite has


def synthetic(rng: np.random.Generator, n: int, regression_on: str | None, regression: float) -> dict[str, list[dict]]:
    """A suite of FAMILIES families of n cases, candidate and rival paired per case. The rival passes 80 % of cases;
    an equally safe candidate answers like it except on 10 % of cases, flipped 5 % each way (run-to-run noise:
    threads, CPU, summation order). On `regression_on`, `regression` more of the cases go the candidate's worse way."""
    both, worse, better = 0.75, 0.05, 0.05  # P(both pass), P(rival passes, candidate fails), P(the reverse)
    judged: dict[str, list[dict]] = {"base": [], "candidate": []}
    for f in range(FAMILIES):
        family = f"family_{f:02d}"
        shift = regression if family == regression_on else 0.0
        cells = rng.choice(4, size=n, p=[both - shift, worse + shift, better, 1 - both - worse - better])
        for i, cell in enumerate(cells):
            for who, passed in (("base", cell in (0, 1)), ("candidate", cell in (0, 2))):
                judged[who].append({"id": f"{family}-{i}", "attack": family, "passed": bool(passed),
                                    "hijacked": False, "stopped": True})  # fmt: skip
    return judged


def gate_refuses(judged: dict[str, list[dict]], cfg: EvaluateConfig) -> bool:
    scored = {who: [{"rougeL": 0.3, "stopped": True}] * 24 for who in judged}
    metrics = {who: {"rougeL": 0.3} for who in judged}
    metrics["bootstrap"] = {"base": {"mean_gain": 0.1, "lower": 0.05, "upper": 0.2, "confidence": 0.95}}
    _, checks = decide(metrics, judged, scored, {"passed": True, "quantization": "Q8_0"}, cfg)
    return not all(c["passed"] for c in checks if c["check"].startswith("adversarial_"))


CFG = EvaluateConfig(dataset=Path("d"), gguf=Path("g"), out=Path("o"), min_family_pass_rate=0.0)


def test_a_candidate_as_safe_as_its_rival_passes_on_at_least_95_percent_of_reseeded_suites():
    rng = np.random.default_rng(1)
    refusals = [gate_refuses(synthetic(rng, 30, None, 0.0), CFG) for _ in range(150)]
    assert np.mean(refusals) <= 0.05


@pytest.mark.parametrize("n, least", [(30, 0.08), (100, 0.8)])
def test_a_candidate_20_points_worse_on_one_family_is_refused_as_often_as_the_suite_size_allows(n: int, least: float):
    """At 30 cases a family (the committed suite's size) the gate catches a 20-point regression on one family of 14
    only ~17 % of the time; the 80 % target needs ~90-100 cases a family (README, "The gate")."""
    rng = np.random.default_rng(2)
    refusals = [gate_refuses(synthetic(rng, n, "family_03", 0.2), CFG) for _ in range(150)]
    assert np.mean(refusals) >= least
    if n == 30:
        assert np.mean(refusals) < 0.8  # the honest figure: not the target at this size


def test_the_reported_error_rates_agree_with_the_gate_on_reseeded_suites():
    """The operating characteristics evaluate prints (simulated from one suite's per-case outcomes) agree with the
    gate's real refusal rates on fresh suites of the same quality, within simulation error."""
    rng = np.random.default_rng(3)
    cfg = EvaluateConfig(dataset=Path("d"), gguf=Path("g"), out=Path("o"), min_family_pass_rate=0.0,
                         oc_simulations=1000)  # fmt: skip
    n = 60
    one = synthetic(rng, n, None, 0.0)
    scored = {who: [{"rougeL": 0.3, "stopped": True}] * 24 for who in one}
    reported = operating_characteristics(one, scored, cfg)["base"]
    assert reported["false_refusal"] <= 0.05
    real = np.mean([gate_refuses(synthetic(rng, n, "family_03", 0.2), cfg) for _ in range(300)])
    # The synthetic families are alike, so each family's reported power estimates the same rate; their mean is
    # compared (one family's figure carries the sampling error of its 60 observed cases).
    mean_power = float(np.mean(list(reported["power"].values())))
    assert abs(mean_power - real) < 0.1, (reported["power"], real)


def test_comparisons_are_paired_by_case():
    pair = Paired.of([True, False, True, False], [True, True, False, False])
    assert (pair.n, pair.worse, pair.better, pair.candidate, pair.rival) == (4, 1, 1, 2, 2)
    with pytest.raises(ValueError, match="different lengths"):
        Paired.of([True], [True, False])
    [tested] = gate_stats.test_all([Comparison("x", "base", (False,) * 20, (True,) * 20, 0.0)], 0.05)
    assert tested.refused and tested.pair.worse == 20
