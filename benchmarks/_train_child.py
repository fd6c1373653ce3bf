"""What the benchmarks' training children share: `benchmarks.cpu_rows` (train-cpu rows, the way pinned) and
`benchmarks.memory_calibration` (Ray-worker rows, the way `budget.choose` picks) each run train in a child process of
its own, and both children read their memory, build their rows and call train here, so the two measure the same way.

Light at import (no torch): a child imports it before torch to record what the imports themselves hold.
"""

from __future__ import annotations

import tempfile
from typing import Any


def status_gib(key: str) -> float:
    """`key` of /proc/self/status (VmHWM, VmRSS, ...) in GiB: this process's own figures (ru_maxrss would be the
    largest of any process this one was forked from)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 2**20


def summary_rows(seq: int, count: int, vocab: int) -> list[dict[str, list[int]]]:
    """`count` rows of exactly `seq` token ids below `vocab` whose last sizing.TAIL_TOKENS are the summary (the
    labels): the plan's worst case, the same ids every run."""
    from steps.sizing import TAIL_TOKENS

    tail = min(TAIL_TOKENS, seq - 1)
    rows = [[5 + (j * 7919 + t * 31) % (vocab - 5) for t in range(seq)] for j in range(count)]
    return [{"input_ids": r, "labels": [-100] * (seq - tail) + r[-tail:]} for r in rows]


def train_config(base: str, tmp: str, *, batch: int, seq: int, precision: str, threads: int, gc: str) -> Any:
    """train's config for a benchmark row: no checkpoints written, every step logged."""
    from steps.train import TrainConfig

    return TrainConfig(dataset=tmp, out=tmp, base_model=base, batch_size=batch, max_seq_len=seq, precision=precision,
                       checkpoint_every=0, log_every=1, threads=threads, gradient_checkpointing=gc)  # fmt: skip


def train_rows(model: Any, cfg: Any, examples: list[dict], micro: Any, precision: Any) -> list[dict]:
    """train_loop over `examples`, one micro-batch a step (cfg.batch_size set to it), checkpointing switched on in the
    model first when `micro` asks for it; its log."""
    from steps.train import DirCheckpoints, train_loop
    from steps.train.model import use_gradient_checkpointing

    if micro.checkpointing:
        use_gradient_checkpointing(model)
    cfg.batch_size = micro.examples
    with tempfile.TemporaryDirectory() as tmp:
        return train_loop(model, examples, cfg, 0, DirCheckpoints(tmp + "/checkpoints"), micro=micro,
                          precision=precision)  # fmt: skip
