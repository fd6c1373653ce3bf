"""The training data as the loop takes it: left-padded or packed batches of the encoded examples
(steps.core.examples), and the seeded batch order that makes the step number a run's data position."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

from steps.train.config import TrainConfig


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


def micro_batches(rows: list[int], calls: int, examples: list[dict[str, list[int]]]) -> list[list[int]]:
    """`rows` (a rank's share of a global batch) in `calls` micro-batches of sizes differing by at most one, shortest
    rows first so each micro-batch pads little; a share smaller than `calls` leaves the last ones empty."""
    ordered = sorted(rows, key=lambda i: (len(examples[i]["input_ids"]), i))
    size, extra = divmod(len(ordered), calls)
    parts, start = [], 0
    for call in range(calls):
        end = start + size + (1 if call < extra else 0)
        parts.append(ordered[start:end])
        start = end
    return parts


def pack(batch: list[dict[str, list[int]]], width: int, pad_id: int) -> dict[str, Any]:
    """Several examples per row, each attending only to itself: rows of at most `width` tokens filled first-fit in
    the given order, `position_ids` restarting at 0 for each example and no attention mask (transformers then builds a
    block-diagonal causal mask from the restarts: SDPA and eager take it as a mask, FlashAttention-2 as varlen
    lengths). The tail of each row is padding, a segment of its own whose labels are -100.

    `keep` is the 1D tensor of positions whose logits the loss needs (one before each label, shared by the rows);
    `labels` holds, at each of those, the next token's label; `order` is the examples' index in `batch`, in the order
    their summary tokens appear (row by row), for the KD term's alignment check."""
    import torch

    rows: list[list[int]] = []
    used: list[int] = []
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        if n > width:
            raise ValueError(f"an example of {n} tokens does not fit a packed row of {width}")
        row = next((r for r, u in enumerate(used) if u + n <= width), None)
        if row is None:
            rows.append([])
            used.append(0)
            row = len(rows) - 1
        rows[row].append(i)
        used[row] += n
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for r, members in enumerate(rows):
        start = 0
        for i in members:
            n = len(batch[i]["input_ids"])
            ids[r, start : start + n] = torch.tensor(batch[i]["input_ids"])
            labels[r, start : start + n] = torch.tensor(batch[i]["labels"])
            positions[r, start : start + n] = torch.arange(n)
            start += n
        positions[r, start:] = torch.arange(width - start)  # the padding: a segment of its own
    wanted = (labels[:, 1:] != -100).any(dim=0).nonzero().flatten()
    return {
        "input_ids": ids,
        "position_ids": positions,
        "keep": wanted,
        "labels": labels[:, wanted + 1],
        "order": [i for members in rows for i in members],
        "tokens": sum(used),
    }
