"""What each step needs from a node for a given base model, and which node groups can hold it.

    python -m steps.preflight --base-model Qwen/Qwen2.5-3B-Instruct --train-backend gpu --max-seq-len 512 ...

Plain data and arithmetic on the base's config (no weights, no torch unless the parameters must be counted):
preflight calls `plan(...)` and exports the results as Argo output parameters that the pods take (podSpecPatch) and the
RayJob's worker groups take (memory, workers per pod); `check(plan)` says, with the fix, what cannot run.

The model of memory, read from the steps' code (each constant of memory.py and disk.py says where and why):
- train, per model replica (one process; a Ray worker is one), running its share of the global batch in micro-batches
  (`micro_options`, `fit_micro`: the largest that fits, 512 tokens at most on CPU; gradient checkpointing only where
  one example does not fit without it): weights by dtype (bf16 on the GPU and where the CPU run computes bf16, float32
  elsewhere; 4-bit NF4 linear layers + float32 rest with QLoRA) + LoRA parameters, gradients and AdamW's two moments
  (float32, 16 bytes each; +4 for DDP's gradient buckets) + the activations one micro-batch keeps for backward, per
  token per layer (or, checkpointed, each layer's input and one layer recomputed) + the loss's logits, for the summary
  tail only (`logits_to_keep`) + the process (Python, torch, ...). `auto` is sized as float32 weights where they fit
  and as bf16 where only bf16 does (`resolve_precision`); inside the pod `steps/train/budget.py` picks the same way
  from the memory limit the pod was given.
- convert-gguf: no model held whole (the merge and the HF side stream the base's tensors): its largest phase —
  llama.cpp checking the F16 GGUF with its context (KV cache, logits of every position), the served file beside a
  batch of HF eval rows, the converter beside the step, or the merge's shard — + the probes' references.
- evaluate: llama.cpp with one served GGUF at a time, its KV cache and logits buffers.
- the Ray pool: one precision for the run's DDP group (`ray_precision`: the weakest default group's) and one thread
  count for every worker (`ray_threads`: the most CPUs busy), each pod holding as many workers as its CPUs and its
  node's allocatable memory (`NodeGroup.memory_gib`: RAM less NODE_RESERVED_GIB) allow and requesting workers x
  threads CPUs.
Time and cost (`forecast`): training's tokens over a throughput measured on one base and scaled by parameters and
threads; preflight prints it and refuses a run forecast past the workflow's deadline.
Disk (ephemeral storage) per pod: the base downloaded from the hub (safetensors in the checkpoint's dtype), what the
step writes (float32 checkpoints for conversion, GGUFs, training checkpoints), its input artifacts, and Argo's copies of
its output folder (see ARGO_OUTPUT_COPIES).

The package, by what each file holds: `cluster` (the CPU node groups, the GPU cards, whole GiB), `seeds`
(the seed list's bases as shapes), `forecast` (training's wall time and cost), `exports`
(preflight's output parameter names), `shape` (the base's shape from its config, the run's `Knobs`), `memory` and
`disk` (each step's terms), `planning` (`plan`, the podSpecPatches and outputs, `check`: what cannot run, and what to
do), `transfer` (bytes moved per run). What the stages, workflows/, benchmarks/ and scripts/ use is re-exported
here (`sizing.plan(...)`, `sizing.RAY_NODE_GROUPS`); the terms behind it, and what only tests read, stay in their
modules (`sizing.memory.gguf_bytes`; tests/test_layout.py holds the list to its users).
"""

from __future__ import annotations

from steps.sizing.cluster import (
    GIB,
    RAY_GPU_GROUP,
    RAY_NODE_GROUPS,
    TRAIN_CPU_CPUS,
    card_sheet,
)
from steps.sizing.disk import (
    RAY_HEAD_DISK_GIB,
)
from steps.sizing.exports import (
    CPU_INPUT,
    DISK_INPUT,
    GPU_OVER_INPUT,
    MEMORY_INPUT,
    POD_PATCH_STEPS,
    RAY_THREADS_OUTPUT,
    SIZED_VOLUMES,
    preflight_exports,
    ray_cpus_output,
    ray_disk_output,
    ray_memory_output,
    ray_workers_output,
    size_inputs,
    size_output,
)
from steps.sizing.forecast import (
    DEADLINE_S,
    check_forecast,
    plan_forecast,
    train_tokens,
)
from steps.sizing.memory import (
    CPU_MICRO_TOKENS,
    PROCESS_GIB,
    RAY_POD_GIB,
    TAIL_TOKENS,
    convert_memory,
    device_ways,
    fit_micro,
    micro_options,
    ray_worker_gib,
    total_gib,
    train_memory,
)
from steps.sizing.planning import (
    Plan,
    check,
    plan,
    plan_for,
    pod_patch,
    ray_group_plan,
    ray_notes,
    ray_threads,
)
from steps.sizing.shape import (
    CHECKPOINTING,
    PRECISIONS,
    Knobs,
    Micro,
    Shape,
    count_parameters,
    knob_problems,
    shape_of,
)
from steps.sizing.transfer import (
    transfer_table,
)

__all__ = [
    "CHECKPOINTING",
    "CPU_INPUT",
    "CPU_MICRO_TOKENS",
    "DEADLINE_S",
    "DISK_INPUT",
    "GIB",
    "GPU_OVER_INPUT",
    "MEMORY_INPUT",
    "POD_PATCH_STEPS",
    "PRECISIONS",
    "PROCESS_GIB",
    "RAY_GPU_GROUP",
    "RAY_HEAD_DISK_GIB",
    "RAY_NODE_GROUPS",
    "RAY_POD_GIB",
    "RAY_THREADS_OUTPUT",
    "SIZED_VOLUMES",
    "TAIL_TOKENS",
    "TRAIN_CPU_CPUS",
    "Knobs",
    "Micro",
    "Plan",
    "Shape",
    "card_sheet",
    "check",
    "check_forecast",
    "convert_memory",
    "count_parameters",
    "device_ways",
    "fit_micro",
    "knob_problems",
    "micro_options",
    "plan",
    "plan_for",
    "plan_forecast",
    "pod_patch",
    "preflight_exports",
    "ray_cpus_output",
    "ray_disk_output",
    "ray_group_plan",
    "ray_memory_output",
    "ray_notes",
    "ray_threads",
    "ray_worker_gib",
    "ray_workers_output",
    "shape_of",
    "size_inputs",
    "size_output",
    "total_gib",
    "train_memory",
    "train_tokens",
    "transfer_table",
]
