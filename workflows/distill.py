"""WorkflowTemplate `distill`: the pipeline of `steps.pipeline` as an Argo DAG.

    argo submit --from workflowtemplate/distill -p dataset-rev=v3 -p train-backend=gpu

Every stage is a container template running `python -m <module>` in a step image from `images/` (repository, tag
and digest are render settings: `workflows/images.py`); folders travel as artifacts through the cluster's artifact
repository (S3), unarchived (Argo would otherwise gzip every output: minutes of CPU for GB of incompressible
weights). The run starts with `check-parameters` (`steps/check_parameters.py`): every parameter read the way the step
that takes it reads it, so a mistyped value stops the run at once, naming it and the choices (`argo submit -p` does not
enforce an enum, and a mistyped `train-backend` would otherwise skip all train tasks and end green).

`preflight` also sizes the run for its base model (`steps/sizing/`): each heavy pod takes its memory and disk from
preflight's outputs as a `podSpecPatch`, and the Ray worker groups their memory and workers per pod.

`train` has one template per backend, chosen by the `train-backend` parameter (a `when` on each):
- `train-gpu`: a pod on the EKS spot GPU pool (infra/karpenter: node selector, toleration of its `nvidia.com/gpu`
  taint), `karpenter.sh/do-not-disrupt` against consolidation, retried when spot capacity is reclaimed — at any time
  before the workflow's deadline (no `maxDuration`: Argo counts it from the first attempt's start and kills a retry
  at that same mark);
- `train-cpu`: one pod on any node;
- `train-ray`: an Argo resource template that creates the KubeRay RayJob of `workflows/rayjob.py` and waits on its
  status (owner-referenced to the workflow, so deleting the workflow deletes it).
Whichever ran, the adapter lands at one fixed key of the run, `runs/{{workflow.uid}}/adapter` (the gpu and cpu pods
as their output artifact, the RayJob by writing there itself, result.json last), and `convert-gguf` and `register`
read it from that key: no task has to pick among three optional outputs (Argo refuses an argument artifact given by
`fromExpression` alone: `validateArgumentsValues`).

Two tasks run only when a parameter asks for them (`steps.core.switches.When`, rendered as the task's `when`; skipped
otherwise, no pod):
- `kd-targets` when `kd-weight` > 0: the teacher's top-k log-probabilities (steps/kd_targets.py) at the run's key
  `runs/{{workflow.uid}}/kd-targets`; the gpu and cpu train pods read them from there as an optional input artifact
  (absent when KD is off) and the RayJob's driver reads them from S3 itself, like the dataset. Train waits for the
  task to succeed or be skipped.
- `push-adapter` when `adapter-repo` is set, after propose: the adapter and its model card into the adapters
  repository (steps/push_adapter.py), its token the optional Secret `distillery-gitea` mounted as a file
  (`security.GITEA_FILES`). Egress: HTTPS (443) to the git server and MLflow, as every step
  (infra/networkpolicy/steps.yaml).

The exit handler (`onExit: cleanup`) frees the Ray pool when a run does not succeed. The owner reference only acts when
the Workflow object is deleted, so without it a stopped or failed run's RayJob and cluster would train on until the
RayJob's own activeDeadlineSeconds. Its one task, `delete-rayjob`, runs only when `{{workflow.status}}` is not
Succeeded and `train-backend` is `ray`: a resource template that deletes the RayJob by its deterministic name,
`distill-{{workflow.uid}}` (`rayjob.NAME`), with `--ignore-not-found` (harmless when none was created: preflight
failed first, or the stop came before the create). KubeRay's finalizer stops the Ray job and the RayCluster goes with
the RayJob that owns it. What runs it: `argo stop` (exit handlers run), a failed step, the workflow's
activeDeadlineSeconds (Argo runs exit handlers past the deadline). What does not: `argo terminate`, which skips exit
handlers — then `kubectl delete rayjob -n distillery distill-<workflow uid>` by hand. After a failure the RayJob's
status goes with it; the RayCluster (and the head's logs) went when the job ended (`rayjob.TTL_AFTER_FINISHED_S` is 0:
no idle cluster holds nodes), whatever the outcome; a successful run's RayJob stays, a record of its status, until the
Workflow is deleted (owner reference). Nothing is lost for training:
Ray Train's checkpoints live under the run's S3 prefix (`runs/{{workflow.uid}}/ray/`), so `argo retry` (same workflow,
same uid) creates the RayJob again under the same name and resumes from the latest; `argo resubmit` is a new workflow
with a new uid and starts from step 0.

Each run has its own S3 prefix, `s3://<artifact bucket>/runs/{{workflow.uid}}/` (stable across retries of a pod, unique
per run):
- `dataset/`: fetch-dataset's output artifact lives there (a key-only artifact in the default artifact repository,
  unarchived), so the Ray job reads the very files the other tasks get, with no copy and no extra pod;
- `adapter/`: the train step's output, whichever backend ran (see above);
- `checkpoints/` (gpu, cpu) and `ray/` (Ray Train's storage path): `--checkpoint-dir`, so a retried spot pod or a
  restarted Ray worker group resumes from the latest complete checkpoint.
Identities, credentials and writable paths are `workflows/security.py`'s: step pods run as `distillery-steps` with no
API token in the step's own container (IRSA on EKS for S3), the resource templates as `distillery-submitter`, the Ray
pods as `distillery-ray`; each credential (MLflow, S3 at home, the model hub, git) is an optional Secret reference that
reaches only the steps that use it; every root filesystem is read-only, with emptyDirs for what steps write.

The Ray backend's replica counts are workflow parameters that only Argo knows (`CLUSTER_PARAMS`, named by
`steps.pipeline.ray_replicas_param`: not pipeline parameters, so neither in params.yaml nor dvc.yaml). A group gets 0
replicas when preflight finds that not one training worker fits its pods' memory (the Pis, for all but small bases);
`--ray-workers` is derived from the replica counts and the workers per pod by an expression on the `train-ray` task
(`rayjob.train_workers_expression`).
"""

# One module, though long: the WorkflowTemplate is one object whose templates and DAG share its constants; what every
# pod of every template shares is workflows/pods.py's, and the RayJob manifest workflows/rayjob.py's.

from __future__ import annotations

import json
from collections.abc import Sequence

from hera.workflows import (
    DAG,
    Artifact,
    Container,
    Parameter,
    Resource,
    RetryStrategy,
    S3Artifact,
    Task,
    WorkflowTemplate,
)
from hera.workflows import (
    models as m,
)

from steps import sizing
from steps.core.switches import When
from steps.gguf.report import REPORT_FILES
from steps.pipeline import (
    CLUSTER_ONLY_PARAMS,
    EVALUATE_FANOUT_MODULE,
    EVALUATE_FANOUT_PARAMS,
    EVALUATE_PARALLELISM_PARAM,
    EVALUATE_SHARDS_PARAM,
    LANES_FILE,
    MOVING_REVISION_PARAM,
    PARAMS,
    STAGES,
    Param,
    Stage,
    command,
    producer,
)
from workflows import rayjob, security
from workflows.deploy import BUCKET, DEPLOY, SHARD, SHARD_ARGS, SHARD_GGUF_READS
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images
from workflows.pods import (
    AMD64,
    ARCHIVE_LOGS,
    CONTAINER_SECURITY,
    DEFAULT_RETRY,
    IN_DIR,
    OUT_DIR,
    POD_SECURITY,
    SUBMITTER,
    UNARCHIVED,
    fixed_disk,
    fixed_resources,
    step_env,
    volume_mounts,
    volumes,
)

RUN_PREFIX = "runs/{{workflow.uid}}"
CHECK_TASK = "check-parameters"  # the cluster run's first task (steps/check_parameters.py); not a pipeline stage
PREFLIGHT = "preflight"  # the stage whose outputs size the others
GGUF = "gguf"  # convert-gguf's folder: F16, the ladder, the served quantisations of candidate and base, reports


def run_key(name: str) -> str:
    """This run's key for `name` in the artifact bucket."""
    return f"{RUN_PREFIX}/{name}"


def run_uri(name: str) -> str:
    return f"s3://{BUCKET}/{run_key(name)}"


# Workflow parameters only the cluster run has (steps.pipeline.CLUSTER_ONLY_PARAMS, in that order): Argo-only, so not
# among steps.pipeline.PARAMS (params.yaml, dvc.yaml).
CLUSTER_PARAMS = [
    *(
        Parameter(name=g.parameter, value=str(g.default_replicas), description=rayjob.parameter_help(g))
        for g in rayjob.WORKER_GROUPS
    ),
    Parameter(name=rayjob.GPU_GROUP.parameter, value="0", description=rayjob.gpu_parameter_help()),
    Parameter(
        name=MOVING_REVISION_PARAM,
        value="false",
        enum=["false", "true"],
        description="true: let base-revision be a branch or tag (check-parameters otherwise wants a commit)",
    ),
    *(Parameter(name=p.name, value=p.cluster, description=p.help) for p in EVALUATE_FANOUT_PARAMS),
]

# evaluate, fanned out (the fan-out's parameters and lanes are steps/pipeline.py's): `evaluate-fanout` deals the shards
# into lanes; `evaluate-shards` runs every lane side by side (a withParam over the lanes), each lane a DAG of
# parallelism 1 over its shards (so at most evaluate-parallelism shard pods at once, which no workflow parameter can
# set in Argo's own `parallelism` field: argo-workflows#1780); every shard pod runs `python -m steps.evaluate --shard
# i/k` and leaves its folder at EVALUATION_SHARDS/<k>/<i> of the run; the `evaluate` task gathers them all (one
# artifact, the whole prefix) and decides, so what downstream reads (`evaluation`, `decision`) is what it was. On
# train-backend gpu the shards run on the spot GPU pool in the cuda image, llama.cpp's layers on the card.
FANOUT_TASK = "evaluate-fanout"
FANOUT_OUTPUT = "lanes"
SHARDS_TASK = "evaluate-shards"
LANE_TEMPLATE = "evaluate-lane"
EVALUATION_SHARDS = "evaluation-shards"
SHARDS_INPUT = "shards"  # the lane's JSON list of {"shard": "i/k", "index": "i"}
GPU_LAYERS = ("--gpu-layers", "-1")  # every layer on the GPU (EvaluateConfig.gpu_layers)


# What the two light templates that are no pipeline stage ask a node for (the stages': their `deploy.DEPLOY` rows).
LIGHT_RESOURCES = {
    CHECK_TASK: fixed_resources("100m", "256Mi", "512Mi", disk_gib=1),  # reads parameters only
    FANOUT_TASK: fixed_resources("100m", "256Mi", "512Mi", disk_gib=1),  # writes the list of evaluate's shards
}
# The EKS spot GPU pool (infra/karpenter): tainted so only pods that ask for a GPU land there.
GPU_NODE_SELECTOR = {"karpenter.sh/nodepool": "gpu-spot", "karpenter.sh/capacity-type": "spot", **AMD64}
GPU_TOLERATIONS = [m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
# A spot reclaim deletes the pod (the node goes: Argo marks the attempt Error, exit code -1), or the two-minute notice
# reaches the train step, which flushes a checkpoint and exits 143 (Failed), or the node's shutdown kills it (137):
# retry all of these, at any time before the workflow's deadline; the new pod resumes from the run's latest
# checkpoint. Only the step's own verdicts are final: exit 1 (an error it raised) and 2 (a bad command line) would
# fail the same way again, on a GPU node, five times; nor is an OOM kill (Argo's node message `main: OOMKilled (exit
# code 137)`): the same pod at the same limit is killed again. No backoff.maxDuration: Argo measures it from the FIRST
# attempt's start and kills a running retry at that mark too (processNodeRetries: executionDeadline), so a run
# reclaimed after it would not be retried (tests/test_retry_timeline.py).
GPU_RETRY = RetryStrategy(
    limit="5",
    retry_policy="Always",
    expression="(lastRetry.status == 'Error' || lastRetry.exitCode not in ['1', '2'])"
    " && !(lastRetry.message contains 'OOMKilled')",
    backoff=m.Backoff(duration="30s", factor="2"),
)


def _parameter(name: str) -> str:
    return f"{{{{inputs.parameters.{name}}}}}"


def _args(stage: Stage) -> list[str]:
    """The step's container arguments; the container's command is `python`."""

    def folder(name: str) -> str:
        return f"{OUT_DIR}/{name}" if name == stage.output else f"{IN_DIR}/{name}"

    return command(stage, folder, _parameter, run_id="{{workflow.uid}}")[1:]


def _output(stage: Stage) -> Artifact:
    if DEPLOY[stage.name].keyed:
        return S3Artifact(
            name=stage.output, path=f"{OUT_DIR}/{stage.output}", key=run_key(stage.output), archive=UNARCHIVED
        )
    return Artifact(name=stage.output, path=f"{OUT_DIR}/{stage.output}", archive=UNARCHIVED)


def _inputs(name: str, gguf_reads: tuple[str, ...]) -> list[Artifact]:
    source = producer(name)
    if DEPLOY[source.name].read_by_key:  # optional where its producer may be skipped (Argo then skips it: not found)
        optional = True if source.when else None
        return [S3Artifact(name=name, path=f"{IN_DIR}/{name}", key=run_key(name), optional=optional)]
    if name == GGUF:  # only the files this step reads, each by its key
        files = [*REPORT_FILES, *(f"{{{{inputs.parameters.{p}}}}}" for p in gguf_reads)]
        return [
            S3Artifact(name=f"{GGUF}-{i}", path=f"{IN_DIR}/{GGUF}/{f}", key=f"{run_key(GGUF)}/{f}")
            for i, f in enumerate(files)
        ]
    return [Artifact(name=name, path=f"{IN_DIR}/{name}")]


# A stage's `When` as Argo's `when`: an expr-lang tag over the workflow parameter (the value never enters the
# expression's text, so no quote in it can break it), which the controller resolves to true or false before govaluate
# reads it (dag.go resolveDependencyReferences, steps.go shouldExecute). Each test is `When.holds`'s, in expr-lang;
# tests/test_optional_tasks.py runs both over the same values in Argo's own code.
WHEN_EXPRESSIONS = {"positive": "asFloat({value}) > 0", "set": "{value} != ''"}


def when_expression(when: When) -> str:
    value = f"workflow.parameters['{when.param}']"
    return "{{=" + WHEN_EXPRESSIONS[when.test].format(value=value) + "}}"


def _exports(stage: Stage, folder: str) -> list[Parameter]:
    return [Parameter(name=e, value_from=m.ValueFrom(path=f"{folder}/_outputs/{e}")) for e in stage.exports]


def _template(
    stage: Stage,
    name: str,
    image: str,
    extra_args: tuple[str, ...] = (),
    sized: str | None = None,
    gguf_reads: tuple[str, ...] | None = None,
    output: Artifact | None = None,
    extra_inputs: tuple[Parameter | Artifact, ...] = (),
    **extra: object,
) -> Container:
    """The stage's container template `name`; `gguf_reads`: the served GGUFs it downloads (default: its `Deploy`
    row's); `output`: its output artifact instead of the stage's (then no output parameters); `extra_inputs`: inputs
    besides the stage's."""
    deploy = DEPLOY[stage.name]
    gguf_reads = deploy.gguf_reads if gguf_reads is None else gguf_reads
    inputs: list[Parameter | Artifact] = [Parameter(name=p) for p in stage.params]
    if GGUF in stage.inputs:
        inputs += [Parameter(name=p) for p in gguf_reads]
    if sized:
        inputs += [Parameter(name=n) for n in sizing.size_inputs(sized)]
    inputs += extra_inputs
    return Container(
        name=name,
        image=image,
        command=["python"],
        args=_args(stage) + list(extra_args),
        inputs=inputs + [a for i in stage.inputs for a in _inputs(i, gguf_reads)],
        outputs=[output] if output else [_output(stage), *_exports(stage, f"{OUT_DIR}/{stage.output}")],
        resources=deploy.resources[name],
        security_context=CONTAINER_SECURITY,
        env=step_env(name),
        labels=security.pod_labels(name),
        volumes=volumes(name, None if sized else fixed_disk(deploy.resources[name])),
        volume_mounts=volume_mounts(name),
        retry_strategy=extra.pop("retry_strategy", DEFAULT_RETRY),
        pod_spec_patch=pod_spec_patch(sized, deploy.resources[name].requests["cpu"].root) if sized else None,
        node_selector=extra.pop("node_selector", AMD64),
        **extra,
    )


def _light_template(
    name: str, image: str, args: list[str], params: Sequence[str], outputs: list[Parameter] | None = None
) -> Container:
    """A small Python step of the cluster run that no pipeline stage is (check-parameters, evaluate-fanout): fixed
    resources, not sized by preflight, its inputs the workflow parameters `params`."""
    return Container(
        name=name,
        image=image,
        command=["python"],
        args=args,
        inputs=[Parameter(name=n) for n in params],
        outputs=outputs,
        resources=LIGHT_RESOURCES[name],
        security_context=CONTAINER_SECURITY,
        env=step_env(name),
        labels=security.pod_labels(name),
        volumes=volumes(name, fixed_disk(LIGHT_RESOURCES[name])),
        volume_mounts=volume_mounts(name),
        node_selector=AMD64,
        retry_strategy=DEFAULT_RETRY,
    )


def _check_template(image: str) -> Container:
    """`check-parameters`: every workflow parameter, checked by the steps' own rules before anything else runs."""
    names = [p.name for p in PARAMS] + list(CLUSTER_ONLY_PARAMS)
    args = ["-m", "steps.check_parameters"] + [a for n in names for a in (f"--{n}", f"{{{{inputs.parameters.{n}}}}}")]
    return _light_template(CHECK_TASK, image, args, names)


# Pipeline parameters the RayJob's entrypoint sets itself (`_ray_entrypoint`): the train-ray task does not take them.
RAY_FIXED_PARAMS = ("train-backend", "threads")


def _ray_entrypoint(stage: Stage) -> list[str]:
    """The train step's command line inside the RayJob: data and results through this run's S3 prefix."""
    fixed = {
        "train-backend": "ray",
        "ray-address": "auto",
        "ray-workers": _parameter("ray-workers"),
        "ray-gpu": _parameter(rayjob.RAY_GPU_INPUT),
        "threads": _parameter(rayjob.THREADS_INPUT),
        "max-failures": str(rayjob.MAX_FAILURES),
        "checkpoint-dir": run_uri("ray"),
    }
    return command(stage, run_uri, _parameter, run_id="{{workflow.uid}}", fixed=fixed)


def _ray_template(stage: Stage, image: str) -> Resource:
    """`train-ray`: create the RayJob and wait until it succeeds or reaches any other terminal state."""
    job = rayjob.rayjob(
        image=image,
        entrypoint_args=_ray_entrypoint(stage),
        service_account=security.RAY,
        pod_security=POD_SECURITY.model_dump(by_alias=True, exclude_none=True),
        container_security=CONTAINER_SECURITY.model_dump(by_alias=True, exclude_none=True),
        env=security.writable_env() + security.secret_env("train-ray"),
    )
    job_params = [p for p in stage.params if p not in RAY_FIXED_PARAMS]
    return Resource(
        name="train-ray",
        action="create",
        set_owner_reference=True,  # deleted with the workflow (and deletes its RayCluster)
        success_condition=rayjob.SUCCESS_CONDITION,
        failure_condition=rayjob.FAILURE_CONDITION,
        manifest=rayjob.manifest(job),
        inputs=[
            Parameter(name=p) for p in [*job_params, *rayjob.input_parameters(), "ray-workers", rayjob.RAY_GPU_INPUT]
        ],
        outputs=[Parameter(name="rayjob-name", value_from=m.ValueFrom(json_path="{.metadata.name}"))],
        **SUBMITTER,
        # No retry: a second create would start a second RayJob beside the first. Ray Train restarts lost workers
        # itself; a rerun of the workflow resumes from the run's checkpoints.
    )


def _ray_arguments(preflight: Task) -> list[Parameter]:
    """The RayJob's sizing, from preflight's plan and the requested replicas: a group whose pods cannot hold one
    training worker for this base gets no replicas (the Pis, for all but small bases)."""

    def out(name: str) -> str:
        return f"tasks['{preflight.name}'].outputs.parameters['{name}']"

    def whole(name: str) -> str:
        """preflight's output `name` read as a whole number: the RayJob's manifest quotes each value for YAML and its
        entrypoint for a shell, so a value with a quote in it (a compromised preflight) fails the task instead."""
        return f"{{{{=asInt({out(name)})}}}}"

    args = []
    per_pod = {g.name: out(sizing.ray_workers_output(g.name)) for g in rayjob.WORKER_GROUPS}
    replicas = {g.name: f"workflow.parameters['{g.parameter}']" for g in rayjob.WORKER_GROUPS}
    for g in rayjob.WORKER_GROUPS:
        args += [
            Parameter(name=g.parameter, value=f"{{{{=asInt({per_pod[g.name]}) > 0 ? {replicas[g.name]} : '0'}}}}"),
            Parameter(name=g.cpus_parameter, value=whole(sizing.ray_cpus_output(g.name))),
            Parameter(name=g.memory_parameter, value=whole(sizing.ray_memory_output(g.name)) + "Gi"),
            Parameter(name=g.disk_parameter, value=whole(sizing.ray_disk_output(g.name)) + "Gi"),
        ]
    args.append(Parameter(name=rayjob.THREADS_INPUT, value=whole(sizing.RAY_THREADS_OUTPUT)))
    gpu = rayjob.GPU_GROUP
    replicas[gpu.name] = f"workflow.parameters['{gpu.parameter}']"
    args.append(Parameter(name=gpu.parameter, value=f"{{{{workflow.parameters.{gpu.parameter}}}}}"))
    args.append(Parameter(name="ray-workers", value=rayjob.train_workers_expression(replicas, per_pod)))
    args.append(Parameter(name=rayjob.RAY_GPU_INPUT, value=rayjob.gpu_expression(replicas[gpu.name])))
    return args


# The exit handler's delete: waits for the RayJob to be gone (KubeRay's finalizer), but not forever if the operator is
# down; the deletion stays requested and completes when it is back.
DELETE_TIMEOUT = "5m"


def _exit_handler(backend: str) -> DAG:
    """`cleanup`, the workflow's onExit: delete this run's RayJob when the run did not succeed on the Ray backend."""
    delete = Resource(
        name="delete-rayjob",
        action="delete",
        manifest=rayjob.delete_manifest(),
        # Argo's executor adds --ignore-not-found to every delete itself; said here too, as this step relies on it.
        flags=["--ignore-not-found", f"--timeout={DELETE_TIMEOUT}"],
        retry_strategy=DEFAULT_RETRY,  # an exit-handler pod lost to a node drain must not leave the cluster running
        **SUBMITTER,
    )
    with DAG(name="cleanup") as dag:
        Task(
            name="delete-rayjob",
            template=delete,
            when=f"'{{{{workflow.status}}}}' != 'Succeeded' && '{backend}' == 'ray'",
        )
    return dag


def _train_templates(stage: Stage, images: Images) -> dict[str, Container | Resource]:
    # A fixed place per run, so the pod that replaces a reclaimed spot pod finds its predecessor's checkpoints.
    checkpoints = ("--checkpoint-dir", run_uri("checkpoints"))
    return {
        "gpu": _template(
            stage,
            "train-gpu",
            images.ref("cuda"),
            extra_args=checkpoints,
            sized="train-gpu",
            node_selector=GPU_NODE_SELECTOR,
            tolerations=GPU_TOLERATIONS,
            retry_strategy=GPU_RETRY,
            annotations={"karpenter.sh/do-not-disrupt": "true"},
        ),
        "cpu": _template(stage, "train-cpu", images.ref("cpu"), extra_args=checkpoints, sized="train-cpu"),
        "ray": _ray_template(stage, images.ref("ray")),
    }


def _fanout_template(image: str) -> Container:
    """`evaluate-fanout`: evaluate's shards dealt into lanes (`steps.pipeline.shard_lanes`), output `lanes`."""
    folder = f"{OUT_DIR}/fanout"
    names = (EVALUATE_SHARDS_PARAM, EVALUATE_PARALLELISM_PARAM)
    args = ["-m", EVALUATE_FANOUT_MODULE, "--out", folder]
    args += [a for n, flag in zip(names, ("--shards", "--parallelism"), strict=True) for a in (flag, _parameter(n))]
    lanes = Parameter(name=FANOUT_OUTPUT, value_from=m.ValueFrom(path=f"{folder}/{LANES_FILE}"))
    return _light_template(FANOUT_TASK, image, args, names, outputs=[lanes])


def _shard_key() -> str:
    """Where the shards of this run leave their folders: one prefix per shard count (a rerun with another count
    cannot mix its shards with the last one's; the gather would refuse the mix anyway)."""
    return run_key(f"{EVALUATION_SHARDS}/{{{{workflow.parameters.{EVALUATE_SHARDS_PARAM}}}}}")


def _shard_templates(stage: Stage, images: Images) -> dict[str, Container]:
    """evaluate's shard pods, `--shard i/k`: on the spot GPU pool in the cuda image (every layer on the card, retried
    like train-gpu when the node is reclaimed) or on a CPU node; each leaves its folder under `_shard_key()`."""

    def args(template: str) -> tuple[str, ...]:  # its key's flag and file (security.USERS "shard-key")
        return (*SHARD_ARGS, *security.file_args(template), "--shard", _parameter("shard"))

    output = S3Artifact(name=stage.output, path=f"{OUT_DIR}/{stage.output}",
                        key=f"{_shard_key()}/{_parameter('index')}", archive=UNARCHIVED)  # fmt: skip
    common = {"sized": stage.name, "gguf_reads": SHARD_GGUF_READS, "output": output,
              "extra_inputs": (Parameter(name="shard"), Parameter(name="index"))}  # fmt: skip
    return {
        "gpu": _template(
            stage,
            f"{SHARD}-gpu",
            images.ref("cuda"),
            extra_args=args(f"{SHARD}-gpu") + GPU_LAYERS,
            node_selector=GPU_NODE_SELECTOR,
            tolerations=GPU_TOLERATIONS,
            retry_strategy=GPU_RETRY,
            annotations={"karpenter.sh/do-not-disrupt": "true"},
            **common,  # type: ignore[arg-type]
        ),
        "cpu": _template(
            stage,
            f"{SHARD}-cpu",
            images.ref("cpu"),
            extra_args=args(f"{SHARD}-cpu"),
            **common,  # type: ignore[arg-type]
        ),
    }


def _gather_template(stage: Stage, image: str) -> Container:
    """`evaluate`: every shard's folder (the run's shard prefix, one artifact) judged together, and the decision."""
    shards = S3Artifact(name=EVALUATION_SHARDS, path=f"{IN_DIR}/{EVALUATION_SHARDS}", key=_shard_key())
    args = ("--gather", shards.path, *security.file_args(stage.name))
    return _template(stage, stage.name, image, extra_args=args, sized=stage.name,  # type: ignore[arg-type]
                     extra_inputs=(shards,))  # fmt: skip


def _lane_template(stage: Stage, shards: dict[str, Container], backend: str) -> DAG:
    """`evaluate-lane`: one lane's shards, one after the other (parallelism 1), on the pool `train-backend` picks."""
    passed = [*SHARD_GGUF_READS, *sizing.size_inputs(stage.name)]
    artifacts = [i for i in stage.inputs if i != GGUF]  # the GGUFs are read by key
    with DAG(
        name=LANE_TEMPLATE,
        parallelism=1,
        inputs=[
            Parameter(name=SHARDS_INPUT),
            *(Parameter(name=n) for n in passed),
            *(Artifact(name=a) for a in artifacts),
        ],
    ) as lane:
        for kind, template in shards.items():
            Task(
                name=template.name,
                template=template,
                with_param=_parameter(SHARDS_INPUT),
                when=f"'{backend}' {'==' if kind == 'gpu' else '!='} 'gpu'",
                arguments=[
                    *(Parameter(name=p, value=f"{{{{workflow.parameters.{p}}}}}") for p in stage.params),
                    *(Parameter(name=n, value=_parameter(n)) for n in passed),
                    Parameter(name="shard", value="{{item.shard}}"),
                    Parameter(name="index", value="{{item.index}}"),
                    *(Artifact(name=a, from_=f"{{{{inputs.artifacts.{a}}}}}") for a in artifacts),
                ],
            )
    return lane


def size_expression(name: str, template_cpu: str = "") -> str:
    """The Argo expression a sized template reads its number `name` with: asInt, so anything but a whole number
    (a quantity, JSON, a newline) fails the pod's creation instead of reaching its spec. The CPU request: the run's
    threads when set, else `template_cpu` (the template's own request)."""
    read = f"asInt(inputs.parameters['{name}'])"
    if name == sizing.CPU_INPUT:
        return f"{{{{={read} > 0 ? string({read}) : '{template_cpu}'}}}}"
    return f"{{{{={read}}}}}"


def pod_spec_patch(step: str, template_cpu: str) -> str:
    """A sized template's podSpecPatch: sizing.pod_patch's shape, each number read by size_expression. preflight's
    outputs are numbers only; the patch's fields are the template's, so a compromised preflight can make a later
    step's pod bigger or smaller and nothing else (no command, image, volume or account)."""
    patch = sizing.pod_patch(step, lambda name: size_expression(name, template_cpu))
    return json.dumps(patch, sort_keys=True, separators=(",", ":"))


def _size_arguments(preflight: Task, step: str) -> list[Parameter]:
    """`step`'s numbers from preflight, one input parameter each (the template builds its podSpecPatch from them)."""
    return [
        Parameter(name=n, value=preflight.get_parameter(sizing.size_output(step, n)).value)
        for n in sizing.size_inputs(step)
    ]


def _workflow_parameter(p: Param) -> Parameter | m.Parameter:
    if p.cluster is None:  # no default: `argo submit` refuses a run that does not set it (hera would write "null")
        return m.Parameter(name=p.name, description=p.help)
    return Parameter(name=p.name, value=p.cluster, description=p.help)


def _succeeded(task: str, conditional: bool) -> str:
    """`depends` on a task: its success, or, for a task with a `when`, its being skipped too."""
    return f"({task}.Succeeded || {task}.Skipped)" if conditional else f"{task}.Succeeded"


RUN_MUTEX = "distill"


def build(images: Images = DEFAULT_IMAGES) -> WorkflowTemplate:
    with WorkflowTemplate(
        name="distill",
        entrypoint="pipeline",
        service_account_name=security.STEPS,
        # The steps' own containers get no API token; Argo's executor containers get the same account's (security.py).
        automount_service_account_token=False,
        executor=m.ExecutorConfig(service_account_name=security.STEPS),
        arguments=[_workflow_parameter(p) for p in PARAMS] + CLUSTER_PARAMS,
        labels={"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "pipeline"},
        annotations={"workflows.argoproj.io/description": "LoRA-distil a summariser, gate it, propose it in MLflow"},
        active_deadline_seconds=sizing.DEADLINE_S,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=3 * 24 * 3600, seconds_after_failure=7 * 24 * 3600),
        security_context=POD_SECURITY,
        archive_logs=ARCHIVE_LOGS,
        # One run at a time in the namespace, however many retrain checks fire while one runs. Here, not in the
        # Workflow retrain.py creates: under `templateReferencing: Strict` a referencing Workflow may not set it.
        synchronization=m.Synchronization(mutexes=[m.Mutex(name=RUN_MUTEX)]),
    ) as wt:
        check_template = _check_template(images.ref("cpu"))
        fanout_template = _fanout_template(images.ref("cpu"))
        templates: dict[str, Container | dict[str, Container | Resource]] = {}
        for stage in STAGES:
            deploy = DEPLOY[stage.name]
            if deploy.kind == "backends":
                templates[stage.name] = _train_templates(stage, images)
            elif deploy.kind == "fanned-out":  # shards, then the gather that decides
                templates[stage.name] = _gather_template(stage, images.ref("cpu"))
                lane = _lane_template(stage, _shard_templates(stage, images), wt.get_parameter("train-backend").value)
            else:
                own = deploy.account  # register: the one role that writes MLflow's artifacts
                templates[stage.name] = _template(
                    stage,
                    stage.name,
                    images.ref("cpu"),
                    extra_args=(*(deploy.shared_cache or ()), *security.file_args(stage.name)),
                    sized=stage.name if stage.name in sizing.POD_PATCH_STEPS else None,
                    **({"service_account_name": own} if own else {}),
                )

        with DAG(name="pipeline"):
            check = Task(
                name=CHECK_TASK,
                template=check_template,
                arguments=[Parameter(name=p.name, value=wt.get_parameter(p.name).value) for p in check_template.inputs],
            )
            fanout = Task(
                name=FANOUT_TASK,
                template=fanout_template,
                arguments=[
                    Parameter(name=p.name, value=wt.get_parameter(p.name).value) for p in fanout_template.inputs
                ],
                depends=f"{check.name}.Succeeded",
            )
            tasks: dict[str, Task] = {}
            backend_tasks: dict[str, dict[str, Task]] = {}  # a "backends" stage's tasks, one per backend
            conditional = {s.name for s in STAGES if s.when}  # tasks that may be skipped
            for stage in STAGES:
                params = [Parameter(name=p, value=wt.get_parameter(p).value) for p in stage.params]
                artifacts: list[Artifact] = []
                deps: list[str] = []
                for name in stage.inputs:
                    src = producer(name)
                    if name == GGUF:  # read by key; which files, the producer's outputs say
                        params += [tasks[src.name].get_parameter(p).with_name(p) for p in DEPLOY[stage.name].gguf_reads]
                    elif not DEPLOY[src.name].read_by_key:  # those are read at their fixed keys (module docstring)
                        artifacts.append(tasks[src.name].get_artifact(name).with_name(name))
                    if src.name not in deps:
                        deps.append(src.name)
                deps += [name for name in stage.after if name not in deps]
                depends = (
                    " && ".join(
                        "(" + " || ".join(f"{t.name}.Succeeded" for t in backend_tasks[d].values()) + ")"
                        if d in backend_tasks
                        else _succeeded(tasks[d].name, conditional=d in conditional)
                        for d in deps
                    )
                    or f"{check.name}.Succeeded"
                )
                deploy = DEPLOY[stage.name]
                if deploy.kind == "backends":
                    backend = wt.get_parameter("train-backend").value
                    backend_tasks[stage.name] = {}
                    for kind, template in templates[stage.name].items():  # type: ignore[union-attr]
                        if kind == "ray":  # reads the dataset from the run's S3 prefix, not as an artifact
                            job_params = [p for p in params if p.name not in RAY_FIXED_PARAMS]
                            arguments = job_params + _ray_arguments(tasks[PREFLIGHT])
                        else:
                            arguments = params + artifacts + _size_arguments(tasks[PREFLIGHT], template.name)
                        backend_tasks[stage.name][kind] = Task(
                            name=template.name,
                            template=template,
                            arguments=arguments,
                            depends=depends,
                            when=f"'{backend}' == '{kind}'",
                        )
                else:
                    arguments = params + artifacts
                    if stage.name in sizing.POD_PATCH_STEPS:
                        arguments += _size_arguments(tasks[PREFLIGHT], stage.name)
                    if deploy.kind == "fanned-out":  # the shards first (the fan-out's constants); this task gathers
                        gguf = tasks[producer(GGUF).name]
                        shards = Task(
                            name=SHARDS_TASK,
                            template=lane,
                            with_param=fanout.get_parameter(FANOUT_OUTPUT).value,
                            arguments=[
                                Parameter(name=SHARDS_INPUT, value="{{item}}"),
                                *(gguf.get_parameter(p).with_name(p) for p in SHARD_GGUF_READS),
                                *_size_arguments(tasks[PREFLIGHT], stage.name),
                                *artifacts,
                            ],
                            depends=f"{depends} && {fanout.name}.Succeeded",
                        )
                        depends = f"{depends} && {shards.name}.Succeeded"
                    tasks[stage.name] = Task(
                        name=stage.name,
                        template=templates[stage.name],  # type: ignore[arg-type]
                        arguments=arguments,
                        depends=depends,
                        when=when_expression(stage.when) if stage.when else None,
                    )
        # Last among the templates: tests find the RayJob's create template as the first that names a RayJob.
        wt.on_exit = _exit_handler(wt.get_parameter("train-backend").value)
    return wt


workflow_template = build()
