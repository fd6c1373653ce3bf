"""Benchmark: the GPU launcher (EKS spot pool) in bf16 vs 4-bit NF4 QLoRA, on a model the size a team would train.

    python -m benchmarks.gpu_train --dataset DATASET --shape 1b   # SmolLM2's tokenizer: the embedded run's base
    python -m benchmarks.gpu_train --plan-card "NVIDIA A10G"      # the card memory plan, checked on a lent GPU

No model can be downloaded where this runs, so the base is a random-init Llama of a real model's shape (`1b`:
TinyLlama-1.1B's layers, `3b`: Llama-3.2-3B's, `8b`: Llama-3.1-8B's) with SmolLM2's tokenizer; throughput and memory
depend on the shape, not on the weights' values. Each variant is one `python -m steps.train --train-backend gpu`
process over the same examples (DATASET is fetch-dataset's output), settings and number of optimiser steps; variants
alternate round by round and each reports its median over `--repeats` rounds. Tokens/s are real (non-padding) tokens
of the step loop, as steps.train reports them; MFU is result.json's (4·N FLOPs per token vs the card's dense bf16
peak, steps.train.gpu); memory is the CUDA allocator's peak in the training process.

`--plan-card CARD` checks steps/sizing's GPU plan instead, on the real models' whole shapes (tests.tiny.REAL_SHAPES:
Llama 3.2 1B and 3B, Llama 3.1 8B, their 128k vocabularies), at `--max-seq-len` with 40 % of the examples long enough
to be cut there and the rest as committed (the plan's worst case: micro-batches that wide, left-padded), and
`--batch-size`: for each base it runs train
pinned to the plan's way for CARD (`sizing.gpu_micro`: micro-batch and checkpointing), in a process whose allocator
is held to what CARD would have left after the CUDA context (`torch.cuda.set_per_process_memory_fraction`, the
context measured first), so a plan too small for the card fails with CUDA's out-of-memory as it would there. Printed
beside the plan: the allocator's peak (what the modelled terms predict), its reserved peak, the context (the card's
used memory outside the allocator), their sum (the card's peak) against `gpu_card_gib`, the host's VmHWM against
`gpu_host_gib`, and the run's speed at the plan's micro-batch (tokens/s as steps.train reports it, seconds per step
after the first).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from steps.core.defaults import SHARED
from tests.tiny import SHAPES

ROOT = Path(__file__).resolve().parent.parent

# Every variant sizes its micro-batch from the card (--micro-batch 0: the largest that fits, steps/sizing/) and
# accumulates the rest of the batch; `-packed` puts several examples in each row of --max-seq-len (attention kept
# inside each: SDPA's block-diagonal mask, or FlashAttention-2's varlen kernel where it is installed).
VARIANTS = {
    "bf16": ["--qlora", "false"],
    "bf16-packed": ["--qlora", "false", "--packing", "true"],
    "qlora-nf4": ["--qlora", "true"],
}


def build(shape: str, tokenizer_dir: Path, out: Path) -> int:
    """A random-init Llama of `shape` saved in bf16 at `out`; returns its parameter count."""
    import torch

    from tests.tiny import build_model

    return build_model(tokenizer_dir, out, shape=shape, tie=False, dtype=torch.bfloat16)


def run(variant: str, base: Path, args: argparse.Namespace, work: Path) -> dict:
    out = work / f"{variant}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "steps.train", "--train-backend", "gpu", *VARIANTS[variant],
           "--dataset", str(args.dataset), "--base-model", str(base), "--out", str(out),
           "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--checkpoint-every", "0",
           "--log-every", "100", "--micro-batch", str(args.micro_batch)]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    return {**result, "wall_seconds": round(time.perf_counter() - started, 1)}


# The child of one plan-check run: the context measured first (after a cuBLAS product), the allocator held to the card
# less that context, steps.train run as `python -m steps.train` would, and the card's and host's figures written as
# it ends, an out-of-memory included.
PLAN_CHILD = """
import json, runpy, sys, torch
card_bytes, report = int(sys.argv[1]), sys.argv[2]
sys.argv = ["steps.train", *sys.argv[3:]]
a = torch.ones(256, 256, device="cuda", dtype=torch.bfloat16)
(a @ a).sum().item()
free, total = torch.cuda.mem_get_info()
context0 = total - free - torch.cuda.memory_reserved()
torch.cuda.set_per_process_memory_fraction(max(card_bytes - context0, 0) / total)
torch.cuda.reset_peak_memory_stats()
figures = {"context0": context0, "oom": False}
try:
    runpy.run_module("steps.train", run_name="__main__", alter_sys=True)
except SystemExit as e:
    figures["exit"] = str(e.code)
except torch.OutOfMemoryError as e:
    figures.update(oom=True, error=str(e)[:400])
finally:
    free, total = torch.cuda.mem_get_info()
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    figures.update(
        allocated=torch.cuda.max_memory_allocated(), reserved=torch.cuda.max_memory_reserved(),
        context=total - free - torch.cuda.memory_reserved(), host_hwm=int(status["VmHWM"].split()[0]) * 1024,
    )
    open(report, "w").write(json.dumps(figures))
"""


def long_dataset(out: Path, chars: int) -> Path:
    """fetch-dataset's folder holding the committed training split with two documents in five repeated to at least
    `chars` characters (within the contract's MAX_DOCUMENT_CHARS): train groups lengths in chunks of 4 batches, so
    with 40 % long rows one batch of each chunk holds both and its micro-batch is as wide as --max-seq-len and
    left-padded (the plan's worst case: transformers then passes SDPA a padding mask and repeats the key/value heads);
    --steps 4 runs the whole first chunk."""
    from steps.contract.prompting import MAX_DOCUMENT_CHARS
    from steps.core.io import read_jsonl, write_jsonl

    rows = read_jsonl(ROOT / "data/summaries/train.jsonl")
    for row in rows[::5] + rows[1::5]:
        doc = row["document"]
        row["document"] = " ".join([doc] * -(-min(chars, MAX_DOCUMENT_CHARS) // (len(doc) + 1)))[:MAX_DOCUMENT_CHARS]
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "train.jsonl", rows)
    (out / "lineage.json").write_text(json.dumps({"source": "benchmarks.gpu_train: the committed split, lengthened"}))
    return out


def train_speed(out: Path) -> dict:
    """What a finished train run in `out` reports of its speed: tokens/s over every step as steps.train computes it
    (result.json: real tokens, the first step's warm-up included) and the seconds of a step after the first
    (loss.csv's cumulative seconds); {} when the run wrote neither."""
    speed: dict = {}
    if (out / "result.json").is_file():
        speed["tokens_per_second"] = json.loads((out / "result.json").read_text())["tokens_per_second"]
    if (out / "loss.csv").is_file():
        seconds = [float(line.split(",")[3]) for line in (out / "loss.csv").read_text().splitlines()[1:]]
        if len(seconds) > 1:
            speed["seconds_per_step"] = round((seconds[-1] - seconds[0]) / (len(seconds) - 1), 2)
    return speed


def plan_check(args: argparse.Namespace) -> list[dict]:
    """One pinned train run per base of REAL_SHAPES on the plan's way for `args.plan_card`; prints and returns rows."""
    import torch

    from steps import sizing
    from steps.sizing.cluster import GPU_CARDS
    from steps.sizing.memory import gpu_card_gib, gpu_host_gib
    from steps.sizing.planning import gpu_micro
    from steps.train import budget
    from steps.train.config import TrainConfig
    from tests.tiny import build_model

    names = args.plan_card.split(",")
    cards = [c for name in names for c in GPU_CARDS if c.name == name]
    if len(cards) != len(names):
        raise SystemExit(
            f"--plan-card {args.plan_card!r}: name of {', '.join(c.name for c in GPU_CARDS)}, comma-separated"
        )
    gib = 2**30
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-plan-") as tmp:
        work = Path(tmp)
        # ~4 characters a token: every example reaches --max-seq-len
        dataset = long_dataset(work / "dataset", 6 * args.max_seq_len)
        for shape in args.shapes.split(","):
            base = work / shape
            started = time.perf_counter()
            params = build_model(args.tokenizer, base, shape=shape, dtype=torch.bfloat16, device="cuda")
            torch.cuda.empty_cache()
            built = time.perf_counter() - started
            cfg = TrainConfig(dataset=dataset, base_model=str(base), out=work / "out", train_backend="gpu",
                              batch_size=args.batch_size, max_seq_len=args.max_seq_len)  # fmt: skip
            s, k = budget.base_shape(cfg), budget.knobs(cfg, "bf16")
            for card in cards:
                micro = gpu_micro(s, k, card)
                terms = sizing.train_memory(s, k, micro, device="gpu")
                planned_card, planned_host = gpu_card_gib(s, k, micro), gpu_host_gib(s, k)
                out, report = work / f"{shape}-{card.family}", work / f"{shape}-{card.family}.json"
                steps = max(2, args.steps)
                cmd = [sys.executable, "-c", PLAN_CHILD, str(card.memory_mib * 2**20), str(report),
                       "--train-backend", "gpu", "--qlora", "false", "--dataset", str(dataset),
                       "--base-model", str(base), "--out", str(out), "--batch-size", str(args.batch_size),
                       "--max-seq-len", str(args.max_seq_len),
                       "--epochs", str(steps * args.batch_size / 96), "--checkpoint-every", "0", "--log-every", "1",
                       "--micro-batch", str(micro.examples),
                       "--gradient-checkpointing", "on" if micro.checkpointing else "off"]  # fmt: skip
                t0 = time.perf_counter()
                done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                f = json.loads(report.read_text()) if report.is_file() else {"oom": None}
                if done.returncode != 0 and not f.get("oom"):
                    print(done.stderr[-3000:], file=sys.stderr)
                card_peak = (f.get("context", 0) + f.get("reserved", 0)) / gib
                speed = train_speed(out)
                row = {
                    "base": shape, "parameters": params, "card": card.name,
                    "card_gib": round(card.memory_mib / 1024, 2),
                    "max_seq_len": args.max_seq_len, "batch_size": args.batch_size, "micro": str(micro),
                    "planned_terms_gib": round(sum(terms.values()) / gib, 2),
                    "terms": {t: round(v / gib, 3) for t, v in terms.items()},
                    "planned_card_gib": round(planned_card, 2), "planned_host_gib": round(planned_host, 2),
                    "allocated_gib": round(f.get("allocated", 0) / gib, 2),
                    "reserved_gib": round(f.get("reserved", 0) / gib, 2),
                    "context_gib": round(f.get("context", 0) / gib, 2), "card_peak_gib": round(card_peak, 2),
                    "host_hwm_gib": round(f.get("host_hwm", 0) / gib, 2), "oom": f.get("oom"), "rc": done.returncode,
                    "build_seconds": round(built, 1), "run_seconds": round(time.perf_counter() - t0, 1), **speed,
                }  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{'base':<12} {'card':<12} {'micro':<38} {'terms':>6} {'alloc':>6} {'resv':>6} {'ctx':>5} {'card':>6} "
          f"{'plan':>6} {'of':>6} {'host':>5} {'plan':>5} {'tok/s':>6} {'s/step':>6}")  # fmt: skip
    for r in rows:
        state = "OOM" if r["oom"] else ("ok" if r["rc"] == 0 else f"rc {r['rc']}")
        print(f"{r['base']:<12} {r['card']:<12} {r['micro']:<38} {r['planned_terms_gib']:>6} {r['allocated_gib']:>6} "
              f"{r['reserved_gib']:>6} {r['context_gib']:>5} {r['card_peak_gib']:>6} {r['planned_card_gib']:>6} "
              f"{r['card_gib']:>6} {r['host_hwm_gib']:>5} {r['planned_host_gib']:>5} "
              f"{r.get('tokens_per_second', '-'):>6} {r.get('seconds_per_step', '-'):>6} {state}")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, default=ROOT / SHARED.base_model)
    parser.add_argument("--dataset", type=Path, help="fetch-dataset's output folder (the speed runs)")
    parser.add_argument("--plan-card", help="check the GPU plan for this card (steps/sizing/cluster.py GPU_CARDS)")
    parser.add_argument("--shapes", default="llama3.2-1b,llama3.2-3b,llama3.1-8b", help="with --plan-card")
    parser.add_argument("--max-seq-len", type=int, default=512, help="with --plan-card")
    parser.add_argument("--steps", type=int, default=4, help="with --plan-card: optimiser steps a base")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=0, help="0: the largest the card holds (sizing)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variants", default="bf16,qlora-nf4", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.plan_card:
        rows = plan_check(args)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return
    if args.dataset is None:
        parser.error("--dataset is required for the speed runs")
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
        work = Path(tmp)
        params = build(args.shape, args.tokenizer, work / "base")
        print(f"base: random-init Llama '{args.shape}', {params / 1e9:.2f}B parameters", flush=True)
        rounds: dict[str, list[dict]] = {v: [] for v in variants}
        for r in range(args.repeats):
            for v in variants:
                res = run(v, work / "base", args, work)
                rounds[v].append(res)
                print(f"round {r + 1} {v}: {res['tokens_per_second']} tok/s, {res['steps']} steps in "
                      f"{res['train_seconds']} s, MFU {res['mfu']:.1%}, peak {res['peak_gpu_memory_gib']} GiB, "
                      f"loss {res['final_loss']}, wall {res['wall_seconds']} s on {res['device']}",
                      flush=True)  # fmt: skip
    summary = {
        v: {
            "tokens_per_second": statistics.median(r["tokens_per_second"] for r in rs),
            "mfu": statistics.median(r["mfu"] for r in rs),
            "peak_gpu_memory_gib": max(r["peak_gpu_memory_gib"] for r in rs),
            "final_loss": [r["final_loss"] for r in rs],
        }
        for v, rs in rounds.items()
    }
    report = {"shape": args.shape, "parameters": params, "summary": summary, "rounds": rounds}
    print(json.dumps(summary, indent=1))
    if len(variants) == 2:
        a, b = variants
        ratio = summary[b]["tokens_per_second"] / summary[a]["tokens_per_second"]
        print(f"{b} / {a}: {ratio:.2f}x tokens/s, memory {summary[b]['peak_gpu_memory_gib']} vs "
              f"{summary[a]['peak_gpu_memory_gib']} GiB")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
