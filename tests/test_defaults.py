"""One default per setting: a pipeline parameter's value is its steps' own config default (`STEP`), unless the run
means another value; and the checkpoint fingerprint covers every training setting that changes the trajectory."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap

import pytest
import yaml

import steps
from steps import pipeline
from steps.core.defaults import SHARED, Shared
from steps.train.checkpoints import RESUME_FIELDS
from steps.train.config import TrainConfig

ALL_PARAMS = {id(p): p for pl in pipeline.PIPELINES for p in pl.params}.values()


@pytest.mark.parametrize("p", ALL_PARAMS, ids=lambda p: p.name)
def test_no_parameter_restates_its_steps_default_as_a_literal(p: pipeline.Param):
    """A literal equal to the one default every step taking the parameter gives it is a second copy: say STEP."""
    defaults = pipeline.step_defaults(p.name)
    values = {pipeline.as_param(v) for v in defaults.values() if v is not dataclasses.MISSING}
    if len(values) != 1 or dataclasses.MISSING in defaults.values():
        return  # the steps disagree (or one has no default): the pipeline must say which
    step = yaml.safe_load(next(iter(values)))
    for column, given in (("local", p.local_value), ("cluster", p.cluster_value)):
        assert not isinstance(given, str) or yaml.safe_load(given) != step, (  # as values: "0.0" restates 0
            f"Param {p.name!r} {column} = {given!r} restates the default of {', '.join(defaults)}; write STEP"
        )


@pytest.mark.parametrize("p", ALL_PARAMS, ids=lambda p: p.name)
def test_every_step_parameter_resolves(p: pipeline.Param):
    assert isinstance(p.local, str) and (p.cluster is None or isinstance(p.cluster, str))


def test_a_step_parameter_whose_steps_disagree_is_refused_naming_them():
    with pytest.raises(ValueError, match="kd-weight: STEP takes the steps' own default, but they give"):
        pipeline.step_default("kd-weight")  # kd-targets scores by default, train trains without KD


# TrainConfig's fields that do not change what the run computes, each with why; every other field is in the
# checkpoint fingerprint (RESUME_FIELDS), so a new training setting fails here until it is put on one side.
NOT_TRAJECTORY = {
    "dataset": "a location: the examples themselves are fingerprinted",
    "out": "where the adapter goes",
    "train_backend": "where it runs; the same loop (a resume may move between launchers)",
    "micro_batch": "splits a global batch; gradients accumulate to the same step (tests/test_train.py)",
    "gradient_checkpointing": "recomputes activations, same gradients",
    "packing": "a batch layout; the loss per example is the same",
    "threads": "speed only",
    "log_every": "printing",
    "precision": "recorded on the result; a resume may change it on purpose (both are recorded)",
    "checkpoint_dir": "where checkpoints go",
    "checkpoint_every": "when checkpoints are written",
    "ray_address": "which cluster",
    "ray_workers": "how the global batch is shared; the same global batch",
    "ray_gpu": "which devices",
    "max_failures": "how often to retry",
    "run_id": "a name",
    "kd_targets": "a location: its content is checked against the examples (kd_sidecar.load_targets)",
}


def test_every_training_setting_is_fingerprinted_or_said_not_to_change_the_run():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(RESUME_FIELDS) | set(NOT_TRAJECTORY) == fields, (
        f"classify {sorted(fields - set(RESUME_FIELDS) - set(NOT_TRAJECTORY))} in RESUME_FIELDS "
        f"(steps/train/checkpoints.py) or NOT_TRAJECTORY here; stale: "
        f"{sorted((set(RESUME_FIELDS) | set(NOT_TRAJECTORY)) - fields)}"
    )
    assert not set(RESUME_FIELDS) & set(NOT_TRAJECTORY)


# --- A default is written once: no step config restates another's literal -----------------------------------------

SHARED_NAMES = tuple(f.name for f in dataclasses.fields(Shared))


def default_source(config: type, name: str) -> ast.expr | None:
    """The expression a config's field `name` takes its default from (`field(default=…)` or `name: T = …`), read from
    the source of the class in its MRO that declares it; None when it has none."""
    owner = next(c for c in config.__mro__ if name in vars(c).get("__annotations__", {}))
    [node] = ast.parse(textwrap.dedent(inspect.getsource(owner))).body
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and getattr(statement.target, "id", None) == name:
            value = statement.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                return next((k.value for k in value.keywords if k.arg == "default"), None)
            return value
    raise AssertionError(f"{owner.__name__}.{name}: not found in its source")


def is_literal(node: ast.expr | None) -> bool:
    if node is None:
        return False
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def step_configs() -> dict[str, type]:
    """Every step module's config dataclass (`<X>Config` in a module of steps.STEP_MODULES), by module."""
    found = {}
    for group in steps.STEP_MODULES.values():
        for name in group:
            module = importlib.import_module(f"steps.{name}")
            for key, value in vars(module).items():  # check_parameters has none: it takes every parameter
                if key.endswith("Config") and dataclasses.is_dataclass(value):
                    found[name] = value
    return found


# Fields of a shared name that mean something else by their default, with why.
NOT_SHARED = {
    "check_triggers.base_model": "empty: the trigger compares the revision only",
    "check_triggers.base_revision": "empty: the base-model trigger is off",
}


def test_every_shared_setting_reads_its_one_default():
    """Every step's config field named as a SHARED setting (steps/core/defaults.py) defaults to SHARED's value, read
    from it, never a literal of its own."""
    checked = []
    for module, config in step_configs().items():
        for f in dataclasses.fields(config):
            if f.name in SHARED_NAMES and f"{module}.{f.name}" not in NOT_SHARED:
                checked.append(f"{module}.{f.name}")
                assert not is_literal(default_source(config, f.name)), (
                    f"{config.__name__}.{f.name} writes its default as a literal: read SHARED.{f.name}"
                )
                assert f.default == getattr(SHARED, f.name), f"{config.__name__}.{f.name}"
    assert len(checked) > len(SHARED_NAMES), checked  # the walk found the configs


def literal_copies() -> dict[str, list[str]]:
    """Each pipeline parameter whose default two or more of its stages' configs write as the same literal, each in a
    class of its own (a field inherited from one class, MlflowSettings', is one default): the stages that do. Stages
    that mean different defaults (kd-weight: kd-targets scores, train trains without KD) are not copies."""
    found: dict[str, list[str]] = {}
    for name in {p.name for pl in pipeline.PIPELINES for p in pl.params}:
        by_value: dict[str, dict[type, str]] = {}
        for stage in (s for pl in pipeline.PIPELINES for s in pl.stages if name in s.params):
            config, attribute = pipeline.config_type(stage), name.replace("-", "_")
            source = default_source(config, attribute)
            if is_literal(source):
                owner = next(c for c in config.__mro__ if attribute in vars(c).get("__annotations__", {}))
                by_value.setdefault(pipeline.as_param(ast.literal_eval(source)), {}).setdefault(owner, stage.name)
        copies = [stage for owners in by_value.values() if len(owners) > 1 for stage in owners.values()]
        if copies:
            found[name] = copies
    return found


def test_no_step_default_restates_another_steps_literal():
    """A default two stages take is written once (SHARED), not as a literal in each stage's config."""
    found = literal_copies()
    assert not found, f"defaults written as the same literal in several stages' configs: {found}; put them in SHARED"


# --- The embedded run's base model folder is written once: SHARED.base_model ----------------------------------------

CODE_FOLDERS = ("steps", "workflows", "scripts", "benchmarks", "tests")


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the module's, classes' and functions' docstring nodes: prose, which may show a command line."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def path_texts(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of every string the code writes: each string constant but the docstrings, and each chain of
    `/` joins read with its string parts put together (`ROOT / ".cache" / "models" / name` -> ".cache/models/name")."""
    skip, texts = docstrings(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            texts.append((node.lineno, node.value))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts, stack = [], [node]
            while stack:  # the chain's leaves, left to right
                part = stack.pop()
                if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Div):
                    stack += [part.right, part.left]
                else:
                    parts.append(part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "")
            texts.append((node.lineno, "/".join(parts)))
    return texts


def base_model_copies() -> list[str]:
    """Where code in the repository writes the embedded run's base folder (SHARED.base_model) itself, instead of
    reading it: its Python (not its docstrings) and its shell scripts' commands (not their comments)."""
    from tests.conftest import ROOT

    owner = ROOT / "steps/core/defaults.py"
    found = set()
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != owner:
                found |= {f"{path.relative_to(ROOT)}:{line}" for line, text in path_texts(ast.parse(path.read_text()))
                          if SHARED.base_model in text}  # fmt: skip
    for path in sorted((ROOT / "scripts").glob("*.sh")):
        for line, text in enumerate(path.read_text().splitlines(), 1):
            if SHARED.base_model in text.partition("#")[0]:
                found.add(f"{path.relative_to(ROOT)}:{line}")
    return sorted(found)


def test_the_base_model_folder_is_written_once():
    """scripts/prepare_base_model.py fills SHARED.base_model, the steps read it, and scripts/setup.sh and the
    benchmarks take it from there: a second copy in code is a place that stays behind when the base moves."""
    found = base_model_copies()
    assert not found, f"{SHARED.base_model!r} written in {found}: read steps.core.defaults.SHARED.base_model"


def test_a_copy_of_the_base_model_folder_is_found():
    *folders, name = SHARED.base_model.split("/")
    tree = ast.parse(f'"""{SHARED.base_model}"""\nA = ROOT / {" / ".join(map(repr, folders))} / "{name}"')
    assert [line for line, text in path_texts(tree) if SHARED.base_model in text] == [2]
