"""train: distil the teacher's summaries into a LoRA adapter on the base model (transformers + peft).

    python -m steps.train --dataset out/dataset --base-model .cache/models/SmolLM2-135M-Instruct --out out/adapter
    python -m steps.train --train-backend ray --ray-workers 2 --threads 1 --dataset out/dataset --out out/adapter
    python -m steps.train --dataset out/dataset --out out/adapter --kd-targets out/kd --kd-weight 0.5   # + logit KD

The student sees each training document in the serving chat template (`steps.contract.prompting`) and learns the
teacher's
summary; the loss covers only the summary tokens (and the end-of-turn token, so the model learns to stop). Seeded,
progress printed every `--log-every` steps. Produces in `--out` (a folder or an s3:// URI): the PEFT adapter
(`adapter_config.json`, `adapter_model.safetensors`), `loss.csv`, `loss.png`, `training_summary.json`, `result.json`.

One loop (`train_loop`), three launchers:
- `cpu`: in this process; `--precision auto` (the default) loads the frozen base in bf16 and runs the steps under bf16
  autocast where the CPU has native bf16 (AMX or AVX-512-BF16, detected at run time), float32 elsewhere (`precision`)
  unless float32 weights do not fit the process's memory (then bf16, emulated: slower, but it runs);
- `gpu`: one CUDA device, bf16 autocast; `--qlora true` loads the base in 4-bit NF4 (bitsandbytes) and trains the
  LoRA weights on top (convert-gguf later merges into a full-precision reload of the base, never into 4-bit weights);
- `ray`: Ray Train `TorchTrainer`, `--ray-workers` CPU workers x `--threads` threads each, DDP over Gloo,
  precision as `cpu` (each worker detects its own node's CPU); it joins `--ray-address` (`auto` inside a KubeRay
  RayJob) or starts a local Ray cluster.

Checkpoints (adapter, optimiser, scheduler, RNG, step log; the data position is the step, since the batch order is a
function of the seed) are written every `--checkpoint-every` steps, atomically, to `--checkpoint-dir` (a folder or an
s3:// URI); SIGTERM, the spot notice, flushes one at once and exits 143. Rerunning the same command resumes from the
latest complete checkpoint. With ray they go through Ray Train's checkpoint API to its storage path, and a dead worker
restarts the worker group from the latest one (`--max-failures`). Local checkpoints are deleted once `--out` is
written; under an s3:// prefix (a cluster run's own) they stay, so a pod lost before Argo uploaded its output resumes
at the end instead of from step 0 (the bucket's lifecycle rule expires them).

Each process runs its share of a global batch in micro-batches (`--micro-batch`, by default the largest its memory
holds: `budget`, from the container's memory limit and `steps/sizing/`), accumulating gradients, with gradient
checkpointing where one example does not fit without it (`--gradient-checkpointing`); `--packing` puts several
examples in each row. Any split trains the same adapter (tests/test_train.py).

The package, by what each file holds: `config` (the flags, the result, the checks on the settings), `data` (batching,
the batch order; the examples' encoding is steps/core/examples.py, shared with kd-targets), `loop` (`train_loop`,
SIGTERM), `checkpoints` (what one holds, read without unpickling; the folder and Ray stores), `model` (base + LoRA),
`precision` (bf16 or float32 from the CPU's features), `budget` (the micro-batch and precision a process's memory
holds), `gpu` (MFU), `launchers` (in process, Ray Train), `storage` (s3:// out), `plots` (the loss curve), `kd` (the
optional logit-level distillation's KL term, on the sidecar the kd-targets stage writes); this file is the step (`run`,
`main`), `__main__` its command line.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from steps.core.base_model import base_model_problems
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.dataset import load_split
from steps.core.examples import encode_example, encode_rows, length_report
from steps.core.io import is_uri, local_folder, read_json, write_json
from steps.core.kd_sidecar import load_targets
from steps.core.switches import KD_ON
from steps.train.checkpoints import DirCheckpoints, RayCheckpoints, UnsafeCheckpoint, fingerprint
from steps.train.config import BACKENDS, TrainConfig, TrainResult, config_problems
from steps.train.data import collate, global_batches, schedule
from steps.train.gpu import mfu
from steps.train.launchers import TrainingFailed, train_here, train_ray
from steps.train.loop import Preempted, train_loop
from steps.train.model import build_model, pad_id_of
from steps.train.plots import save_curve
from steps.train.storage import publish

__all__ = [
    "BACKENDS", "DirCheckpoints", "Preempted", "RayCheckpoints", "TrainConfig", "TrainResult", "TrainingFailed",
    "UnsafeCheckpoint", "build_model", "collate", "config_problems", "encode_example", "encode_rows", "fingerprint",
    "global_batches", "length_report", "main", "pad_id_of", "run", "schedule", "train_loop",
]  # fmt: skip


def _problems(cfg: TrainConfig) -> list[str]:
    import torch

    problems = config_problems(cfg) + base_model_problems(cfg.base_model)
    if cfg.train_backend == "gpu" and not torch.cuda.is_available():
        problems.append("--train-backend gpu was asked for but CUDA is not available; use --train-backend cpu or ray")
    return problems


def _fit(cfg: TrainConfig, rows: list[dict]) -> dict[str, int]:
    """How the rows fit --max-seq-len (examples.length_report), said on stderr when documents will be cut."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    fit = length_report(tokenizer, rows, cfg.max_seq_len)
    if fit["examples_cut"]:
        print(
            f"train: {fit['examples_cut']} of {fit['examples']} training examples are longer than --max-seq-len "
            f"{cfg.max_seq_len} (the longest: {fit['longest_example_tokens']} tokens); their documents are cut in the "
            "middle, so the model learns summaries of text it did not see. To train on whole documents raise "
            f"--max-seq-len to {fit['longest_example_tokens']} (preflight sizes the memory for it).",
            file=sys.stderr,
            flush=True,
        )
    return fit


@timed
def run(cfg: TrainConfig) -> TrainResult:
    refuse(_problems(cfg), "train")
    checkpoint_dir = cfg.checkpoint_dir or f"{cfg.out.rstrip('/')}.checkpoints"
    with local_folder(cfg.dataset) as dataset:
        rows = load_split(dataset, "train")
        lineage = read_json(dataset / "lineage.json")
    fit = _fit(cfg, rows)
    kd_targets = load_targets(cfg.kd_targets, rows) if KD_ON.holds(cfg.kd_weight) else None
    with tempfile.TemporaryDirectory(prefix="train-") as tmp:
        final = Path(tmp) / "final"
        if cfg.train_backend == "ray":
            device, peak, parameters = train_ray(cfg, rows, checkpoint_dir, final, kd_targets), 0.0, 0
            store = None
        else:
            store = DirCheckpoints(checkpoint_dir)
            device, peak, parameters = train_here(cfg, rows, store, kd_targets)
            with store.latest() as folder:
                shutil.copytree(folder, final)
        state = read_json(final / "state.json")
        log = state["log"]
        resumed = max((r["step"] - 1 for r in log if r.get("resumed")), default=0)
        tokens_per_second = round(log[-1]["tokens"] / log[-1]["seconds"], 1)
        result = TrainResult(
            steps=len(log),
            final_loss=round(log[-1]["loss"], 5),
            train_seconds=round(log[-1]["seconds"], 2),
            tokens_per_second=tokens_per_second,
            device=device,
            resumed_from_step=resumed,
            peak_gpu_memory_gib=peak,
            precision=",".join(dict.fromkeys(r.get("precision", "fp32") for r in log)),
            mfu=round(mfu(tokens_per_second, parameters, device), 4) if peak else 0.0,
            **fit,
        )
        out = Path(tmp) / "out"
        shutil.copytree(final / "adapter", out)
        save_curve(log, out)
        write_json(
            out / "training_summary.json",
            {"config": {k: str(v) for k, v in asdict(cfg).items()}, "result": asdict(result), "dataset": lineage},
        )
        write_result(out, result)
        publish(out, cfg.out)
    # The adapter is out: locally, a rerun of this command is a new run, not a resume of this one. Checkpoints under an
    # s3:// prefix (the cluster's, one per workflow run) stay: this pod's output is uploaded by Argo only after it
    # exits, so a pod lost in between is retried and must resume at the end, not from step 0; the bucket's lifecycle
    # rule removes them (infra/s3/).
    if store is not None and not is_uri(checkpoint_dir):
        store.clear()
    return result


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
