"""check-parameters: the cluster run's first step. Every workflow parameter is read the way the step that takes it
reads it, and the run stops here, naming each bad value and what is allowed, before any pod trains or any node starts.

    python -m steps.check_parameters --train-backend gpu --lora-r 16 … --ray-large-workers 1 …

Why a step of its own: `argo submit -p` does not enforce a parameter's `enum` (argo-workflows#6959), and a mistyped
`train-backend` would skip every train task by its `when` and end the run green with no adapter. The rules are the
steps' own — their config types (argparse types: int, float, bool) and each step's `config_problems(cfg)` — so a rule
lives in one place and this step only asks every step at once. Locally, DVC runs each step with params.yaml, and each
step refuses bad values itself; this step is Argo's only (`workflows/distill.py`).

Writes nothing; exit 1 with every problem listed, or 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys

from steps import sizing
from steps.core.cli import build_parser
from steps.pipeline import PARAMS, STAGES, Stage


def ray_cpu_replica_flags() -> tuple[str, ...]:
    """The Ray CPU worker groups' replica counts (cluster-only workflow parameters)."""
    return tuple(f"ray-{g.name}-workers" for g in sizing.RAY_NODE_GROUPS)


RAY_GPU_FLAG = f"ray-{sizing.RAY_GPU_GROUP}-workers"


def ray_replica_flags() -> tuple[str, ...]:
    """Every Ray worker group's replica count: the CPU groups', then the GPU group's."""
    return (*ray_cpu_replica_flags(), RAY_GPU_FLAG)


def ray_mix_problems(values: dict[str, str]) -> list[str]:
    """CPU and GPU workers in one Ray Train run: refused. One DDP group has one backend (Gloo on CPUs, NCCL on GPUs)
    and runs at its slowest worker's pace."""
    if values.get("train-backend") != "ray" or not values.get(RAY_GPU_FLAG, "0").isdigit():
        return []
    cpu = {n: values.get(n, "0") for n in ray_cpu_replica_flags()}
    used = {n: v for n, v in cpu.items() if v.isdigit() and int(v) > 0}
    if int(values.get(RAY_GPU_FLAG, "0")) == 0 or not used:
        return []
    settings = ", ".join(f"{n}={v}" for n, v in used.items())
    zeros = " ".join(f"-p {n}=0" for n in used)
    return [
        f"--{RAY_GPU_FLAG} {values[RAY_GPU_FLAG]} with CPU workers ({settings}): CPU and GPU workers cannot train in "
        f"one DDP group; for the GPU box alone submit with {zeros}, or drop the GPU with -p {RAY_GPU_FLAG}=0"
    ]


def config_class(module: object) -> type:
    return next(v for k, v in vars(module).items() if k.endswith("Config") and isinstance(v, type))


def _stage_problems(stage: Stage, values: dict[str, str]) -> list[str]:
    module = importlib.import_module(stage.module)
    config_cls = config_class(module)
    parser = build_parser(config_cls, stage.help)
    argv: list[str] = []
    for f in dataclasses.fields(config_cls):  # folders the run supplies: any placeholder parses
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            argv += ["--" + f.name.replace("_", "-"), "-"]
    # Each value on its own, so that every mistyped one is named, not only a stage's first; the step's own rules
    # then judge the rest (a mistyped value stands aside for its default there).
    found = []
    for name in stage.params:
        action = parser._option_string_actions[f"--{name}"]
        try:
            action.type(values[name])
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            kind = getattr(action.type, "__name__", "")
            why = str(e) if isinstance(e, argparse.ArgumentTypeError) else f"invalid {kind} value: {values[name]!r}"
            found.append(f"argument --{name}: {why}")
        else:
            argv += [f"--{name}", values[name]]
    namespace = parser.parse_args(argv)
    check = getattr(module, "config_problems", None)
    return found + (check(config_cls(**vars(namespace))) if check else [])


def problems(values: dict[str, str]) -> list[str]:
    """Every problem with the workflow's parameter values, each once, in pipeline order."""
    found: list[str] = []
    for stage in STAGES:
        found += _stage_problems(stage, values)
    for name in ray_replica_flags():
        value = values.get(name, "0")
        if not value.isdigit():
            found.append(f"--{name} {value!r}: a replica count, 0 or more")
    found += ray_mix_problems(values)
    return list(dict.fromkeys(found))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for p in PARAMS:
        parser.add_argument(f"--{p.name}", required=True, help=p.help)
    for name in ray_replica_flags():
        parser.add_argument(f"--{name}", default="0", help="Ray worker pods in that group")
    values = {k.replace("_", "-"): v for k, v in vars(parser.parse_args(argv)).items()}
    found = problems(values)
    if found:
        print(f"check-parameters: {len(found)} invalid parameter(s); fix them and submit again:", file=sys.stderr)
        for problem in found:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"check-parameters: all {len(values)} parameters valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
