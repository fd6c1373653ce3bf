"""The gate's statistics on paired pass/fail outcomes: an exact test per comparison, Holm's correction across them,
intervals, and the gate's operating characteristics by simulation. Plain numpy/scipy; evaluate's gate decides with it.

Every comparison is paired: the same cases, answered by the candidate and by one rival, each case passed or failed by
each. Of a comparison's n cases, `worse` is how many the rival passes and the candidate fails, `better` the reverse
(the discordant pairs; concordant pairs say nothing about the difference). The question is one-sided: is the candidate
worse than the rival by more than a margin δ (its pass rate lower by more than δ)?

- **Test**: H0 "p_rival − p_candidate ≤ δ" (within the margin) against H1 "> δ". Statistic: the score
  z = (worse − better − nδ) / √max(worse + better, 1). p-value: the exact unconditional probability of a z at least
  this large under H0, maximised over the unknown share of discordant pairs (the nuisance) — Suissa & Shuster's exact
  unconditional McNemar test (Biometrics 1991), extended to a margin; with δ = 0 it tests "no worse", and is exact
  (its size never exceeds α) without conditioning on the discordant count as McNemar's binomial test does.
- **Correction**: Holm's step-down across every comparison of one rival (families, hijack rate, stop rate) at level
  α / (number of rivals) — Bonferroni across rivals — so the chance of refusing a candidate exactly as safe as its
  rivals anywhere is at most α.
- **Interval**: Newcombe's hybrid score interval for paired proportions (method 10, Stat Med 1998) for
  p_candidate − p_rival, two-sided at 1 − 2α: its upper bound below −δ is, roughly, what the test refuses.
- **Operating characteristics** (`operating_characteristics`): the gate re-run on simulated suites built from the
  observed per-case pairs — resampled cases, each pair's two outcomes swapped at random (a candidate exactly as safe
  as its rival) — gives the chance of refusing an equally safe candidate; the same with one family's passes removed at
  random so that it is `regression` worse gives the power to refuse it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

# Points of the nuisance (share of discordant pairs) the exact p-value is maximised over: 200 points in [0, 1] put the
# maximum within 1e-3 of the supremum (checked at 60 cases against 2,000 points in tests/test_gate_stats.py).
NUISANCE_GRID = 200


@dataclass(frozen=True)
class Paired:
    """Counts of one paired comparison: cases, rival-pass/candidate-fail (`worse`), the reverse (`better`), and how
    many each passed."""

    n: int
    worse: int
    better: int
    candidate: int
    rival: int

    @classmethod
    def of(cls, candidate: Sequence[bool], rival: Sequence[bool]) -> Paired:
        if len(candidate) != len(rival):
            raise ValueError(f"paired outcomes of different lengths: {len(candidate)} vs {len(rival)}")
        c = np.asarray(candidate, dtype=bool)
        r = np.asarray(rival, dtype=bool)
        return cls(len(c), int((r & ~c).sum()), int((c & ~r).sum()), int(c.sum()), int(r.sum()))

    @property
    def difference(self) -> float:
        """p_candidate − p_rival."""
        return (self.candidate - self.rival) / self.n if self.n else 0.0


def _z(n: int, margin: float) -> np.ndarray:
    """The score statistic for every (worse, better) of n cases, as an (n+1, n+1) array (impossible cells: -inf)."""
    w, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    z = (w - b - n * margin) / np.sqrt(np.maximum(w + b, 1))
    return np.where(w + b <= n, z, -np.inf)


@functools.lru_cache(maxsize=256)
def p_value_table(n: int, margin: float) -> np.ndarray:
    """The exact unconditional p-value for every (worse, better) of n cases under H0 "p_rival − p_cand ≤ margin"."""
    z = _z(n, margin)
    w, b = np.nonzero(np.isfinite(z))
    # Cells in order of decreasing z; cells of equal z form one group and share one tail probability (the tail at z
    # holds every cell with z' >= z).
    order = np.argsort(-z[w, b], kind="stable")
    w, b = w[order], b[order]
    zs = z[w, b]
    starts = np.flatnonzero(np.r_[True, zs[1:] != zs[:-1]])
    group = np.cumsum(np.r_[True, zs[1:] != zs[:-1]]) - 1
    log_multinomial = math.lgamma(n + 1) - gammaln(w + 1.0) - gammaln(b + 1.0) - gammaln(n - w - b + 1.0)
    worst = np.zeros(len(starts))
    # The supremum lies on the boundary p10 - p01 = margin (the test's power grows with the difference):
    # p01 = q, p10 = q + margin, q in [0, (1 - margin) / 2].
    for q in np.linspace(0.0, max(0.0, (1 - margin) / 2), NUISANCE_GRID):
        logp = log_multinomial + _xlogy(w, q + margin) + _xlogy(b, q) + _xlogy(n - w - b, 1.0 - 2 * q - margin)
        np.maximum(worst, np.cumsum(np.add.reduceat(np.exp(logp), starts)), out=worst)
    table = np.ones((n + 1, n + 1))
    table[w, b] = np.minimum(worst[group], 1.0)
    return table


def _xlogy(count: np.ndarray, prob: float) -> np.ndarray:
    """count * log(prob), with 0 * log 0 = 0 (no such outcome at probability 0 is certain, not impossible)."""
    if prob <= 0:
        return np.where(count == 0, 0.0, -np.inf)
    return count * math.log(prob)


def p_value(pair: Paired, margin: float) -> float:
    """Exact unconditional p-value of H0 "the candidate is at most `margin` worse than the rival" on `pair`."""
    if pair.worse == 0:
        # A candidate that lost no case is not shown worse: 1 is at least the exact value (which lies near 1), so the
        # test stays exact-or-conservative, and no table is built for the common large comparison without losses.
        return 1.0
    return float(p_value_table(pair.n, round(margin, 9))[pair.worse, pair.better])


def holm(p_values: Sequence[float], alpha: float) -> tuple[list[bool], list[float]]:
    """Holm's step-down: which hypotheses are rejected at family-wise level `alpha`, and the adjusted p-values."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return [a <= alpha for a in adjusted], adjusted


def wilson_interval(x: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (z: the normal quantile of the two-sided level)."""
    if n == 0:
        return 0.0, 1.0
    p = x / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(pair: Paired, confidence: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) for p_candidate − p_rival."""
    from scipy.stats import norm

    n = pair.n
    if n == 0:
        return -1.0, 1.0
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    both = pair.candidate - pair.better  # passed by both
    neither = n - both - pair.worse - pair.better
    p1, p2 = pair.candidate / n, pair.rival / n
    l1, u1 = wilson_interval(pair.candidate, n, z)
    l2, u2 = wilson_interval(pair.rival, n, z)
    # Correlation of the paired outcomes (phi), 0 where a margin is degenerate.
    denominator = pair.candidate * (n - pair.candidate) * pair.rival * (n - pair.rival)
    phi = (both * neither - pair.better * pair.worse) / math.sqrt(denominator) if denominator else 0.0
    diff = p1 - p2
    lower = diff - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    upper = diff + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, lower), min(1.0, upper)


def newcombe_independent(s1: int, n1: int, s2: int, n2: int, confidence: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for p1 − p2 of two independent samples (online traffic of
    two versions: different requests, so no pairing), two-sided at `confidence`."""
    from scipy.stats import norm

    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson_interval(s1, n1, z)
    l2, u2 = wilson_interval(s2, n2, z)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def clopper_pearson_upper(x: int, n: int, alpha: float) -> float:
    """One-sided exact upper confidence bound (level 1 − alpha) of a rate seen x times in n."""
    from scipy.stats import beta

    if n == 0 or x >= n:
        return 1.0
    return float(beta.ppf(1 - alpha, x + 1, n - x))


@dataclass(frozen=True)
class Comparison:
    """One hypothesis of the gate: the outcomes it compares (candidate vs one rival, paired per case) and its margin."""

    name: str
    rival: str
    candidate: tuple[bool, ...]
    rival_outcomes: tuple[bool, ...]
    margin: float


@dataclass(frozen=True)
class Tested:
    """One comparison's outcome: its counts, exact p-value, Holm-adjusted p-value, the level it was held to, and
    whether it is refused."""

    pair: Paired
    p_value: float
    p_holm: float
    level: float
    refused: bool


def test_all(comparisons: Sequence[Comparison], alpha: float) -> list[Tested]:
    """The gate's rule: each comparison's exact test, Holm within each rival at alpha / (number of rivals)."""
    rivals = sorted({c.rival for c in comparisons})
    out: list[Tested | None] = [None] * len(comparisons)
    for rival in rivals:
        idx = [i for i, c in enumerate(comparisons) if c.rival == rival]
        pairs = [Paired.of(comparisons[i].candidate, comparisons[i].rival_outcomes) for i in idx]
        ps = [p_value(pair, comparisons[i].margin) for i, pair in zip(idx, pairs, strict=True)]
        level = alpha / len(rivals)
        rejected, adjusted = holm(ps, level)
        for i, pair, p, adj, rej in zip(idx, pairs, ps, adjusted, rejected, strict=True):
            out[i] = Tested(pair, p, adj, level, rej)
    return [t for t in out if t is not None]


def _simulate(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    margins: list[float],
    alpha: float,
    degrade: int | None,
    regression: float,
    sims: int,
    rng: np.random.Generator,
) -> float:
    """Share of simulated suites on which Holm refuses anything; `degrade`: index of the comparison made worse.

    Holm refuses something exactly when its first step does: the smallest p-value is at most alpha / m."""
    smallest = np.ones(sims)
    for k, ((cand, rival), margin) in enumerate(zip(pairs, margins, strict=True)):
        n = len(cand)
        if n == 0 or (k != degrade and not (cand != rival).any()):
            continue  # no discordant pair to swap: never a loss, p = 1 (see `p_value`)
        pick = rng.integers(0, n, size=(sims, n))
        c, r = cand[pick], rival[pick]
        swap = rng.random((sims, n)) < 0.5
        c, r = np.where(swap, r, c), np.where(swap, c, r)
        if k == degrade:
            passing = c.mean(axis=1, keepdims=True)
            drop = np.minimum(1.0, regression / np.maximum(passing, 1e-9))
            c = c & (rng.random((sims, n)) >= drop)
        worse = (r & ~c).sum(axis=1)
        better = (c & ~r).sum(axis=1)
        ps = np.where(worse == 0, 1.0, p_value_table(n, round(margin, 9))[worse, better])
        smallest = np.minimum(smallest, ps)
    return float((smallest * len(pairs) <= alpha).mean())


@dataclass(frozen=True)
class OperatingCharacteristics:
    """For one rival: P(refuse | candidate exactly as safe) and, per comparison, P(refuse | `regression` worse)."""

    rival: str
    alpha: float
    regression: float
    sims: int
    false_refusal: float
    power: dict[str, float]

    @property
    def least_power(self) -> float:
        return min(self.power.values(), default=0.0)


def operating_characteristics(
    comparisons: Sequence[Comparison], alpha: float, regression: float, sims: int, seed: int, degradable: set[str]
) -> list[OperatingCharacteristics]:
    """The gate's error rates for these comparisons, by simulation from their per-case outcomes (see the module's
    docstring); power is computed for the comparisons named in `degradable` (e.g. the adversarial families)."""
    rivals = sorted({c.rival for c in comparisons})
    level = alpha / max(1, len(rivals))
    results = []
    for rival in rivals:
        mine = [c for c in comparisons if c.rival == rival]
        pairs = [(np.asarray(c.candidate, dtype=bool), np.asarray(c.rival_outcomes, dtype=bool)) for c in mine]
        margins = [c.margin for c in mine]
        rng = np.random.default_rng(seed)
        null = _simulate(pairs, margins, level, None, regression, sims, rng)
        power = {
            c.name: _simulate(pairs, margins, level, k, regression, sims, rng)
            for k, c in enumerate(mine)
            if c.name in degradable
        }
        results.append(OperatingCharacteristics(rival, alpha, regression, sims, null, power))
    return results
