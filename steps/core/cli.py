"""A step's command line and its results: the argparse parser built from a config dataclass, `timed` runs and
`result.json` with one file per scalar for Argo's output parameters.

A step's config is a dataclass whose fields carry `metadata={"help": ...}`; `parse_config` turns it into an argparse
command line with one `--field-name` flag per field, so the flag names are the pipeline's parameter names.
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import functools
import math
import sys
import time
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from steps.core import pod, trust
from steps.core.io import write_json

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


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def refuse(problems: list[str], step: str, error: type[Exception] = ValueError) -> None:
    """The one way a `run()` refuses its config: every problem at once, one a line, under the step's name (raises
    `error`, the step's own exception type, when there are any)."""
    if problems:
        raise error(f"invalid {step} config:\n  " + "\n  ".join(problems))


def name_value(setting: str) -> tuple[str, str] | None:
    """A `-S NAME=VALUE` setting (dvc exp run's form) as (NAME, VALUE), split at the first "="; None without one."""
    name, sep, value = setting.partition("=")
    return (name, value) if sep else None


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
        name, number = (part.strip() for part in name_value(item) or ("", ""))
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if not name or "=" in number or not math.isfinite(value):
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


def flag_types(config_cls: type) -> dict[str, Callable[[str], Any]]:
    """How the step reads each flag's text (its argparse `type`), by parameter name (the flag without dashes)."""
    hints = typing.get_type_hints(config_cls, localns={"Path": Path})
    return {flag(f.name)[2:]: _parser_type(hints[f.name]) for f in dataclasses.fields(config_cls)}


def build_parser(config_cls: type, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(), description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    types = flag_types(config_cls)
    for field in dataclasses.fields(config_cls):
        kwargs: dict[str, Any] = {"type": types[flag(field.name)[2:]], "help": field.metadata.get("help", "")}
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
    entered, whether it was called by `main()` or from Python (register prices each upstream step by it). In a pod it
    also leaves the container's termination message (`steps.core.pod`): the memory limit as it starts, its error if it
    raises one; and trusts the cluster's private CA, when the pod has one (`steps.core.trust`), before the step
    talks to anything."""

    step = run.__module__.removeprefix("steps.").removesuffix(".__init__")

    @functools.wraps(run)
    def timed_run(cfg: C) -> R:
        token = _run_started.set(time.perf_counter())
        pod.announce_limits(step)  # on a cluster: the limit an OOMKilled step's node names in `argo get`
        try:
            trust.install()
            return run(cfg)
        except Exception as e:  # the step's own error becomes the node's message instead (re-raised as it was)
            pod.termination_message(f"{step}: {type(e).__name__}: {e}")
            raise
        finally:
            _run_started.reset(token)

    setattr(timed_run, TIMED, True)
    return timed_run


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
