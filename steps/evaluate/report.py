"""What a reader sees: report.md (the verdict, every check, the gate's error rates, the metrics table and the pass rate
per family) and its plots, score_diff.png and adversarial_families.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steps.core import gate_stats


def write_plots(
    out: Path, scored: dict[str, list[dict]], judged: dict[str, list[dict]], metrics: dict[str, Any]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for rival in (r for r in ("base", "champion") if r in scored):
        diff = sorted(c["rougeL"] - b["rougeL"] for c, b in zip(scored["candidate"], scored[rival], strict=True))
        ax.plot(range(len(diff)), diff, marker="o", markersize=3, label=f"candidate − {rival}")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("eval example (sorted)")
    ax.set_ylabel("ROUGE-L difference")
    ax.set_title("Per-example ROUGE-L difference")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "score_diff.png", dpi=100)
    plt.close(fig)

    contenders = [c for c in ("base", "champion", "candidate") if c in metrics]
    families = list(metrics["candidate"]["family_pass_rate"])
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(contenders)
    for i, who in enumerate(contenders):
        rates = [metrics[who]["family_pass_rate"].get(f, 0.0) for f in families]
        # 95 % Wilson interval of each rate: how far the bar could move on another suite of this size.
        bounds = []
        for f in families:
            outcomes = [j["passed"] for j in judged[who] if j["attack"] == f]
            bounds.append(gate_stats.wilson_interval(sum(outcomes), len(outcomes), 1.96))
        yerr = [[max(0.0, r - lo) for r, (lo, _) in zip(rates, bounds, strict=True)],
                [max(0.0, hi - r) for r, (_, hi) in zip(rates, bounds, strict=True)]]  # fmt: skip
        ax.bar([x + i * width for x in range(len(families))], rates, width=width, label=who, yerr=yerr, capsize=2)
    ax.set_xticks([x + width * (len(contenders) - 1) / 2 for x in range(len(families))])
    ax.set_xticklabels([f.replace("_", "\n") for f in families], fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass rate")
    ax.set_title("Adversarial pass rate per family (95 % intervals)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "adversarial_families.png", dpi=100)
    plt.close(fig)


def _cells(metrics: dict[str, Any], contenders: list[str], baselines: dict[str, dict], key: str) -> list[str]:
    """One metric's row: each contender's figure, then each baseline's ("—" where a baseline has none: no stop rate,
    no adversarial answers)."""
    return [f"{metrics[c][key]:.4f}" for c in contenders] + [
        f"{b[key]:.4f}" if key in b else "—" for b in baselines.values()
    ]


def report_markdown(
    metrics: dict[str, Any], passed: bool, checks: list[dict], champion: str, characteristics: dict[str, dict]
) -> str:
    contenders = [c for c in ("base", "champion", "candidate") if c in metrics]
    baselines = metrics.get("baselines", {})
    rows = [
        ("ROUGE-L", "rougeL"),
        ("ROUGE-1", "rouge1"),
        ("ROUGE-2", "rouge2"),
        ("mean words", "mean_words"),
        ("length compliant", "length_ok_rate"),
        ("with unsupported facts", "unsupported_rate"),
        ("stopped by itself", "stop_rate"),
        ("hijack rate (adversarial)", "hijack_rate"),
        ("adversarial pass rate", "adversarial_pass_rate"),
        ("generation tokens/s", "tokens_per_second"),
    ]
    lines = [
        f"# Evaluation: {'PASS' if passed else 'FAIL'}",
        "",
        f"Champion: {champion}.",
        "",
        *[f"- {'✅' if c['passed'] else '❌'} {c['reason']}" for c in checks],
        "",
        "Error rates of this gate on this suite (simulated from the per-case outcomes):",
        "",
        *[f"- {oc['line']}" for oc in characteristics.values()],
        "",
        "Extractive baselines (no model; the candidate must beat each on ROUGE-L): the document's first sentence "
        "(lead_sentence), its first 25 words (lead_words), the document copied whole (whole_document).",
        "",
        "| metric | " + " | ".join([*contenders, *baselines]) + " |",
        "|---|" + "---|" * (len(contenders) + len(baselines)),
        *[f"| {label} | " + " | ".join(_cells(metrics, contenders, baselines, k)) + " |" for label, k in rows],
        "",
        "## Adversarial pass rate per family",
        "",
        "| family | " + " | ".join(contenders) + " |",
        "|---|" + "---|" * len(contenders),
    ]
    for family in metrics["candidate"]["family_pass_rate"]:
        cells = " | ".join(f"{metrics[c]['family_pass_rate'].get(family, 0.0):.0%}" for c in contenders)
        lines.append(f"| {family} | {cells} |")
    lines += ["", "![per-example ROUGE-L difference](score_diff.png)", "", "![families](adversarial_families.png)"]
    return "\n".join(lines) + "\n"
