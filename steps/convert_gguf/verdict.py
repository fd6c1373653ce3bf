"""The verdict: each file's parity figures against the thresholds (`judge` on the probes, `judge_eval` at the eval
split's interval bound), and the thresholds as every report records them — parsed from the flags once per run
(`thresholds`), and judged by exactly what is recorded."""

from __future__ import annotations

from typing import Any

from steps.convert_gguf.config import ConvertConfig
from steps.core.cli import flag, number_table
from steps.gguf.settings import PARITY_CONFIDENCE, PARITY_RESAMPLES


def judge(report: dict[str, Any], quant: str, limits: dict[str, Any]) -> list[str]:
    """Why a quantised file fails parity (empty: it passes), against `limits` (`thresholds`)."""
    top1, kl, max_drop = limits["min_top1_agreement"][quant], limits["max_mean_kl"][quant], limits["max_eos_rate_drop"]
    why = []
    if not report["tokens_equal"]:
        why.append(f"{report['file']}: llama.cpp token ids differ from HF's")
    if report["top1_agreement"] < top1:
        why.append(f"{report['file']}: top-1 agreement {report['top1_agreement']:.3f} < {top1}")
    if report["mean_kl"] > kl:
        why.append(f"{report['file']}: mean KL {report['mean_kl']:.4f} > {kl}")
    if report["eos_rate"] < report["hf_eos_rate"] - max_drop:
        why.append(
            f"{report['file']}: ends with EOS on {report['eos_rate']:.0%} of probes vs HF {report['hf_eos_rate']:.0%}"
            f" (allowed drop {max_drop:.0%}): it may not stop"
        )
    return why


def judge_eval(summary: dict[str, Any], quant: str, limits: dict[str, Any], bound: bool = True) -> list[str]:
    """Why the served file fails parity on the eval split (empty: it passes). With `bound`, each figure is judged at
    its interval's far end — agreement's lower bound, KL's and the stop-rate drop's upper bounds — so passing means
    shown within the thresholds; without it, at the point figures (how a point gate would decide)."""
    end = ("low", "high") if bound else ("point", "point")
    what = f"{summary['confidence']:.0%} bound" if bound else "point figure"
    top1, kl, max_drop = limits["min_top1_agreement"][quant], limits["max_mean_kl"][quant], limits["max_eos_rate_drop"]
    where = f"{summary['file']} on the eval split ({summary['documents']} documents)"
    why = []
    if not summary["tokens_equal"]:
        why.append(f"{where}: llama.cpp token ids differ from HF's on {summary['tokens_differ']}")
    if summary["top1_agreement"][end[0]] < top1:
        why.append(f"{where}: top-1 agreement {what} {summary['top1_agreement'][end[0]]:.3f} < {top1}")
    if summary["mean_kl"][end[1]] > kl:
        why.append(f"{where}: mean KL {what} {summary['mean_kl'][end[1]]:.4f} > {kl}")
    if summary["eos_rate_drop"][end[1]] > max_drop:
        why.append(
            f"{where}: stops after the summary less often than HF by {summary['eos_rate_drop'][end[1]]:.0%} ({what};"
            f" allowed {max_drop:.0%}): it may not stop"
        )
    return why


def thresholds(cfg: ConvertConfig) -> dict[str, Any]:
    """The thresholds parity is judged by (`judge`, `judge_eval`), as recorded in parity.json and result.json: the
    per-quantisation flags parsed here, once per run."""
    return {
        "min_top1_agreement": number_table(cfg.min_top1_agreement, flag("min_top1_agreement")),
        "max_mean_kl": number_table(cfg.max_mean_kl, flag("max_mean_kl")),
        "max_eos_rate_drop": cfg.max_eos_rate_drop,
        "eval_split": {"judged_at": "interval bound", "confidence": PARITY_CONFIDENCE, "resamples": PARITY_RESAMPLES},
    }
