"""preflight's output parameters: their names, which workflows/distill.py reads (`Plan.outputs` gives their values)."""

from __future__ import annotations

from steps.sizing.cluster import RAY_NODE_GROUPS

# preflight's output parameters (result fields, '_' -> '-'), read by workflows/distill.py:
#   <step>-pod-patch            for step in POD_PATCH_STEPS: a JSON podSpecPatch (requests/limits of memory,
#                               ephemeral-storage; for train-gpu also GPU-memory node affinity)
#   ray-<group>-workers-per-pod for each RAY_NODE_GROUPS: training workers one replica of the group holds (0: none)
#   ray-<group>-memory          for each RAY_NODE_GROUPS: the pod's memory request/limit (a quantity, <= the group's)
#   ray-<group>-cpus            for each RAY_NODE_GROUPS: the pod's CPU request/limit and Ray's num-cpus: its workers x
#                               ray-threads (every requested CPU computes)
#   ray-<group>-disk            for each RAY_NODE_GROUPS: the pod's ephemeral storage (a quantity)
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


def pod_patch_output(step: str) -> str:
    return f"{step}-pod-patch"


def ray_workers_output(group: str) -> str:
    return f"ray-{group}-workers-per-pod"


def ray_memory_output(group: str) -> str:
    return f"ray-{group}-memory"


def ray_disk_output(group: str) -> str:
    return f"ray-{group}-disk"


def ray_cpus_output(group: str) -> str:
    return f"ray-{group}-cpus"


RAY_THREADS_OUTPUT = "ray-threads"


def preflight_exports() -> tuple[str, ...]:
    """Every sizing output parameter preflight writes."""
    return (
        *(pod_patch_output(s) for s in POD_PATCH_STEPS),
        *(ray_workers_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_memory_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_disk_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_cpus_output(g.name) for g in RAY_NODE_GROUPS),
        RAY_THREADS_OUTPUT,
    )
