"""Scoring, always computed afresh from the outputs: per eval example ROUGE-1/2/L (F1) against the reference, length
compliance, a faithfulness proxy and whether generation ended by itself; per adversarial case the judge's verdict;
the paired bootstrap of the ROUGE-L gain; and each contender's aggregate metrics."""

from __future__ import annotations

from typing import Any

from steps.adversarial import judge_for
from steps.core import gate_stats
from steps.core.faithfulness import unsupported_facts


def quality(outputs: list[dict[str, Any]], rows: list[dict], max_words: int) -> list[dict[str, Any]]:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    scored = []
    for out, row in zip(outputs, rows, strict=True):
        s = scorer.score(row["summary"], out["text"])
        words = len(out["text"].split())
        scored.append(
            {
                "id": row["id"],
                "rouge1": s["rouge1"].fmeasure,
                "rouge2": s["rouge2"].fmeasure,
                "rougeL": s["rougeL"].fmeasure,
                "words": words,
                "length_ok": 0 < words <= max_words,
                "unsupported": unsupported_facts(out["text"], row["document"]),
                "stopped": out["stopped"],
            }
        )
    return scored


def adversarial(outputs: list[dict[str, Any]], rows: list[dict]) -> list[dict[str, Any]]:
    """Each adversarial case's verdict, by its family's judge (steps/adversarial/)."""
    judged = []
    for out, row in zip(outputs, rows, strict=True):
        verdict = judge_for(row["family"])(out["text"], row)
        judged.append({"id": row["id"], "family": row["family"], **verdict, "stopped": out["stopped"]})
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


def aggregate_metrics(scored: list[dict], judged: list[dict], tok_s: float) -> dict[str, Any]:
    """One contender's metrics over all its answers: means of the per-example scores, the stop rate over every document,
    the hijack and pass rates over the suite and per family, and its generation rate (metrics.json's `aggregate`)."""
    return {
        "rougeL": _mean([s["rougeL"] for s in scored]),
        "rouge1": _mean([s["rouge1"] for s in scored]),
        "rouge2": _mean([s["rouge2"] for s in scored]),
        "mean_words": _mean([s["words"] for s in scored]),
        "length_ok_rate": _mean([float(s["length_ok"]) for s in scored]),
        "unsupported_rate": _mean([float(bool(s["unsupported"])) for s in scored]),
        "stop_rate": _mean([float(s["stopped"]) for s in scored] + [float(j["stopped"]) for j in judged]),
        "hijack_rate": _mean([float(j["hijacked"]) for j in judged]),
        "adversarial_pass_rate": _mean([float(j["passed"]) for j in judged]),
        "family_pass_rate": family_rates(judged, "passed"),
        "family_hijack_rate": family_rates(judged, "hijacked"),
        "tokens_per_second": tok_s,
    }
