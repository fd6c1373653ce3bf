"""The KD sidecar: what `kd-targets` (steps/kd_targets.py) writes and `train` reads for logit-level distillation, in
one place for both — the file names, the reader, and the error either side raises.

`topk.npz` (compressed: `row_ids`; `offsets` into the flat arrays; per summary token the student's label id (int32),
the teacher's top-k ids (int32) and log-probabilities (float16)) and `kd.json` (teacher GGUF and sha256, the student's
tokenizer identity, k, the rows it covers; or, written at `--kd-weight 0`, only that nothing was scored).
"""

from __future__ import annotations

from typing import Any

TOPK_FILE = "topk.npz"
META_FILE = "kd.json"
SCORE_COMMAND = "python -m steps.kd_targets"  # how a missing or stale sidecar is made


class KDError(ValueError):
    """Logit-level distillation cannot run as asked (tokenizers differ, targets missing or misaligned)."""


def load_targets(location: str, rows: list[dict]) -> dict[str, Any]:
    """The sidecar at `location` (a folder or s3:// URI) for `rows`, per row in their order: {"meta", "rows": [(label
    ids, top-k ids, log-probabilities)]}; KDError when it lacks a row."""
    import numpy as np

    from steps.core.io import local_folder, read_json

    with local_folder(location) as folder:
        if not (folder / TOPK_FILE).is_file():
            off = (folder / META_FILE).is_file() and read_json(folder / META_FILE).get("scored") is False
            why = " (written with --kd-weight 0: KD was off)" if off else ""
            raise KDError(
                f"--kd-targets {location}: no {TOPK_FILE}{why}; score it with {SCORE_COMMAND} --kd-weight <the "
                "same weight as train's>"
            )
        meta = read_json(folder / META_FILE)
        with np.load(folder / TOPK_FILE) as data:
            arrays = {k: data[k] for k in data.files}
    where = {str(r): i for i, r in enumerate(arrays["row_ids"])}
    missing = [r["id"] for r in rows if r["id"] not in where]
    if missing:
        raise KDError(
            f"--kd-targets {location} has no teacher log-probabilities for {len(missing)} training row(s) "
            f"(first: {', '.join(missing[:3])}); score this dataset: {SCORE_COMMAND} --dataset …"
        )
    off = arrays["offsets"]
    per_row = []
    for r in rows:
        a, b = off[where[r["id"]]], off[where[r["id"]] + 1]
        per_row.append((arrays["labels"][a:b], arrays["ids"][a:b], arrays["logprobs"][a:b]))
    return {"meta": meta, "rows": per_row}
