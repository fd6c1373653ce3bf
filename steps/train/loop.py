"""The one training loop every launcher runs (`train_loop`), and how SIGTERM — the spot notice — stops it after a
step with a checkpoint flushed (`stop_on_sigterm`, `Preempted`)."""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from steps.sizing import Micro
from steps.train.checkpoints import fingerprint, load_state, write_state
from steps.train.config import TrainConfig
from steps.train.data import collate, global_batches, micro_batches, pack, schedule
from steps.train.precision import Precision, detect


class Preempted(Exception):
    """Training stopped on SIGTERM after flushing a checkpoint; the same command resumes from it."""


# The SIGTERM that Kubernetes sends a pod before a spot reclaim: set by the handler `stop_on_sigterm` installs, read
# by the loop after each step, which then flushes a checkpoint at once and stops.
_stop_signal: int | None = None


def _on_sigterm(signum: int, frame: Any) -> None:
    global _stop_signal
    _stop_signal = signum
    print("train: SIGTERM received: checkpointing after this step, then stopping", file=sys.stderr, flush=True)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM makes `train_loop` checkpoint after the current step and raise `Preempted`."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def train_loop(
    model: Any,
    examples: list[dict[str, list[int]]],
    cfg: TrainConfig,
    pad_id: int,
    checkpoints: Any,
    *,
    rank: int = 0,
    world_size: int = 1,
    kd: Any = None,
    micro: Micro | None = None,
    precision: Precision | None = None,
) -> list[dict]:
    """Train `model` (a PEFT model on its device, DDP-wrapped when `world_size` > 1) in place; returns the step log.

    Every launcher runs this loop. Each optimiser step takes one global batch; rank r trains on its r-th share. The
    loss is the sum of token losses over the *global* number of summary tokens, scaled by `world_size` because DDP
    averages gradients: any number of workers computes the same step as one process would. Logits are computed only
    for the summary tail (left padding + `logits_to_keep`), not for every prompt position.

    Each rank runs its share in micro-batches of `micro.examples` (default: the whole share at once), rows of similar
    length together, accumulating gradients: every micro-batch's summed token loss is divided by the global batch's
    summary tokens, so any split computes the same step. Every rank runs the same number of forward/backward calls per
    step (the most any rank needs, agreed at start; a rank with fewer rows runs empty ones with weight 0), and DDP
    synchronises gradients on the last call only (`no_sync`), so ranks with different micro-batches (pods of
    different memory) neither hang nor pay an all-reduce per call.

    `checkpoints` is a `DirCheckpoints` or `RayCheckpoints`: the loop resumes from its latest checkpoint, saves one
    every `cfg.checkpoint_every` steps and at the end, and flushes one at once when SIGTERM arrived. `kd` (a
    `kd.KDLoss`, with --kd-weight > 0) mixes the KL to the teacher's top-k into each batch's summed loss.
    """
    import torch

    device = next(model.parameters()).device
    precision = precision or detect(cfg.precision, device.type)
    if rank == 0:
        print(f"train: precision {precision.name} ({precision.reason})", flush=True)
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
            log = load_state(found, model, optimizer, scheduler, run_fingerprint, rank)
            if rank == 0:
                print(f"resuming at step {len(log)}/{total_steps} from checkpoint {found.name}", flush=True)
    start_step = len(log)
    batches = global_batches(examples, cfg)
    for _ in range(start_step):  # the data position: the batches the checkpointed steps already consumed
        next(batches)

    def save(step: int) -> None:
        checkpoints.save(
            step,
            lambda folder: write_state(folder, model, optimizer, scheduler, log, run_fingerprint, rank),
        )

    model.train()
    seconds_before = log[-1]["seconds"] if log else 0.0
    tokens = tokens_before = log[-1]["tokens"] if log else 0
    started = time.perf_counter()
    share = math.ceil(cfg.batch_size / world_size)
    calls = math.ceil(share / (micro.examples if micro else share))
    if world_size > 1:  # the most calls any rank needs: ranks sized for different pods split their shares differently
        agreed = torch.tensor([calls])
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
        calls = int(agreed[0])
    for step in range(start_step, total_steps):
        idx = next(batches)
        mine = idx[rank::world_size]
        summary_tokens = sum(sum(t != -100 for t in examples[i]["labels"]) for i in idx)
        loss_sum = real_tokens = 0.0
        for call, part in enumerate(micro_batches(mine, calls, examples)):
            # An empty call (a short last batch) still runs (DDP needs every rank's backward) on one row, weight 0.
            chosen = part or idx[:1]
            weight = 1.0 if part else 0.0
            last = call == calls - 1
            sync = nullcontext() if last or world_size == 1 or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                token_loss, tokens_in = _forward_backward(
                    model, examples, chosen, pad_id, device, precision.autocast, kd,
                    weight * world_size / summary_tokens, cfg.max_seq_len if cfg.packing else 0,
                )  # fmt: skip
            loss_sum += token_loss * weight
            real_tokens += tokens_in * weight
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        lr = scheduler.get_last_lr()[0]  # the rate this step used (the schedule's next value comes after .step())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        figures = torch.tensor([loss_sum / summary_tokens, real_tokens])
        if world_size > 1:
            torch.distributed.all_reduce(figures)
        tokens += int(figures[1])
        elapsed = seconds_before + time.perf_counter() - started
        log.append({"step": step + 1, "loss": float(figures[0]), "lr": lr, "seconds": elapsed, "tokens": tokens,
                    "precision": precision.name, **({"resumed": True} if step == start_step > 0 else {})})  # fmt: skip
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


def _forward_backward(
    model: Any,
    examples: list[dict],
    chosen: list[int],
    pad_id: int,
    device: Any,
    autocast: bool,
    kd: Any,
    scale: float,
    packed_width: int = 0,
) -> tuple[float, float]:
    """One forward and backward of the rows `chosen`, the summed token loss times `scale` backpropagated; returns
    (summed token loss, real tokens) of these rows. Logits only where the loss needs them: the summary tail of
    left-padded rows (`logits_to_keep`), or, packed (`packed_width` > 0: data.pack), the positions before labels."""
    import torch
    import torch.nn.functional as F

    if packed_width:
        batch = pack([examples[i] for i in chosen], packed_width, pad_id)
        order, tokens = [chosen[i] for i in batch.pop("order")], float(batch.pop("tokens"))
        keep = batch.pop("keep").to(device)
        labels = batch.pop("labels").to(device)
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(**batch, logits_to_keep=keep, use_cache=False).logits
    else:
        batch = collate([examples[i] for i in chosen], pad_id)
        order = chosen
        cut = batch.pop("keep")
        labels = batch.pop("labels")[:, -cut:].to(device)
        batch = {k: v.to(device) for k, v in batch.items()}
        tokens = float(batch["attention_mask"].sum())
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(**batch, logits_to_keep=cut + 1, use_cache=False).logits[:, :-1]
    token_loss = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    if kd is not None:
        token_loss = kd(token_loss, logits, labels, order)
    (token_loss * scale).backward()
    return token_loss.item(), tokens
