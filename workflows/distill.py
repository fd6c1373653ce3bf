"""WorkflowTemplate `distill`: the pipeline of `steps.pipeline` as an Argo DAG.

    argo submit --from workflowtemplate/distill -p dataset-rev=v3 -p train-backend=gpu

Every stage is a container template running `python -m <module>` in a step image from `images/`; folders travel as
artifacts through the cluster's artifact repository (S3). `train` has one template per backend, chosen by the
`train-backend` parameter; downstream tasks take the adapter from whichever ran.
"""

from __future__ import annotations

from hera.workflows import (
    DAG,
    Artifact,
    Container,
    Parameter,
    RetryStrategy,
    Task,
    WorkflowTemplate,
)
from hera.workflows import (
    models as m,
)

from steps.pipeline import PARAMS, STAGES, Stage, producer

IMAGE_REPO = "ghcr.io/distillery-ml"
IMAGE_TAG = "0.1.0"
IMAGE_CPU = f"{IMAGE_REPO}/distillery-cpu:{IMAGE_TAG}"
IMAGE_CUDA = f"{IMAGE_REPO}/distillery-cuda:{IMAGE_TAG}"
SERVICE_ACCOUNT = "distillery"
IN_DIR = "/work/in"
OUT_DIR = "/work/out"
TRAIN_BACKENDS = ("gpu", "cpu")

# What each stage needs from a node. Conversion holds two models in memory at once; evaluation runs llama.cpp.
RESOURCES = {
    "preflight": m.ResourceRequirements(requests={"cpu": "500m", "memory": "1Gi"}, limits={"memory": "2Gi"}),
    "fetch-dataset": m.ResourceRequirements(requests={"cpu": "250m", "memory": "512Mi"}, limits={"memory": "1Gi"}),
    "train-cpu": m.ResourceRequirements(requests={"cpu": "4", "memory": "8Gi"}, limits={"memory": "12Gi"}),
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


def _args(stage: Stage) -> list[str]:
    args = ["-m", stage.module, "--out", f"{OUT_DIR}/{stage.output}"]
    for name in stage.inputs:
        args += [f"--{name}", f"{IN_DIR}/{name}"]
    for name in stage.params:
        args += [f"--{name}", f"{{{{inputs.parameters.{name}}}}}"]
    if stage.run_id:
        args += ["--run-id", "{{workflow.uid}}"]
    return args


def _template(stage: Stage, name: str, image: str, **extra: object) -> Container:
    return Container(
        name=name,
        image=image,
        command=["python"],
        args=_args(stage),
        inputs=[Parameter(name=p) for p in stage.params]
        + [Artifact(name=i, path=f"{IN_DIR}/{i}") for i in stage.inputs],
        outputs=[Artifact(name=stage.output, path=f"{OUT_DIR}/{stage.output}")]
        + [
            Parameter(name=e, value_from=m.ValueFrom(path=f"{OUT_DIR}/{stage.output}/_outputs/{e}"))
            for e in stage.exports
        ],
        resources=RESOURCES[name],
        security_context=CONTAINER_SECURITY,
        retry_strategy=extra.pop("retry_strategy", DEFAULT_RETRY),
        **extra,
    )


def _train_templates(stage: Stage) -> dict[str, Container]:
    return {
        "gpu": _template(
            stage,
            "train-gpu",
            IMAGE_CUDA,
            node_selector=GPU_NODE_SELECTOR,
            tolerations=GPU_TOLERATIONS,
            retry_strategy=GPU_RETRY,
            pod_spec_patch=None,
            annotations={"karpenter.sh/do-not-disrupt": "true"},
        ),
        "cpu": _template(stage, "train-cpu", IMAGE_CPU),
    }


def _from_train(output: str, train_tasks: dict[str, Task]) -> Artifact:
    """The adapter from whichever train task ran (the other one was skipped by its `when`)."""
    gpu, cpu = train_tasks["gpu"].name, train_tasks["cpu"].name
    return Artifact(
        name=output,
        from_expression=(
            f"tasks['{gpu}'].status == 'Succeeded' ? tasks['{gpu}'].outputs.artifacts.{output}"
            f" : tasks['{cpu}'].outputs.artifacts.{output}"
        ),
    )


def build() -> WorkflowTemplate:
    with WorkflowTemplate(
        name="distill",
        entrypoint="pipeline",
        service_account_name=SERVICE_ACCOUNT,
        arguments=[Parameter(name=p.name, value=p.cluster, description=p.help) for p in PARAMS],
        labels={"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "pipeline"},
        annotations={"workflows.argoproj.io/description": "LoRA-distil a summariser, gate it, propose it in MLflow"},
        active_deadline_seconds=8 * 3600,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=3 * 24 * 3600, seconds_after_failure=7 * 24 * 3600),
        security_context=POD_SECURITY,
    ) as wt:
        templates: dict[str, Container | dict[str, Container]] = {}
        for stage in STAGES:
            if stage.name == "train":
                templates[stage.name] = _train_templates(stage)
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
                        train_tasks[kind] = Task(
                            name=template.name,
                            template=template,
                            arguments=params + artifacts,
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
    return wt


workflow_template = build()
