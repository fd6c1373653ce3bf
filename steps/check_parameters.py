"""check-parameters: the cluster run's first step. Every workflow parameter is read the way the step that takes it
reads it, and the run stops here, naming each bad value and what is allowed, before any pod trains or any node starts.

    python -m steps.check_parameters --train-backend gpu --lora-r 16 … --ray-large-workers 1 …

Why a step of its own: `argo submit -p` does not enforce a parameter's `enum` (argo-workflows#6959), and a mistyped
`train-backend` would skip every train task by its `when` and end the run green with no adapter. The rules are the
steps' own — their config types (argparse types: int, float, bool) and each step's `config_problems(cfg)` — so a rule
lives in one place and this step only asks every step at once. As a task it is Argo's only (`workflows/distill.py`);
locally each step also refuses bad values itself when DVC runs it.

The embedded run asks the same rules before `dvc repro` starts (scripts/run_local.sh), so a bad value is refused
before preflight, not when its step is reached minutes later: `--local params.yaml` reads the values from the file,
with `dvc exp run`'s `-S NAME=VALUE` applied over it, and checks each stage's own rules and the base-model folder;
not the cluster's own (Ray pods, a pinned base revision, the evaluate fan-out).

    python -m steps.check_parameters --local params.yaml -S learning-rate=-1e-3

Writes nothing; exit 1 with every problem listed, or 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import sys
from pathlib import Path

from steps.core.base_model import base_model_problems
from steps.core.cli import build_parser, flag_types, name_value
from steps.pipeline import (
    EVALUATE_FANOUT_PARAMS,
    EVALUATE_PARALLELISM_PARAM,
    EVALUATE_SHARDS_PARAM,
    MOVING_REVISION_PARAM,
    PARAMS,
    RAY_CPU_REPLICA_PARAMS,
    RAY_GPU_REPLICA_PARAM,
    RAY_REPLICA_PARAMS,
    STAGES,
    Stage,
    config_type,
    fanout_problems,
)


def ray_mix_problems(values: dict[str, str]) -> list[str]:
    """CPU and GPU workers in one Ray Train run: refused. One DDP group has one backend (Gloo on CPUs, NCCL on GPUs)
    and runs at its slowest worker's pace."""
    gpu = RAY_GPU_REPLICA_PARAM
    if values.get("train-backend") != "ray" or not values.get(gpu, "0").isdigit():
        return []
    cpu = {n: values.get(n, "0") for n in RAY_CPU_REPLICA_PARAMS}
    used = {n: v for n, v in cpu.items() if v.isdigit() and int(v) > 0}
    if int(values.get(gpu, "0")) == 0 or not used:
        return []
    settings = ", ".join(f"{n}={v}" for n, v in used.items())
    zeros = " ".join(f"-p {n}=0" for n in used)
    return [
        f"--{gpu} {values[gpu]} with CPU workers ({settings}): CPU and GPU workers cannot train in "
        f"one DDP group; for the GPU box alone submit with {zeros}, or drop the GPU with -p {gpu}=0"
    ]


def ray_worker_problems(values: dict[str, str]) -> list[str]:
    """A Ray run with no worker pod in any group: refused here, before the RayJob starts a head that waits for
    workers that never come (train's own `--ray-workers` check would only run inside that cluster)."""
    counts = {n: values.get(n, "0") for n in RAY_REPLICA_PARAMS}
    if values.get("train-backend") != "ray" or not all(v.isdigit() for v in counts.values()):
        return []
    if any(int(v) > 0 for v in counts.values()):
        return []
    return [
        f"train-backend ray with no Ray worker pods ({', '.join(f'{n}=0' for n in counts)}): set at least one "
        f"group, e.g. -p {RAY_CPU_REPLICA_PARAMS[0]}=1"
    ]


# The RayJob's entrypoint is a shell command line (Ray runs it through `sh -c`) that the render quotes word by word,
# and Argo substitutes the train step's values into it raw at run time: a `'`, `;`, `$`, space or newline in one
# would break out of its quotes (or the manifest's YAML). Only these characters may reach it: enough for model ids
# (org/name), git revisions, numbers, booleans and choices.
ENTRYPOINT_SAFE = re.compile(r"[A-Za-z0-9._/:@+,=-]*")


def ray_entrypoint_problems(values: dict[str, str]) -> list[str]:
    """Every train parameter a Ray run substitutes into the RayJob's shell entrypoint, held to ENTRYPOINT_SAFE."""
    if values.get("train-backend") != "ray":
        return []
    train = next(s for s in STAGES if s.name == "train")
    return [
        f"--{name} {values[name]!r}: the Ray backend passes it through a shell command line; use only letters, "
        "digits and . _ / : @ + , = -"
        for name in train.params
        if name in values and not ENTRYPOINT_SAFE.fullmatch(values[name])
    ]


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


COMMIT = re.compile(r"[0-9a-f]{40}")


def base_revision_problems(values: dict[str, str]) -> list[str]:
    """The base model's revision on the cluster: a full commit sha, unless the run says a moving one is meant."""
    revision = values.get("base-revision", "")
    if COMMIT.fullmatch(revision) or values.get(MOVING_REVISION_PARAM) == "true":
        return []
    return [
        f"--base-revision {revision!r} is not a commit: a branch or tag can move between the steps that read the base "
        "(preflight, train, convert-gguf) and after the run, so what was trained is not what the lineage names. Give "
        "the 40-hex commit (git ls-remote https://huggingface.co/<base-model> <branch>, or the hub page's commit "
        f"history), or submit with -p {MOVING_REVISION_PARAM}=true to train from a moving revision on purpose"
    ]


def _stage_problems(stage: Stage, values: dict[str, str]) -> list[str]:
    config_cls = config_type(stage)
    parser = build_parser(config_cls, stage.help)
    types = flag_types(config_cls)
    argv: list[str] = []
    # Folders the run supplies (the stage's inputs, and any other flag the step requires): any placeholder parses,
    # and it stands for a folder that is there (train's --kd-targets, when kd-weight > 0).
    supplied = [f.name.replace("_", "-") for f in dataclasses.fields(config_cls) if _required(f)]
    for name in dict.fromkeys([*supplied, *stage.inputs]):
        argv += [f"--{name}", "-"]
    # Each value on its own, so that every mistyped one is named, not only a stage's first; the step's own rules
    # then judge the rest (a mistyped value stands aside for its default there).
    found = []
    for name in stage.params:
        try:
            types[name](values[name])
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            kind = getattr(types[name], "__name__", "")
            why = str(e) if isinstance(e, argparse.ArgumentTypeError) else f"invalid {kind} value: {values[name]!r}"
            found.append(f"argument --{name}: {why}")
        else:
            argv.append(f"--{name}={values[name]}")  # one word: a value may start with "-" (-1e-3)
    namespace = parser.parse_args(argv)
    check = getattr(importlib.import_module(stage.module), "config_problems", None)
    return found + (check(config_cls(**vars(namespace))) if check else [])


def problems(values: dict[str, str]) -> list[str]:
    """Every problem with the workflow's parameter values, each once, in pipeline order."""
    found: list[str] = []
    for stage in STAGES:
        found += _stage_problems(stage, values)
    for name in RAY_REPLICA_PARAMS:
        value = values.get(name, "0")
        if not value.isdigit():
            found.append(f"--{name} {value!r}: a replica count, 0 or more")
    found += ray_mix_problems(values)
    found += ray_worker_problems(values)
    found += ray_entrypoint_problems(values)
    found += base_revision_problems(values)
    if values.get(MOVING_REVISION_PARAM, "false") not in ("true", "false"):
        found.append(f"--{MOVING_REVISION_PARAM} {values[MOVING_REVISION_PARAM]!r}: true or false")
    fanout = {p.name: values.get(p.name, p.cluster or "") for p in EVALUATE_FANOUT_PARAMS}
    found += fanout_problems(fanout[EVALUATE_SHARDS_PARAM], fanout[EVALUATE_PARALLELISM_PARAM])
    return list(dict.fromkeys(found))


def local_problems(values: dict[str, str]) -> list[str]:
    """Every problem with the embedded run's values: each stage's own rules, and the base model's folder (here, the
    folder every local step reads)."""
    found: list[str] = []
    for stage in STAGES:
        found += _stage_problems(stage, values)
    return list(dict.fromkeys(found + base_model_problems(values["base-model"])))


def _text(value: object) -> str:
    """A params.yaml value as the command line gives it to the step (dvc.yaml's `${name}`)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def local_values(params: Path, settings: list[str]) -> tuple[dict[str, str], list[str]]:
    """params.yaml's values with each `-S NAME=VALUE` (or `-S params.yaml:NAME=VALUE`) applied, and the settings
    that name no parameter of it."""
    import yaml

    values = {name: _text(v) for name, v in (yaml.safe_load(params.read_text()) or {}).items()}
    unknown = []
    for setting in settings:
        pair = name_value(setting)
        name = pair[0].rpartition(":")[2] if pair else ""
        if not pair or name not in values:
            unknown.append(f"-S {setting}: use NAME=VALUE with NAME a parameter of {params}")
        else:
            values[name] = pair[1]
    return values, unknown


def local_main(argv: list[str]) -> int:
    # No --help of its own and unknown flags let through: scripts/run_local.sh hands it `dvc exp run`'s arguments.
    parser = argparse.ArgumentParser(prog="python -m steps.check_parameters", add_help=False)
    parser.add_argument("--local", type=Path, required=True, help="the embedded run's params.yaml")
    parser.add_argument("-S", "--set-param", dest="settings", action="append", default=[], help="NAME=VALUE")
    args, _ = parser.parse_known_args(argv)
    values, found = local_values(args.local, args.settings)
    found += local_problems(values)
    if found:
        print(f"check-parameters: {len(found)} invalid parameter(s) in {args.local} and -S; nothing was run:",
              file=sys.stderr)  # fmt: skip
        for problem in found:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--local" or a.startswith("--local=") for a in argv):
        return local_main(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for p in PARAMS:
        parser.add_argument(f"--{p.name}", required=True, help=p.help)
    for name in RAY_REPLICA_PARAMS:
        parser.add_argument(f"--{name}", default="0", help="Ray worker pods in that group")
    for p in EVALUATE_FANOUT_PARAMS:
        parser.add_argument(f"--{p.name}", default=p.cluster, help=p.help)
    parser.add_argument(f"--{MOVING_REVISION_PARAM}", default="false", help="let a branch or tag be the base revision")
    # Read by local_main, which main hands the command line to when --local is given: listed here for --help.
    parser.add_argument("--local", metavar="PARAMS_YAML", help="the embedded run's params.yaml instead of the flags "
                        "above: its stages' rules and the base-model folder, not the cluster's own")  # fmt: skip
    parser.add_argument("-S", "--set-param", metavar="NAME=VALUE", action="append",
                        help="with --local: a value over the file's, as dvc exp run -S takes it")  # fmt: skip
    given = vars(parser.parse_args(argv))
    values = {k.replace("_", "-"): v for k, v in given.items() if k not in ("local", "set_param")}
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
