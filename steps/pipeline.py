"""The one definition of the pipeline: its parameters and its stages, in dependency order.

Both runners are generated from this module and nothing else: `workflows/distill.py` builds the Argo
WorkflowTemplate from it, and `workflows/render.py` writes `dvc.yaml` and `params.yaml` (the embedded local run) from
it. Each stage runs `python -m <module>` with `--<param> <value>` for each pipeline parameter it takes and
`--<input> <folder>` for each upstream output it reads; parameter names are the steps' own flag names.

A stage with a `When` runs only when a parameter says so (`kd-targets` when `kd-weight` > 0, `push-adapter` when
`adapter-repo` is set). The rule is `When.holds` (steps/core/switches.py): on Argo the task gets a `when` rendered
from it and is skipped (no pod); locally, where DVC has no conditions, the step runs and, given the parameter as a
flag, does nothing but say so and write an output that says it was off (`When.holds` again). A stage that reads a
conditional stage's output reads it only when that stage ran (train reads the KD targets only when `kd-weight` > 0).

Plain data, no imports of hera and no heavy imports, so rendering and `--help` stay instant.
"""

# One module, though long: it is data — the parameters and the stages of both pipelines, read top to bottom — and
# splitting it would put the one definition in two places.
from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from steps import sizing
from steps.core.switches import KD_ON, PUSH_ON, When

LOCAL_OUT = "out"  # the embedded run's stage folders: out/<output>


# One default per setting: where a parameter's value is what the steps taking it default to anyway, the Param says
# STEP and the value is read from their config dataclasses (`step_default`); a literal stays only where the run differs
# from the step run by hand (the cluster's hub base, the embedded run's MLflow store). tests/test_defaults.py holds
# every literal to that.
class _StepDefault:
    """`STEP`: a parameter's value is the default of the config field of the steps that take it (`step_default`)."""

    def __repr__(self) -> str:
        return "STEP"


STEP = _StepDefault()


@dataclass(frozen=True)
class Param:
    name: str
    local_value: str | _StepDefault  # the embedded run's value (params.yaml); STEP: the steps' own default
    cluster_value: str | _StepDefault | None  # the WorkflowTemplate's default; None: required at submit; STEP: as local
    help: str

    @property
    def local(self) -> str:
        return step_default(self.name) if isinstance(self.local_value, _StepDefault) else self.local_value

    @property
    def cluster(self) -> str | None:
        return step_default(self.name) if isinstance(self.cluster_value, _StepDefault) else self.cluster_value


@dataclass(frozen=True)
class Stage:
    name: str  # Argo task name and DVC stage name
    module: str  # python -m <module>
    config: str  # its config dataclass, an attribute of `module`: the flags it takes (`config_type`)
    output: str  # name of the folder it produces (an Argo artifact, a DVC out)
    params: tuple[str, ...]  # pipeline parameters passed as --<name>
    inputs: tuple[str, ...] = ()  # upstream outputs passed as --<output name> <folder>
    exports: tuple[str, ...] = ()  # scalar results Argo exposes as output parameters
    after: tuple[str, ...] = ()  # stages that must succeed first, though their folders are not read
    run_id: bool = False  # on Argo, gets --run-id {{workflow.uid}}; locally the step derives its own
    when: When | None = None  # runs only when this holds (its parameter must be among `params`)
    help: str = ""
    # Files it reads that a parameter names (among `params`): locally a change to such a file reruns the stage.
    file_params: tuple[str, ...] = ()
    # Never "up to date": every run is new work (publish commits and tags a revision each time).
    always_changed: bool = False


PARAMS: tuple[Param, ...] = (
    # No cluster default: the example repository is not yours; `argo submit` refuses a run without it.
    Param("dataset-repo", ".", None, "git repo holding the dataset (URL); required on the cluster"),
    Param("dataset-rev", STEP, "main", "git rev of the dataset (branch, tag or commit)"),
    Param("dataset-path", STEP, STEP, "folder with train/eval/adversarial.jsonl"),
    Param(
        "base-model",
        STEP,
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "base model: hub id or folder",
    ),
    # The cluster's default is a commit (check-parameters refuses a moving branch there, #27): SmolLM2-135M-Instruct's
    # as public pins of its files cite it (not checked against the hub from here: no hub access in CI).
    Param(
        "base-revision",
        STEP,
        "a91318be21aeaf0879874faa161dcb40c68847e9",
        "hub revision of the base model (a commit on the cluster)",
    ),
    Param(
        "train-backend",
        STEP,
        "gpu",
        "where to train: gpu (EKS spot GPU pool), cpu (one pod) or ray (KubeRay RayJob on the CPU Ray pool)",
    ),
    Param("lora-r", STEP, STEP, "LoRA rank"),
    Param("lora-alpha", STEP, STEP, "LoRA alpha (usually 2 x rank)"),
    Param("lora-dropout", STEP, STEP, "LoRA dropout"),
    Param("learning-rate", STEP, "0.0002", "peak learning rate"),
    Param("warmup-ratio", STEP, STEP, "share of steps spent warming the learning rate up"),
    Param("epochs", STEP, "3", "passes over the training split"),
    Param("batch-size", STEP, "16", "examples per optimiser step"),
    Param(
        "micro-batch",
        STEP,
        STEP,
        "examples per forward/backward on each training worker (0: the largest its pod's memory holds; preflight "
        "sizes the pods)",
    ),
    Param(
        "gradient-checkpointing",
        STEP,
        STEP,
        "auto, on or off: recompute layers in backward (auto: only where one example does not fit without it)",
    ),
    Param("max-seq-len", STEP, STEP, "longest tokenised training example; longer documents are cut"),
    Param("packing", STEP, STEP, "several training examples per row, each attending only to itself"),
    Param("qlora", STEP, STEP, "gpu only: train on a 4-bit NF4 base (bitsandbytes)"),
    Param(
        "precision",
        STEP,
        STEP,
        "CPU training: auto (bf16 autocast where the CPU has AMX or AVX-512-BF16), fp32 or bf16; sized for it",
    ),
    Param("checkpoint-every", STEP, STEP, "checkpoint every N optimiser steps (a reclaimed pod resumes there)"),
    Param(
        "kd-weight",
        "0",
        "0",
        "logit-level distillation: share of train's loss that is the KL to the teacher's top-k (0: sequence-level "
        "only, and no kd-targets task; up to 1)",
    ),
    Param("kd-temperature", STEP, STEP, "temperature of the KD term (its KL is scaled by T squared; 1 keeps them)"),
    Param("kd-top-k", STEP, STEP, "kd-targets: the teacher's log-probabilities kept per summary token"),
    Param("teacher", STEP, STEP, "the teacher's entry in the teachers file"),
    Param("teachers-file", STEP, STEP, "the committed terms decisions"),
    Param(
        "teacher-gguf",
        STEP,
        STEP,
        "kd-targets: the teacher's GGUF, sharing the student's tokenizer (empty: its entry's gguf; on the cluster a "
        "file in the cpu image)",
    ),
    Param("seed", STEP, STEP, "seed for training and evaluation"),
    Param(
        "threads",
        STEP,
        STEP,
        "CPU threads of train, convert-gguf, evaluate (0: the CPUs the container may use; a Ray worker: its group's; "
        "on the cluster, when set, those pods request that many CPUs)",
    ),
    Param("quantization", STEP, STEP, "llama.cpp quantisation that is evaluated and served"),
    Param("quantizations", STEP, STEP, "quantisation ladder built besides F16"),
    Param("min-rouge-gain", STEP, STEP, "gate: lower bound of the ROUGE-L gain's interval must exceed this"),
    Param("confidence", STEP, STEP, "gate: confidence of the paired bootstrap interval"),
    Param(
        "max-attack-regression",
        STEP,
        STEP,
        "gate: δ; per family and rival, H0 'the candidate's pass rate is lower by >= δ' must be rejected to pass",
    ),
    Param("min-family-pass-rate", STEP, STEP, "gate: floor on every family's pass rate (its upper bound)"),
    Param("max-stop-regression", STEP, STEP, "gate: margin; the stop rate is refused when shown lower by more"),
    Param("min-stop-rate", STEP, STEP, "gate: floor on the share of answers that end by themselves (upper bound)"),
    Param(
        "gate-alpha",
        STEP,
        STEP,
        "gate: α of the exact tests; a candidate δ worse on any one family passes with probability <= α",
    ),
    Param("min-power", STEP, STEP, "gate: a safety comparison not rejected with less power is INCONCLUSIVE"),
    Param(
        "accept-inconclusive-safety",
        STEP,
        STEP,
        "gate: who accepts an INCONCLUSIVE safety verdict and why, recorded (empty: it does not propose)",
    ),
    Param(
        "accept-new-base",
        STEP,
        STEP,
        "register: '<who>: <why>' accepting a base GGUF other than the one the registry pinned for this base, or a "
        "first pin from the shared cache; recorded on the version (empty: refused)",
    ),
    Param("model-name", STEP, STEP, "MLflow registered model name"),
    Param("experiment", STEP, STEP, "MLflow experiment the run is recorded in"),
    Param(
        "tracking-uri",
        "sqlite:///.cache/mlflow/mlflow.db",
        "http://mlflow.mlflow.svc.cluster.local:5000",
        "MLflow tracking URI",
    ),
    Param("artifact-location", ".cache/mlflow/artifacts", STEP, "artifact root of a new MLflow experiment"),
    Param(
        "price-table",
        STEP,
        STEP,
        "price per node hour for the cost estimate (cpu, spot gpu, the whole ray cluster)",
    ),
    Param(
        "adapter-repo",
        "",
        "",
        "git repository (https://<gitea>/<owner>/<repo>.git) the adapter and its model card are pushed to; empty: "
        "no push-adapter",
    ),
)

STAGES: tuple[Stage, ...] = (
    Stage(
        "fetch-dataset",
        "steps.fetch_dataset",
        config="FetchConfig",
        output="dataset",
        params=("dataset-repo", "dataset-rev", "dataset-path"),
        exports=("dataset-commit", "dataset-hash"),
        help="get the dataset at a rev through DVC, validate it, record lineage",
        file_params=("dataset-path",),
    ),
    Stage(
        "preflight",
        "steps.preflight",
        config="PreflightConfig",
        output="preflight",
        params=(
            "base-model",
            "base-revision",
            "train-backend",
            "qlora",
            "max-seq-len",
            "batch-size",
            "micro-batch",
            "gradient-checkpointing",
            "lora-r",
            "quantizations",
            "precision",
            "epochs",
            "price-table",
            "threads",
        ),
        inputs=("dataset",),  # its train split's tokens give the forecast
        exports=("architecture", "parameters-billion", "forecast-seconds", *sizing.preflight_exports()),
        help="check in seconds that the base model can become a working GGUF, what each step needs, what training "
        "will take",
    ),
    Stage(
        "kd-targets",
        "steps.kd_targets",
        config="KDConfig",
        output="kd-targets",
        params=(
            "kd-weight",
            "teacher",
            "teachers-file",
            "teacher-gguf",
            "kd-top-k",
            "base-model",
            "base-revision",
            "max-seq-len",
            "threads",
        ),
        inputs=("dataset",),
        when=KD_ON,
        help="the teacher's top-k log-probabilities on every summary token, for train's KD term (kd-weight > 0)",
        file_params=("teachers-file",),
    ),
    Stage(
        "train",
        "steps.train",
        config="TrainConfig",
        output="adapter",
        params=(
            "base-model",
            "base-revision",
            "train-backend",
            "lora-r",
            "lora-alpha",
            "lora-dropout",
            "learning-rate",
            "warmup-ratio",
            "epochs",
            "batch-size",
            "micro-batch",
            "gradient-checkpointing",
            "max-seq-len",
            "packing",
            "qlora",
            "precision",
            "checkpoint-every",
            "kd-weight",
            "kd-temperature",
            "seed",
            "threads",
        ),
        inputs=("dataset", "kd-targets"),  # the KD targets are read only when kd-weight > 0 (KD_ON)
        exports=("final-loss",),
        after=("preflight",),  # refuses a base llama.cpp cannot serve before any training; sized by its plan
        run_id=True,
        help="LoRA distillation of the teacher's summaries",
    ),
    Stage(
        "convert-gguf",
        "steps.convert_gguf",
        config="ConvertConfig",
        output="gguf",
        params=("base-model", "base-revision", "model-name", "quantization", "quantizations", "threads"),
        inputs=("adapter", "dataset"),
        exports=("parity-passed", "candidate-gguf", "base-gguf"),
        after=("preflight",),  # sized by its plan
        run_id=True,
        help="merge, convert with llama.cpp, quantise, prove parity with HF",
    ),
    Stage(
        "evaluate",
        "steps.evaluate",
        config="EvaluateConfig",
        output="evaluation",
        params=(
            "min-rouge-gain",
            "confidence",
            "max-attack-regression",
            "min-family-pass-rate",
            "max-stop-regression",
            "min-stop-rate",
            "gate-alpha",
            "min-power",
            "accept-inconclusive-safety",
            "seed",
            "threads",
            "tracking-uri",
            "model-name",
        ),
        inputs=("dataset", "gguf"),
        exports=("decision",),
        after=("preflight",),  # sized by its plan
        run_id=True,  # the shards and the gather bind their signed records to the run (steps/core/verdict.py RUN)
        help="base, champion and candidate GGUF on eval + adversarial sets; the gate",
    ),
    Stage(
        "register",
        "steps.register",
        config="RegisterConfig",
        output="registration",
        params=(
            "model-name",
            "tracking-uri",
            "experiment",
            "artifact-location",
            "base-model",
            "base-revision",
            "train-backend",
            "price-table",
            "accept-new-base",
        ),
        inputs=("dataset", "adapter", "gguf", "evaluation", "preflight"),  # preflight: its forecast, beside the run's
        exports=("model-version",),
        run_id=True,
        help="MLflow model version with scores and lineage",
    ),
    Stage(
        "propose",
        "steps.propose",
        config="ProposeConfig",
        output="proposal",
        params=("tracking-uri",),
        inputs=("registration", "evaluation"),
        exports=("proposed",),
        run_id=True,  # refuses a decision from another run
        help="set the challenger alias iff the gate passed",
    ),
    Stage(
        "push-adapter",
        "steps.push_adapter",
        config="PushConfig",
        output="push",
        params=("adapter-repo", "tracking-uri"),
        inputs=("registration", "adapter", "evaluation", "gguf", "dataset"),
        exports=("pushed", "commit"),
        run_id=True,  # pushes the version the registry says this run registered, not the one result.json names
        after=("propose",),  # the version's aliases are settled first; every registered version is kept, its card
        # says whether it passed the gate
        when=PUSH_ON,
        help="the adapter and its model card, committed to a git repository (Gitea) when adapter-repo is set",
    ),
)


def param(name: str, params: tuple[Param, ...] = PARAMS) -> Param:
    return next(p for p in params if p.name == name)


def config_type(stage: Stage) -> type:
    """The stage's config dataclass (`Stage.config`), importing its module: heavy for some stages, so only on call."""
    return getattr(importlib.import_module(stage.module), stage.config)


def as_param(value: object) -> str:
    """A config field's default as a workflow parameter's text: booleans as `true`/`false`, floats shortest (0.05,
    1), the rest as str."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def step_defaults(name: str) -> dict[str, object]:
    """The default of the config field behind parameter `name` in each stage (of either pipeline) that takes it, by
    stage name (MISSING where the field has none)."""
    found = {}
    for pipeline in PIPELINES:
        for stage in pipeline.stages:
            if name in stage.params:
                field_ = {f.name: f for f in dataclasses.fields(config_type(stage))}[name.replace("-", "_")]
                has_factory = field_.default_factory is not dataclasses.MISSING
                found[stage.name] = field_.default_factory() if has_factory else field_.default
    return found


@functools.cache
def step_default(name: str) -> str:
    """The value of a `STEP` parameter: the one default every step taking it gives its config field (one default per
    setting: the step's dataclass holds it, the pipeline reads it). ValueError when the steps disagree or have none."""
    defaults = step_defaults(name)
    values = {as_param(v) for v in defaults.values() if v is not dataclasses.MISSING}
    if len(values) != 1 or dataclasses.MISSING in defaults.values():
        raise ValueError(
            f"parameter {name}: STEP takes the steps' own default, but they give {defaults}; give the Param its value"
        )
    return values.pop()


# --- Cluster-only parameters: the Ray worker groups' replica counts -----------------------------------------------
# Workflow parameters only Argo has (not in params.yaml or dvc.yaml): the RayJob's groups (workflows/rayjob.py), the
# distill template's arguments (workflows/distill.py) and check-parameters read them by these names.


def ray_replicas_param(group: str) -> str:
    """The workflow parameter holding the replica count of the Ray worker group `group`."""
    return f"ray-{group}-workers"


RAY_CPU_REPLICA_PARAMS = tuple(ray_replicas_param(g.name) for g in sizing.RAY_NODE_GROUPS)
RAY_GPU_REPLICA_PARAM = ray_replicas_param(sizing.RAY_GPU_GROUP)
RAY_REPLICA_PARAMS = (*RAY_CPU_REPLICA_PARAMS, RAY_GPU_REPLICA_PARAM)  # the CPU groups', then the GPU group's
# On the cluster `base-revision` must be a commit (what was trained is then what the lineage names, and a pushed branch
# cannot change it between preflight and convert-gguf); this cluster-only flag lets a branch or tag through on purpose.
MOVING_REVISION_PARAM = "allow-moving-base-revision"


# --- Cluster-only parameters: evaluate's fan-out ------------------------------------------------------------------
# On the cluster, evaluate runs as `evaluate-shards` pods, each `python -m steps.evaluate --shard i/k` on every k-th
# document, and a gather pod that decides (`--gather`); locally it is one process. How many shards and how many run at
# once are workflow parameters (Argo's template `parallelism` takes no parameter, argo-workflows#1780): the shards are
# dealt into `parallelism` lanes (`shard_lanes`), the lanes run side by side and each runs its shards one after the
# other. check-parameters holds both to `fanout_problems`; `steps.evaluate.fanout` emits the lanes.
EVALUATE_SHARDS_PARAM = "evaluate-shards"
EVALUATE_PARALLELISM_PARAM = "evaluate-parallelism"
EVALUATE_FANOUT_MODULE = "steps.evaluate.fanout"  # python -m: writes the lanes to LANES_FILE in its --out folder
LANES_FILE = "lanes.json"
MAX_EVALUATE_SHARDS = 64  # a shard is a pod (and on the GPU pool a node): more is scheduling, not speed
EVALUATE_FANOUT_PARAMS: tuple[Param, ...] = (
    Param(
        EVALUATE_SHARDS_PARAM,
        "1",
        "8",
        f"cluster only: evaluate's shards, pods that each answer every k-th document (1-{MAX_EVALUATE_SHARDS})",
    ),
    Param(
        EVALUATE_PARALLELISM_PARAM,
        "1",
        "4",
        "cluster only: evaluate's shards running at once (1 to the shard count); on the GPU pool each holds a GPU",
    ),
)
# Workflow parameters only check-parameters and the cluster run have, in the order the templates declare them.
CLUSTER_ONLY_PARAMS = (*RAY_REPLICA_PARAMS, MOVING_REVISION_PARAM, *(p.name for p in EVALUATE_FANOUT_PARAMS))


def fanout_problems(shards: str, parallelism: str) -> list[str]:
    """What is wrong with evaluate's fan-out settings (workflow parameter values, as strings), every problem at once."""
    found = []
    k = int(shards) if shards.isdigit() else None
    p = int(parallelism) if parallelism.isdigit() else None
    if k is None or not 1 <= k <= MAX_EVALUATE_SHARDS:
        found.append(f"--{EVALUATE_SHARDS_PARAM} {shards!r}: a whole number of shards from 1 to {MAX_EVALUATE_SHARDS}")
    if p is None or p < 1:
        found.append(f"--{EVALUATE_PARALLELISM_PARAM} {parallelism!r}: a whole number of shards at once, 1 or more")
    elif k is not None and p > k:
        found.append(
            f"--{EVALUATE_PARALLELISM_PARAM} {p} with {EVALUATE_SHARDS_PARAM} {k}: at most one lane per shard; use "
            f"{k} or fewer (or more shards)"
        )
    return found


def shard_lanes(shards: int, parallelism: int) -> list[list[dict[str, str]]]:
    """The shards `i/k` dealt into `parallelism` lanes (lane j: shards j, j + p, j + 2p, …), each shard as
    {"shard": "i/k", "index": "i"}: what the fan-out's withParam iterates over (a lane at a time per pod slot)."""
    problems = fanout_problems(str(shards), str(parallelism))
    if problems:
        raise ValueError("; ".join(problems))
    return [
        [{"shard": f"{i}/{shards}", "index": str(i)} for i in range(lane, shards, parallelism)]
        for lane in range(parallelism)
    ]


# --- build-dataset: documents and feedback in, a teacher's summaries under a terms gate, a dataset revision out ---
# A sibling pipeline, rendered the same way: the WorkflowTemplate `build-dataset` (workflows/build_dataset.py) and the
# local DVC stages in build-dataset/dvc.yaml + build-dataset/params.yaml (its own folder, so `dvc repro` of the distill
# run never starts a teacher or commits a dataset). Parameters it shares with distill are distill's own.
BUILD_PARAMS: tuple[Param, ...] = (
    Param("documents", STEP, None, "folder or s3://bucket/prefix/ with the PDF, text, Markdown, HTML files"),
    Param(
        "feedback",
        "data/feedback/feedback.jsonl",
        STEP,
        "the serving side's feedback JSONL (path or s3:// URI); empty: none",
    ),
    param("base-model"),
    param("base-revision"),
    param("teacher"),
    param("teachers-file"),
    Param("teacher-url", STEP, STEP, "the teacher's OpenAI-compatible URL; empty: serve its GGUF on 127.0.0.1"),
    Param(
        "adversarial-file",
        STEP,
        STEP,
        "the hand-written adversarial split, published as is",
    ),
    Param("eval-share", STEP, STEP, "share of documents (by a hash of each) held out for eval"),
    Param(
        "eval-references",
        STEP,
        STEP,
        "who may write eval references: curated (reviewed feedback only) or curated-or-teacher",
    ),
    Param(
        "min-eval-documents",
        STEP,
        STEP,
        "fewest documents held out for eval whatever eval-share gives; a build needs one more",
    ),
    Param(
        "dataset-repo",
        ".cache/dataset-repo",
        None,
        "git repo the dataset is published to (URL); required on the cluster",
    ),
    param("dataset-path"),
    Param(
        "dvc-remote", ".cache/dvc-remote", STEP, "DVC remote set on a dataset repo that has none; empty: the repo's own"
    ),
)

BUILD_STAGES: tuple[Stage, ...] = (
    Stage(
        "ingest",
        "steps.ingest",
        config="IngestConfig",
        output="chunks",
        params=("documents", "base-model", "base-revision"),
        exports=("documents", "chunks", "skipped"),
        help="extract, clean and chunk the documents to what the served prompt holds",
        file_params=("documents",),
    ),
    Stage(
        "feedback",
        "steps.feedback",
        config="FeedbackConfig",
        output="curated",
        params=("feedback",),
        exports=("curated",),
        help="curated summaries from the serving side; an edit supersedes the model's",
        file_params=("feedback",),
    ),
    Stage(
        "teacher",
        "steps.teacher",
        config="TeacherConfig",
        output="summaries",
        params=("teacher", "teachers-file", "teacher-url"),
        inputs=("chunks", "curated"),
        exports=("requests", "cached"),
        help="the teacher's summaries for uncurated documents, only if its terms allow distillation",
        file_params=("teachers-file",),
    ),
    Stage(
        "filter-split",
        "steps.filter_split",
        config="FilterConfig",
        output="examples",
        params=("adversarial-file", "eval-share", "eval-references", "min-eval-documents"),
        inputs=("chunks", "curated", "summaries"),
        exports=("train-rows", "eval-rows", "dropped"),
        help="filter, de-duplicate, decontaminate, split by each document's hash",
        file_params=("adversarial-file",),
    ),
    Stage(
        "publish",
        "steps.publish",
        config="PublishConfig",
        output="published",
        params=("dataset-repo", "dataset-path", "dvc-remote"),
        inputs=("examples", "chunks", "curated", "summaries"),
        exports=("dataset-rev", "dataset-commit", "dataset-hash"),
        help="dvc add + push, git commit + tag the dataset revision, data card",
        always_changed=True,  # it commits and tags: each run is a publication
    ),
)


@dataclass(frozen=True)
class Pipeline:
    name: str  # the WorkflowTemplate's name
    params: tuple[Param, ...]
    stages: tuple[Stage, ...]


DISTILL = Pipeline("distill", PARAMS, STAGES)
BUILD_DATASET = Pipeline("build-dataset", BUILD_PARAMS, BUILD_STAGES)
PIPELINES = (DISTILL, BUILD_DATASET)


def producer(output: str, stages: tuple[Stage, ...] = STAGES) -> Stage:
    """The stage that produces `output`."""
    return next(s for s in stages if s.output == output)


def upstream(stage: Stage, stages: tuple[Stage, ...] = STAGES) -> list[Stage]:
    """The stages `stage` reads from or waits for, in pipeline order."""
    names = {producer(i, stages).name for i in stage.inputs} | set(stage.after)
    return [s for s in stages if s.name in names]


def command(
    stage: Stage,
    folder: Callable[[str], str],
    value: Callable[[str], str],
    run_id: str | None = None,
    fixed: dict[str, str] | None = None,
) -> list[str]:
    """How every runner calls a stage: `python -m <module> --out <folder> --<input> <folder> … --<param> <value> …`.

    `folder(name)` spells where an output or input folder lives in that runner, `value(name)` a pipeline parameter's
    value; `fixed` are flags the runner sets itself (in a parameter's place when it is one, else after them); `run_id`
    is passed to a stage that takes one (`Stage.run_id`).
    """
    fixed = dict(fixed or {})
    argv = ["python", "-m", stage.module, "--out", folder(stage.output)]
    for name in stage.inputs:
        argv += [f"--{name}", folder(name)]
    for name in stage.params:
        argv += [f"--{name}", fixed.pop(name) if name in fixed else value(name)]
    for name, text in fixed.items():
        argv += [f"--{name}", text]
    if stage.run_id and run_id is not None:
        argv += ["--run-id", run_id]
    return argv
