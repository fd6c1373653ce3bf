"""preflight's output parameters: their names, which workflows/distill.py reads (`Plan.outputs` gives their values)."""

from __future__ import annotations

from steps.sizing.cluster import RAY_NODE_GROUPS

# preflight's output parameters (result fields, '_' -> '-'), read by workflows/distill.py:
#   <step>-memory-gib           for step in POD_PATCH_STEPS: the pod's memory request/limit, whole GiB (digits only)
#   <step>-disk-gib             likewise its ephemeral storage and the size limit of its emptyDirs
#   train-gpu-gpu-over-mib      the GPU card's memory must be more than this many MiB (Karpenter's node label)
#   <step>-cpus                 for step in THREADED_STEPS: the run's threads, its pod's CPU request (0: not set, the
#                               template's own request stays)
#                               Numbers only: the sized templates build their podSpecPatch themselves from these
#                               (planning.pod_patch, rendered with Argo's asInt), so preflight's output can change a
#                               number and nothing else of a later step's pod.
#   ray-<group>-workers-per-pod for each RAY_NODE_GROUPS: training workers one replica of the group holds (0: none)
#   ray-<group>-memory-gib      for each RAY_NODE_GROUPS: the pod's memory request/limit in whole GiB (<= the group's)
#   ray-<group>-cpus            for each RAY_NODE_GROUPS: the pod's CPU request/limit and Ray's num-cpus: its workers x
#                               ray-threads (every requested CPU computes)
#   ray-<group>-disk-gib        for each RAY_NODE_GROUPS: the pod's ephemeral storage in whole GiB
#                               (every ray-* output is a whole number: the train-ray task reads each with asInt)
#   ray-threads                 torch threads (and Ray CPUs) of every training worker of the run: one count, so that
#                               no worker paces the others (plan.ray_threads)
POD_PATCH_STEPS = ("train-gpu", "train-cpu", "convert-gguf", "evaluate", "register")
# The sized steps that compute on the CPUs with the run's `threads` (evaluate's patch is its shards' and its gather's):
# with `threads` set, their podSpecPatch requests that many CPUs.
THREADED_STEPS = ("train-cpu", "convert-gguf", "evaluate")
# The pods' emptyDirs (workflows/distill.py: the output folder and the scratch folder at /tmp that holds the hub
# download and every cache; the root filesystem is read-only). Each may take up to the step's whole disk need: the
# pod's ephemeral-storage limit bounds their sum.
SIZED_VOLUMES = ("out", "scratch")


# The numbers a sized step's podSpecPatch is built from: its template's input parameters, by these names.
MEMORY_INPUT, DISK_INPUT = "memory-gib", "disk-gib"
SIZE_INPUTS = (MEMORY_INPUT, DISK_INPUT)
GPU_OVER_INPUT = "gpu-over-mib"  # train-gpu only
GPU_SIZED_STEP = "train-gpu"
CPU_INPUT = "cpus"  # THREADED_STEPS only: the run's threads, the CPUs their pods request (0: the template's request)


def size_inputs(step: str) -> tuple[str, ...]:
    """The input parameters of `step`'s sized templates, each a whole number preflight computes."""
    return (
        SIZE_INPUTS
        + ((CPU_INPUT,) if step in THREADED_STEPS else ())
        + ((GPU_OVER_INPUT,) if step == GPU_SIZED_STEP else ())
    )


def size_output(step: str, name: str) -> str:
    """preflight's output parameter holding `step`'s number `name` (one of size_inputs(step))."""
    return f"{step}-{name}"


def ray_workers_output(group: str) -> str:
    return f"ray-{group}-workers-per-pod"


def ray_memory_output(group: str) -> str:
    return f"ray-{group}-memory-gib"


def ray_disk_output(group: str) -> str:
    return f"ray-{group}-disk-gib"


def ray_cpus_output(group: str) -> str:
    return f"ray-{group}-cpus"


RAY_THREADS_OUTPUT = "ray-threads"


def preflight_exports() -> tuple[str, ...]:
    """Every sizing output parameter preflight writes."""
    return (
        *(size_output(s, n) for s in POD_PATCH_STEPS for n in size_inputs(s)),
        *(ray_workers_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_memory_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_disk_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_cpus_output(g.name) for g in RAY_NODE_GROUPS),
        RAY_THREADS_OUTPUT,
    )
