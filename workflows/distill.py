"""WorkflowTemplate `distill`: the pipeline of `steps.pipeline` as an Argo DAG.

    argo submit --from workflowtemplate/distill -p dataset-rev=v3 -p train-backend=gpu

Every stage is a container template running `python -m <module>` in a step image from `images/`; folders travel as
artifacts through the cluster's artifact repository (S3). `train` has one template per backend, chosen by the
`train-backend` parameter; downstream tasks take the adapter from whichever ran:

- `train-gpu`: a pod on the EKS spot GPU pool (infra/karpenter: node selector, toleration of its `nvidia.com/gpu`
  taint), `karpenter.sh/do-not-disrupt` against consolidation, retried when spot capacity is reclaimed;
- `train-cpu`: one pod on any node;
- `train-ray`: a DAG of two tasks. `rayjob`, an Argo resource template, creates the KubeRay RayJob of
  `workflows/rayjob.py` and waits on its status (owner-referenced to the workflow, so deleting the workflow deletes
  it); `collect-adapter` then brings the adapter back into Argo as this template's `adapter` artifact and
  `final-loss` parameter.

The exit handler (`onExit: cleanup`) frees the Ray pool when a run does not succeed. The owner reference only acts when
the Workflow object is deleted, so without it a stopped or failed run's RayJob and cluster would train on until the
RayJob's own activeDeadlineSeconds. Its one task, `delete-rayjob`, runs only when `{{workflow.status}}` is not
Succeeded and `train-backend` is `ray`: a resource template that deletes the RayJob by its deterministic name,
`distill-{{workflow.uid}}` (`rayjob.NAME`), with `--ignore-not-found` (harmless when none was created: preflight
failed first, or the stop came before the create). KubeRay's finalizer stops the Ray job and the RayCluster goes with
the RayJob that owns it. What runs it: `argo stop` (exit handlers run), a failed step, the workflow's
activeDeadlineSeconds (Argo runs exit handlers past the deadline). What does not: `argo terminate`, which skips exit
handlers — then `kubectl delete rayjob -n distillery distill-<workflow uid>` by hand. After a failure the RayJob's
status and the head's logs go with it (no 10-minute look, `rayjob.TTL_AFTER_FINISHED_S`). Nothing is lost for training:
Ray Train's checkpoints live under the run's S3 prefix (`runs/{{workflow.uid}}/ray/`), so `argo retry` (same workflow,
same uid) creates the RayJob again under the same name and resumes from the latest; `argo resubmit` is a new workflow
with a new uid and starts from step 0.

Each run has its own S3 prefix, `s3://<artifact bucket>/runs/{{workflow.uid}}/` (stable across retries of a pod, unique
per run):
- `dataset/`: fetch-dataset's output artifact lives there (a key-only artifact in the default artifact repository,
  unarchived), so the Ray job reads the very files the other tasks get, with no copy and no extra pod;
- `adapter/`: the RayJob's `--out`. The train step uploads the adapter only once it is complete, and
  `collect-adapter` reads it as a key-only input artifact and re-exports it as an ordinary output artifact;
- `checkpoints/` (gpu, cpu) and `ray/` (Ray Train's storage path): `--checkpoint-dir`, so a retried spot pod or a
  restarted Ray worker group resumes from the latest complete checkpoint.
Pods that talk to S3 themselves (train, the Ray cluster) use the workflow's service account (IRSA on EKS); at home they
take AWS_* keys and endpoint from the optional secret `S3_ENV_SECRET`.

The Ray backend's replica counts are workflow parameters that only Argo knows (`CLUSTER_PARAMS`: not in
`steps.pipeline`, so neither in params.yaml nor dvc.yaml). The Pi group gets 0 replicas unless preflight's `arm64-ok`
says the base model is small enough (an expression on the `train-ray` task); `--ray-workers` is derived from the
replica counts by another expression in the `train-ray` DAG (`rayjob.train_workers_expression`).
"""

from __future__ import annotations

from hera.workflows import (
    DAG,
    Artifact,
    Container,
    NoneArchiveStrategy,
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

from steps.pipeline import PARAMS, STAGES, Stage, producer
from workflows import rayjob

IMAGE_REPO = "ghcr.io/distillery-ml"
IMAGE_TAG = "0.1.0"
IMAGE_CPU = f"{IMAGE_REPO}/distillery-cpu:{IMAGE_TAG}"
IMAGE_CUDA = f"{IMAGE_REPO}/distillery-cuda:{IMAGE_TAG}"
IMAGE_RAY = f"{IMAGE_REPO}/distillery-ray:{IMAGE_TAG}"  # multi-arch (amd64, arm64): images/ray.Dockerfile
SERVICE_ACCOUNT = "distillery"
IN_DIR = "/work/in"
OUT_DIR = "/work/out"
TRAIN_BACKENDS = ("gpu", "cpu", "ray")
# The default artifact repository's bucket (infra/artifact-repository.yaml; a test keeps them equal): key-only
# artifacts land there, so the steps that read and write S3 themselves must name the same bucket.
BUCKET = "distillery-artifacts"
RUN_PREFIX = "runs/{{workflow.uid}}"
S3_ENV_SECRET = "distillery-s3"  # optional: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL at home


def run_key(name: str) -> str:
    """This run's key for `name` in the artifact bucket."""
    return f"{RUN_PREFIX}/{name}"


# Caches shared by every run, unlike the run prefix (sealed folders, steps/sealed.py): convert-gguf's base-model
# conversions (keyed by the base's files and the converter) and evaluate's generations (keyed by the GGUF's bytes, the
# documents and the decoding settings), so the base and the champion are not converted or generated again.
SHARED_CACHES = {
    "convert-gguf": ("--base-cache", f"s3://{BUCKET}/cache/base-gguf"),
    "evaluate": ("--generation-cache", f"s3://{BUCKET}/cache/generations"),
}


def run_uri(name: str) -> str:
    return f"s3://{BUCKET}/{run_key(name)}"


# Workflow parameters only the cluster run has: Argo-only, so not in steps.pipeline (params.yaml, dvc.yaml).
CLUSTER_PARAMS = [
    Parameter(name=g.parameter, value=str(g.default_replicas), description=rayjob.parameter_help(g))
    for g in rayjob.WORKER_GROUPS
]

# What each stage needs from a node. Conversion holds two models in memory at once; evaluation runs llama.cpp.
RESOURCES = {
    "preflight": m.ResourceRequirements(requests={"cpu": "500m", "memory": "1Gi"}, limits={"memory": "2Gi"}),
    "fetch-dataset": m.ResourceRequirements(requests={"cpu": "250m", "memory": "512Mi"}, limits={"memory": "1Gi"}),
    "train-cpu": m.ResourceRequirements(requests={"cpu": "4", "memory": "8Gi"}, limits={"memory": "12Gi"}),
    "collect-adapter": m.ResourceRequirements(requests={"cpu": "100m", "memory": "256Mi"}, limits={"memory": "512Mi"}),
    "train-gpu": m.ResourceRequirements(
        requests={"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": "1"},
        limits={"memory": "32Gi", "nvidia.com/gpu": "1"},
    ),
    "convert-gguf": m.ResourceRequirements(requests={"cpu": "2", "memory": "8Gi"}, limits={"memory": "12Gi"}),
    "evaluate": m.ResourceRequirements(requests={"cpu": "4", "memory": "4Gi"}, limits={"memory": "6Gi"}),
    "register": m.ResourceRequirements(requests={"cpu": "500m", "memory": "1Gi"}, limits={"memory": "2Gi"}),
    "propose": m.ResourceRequirements(requests={"cpu": "250m", "memory": "512Mi"}, limits={"memory": "1Gi"}),
}

# Every pod runs as the image's unprivileged user (uid 1000), under the runtime's default seccomp profile.
POD_SECURITY = m.PodSecurityContext(
    run_as_non_root=True,
    run_as_user=1000,
    run_as_group=1000,
    fs_group=1000,
    seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
)
CONTAINER_SECURITY = m.SecurityContext(
    allow_privilege_escalation=False,
    capabilities=m.Capabilities(drop=["ALL"]),
    run_as_non_root=True,
)

# The EKS spot GPU pool (infra/karpenter): tainted so only pods that ask for a GPU land there.
GPU_NODE_SELECTOR = {"karpenter.sh/nodepool": "gpu-spot", "karpenter.sh/capacity-type": "spot"}
GPU_TOLERATIONS = [m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
# A spot reclaim deletes the pod: retry it (the train step resumes from its latest checkpoint).
GPU_RETRY = RetryStrategy(
    limit="3",
    retry_policy="Always",
    backoff=m.Backoff(duration="30s", factor="2", max_duration="30m"),
)
DEFAULT_RETRY = RetryStrategy(limit="2", retry_policy="OnError", backoff=m.Backoff(duration="10s", factor="2"))
S3_ENV = [m.EnvFromSource(secret_ref=m.SecretEnvSource(name=S3_ENV_SECRET, optional=True))]


def _args(stage: Stage) -> list[str]:
    args = ["-m", stage.module, "--out", f"{OUT_DIR}/{stage.output}"]
    for name in stage.inputs:
        args += [f"--{name}", f"{IN_DIR}/{name}"]
    for name in stage.params:
        args += [f"--{name}", f"{{{{inputs.parameters.{name}}}}}"]
    if stage.run_id:
        args += ["--run-id", "{{workflow.uid}}"]
    return args


def _output(stage: Stage) -> Artifact:
    if stage.name == "fetch-dataset":
        # This run's S3 prefix, unarchived: the Ray job reads the files from there (see the module docstring).
        return S3Artifact(
            name=stage.output,
            path=f"{OUT_DIR}/{stage.output}",
            key=run_key(stage.output),
            archive=NoneArchiveStrategy(),
        )
    return Artifact(name=stage.output, path=f"{OUT_DIR}/{stage.output}")


def _exports(stage: Stage, folder: str) -> list[Parameter]:
    return [Parameter(name=e, value_from=m.ValueFrom(path=f"{folder}/_outputs/{e}")) for e in stage.exports]


def _template(stage: Stage, name: str, image: str, extra_args: tuple[str, ...] = (), **extra: object) -> Container:
    return Container(
        name=name,
        image=image,
        command=["python"],
        args=_args(stage) + list(extra_args),
        inputs=[Parameter(name=p) for p in stage.params]
        + [Artifact(name=i, path=f"{IN_DIR}/{i}") for i in stage.inputs],
        outputs=[_output(stage), *_exports(stage, f"{OUT_DIR}/{stage.output}")],
        resources=RESOURCES[name],
        security_context=CONTAINER_SECURITY,
        retry_strategy=extra.pop("retry_strategy", DEFAULT_RETRY),
        **extra,
    )


def _ray_entrypoint(stage: Stage) -> list[str]:
    """The train step's command line inside the RayJob: data and results through this run's S3 prefix."""
    args = ["python", "-m", stage.module, "--train-backend", "ray", "--ray-address", "auto"]
    args += ["--ray-workers", "{{inputs.parameters.ray-workers}}", "--threads", str(rayjob.THREADS_PER_WORKER)]
    args += ["--max-failures", str(rayjob.MAX_FAILURES)]
    for name in stage.inputs:
        args += [f"--{name}", run_uri(name)]
    args += ["--out", run_uri(stage.output), "--checkpoint-dir", run_uri("ray")]
    for name in stage.params:
        if name != "train-backend":
            args += [f"--{name}", f"{{{{inputs.parameters.{name}}}}}"]
    if stage.run_id:
        args += ["--run-id", "{{workflow.uid}}"]
    return args


def _ray_template(stage: Stage) -> DAG:
    """`train-ray`: create the RayJob and wait for it, then bring its adapter back as an Argo artifact."""
    replicas = [g.parameter for g in rayjob.WORKER_GROUPS]
    job = rayjob.rayjob(
        image=IMAGE_RAY,
        entrypoint_args=_ray_entrypoint(stage),
        service_account=SERVICE_ACCOUNT,
        pod_security=POD_SECURITY.model_dump(by_alias=True, exclude_none=True),
        container_security=CONTAINER_SECURITY.model_dump(by_alias=True, exclude_none=True),
        env_secret=S3_ENV_SECRET,
    )
    job_params = [p for p in stage.params if p != "train-backend"]
    create = Resource(
        name="train-rayjob",
        action="create",
        set_owner_reference=True,  # deleted with the workflow (and deletes its RayCluster)
        success_condition=rayjob.SUCCESS_CONDITION,
        failure_condition=rayjob.FAILURE_CONDITION,
        manifest=rayjob.manifest(job),
        inputs=[Parameter(name=p) for p in [*job_params, *replicas, "ray-workers"]],
        outputs=[Parameter(name="rayjob-name", value_from=m.ValueFrom(json_path="{.metadata.name}"))],
        # No retry: a second create would start a second RayJob beside the first. Ray Train restarts lost workers
        # itself; a rerun of the workflow resumes from the run's checkpoints.
    )
    adapter = f"{OUT_DIR}/{stage.output}"
    collect = Container(
        name="collect-adapter",
        image=IMAGE_CPU,
        command=["bash", "-c"],
        # The step uploads result.json last, so a folder without it is a partial upload: fail here, not downstream.
        args=[
            f"set -euo pipefail; test -s {IN_DIR}/{stage.output}/result.json; "
            f"mkdir -p {OUT_DIR}; cp -r {IN_DIR}/{stage.output} {adapter}"
        ],
        inputs=[
            S3Artifact(name=stage.output, path=f"{IN_DIR}/{stage.output}", key=run_key(stage.output)),
        ],
        outputs=[Artifact(name=stage.output, path=adapter), *_exports(stage, adapter)],
        resources=RESOURCES["collect-adapter"],
        security_context=CONTAINER_SECURITY,
        retry_strategy=DEFAULT_RETRY,
    )

    def inputs(name: str) -> str:
        return f"{{{{inputs.parameters.{name}}}}}"

    with DAG(
        name="train-ray",
        inputs=[Parameter(name=p) for p in [*stage.params, *replicas]],
    ) as dag:
        job_task = Task(
            name="rayjob",
            template=create,
            arguments=[Parameter(name=p, value=inputs(p)) for p in [*job_params, *replicas]]
            + [Parameter(name="ray-workers", value=rayjob.train_workers_expression())],
        )
        collect_task = Task(name="collect-adapter", template=collect, depends=f"{job_task.name}.Succeeded")
    dag.outputs = [
        collect_task.get_artifact(stage.output).with_name(stage.output),
        *[
            Parameter(name=e, value_from=m.ValueFrom(parameter=collect_task.get_parameter(e).value))
            for e in stage.exports
        ],
    ]
    return dag


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
    )
    with DAG(name="cleanup") as dag:
        Task(
            name="delete-rayjob",
            template=delete,
            when=f"'{{{{workflow.status}}}}' != 'Succeeded' && '{backend}' == 'ray'",
        )
    return dag


def _train_templates(stage: Stage) -> dict[str, Container | DAG]:
    # A fixed place per run, so the pod that replaces a reclaimed spot pod finds its predecessor's checkpoints.
    checkpoints = ("--checkpoint-dir", run_uri("checkpoints"))
    return {
        "gpu": _template(
            stage,
            "train-gpu",
            IMAGE_CUDA,
            extra_args=checkpoints,
            node_selector=GPU_NODE_SELECTOR,
            tolerations=GPU_TOLERATIONS,
            retry_strategy=GPU_RETRY,
            pod_spec_patch=None,
            annotations={"karpenter.sh/do-not-disrupt": "true"},
            env_from=S3_ENV,
        ),
        "cpu": _template(stage, "train-cpu", IMAGE_CPU, extra_args=checkpoints, env_from=S3_ENV),
        "ray": _ray_template(stage),
    }


def _from_train(output: str, train_tasks: dict[str, Task]) -> Artifact:
    """The adapter from whichever train task ran (the others were skipped by their `when`)."""
    *tried, last = train_tasks.values()
    expression = f"tasks['{last.name}'].outputs.artifacts.{output}"
    for task in reversed(tried):
        expression = (
            f"tasks['{task.name}'].status == 'Succeeded' ? tasks['{task.name}'].outputs.artifacts.{output}"
            f" : {expression}"
        )
    return Artifact(name=output, from_expression=expression)


def _pi_gate(preflight: Task) -> str:
    """The Pi group's replicas: the requested count if preflight found the base model small enough, else 0."""
    ok = f"tasks['{preflight.name}'].outputs.parameters['arm64-ok']"
    pi = next(g for g in rayjob.WORKER_GROUPS if g.arch == "arm64").parameter
    return f"{{{{={ok} == 'true' ? workflow.parameters['{pi}'] : '0'}}}}"


def build() -> WorkflowTemplate:
    with WorkflowTemplate(
        name="distill",
        entrypoint="pipeline",
        service_account_name=SERVICE_ACCOUNT,
        arguments=[Parameter(name=p.name, value=p.cluster, description=p.help) for p in PARAMS] + CLUSTER_PARAMS,
        labels={"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "pipeline"},
        annotations={"workflows.argoproj.io/description": "LoRA-distil a summariser, gate it, propose it in MLflow"},
        active_deadline_seconds=8 * 3600,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=3 * 24 * 3600, seconds_after_failure=7 * 24 * 3600),
        security_context=POD_SECURITY,
    ) as wt:
        templates: dict[str, Container | dict[str, Container | DAG]] = {}
        for stage in STAGES:
            if stage.name == "train":
                templates[stage.name] = _train_templates(stage)
            elif stage.name in SHARED_CACHES:  # work that is the same in every run on a base, kept across runs
                flag, location = SHARED_CACHES[stage.name]
                templates[stage.name] = _template(
                    stage, stage.name, IMAGE_CPU, extra_args=(flag, location), env_from=S3_ENV
                )
            else:
                templates[stage.name] = _template(stage, stage.name, IMAGE_CPU)

        with DAG(name="pipeline"):
            tasks: dict[str, Task] = {}
            train_tasks: dict[str, Task] = {}
            for stage in STAGES:
                params = [Parameter(name=p, value=wt.get_parameter(p).value) for p in stage.params]
                artifacts: list[Artifact] = []
                deps: list[str] = []
                for name in stage.inputs:
                    src = producer(name)
                    if src.name == "train":
                        artifacts.append(_from_train(name, train_tasks))
                    else:
                        artifacts.append(tasks[src.name].get_artifact(name).with_name(name))
                    if src.name not in deps:
                        deps.append(src.name)
                deps += [name for name in stage.after if name not in deps]
                depends = " && ".join(
                    "(" + " || ".join(f"{t.name}.Succeeded" for t in train_tasks.values()) + ")"
                    if d == "train"
                    else f"{tasks[d].name}.Succeeded"
                    for d in deps
                )
                if stage.name == "train":
                    backend = wt.get_parameter("train-backend").value
                    for kind, template in templates["train"].items():  # type: ignore[union-attr]
                        if kind == "ray":  # reads the dataset from the run's S3 prefix, not as an artifact
                            arguments = params + [
                                Parameter(
                                    name=g.parameter,
                                    value=_pi_gate(tasks["preflight"])
                                    if g.arch == "arm64"
                                    else wt.get_parameter(g.parameter).value,
                                )
                                for g in rayjob.WORKER_GROUPS
                            ]
                        else:
                            arguments = params + artifacts
                        train_tasks[kind] = Task(
                            name=template.name,
                            template=template,
                            arguments=arguments,
                            depends=depends or None,
                            when=f"'{backend}' == '{kind}'",
                        )
                else:
                    tasks[stage.name] = Task(
                        name=stage.name,
                        template=templates[stage.name],  # type: ignore[arg-type]
                        arguments=params + artifacts,
                        depends=depends or None,
                    )
        # Last among the templates: tests find the RayJob's create template as the first that names a RayJob.
        wt.on_exit = _exit_handler(wt.get_parameter("train-backend").value)
    return wt


workflow_template = build()
