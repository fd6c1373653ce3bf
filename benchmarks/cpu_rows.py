"""Benchmark: CPU training peaks and seconds per step on a grid of rows, a re-fit of the CPU constants on some rows
and a check on the others, and one row inside a memory-limited cgroup at its planned limit.

    python -m benchmarks.cpu_rows --out DIR                          # 1B/3B x fp32/bf16 x checkpointing x micro 1/2
    python -m benchmarks.cpu_rows --out DIR --shapes small --threads 1 --no-cgroup      # the same, tiny (~3 min)
    python -m benchmarks.cpu_rows --out DIR --only base=Llama-3.2-3B,precision=bf16       # some of the grid's rows
    python -m benchmarks.cpu_rows --refit DIR/rows.json              # fit on the 1B rows, check on the 3B rows
    python -m benchmarks.cpu_rows --refit DIR/rows.json --fit-on micro=1                # another split

A row is one train-cpu process as `python -m steps.train --train-backend cpu` runs it: a random-initialised base of
Llama-3.2-1B's or -3B's whole shape (steps/sizing/seeds.py's configs, the dimensions of tests.tiny.REAL_SHAPES; saved
once as bf16 safetensors as the hub ships them, built on the GPU where there is one), loaded by
`steps.train.build_model` in the row's precision, the micro-batch and gradient checkpointing pinned, `train_loop` for
`--steps` optimiser steps of one micro-batch each on rows of exactly --max-seq-len tokens whose last
`sizing.TAIL_TOKENS` are the summary (the plan's worst case), with `--threads` torch threads. Each row is its own
process (VmHWM from /proc/self/status is that process's high-water mark, the mapped bf16 checkpoint's resident pages
included); rows run side by side, as many as the CPUs (÷ --threads) and the memory (each row's plan) allow, longest
first, and every row still running at --time-limit is stopped and kept as what it reached. Each optimiser step
writes the process's VmHWM, VmRSS and major faults as it ends, so a stopped row says how far it got.

The cgroup row (--cgroup-row, default the 3B bf16 + checkpointing row of issue 38) runs again in a cgroup of its own
(v2 or v1, found from /proc/self/cgroup, never assumed) whose memory limit is the plan's figure for it (`planned`)
and the whole GiB a pod of that plan is given (`pod`), without swap. The process first copies the base into its own
folder, as a pod downloads it, so the checkpoint's page cache is charged to its cgroup. Before that a probe process
touches twice a 256 MiB limit: a limit the kernel does not enforce (gVisor's cgroupfs takes the number and ignores it)
is reported as such, not as "fine". Outcome: killed (the kernel's OOM killer), thrashing (over THRASH_MAJFLT major
faults a step, or limit hits with steps over THRASH_SLOWDOWN times those of a row that hit no limit under the same
load: `verdict`) or fine, with seconds per step, limit hits and major faults.

Written to --out: rows.json (the machine, the settings, every row with its plan, the cgroup rows, the probes) and
rows.csv; a table of measured peak vs the plan is printed. `--refit` re-fits CPU_RUNTIME_GIB, CPU_ACTIVATION_FACTOR
and CPU_CHECKPOINT_LAYERS (steps/sizing/memory.py) on the fit rows (the smallest worst over-prediction with every fit
row at or above its peak and the plan growing per example at least as the peaks do) and prints every check row's
plan / peak with the re-fitted constants and with today's; the target is each check row within [1.0, 1.15]. The
constants in force came from `--refit` on benchmarks/results/2026-12-04-xeon16-h200/'s two rows.json files.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import functools
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.15
# The activation factors the re-fit tries (glibc's high-water mark over what autograd saves: 1.37-1.79 measured).
FACTORS = tuple(f / 100 for f in range(50, 401))
# The checkpointing layers it tries (CPU_CHECKPOINT_LAYERS: a checkpointed step's layers' worth of activations).
CHECKPOINT_LAYERS = tuple(n / 10 for n in range(10, 101))
GIB = 2**30
# Each base: a seed base's config (steps/sizing/seeds.py) with overrides; `small` keeps the code path and shrinks
# every dimension so the whole grid runs on 2 cores in a few minutes.
REAL_BASES: dict[str, tuple[str, dict]] = {"Llama-3.2-1B": ("Llama-3.2-1B", {}), "Llama-3.2-3B": ("Llama-3.2-3B", {})}
SMALL_BASES: dict[str, tuple[str, dict]] = {
    "tiny-a": ("Llama-3.2-1B", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=4096)),
    "tiny-b": ("Llama-3.2-1B", dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=4096)),
}  # fmt: skip
SHAPES = {"real": (REAL_BASES, 512, "Llama-3.2-3B:bf16:on:1"), "small": (SMALL_BASES, 128, "tiny-b:bf16:on:1")}
# A cgroup row is thrashing when it faults this often a step, or hits its limit and its steps take this many times
# those of a row that hit none (`verdict`).
THRASH_SLOWDOWN = 1.5
THRASH_MAJFLT = 20_000
PROBE_LIMIT = 256 * 2**20


@dataclass
class Row:
    """One process of the grid: what it runs, then what it measured (filled in by `run_rows`)."""

    base: str
    config: tuple[str, dict]  # seed base and overrides: the shape the plan is computed on
    precision: str
    checkpointing: bool
    micro: int
    seq: int
    threads: int
    steps: int
    cgroup_limit: str = ""  # "", "planned" or "pod": run in a memory-limited cgroup
    status: str = "not started"  # ok, stopped (at --time-limit), failed, killed, not started
    result: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        way = f"{self.precision} {'ckpt' if self.checkpointing else 'no-ckpt'} micro {self.micro}"
        return f"{self.base} {way}" + (f" [cgroup {self.cgroup_limit}]" if self.cgroup_limit else "")


# --- The plan --------------------------------------------------------------------------------------------------------


def plan_of(config: tuple[str, dict], precision: str, checkpointing: bool, micro: int, seq: int) -> dict:
    """What steps/sizing plans for a train-cpu process of this row, with the constants in force: its peak (GiB), the
    training and loading phases of it, and the terms (GiB)."""
    from steps import sizing
    from steps.sizing.memory import cpu_process_phases

    s = shape_of(config[0], json.dumps(config[1], sort_keys=True))
    k = sizing.Knobs("cpu", False, seq, micro, 16, (), precision)
    terms = sizing.train_memory(s, k, sizing.Micro(micro, checkpointing), device="cpu")
    phases = cpu_process_phases(s, k, terms)
    return {"planned_gib": max(phases.values()), "planned_training_gib": phases["training"],
            "planned_loading_gib": phases["loading"], "parameters": s.parameters,
            "terms_gib": {n: v / GIB for n, v in terms.items()}}  # fmt: skip


@functools.cache
def shape_of(seed: str, overrides: str) -> Any:
    """The sizing Shape of seed base `seed` with `overrides` (JSON), counted once."""
    from steps import sizing
    from steps.sizing.seeds import config

    return sizing.shape_of(config(seed, **json.loads(overrides)))


@contextlib.contextmanager
def constants(runtime_gib: float, activation_factor: float, checkpoint_layers: float | None = None) -> Iterator[None]:
    """steps/sizing/memory.py's CPU_RUNTIME_GIB, CPU_ACTIVATION_FACTOR and CPU_CHECKPOINT_LAYERS (None: as it is) set
    to these while the block runs: the plan recomputed by its own code with other constants."""
    from steps.sizing import memory

    before = memory.CPU_RUNTIME_GIB, memory.CPU_ACTIVATION_FACTOR, memory.CPU_CHECKPOINT_LAYERS
    memory.CPU_RUNTIME_GIB, memory.CPU_ACTIVATION_FACTOR = runtime_gib, activation_factor
    if checkpoint_layers is not None:
        memory.CPU_CHECKPOINT_LAYERS = checkpoint_layers
    try:
        yield
    finally:
        memory.CPU_RUNTIME_GIB, memory.CPU_ACTIVATION_FACTOR, memory.CPU_CHECKPOINT_LAYERS = before


def row_plan(r: dict) -> dict:
    return plan_of((r["config"][0], r["config"][1]), r["precision"], r["checkpointing"], r["micro"], r["seq"])


# --- Re-fit and check ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    runtime_gib: float
    activation_factor: float
    checkpoint_layers: float
    worst_fit_ratio: float  # the largest plan / peak over the fit rows (each at least 1.0)


def matches(r: dict, selector: str) -> bool:
    """Whether row `r` is selected by `selector`: comma-separated key=value, all of them (base=Llama-3.2-1B,
    precision=fp32, checkpointing=true, micro=1)."""
    for part in selector.split(","):
        key, _, value = part.partition("=")
        if str(r[key.strip()]).lower() != value.strip().lower():
            return False
    return True


def split_rows(rows: list[dict], fit_on: str) -> tuple[list[dict], list[dict]]:
    """(fit rows, check rows) of the rows that ran all their steps outside a cgroup; ValueError when either side is
    empty."""
    done = [r for r in rows if complete(r) and not r.get("cgroup_limit")]
    fit = [r for r in done if matches(r, fit_on)]
    check = [r for r in done if not matches(r, fit_on)]
    if not fit or not check:
        raise ValueError(f"--fit-on {fit_on!r} leaves {len(fit)} fit and {len(check)} check rows of {len(done)} "
                         "complete ones: both sides need rows")  # fmt: skip
    return fit, check


def refit(fit_rows: list[dict], factors: tuple[float, ...] = FACTORS,
          layers: tuple[float, ...] = CHECKPOINT_LAYERS) -> Fit:  # fmt: skip
    """CPU_RUNTIME_GIB, CPU_ACTIVATION_FACTOR and CPU_CHECKPOINT_LAYERS that put every fit row's plan at or above its
    measured peak with the smallest worst over-prediction, the plan growing per example at least as the peaks do.

    For each activation factor and checkpointing layers on a grid: the smallest runtime (>= 0, rounded up to 0.01 GiB)
    that covers what each `trained` row's peak holds above its own imports (`imported_gib`) with what the plan counts
    above PROCESS_GIB, the allowance for any machine's imports: the allowance's slack on the measuring machine is not
    fitted into the runtime. Of the pairs under which every `slopes` pair's plan grows from the smaller micro-batch to
    the larger at least as much as its peak did, the one whose worst plan / peak is lowest (ties: the smaller factor,
    then the fewer layers). Without the slope condition a larger runtime covers a too-small activation term on the fit
    rows, and a larger micro-batch or base then goes under. The plan counts CPU_CHECKPOINT_LAYERS layers, so it is
    linear in it: two plans per factor give every value."""
    from steps.sizing.memory import PROCESS_GIB

    best: Fit | None = None
    decided = [trained(r) for r in fit_rows]
    pairs = slopes(fit_rows, decided)
    imports = [r.get("imported_gib") or PROCESS_GIB for r in fit_rows]
    for factor in factors:
        with constants(0.0, factor, 0.0):
            zero = [row_plan(r) for r in fit_rows]
        with constants(0.0, factor, 1.0):
            one = [row_plan(r) for r in fit_rows]
        loading = [a["planned_loading_gib"] for a in zero]
        for n in layers:
            training = [a["planned_training_gib"] + n * (b["planned_training_gib"] - a["planned_training_gib"])
                        for a, b in zip(zero, one, strict=True)]  # fmt: skip
            if any(
                training[j] - training[i] < fit_rows[j]["peak_gib"] - fit_rows[i]["peak_gib"] - 1e-6 for i, j in pairs
            ):
                continue
            short = [r["peak_gib"] - imp - (t - PROCESS_GIB)
                     for r, t, imp, d in zip(fit_rows, training, imports, decided, strict=True) if d]  # fmt: skip
            runtime = math.ceil(max([0.0, *short]) * 100 - 1e-6) / 100
            worst = max(max(t + runtime, ld) / r["peak_gib"] for r, t, ld in zip(fit_rows, training, loading,
                                                                                 strict=True))  # fmt: skip
            if best is None or worst < best.worst_fit_ratio - 1e-9:
                best = Fit(runtime, factor, n, worst)
    if best is None:
        raise ValueError("no activation factor and checkpointing layers tried make the plan grow per example as "
                         "fast as the fit rows' peaks do: widen FACTORS or CHECKPOINT_LAYERS, or look at the rows "
                         "whose peak grows faster than the model counts")  # fmt: skip
    return best


def trained(r: dict) -> bool:
    """Whether training set the row's peak: it rose after loading (a row whose peak is its VmHWM after loading, a
    float32 load beside the mapped bf16 checkpoint, says nothing about training's terms)."""
    return r["peak_gib"] > (r.get("loaded_gib") or 0.0) + 0.005


def slopes(rows: list[dict], decided: list[bool]) -> list[tuple[int, int]]:
    """(i, j) for every two rows of the same base, precision, checkpointing and length at micro-batches i < j whose
    peaks training set (`decided`): the pairs whose peaks measure what more examples cost."""

    def key(r: dict) -> tuple:
        return r["base"], json.dumps(r["config"], sort_keys=True), r["precision"], r["checkpointing"], r["seq"]

    return [(i, j) for i, a in enumerate(rows) for j, b in enumerate(rows)
            if decided[i] and decided[j] and key(a) == key(b) and a["micro"] < b["micro"]]  # fmt: skip


def ratios(rows: list[dict], fit: Fit | None) -> list[float]:
    """plan / peak per row with `fit`'s constants (None: the ones in force)."""
    with constants(fit.runtime_gib, fit.activation_factor, fit.checkpoint_layers) if fit else contextlib.nullcontext():
        return [row_plan(r)["planned_gib"] / r["peak_gib"] for r in rows]


def complete(r: dict) -> bool:
    """Whether a row ran every step (one stopped at --time-limit after its last step counts: its peak is in)."""
    return r["status"] in ("ok", "stopped") and r.get("steps_done", 0) >= r["steps"]


def within(ratio: float) -> bool:
    return 1.0 <= ratio <= TARGET


def refit_report(rows: list[dict], fit_on: str) -> tuple[str, bool]:
    """The re-fit on `fit_on`'s rows and the check on the rest, as text; and whether every check row is within."""
    from steps.sizing import memory

    fit_rows, check_rows = split_rows(rows, fit_on)
    fit = refit(fit_rows)
    now = Fit(memory.CPU_RUNTIME_GIB, memory.CPU_ACTIVATION_FACTOR, memory.CPU_CHECKPOINT_LAYERS, 0.0)
    edges = [name for name, value, grid in (("the factor", fit.activation_factor, FACTORS),
                                            ("the checkpointing layers", fit.checkpoint_layers, CHECKPOINT_LAYERS))
             if value in (grid[0], grid[-1])]  # fmt: skip
    lines = [f"fit rows ({fit_on}): {len(fit_rows)}; check rows: {len(check_rows)}",
             f"CPU_RUNTIME_GIB {now.runtime_gib} -> {fit.runtime_gib:.2f}; CPU_ACTIVATION_FACTOR "
             f"{now.activation_factor} -> {fit.activation_factor:.2f}; CPU_CHECKPOINT_LAYERS "
             f"{now.checkpoint_layers} -> {fit.checkpoint_layers:.1f} (worst fit plan / peak {fit.worst_fit_ratio:.3f})"
             + (f" - {' and '.join(edges)} at the edge of those tried: the fit rows do not pin it" if edges else ""),
             "",
             "| role | row | peak VmHWM GiB | loaded GiB | plan now | now / peak | plan re-fitted "
             "| re-fitted / peak |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    ok = True
    for role, group in (("fit", fit_rows), ("check", check_rows)):
        for r, a, b in zip(group, ratios(group, None), ratios(group, fit), strict=True):
            mark = "" if within(b) else " **out**" if role == "check" else " (a fit row: outside the check's range)"
            ok &= role == "fit" or within(b)
            lines.append(f"| {role} | {row_label(r)} | {r['peak_gib']:.2f} | {r['loaded_gib']:.2f} | "
                         f"{a * r['peak_gib']:.2f} | {a:.3f} | {b * r['peak_gib']:.2f} | {b:.3f}{mark} |")  # fmt: skip
    lines.append(f"\ncheck rows within [1.0, {TARGET}] with the re-fitted constants: {'yes' if ok else 'NO'}")
    skipped = [r for r in rows if not complete(r) and not r.get("cgroup_limit")]
    if skipped:
        lines.append("not used (incomplete): " + "; ".join(f"{row_label(r)}: {r['status']}" for r in skipped))
    return "\n".join(lines), ok


def row_label(r: dict) -> str:
    return f"{r['base']} {r['precision']} {'ckpt' if r['checkpointing'] else 'no-ckpt'} micro {r['micro']}"


# --- cgroups ---------------------------------------------------------------------------------------------------------


@dataclass
class Cgroup:
    """A memory-limited cgroup this benchmark made (v2 or v1) and how to read it."""

    version: int
    path: Path

    def set_limit(self, limit: int) -> None:
        if self.version == 2:
            (self.path / "memory.max").write_text(str(limit))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            if (self.path / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: no swap either
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit))

    def join(self) -> None:
        """Move the calling process in (a child's preexec_fn, before it execs)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def read(self) -> dict:
        """Peak, OOM kills, hits of the limit, major faults and the anon/file split now."""

        def stat(name: str) -> dict[str, int]:
            try:
                text = (self.path / name).read_text()
            except OSError:
                return {}
            return {k: int(v) for k, v in (line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)}

        s = stat("memory.stat")
        if self.version == 2:
            events = stat("memory.events")
            peak = _read_int(self.path / "memory.peak")
            return {"peak_gib": peak / GIB if peak is not None else None, "oom_kill": events.get("oom_kill", 0),
                    "limit_hits": events.get("max", 0), "pgmajfault": s.get("pgmajfault", 0),
                    "anon_gib": s.get("anon", 0) / GIB, "file_gib": s.get("file", 0) / GIB}  # fmt: skip
        oom = stat("memory.oom_control")
        peak = _read_int(self.path / "memory.max_usage_in_bytes")
        return {"peak_gib": peak / GIB if peak is not None else None, "oom_kill": oom.get("oom_kill", 0),
                "limit_hits": _read_int(self.path / "memory.failcnt") or 0,
                "pgmajfault": s.get("total_pgmajfault", s.get("pgmajfault", 0)),
                "anon_gib": s.get("total_rss", s.get("rss", 0)) / GIB,
                "file_gib": s.get("total_cache", s.get("cache", 0)) / GIB}  # fmt: skip

    def remove(self) -> str:
        for _ in range(20):
            try:
                self.path.rmdir()
                return ""
            except OSError as e:
                if e.errno != errno.EBUSY:
                    return _why(self.path, e)
                time.sleep(0.1)
        return f"{self.path}: still busy"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _why(path: Path, e: OSError) -> str:
    return f"{path}: {errno.errorcode.get(e.errno or 0, e.errno)} ({e.strerror})"


def make_cgroup(name: str, root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup"),
                ) -> tuple[Cgroup | None, list[str]]:  # fmt: skip
    """A new cgroup `name` with the memory controller, beside or below this process's own: v1 where a `memory`
    hierarchy is mounted (hybrid included), else v2 (in this process's cgroup when its children get the memory
    controller, else beside it in its parent). Returns (the cgroup or None, why each place tried failed)."""
    why: list[str] = []
    try:
        lines = [line.split(":", 2) for line in self_cgroup.read_text().splitlines() if line.count(":") >= 2]
    except OSError as e:
        return None, [_why(self_cgroup, e)]
    v1 = next((p for _, ctl, p in lines if "memory" in ctl.split(",")), None)
    v2 = next((p for hid, ctl, p in lines if hid == "0" and ctl == ""), None)
    if v1 is not None and (root / "memory").is_dir():
        target = root / "memory" / v1.strip("/") / name
        try:
            target.mkdir()
            return Cgroup(1, target), why
        except OSError as e:
            return None, [f"cgroup v1: {_why(target, e)}"]
    if v2 is None or not (root / "cgroup.controllers").is_file():
        return None, [f"no memory controller: {self_cgroup} names no v1 memory hierarchy mounted at {root}/memory "
                      f"and {root}/cgroup.controllers (v2) is not there ({self_cgroup}: "
                      f"{' | '.join(':'.join(x) for x in lines)})"]  # fmt: skip
    own = root / v2.strip("/")
    places = [own] + ([own.parent] if own != root else [])
    for place in places:
        control = place / "cgroup.subtree_control"
        try:
            if "memory" not in control.read_text().split():
                control.write_text("+memory")  # refused (EBUSY) where `place` holds processes and is not the root
        except OSError as e:
            why.append(f"cgroup v2: memory not delegated below {place}: {_why(control, e)}")
            continue
        target = place / name
        try:
            target.mkdir()
        except OSError as e:
            why.append(f"cgroup v2: {_why(target, e)}")
            continue
        if (target / "memory.max").exists():
            return Cgroup(2, target), why
        why.append(f"cgroup v2: {target} has no memory.max")
        with contextlib.suppress(OSError):
            target.rmdir()
    return None, why


PROBE = """
import sys
n = int(sys.argv[1])
x = bytearray(n)
for i in range(0, n, 4096):
    x[i] = 1
print("survived", flush=True)
"""


def probe_enforcement(name: str) -> dict:
    """Whether a memory limit this process can set is enforced: a child in a cgroup limited to PROBE_LIMIT touches
    twice that. {"enforced": bool | None, "why": ...}."""
    cg, why = make_cgroup(name)
    if cg is None:
        return {"enforced": None, "why": why}
    try:
        cg.set_limit(PROBE_LIMIT)
    except OSError as e:
        cg.remove()
        return {"enforced": None, "why": [*why, f"cgroup v{cg.version}: {_why(cg.path, e)}"], "version": cg.version}
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, str(2 * PROBE_LIMIT)], capture_output=True, text=True,
                              preexec_fn=cg.join, timeout=120)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:  # joining refused (preexec_fn), or the probe hung
        cg.remove()
        return {"enforced": None, "version": cg.version, "why": [*why, f"cgroup v{cg.version}: {cg.path}: {e}"]}
    figures = cg.read()
    removed = cg.remove()
    enforced = done.returncode != 0 and "survived" not in done.stdout
    return {"enforced": enforced, "version": cg.version, "path": str(cg.path), "returncode": done.returncode,
            "touched_gib": 2 * PROBE_LIMIT / GIB, "limit_gib": PROBE_LIMIT / GIB, **figures,
            "why": why + ([] if enforced else [f"a process touched {2 * PROBE_LIMIT >> 20} MiB in a cgroup limited "
                                               f"to {PROBE_LIMIT >> 20} MiB and survived: the limit is not enforced"])
            + ([removed] if removed else [])}  # fmt: skip


def verdict(row: Row, unlimited: Row | None, peers: list[Row] | tuple = ()) -> str:
    """killed, thrashing or fine, for a cgroup row. Thrashing takes memory pressure: over THRASH_MAJFLT major faults a
    step, or a row that hit its limit (memory.events `max`, v1's failcnt) running its steps over THRASH_SLOWDOWN times
    those of a row that did not: a cgroup row of `peers` (they start together, so they share the machine's load) with
    no limit hit, else the `unlimited` row (None: not measured), which ran at another time beside other rows. A slow
    row that never hit its limit wanted CPU, not memory: on 2026-12-04 both cgroup rows ran 1.5x the unlimited row's
    steps, the one at 9 GiB without one limit hit, because the grid's rows and a GPU benchmark shared the CPUs."""
    cgroup = row.result.get("cgroup", {})
    if row.status == "killed" or cgroup.get("oom_kill", 0) > 0:
        return "killed"
    mine = row.result.get("step_seconds") or []
    faults = max(row.result.get("majflt", 0), cgroup.get("pgmajfault", 0))
    if faults / max(1, len(mine)) > THRASH_MAJFLT:
        return "thrashing"
    calm = [p for p in peers if p is not row and p.result.get("step_seconds")
            and p.result.get("cgroup", {}).get("limit_hits", 0) == 0]  # fmt: skip
    reference = calm[0] if calm else unlimited
    base = (reference.result.get("step_seconds") or []) if reference else []
    if cgroup.get("limit_hits", 0) > 0 and base:
        if mine and statistics.median(mine) > THRASH_SLOWDOWN * statistics.median(base):
            return "thrashing"
        if not mine and row.result.get("train_elapsed", 0.0) > THRASH_SLOWDOWN * base[0]:
            return "thrashing"  # not one step in the time the reference took for several
    if row.status != "ok":
        return f"undecided ({row.status})"
    return "fine"


# --- Running rows ----------------------------------------------------------------------------------------------------


BUILD = """
import json, sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from steps.sizing.seeds import config
name, overrides, out, device = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
try:
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config(name, **overrides), dtype=torch.bfloat16)
except Exception as e:  # the GPU busy or out of memory: build it on the CPU, slower
    print(f"building on {device} failed ({e}); on cpu", file=sys.stderr)
    model = AutoModelForCausalLM.from_config(config(name, **overrides), dtype=torch.bfloat16)
model.save_pretrained(out)
# The rows feed token ids, never text: a word-level tokenizer of three tokens is all build_model loads.
tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                        pad_token="</s>").save_pretrained(out)
print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))
"""

CHILD = """
import json, os, resource, shutil, sys, tempfile, time
t0 = time.perf_counter()
from benchmarks._train_child import status_gib, summary_rows, train_config, train_rows
spec = json.loads(sys.argv[1])
progress = open(spec["progress"], "a", buffering=1)
def note(event, **extra):
    figures = {"event": event, "t": time.perf_counter() - t0, "hwm_gib": status_gib("VmHWM"),
               "rss_gib": status_gib("VmRSS"), "majflt": resource.getrusage(resource.RUSAGE_SELF).ru_majflt, **extra}
    progress.write(json.dumps(figures) + "\\n")
    return figures
if spec["copy_from"]:  # as a pod downloads its base: the checkpoint's page cache is this cgroup's
    shutil.copytree(spec["copy_from"], spec["base"])
    note("copied")
import torch
torch.set_num_threads(spec["threads"])
from steps import sizing
from steps.train import build_model
from steps.train.precision import Precision
from torch.optim.optimizer import register_optimizer_step_post_hook
imported = note("imported")
steps_done = []
def after_step(optimizer, args, kwargs):
    steps_done.append(note("step", step=len(steps_done) + 1))
register_optimizer_step_post_hook(after_step)
seq, micro = spec["seq"], spec["micro"]
with tempfile.TemporaryDirectory() as tmp:
    cfg = train_config(spec["base"], tmp, batch=micro, seq=seq, precision=spec["precision"], threads=spec["threads"],
                       gc="on" if spec["checkpointing"] else "off")
    model, _ = build_model(cfg, torch.device("cpu"), spec["precision"])
    loaded = note("loaded")
    log = train_rows(model, cfg, summary_rows(seq, spec["steps"] * micro, spec["vocab"]),
                     sizing.Micro(micro, spec["checkpointing"]),
                     Precision(spec["precision"], "pinned by benchmarks.cpu_rows"))
end = note("done")
times = [b["t"] - a["t"] for a, b in zip([loaded, *steps_done], steps_done)]
print(json.dumps({"steps_done": len(log), "peak_gib": end["hwm_gib"], "loaded_gib": loaded["hwm_gib"],
                  "imported_gib": imported["rss_gib"], "step_seconds": times, "majflt": end["majflt"],
                  "load_seconds": loaded["t"] - imported["t"], "train_elapsed": end["t"] - loaded["t"],
                  "tokens_per_second": log[-1]["tokens"] / log[-1]["seconds"],
                  "per_step": [{k: s[k] for k in ("hwm_gib", "rss_gib", "majflt")} for s in steps_done]}))
"""


def from_progress(path: Path) -> dict:
    """What a stopped or killed row reached: its progress lines (one per event, each step's end among them)."""
    try:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        events = []
    if not events:
        return {"steps_done": 0}
    by = {e["event"]: e for e in events}
    steps = [e for e in events if e["event"] == "step"]
    loaded = by.get("loaded")
    marks = [loaded, *steps] if loaded else steps
    return {"steps_done": len(steps), "peak_gib": events[-1]["hwm_gib"], "majflt": events[-1]["majflt"],
            "loaded_gib": loaded["hwm_gib"] if loaded else None,
            "imported_gib": by["imported"]["rss_gib"] if "imported" in by else None,
            "step_seconds": [b["t"] - a["t"] for a, b in zip(marks, steps, strict=False)] if loaded else [],
            "train_elapsed": (events[-1]["t"] - loaded["t"]) if loaded else 0.0,
            "per_step": [{k: s[k] for k in ("hwm_gib", "rss_gib", "majflt")} for s in steps]}  # fmt: skip


@dataclass
class Running:
    row: Row
    proc: subprocess.Popen
    started: float
    progress: Path
    stderr: Path
    cgroup: Cgroup | None
    need_gib: float
    base_copy: Path | None = None  # a cgroup row's own copy of the base, removed when it ends
    samples: list[dict] = field(default_factory=list)


def need_gib(row: Row) -> float:
    """Memory to set aside for a row while it runs: its plan with a margin (its cgroup limit when it has one)."""
    plan = row.result.get("plan") or plan_of(row.config, row.precision, row.checkpointing, row.micro, row.seq)
    return plan["planned_gib"] * 1.2 + 0.5


def cost(row: Row) -> float:
    """A relative estimate of a row's seconds, to start the longest first: loading, then 4 (6 with checkpointing)
    FLOPs per weight per token, bf16 taken as twice as fast."""
    plan = plan_of(row.config, row.precision, row.checkpointing, row.micro, row.seq)
    flops = (6 if row.checkpointing else 4) * plan["parameters"] * row.seq * row.micro * row.steps
    return (flops / (2 if row.precision == "bf16" else 1)) / 1e11 + plan["parameters"] / 1e8


def run_rows(rows: list[Row], bases: dict[str, Path], work: Path, *, cores: int, memory_gib: float,
             deadline: float, first: list[Row], on_finish: Callable[[], None] = lambda: None) -> None:  # fmt: skip
    """Run `rows` (those in `first` before the rest, then longest first), as many at a time as `cores` and
    `memory_gib` hold; stop whatever still runs at `deadline` (time.monotonic). Fills each row's status and result,
    calling `on_finish` as each row ends (the results so far survive a kill)."""
    queue = first + sorted((r for r in rows if r not in first), key=cost, reverse=True)
    running: list[Running] = []
    for i, row in enumerate(queue):
        row.result["plan"] = plan_of(row.config, row.precision, row.checkpointing, row.micro, row.seq)
        row.result["index"] = i
    pending = list(queue)
    while pending or running:
        now = time.monotonic()
        for r in [r for r in running if r.proc.poll() is not None or now > deadline]:
            finish(r, stopped=r.proc.poll() is None)
            running.remove(r)
            on_finish()
        if now > deadline:
            break
        for row in list(pending):
            used_cores = sum(r.row.threads for r in running)
            used_gib = sum(r.need_gib for r in running)
            need = need_gib(row) if not row.cgroup_limit else row.result["cgroup_limit_gib"] + 0.5
            if used_cores + row.threads > cores or (running and used_gib + need > memory_gib):
                continue
            pending.remove(row)
            started = start(row, bases, work, need)
            if started:
                running.append(started)
        for r in running:
            if r.cgroup is not None:
                r.samples.append({"t": round(now - r.started, 1), **r.cgroup.read()})
        time.sleep(0.5)
    for row in pending:
        row.status = "not started"


def start(row: Row, bases: dict[str, Path], work: Path, need: float) -> Running | None:
    """Start `row`'s process (in its own cgroup for a cgroup row); None when that cgroup cannot be made."""
    i = row.result["index"]
    progress, stderr = work / f"row-{i}.progress", work / f"row-{i}.err"
    copy = work / f"row-{i}-base" if row.cgroup_limit else None
    spec = {
        "base": str(copy or bases[row.base]),
        "copy_from": str(bases[row.base]) if copy else "",
        "precision": row.precision,
        "checkpointing": row.checkpointing,
        "micro": row.micro,
        "seq": row.seq,
        "threads": row.threads,
        "steps": row.steps,
        "progress": str(progress),
        "vocab": vocab_of(row.config),
    }
    cgroup = None
    if row.cgroup_limit:
        cgroup, why = make_cgroup(f"distillery-cpu-rows-{os.getpid()}-{i}")
        row.result["cgroup_why"] = why
        try:
            if cgroup is None:
                raise OSError(errno.ENOENT, "; ".join(why))
            cgroup.set_limit(int(row.result["cgroup_limit_gib"] * GIB))
        except OSError as e:
            row.status, row.result["error"] = "failed", f"no limited cgroup: {e}"
            if cgroup is not None:
                cgroup.remove()
            return None
    env = {**os.environ, "OMP_NUM_THREADS": str(row.threads), "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    print(f"cpu_rows: start {row.name} ({row.threads} threads, ~{need:.1f} GiB set aside)", flush=True)
    try:
        with stderr.open("w") as err:
            proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, stderr=err, text=True,
                                    preexec_fn=cgroup.join if cgroup else None, start_new_session=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:  # joining its cgroup refused
        row.status, row.result["error"] = "failed", f"could not start in {cgroup.path if cgroup else '-'}: {e}"
        if cgroup is not None:
            cgroup.remove()
        return None
    return Running(row, proc, time.monotonic(), progress, stderr, cgroup, need, copy)


def finish(r: Running, *, stopped: bool) -> None:
    row = r.row
    if stopped:
        with contextlib.suppress(ProcessLookupError):  # it may have ended since
            os.killpg(r.proc.pid, signal.SIGKILL)  # the row's own process group (start_new_session)
    out, _ = r.proc.communicate()
    rc = r.proc.returncode
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if rc == 0 and lines:
        row.status, measured = "ok", json.loads(lines[-1])
    else:
        measured = from_progress(r.progress)
        row.status = "stopped" if stopped else ("killed" if rc == -signal.SIGKILL else "failed")
        if not stopped:
            row.result["error"] = r.stderr.read_text()[-2500:]
    row.result.update(measured, returncode=rc, wall_seconds=time.monotonic() - r.started)
    if r.cgroup is not None:
        every = max(1, len(r.samples) // 100)
        row.result["cgroup"] = {**r.cgroup.read(), "version": r.cgroup.version, "path": str(r.cgroup.path),
                                "max_anon_gib": max((s["anon_gib"] for s in r.samples), default=0.0),
                                "samples": r.samples[::every]}  # fmt: skip
        removed = r.cgroup.remove()
        if removed:
            row.result["cgroup"]["remove"] = removed
    if r.base_copy:
        shutil.rmtree(r.base_copy, ignore_errors=True)
    print(f"cpu_rows: {row.status} {row.name}: peak {row.result.get('peak_gib') or 0:.2f} GiB vs planned "
          f"{row.result['plan']['planned_gib']:.2f}, {row.result.get('steps_done', 0)} step(s), "
          f"{time.monotonic() - r.started:.0f} s", flush=True)  # fmt: skip


def vocab_of(config: tuple[str, dict]) -> int:
    from steps.sizing.seeds import SEED_BASES

    return int(config[1].get("vocab_size", SEED_BASES[config[0]][1]["vocab_size"]))


def build_bases(bases: dict[str, tuple[str, dict]], work: Path, cores: int) -> dict[str, Path]:
    """Each base saved as bf16 safetensors, built side by side (on the GPU where torch sees one)."""
    device = "cpu"
    with contextlib.suppress(Exception):
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    procs = {}
    threads = max(1, cores // max(1, len(bases)))
    for name, (seed, overrides) in bases.items():
        out = work / f"base-{name}"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-c", BUILD, seed, json.dumps(overrides), str(out), device]
        procs[name] = (out, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True))  # fmt: skip
    t0 = time.perf_counter()
    for name, (_, proc) in procs.items():
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"cpu_rows: building {name} failed:\n{stderr[-3000:]}")
    print(f"cpu_rows: built {', '.join(bases)} on {device} in {time.perf_counter() - t0:.0f} s", flush=True)
    return {name: out for name, (out, _) in procs.items()}


# --- The machine -----------------------------------------------------------------------------------------------------


RSS_PROBE = """
import json, mmap, sys
def kib(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key + ":"))
n, path = 2**30, sys.argv[1]
before = kib("VmRSS")
untouched = mmap.mmap(-1, n)  # anonymous pages never written
after_untouched = kib("VmRSS")
touched = mmap.mmap(-1, n)
for i in range(0, n, 4096):
    touched[i] = 1
after_touched = kib("VmRSS")
with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
    s = sum(m[i] for i in range(0, len(m), 4096))
    after_mapped = kib("VmRSS")
print(json.dumps({"untouched_gib": (after_untouched - before) / 2**20, "touched_gib": (after_touched -
                  after_untouched) / 2**20, "mapped_read_gib": (after_mapped - after_touched) / 2**20}))
"""


def rss_probe(work: Path) -> dict:
    """How this machine's VmRSS counts 1 GiB never written, 1 GiB written and a 1 GiB file mapped and read: Linux
    says 0, 1 and 1; a sandbox (gVisor) may not, and then every VmHWM here says so too."""
    path = work / "probe.bin"
    with path.open("wb") as f:
        for _ in range(64):
            f.write(os.urandom(2**24))
    done = subprocess.run([sys.executable, "-c", RSS_PROBE, str(path)], capture_output=True, text=True)
    path.unlink()
    if done.returncode != 0:
        return {"error": done.stderr[-1000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine(work: Path) -> dict:
    import torch

    def first(path: str, key: str) -> str:
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                if line.split(":")[0].strip() == key:
                    return line.split(":", 1)[1].strip()
        return ""

    mounts = []
    with contextlib.suppress(OSError):
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    fs = max((m for m in mounts if str(work).startswith(m[1])), key=lambda m: len(m[1]), default=["", "", "?"])
    flags = set(first("/proc/cpuinfo", "flags").split())
    return {
        "kernel": platform.release(),
        "cpu": first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "mem_total_gib": int(first("/proc/meminfo", "MemTotal").split()[0]) / 2**20,
        "swap_gib": int((first("/proc/meminfo", "SwapTotal") or "0").split()[0]) / 2**20,
        "native_bf16": sorted(flags & {"amx_bf16", "avx512_bf16"}),
        "avx512f": "avx512f" in flags,
        "torch": torch.__version__,
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "work_fs": fs[2],
        "self_cgroup": Path("/proc/self/cgroup").read_text() if Path("/proc/self/cgroup").exists() else "",
    }


# --- Output ----------------------------------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = ["| row | status | steps | imported GiB | loaded GiB | peak VmHWM GiB | planned GiB (loading) | "
             "planned / peak | s / step | cgroup |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in sorted(rows, key=lambda r: (r.base, r.precision, r.checkpointing, r.micro, r.cgroup_limit)):
        res, plan = row.result, row.result["plan"]
        peak = res.get("peak_gib")
        ratio = f"{plan['planned_gib'] / peak:.3f}" if peak and row.status in ("ok", "stopped") else "-"
        steps = res.get("step_seconds") or []
        cg = res.get("cgroup", {})
        cgs = (
            (
                f"limit {res['cgroup_limit_gib']:.2f}: {res.get('verdict', '')}, peak "
                f"{(cg.get('peak_gib') or 0):.2f}, oom_kill {cg.get('oom_kill', 0)}, limit hits "
                f"{cg.get('limit_hits', 0)}, major faults {cg.get('pgmajfault', 0)}"
            )
            if row.cgroup_limit
            else ""
        )
        lines.append(f"| {row.name} | {row.status} | {res.get('steps_done', 0)}/{row.steps} | "
                     f"{res.get('imported_gib') or 0:.2f} | {res.get('loaded_gib') or 0:.2f} | {peak or 0:.2f} | "
                     f"{plan['planned_gib']:.2f} ({plan['planned_loading_gib']:.2f}) | {ratio} | "
                     f"{' '.join(f'{s:.1f}' for s in steps)} | {cgs} |")  # fmt: skip
    return "\n".join(lines)


def row_dict(row: Row) -> dict:
    d = asdict(row)
    d["config"] = list(row.config)
    flat = {k: v for k, v in row.result.items() if k not in ("plan",)}
    return {**{k: v for k, v in d.items() if k != "result"}, **flat, **row.result["plan"], "name": row.name}


def write_outputs(out: Path, report: dict, rows: list[Row]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.json").write_text(json.dumps({**report, "rows": [row_dict(r) for r in rows]}, indent=1))
    keys = [
        "base",
        "precision",
        "checkpointing",
        "micro",
        "seq",
        "threads",
        "cgroup_limit",
        "status",
        "steps_done",
        "imported_gib",
        "loaded_gib",
        "peak_gib",
        "planned_gib",
        "planned_training_gib",
        "planned_loading_gib",
        "step_seconds",
        "tokens_per_second",
        "majflt",
        "wall_seconds",
        "verdict",
        "cgroup_limit_gib",
    ]
    with (out / "rows.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(row_dict(r))


# --- main ------------------------------------------------------------------------------------------------------------


def parse_row(text: str) -> tuple[str, str, bool, int]:
    base, precision, ckpt, micro = text.split(":")
    return base, precision, ckpt == "on", int(micro)


def measure(args: argparse.Namespace) -> int:
    from steps.sizing.cluster import whole_gib

    bases, seq, default_cg = SHAPES[args.shapes]
    seq = args.max_seq_len or seq
    cores = args.cores or os.cpu_count() or 1
    args.threads = min(args.threads, cores)  # a row wider than the machine would never start
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="cpu-rows-", dir=args.work))
    report: dict = {"settings": {k: str(v) for k, v in vars(args).items()}}
    try:
        report["machine"] = machine(work)
        print(f"cpu_rows: {json.dumps(report['machine'])}", flush=True)
        report["rss_probe"] = rss_probe(work)
        print(f"cpu_rows: VmRSS probe (Linux: 0, 1, 1): {json.dumps(report['rss_probe'])}", flush=True)
        rows = [Row(b, bases[b], p, c, m, seq, args.threads, args.steps)
                for b in bases for p in args.precisions.split(",") for c in (False, True) for m in (1, 2)]  # fmt: skip
        rows = [r for r in rows if not args.only or matches(asdict(r), args.only)]
        cg_base = "" if args.no_cgroup else parse_row(args.cgroup_row or default_cg)[0]
        bases = {b: c for b, c in bases.items() if any(r.base == b for r in rows) or b == cg_base}
        first: list[Row] = []
        if not args.no_cgroup:
            probe = probe_enforcement(f"distillery-cpu-rows-{os.getpid()}-probe")
            report["cgroup_probe"] = probe
            print(f"cpu_rows: cgroup probe: {json.dumps(probe)}", flush=True)
            if probe["enforced"]:
                base, precision, ckpt, micro = parse_row(args.cgroup_row or default_cg)
                for limit in args.cgroup_limits.split(","):
                    row = Row(base, bases[base], precision, ckpt, micro, seq, args.threads, args.steps, limit)
                    planned = plan_of(row.config, precision, ckpt, micro, seq)["planned_gib"]
                    row.result["cgroup_limit_gib"] = planned if limit == "planned" else float(whole_gib(planned))
                    first.append(row)
            else:
                print("cpu_rows: no cgroup row: " + "; ".join(probe["why"]), flush=True)
        built = build_bases(bases, work, cores)
        deadline = started + args.time_limit
        avail = int(Path("/proc/meminfo").read_text().split("MemAvailable:")[1].split()[0]) / 2**20
        run_rows(rows + first, built, work, cores=cores, memory_gib=avail - args.reserve_gib, deadline=deadline,
                 first=first, on_finish=lambda: write_outputs(args.out, report, rows + first))  # fmt: skip
        for row in first:
            twin = next((r for r in rows if (r.base, r.precision, r.checkpointing, r.micro) ==
                         (row.base, row.precision, row.checkpointing, row.micro)), None)  # fmt: skip
            row.result["verdict"] = verdict(row, twin, first)
        report["wall_seconds"] = time.monotonic() - started
        write_outputs(args.out, report, rows + first)
        print(table(rows + first))
        for row in first:
            print(
                f"cpu_rows: cgroup row {row.name} at {row.result['cgroup_limit_gib']:.2f} GiB: "
                f"{row.result['verdict']}; s/step {row.result.get('step_seconds')}; "
                f"cgroup {json.dumps({k: v for k, v in row.result.get('cgroup', {}).items() if k != 'samples'})}"
            )
        print(f"cpu_rows: wrote {args.out / 'rows.json'} and rows.csv in {report['wall_seconds']:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for rows.json and rows.csv")
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="real", help="small: tiny Llamas, for a try-out")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps a row (one micro-batch each)")
    parser.add_argument("--threads", type=int, default=4, help="torch threads a row")
    parser.add_argument("--only", default="", help="key=value[,key=value]: run only the grid's rows that match")
    parser.add_argument("--cores", type=int, default=0, help="CPUs to fill (0: all)")
    parser.add_argument("--reserve-gib", type=float, default=6.0, help="memory left to everything else")
    parser.add_argument("--max-seq-len", type=int, default=0, help="0: 512 (real), 128 (small)")
    parser.add_argument("--time-limit", type=float, default=330.0, help="seconds for everything; rows then stop")
    parser.add_argument("--work", default=None, help="where the bases are saved (on disk: not a tmpfs)")
    parser.add_argument("--no-cgroup", action="store_true", help="no cgroup probe or row")
    parser.add_argument("--cgroup-row", default="", help="BASE:PRECISION:on|off:MICRO (default per --shapes)")
    parser.add_argument("--cgroup-limits", default="planned,pod", help="planned (the plan's GiB), pod (whole GiB)")
    parser.add_argument(
        "--refit", type=Path, nargs="+", help="rows.json files: re-fit on --fit-on's rows, check the rest"
    )
    parser.add_argument("--fit-on", default="base=Llama-3.2-1B", help="key=value[,key=value]: the fit rows")
    args = parser.parse_args(argv)
    if args.refit:
        rows = [r for f in args.refit for r in json.loads(f.read_text())["rows"]]
        try:
            text, ok = refit_report(rows, args.fit_on)
        except ValueError as e:
            parser.error(str(e))
        except KeyError as e:
            parser.error(f"--fit-on {args.fit_on!r}: rows have no field {e}")
        print(text)
        return 0 if ok else 1
    if not args.out:
        parser.error("--out (or --refit) is required")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
