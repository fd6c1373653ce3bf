"""The train step's settings (`TrainConfig`, every field a command-line flag), its result, and the checks on the
settings alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from steps.contract.threads import threads_problems
from steps.core.defaults import SHARED
from steps.sizing import CHECKPOINTING, knob_problems
from steps.train.kd import settings_problems
from steps.train.precision import PRECISIONS, auto_override

BACKENDS = ("cpu", "gpu", "ray")


@dataclass
class TrainConfig:
    dataset: str = field(metadata={"help": "folder (or s3:// URI of the folder) written by fetch-dataset"})
    out: str = field(metadata={"help": "folder or s3:// URI to write the adapter and training records into"})
    base_model: str = field(default=SHARED.base_model, metadata={"help": "HF model id or local folder of the base"})
    base_revision: str = field(
        default=SHARED.base_revision, metadata={"help": "hub revision of the base (ignored for a folder)"}
    )
    train_backend: str = field(
        default=SHARED.train_backend, metadata={"help": f"where to train: {' or '.join(BACKENDS)}"}
    )
    lora_r: int = field(default=SHARED.lora_r, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (usually 2 × rank)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA path"})
    lora_targets: str = field(
        default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        metadata={"help": "comma-separated module names to adapt (all linear layers of a Llama block by default)"},
    )
    learning_rate: float = field(default=1e-3, metadata={"help": "peak AdamW learning rate (LoRA tolerates ~1e-3)"})
    epochs: float = field(
        default=SHARED.epochs, metadata={"help": "passes over the training split (fractions allowed)"}
    )
    batch_size: int = field(default=SHARED.batch_size, metadata={"help": "examples per optimiser step"})
    micro_batch: int = field(
        default=SHARED.micro_batch,
        metadata={
            "help": "examples per forward/backward on each worker; gradients are accumulated over the rest of its "
            "share of --batch-size (0: the largest the process's memory holds, from its cgroup limit: steps/sizing/)"
        },
    )
    gradient_checkpointing: str = field(
        default=SHARED.gradient_checkpointing,
        metadata={
            "help": f"{', '.join(CHECKPOINTING)}: recompute each layer in backward instead of keeping its activations "
            "(auto: only when one example per micro-batch does not fit otherwise)"
        },
    )
    packing: bool = field(
        default=False,
        metadata={
            "help": "several examples per row of --max-seq-len, each attending only to itself (less padding; "
            "the GPU's FlashAttention-2 and SDPA, and CPU SDPA, take the block-diagonal mask)"
        },
    )
    max_seq_len: int = field(
        default=SHARED.max_seq_len,
        metadata={"help": "longest tokenised example; longer ones have their document cut (result.json counts them)"},
    )
    warmup_ratio: float = field(default=0.1, metadata={"help": "share of steps spent warming the learning rate up"})
    seed: int = field(default=SHARED.seed, metadata={"help": "seed for data order, dropout and LoRA init"})
    threads: int = field(
        default=SHARED.threads,
        metadata={"help": "CPU threads for torch, per Ray worker with ray (0: the CPUs this container may use)"},
    )
    log_every: int = field(default=2, metadata={"help": "print progress every N steps"})
    precision: str = field(
        default=SHARED.precision,
        metadata={
            "help": "auto, fp32 or bf16: the compute precision on CPU (auto: bf16 autocast where the CPU has AMX or "
            "AVX-512-BF16, float32 elsewhere; gpu always runs bf16)"
        },
    )
    qlora: bool = field(
        default=SHARED.qlora,
        metadata={"help": "gpu only: load the base in 4-bit NF4 (bitsandbytes) and train LoRA on it"},
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
    ray_gpu: bool = field(
        default=False,
        metadata={"help": "ray only: every worker on one GPU (NCCL), none on CPUs; never both in one DDP group"},
    )
    max_failures: int = field(
        default=3, metadata={"help": "ray only: worker-group restarts from the latest checkpoint before giving up"}
    )
    run_id: str = field(default="", metadata={"help": "names the Ray Train run (the workflow uid on Argo)"})
    kd_weight: float = field(
        default=0.0,
        metadata={"help": "share of the loss that is the KL to the teacher's top-k (0: sequence-level only)"},
    )
    kd_temperature: float = field(default=1.0, metadata={"help": "temperature of the KD term (its KL is scaled by T²)"})
    kd_targets: str = field(
        default="", metadata={"help": "folder or s3:// URI of the teacher's top-k (python -m steps.kd_targets)"}
    )

    def __post_init__(self) -> None:
        # Folders or URIs: kept as text, since pathlib would fold "s3://bucket" into "s3:/bucket".
        self.dataset, self.out, self.checkpoint_dir = str(self.dataset), str(self.out), str(self.checkpoint_dir)
        self.kd_targets = str(self.kd_targets)


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    train_seconds: float
    tokens_per_second: float
    device: str
    resumed_from_step: int
    peak_gpu_memory_gib: float = 0.0  # gpu: the CUDA allocator's peak in the process that finished (sizes the pool)
    mfu: float = 0.0  # gpu: model FLOPs utilisation at 4·N FLOPs/token vs the card's bf16 peak (steps.train.gpu)
    precision: str = ""  # what the steps ran in (steps.train.precision): fp32 or bf16, both if a resume changed it
    examples: int = 0  # training examples
    examples_cut: int = 0  # of them, how many were longer than --max-seq-len: their documents were cut in the middle
    longest_example_tokens: int = 0  # the --max-seq-len that would have kept every document whole


def config_problems(cfg: TrainConfig) -> list[str]:
    """Everything wrong with the settings alone, without looking at the machine (also run by check-parameters)."""
    problems = threads_problems(cfg.threads)
    if cfg.train_backend not in BACKENDS:
        problems.append(f"--train-backend {cfg.train_backend!r} is not one of {', '.join(BACKENDS)}")
    if cfg.qlora and cfg.train_backend != "gpu":
        problems.append("--qlora needs --train-backend gpu (bitsandbytes' 4-bit kernels run on CUDA); drop --qlora")
    if cfg.precision not in PRECISIONS:
        problems.append(f"--precision {cfg.precision!r} is not one of {', '.join(PRECISIONS)}")
    if cfg.precision == "auto":
        try:
            auto_override()
        except ValueError as e:
            problems.append(str(e))
    if cfg.precision == "fp32" and cfg.train_backend == "gpu":
        problems.append("--precision fp32: the gpu launcher loads the base in bf16; use auto or bf16 there")
    if cfg.ray_gpu and cfg.train_backend != "ray":
        problems.append("--ray-gpu needs --train-backend ray (the gpu backend trains on its own GPU pod); drop it")
    if cfg.train_backend == "ray" and cfg.ray_workers < 1:
        problems.append(f"--ray-workers {cfg.ray_workers}: needs at least 1")
    if cfg.train_backend == "ray" and cfg.ray_address and cfg.threads < 1:
        problems.append("--threads: set the threads per Ray worker (the cluster's nodes differ from this machine)")
    if cfg.checkpoint_every < 0:
        problems.append(f"--checkpoint-every {cfg.checkpoint_every}: use 0 (only at the end) or a positive number")
    problems += settings_problems(cfg.kd_weight, cfg.kd_temperature, cfg.kd_targets)
    problems += knob_problems(cfg)  # the ranges preflight sizes the run by, refused alike there
    if not 0 < cfg.learning_rate < math.inf:
        problems.append(f"--learning-rate {cfg.learning_rate}: use a positive rate (LoRA tolerates ~1e-3)")
    if not cfg.lora_alpha > 0:
        problems.append(f"--lora-alpha {cfg.lora_alpha}: use a positive scale (usually 2 × --lora-r)")
    if not 0 <= cfg.lora_dropout < 1:
        problems.append(f"--lora-dropout {cfg.lora_dropout}: a probability, use [0, 1) (e.g. 0.05)")
    if not 0 <= cfg.warmup_ratio < 1:
        problems.append(f"--warmup-ratio {cfg.warmup_ratio}: a share of the steps, use [0, 1) (e.g. 0.1)")
    if cfg.log_every < 1:
        problems.append(f"--log-every {cfg.log_every}: use at least 1 step")
    if cfg.max_failures < 0:
        problems.append(
            f"--max-failures {cfg.max_failures}: use 0 (no restart) or more (Ray reads -1 as restart forever, which "
            "would retry a run that cannot succeed without end)"
        )
    return problems
