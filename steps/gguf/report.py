"""convert-gguf's report: the files the steps after it read of its folder, and parity.md, the parity report in
Markdown (parity.json holds the same figures)."""

from __future__ import annotations

from typing import Any

# What the steps after this one read of its folder besides the served GGUFs (named in result.json): on the cluster
# they download only these and the served files, not F16 and the rest of the ladder (workflows/distill.py).
REPORT_FILES = ("result.json", "parity.json", "parity.md")


def markdown(parity: dict[str, Any]) -> str:
    lines = [
        f"# GGUF parity: {'PASS' if parity['passed'] else 'FAIL'}",
        "",
        *[f"- {r}" for r in parity["reasons"]],
        *[f"- withheld (not shipped) {q}: {'; '.join(w)}" for q, w in parity["withheld"].items()],
        "",
        f"Merge: max |logit| difference adapter-attached vs merged = {parity['merge_max_abs_logit_diff']:.2e}.",
        "",
        "| file | size MB | tokens equal | greedy equal | greedy up to near-ties | top-1 | mean KL | EOS rate (HF) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for who in ("candidate", "base"):
        for quant, r in parity[who]["files"].items():
            size = f"{parity[who]['size_bytes'][quant] / 1e6:.1f}" if quant in parity[who]["size_bytes"] else "withheld"
            lines.append(
                f"| {r['file']} | {size} | {r['tokens_equal']} | {r['greedy_equal']} | {r['greedy_match']} "
                f"| {r['top1_agreement']:.3f} "
                f"| {r['mean_kl']:.4f} | {r['eos_rate']:.0%} ({r['hf_eos_rate']:.0%}) |"
            )
    ev = parity["eval_split"]
    ci = f"{ev['confidence']:.0%} interval over documents"

    def fig(name: str, fmt: str) -> str:
        return f"{ev[name]['point']:{fmt}} [{ev[name]['low']:{fmt}}, {ev[name]['high']:{fmt}}]"

    lines += [
        "",
        f"Served file on the eval split ({ev['documents']} documents, {ev['positions']} teacher-forced positions; "
        f"point [{ci}], judged at the bound):",
        "",
        "| file | tokens equal | top-1 | mean KL | stop-rate drop vs HF | stop rate (HF) |",
        "|---|---|---|---|---|---|",
        f"| {ev['file']} | {ev['tokens_equal']} | {fig('top1_agreement', '.3f')} | {fig('mean_kl', '.4f')} "
        f"| {fig('eos_rate_drop', '.0%')} | {fig('eos_rate', '.0%')} ({ev['hf_eos_rate']:.0%}) |",
    ]
    return "\n".join(lines) + "\n"
