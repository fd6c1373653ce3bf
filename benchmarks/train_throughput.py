"""Benchmark: training throughput of our loop vs a plain HF `Trainer` + PEFT, and of Ray Train's data parallelism.

    python -m benchmarks.train_throughput --model tiny --steps 12 --repeats 3
    python -m benchmarks.train_throughput --model .cache/models/SmolLM2-135M-Instruct --steps 4 --repeats 3

Every variant trains the same base (`tiny`: a 2-layer random-init Llama built here with SmolLM2's tokenizer), on the
same examples (the committed training split in the serving chat template, `steps.train.encode_example`, same
`--max-seq-len`), with the same LoRA (r, alpha, targets), batch size, learning-rate schedule and CPU threads, for
`--steps` optimiser steps. Variants run as separate processes, alternated round by round in this one process tree
(ours, hf, ray…, ours, hf, …) so machine noise hits all of them; each variant's median over `--repeats` rounds is
reported, and ratios of medians.

- `ours`: `steps.train.train_loop` in process (length-grouped batches, left padding, logits only for the summary),
  precision `auto` (bf16 autocast where the CPU has AMX/AVX-512-BF16, float32 elsewhere); `ours-fp32`, `ours-bf16`:
  the same with `--precision` forced;
- `hf`: `transformers.Trainer` on the PEFT model with `DataCollatorForSeq2Seq` (pads each batch to its longest
  example, loss over all positions' logits): what a team would write first;
- `ray-WxT`: `python -m steps.train --train-backend ray` with W workers x T threads on a local Ray cluster;
- `<variant>+passive`: the same with OMP_WAIT_POLICY=PASSIVE (OpenMP threads sleep at barriers instead of spinning),
  to price what the train step sets by default for shared nodes.

`--profile` first runs `ours` once more under `torch.profiler` and prints a profile note: the share of forward,
backward and optimiser, the top operators by self CPU time, and the padding the batches carry.

Throughput counts real (non-padding) tokens per second of training (the step loop, not model loading or Ray's start);
padded tokens/s are reported beside them. Ray variants also report the command's wall time, start-up included.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from steps.core.defaults import SHARED

ROOT = Path(__file__).resolve().parent.parent


def _config(args: argparse.Namespace, out: str, precision: str = "auto") -> object:
    from steps.train import TrainConfig

    n = len(_rows(args.dataset))
    epochs = args.steps / math.ceil(n / args.batch_size)
    return TrainConfig(dataset=str(args.dataset), out=out, base_model=args.model, batch_size=args.batch_size,
                       epochs=epochs, threads=args.threads, max_seq_len=args.max_seq_len, log_every=10**6,
                       checkpoint_every=0, precision=precision)  # fmt: skip


def _rows(dataset: Path) -> list[dict]:
    from steps.core.dataset import load_split

    return load_split(dataset, "train")


def worker_ours(args: argparse.Namespace, precision: str = "auto") -> dict:
    import torch

    from steps import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(args, f"{tmp}/out", precision)
        torch.set_num_threads(args.threads)
        model, tokenizer = train.build_model(cfg, torch.device("cpu"))
        examples = train.encode_rows(tokenizer, _rows(args.dataset), cfg.max_seq_len)
        padded = 0
        batches = train.global_batches(examples, cfg)
        for _ in range(args.steps):
            idx = next(batches)
            padded += len(idx) * max(len(examples[i]["input_ids"]) for i in idx)
        log = train.train_loop(model, examples, cfg, train.pad_id_of(tokenizer), train.DirCheckpoints(f"{tmp}/ckpt"))
    assert len(log) == args.steps
    return {"real_tokens": log[-1]["tokens"], "padded_tokens": padded, "seconds": log[-1]["seconds"],
            "final_loss": log[-1]["loss"], "precision": log[-1]["precision"]}  # fmt: skip


def profile_note(args: argparse.Namespace) -> str:
    """`ours` for `--steps` steps under torch.profiler: where a step's time goes, as a few lines of text."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from steps import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(args, f"{tmp}/out")
        torch.set_num_threads(args.threads)
        model, tokenizer = train.build_model(cfg, torch.device("cpu"))
        examples = train.encode_rows(tokenizer, _rows(args.dataset), cfg.max_seq_len)
        batches, real, padded = train.global_batches(examples, cfg), 0, 0
        for _ in range(args.steps):
            idx = next(batches)
            real += sum(len(examples[i]["input_ids"]) for i in idx)
            padded += len(idx) * max(len(examples[i]["input_ids"]) for i in idx)
        # The loop's phases, named for the profile: autograd's backward and the optimiser's step appear under their
        # own names; the forward is everything under the model's call.
        forward = model.forward

        def named_forward(*a: object, **k: object) -> object:
            with record_function("## forward"):
                return forward(*a, **k)

        model.forward = named_forward
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            log = train.train_loop(model, examples, cfg, train.pad_id_of(tokenizer), train.DirCheckpoints(f"{tmp}/c"))
    events = prof.key_averages()
    total = log[-1]["seconds"]

    def seconds(name: str) -> float:
        return sum(e.cpu_time_total for e in events if e.key == name) / 1e6

    backward = sum(e.cpu_time_total for e in events if e.key.startswith("autograd::engine::evaluate_function"))
    phases = {"forward": seconds("## forward"), "backward": backward / 1e6,
              "optimizer": seconds("Optimizer.step#AdamW.step")}  # fmt: skip
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    lines = [f"profile of ours ({args.steps} steps, {total:.1f} s in the loop, precision {log[-1]['precision']}, "
             f"padding {1 - real / padded:.1%} of batch tokens):",
             "  " + ", ".join(f"{k} {v:.1f} s ({v / total:.0%})" for k, v in phases.items()),
             "  top operators by self CPU time: " + ", ".join(
                 f"{e.key} {e.self_cpu_time_total / 1e6:.1f} s" for e in top)]  # fmt: skip
    return "\n".join(lines)


def worker_hf(args: argparse.Namespace) -> dict:
    import torch
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainerCallback, TrainingArguments

    from steps import train

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(args, f"{tmp}/out")
        model, tokenizer = train.build_model(cfg, torch.device("cpu"))
        examples = train.encode_rows(tokenizer, _rows(args.dataset), cfg.max_seq_len)
        collator = DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=-100)
        counts = {"real": 0, "padded": 0}

        def collate(features: list[dict]) -> dict:
            return collator([dict(f) for f in features])

        class CountingTrainer(Trainer):
            # Counted as each batch is trained, not as the data loader collates it: the loader runs a batch ahead
            # (at 2 steps, counting collated batches overstated hf's tokens by half).
            def training_step(self, model: object, inputs: dict, *a: object, **k: object) -> object:
                counts["real"] += int(inputs["attention_mask"].sum())
                counts["padded"] += inputs["attention_mask"].numel()
                return super().training_step(model, inputs, *a, **k)

        class StepTimer(TrainerCallback):
            def on_step_begin(self, *a: object, **k: object) -> None:
                self.start = self.start if hasattr(self, "start") else time.perf_counter()

            def on_train_end(self, *a: object, **k: object) -> None:
                self.seconds = time.perf_counter() - self.start

        timer = StepTimer()
        targs = TrainingArguments(
            output_dir=f"{tmp}/hf", per_device_train_batch_size=args.batch_size, max_steps=args.steps,
            learning_rate=cfg.learning_rate, lr_scheduler_type="cosine", warmup_steps=max(1, int(args.steps * 0.1)),
            weight_decay=0.0, max_grad_norm=1.0, logging_steps=10**6, save_strategy="no", report_to=[],
            seed=cfg.seed, use_cpu=True, dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True,
        )  # fmt: skip
        trainer = CountingTrainer(
            model=model, args=targs, train_dataset=examples, data_collator=collate, callbacks=[timer]
        )
        out = trainer.train()
    return {"real_tokens": counts["real"], "padded_tokens": counts["padded"], "seconds": timer.seconds,
            "final_loss": out.training_loss}  # fmt: skip


def run_ray(args: argparse.Namespace, workers: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(args, f"{tmp}/out")
        cmd = [sys.executable, "-m", "steps.train", "--train-backend", "ray", "--ray-workers", str(workers),
               "--threads", str(threads), "--dataset", str(args.dataset), "--out", f"{tmp}/out",
               "--base-model", args.model, "--batch-size", str(args.batch_size), "--epochs", str(cfg.epochs),
               "--max-seq-len", str(args.max_seq_len), "--checkpoint-every", "0", "--log-every", "1000000"]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"ray {workers}x{threads} failed:\n{proc.stderr[-3000:]}")
        result = json.loads(Path(f"{tmp}/out/result.json").read_text())
        log = (Path(tmp) / "out/loss.csv").read_text().splitlines()[1:]
    assert len(log) == args.steps
    return {"real_tokens": result["tokens_per_second"] * result["train_seconds"], "padded_tokens": None,
            "seconds": result["train_seconds"], "final_loss": result["final_loss"], "wall": wall}  # fmt: skip


def run_worker(args: argparse.Namespace, variant: str) -> dict:
    env = dict(os.environ)
    if variant.endswith("+passive"):  # OpenMP threads sleep at barriers instead of spinning (see the docstring)
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        variant = variant.removesuffix("+passive")
    else:
        env.pop("OMP_WAIT_POLICY", None)
    cmd = [sys.executable, "-m", "benchmarks.train_throughput", "--worker", variant, "--model", args.model,
           "--dataset", str(args.dataset), "--steps", str(args.steps), "--batch-size", str(args.batch_size),
           "--threads", str(args.threads), "--max-seq-len", str(args.max_seq_len)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="'tiny' or an HF model folder")
    parser.add_argument("--dataset", type=Path, default=ROOT / "out/dataset", help="folder written by fetch-dataset")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the in-process variants")
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default="ours,hf,ray-2x1,ray-1x1,ray-1x2")
    parser.add_argument("--profile", action="store_true", help="print a profile note of `ours` first")
    parser.add_argument("--json", type=Path, help="also write the summary here (benchmarks/targets.py reads it)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker == "profile":
            print(json.dumps(profile_note(args)))
        elif args.worker.startswith("ours"):
            print(json.dumps(worker_ours(args, args.worker.partition("-")[2] or "auto")))
        else:
            print(json.dumps(worker_hf(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from tests.tiny import build_model

            build_model(ROOT / SHARED.base_model, Path(tmp) / "tiny", max_positions=1024)
            args.model = str(Path(tmp) / "tiny")
        if args.profile:
            print(run_worker(args, "profile"), flush=True)
        runs: dict[str, list[dict]] = {v: [] for v in args.variants.split(",")}
        for round_ in range(args.repeats):
            for variant in runs:
                if variant.startswith("ray-"):
                    w, t = (int(x) for x in variant[4:].split("x"))
                    r = run_ray(args, w, t)
                else:
                    r = run_worker(args, variant)
                r["tok_s"] = r["real_tokens"] / r["seconds"]
                runs[variant].append(r)
                print(f"round {round_ + 1} {variant:8s} {r['tok_s']:8.1f} real tok/s  {r['seconds']:6.1f}s"
                      f"  loss {r['final_loss']:.4f}" + (f"  wall {r['wall']:.1f}s" if "wall" in r else ""),
                      flush=True)  # fmt: skip
    med = {v: statistics.median(r["tok_s"] for r in rs) for v, rs in runs.items()}
    summary = {"model": args.model, "steps": args.steps, "batch_size": args.batch_size, "threads": args.threads,
               "repeats": args.repeats, "median_real_tok_s": med}  # fmt: skip
    for v, rs in runs.items():
        if rs[0]["padded_tokens"]:
            summary.setdefault("median_padded_tok_s", {})[v] = statistics.median(
                r["padded_tokens"] / r["seconds"] for r in rs
            )
        if "wall" in rs[0]:
            summary.setdefault("median_wall_s", {})[v] = statistics.median(r["wall"] for r in rs)
    if "ours" in med and "hf" in med:
        summary["ours_vs_hf"] = med["ours"] / med["hf"]
    if {"ray-2x1", "ray-1x1"} <= med.keys():
        summary["ray_scaling_efficiency_2x1_vs_1x1"] = med["ray-2x1"] / (2 * med["ray-1x1"])
    if {"ray-2x1", "ray-1x2"} <= med.keys():
        summary["ray_2x1_vs_1x2"] = med["ray-2x1"] / med["ray-1x2"]
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
