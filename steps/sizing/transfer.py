"""Bytes moved per run: what each step downloads and uploads (the hub, S3), for the README's cost tables."""

from __future__ import annotations

import math
from typing import Any

from steps.sizing.disk import adapter_bytes, checkpoint_bytes, gguf_folder_bytes, hub_download_bytes
from steps.sizing.planning import Plan


def transfer_bytes(
    p: Plan,
    *,
    optimiser_steps: int,
    checkpoint_every: int = 10,
    ray_pods: int = 2,
    dataset_bytes: float = 0.2e6,
    base_cached: bool = False,
    champion: bool = True,
) -> dict[str, dict[str, float]]:
    """What each step downloads and uploads in one run (bytes), by step: {step: {"down": ..., "up": ..., ...}}.

    The hub download happens in every pod that loads the base (train, each Ray pod, convert-gguf); checkpoints go to
    S3 every `checkpoint_every` steps and at the end; convert-gguf uploads its whole folder (F16, the ladder, the base's
    served file) and, on a base-cache miss, the base's served file to the cache; evaluate and register download only
    the served files they read (workflows/deploy.py, `Deploy.gguf_reads`).
    """
    s, k = p.shape, p.knobs
    hub = hub_download_bytes(s)
    folder = gguf_folder_bytes(s, k)
    served = folder["base served"]
    checkpoints = math.ceil(optimiser_steps / checkpoint_every) if checkpoint_every else 1  # and always the last
    adapter = adapter_bytes(s, k)
    pods = ray_pods if k.backend == "ray" else 1
    return {
        "fetch-dataset": {"down": dataset_bytes, "up": dataset_bytes},
        "train": {
            "down": pods * hub + dataset_bytes,
            "up": checkpoints * checkpoint_bytes(s, k) + adapter,
            "hub": pods * hub,
        },
        "convert-gguf": {
            "down": hub + adapter + dataset_bytes + (served if base_cached else 0.0),
            "up": sum(folder.values()) + (0.0 if base_cached else served),
            "hub": hub,
        },
        "evaluate": {"down": 2 * served + (served if champion else 0.0) + dataset_bytes, "up": 1e6},
        "register": {"down": served + adapter + dataset_bytes + 1e6, "up": served + adapter + 1e6},
    }


def transfer_table(p: Plan, **kwargs: Any) -> str:
    """`transfer_bytes(p, **kwargs)` as a Markdown table in GB, with the totals."""
    moved = transfer_bytes(p, **kwargs)
    rows = [f"| {step} | {v['down'] / 1e9:.2f} | {v['up'] / 1e9:.2f} |" for step, v in moved.items()]
    down, up = (sum(v[d] for v in moved.values()) / 1e9 for d in ("down", "up"))
    return "\n".join(
        ["| step | downloads GB | uploads GB |", "|---|---|---|", *rows, f"| total | {down:.2f} | {up:.2f} |"]
    )
