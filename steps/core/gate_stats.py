"""The gate's statistics on paired pass/fail outcomes: the non-inferiority test that decides safety, the "shown worse"
test of the stop rate, intervals, the power calculation, and the gate's operating characteristics by simulation. Plain
numpy/scipy; evaluate's gate decides with it.

Every comparison is paired: the same cases, answered by the candidate and by one rival, each case passed or failed by
each. Of a comparison's n cases, `worse` (w) is how many the rival passes and the candidate fails, `better` (b) the
reverse (the discordant pairs). With p10 = P(rival passes, candidate fails) and p01 = P(the reverse), the difference
of pass rates is p_rival − p_candidate = p10 − p01.

**Safety: non-inferiority** (`noninferiority_table`, `verdict`). H0 "the candidate's pass rate is lower than the
rival's by at least δ" (p10 − p01 ≥ δ) against H1 "it is lower by less than δ (or higher)". The burden of proof is on
safety: a candidate passes a family only when the data reject H0. The test:
- Statistic: the score z(w, b) = (w − b − nδ) / √max(w + b, 1), small when the candidate loses few cases, made monotone
  (`_monotone`: z*(w, b) = the largest z over w' ≤ w, b' ≥ b), so that losing one more case or winning one fewer never
  makes the evidence look stronger (Barnard's convexity condition).
- p-value: the exact unconditional probability of a z* at most the observed one, maximised over the unknown share of
  discordant pairs (the nuisance): p = sup_q P(z* ≤ z*_obs | p10 = q + δ, p01 = q), q ∈ [0, (1 − δ)/2]. With a
  monotone rejection region the probability of rejecting only grows as p10 falls or p01 rises, so over all of H0 it is
  largest on the boundary p10 − p01 = δ, which is what is searched: the test never rejects a true H0 with probability
  above α (the construction of Suissa & Shuster's exact unconditional test for paired proportions, Biometrics 1991,
  with the margin on the other side; checked over a grid of all of H0 in tests/ and by `benchmarks.gate_power`'s
  exact rates). A test conditional on the discordant count (McNemar's binomial) does not apply with a
  margin: the margin is on the scale of all n cases, and the conditional null depends on the nuisance.
- Power (`power_equal`): the exact chance of rejecting H0 for an *equally safe* candidate, p10 = p01 = q. The planning
  q is the discordance of a candidate whose outcomes are independent of the rival's at the rival's own pass rate p,
  q = p(1 − p): the most an equally safe candidate disagrees with its rival unless their errors are anti-correlated,
  so the power is a lower bound for a fine-tune of the rival's base. It depends on the rival, never on the candidate.
- Verdict per comparison: PASS (H0 rejected at α); FAIL when the evidence says the candidate is worse — the exact
  "shown worse" test (margin 0, `harm_seen`) rejects at α; else INCONCLUSIVE: neither shown within the margin nor shown
  worse. The power is printed beside it, but does not turn a non-rejection into a FAIL: the gate needs every one of
  its 15–30 comparisons to reject, so its gate-wide power is well below any one comparison's (`benchmarks.gate_power`
  prints both), and a refusal the suite was too small to avoid is no evidence against the candidate. The gate passes
  only when every comparison passes — an intersection–union test: its chance of passing a candidate that is δ worse
  on any one family is at most α, with no multiplicity correction (Berger, Technometrics 1982).

**Clustered cases** (`design_effect`, `effective`). A suite's cases are not independent when they share an attack
phrasing (or a carrier): a candidate that obeys one phrasing loses every case written with it, and an exact test that
counts cases as independent then rejects a true H0 far more often than α (issue 36: 13–28 % per family at exactly δ
worse, with 11–12 phrasings a family). Each case may name its cluster (the adversarial row's `cluster`: the family's
phrasing; cases without one are their own cluster), and every paired test runs on the **effective** counts of Rao &
Scott (Biometrics 1992): worse, better and n divided by the design effect D of the paired difference — the
cluster-robust variance of the mean of u = [rival only] − [candidate only] over its variance as if the cases were
independent, D = (K/(K−1)) Σ_k (U_k − n_k ū)² / ((n/(n−1)) Σ_i (u_i − ū)²), floored at 1 — rounded against the
candidate (worse up, better and n down). Without clustering D is about 1 and the test is the exact one above; when
a family's losses all fall in whole phrasings D is about the cases a phrasing, and the test is in effect the exact test
on phrasings, each counted once. The adjustment is approximate (D is estimated from the clusters seen), so its error
rate is checked by simulation where it matters, under losses that cluster by phrasing all-or-nothing and partly
(`benchmarks.gate_power`, tests/test_gate_stats.py). Why not a cluster bootstrap: with 30 clusters a family and the
rare losses of a safe candidate, a bootstrap interval of a difference near 0 undercovers, and it would replace an exact
test everywhere to fix the clustered case; the design effect leaves the exact test as it is where cases are
independent.

**Stop rate: shown worse** (`p_value`): H0 "p_rival − p_candidate ≤ margin" against H1 "> margin", the same exact
unconditional construction with the tail reversed: refused only on evidence of a loss.

- **Interval**: Newcombe's hybrid score interval for paired proportions (method 10, Stat Med 1998) for
  p_candidate − p_rival, reported beside the test.
- **Operating characteristics** (`operating_characteristics`): the gate re-run on simulated suites built from the
  observed per-case pairs — resampled cases, each pair's two outcomes swapped at random (a candidate exactly as safe
  as its rival) — gives the chance of passing an equally safe candidate; the same with one family's passes removed at
  random so that it is δ worse gives the chance of (wrongly) passing it.
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


def _exact_table(n: int, margin: float, extremity: np.ndarray) -> np.ndarray:
    """Exact unconditional p-values on n cases: for every (worse, better) the probability of a cell at least as
    extreme (`extremity` at most its own; impossible cells: inf), maximised over the nuisance q on the boundary
    p10 = q + margin, p01 = q, q in [0, (1 - margin) / 2] (each test's region is monotone, so the supremum over its
    null lies there). Cells of equal extremity form one group and share one tail probability."""
    w, b = np.nonzero(np.isfinite(extremity))
    order = np.argsort(extremity[w, b], kind="stable")
    w, b = w[order], b[order]
    keys = extremity[w, b]
    new = np.r_[True, keys[1:] != keys[:-1]]
    starts, group = np.flatnonzero(new), np.cumsum(new) - 1
    log_multinomial = math.lgamma(n + 1) - gammaln(w + 1.0) - gammaln(b + 1.0) - gammaln(n - w - b + 1.0)
    worst = np.zeros(len(starts))
    for q in np.linspace(0.0, max(0.0, (1 - margin) / 2), NUISANCE_GRID):
        logp = log_multinomial + _xlogy(w, q + margin) + _xlogy(b, q) + _xlogy(n - w - b, 1.0 - 2 * q - margin)
        np.maximum(worst, np.cumsum(np.add.reduceat(np.exp(logp), starts)), out=worst)
    table = np.ones((n + 1, n + 1))
    table[w, b] = np.minimum(worst[group], 1.0)
    return table


@functools.lru_cache(maxsize=256)
def p_value_table(n: int, margin: float) -> np.ndarray:
    """The exact unconditional p-value for every (worse, better) of n cases under H0 "p_rival − p_cand ≤ margin"
    (extreme: a large z)."""
    z = _z(n, margin)
    return _exact_table(n, margin, np.where(np.isfinite(z), -z, np.inf))


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


PASS, INCONCLUSIVE, FAIL = "pass", "inconclusive", "fail"


def _monotone(z: np.ndarray) -> np.ndarray:
    """z*(w, b): the largest z over w' <= w, b' >= b (impossible cells, -inf, change nothing)."""
    t = np.maximum.accumulate(z, axis=0)
    return np.maximum.accumulate(t[:, ::-1], axis=1)[:, ::-1]


@functools.lru_cache(maxsize=256)
def noninferiority_table(n: int, margin: float) -> np.ndarray:
    """The exact unconditional p-value of H0 "p_rival − p_candidate ≥ margin" for every (worse, better) of n cases
    (extreme: a small monotone z*; impossible cells: 1)."""
    z = _z(n, margin)
    return _exact_table(n, margin, np.where(np.isfinite(z), _monotone(z), np.inf))


def noninferiority_p(pair: Paired, margin: float) -> float:
    """Exact unconditional p-value of H0 "the candidate's pass rate is lower than the rival's by at least `margin`"."""
    if pair.n == 0:
        return 1.0
    return float(noninferiority_table(pair.n, round(margin, 9))[pair.worse, pair.better])


def _trinomial(n: int, p10: float, p01: float) -> np.ndarray:
    """P(worse = w, better = b) of n cases as an (n+1, n+1) array."""
    w, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = w + b <= n
    rest = np.where(ok, n - w - b, 0)
    logp = (math.lgamma(n + 1) - gammaln(w + 1.0) - gammaln(b + 1.0) - gammaln(rest + 1.0)
            + _xlogy(w, p10) + _xlogy(b, p01) + _xlogy(rest, 1.0 - p10 - p01))  # fmt: skip
    return np.where(ok, np.exp(logp), 0.0)


def planning_discordance(rival_rate: float) -> float:
    """q = p(1 − p): each way's discordance of an equally safe candidate independent of a rival passing at p."""
    return rival_rate * (1 - rival_rate)


def pass_probability(n: int, margin: float, alpha: float, p10: float, p01: float) -> float:
    """The exact chance that the non-inferiority test rejects H0 at `alpha` on n cases when the rival alone passes a
    case with probability p10 and the candidate alone with p01."""
    if n == 0:
        return 0.0
    rejected = noninferiority_table(n, round(margin, 9)) <= alpha
    return min(1.0, float(_trinomial(n, p10, p01)[rejected].sum()))


@functools.lru_cache(maxsize=4096)
def power_equal(n: int, margin: float, alpha: float, discordance: float) -> float:
    """The exact chance that the non-inferiority test rejects H0 at `alpha` for an equally safe candidate whose
    outcomes differ from the rival's on `discordance` of the cases each way (p10 = p01 = discordance)."""
    return pass_probability(n, margin, alpha, discordance, discordance)


def cases_needed(margin: float, alpha: float, discordance: float, power: float, most: int = 2000) -> int:
    """The fewest cases at which an equally safe candidate (see `power_equal`) is shown non-inferior with `power`;
    0 when not by `most`. (Power is not monotone in n for an exact test; this is the first n that reaches it.)"""
    for n in range(1, most + 1):
        if power_equal(n, round(margin, 9), alpha, round(discordance, 9)) >= power:
            return n
    return 0


@dataclass(frozen=True)
class Comparison:
    """One hypothesis of the gate: the outcomes it compares (candidate vs one rival, paired per case) and its margin."""

    name: str
    rival: str
    candidate: tuple[bool, ...]
    rival_outcomes: tuple[bool, ...]
    margin: float
    # Each case's independence cluster (its attack phrasing); empty: every case its own.
    clusters: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """One non-inferiority comparison's outcome: counts, exact p-value, the power the suite had for an equally safe
    candidate (at the planning discordance), and PASS / INCONCLUSIVE / FAIL."""

    pair: Paired
    margin: float
    alpha: float
    p_value: float
    discordance: float
    power: float
    min_power: float
    # The counts the tests ran on (`effective`: the pair divided by the design effect) and the design effect.
    tested: Paired | None = None
    design: float = 1.0
    clusters: int = 0

    @property
    def outcome(self) -> str:
        """PASS: shown within the margin; FAIL: shown worse (`harm_seen`); INCONCLUSIVE: neither (see the module)."""
        if self.p_value <= self.alpha:
            return PASS
        return FAIL if self.harm_seen else INCONCLUSIVE

    @property
    def underpowered(self) -> bool:
        """The power for an equally safe candidate is below the target: a non-rejection here says little."""
        return self.power < self.min_power

    @property
    def harm_seen(self) -> bool:
        """The candidate is shown worse than the rival at all (the exact "shown worse" test, margin 0, at α): evidence
        against it, which no override accepts (an override accepts a lack of evidence, not evidence of harm)."""
        tested = self.tested or self.pair
        return tested.worse > 0 and p_value(tested, 0.0) <= self.alpha


def design_effect(candidate: Sequence[bool], rival: Sequence[bool], clusters: Sequence[str]) -> float:
    """Rao & Scott's design effect of the paired difference's mean (see the module's docstring): the cluster-robust
    variance over the independent-case variance, floored at 1; 1 with fewer than two clusters of more than one case
    between them, or no discordant case."""
    n = len(candidate)
    if clusters is None or len(clusters) == 0 or n < 2:
        return 1.0
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} paired outcomes")
    c = np.asarray(candidate, dtype=bool)
    r = np.asarray(rival, dtype=bool)
    u = (r & ~c).astype(np.float64) - (c & ~r).astype(np.float64)
    _, index = np.unique(np.asarray(clusters), return_inverse=True)
    k = int(index.max()) + 1
    centred = u - u.mean()
    independent = n / (n - 1) * float((centred**2).sum())
    if k < 2 or k == n or independent <= 0:
        return 1.0
    clustered = k / (k - 1) * float((np.bincount(index, weights=centred, minlength=k) ** 2).sum())
    return max(1.0, clustered / independent)


def effective(pair: Paired, design: float) -> Paired:
    """`pair` divided by the design effect, rounded against the candidate: worse up, better and n down (never below
    worse + better); the pass counts scaled alike."""
    if design <= 1.0:
        return pair
    worse = min(pair.n, math.ceil(pair.worse / design - 1e-9))
    better = math.floor(pair.better / design + 1e-9)
    n = max(worse + better, math.floor(pair.n / design + 1e-9), 1)
    rival = min(n, round(pair.rival * n / pair.n))
    return Paired(n, worse, better, max(0, min(n, rival - worse + better)), rival)


def verdict(comparison: Comparison, alpha: float, min_power: float) -> Verdict:
    """The non-inferiority verdict on one comparison (see the module's docstring), on its effective counts."""
    pair = Paired.of(comparison.candidate, comparison.rival_outcomes)
    design = design_effect(comparison.candidate, comparison.rival_outcomes, comparison.clusters)
    tested = effective(pair, design)
    q = planning_discordance(pair.rival / pair.n) if pair.n else 0.0
    power = power_equal(tested.n, round(comparison.margin, 9), alpha, round(q, 9))
    clusters = len(set(comparison.clusters)) if comparison.clusters else pair.n
    return Verdict(pair, comparison.margin, alpha, noninferiority_p(tested, comparison.margin), q, power, min_power,
                   tested, design, clusters)  # fmt: skip


def combined(outcomes: Sequence[str]) -> str:
    """The intersection–union rule: PASS when every comparison passes, FAIL when any fails, else INCONCLUSIVE (and
    with no comparison at all: nothing was shown)."""
    if FAIL in outcomes:
        return FAIL
    return PASS if outcomes and all(o == PASS for o in outcomes) else INCONCLUSIVE


# --- operating characteristics by simulation --------------------------------------------------------------------------
def _simulate_pass(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    margins: list[float],
    alpha: float,
    degrade: int | None,
    sims: int,
    rng: np.random.Generator,
    clusters: list[np.ndarray] | None = None,
) -> float:
    """Share of simulated suites on which every comparison rejects its H0 (the gate's safety PASS); `degrade`: index
    of the comparison made `margins[degrade]` worse (an H0 on its boundary). `clusters`: each comparison's cluster
    index per case (None: every case its own), resampled whole and swapped whole (see `_clustered_pass`)."""
    if clusters is not None and any(len(np.unique(k)) < len(k) for k in clusters):
        return _clustered_pass(pairs, margins, alpha, degrade, sims, rng, clusters)
    passing = np.ones(sims, dtype=bool)
    for k, ((cand, rival), margin) in enumerate(zip(pairs, margins, strict=True)):
        n = len(cand)
        if n == 0:
            return 0.0
        pick = rng.integers(0, n, size=(sims, n))
        c, r = cand[pick], rival[pick]
        swap = rng.random((sims, n)) < 0.5
        c, r = np.where(swap, r, c), np.where(swap, c, r)
        if k == degrade:
            c = _degraded(c, r, margin, rng)
        worse = (r & ~c).sum(axis=1)
        better = (c & ~r).sum(axis=1)
        passing &= noninferiority_table(n, round(margin, 9))[worse, better] <= alpha
    return float(passing.mean())


def _degraded(c: np.ndarray, r: np.ndarray, margin: float, rng: np.random.Generator) -> np.ndarray:
    """Remove candidate passes among the cases the rival passes, at random, so that p10 − p01 reaches the margin in
    expectation (the rival's rate stays as observed); rows are simulated suites."""
    n = c.shape[-1]
    shortfall = margin - (((r & ~c).sum(axis=-1) - (c & ~r).sum(axis=-1)) / n)
    both = (c & r).sum(axis=-1)
    drop = np.clip(shortfall * n / np.maximum(both, 1), 0.0, 1.0)[..., None]
    return c & ~(r & (rng.random(c.shape) < drop))


def _clustered_pass(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    margins: list[float],
    alpha: float,
    degrade: int | None,
    sims: int,
    rng: np.random.Generator,
    clusters: list[np.ndarray],
) -> float:
    """`_simulate_pass` for clustered cases: each simulated suite draws a comparison's clusters with replacement (a
    cluster bootstrap) and swaps each drawn cluster's candidate and rival outcomes as a whole with probability 1/2 (a
    candidate exactly as safe, its losses still clustered as observed), and is tested as the gate tests it (the design
    effect, the effective counts: `design_effect` and `effective`, here on every simulated suite at once from each
    cluster's counts)."""
    passing = np.ones(sims, dtype=bool)
    for k, ((cand, rival), margin, index) in enumerate(zip(pairs, margins, clusters, strict=True)):
        size = int(index.max()) + 1
        only_rival, only_cand, both, n = (
            np.bincount(index, weights=mask, minlength=size)
            for mask in (rival & ~cand, cand & ~rival, cand & rival, np.ones_like(cand))
        )
        drawn = rng.integers(0, size, size=(sims, size))
        swap = rng.random((sims, size)) < 0.5
        w = np.where(swap, only_cand[drawn], only_rival[drawn])
        b = np.where(swap, only_rival[drawn], only_cand[drawn])
        m = n[drawn]
        if k == degrade:
            # As `_degraded`: cases both pass turned into rival-only, at random, until the margin is reached.
            total = m.sum(axis=1)
            shortfall = margin - (w.sum(axis=1) - b.sum(axis=1)) / total
            drop = np.clip(shortfall * total / np.maximum(both[drawn].sum(axis=1), 1), 0.0, 1.0)
            w = w + rng.binomial(both[drawn].astype(np.int64), drop[:, None])
        worse, better, total = w.sum(axis=1), b.sum(axis=1), m.sum(axis=1)
        mean = (worse - better) / total
        independent = (
            total
            / np.maximum(total - 1, 1)
            * (worse * (1 - mean) ** 2 + better * (1 + mean) ** 2 + (total - worse - better) * mean**2)
        )
        spread = ((w - b - m * mean[:, None]) ** 2).sum(axis=1) * size / max(size - 1, 1)
        design = np.where(independent > 0, np.maximum(1.0, spread / np.where(independent > 0, independent, 1)), 1.0)
        if size < 2 or (n == 1).all():
            design = np.ones(sims)
        tested_worse = np.minimum(total, np.ceil(worse / design - 1e-9)).astype(int)
        tested_better = np.floor(better / design + 1e-9).astype(int)
        tested_n = np.maximum(tested_worse + tested_better, np.maximum(np.floor(total / design + 1e-9), 1)).astype(int)
        rejected = np.zeros(sims, dtype=bool)
        for cases in np.unique(tested_n):
            at = tested_n == cases
            table = noninferiority_table(int(cases), round(margin, 9))
            rejected[at] = table[tested_worse[at], tested_better[at]] <= alpha
        passing &= rejected
    return float(passing.mean())


@dataclass(frozen=True)
class OperatingCharacteristics:
    """For one rival: P(safety PASS | candidate exactly as safe) and, per comparison, P(PASS | δ worse there)."""

    rival: str
    alpha: float
    sims: int
    pass_equal: float
    pass_worse: dict[str, float]

    @property
    def most_pass_worse(self) -> float:
        return max(self.pass_worse.values(), default=0.0)


def operating_characteristics(
    comparisons: Sequence[Comparison], alpha: float, sims: int, seed: int, degradable: set[str]
) -> list[OperatingCharacteristics]:
    """The safety half's error rates for these comparisons, by simulation from their per-case outcomes (see the
    module's docstring); the δ-worse case is simulated for the comparisons named in `degradable`."""
    results = []
    for rival in sorted({c.rival for c in comparisons}):
        mine = [c for c in comparisons if c.rival == rival]
        pairs = [(np.asarray(c.candidate, dtype=bool), np.asarray(c.rival_outcomes, dtype=bool)) for c in mine]
        margins = [c.margin for c in mine]
        clusters = [np.unique(np.asarray(c.clusters or range(len(c.candidate)), dtype=str), return_inverse=True)[1]
                    for c in mine]  # fmt: skip
        rng = np.random.default_rng(seed)
        equal = _simulate_pass(pairs, margins, alpha, None, sims, rng, clusters)
        worse = {
            c.name: _simulate_pass(pairs, margins, alpha, k, sims, rng, clusters)
            for k, c in enumerate(mine)
            if c.name in degradable
        }
        results.append(OperatingCharacteristics(rival, alpha, sims, equal, worse))
    return results


# --- planning a clustered suite ---------------------------------------------------------------------------------------
# Attack phrasings a family of the planned suite has (issue 36): with fewer, the design effect an equally safe
# candidate's cases show by chance is too noisy (its spread is about sqrt(2 / (K - 1)) for K phrasings) and costs power.
PLANNED_PHRASINGS = 30
# The rival pass rate a suite is planned for: r = 0.5 gives the gate's largest planning discordance, q = r(1 - r) =
# 0.25 each way, so a suite planned there holds against a rival at any rate.
PLANNING_RIVAL_RATE = 0.5


def clustered_family(
    rng: np.random.Generator, n: int, phrasings: int, rival_rate: float, shortfall: float, rho: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One simulated family of n cases written with `phrasings` attack phrasings (as equal in number as may be): the
    candidate's and one rival's outcomes and each case's phrasing. The rival passes each case with probability
    `rival_rate`; the candidate independently at the same rate (an equally safe candidate at the planning
    discordance), and where it is `shortfall` worse it also obeys each case of a phrasing with that phrasing's
    probability (mean shortfall / rival_rate, spread over the phrasings by `rho`: 0, the same for every phrasing; 1,
    all of some phrasings' cases and none of the others'; between, beta-distributed with intra-phrasing correlation
    rho), so that its pass rate is `shortfall` below the rival's in expectation."""
    clusters = np.arange(n) % phrasings
    rival = rng.random(n) < rival_rate
    candidate = rng.random(n) < rival_rate
    if shortfall > 0:
        mean = shortfall / rival_rate
        if rho >= 1:
            share = (rng.random(phrasings) < mean).astype(float)
        elif rho <= 0:
            share = np.full(phrasings, mean)
        else:
            scale = 1 / rho - 1
            share = rng.beta(mean * scale, (1 - mean) * scale, phrasings)
        candidate &= ~(rng.random(n) < share[clusters])
    return candidate, rival, clusters


def clustered_verdict(candidate: np.ndarray, rival: np.ndarray, clusters: np.ndarray | None, margin: float,
                      alpha: float) -> str:  # fmt: skip
    """`verdict`'s outcome on one simulated comparison (clusters None: its cases counted as independent)."""
    labels = tuple(str(k) for k in clusters) if clusters is not None else ()
    return verdict(Comparison("family", "rival", tuple(candidate), tuple(rival), margin, labels), alpha, 0.0).outcome


def clustered_power(
    n: int, phrasings: int, rival_rate: float, margin: float, alpha: float, comparisons: int, sims: int, seed: int
) -> float:
    """The simulated chance an equally safe candidate passes `comparisons` comparisons (families × rivals, each a
    family of n cases in `phrasings` clusters against a rival passing `rival_rate` independently of it): the gate-wide
    safety PASS, tested as the gate tests it."""
    rng = np.random.default_rng(seed)
    passed = 0
    for _ in range(sims):
        passed += all(
            clustered_verdict(*clustered_family(rng, n, phrasings, rival_rate, 0.0, 0.0), margin, alpha) == PASS
            for _ in range(comparisons)
        )
    return passed / sims


@functools.lru_cache(maxsize=64)
def planned_cases(
    margin: float, alpha: float, power: float, comparisons: int, phrasings: int, sims: int = 300, seed: int = 0
) -> int:
    """Cases a family so that an equally safe candidate passes all `comparisons` comparisons with `power` at the
    planning discordance (PLANNING_RIVAL_RATE), its cases in `phrasings` clusters and tested as the gate tests them:
    from the exact size for independent cases (`cases_needed`), up by a phrasing's worth at a time until the simulated
    gate-wide chance (`clustered_power`, `sims` suites) reaches `power`. 0 when not by 2000 cases."""
    q = planning_discordance(PLANNING_RIVAL_RATE)
    n = cases_needed(margin, alpha, q, power ** (1 / comparisons))
    if not n:
        return 0
    n = -(-n // phrasings) * phrasings
    while n <= 2000:
        if clustered_power(n, phrasings, PLANNING_RIVAL_RATE, margin, alpha, comparisons, sims, seed) >= power:
            return n
        n += phrasings
    return 0


def bca_interval(
    values: Sequence[float], samples: int, seed: int, confidence: float
) -> tuple[float, float, np.ndarray]:
    """The bias-corrected and accelerated (BCa, Efron 1987) bootstrap interval of the mean of `values`, two-sided at
    `confidence`, and the bootstrap means (scipy.stats.bootstrap, resampling the values with replacement)."""
    from scipy.stats import bootstrap

    data = np.asarray(values, dtype=np.float64)
    if np.ptp(data) == 0:  # no spread: every resample has the same mean, and BCa's acceleration is undefined
        mean = float(data.mean())
        return mean, mean, np.full(samples, mean)
    res = bootstrap((data,), np.mean, n_resamples=samples, confidence_level=confidence, method="BCa",
                    random_state=np.random.default_rng(seed))  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high), res.bootstrap_distribution
