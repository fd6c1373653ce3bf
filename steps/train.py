"""train: distil the teacher's summaries into a LoRA adapter on the base model (transformers + peft).

    python -m steps.train --dataset out/dataset --base-model .cache/models/SmolLM2-135M-Instruct --out out/train

The student sees each training document in the serving chat template (`steps.prompting`) and learns the teacher's
summary; the loss covers only the summary tokens (and the end-of-turn token, so the model learns to stop). Seeded,
progress printed every `--log-every` steps. Produces in `--out`: the PEFT adapter (`adapter_config.json`,
`adapter_model.safetensors`), `loss.csv`, `loss.png`, `training_summary.json` and `result.json`.

Device: `--train-backend gpu` needs CUDA and trains in bf16; `cpu` trains in float32 on the CPU. The loop itself
(`train_loop`) is the same for every launcher.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from steps.common import atomic_dir, parse_config, read_json, write_json, write_result
from steps.fetch_dataset import load_split
from steps.prompting import messages

BACKENDS = ("cpu", "gpu", "ray")


@dataclass
class TrainConfig:
    dataset: str = field(metadata={"help": "folder (or s3:// URI of the folder) written by fetch-dataset"})
    out: str = field(metadata={"help": "folder or s3:// URI to write the adapter and training records into"})
    base_model: str = field(
        default=".cache/models/SmolLM2-135M-Instruct", metadata={"help": "HF model id or local folder of the base"}
    )
    base_revision: str = field(default="main", metadata={"help": "hub revision of the base (ignored for a folder)"})
    train_backend: str = field(default="cpu", metadata={"help": f"where to train: {' or '.join(BACKENDS)}"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (usually 2 × rank)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA path"})
    lora_targets: str = field(
        default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        metadata={"help": "comma-separated module names to adapt (all linear layers of a Llama block by default)"},
    )
    learning_rate: float = field(default=1e-3, metadata={"help": "peak AdamW learning rate (LoRA tolerates ~1e-3)"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the training split (fractions allowed)"})
    batch_size: int = field(default=8, metadata={"help": "examples per optimiser step"})
    max_seq_len: int = field(default=512, metadata={"help": "longest tokenised example; longer documents are cut"})
    warmup_ratio: float = field(default=0.1, metadata={"help": "share of steps spent warming the learning rate up"})
    seed: int = field(default=0, metadata={"help": "seed for data order, dropout and LoRA init"})
    threads: int = field(default=0, metadata={"help": "CPU threads for torch, per Ray worker with ray (0: all cores)"})
    log_every: int = field(default=2, metadata={"help": "print progress every N steps"})
    qlora: bool = field(
        default=False, metadata={"help": "gpu only: load the base in 4-bit NF4 (bitsandbytes) and train LoRA on it"}
    )
    checkpoint_dir: str = field(
        default="",
        metadata={
            "help": "folder or s3:// URI for checkpoints; a restart resumes from the latest complete one there "
            "(empty: <out>.checkpoints beside --out; with ray, Ray Train's storage path)"
        },
    )
    checkpoint_every: int = field(default=10, metadata={"help": "checkpoint every N optimiser steps (0: never)"})
    ray_address: str = field(
        default="",
        metadata={"help": "ray only: cluster to join ('auto' inside a RayJob); empty starts a local Ray cluster"},
    )
    ray_workers: int = field(default=2, metadata={"help": "ray only: data-parallel training workers"})
    max_failures: int = field(
        default=3, metadata={"help": "ray only: worker-group restarts from the latest checkpoint before giving up"}
    )
    run_id: str = field(default="", metadata={"help": "names the Ray Train run (the workflow uid on Argo)"})


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    train_seconds: float
    tokens_per_second: float
    device: str


def encode_example(tokenizer: Any, document: str, summary: str, max_seq_len: int) -> dict[str, list[int]]:
    """Token ids and labels for one example: prompt tokens are masked out (-100), the summary and end-of-turn kept."""
    prompt = tokenizer.apply_chat_template(messages(document), add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(summary.strip() + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    overflow = len(prompt_ids) + len(answer_ids) - max_seq_len
    if overflow > 0:
        # Cut the document from the middle of the prompt, keeping the instructions' head and the turn's end.
        keep_tail = 16
        prompt_ids = prompt_ids[: len(prompt_ids) - keep_tail - overflow] + prompt_ids[-keep_tail:]
    return {"input_ids": prompt_ids + answer_ids, "labels": [-100] * len(prompt_ids) + answer_ids}


def collate(batch: list[dict[str, list[int]]], pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(b["input_ids"]) for b in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        ids[i, :n] = torch.tensor(b["input_ids"])
        labels[i, :n] = torch.tensor(b["labels"])
        mask[i, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def train_loop(model: Any, examples: list[dict[str, list[int]]], cfg: TrainConfig, pad_id: int) -> list[dict]:
    """Train `model` (a PEFT model, already on its device) in place; returns the per-step log.

    Batches are drawn in a seeded order with lengths grouped (sorted within shuffled chunks) to waste little padding.
    """
    import torch

    device = next(model.parameters()).device
    rng = random.Random(cfg.seed)
    steps_per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total_steps = max(1, math.ceil(steps_per_epoch * cfg.epochs))
    warmup = max(1, int(total_steps * cfg.warmup_ratio))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total_steps - warmup)))
        ),
    )

    def batches() -> Any:
        while True:
            order = list(range(len(examples)))
            rng.shuffle(order)
            chunk = cfg.batch_size * 4
            for c in range(0, len(order), chunk):
                part = sorted(order[c : c + chunk], key=lambda i: len(examples[i]["input_ids"]))
                groups = [part[i : i + cfg.batch_size] for i in range(0, len(part), cfg.batch_size)]
                rng.shuffle(groups)
                yield from groups

    log: list[dict] = []
    model.train()
    start = time.perf_counter()
    tokens = 0
    for step, idx in zip(range(total_steps), batches(), strict=False):
        batch = {k: v.to(device) for k, v in collate([examples[i] for i in idx], pad_id).items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += int(batch["attention_mask"].sum())
        elapsed = time.perf_counter() - start
        log.append({"step": step + 1, "loss": loss.item(), "lr": scheduler.get_last_lr()[0], "seconds": elapsed})
        if (step + 1) % cfg.log_every == 0 or step + 1 == total_steps:
            print(
                f"step {step + 1}/{total_steps}  loss {log[-1]['loss']:.4f}  "
                f"{tokens / elapsed:.0f} tok/s  {elapsed:.0f}s",
                flush=True,
            )
    log[-1]["tokens"] = tokens
    return log


def _save_curve(log: list[dict], out: Path) -> None:
    (out / "loss.csv").write_text(
        "step,loss,lr,seconds\n"
        + "".join(f"{r['step']},{r['loss']:.6f},{r['lr']:.3e},{r['seconds']:.2f}\n" for r in log)
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in log], [r["loss"] for r in log], marker="o", markersize=3)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss (summary tokens)")
    ax.set_title("LoRA distillation loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=100)
    plt.close(fig)


def run(cfg: TrainConfig) -> TrainResult:
    if cfg.train_backend not in BACKENDS:
        raise ValueError(f"--train-backend {cfg.train_backend!r} is not one of {', '.join(BACKENDS)}")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    if cfg.train_backend == "gpu" and not torch.cuda.is_available():
        raise ValueError("--train-backend gpu was asked for but CUDA is not available; use --train-backend cpu")
    device = torch.device("cuda" if cfg.train_backend == "gpu" else "cpu")
    torch.set_num_threads(cfg.threads or os.cpu_count() or 1)
    set_seed(cfg.seed)

    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    rows = load_split(cfg.dataset, "train")
    examples = [encode_example(tokenizer, r["document"], r["summary"], cfg.max_seq_len) for r in rows]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, revision=cfg.base_revision, dtype=dtype)
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=[t.strip() for t in cfg.lora_targets.split(",") if t.strip()],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora).to(device)
    model.print_trainable_parameters()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    log = train_loop(model, examples, cfg, pad_id)

    lineage = read_json(Path(cfg.dataset) / "lineage.json")
    result = TrainResult(
        steps=len(log),
        final_loss=round(log[-1]["loss"], 5),
        train_seconds=round(log[-1]["seconds"], 2),
        tokens_per_second=round(log[-1]["tokens"] / log[-1]["seconds"], 1),
        device=str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
    )
    with atomic_dir(cfg.out) as out:
        model.save_pretrained(out)
        _save_curve(log, out)
        write_json(
            out / "training_summary.json",
            {"config": {k: str(v) for k, v in asdict(cfg).items()}, "result": asdict(result), "dataset": lineage},
        )
        write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(TrainConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"train: {e}", file=sys.stderr)
        return 1
    print(f"trained {result.steps} steps on {result.device}: final loss {result.final_loss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
