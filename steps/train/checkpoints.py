"""Checkpoints: what one holds (adapter, optimiser, scheduler, RNG, step log), how it is read back without running
anything it holds, and the two stores the loop writes them to — sealed folders under a local folder or an s3://
prefix (`DirCheckpoints`), or Ray Train's checkpoint API (`RayCheckpoints`).

A checkpoint lies on shared storage, so reading one trusts nothing in it: the adapter is safetensors, the step log
JSON, and the optimiser, scheduler and RNG files are loaded with `torch.load(weights_only=True)`, which refuses any
pickled object beyond tensors and plain data (a pickle can run code as it is read).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steps.core.io import read_json, write_json
from steps.core.sealed import SealedFolders
from steps.train.config import TrainConfig

CHECKPOINT_PREFIX = "step-"
KEEP_CHECKPOINTS = 2

# Settings that change the run's trajectory: a checkpoint written under others belongs to another run.
RESUME_FIELDS = (
    "base_model", "base_revision", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "learning_rate", "epochs",
    "batch_size", "max_seq_len", "warmup_ratio", "seed", "qlora", "kd_weight", "kd_temperature",
)  # fmt: skip


class UnsafeCheckpoint(ValueError):
    """A checkpoint file holds pickled objects beyond tensors and plain data; it was not unpickled."""


def fingerprint(cfg: TrainConfig, examples: list[dict[str, list[int]]]) -> str:
    """What a checkpoint must share with this run to be resumed by it: the trajectory's settings and the data."""
    digest = hashlib.sha256(json.dumps({f: getattr(cfg, f) for f in RESUME_FIELDS}, sort_keys=True).encode())
    digest.update(json.dumps(examples).encode())
    return digest.hexdigest()


def unwrap(model: Any) -> Any:
    """The PEFT model inside a DDP wrapper (or the model itself)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def write_state(
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
    unwrap(model).save_pretrained(folder / "adapter")
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    write_json(folder / "state.json", {"step": len(log), "fingerprint": run_fingerprint, "log": log})


def _tensors(path: Path) -> Any:
    """A torch file's tensors and plain data, never unpickling anything else."""
    import torch

    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        raise UnsafeCheckpoint(
            f"{path}: holds pickled Python objects besides tensors and plain data, which could run code when read; "
            "it was not loaded. Checkpoints this step writes never do: delete that checkpoint folder (or point "
            f"--checkpoint-dir at a new location) and find out who wrote it. torch: {_why(e)}"
        ) from e


def _why(error: Exception) -> str:
    """torch's one line naming what it refused (its message goes on for a page of advice to load it anyway)."""
    lines = [line.strip() for line in str(error).splitlines() if "WeightsUnpickler error" in line]
    return (lines or str(error).splitlines() or [type(error).__name__])[0].split(". Please")[0]


def load_state(folder: Path, model: Any, optimizer: Any, scheduler: Any, run_fingerprint: str, rank: int) -> list[dict]:
    """Resume from checkpoint `folder`: every file is read (safely) first, then applied; returns the step log."""
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
    rng_file = folder / f"rng-{rank}.pt"
    rng = _tensors(rng_file if rng_file.is_file() else folder / "rng-0.pt")
    optimizer_state = _tensors(folder / "optimizer.pt")
    scheduler_state = _tensors(folder / "scheduler.pt")
    set_peft_model_state_dict(unwrap(model), load_file(folder / "adapter/adapter_model.safetensors"))
    optimizer.load_state_dict(optimizer_state)
    scheduler.load_state_dict(scheduler_state)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state["log"]


class DirCheckpoints:
    """Checkpoints as sealed `step-NNNNNNNN/` folders (steps/core/sealed.py) under a local folder or an s3:// prefix.

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

    def save(self, step: int, fill: Any) -> None:
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

    def save(self, step: int, fill: Any) -> None:
        import ray.train

        with tempfile.TemporaryDirectory(prefix="checkpoint-") as tmp:
            fill(Path(tmp))
            ray.train.report(
                {"step": step},
                checkpoint=ray.train.Checkpoint.from_directory(tmp),
                checkpoint_dir_name=f"{CHECKPOINT_PREFIX}{step:08d}",
            )
