"""Disk (ephemeral storage): what each sized step's pod downloads and writes, and Argo's copies of its output. The
pods preflight does not size ask for a fixed disk beside their CPU and memory (workflows/deploy.py)."""

from __future__ import annotations

from steps.sizing.cluster import GIB
from steps.sizing.memory import gguf_bytes
from steps.sizing.shape import Knobs, Shape

# The Ray head: the driver (tokenizer, the run's dataset) and Ray's session folder; no model, no checkpoints.
RAY_HEAD_DISK_GIB = 4
# Ephemeral storage besides the model files: logs, Python caches, the tokenizer, the dataset, small outputs.
SCRATCH_GIB = 2.0
# Argo's emissary (v4.1.2 cmd/argoexec/commands/emissary.go `saveArtifact`) tars and gzips an output folder that is
# not on a volume into /var/run/argo (an emptyDir); the wait container copies that tarball and, the archive being
# `none`, unpacks it before uploading (workflow/executor/executor.go `stageArchiveFile`): three more copies of the
# output on the pod's ephemeral storage (gzip barely shrinks weights), and minutes of CPU. workflows/distill.py mounts
# an emptyDir at the output path (OUTPUT_VOLUME there), which the wait container mirrors and uploads from directly
# ("Staging from mirrored volume mount ... staging skipped" for archive none): no copy. A test keeps the two agreeing.
ARGO_OUTPUT_COPIES = 0
# A Ray worker pod's own disk: Ray's session folder (logs, spilled objects) besides the base download and checkpoints.
RAY_SESSION_GIB = 2.0


def hub_download_bytes(s: Shape) -> float:
    """The base from the hub, into HF_HOME on the pod (safetensors in the checkpoint's dtype; the tokenizer)."""
    return s.parameters * s.checkpoint_bytes + 50e6


def adapter_bytes(s: Shape, k: Knobs) -> float:
    return 4.0 * s.lora_parameters(k.lora_r) + 1e6  # float32 safetensors, its config, loss.csv/png, summaries


def checkpoint_bytes(s: Shape, k: Knobs) -> float:
    """One training checkpoint: the adapter and AdamW's two moments (float32), scheduler, RNG, step log."""
    return 12.0 * s.lora_parameters(k.lora_r) + 1e6


def gguf_folder_bytes(s: Shape, k: Knobs) -> dict[str, float]:
    """convert-gguf's output folder: the candidate's F16, each rung of the ladder, the base at the served
    quantisation (bounded by the ladder's largest rung), the reports."""
    served = max(gguf_bytes(s, q) for q in k.quantizations)
    return {
        "F16": gguf_bytes(s, "F16"),
        **{q: gguf_bytes(s, q) for q in k.quantizations},
        "base served": served,
        "reports": 1e6,
    }


def _with_staging(inputs: float, run_peak: float, kept: float, output: float) -> float:
    """A pod's disk peak: while the step runs, or after it, when `kept` (its HF cache, inputs, output folder) is still
    on the pod and Argo stages ARGO_OUTPUT_COPIES more copies of the output."""
    return max(inputs + run_peak, kept + ARGO_OUTPUT_COPIES * output) + SCRATCH_GIB * GIB


def train_disk(s: Shape, k: Knobs) -> float:
    """train-gpu / train-cpu: the hub download, checkpoints (written locally, then to S3: one at a time, and one
    downloaded to resume from), the adapter folder."""
    hub = hub_download_bytes(s)
    out = adapter_bytes(s, k)
    return _with_staging(0.0, hub + 2 * checkpoint_bytes(s, k) + out, hub + out, out)


def ray_pod_disk(s: Shape, k: Knobs) -> float:
    """A Ray worker pod: its own hub download (the workers share the pod's HF_HOME), checkpoints on their way to S3,
    Ray's session folder."""
    return hub_download_bytes(s) + 2 * checkpoint_bytes(s, k) + (SCRATCH_GIB + RAY_SESSION_GIB) * GIB


def convert_disk(s: Shape, k: Knobs) -> float:
    """convert-gguf: the hub download; in its work folder (kept until the end) each model saved in float32 for the
    converter and the base's F16 GGUF; the output folder; the base cache's copy of the served base file."""
    hub = hub_download_bytes(s)
    inputs = adapter_bytes(s, k)
    folder = sum(gguf_folder_bytes(s, k).values())
    fp32_checkpoint = 4.0 * s.parameters
    work = 2 * fp32_checkpoint + gguf_bytes(s, "F16")
    cache_copy = gguf_folder_bytes(s, k)["base served"]
    return _with_staging(inputs, hub + work + folder + cache_copy, hub + inputs + folder, folder)


def evaluate_disk(s: Shape, k: Knobs) -> float:
    """evaluate: the served GGUFs of candidate and base (its shards' reads, workflows/deploy.py) and the champion's,
    which it downloads from the registry; its own output is small."""
    served = gguf_folder_bytes(s, k)["base served"]
    return 3 * served + SCRATCH_GIB * GIB


def register_disk(s: Shape, k: Knobs) -> float:
    """register: the candidate's served GGUF, and MLflow's local copy of it for
    log_model, the adapter."""
    served = gguf_folder_bytes(s, k)["base served"]
    return 2 * served + adapter_bytes(s, k) + SCRATCH_GIB * GIB
