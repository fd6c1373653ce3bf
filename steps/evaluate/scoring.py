"""Scoring, always computed afresh from the outputs: per eval example ROUGE-1/2/L (F1) against the reference, length
compliance, a faithfulness proxy and whether generation ended by itself; per adversarial case the judge's verdict;
the paired bootstrap of the ROUGE-L gain; and each contender's aggregate metrics."""

from __future__ import annotations

from typing import Any

from steps.adversarial import judge_for
from steps.core import gate_stats
from steps.core.faithfulness import length_problems, unsupported_facts
from steps.evaluate import baselines as extractive


def quality(outputs: list[dict[str, Any]], rows: list[dict], max_words: int) -> list[dict[str, Any]]:
    """Each eval answer's scores: ROUGE-1/2/L F1 against the reference; `length_ok`, within the length bounds
    (faithfulness.length_problems: `max_words`, and at most half the document); `unsupported`, the names and numbers
    the document lacks, and `facts_supported`, none of them (both gated: steps/evaluate/gate.py's summary checks)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    scored = []
    for out, row in zip(outputs, rows, strict=True):
        s = scorer.score(row["summary"], out["text"])
        words = len(out["text"].split())
        unsupported = unsupported_facts(out["text"], row["document"])
        scored.append(
            {
                "id": row["id"],
                "rouge1": s["rouge1"].fmeasure,
                "rouge2": s["rouge2"].fmeasure,
                "rougeL": s["rougeL"].fmeasure,
                "words": words,
                "length_ok": words > 0 and not length_problems(out["text"], row["document"], max_words),
                "unsupported": unsupported,
                "facts_supported": not unsupported,
                "stopped": out["stopped"],
            }
        )
    return scored


def adversarial(outputs: list[dict[str, Any]], rows: list[dict]) -> list[dict[str, Any]]:
    """Each adversarial case's verdict, by its family's judge (steps/adversarial/)."""
    judged = []
    for out, row in zip(outputs, rows, strict=True):
        verdict = judge_for(row["family"])(out["text"], row)
        # The case's independence cluster (its attack phrasing, steps/core/gate_stats.py); none: the case alone.
        cluster = row.get("cluster", row["id"])
        judged.append({"id": row["id"], "family": row["family"], "cluster": cluster, **verdict,
                       "stopped": out["stopped"]})  # fmt: skip
    return judged


def paired_bootstrap(base: list[float], cand: list[float], samples: int, seed: int, confidence: float) -> dict:
    """Mean per-example gain of `cand` over `base`, its two-sided BCa interval (bias-corrected and accelerated: a
    percentile interval of 24 skewed differences covers ~92 % at a nominal 95 %), and P(gain > 0) over the resamples."""
    import numpy as np

    diff = np.asarray(cand, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    lower, upper, means = gate_stats.bca_interval(diff, samples, seed, confidence)
    return {
        "mean_gain": float(diff.mean()),
        "lower": lower,
        "upper": upper,
        "confidence": confidence,
        "interval": "BCa",
        "win_probability": float((means > 0).mean()),
        "samples": samples,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def family_rates(judged: list[dict], key: str) -> dict[str, float]:
    """Per attack family, the share of cases where `key` ("passed", "hijacked") is true."""
    families: dict[str, list[bool]] = {}
    for j in judged:
        families.setdefault(j["family"], []).append(j[key])
    return {f: _mean([float(p) for p in v]) for f, v in sorted(families.items())}


def quality_metrics(scored: list[dict]) -> dict[str, float]:
    """Means of the per-example eval scores (a contender's, or an extractive baseline's)."""
    return {
        "rougeL": _mean([s["rougeL"] for s in scored]),
        "rouge1": _mean([s["rouge1"] for s in scored]),
        "rouge2": _mean([s["rouge2"] for s in scored]),
        "mean_words": _mean([s["words"] for s in scored]),
        "length_ok_rate": _mean([float(s["length_ok"]) for s in scored]),
        "unsupported_rate": _mean([float(bool(s["unsupported"])) for s in scored]),
    }


def aggregate_metrics(scored: list[dict], judged: list[dict], tok_s: float) -> dict[str, Any]:
    """One contender's metrics over all its answers: means of the per-example scores, the stop rate over every document,
    the hijack and pass rates over the suite and per family, and its generation rate (metrics.json's `aggregate`)."""
    return {
        **quality_metrics(scored),
        "stop_rate": _mean([float(s["stopped"]) for s in scored] + [float(j["stopped"]) for j in judged]),
        "hijack_rate": _mean([float(j["hijacked"]) for j in judged]),
        "adversarial_pass_rate": _mean([float(j["passed"]) for j in judged]),
        "family_pass_rate": family_rates(judged, "passed"),
        "family_hijack_rate": family_rates(judged, "hijacked"),
        "tokens_per_second": tok_s,
    }


def baseline_metrics(
    rows: list[dict], candidate: list[dict], max_words: int, samples: int, seed: int, confidence: float
) -> dict[str, dict[str, Any]]:
    """Each extractive baseline (steps/evaluate/baselines.py) scored on the eval `rows` like a contender, with the
    paired bootstrap of the candidate's (`candidate`: its scored answers) ROUGE-L gain over it (metrics.json's
    `baselines`; the gate's `rougeL_vs_<baseline>` checks)."""
    found = {}
    for name in extractive.BASELINES:
        got = quality(extractive.answers(name, [r["document"] for r in rows]), rows, max_words)
        gain = paired_bootstrap([s["rougeL"] for s in got], [s["rougeL"] for s in candidate], samples, seed, confidence)
        found[name] = {**quality_metrics(got), "bootstrap": gain}
    return found
