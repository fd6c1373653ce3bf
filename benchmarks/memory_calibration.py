"""Benchmark: what a training worker really holds at its peak, on the real bases' shapes, against what sizing plans.

    python -m benchmarks.memory_calibration                                  # docs/sizing.md's bf16 rows (~40 min)
    python -m benchmarks.memory_calibration --bases Llama-3.2-1B --precisions fp32     # its float32 rows (~10 min)
    python -m benchmarks.memory_calibration --table ROWS.json ...            # re-print measured rows, today's plan
    python -m benchmarks.memory_calibration --throughput                    # tokens/s by micro-batch (CPU cap)

For each base (its real config: steps/sizing/seeds.py SEED_BASES, random-initialised, saved once as bf16 safetensors
the way the hub ships it, under ~/.cache/distillery/calibration/), each Ray node group (its pod memory and the
workers the plan puts in a pod) and each CPU precision, a child process does what a Ray worker of that group does:
loads the base with `steps.train.model.build_model` (bf16 or float32 weights), asks `steps.train.budget.choose`
for the micro-batch and checkpointing the group's memory holds, and runs `train_loop` for 2 optimiser steps on rows
of exactly --max-seq-len tokens whose last `sizing.TAIL_TOKENS` are the summary (the plan's worst case). The child's
peak resident memory is its own VmHWM from /proc/self/status (not ru_maxrss, which a child inherits from a parent
that held more); the prediction is `sizing.ray_worker_gib` for the same shape, knobs and micro-batch. Target: every
prediction between the measurement and 15 % above it, and no worker over its share of the pod.

Each step's global batch is one micro-batch per worker (accumulation adds no memory: the LoRA gradients it sums into
exist anyway; tests/test_train.py holds accumulated and whole batches to the same adapter). Seconds and tokens/s are
reported beside the memory, for scale only: the machine's other load shows in them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from steps.core.defaults import SHARED

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DISTILLERY_CACHE", Path.home() / ".cache" / "distillery")) / "calibration"
TOKENIZER = ROOT / SHARED.base_model
BASES = ("Llama-3.2-1B", "Llama-3.2-3B")
GROUPS = ("large", "medium")
TARGET = 1.15


def base_dir(name: str) -> Path:
    """The random-initialised base of `name`'s shape, saved as bf16 safetensors with SmolLM2's tokenizer (its ids are
    all below the real vocabulary's size), built once."""
    out = CACHE / name
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from steps.sizing.seeds import config

    print(f"calibration: building a random-initialised {name} in {out} (once)", flush=True)
    torch.manual_seed(0)
    cfg = config(name)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    tmp = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(TOKENIZER).save_pretrained(tmp)
    tmp.rename(out)
    return out


CHILD = """
import json, sys, tempfile, time
from benchmarks._train_child import status_gib, summary_rows, train_config, train_rows
spec = json.loads(sys.argv[1])
import torch
from steps import sizing
from steps.train import build_model
from steps.train.budget import base_shape, choose
from steps.train.precision import detect
imported = status_gib("VmRSS")
torch.set_num_threads(spec["threads"])
with tempfile.TemporaryDirectory() as tmp:
    cfg = train_config(spec["base"], tmp, batch=spec["batch"], seq=spec["seq"], precision=spec["precision"],
                       threads=spec["threads"], gc=spec["checkpointing"])
    started = time.perf_counter()
    shape = base_shape(cfg)
    precision, micro = choose(cfg, shape, detect(cfg.precision, "cpu"), device="ray", world_size=spec["world"],
                              pod_workers=spec["pod_workers"], budget_gib=spec["budget_gib"])
    model, _ = build_model(cfg, torch.device("cpu"), precision.name)
    loaded = status_gib("VmHWM")
    examples = summary_rows(spec["seq"], 2 * micro.examples, 49005)  # SmolLM2's tokenizer's ids: all below 49000
    trained = time.perf_counter()
    log = train_rows(model, cfg, examples, micro, precision)
    done = time.perf_counter()
seq = spec["seq"]
k = sizing.Knobs("ray", False, seq, micro.examples, cfg.lora_r, (), precision.name)
print(json.dumps({"steps": len(log), "micro": micro.examples, "checkpointing": micro.checkpointing,
                  "peak_gib": status_gib("VmHWM"), "loaded_gib": loaded, "imported_gib": imported,
                  "predicted_gib": sizing.ray_worker_gib(shape, k, micro),
                  "terms_gib": {n: v / 2**30 for n, v in sizing.train_memory(shape, k, micro, device="ray").items()},
                  "load_seconds": trained - started, "train_seconds": done - trained,
                  "tokens_per_second": log[-1]["tokens"] / log[-1]["seconds"]}))
"""


def measure(base: str, group: str, precision: str, *, seq: int, batch: int, threads: int, checkpointing: str) -> dict:
    """One child run: a worker of `group` as the plan places it (its pod's memory shared with the plan's workers)."""
    from steps import sizing
    from steps.sizing.seeds import shape

    g = next(x for x in sizing.RAY_NODE_GROUPS if x.name == group)
    k = sizing.Knobs("ray", False, seq, batch, 16, (), precision)
    placed = sizing.ray_group_plan(shape(base), k, g)
    workers = max(1, placed.workers_per_pod)
    spec = {"base": str(base_dir(base)), "precision": precision, "seq": seq, "batch": batch, "threads": threads,
            "budget_gib": g.memory_gib, "pod_workers": workers, "world": workers,
            "checkpointing": checkpointing}  # fmt: skip
    print(f"calibration: {base} on a {group} worker ({g.memory_gib:g} GiB pod, {workers} worker(s)), {precision} ...",
          flush=True)  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"calibration child failed ({base}, {group}, {precision}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    share = (g.memory_gib - sizing.RAY_POD_GIB) / workers
    row = {"base": base, "group": group, "precision": precision, "workers_per_pod": placed.workers_per_pod, "seq": seq,
           "share_gib": share, "wall_seconds": time.perf_counter() - started, **result}  # fmt: skip
    print(f"calibration: {json.dumps(row)}", flush=True)
    return row


def repredict(row: dict) -> dict:
    """`row` (a measured run) with its planned GiB recomputed by the sizing code checked out now."""
    from steps import sizing
    from steps.sizing.seeds import shape

    k = sizing.Knobs("ray", False, row.get("seq", 512), row["micro"], 16, (), row["precision"])
    return {
        **row,
        "predicted_gib": sizing.ray_worker_gib(shape(row["base"]), k, sizing.Micro(row["micro"], row["checkpointing"])),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| base | group (pod, workers) | precision | micro-batch | peak VmHWM GiB | planned GiB | planned / peak "
        "| worker's share GiB | within target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["predicted_gib"] / r["peak_gib"]
        ok = 1.0 <= ratio <= TARGET and r["peak_gib"] <= r["share_gib"]
        micro = f"{r['micro']}{' + checkpointing' if r['checkpointing'] else ''}"
        lines.append(
            f"| {r['base']} | {r['group']} ({r['workers_per_pod']}) | {r['precision']} | {micro} | "
            f"{r['peak_gib']:.2f} | {r['predicted_gib']:.2f} | {ratio:.2f} | {r['share_gib']:.1f} | "
            f"{'yes' if ok else 'NO'} |"
        )
    return "\n".join(lines)


THROUGHPUT = """
import json, sys, time, torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from steps.sizing.seeds import config
from steps.train import TrainConfig
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config(spec["base"], num_hidden_layers=spec["layers"]), dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TrainConfig.lora_targets.split(",")))
model.train()
out = {}
for m in spec["micro"]:
    ids = torch.randint(5, 49000, (m, spec["seq"]))
    times = []
    for _ in range(3):
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=129).logits
        logits.float().sum().backward()
        times.append(time.perf_counter() - t)
    out[m] = m * spec["seq"] / sorted(times)[1]
print(json.dumps(out))
"""


def throughput(base: str, layers: int, seq: int, threads: int) -> None:
    """Tokens/s of one forward + backward by micro-batch (bf16, `layers` of the base's layers): where CPU throughput
    stops growing with the micro-batch (sizing.CPU_MICRO_TOKENS)."""
    spec = {"base": base, "layers": layers, "seq": seq, "threads": threads, "micro": [1, 2, 4]}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", THROUGHPUT, json.dumps(spec)], cwd=ROOT, capture_output=True,
                          text=True, env=env)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    rates = json.loads(done.stdout.strip().splitlines()[-1])
    one = rates["1"]
    print(f"| micro-batch ({seq} tokens each) | tokens/s ({base}, {layers} layers, bf16, {threads} threads) | vs 1 |")
    print("|---|---|---|")
    for m, rate in rates.items():
        print(f"| {m} | {rate:.0f} | {rate / one:.2f}x |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default=",".join(BASES))
    parser.add_argument("--groups", default=",".join(GROUPS))
    # A 3B float32 worker of the large group (one per pod, no checkpointing) needs ~24 GiB: more than a 24 GiB machine.
    parser.add_argument("--precisions", default="bf16")
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16, help="the template's default: sizes the micro-batch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gradient-checkpointing", default="auto", help="auto, on or off (pins it)")
    parser.add_argument("--throughput", action="store_true", help="tokens/s by micro-batch instead")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--table", type=Path, nargs="+", help="re-print measured rows (--json files) with today's plan")
    args = parser.parse_args(argv)
    if args.table:
        rows = [repredict(r) for f in args.table for r in json.loads(f.read_text())]
        print(table(rows))
        return 0 if all(1.0 <= r["predicted_gib"] / r["peak_gib"] <= TARGET for r in rows) else 1
    if args.throughput:
        throughput("Llama-3.2-1B", 4, args.max_seq_len, args.threads)
        return 0
    rows = []
    for base in args.bases.split(","):
        for group in args.groups.split(","):
            for precision in args.precisions.split(","):
                rows.append(measure(base, group, precision, seq=args.max_seq_len, batch=args.batch_size,
                                    threads=args.threads, checkpointing=args.gradient_checkpointing))  # fmt: skip
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(1.0 <= r["predicted_gib"] / r["peak_gib"] <= TARGET for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
