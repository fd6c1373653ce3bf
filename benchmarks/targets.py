"""Benchmark report: issue #16's table (where users wait: now, after, target) from the other benchmarks' JSON results.

    python -m benchmarks.targets --pipeline pipeline.json --convert convert.json --train train.json --ray ray.json

Measures nothing itself: each row is read from the JSON a benchmark wrote with `--json`, each measured in one run
with its sides alternated (medians):
- `python -m benchmarks.pipeline_speed --baseline REV --json pipeline.json`: the embedded pipeline and evaluate
  (base + candidate, generation cache cold), 'now' = REV, 'after' = HEAD;
- `python -m benchmarks.convert_overhead --baseline REV --json convert.json`: convert-gguf (cold, parity included)
  over llama.cpp's converter + quantiser run directly, 'now' = REV's step, 'after' = this one;
- `python -m benchmarks.train_throughput --variants ours,hf --json train.json` and `--variants ray-2x1,ray-1x1
  --json ray.json`: ratios measured side by side (no 'now' column: those benchmarks compare two ways of training,
  not two revisions);
- `python -m benchmarks.gpu_train --dataset DATASET --variants bf16 --json gpu.json` (needs CUDA): MFU.
A row whose file is not given is printed as not measured. Exit status 0 whatever the verdicts: a report, not a test.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    what: str
    source: str  # which --flag's file it is read from
    target: float
    better: str  # "lower" or "higher": which side of the target meets it
    unit: str
    now: Callable[[dict[str, Any]], float | None]
    after: Callable[[dict[str, Any]], float | None]


def _stage(data: dict[str, Any], stage: str, side: str) -> float | None:
    return next((r[f"{side}_s"] for r in data["table"] if r["stage"] == stage), None)


# The targets, written once: the report compares against these.
ROWS = (
    Row("embedded pipeline after set-up, 2 cores", "pipeline", 230, "lower", "s",
        lambda d: _stage(d, "pipeline", "now"), lambda d: _stage(d, "pipeline", "after")),
    Row("convert-gguf vs llama.cpp converter + quantiser, cold", "convert", 2.0, "lower", "x",
        lambda d: d.get("ratio_now_over_direct"), lambda d: d.get("ratio_ours_over_direct")),
    Row("evaluate, base + candidate, committed splits, cache cold", "pipeline", 60, "lower", "s",
        lambda d: _stage(d, "evaluate", "now"), lambda d: _stage(d, "evaluate", "after")),
    Row("CPU training loop vs HF Trainer + PEFT", "train", 2.0, "higher", "x",
        lambda d: None, lambda d: d.get("ours_vs_hf")),
    Row("Ray 2 workers x 1 thread vs 1 x 1 (scaling efficiency)", "ray", 0.92, "higher", "",
        lambda d: None, lambda d: d.get("ray_scaling_efficiency_2x1_vs_1x1")),
    Row("gpu launcher, bf16 LoRA, MFU at 4N FLOPs/token", "gpu", 0.30, "higher", "",
        lambda d: None, lambda d: d.get("summary", {}).get("bf16", {}).get("mfu")),
)  # fmt: skip


def met(row: Row, value: float | None) -> str:
    if value is None:
        return "not measured"
    ok = value <= row.target if row.better == "lower" else value >= row.target
    return "met" if ok else "not met"


def report(files: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    rows = []
    for row in ROWS:
        data = files.get(row.source)
        now, after = (row.now(data), row.after(data)) if data else (None, None)
        rows.append({"what": row.what, "now": now, "after": after, "target": row.target, "better": row.better,
                     "unit": row.unit, "verdict": met(row, after), "from": row.source})  # fmt: skip
    return rows


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} s" if unit == "s" else f"{value:.2f}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("pipeline", "convert", "train", "ray", "gpu"):
        parser.add_argument(f"--{name}", type=Path, help=f"the {name} benchmark's --json file")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args()
    files = {}
    for name in ("pipeline", "convert", "train", "ray", "gpu"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            raise SystemExit(f"--{name} {path}: no such file; write it with that benchmark's --json")
        files[name] = json.loads(path.read_text()) if path is not None else None
    rows = report(files)
    print("| what | now | after | target | |\n|---|---|---|---|---|")
    for r in rows:
        sign = "<=" if r["better"] == "lower" else ">="
        print(f"| {r['what']} | {_fmt(r['now'], r['unit'])} | {_fmt(r['after'], r['unit'])} "
              f"| {sign} {_fmt(r['target'], r['unit'])} | {r['verdict']} |")  # fmt: skip
    commits = (files.get("pipeline") or {}).get("commits")
    if commits:
        print(f"\nnow = {commits.get('now', '?')[:10]}, after = {commits.get('after', '?')[:10]} (pipeline rows)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
