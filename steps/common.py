"""Small pieces every step shares: the command line built from a config dataclass, atomic output folders, results.

A step's config is a dataclass whose fields carry `metadata={"help": ...}`; `parse_config` turns it into an argparse
command line with one `--field-name` flag per field, so the flag names are the pipeline's parameter names.
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")
R = TypeVar("R")

RESULT_FILE = "result.json"
# Argo reads each output parameter from a file of its own; `write_result` puts one per scalar field here.
PARAM_DIR = "_outputs"
# When the `run` now in progress was entered (`timed`): `write_result` records the step's wall time from it, the same
# whether the step was called from its command line or from Python. A context variable: nested runs (a test calling
# one step inside another's) each measure their own.
_run_started: contextvars.ContextVar[float | None] = contextvars.ContextVar("run_started", default=None)
TIMED = "__distillery_timed__"


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block; afterwards put back what was there (or nothing)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


def is_uri(location: str) -> bool:
    """A URI (s3://…, file://…) rather than a local path."""
    return "://" in location


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def number_table(text: str, flag: str) -> dict[str, float]:
    """A `NAME=NUMBER,…` flag value (`--price-table cpu=0.20,gpu=1.10`) as {name: number}; empty items are skipped.

    Raises one ValueError naming the flag and every item that is not NAME=NUMBER with a finite number, or a name given
    twice.
    """
    table: dict[str, float] = {}
    bad = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, number = (part.strip() for part in item.partition("="))
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if not sep or not name or "=" in number or not math.isfinite(value):
            bad.append(f"{item!r} is not NAME=NUMBER")
        elif name in table:
            bad.append(f"{name!r} is given twice")
        else:
            table[name] = value
    if bad:
        raise ValueError(f"{flag} {text!r}: {'; '.join(bad)}; write NAME=NUMBER pairs separated by commas")
    return table


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parser_type(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _parser_type(args[0])
    if annotation is bool:
        return _bool
    if annotation in (int, float, str, Path):
        return annotation
    raise TypeError(f"unsupported config field type {annotation!r}")


def _prog() -> str | None:
    """`python -m steps.<step>` when a step runs as a module (Python 3.11's argparse would say `__main__.py` for a
    package step such as steps.train); None (argparse's own) otherwise."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or not spec.name.startswith("steps."):
        return None
    return f"python -m {spec.name.removesuffix('.__main__')}"


def build_parser(config_cls: type, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(), description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    hints = typing.get_type_hints(config_cls, localns={"Path": Path})
    for field in dataclasses.fields(config_cls):
        kwargs: dict[str, Any] = {"type": _parser_type(hints[field.name]), "help": field.metadata.get("help", "")}
        if field.default is not dataclasses.MISSING:
            kwargs["default"] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            kwargs["default"] = field.default_factory()
        else:
            kwargs["required"] = True
        parser.add_argument(flag(field.name), dest=field.name, **kwargs)
    return parser


def parse_config(config_cls: type[C], argv: list[str] | None, description: str) -> C:
    namespace = build_parser(config_cls, description).parse_args(argv)
    return config_cls(**vars(namespace))


def timed(run: Callable[[C], R]) -> Callable[[C], R]:
    """Decorate a step's `run`: the `result.json` it writes (`write_result`) records `wall_seconds` from when `run` was
    entered, whether it was called by `main()` or from Python (register prices each upstream step by it)."""

    @functools.wraps(run)
    def timed_run(cfg: C) -> R:
        token = _run_started.set(time.perf_counter())
        try:
            return run(cfg)
        finally:
            _run_started.reset(token)

    setattr(timed_run, TIMED, True)
    return timed_run


def config_flags(config_cls: type) -> set[str]:
    """The parameter names a step accepts (its flags without the leading dashes)."""
    return {flag(f.name)[2:] for f in dataclasses.fields(config_cls)}


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temp folder beside `final`; on success it replaces `final` in one rename, on error it is removed.

    Readers never see a half-written output folder, and a failed step leaves the previous one untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """One JSON object a line, UTF-8, keys sorted."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{path} is missing: run the step that produces it first") from e


def write_result(out_dir: Path, result: Any) -> None:
    """Write `result.json`, and each scalar field as `_outputs/<name>` for Argo's output parameters."""
    data = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else dict(result)
    started = _run_started.get()
    if started is not None:  # how long the step took, for the run's record
        data["wall_seconds"] = round(time.perf_counter() - started, 1)
    write_json(out_dir / RESULT_FILE, data)
    params = out_dir / PARAM_DIR
    params.mkdir(exist_ok=True)
    for key, value in data.items():
        if isinstance(value, str | int | float | bool):
            (params / key.replace("_", "-")).write_text(str(value).lower() if isinstance(value, bool) else str(value))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_sha(cwd: Path | None = None) -> str:
    """The code's git commit: GIT_SHA (set in images at build time) or `git rev-parse HEAD`, else 'unknown'."""
    if os.environ.get("GIT_SHA"):
        return os.environ["GIT_SHA"]
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip()
