"""How one training process runs its share of a global batch: the micro-batch and gradient checkpointing that its
memory holds, sized by `steps/sizing/` from the memory its container may use.

Preflight sizes each pod for a micro-batch (its podSpecPatch, a Ray group's pod memory); inside the pod the process
reads the limit it was given (the cgroup's `memory.max`; MemTotal where there is none, as on a laptop) and picks the
first of `sizing.micro_options` the same model says fits: the micro-batch preflight planned, or a larger one on a
bigger node or a CPU that computes bf16. `--micro-batch` and `--gradient-checkpointing on|off` pin the choice.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

from steps import sizing
from steps.core import pod
from steps.sizing import Micro
from steps.train.config import TrainConfig
from steps.train.precision import Precision


def memory_limit_gib(cgroup: Path = pod.CGROUP, meminfo: Path = pod.MEMINFO) -> tuple[float, str]:
    """(GiB this process may use, where that came from): `steps.core.pod.memory_limit` in GiB."""
    limit, source = pod.memory_limit(cgroup, meminfo)
    return limit / sizing.GIB, source


def knobs(cfg: TrainConfig, precision: str) -> sizing.Knobs:
    """The run's sizing knobs, with the precision this process resolved (`precision.detect`)."""
    return sizing.Knobs(
        backend=cfg.train_backend,
        qlora=cfg.qlora,
        max_seq_len=cfg.max_seq_len,
        batch_size=cfg.batch_size,
        lora_r=cfg.lora_r,
        quantizations=(),
        precision=precision,
        micro_batch=cfg.micro_batch,
        gradient_checkpointing=cfg.gradient_checkpointing,
    )


def choose(
    cfg: TrainConfig,
    shape: sizing.Shape,
    precision: Precision,
    *,
    device: str,
    world_size: int = 1,
    pod_workers: int = 1,
    budget_gib: float | None = None,
) -> tuple[Precision, Micro]:
    """The precision and micro-batch (and checkpointing) of one process on `device` ("cpu", "ray" or "gpu"), its share
    of the global batch being ceil(batch / world_size); a Ray worker shares its pod's memory with `pod_workers - 1`
    others. `precision`: what `precision.detect` picked; under `--precision auto` a float32 pick that does not fit
    becomes bf16 weights (emulated where the CPU lacks bf16: slower, but it runs). `budget_gib`: the memory to fit
    (default: `memory_limit_gib`; on the GPU the card's). Raises ValueError, naming the need and the limit, when even
    one example with checkpointing does not fit and nothing was pinned."""
    share = math.ceil(cfg.batch_size / world_size)
    if budget_gib is None:
        if device == "gpu":
            import torch

            budget_gib, source = torch.cuda.get_device_properties(0).total_memory / sizing.GIB, "the card's memory"
        else:
            budget_gib, source = memory_limit_gib()
    else:
        source = "given"
    where = f"{budget_gib:.1f} GiB ({source})"

    def ways(name: str) -> tuple[list[Micro], Callable[[Micro], float]]:
        return sizing.device_ways(shape, knobs(cfg, name), device, share, pod_workers)

    options, need = ways(precision.name)
    chosen = sizing.fit_micro(options, need, budget_gib)
    if chosen is None and cfg.precision == "auto" and precision.name == "fp32" and device != "gpu":
        bf16_options, bf16_need = ways("bf16")
        chosen = sizing.fit_micro(bf16_options, bf16_need, budget_gib)
        if chosen is not None:
            precision = Precision(
                "bf16",
                f"auto: float32 weights need {need(options[-1]):.1f} GiB even at {options[-1]} and this process has "
                f"{where}; bf16 weights instead ({precision.reason.removeprefix('auto: ')})",
            )
            options, need = bf16_options, bf16_need
    if chosen is None:
        smallest = options[-1]
        if cfg.micro_batch or cfg.gradient_checkpointing != "auto":
            chosen = smallest  # of the pinned ways, the one nearest to fitting (checkpointing, where left to auto)
            print(
                f"train: warning: {chosen} is sized at {need(chosen):.1f} GiB and this process has {where}; "
                "running it as pinned",
                file=sys.stderr,
                flush=True,
            )
        else:
            raise ValueError(
                f"even {smallest} needs {need(smallest):.1f} GiB and this process has {where}: give the pod more "
                "memory (preflight sizes it), lower --max-seq-len, or pin --micro-batch 1 --gradient-checkpointing "
                "on to try regardless"
            )
    print(
        f"train: {chosen} ({math.ceil(share / chosen.examples)} per step for a share of {share}), {precision.name} "
        f"weights: {need(chosen):.1f} GiB planned of {where}",
        flush=True,
    )
    return precision, chosen


def fits(
    cfg: TrainConfig,
    shape: sizing.Shape,
    precision: str,
    *,
    device: str,
    world_size: int = 1,
    pod_workers: int = 1,
    budget_gib: float | None = None,
) -> bool:
    """Whether some way of running this process's share fits its memory in `precision` (fp32 or bf16): what a Ray
    worker tells the others before the DDP group agrees on one precision (precision.agree)."""
    if budget_gib is None:
        budget_gib = memory_limit_gib()[0]
    k = knobs(cfg, precision)
    options, need = sizing.device_ways(shape, k, device, math.ceil(cfg.batch_size / world_size), pod_workers)
    return sizing.fit_micro(options, need, budget_gib) is not None


def base_shape(cfg: TrainConfig) -> sizing.Shape:
    """The base's sizing shape from its config alone (parameters counted on the meta device: no weights read)."""
    from transformers import AutoConfig

    return sizing.shape_of(AutoConfig.from_pretrained(cfg.base_model, revision=cfg.base_revision))
