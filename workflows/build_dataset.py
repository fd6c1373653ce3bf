"""WorkflowTemplate `build-dataset`: the pipeline of `steps.pipeline.BUILD_DATASET` as an Argo DAG.

    argo submit -n distillery --from workflowtemplate/build-dataset \
        -p documents=s3://distillery-artifacts/documents/ -p dataset-repo=https://github.com/you/summaries-data.git

ingest ─▶ teacher ─▶ filter-split ─▶ publish, with feedback beside ingest: every stage a container running
`python -m <module>` in the cpu image (the same command line as the local DVC stage: `steps.pipeline.command`),
folders passed as unarchived artifacts on an emptyDir, as in `distill`. publish's `dataset-rev` (the tag) is the
`dataset-rev` to give `distill`.

What only the cluster has: the teacher's answers are cached across runs under `s3://<artifact bucket>/cache/teacher`
(a rebuild with one new document sends one request). Identities, credentials and hardening are distill's
(`workflows/security.py`): pods run as `distillery-steps` with no API token in the step containers, on a read-only
root with the output and scratch emptyDirs; the steps that read or write S3 themselves (ingest from a prefix, the
teacher's cache, publish's `dvc push`) take the optional `distillery-s3` keys (IRSA on EKS), publish pushes with the
optional `distillery-git` config file, and a hosted teacher's key comes from the optional `distillery-teacher`
Secret (`api-key`, sent as a bearer token only after the terms gate let the teacher through).
"""

from __future__ import annotations

from hera.workflows import DAG, Artifact, Container, Parameter, Task, WorkflowTemplate
from hera.workflows import models as m

from steps.pipeline import BUILD_DATASET, Param, Stage, command, producer
from workflows import security
from workflows.deploy import DEPLOY
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
    UNARCHIVED,
    fixed_disk,
    step_env,
    volume_mounts,
    volumes,
)


def _parameter(name: str) -> str:
    return f"{{{{inputs.parameters.{name}}}}}"


def _template(stage: Stage, image: str) -> Container:
    def folder(name: str) -> str:
        return f"{OUT_DIR}/{name}" if name == stage.output else f"{IN_DIR}/{name}"

    deploy = DEPLOY[stage.name]  # its resources and the cache it keeps across runs (the teacher's answers)
    args = [*command(stage, folder, _parameter)[1:], *(deploy.shared_cache or ()), *security.file_args(stage.name)]
    return Container(
        name=stage.name,
        image=image,
        command=["python"],
        args=args,
        inputs=[Parameter(name=p) for p in stage.params] + [Artifact(name=i, path=folder(i)) for i in stage.inputs],
        outputs=[
            Artifact(name=stage.output, path=folder(stage.output), archive=UNARCHIVED),
            *(
                Parameter(name=e, value_from=m.ValueFrom(path=f"{folder(stage.output)}/_outputs/{e}"))
                for e in stage.exports
            ),
        ],
        resources=deploy.resources[stage.name],
        security_context=CONTAINER_SECURITY,
        env=step_env(stage.name),
        labels=security.pod_labels(stage.name),
        volumes=volumes(stage.name, fixed_disk(deploy.resources[stage.name])),
        volume_mounts=volume_mounts(stage.name),
        retry_strategy=DEFAULT_RETRY,
        node_selector=AMD64,
    )


def _workflow_parameter(p: Param) -> Parameter | m.Parameter:
    if p.cluster is None:  # no default: `argo submit` refuses a run that does not set it
        return m.Parameter(name=p.name, description=p.help)
    return Parameter(name=p.name, value=p.cluster, description=p.help)


def build(images: Images = DEFAULT_IMAGES) -> WorkflowTemplate:
    pipeline = BUILD_DATASET
    with WorkflowTemplate(
        name=pipeline.name,
        entrypoint="pipeline",
        service_account_name=security.STEPS,
        # as distill: no API token in the steps' containers, Argo's executor gets the account's (security.py)
        automount_service_account_token=False,
        executor=m.ExecutorConfig(service_account_name=security.STEPS),
        arguments=[_workflow_parameter(p) for p in pipeline.params],
        labels={"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "dataset"},
        annotations={
            "workflows.argoproj.io/description": "Documents and feedback in, a teacher's summaries under a terms gate, "
            "a versioned dataset out"
        },
        active_deadline_seconds=6 * 3600,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=3 * 24 * 3600, seconds_after_failure=7 * 24 * 3600),
        security_context=POD_SECURITY,
        archive_logs=ARCHIVE_LOGS,
    ) as wt:
        templates = {stage.name: _template(stage, images.ref("cpu")) for stage in pipeline.stages}
        with DAG(name="pipeline"):
            tasks: dict[str, Task] = {}
            for stage in pipeline.stages:
                sources = [producer(name, pipeline.stages).name for name in stage.inputs]
                tasks[stage.name] = Task(
                    name=stage.name,
                    template=templates[stage.name],
                    arguments=[Parameter(name=p, value=wt.get_parameter(p).value) for p in stage.params]
                    + [
                        tasks[src].get_artifact(name).with_name(name)
                        for src, name in zip(sources, stage.inputs, strict=True)
                    ],
                    depends=" && ".join(f"{tasks[s].name}.Succeeded" for s in dict.fromkeys(sources)) or None,
                )
    return wt


workflow_template = build()
