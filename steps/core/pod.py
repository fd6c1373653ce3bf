"""What a step's container was given, and what it tells the cluster when it ends.

The memory limit is the cgroup's (v2 `memory.max`, v1 `memory.limit_in_bytes`), the machine's MemTotal where there is
none (a laptop). On a cluster the kubelet mounts a termination-message file (`/dev/termination-log`) into every
container and, however the container ends, puts its contents in the container's status; Argo's controller appends it
to the failed node's message (`main: OOMKilled (exit code 137): <the file>`). A step writes its memory limit there as
it starts, so a step killed for memory names the limit it was killed at in `argo get` — it cannot say so itself — and
replaces the line with its own error when it fails on one.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
GIB = 2**30  # the project's GiB (steps.sizing reads it from here)
# The kubelet's default terminationMessagePath (a file it creates world-writable and bind-mounts; absent off a cluster).
TERMINATION_LOG = Path("/dev/termination-log")
# The kubelet keeps 4,096 bytes of it; Argo's node message should stay one line a person reads.
TERMINATION_CHARS = 1024


def memory_limit(cgroup: Path = CGROUP, meminfo: Path = MEMINFO) -> tuple[int, str]:
    """(bytes this process may use, where that came from): the cgroup's limit, else the machine's MemTotal."""
    total = next(
        int(line.split()[1]) * 1024 for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:")
    )
    for path in (cgroup / "memory.max", cgroup / "memory" / "memory.limit_in_bytes"):
        if path.is_file():
            text = path.read_text().strip()
            if text != "max" and int(text) < total:  # v1 writes a huge number for "no limit"
                return int(text), f"the container's limit ({path})"
    return total, f"the machine's memory ({meminfo} MemTotal)"


def termination_message(text: str, path: Path | None = None) -> bool:
    """Replace the container's termination message (default TERMINATION_LOG) with `text` (one line, cut to
    TERMINATION_CHARS). Only where the kubelet made the file: never creates it. False where there is none or it cannot
    be written."""
    path = path or TERMINATION_LOG
    if not path.is_file() or not os.access(path, os.W_OK):
        return False
    line = " ".join(text.split())
    try:
        path.write_text(line[: TERMINATION_CHARS - 1] + "…" if len(line) > TERMINATION_CHARS else line)
    except OSError:
        return False
    return True


def announce_limits(
    step: str, path: Path | None = None, cgroup: Path | None = None, meminfo: Path | None = None
) -> None:
    """The line a step leaves for the cluster as it starts: its memory limit, read by whoever sees it OOMKilled. Off a
    cluster (no termination-message file) it reads nothing at all."""
    if not (path or TERMINATION_LOG).is_file():
        return
    limit, source = memory_limit(cgroup or CGROUP, meminfo or MEMINFO)
    if source.startswith("the container's"):
        termination_message(f"{step} ran with a memory limit of {limit / GIB:.2f} GiB", path)
