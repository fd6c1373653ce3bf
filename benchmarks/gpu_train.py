"""Benchmark: the GPU launcher (EKS spot pool) in bf16 vs 4-bit NF4 QLoRA, on a model the size a team would train.

    python -m benchmarks.gpu_train --tokenizer .cache/models/SmolLM2-135M-Instruct --dataset DATASET --shape 1b

No model can be downloaded where this runs, so the base is a random-init Llama of a real model's shape (`1b`:
TinyLlama-1.1B's layers, `3b`: Llama-3.2-3B's, `8b`: Llama-3.1-8B's) with SmolLM2's tokenizer; throughput and memory
depend on the shape, not on the weights' values. Each variant is one `python -m steps.train --train-backend gpu`
process over the same examples (DATASET is fetch-dataset's output), settings and number of optimiser steps; variants
alternate round by round and each reports its median over `--repeats` rounds. Tokens/s are real (non-padding) tokens
of the step loop, as steps.train reports them; MFU is result.json's (4·N FLOPs per token vs the card's dense bf16
peak, steps.train.gpu); memory is the CUDA allocator's peak in the training process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, default=ROOT / ".cache/models/SmolLM2-135M-Instruct")
    parser.add_argument("--dataset", type=Path, required=True, help="fetch-dataset's output folder")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=0, help="0: the largest the card holds (sizing)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variants", default="bf16,qlora-nf4", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
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
