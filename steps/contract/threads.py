"""How many threads a step computes with: the container's CPUs, not the node's (torch, llama.cpp and llama.cpp's
server alike). Part of the serving contract: the registered model opens llama.cpp with `llama_threads` too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

# The container's CPU request, as the Argo templates pass it (the Downward API's `requests.cpu`, divisor 1: rounded up
# to whole CPUs by the kubelet). A pod without a CPU limit runs on every core of its node, so neither the affinity nor
# a cgroup quota says how many of them it was scheduled for.
CPUS_ENV = "DISTILLERY_CPUS"


CGROUP = Path("/sys/fs/cgroup")


def _cgroup_quota(root: Path) -> float | None:
    """CPUs the cgroup quota allows (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`); None: unlimited."""
    v2 = root / "cpu.max"
    if v2.is_file():
        quota, _, period = v2.read_text().strip().partition(" ")
        return None if quota == "max" else int(quota) / int(period or 100000)
    for v1 in (root / "cpu", root / "cpu,cpuacct"):
        if (v1 / "cpu.cfs_quota_us").is_file():
            quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
            return None if quota_us < 0 else quota_us / int((v1 / "cpu.cfs_period_us").read_text())
    return None


def cpu_threads(requested: int = 0, cgroup: Path = CGROUP) -> int:
    """The threads a step computes with (torch, llama.cpp): `requested` when above 0, else the fewest of the CPUs this
    process may run on (its affinity), its cgroup's CPU quota (rounded up) and the container's CPU request
    (`$DISTILLERY_CPUS`). `os.cpu_count()` counts the node's cores: on a 64-core node a pod that asked for 4 would run
    64 llama.cpp threads against its neighbours, and llama.cpp's spinning threads slow down badly when they outnumber
    the cores they get."""
    if requested > 0:
        return requested
    counts = [len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1]
    quota = _cgroup_quota(cgroup)
    if quota is not None:
        counts.append(max(1, math.ceil(quota)))
    text = os.environ.get(CPUS_ENV, "").strip()
    if text:
        if not text.isdigit():
            raise ValueError(f"${CPUS_ENV}={text!r}: expected a whole number of CPUs (the pod's CPU request)")
        if int(text) > 0:  # 0: the container has no CPU request
            counts.append(int(text))
    return min(counts)


def threads_problems(threads: int) -> list[str]:
    """--threads refused as every step's config_problems says it (0: `cpu_threads` decides)."""
    return [f"--threads {threads}: use 0 (the CPUs this container may use) or more"] if threads < 0 else []


def llama_threads(requested: int = 0) -> dict[str, int]:
    """`llama_cpp.Llama` thread arguments: `cpu_threads(requested)` for generation and for prompt batches alike. Left
    unset, llama-cpp-python prefills with `multiprocessing.cpu_count()` threads, the node's cores, whatever n_threads
    says (and prefill is most of the work: evaluate's prompts outnumber its answers five to one)."""
    n = cpu_threads(requested)
    return {"n_threads": n, "n_threads_batch": n}


def llama_server_threads(requested: int = 0) -> list[str]:
    """The same as `python -m llama_cpp.server` flags (its own defaults are the node's cores, and half of them)."""
    return [a for name, n in llama_threads(requested).items() for a in (f"--{name}", str(n))]
