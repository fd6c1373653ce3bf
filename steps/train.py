"""train: distil the teacher's summaries into a LoRA adapter on the base model (transformers + peft).

    python -m steps.train --dataset out/dataset --base-model .cache/models/SmolLM2-135M-Instruct --out out/adapter
    python -m steps.train --train-backend ray --ray-workers 2 --threads 1 --dataset out/dataset --out out/adapter

The student sees each training document in the serving chat template (`steps.prompting`) and learns the teacher's
summary; the loss covers only the summary tokens (and the end-of-turn token, so the model learns to stop). Seeded,
progress printed every `--log-every` steps. Produces in `--out` (a folder or an s3:// URI): the PEFT adapter
(`adapter_config.json`, `adapter_model.safetensors`), `loss.csv`, `loss.png`, `training_summary.json`, `result.json`.

One loop (`train_loop`), three launchers:
- `cpu`: in this process, float32;
- `gpu`: one CUDA device, bf16 autocast; `--qlora true` loads the base in 4-bit NF4 (bitsandbytes) and trains the
  LoRA weights on top (convert-gguf later merges into a full-precision reload of the base, never into 4-bit weights);
- `ray`: Ray Train `TorchTrainer`, `--ray-workers` CPU workers x `--threads` threads each, DDP over Gloo, float32;
  it joins `--ray-address` (`auto` inside a KubeRay RayJob) or starts a local Ray cluster.

Checkpoints (adapter, optimiser, scheduler, RNG, step log; the data position is the step, since the batch order is a
function of the seed) are written every `--checkpoint-every` steps, atomically, to `--checkpoint-dir` (a folder or an
s3:// URI); SIGTERM, the spot notice, flushes one at once and exits 143. Rerunning the same command resumes from the
latest complete checkpoint. With ray they go through Ray Train's checkpoint API to its storage path, and a dead worker
restarts the worker group from the latest one (`--max-failures`). Local checkpoints are deleted once `--out` is
written; under an s3:// prefix (a cluster run's own) they stay, so a pod lost before Argo uploaded its output resumes
at the end instead of from step 0 (the bucket's lifecycle rule expires them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from steps.common import (
    RESULT_FILE,
    atomic_dir,
    flag,
    is_uri,
    parse_config,
    read_json,
    timed,
    write_json,
    write_result,
)
from steps.dataset import load_split
from steps.prompting import messages
from steps.sealed import SealedFolders, upload

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

    def __post_init__(self) -> None:
        # Folders or URIs: kept as text, since pathlib would fold "s3://bucket" into "s3:/bucket".
        self.dataset, self.out, self.checkpoint_dir = str(self.dataset), str(self.out), str(self.checkpoint_dir)


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    train_seconds: float
    tokens_per_second: float
    device: str
    resumed_from_step: int
    peak_gpu_memory_gib: float = 0.0  # gpu: the CUDA allocator's peak in the process that finished (sizes the pool)


class Preempted(Exception):
    """Training stopped on SIGTERM after flushing a checkpoint; the same command resumes from it."""


# The SIGTERM that Kubernetes sends a pod before a spot reclaim: set by the in-process launcher's handler, read by the
# loop after each step, which then flushes a checkpoint at once and stops.
_stop_signal: int | None = None

CHECKPOINT_PREFIX = "step-"
KEEP_CHECKPOINTS = 2

# OpenMP threads spin at barriers by default: the fastest on CPUs the step has to itself (the pods request whole CPUs),
# but beside another busy process a descheduled thread stalls the others. Measured on this 2-core machine
# (benchmarks/train_throughput.py): 6 tiny-model steps took 26.5 s spinning vs 2.8 s with OMP_WAIT_POLICY=PASSIVE
# beside one niced process, while PASSIVE costs 10-25 % on an idle machine. So it stays the operator's choice for
# shared nodes; a value set for the step is handed on to the Ray workers.
WAIT_POLICY = {k: v for k, v in os.environ.items() if k == "OMP_WAIT_POLICY"}

# Settings that change the run's trajectory: a checkpoint written under others belongs to another run.
RESUME_FIELDS = (
    "base_model", "base_revision", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "learning_rate", "epochs",
    "batch_size", "max_seq_len", "warmup_ratio", "seed", "qlora",
)  # fmt: skip


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


def encode_rows(tokenizer: Any, rows: list[dict], max_seq_len: int) -> list[dict[str, list[int]]]:
    """The training split's rows as `encode_example`s, in order."""
    return [encode_example(tokenizer, r["document"], r["summary"], max_seq_len) for r in rows]


def collate(batch: list[dict[str, list[int]]], pad_id: int) -> dict[str, Any]:
    """Left-padded tensors, so every summary ends at the last column and only the tail needs logits.

    `keep` is the number of trailing positions that hold labels; `position_ids` count from each row's first real token.
    """
    import torch

    width = max(len(b["input_ids"]) for b in batch)
    keep = max(len(b["labels"]) - next(i for i, t in enumerate(b["labels"]) if t != -100) for b in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        ids[i, width - n :] = torch.tensor(b["input_ids"])
        labels[i, width - n :] = torch.tensor(b["labels"])
        mask[i, width - n :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return {"input_ids": ids, "labels": labels, "attention_mask": mask, "position_ids": positions, "keep": keep}


def schedule(n_examples: int, cfg: TrainConfig) -> tuple[int, int]:
    """(optimiser steps, warm-up steps) for a run over `n_examples`."""
    total = max(1, math.ceil(math.ceil(n_examples / cfg.batch_size) * cfg.epochs))
    return total, max(1, int(total * cfg.warmup_ratio))


def global_batches(examples: list[dict[str, list[int]]], cfg: TrainConfig) -> Iterator[list[int]]:
    """Example indices of each optimiser step, in a seeded order that every rank computes alike.

    Lengths are grouped (sorted within shuffled chunks of 4 batches) to waste little padding. The order depends on the
    seed and the step only, so skipping the first k batches is the data position of a run resumed at step k.
    """
    rng = random.Random(cfg.seed)
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        chunk = cfg.batch_size * 4
        for c in range(0, len(order), chunk):
            part = sorted(order[c : c + chunk], key=lambda i: len(examples[i]["input_ids"]))
            groups = [part[i : i + cfg.batch_size] for i in range(0, len(part), cfg.batch_size)]
            rng.shuffle(groups)
            yield from groups


def fingerprint(cfg: TrainConfig, examples: list[dict[str, list[int]]]) -> str:
    """What a checkpoint must share with this run to be resumed by it: the trajectory's settings and the data."""
    digest = hashlib.sha256(json.dumps({f: getattr(cfg, f) for f in RESUME_FIELDS}, sort_keys=True).encode())
    digest.update(json.dumps(examples).encode())
    return digest.hexdigest()


def train_loop(
    model: Any,
    examples: list[dict[str, list[int]]],
    cfg: TrainConfig,
    pad_id: int,
    checkpoints: Any,
    *,
    rank: int = 0,
    world_size: int = 1,
) -> list[dict]:
    """Train `model` (a PEFT model on its device, DDP-wrapped when `world_size` > 1) in place; returns the step log.

    Every launcher runs this loop. Each optimiser step takes one global batch; rank r trains on its r-th share. The
    loss is the sum of token losses over the *global* number of summary tokens, scaled by `world_size` because DDP
    averages gradients: any number of workers computes the same step as one process would. Logits are computed only
    for the summary tail (left padding + `logits_to_keep`), not for every prompt position.

    `checkpoints` is a `DirCheckpoints` or `RayCheckpoints`: the loop resumes from its latest checkpoint, saves one
    every `cfg.checkpoint_every` steps and at the end, and flushes one at once when SIGTERM arrived.
    """
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    total_steps, warmup = schedule(len(examples), cfg)
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
    run_fingerprint = fingerprint(cfg, examples)
    log: list[dict] = []
    with checkpoints.latest() as found:
        if found is not None:
            log = _load_state(found, model, optimizer, scheduler, run_fingerprint, rank)
            if rank == 0:
                print(f"resuming at step {len(log)}/{total_steps} from checkpoint {found.name}", flush=True)
    start_step = len(log)
    batches = global_batches(examples, cfg)
    for _ in range(start_step):  # the data position: the batches the checkpointed steps already consumed
        next(batches)

    def save(step: int) -> None:
        checkpoints.save(
            step,
            lambda folder: _write_state(folder, model, optimizer, scheduler, log, run_fingerprint, rank),
            {"step": step, "loss": log[-1]["loss"]},
        )

    model.train()
    seconds_before = log[-1]["seconds"] if log else 0.0
    tokens = tokens_before = log[-1]["tokens"] if log else 0
    started = time.perf_counter()
    for step in range(start_step, total_steps):
        idx = next(batches)
        mine = idx[rank::world_size]
        summary_tokens = sum(sum(t != -100 for t in examples[i]["labels"]) for i in idx)
        # A rank with no example in a short last batch still runs (DDP needs every rank's backward) with weight 0.
        batch = collate([examples[i] for i in (mine or idx[:1])], pad_id)
        keep = batch.pop("keep")
        labels = batch.pop("labels")[:, -keep:].to(device)
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(**batch, logits_to_keep=keep + 1).logits[:, :-1]
        token_loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
        )
        weight = 1.0 if mine else 0.0
        (token_loss * (weight * world_size / summary_tokens)).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        lr = scheduler.get_last_lr()[0]  # the rate this step used (the schedule's next value comes after .step())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        real_tokens = float(batch["attention_mask"].sum())
        figures = torch.tensor([token_loss.item() * weight / summary_tokens, real_tokens * weight])
        if world_size > 1:
            torch.distributed.all_reduce(figures)
        tokens += int(figures[1])
        elapsed = seconds_before + time.perf_counter() - started
        log.append({"step": step + 1, "loss": float(figures[0]), "lr": lr, "seconds": elapsed,
                    "tokens": tokens, **({"resumed": True} if step == start_step > 0 else {})})  # fmt: skip
        if rank == 0 and ((step + 1) % cfg.log_every == 0 or step + 1 == total_steps):
            print(
                f"step {step + 1}/{total_steps}  loss {log[-1]['loss']:.4f}  "
                f"{(tokens - tokens_before) / (elapsed - seconds_before):.0f}"
                f" tok/s  {elapsed:.0f}s",
                flush=True,
            )
        preempted = _stop_signal is not None
        if preempted or step + 1 == total_steps or (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0):
            save(step + 1)
        if preempted:
            raise Preempted(f"stopped by signal {_stop_signal} after step {step + 1}/{total_steps}, checkpoint saved")
    return log


def _unwrap(model: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def _write_state(
    folder: Path, model: Any, optimizer: Any, scheduler: Any, log: list[dict], run_fingerprint: str, rank: int
) -> None:
    """One checkpoint: rank 0 writes the adapter (PEFT format), optimiser, scheduler, step log; each rank its RNG."""
    import torch

    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, folder / f"rng-{rank}.pt")
    if rank != 0:
        return
    _unwrap(model).save_pretrained(folder / "adapter")
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    write_json(folder / "state.json", {"step": len(log), "fingerprint": run_fingerprint, "log": log})


def _load_state(
    folder: Path, model: Any, optimizer: Any, scheduler: Any, run_fingerprint: str, rank: int
) -> list[dict]:
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = read_json(folder / "state.json")
    if state["fingerprint"] != run_fingerprint:
        raise ValueError(
            f"checkpoint {folder.name} was written by a run with other settings or data "
            f"(one of {', '.join(RESUME_FIELDS)}, or the training split differ): point --checkpoint-dir at a new "
            "location, or delete the old checkpoints, to start over"
        )
    set_peft_model_state_dict(_unwrap(model), load_file(folder / "adapter/adapter_model.safetensors"))
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=True))
    rng_file = folder / f"rng-{rank}.pt"
    rng = torch.load(rng_file if rng_file.is_file() else folder / "rng-0.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state["log"]


class DirCheckpoints:
    """Checkpoints as sealed `step-NNNNNNNN/` folders (steps/sealed.py) under a local folder or an s3:// prefix.

    Each is written to a temp place and sealed with `COMPLETE.json` (every file's sha256) last; `latest()` takes the
    newest sealed checkpoint whose files match their digests, so a torn one is never resumed from.
    """

    def __init__(self, location: str, keep: int = KEEP_CHECKPOINTS) -> None:
        self.store = SealedFolders(location, "train")
        self.keep = keep

    def _steps(self) -> list[tuple[str, str]]:
        def is_step(name: str) -> bool:
            return name.startswith(CHECKPOINT_PREFIX) and name[len(CHECKPOINT_PREFIX) :].isdigit()

        return [(name, path) for name, path in self.store.names() if is_step(name)]  # zero-padded: sorted by step

    @contextmanager
    def latest(self) -> Iterator[Path | None]:
        with self.store.first_complete(list(reversed(self._steps()))) as found:
            yield found

    def save(self, step: int, fill: Any, metrics: dict) -> None:
        self.store.put(f"{CHECKPOINT_PREFIX}{step:08d}", fill)
        for _, old in self._steps()[: -self.keep]:
            self.store.remove(old)

    def clear(self) -> None:
        self.store.clear()


class RayCheckpoints:
    """The same checkpoint folders through Ray Train: `ray.train.report` persists them to the run's storage path
    (merged across ranks, registered only once complete) and `get_checkpoint()` returns the latest after a restart."""

    @contextmanager
    def latest(self) -> Iterator[Path | None]:
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            yield None
            return
        with checkpoint.as_directory() as folder:
            yield Path(folder)

    def save(self, step: int, fill: Any, metrics: dict) -> None:
        import ray.train

        with tempfile.TemporaryDirectory(prefix="checkpoint-") as tmp:
            fill(Path(tmp))
            ray.train.report(
                metrics,
                checkpoint=ray.train.Checkpoint.from_directory(tmp),
                checkpoint_dir_name=f"{CHECKPOINT_PREFIX}{step:08d}",
            )


def build_model(cfg: TrainConfig, device: Any) -> tuple[Any, Any]:
    """(PEFT model on `device`, tokenizer): bf16 on CUDA (4-bit NF4 base with `--qlora`), float32 on CPU."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    set_seed(cfg.seed)  # the same LoRA init on every rank and in every restart
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    extra: dict[str, Any] = {}
    if cfg.qlora:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as e:
            raise ValueError("--qlora needs bitsandbytes: install the gpu extra (pip install '.[gpu]')") from e
        from transformers import BitsAndBytesConfig

        extra["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        extra["device_map"] = {"": device.index or 0}
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, revision=cfg.base_revision, dtype=dtype, **extra)
    if cfg.qlora:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=[t.strip() for t in cfg.lora_targets.split(",") if t.strip()],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora)
    if not cfg.qlora:
        model = model.to(device)
    return model, tokenizer


def pad_id_of(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _on_sigterm(signum: int, frame: Any) -> None:
    global _stop_signal
    _stop_signal = signum
    print("train: SIGTERM received: checkpointing after this step, then stopping", file=sys.stderr, flush=True)


def _train_here(cfg: TrainConfig, rows: list[dict], checkpoints: DirCheckpoints) -> tuple[str, float]:
    """The in-process launcher (cpu, gpu): returns the device's name and its peak allocated memory in GiB (0 on CPU)."""
    import signal

    import torch

    device = torch.device("cuda" if cfg.train_backend == "gpu" else "cpu")
    torch.set_num_threads(cfg.threads or os.cpu_count() or 1)
    model, tokenizer = build_model(cfg, device)
    examples = encode_rows(tokenizer, rows, cfg.max_seq_len)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        train_loop(model, examples, cfg, pad_id_of(tokenizer), checkpoints)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if device.type == "cpu":
        return "cpu", 0.0
    return torch.cuda.get_device_name(device), round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def _ray_worker(config: dict) -> None:
    """One Ray Train worker: the same model, examples and `train_loop`, DDP over Gloo."""
    import ray.train
    import torch
    from ray.train.torch import prepare_model

    cfg = TrainConfig(**config["cfg"])
    torch.set_num_threads(config["threads"])  # Ray sets OMP_NUM_THREADS=1 per worker; the thread count is ours
    context = ray.train.get_context()
    model, tokenizer = build_model(cfg, torch.device("cpu"))
    examples = encode_rows(tokenizer, config["rows"], cfg.max_seq_len)
    model = prepare_model(model)
    train_loop(
        model,
        examples,
        cfg,
        pad_id_of(tokenizer),
        RayCheckpoints(),
        rank=context.get_world_rank(),
        world_size=context.get_world_size(),
    )


def _ray_storage(location: str) -> tuple[str, Any]:
    """Ray Train's storage path and filesystem: an absolute local folder, or S3 (honouring AWS_ENDPOINT_URL)."""
    if not is_uri(location):
        return str(Path(location).resolve()), None
    if not location.startswith("s3://"):
        raise ValueError(f"--checkpoint-dir {location}: only local folders and s3:// URIs are supported")
    from pyarrow import fs

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        kwargs["scheme"] = "https" if endpoint.startswith("https") else "http"
    return location[len("s3://") :].rstrip("/"), fs.S3FileSystem(**kwargs)


def _train_ray(cfg: TrainConfig, rows: list[dict], storage: str, dest: Path) -> str:
    """The Ray Train launcher: `cfg.ray_workers` CPU workers; copies the final checkpoint into `dest`."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    threads = cfg.threads or max(1, (os.cpu_count() or 1) // cfg.ray_workers)
    started_here = not ray.is_initialized()
    if started_here:
        if cfg.ray_address:
            ray.init(address=cfg.ray_address, logging_level="WARNING")
        else:  # a local cluster just big enough: the workers' CPUs, no dashboard
            ray.init(num_cpus=cfg.ray_workers * threads, logging_level="WARNING")
    if Path(cfg.base_model).exists():  # Ray workers do not run in this folder: a relative path would miss
        cfg = replace(cfg, base_model=str(Path(cfg.base_model).resolve()))
    storage_path, filesystem = _ray_storage(storage)
    # The run's name is stable across restarts of this command (workflow uid on Argo), so Ray Train finds the
    # earlier attempt's checkpoints in the storage path and `get_checkpoint()` resumes from the latest.
    digest = hashlib.sha256(json.dumps([asdict(cfg), rows], default=str).encode()).hexdigest()
    name = cfg.run_id or f"train-{digest[:12]}"
    trainer = TorchTrainer(
        _ray_worker,
        train_loop_config={"cfg": asdict(cfg), "rows": rows, "threads": threads},
        scaling_config=ScalingConfig(num_workers=cfg.ray_workers, use_gpu=False, resources_per_worker={"CPU": threads}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=filesystem,
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS),
            worker_runtime_env={"env_vars": WAIT_POLICY},
        ),
    )
    try:
        result = trainer.fit()
        with result.checkpoint.as_directory() as folder:
            shutil.copytree(folder, dest, dirs_exist_ok=True)
        # The adapter is out of Ray's hands now: locally a rerun is a new run, not a resume of this one. On S3 (the
        # cluster's run prefix) the checkpoints stay until the adapter is safely uploaded and beyond (see run()).
        if filesystem is None:
            shutil.rmtree(Path(storage_path) / name, ignore_errors=True)
            with contextlib.suppress(OSError):  # the storage folder itself, when this run was all it held
                Path(storage_path).rmdir()
    except ray.train.TrainingFailedError as e:
        raise TrainingFailed(
            f"Ray training failed after {cfg.max_failures} restart(s) from its checkpoints: {e}. Its checkpoints are "
            f"kept under {storage}/{name}: rerun the same command to resume"
        ) from e
    finally:
        if started_here:
            ray.shutdown()
    return f"ray: {cfg.ray_workers} CPU workers x {threads} threads"


class TrainingFailed(Exception):
    """Training did not finish; nothing was written to --out."""


@contextmanager
def _local_folder(location: str) -> Iterator[Path]:
    """`location` as a local folder: itself, or a download of the s3:// prefix into a temp folder."""
    if not is_uri(location):
        yield Path(location)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    if not fs.exists(root):
        raise FileNotFoundError(f"{location} does not exist: run fetch-dataset first, or fix the URI")
    with tempfile.TemporaryDirectory(prefix="dataset-") as tmp:
        fs.get(f"{root.rstrip('/')}/", f"{tmp}/", recursive=True)
        yield Path(tmp)


def _publish(folder: Path, location: str) -> None:
    """Put a finished output folder at `location`: one rename locally; on S3 `result.json` goes last, so a folder
    holding it is complete."""
    if not is_uri(location):
        with atomic_dir(Path(location)) as out:
            shutil.copytree(folder, out, dirs_exist_ok=True)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    upload(fs, folder, root.rstrip("/"), last=RESULT_FILE)


def config_problems(cfg: TrainConfig) -> list[str]:
    """Everything wrong with the settings alone, without looking at the machine (also run by check-parameters)."""
    problems = []
    if cfg.train_backend not in BACKENDS:
        problems.append(f"--train-backend {cfg.train_backend!r} is not one of {', '.join(BACKENDS)}")
    if cfg.qlora and cfg.train_backend != "gpu":
        problems.append("--qlora needs --train-backend gpu (bitsandbytes' 4-bit kernels run on CUDA); drop --qlora")
    if cfg.train_backend == "ray" and cfg.ray_workers < 1:
        problems.append(f"--ray-workers {cfg.ray_workers}: needs at least 1")
    if cfg.train_backend == "ray" and cfg.ray_address and cfg.threads < 1:
        problems.append("--threads: set the threads per Ray worker (the cluster's nodes differ from this machine)")
    if cfg.checkpoint_every < 0:
        problems.append(f"--checkpoint-every {cfg.checkpoint_every}: use 0 (only at the end) or a positive number")
    for name in ("batch_size", "max_seq_len"):
        if getattr(cfg, name) < 1:
            problems.append(f"{flag(name)} {getattr(cfg, name)}: needs at least 1")
    return problems


def _problems(cfg: TrainConfig) -> list[str]:
    import torch

    problems = config_problems(cfg)
    if cfg.train_backend == "gpu" and not torch.cuda.is_available():
        problems.append("--train-backend gpu was asked for but CUDA is not available; use --train-backend cpu or ray")
    return problems


@timed
def run(cfg: TrainConfig) -> TrainResult:
    problems = _problems(cfg)
    if problems:
        raise ValueError("; ".join(problems))
    checkpoint_dir = cfg.checkpoint_dir or f"{cfg.out.rstrip('/')}.checkpoints"
    with _local_folder(cfg.dataset) as dataset:
        rows = load_split(dataset, "train")
        lineage = read_json(dataset / "lineage.json")
    with tempfile.TemporaryDirectory(prefix="train-") as tmp:
        final = Path(tmp) / "final"
        if cfg.train_backend == "ray":
            device, peak = _train_ray(cfg, rows, checkpoint_dir, final), 0.0
            store = None
        else:
            store = DirCheckpoints(checkpoint_dir)
            device, peak = _train_here(cfg, rows, store)
            with store.latest() as folder:
                shutil.copytree(folder, final)
        state = read_json(final / "state.json")
        log = state["log"]
        resumed = max((r["step"] - 1 for r in log if r.get("resumed")), default=0)
        result = TrainResult(
            steps=len(log),
            final_loss=round(log[-1]["loss"], 5),
            train_seconds=round(log[-1]["seconds"], 2),
            tokens_per_second=round(log[-1]["tokens"] / log[-1]["seconds"], 1),
            device=device,
            resumed_from_step=resumed,
            peak_gpu_memory_gib=peak,
        )
        out = Path(tmp) / "out"
        shutil.copytree(final / "adapter", out)
        _save_curve(log, out)
        write_json(
            out / "training_summary.json",
            {"config": {k: str(v) for k, v in asdict(cfg).items()}, "result": asdict(result), "dataset": lineage},
        )
        write_result(out, result)
        _publish(out, cfg.out)
    # The adapter is out: locally, a rerun of this command is a new run, not a resume of this one. Checkpoints under an
    # s3:// prefix (the cluster's, one per workflow run) stay: this pod's output is uploaded by Argo only after it
    # exits, so a pod lost in between is retried and must resume at the end, not from step 0; the bucket's lifecycle
    # rule removes them (infra/s3/).
    if store is not None and not is_uri(checkpoint_dir):
        store.clear()
    return result


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


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(TrainConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except Preempted as e:
        print(f"train: {e}; run the same command again to resume", file=sys.stderr)
        return 143  # 128 + SIGTERM: what Kubernetes expects of a pod stopped by it
    except (ValueError, FileNotFoundError, TrainingFailed) as e:
        print(f"train: {e}", file=sys.stderr)
        return 1
    resumed = f" (resumed at step {result.resumed_from_step})" if result.resumed_from_step else ""
    print(f"trained {result.steps} steps on {result.device}{resumed}: final loss {result.final_loss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
