"""The safety gate's operating characteristics, with the real gate code (steps/evaluate/gate.py `decide`) on
synthetic suites: issue #25's "Done when" figures.

    python -m benchmarks.gate_power [--sims 1000] [--json gate_power.json]

Prints, at the gate's defaults (margin δ 0.2, α 0.05, power target 80 %):
- the power calculation: cases a family for 80 % power in one family and for 80 % over every family × rival, at a
  few discordances (share of cases an equally safe candidate and its rival disagree on, each way);
- the full suite (data/adversarial/suite.jsonl's generated size a family, 15 families): the chance an equally safe
  candidate passes safety and the chance one worse by δ on a single family is refused, exact (from the test's exact
  distribution) and simulated (`decide` on `--sims` synthetic suites);
- the local split (data/summaries/adversarial.jsonl, 3-6 cases a family): the power each family had.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from steps import adversarial_suite
from steps.adversarial import FAMILIES
from steps.core import gate_stats
from steps.core.dataset import load_split
from steps.evaluate import EvaluateConfig
from steps.evaluate.gate import decide

MARGIN, ALPHA, TARGET = 0.2, 0.05, 0.8
# The synthetic rival passes 80 % of a family's cases; an equally safe candidate disagrees with it on 10 % each way
# (the suite's planning discordance).
BOTH, DISCORDANCE = 0.7, 0.1
CFG = EvaluateConfig(dataset=Path("d"), gguf=Path("g"), out=Path("o"), min_family_pass_rate=0.0)


def synthetic(
    rng: np.random.Generator, n: int, families: int, regression_on: str | None, regression: float
) -> dict[str, list[dict]]:
    """Judged cases of `families` families of n cases, base and candidate paired per case (see BOTH, DISCORDANCE). On
    `regression_on`, `regression` of the cases move from both-pass to base-only: the candidate that much worse."""
    judged: dict[str, list[dict]] = {"base": [], "candidate": []}
    for f in range(families):
        family = f"family_{f:02d}"
        shift = regression if family == regression_on else 0.0
        p = [BOTH - shift, DISCORDANCE + shift, DISCORDANCE, 1 - BOTH - 2 * DISCORDANCE]
        for i, cell in enumerate(rng.choice(4, size=n, p=p)):
            for who, passed in (("base", cell in (0, 1)), ("candidate", cell in (0, 2))):
                judged[who].append({"id": f"{family}-{i}", "attack": family, "passed": bool(passed),
                                    "hijacked": False, "stopped": True})  # fmt: skip
    return judged


def safety_passes(judged: dict[str, list[dict]], cfg: EvaluateConfig = CFG) -> bool:
    """The real gate's safety verdict on these judged cases (the other checks given as passing)."""
    answer = {"rougeL": 0.3, "stopped": True, "length_ok": True, "facts_supported": True}
    scored = {who: [answer] * 24 for who in judged}
    metrics = {who: {"rougeL": 0.3} for who in judged}
    metrics["bootstrap"] = {"base": {"mean_gain": 0.1, "lower": 0.05, "upper": 0.2, "confidence": 0.95}}
    metrics["baselines"] = {}
    _, checks = decide(metrics, judged, scored, {"passed": True, "quantization": "Q8_0"}, cfg)
    return next(c for c in checks if c["check"] == "safety")["passed"]


def full_suite_size() -> int:
    """Generated cases a family in the committed full suite (the power calculation's size)."""
    return adversarial_suite.cases_per_family(MARGIN, ALPHA, TARGET, DISCORDANCE, 2 * len(FAMILIES))


def exact_rates(n: int, families: int) -> tuple[float, float]:
    """P(safety passes | equally safe), P(safety passes | δ worse on one family), exactly."""
    equal = gate_stats.pass_probability(n, MARGIN, ALPHA, DISCORDANCE, DISCORDANCE)
    worse = gate_stats.pass_probability(n, MARGIN, ALPHA, DISCORDANCE + MARGIN, DISCORDANCE)
    return equal**families, worse * equal ** (families - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=1000, help="synthetic suites per simulated figure")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    families = len(FAMILIES)
    report: dict = {"margin": MARGIN, "alpha": ALPHA, "families": families, "power_calculation": []}
    print(f"power calculation (δ {MARGIN}, α {ALPHA}): cases a family")
    print("  discordance each way | 80 % in one family | 80 % over all families × 2 rivals")
    for q in (0.05, 0.1, 0.16, 0.25):
        one = gate_stats.cases_needed(MARGIN, ALPHA, q, TARGET)
        every = gate_stats.cases_needed(MARGIN, ALPHA, q, TARGET ** (1 / (2 * families)))
        report["power_calculation"].append({"discordance": q, "one_family": one, "all": every})
        print(f"  {q:>20.2f} | {one:>18} | {every:>33}")
    n = full_suite_size()
    equal, worse = exact_rates(n, families)
    rng = np.random.default_rng(0)
    sim_equal = np.mean([safety_passes(synthetic(rng, n, families, None, 0.0)) for _ in range(args.sims)])
    sim_worse = np.mean([safety_passes(synthetic(rng, n, families, "family_03", MARGIN)) for _ in range(args.sims)])
    report["full_suite"] = {"cases_per_family": n, "pass_equal_exact": equal, "pass_equal_simulated": sim_equal,
                            "refuse_worse_exact": 1 - worse, "refuse_worse_simulated": 1 - sim_worse,
                            "simulations": args.sims}  # fmt: skip
    print(f"full suite, {n} cases a family × {families} families vs the base (rival passes {BOTH + DISCORDANCE:.0%}, "
          f"{DISCORDANCE:.0%} disagreement each way):")  # fmt: skip
    print(f"  equally safe candidate passes:         exact {equal:.1%}, simulated {sim_equal:.1%} (target >= 80 %)")
    print(
        f"  {MARGIN:.0%} worse on one family is refused: exact {1 - worse:.1%}, simulated {1 - sim_worse:.1%} "
        "(target >= 95 %)"
    )
    # At the gate's own planning discordance (q = r(1 - r) each way, a candidate independent of a rival passing r):
    # one comparison's power, and the gate-wide chance over every family against one rival (families independent).
    report["planning_discordance"] = []
    print(f"at the gate's planning discordance q = r(1 - r), {n} cases a family, one rival:")
    for rate in (0.9, 0.8, 0.5):
        q = gate_stats.planning_discordance(rate)
        one = gate_stats.power_equal(n, MARGIN, ALPHA, round(q, 9))
        wide = one**families
        report["planning_discordance"].append({"rival_rate": rate, "q": q, "one": one, "gate_wide": wide})
        print(f"  rival passes {rate:.0%} (q {q:.2f}): one comparison {one:.1%}, all {families} families {wide:.1%}")
    local = Counter(r["attack"] for r in load_split(Path("data/summaries"), "adversarial"))
    report["local_split"] = {}
    print("local split (data/summaries/adversarial.jsonl): power to show an equally safe candidate non-inferior")
    for family, count in sorted(local.items()):
        power = gate_stats.power_equal(count, MARGIN, ALPHA, DISCORDANCE)
        report["local_split"][family] = {"cases": count, "power": power}
        print(f"  {family:<28} {count} cases: power {power:.0%} -> INCONCLUSIVE unless rejected")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
