"""CronWorkflow `distill-retrain-check`: on a schedule, check the retraining triggers; when one fires, start `distill`.

    kubectl apply -k infra/                                      # installs it with the rest
    argo submit -n distillery --from cronwf/distill-retrain-check  # check now, outside the schedule

Two tasks. `check-triggers` runs `python -m steps.check_triggers` in the cpu image (online quality drop, new
feedback rows in the DVC dataset, a new base model revision; each measured against the `champion`, each debounced on
it). Only when it says `fire == true`, `submit-retrain` — an Argo `resource` template — creates a Workflow from the
`distill` WorkflowTemplate with the dataset commit the check resolved, the triggers as a label and their reasons as an
annotation. That Workflow holds the `distill-retrain` mutex, so retrains run one at a time; the cron itself never
overlaps (`concurrencyPolicy: Forbid`). The created Workflow has no owner reference: pruning old check runs
(history limits) must not delete a retrain.

The schedule is a build argument (`build(schedule=...)`), not a workflow parameter: Argo reads it before any
templating happens.
"""

from __future__ import annotations

import dataclasses

import yaml
from hera.workflows import DAG, Container, CronWorkflow, Parameter, Resource, Task
from hera.workflows import models as m

from steps import sizing
from steps.check_triggers import TriggersConfig
from steps.pipeline import param
from workflows import security
from workflows.distill import (
    AMD64,
    CONTAINER_SECURITY,
    DEFAULT_RETRY,
    OUT_DIR,
    POD_SECURITY,
    SUBMITTER,
    step_env,
    volume_mounts,
    volumes,
)
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images

SCHEDULE = "17 */6 * * *"  # every 6 hours, off the hour
TIMEZONE = "UTC"
RETRAIN_MUTEX = "distill-retrain"
TEMPLATE_REF = "distill"
OUTPUT = "triggers"

# The check's flags that the cron exposes as parameters, with the cluster's defaults; the rest keep the step's own.
CHECK_DEFAULTS = {
    "tracking-uri": param("tracking-uri").cluster,
    "model-name": param("model-name").cluster,
    "dataset-repo": "",  # empty: the champion's dataset.repo tag
    "dataset-rev": param("dataset-rev").cluster,
    "feedback-file": "data/summaries/feedback.jsonl",
    "min-feedback-rows": "50",
    "online-metric": TriggersConfig.online_metric,
    "baseline-points": "5",
    "recent-points": "3",
    "max-quality-drop": "0.05",
    "base-model": param("base-model").cluster,
    "base-revision": param("base-revision").cluster,
}
# What the check tells the retrain (its Argo output parameters, `_outputs/<name>`).
CHECK_OUTPUTS = ("fire", "triggers", "summary", "dataset-repo", "dataset-rev", "champion-version")
# distill's parameters the retrain sets: the data the check resolved, and the cron's own model and registry settings.
FROM_CHECK = ("dataset-repo", "dataset-rev")
FROM_CRON = ("base-model", "base-revision", "model-name", "tracking-uri")

CHECK = "check-triggers"
DISK = f"{sizing.FIXED_DISK_GIB[CHECK]}Gi"
RESOURCES = m.ResourceRequirements(
    requests={"cpu": "250m", "memory": "512Mi", "ephemeral-storage": DISK},
    limits={"memory": "1Gi", "ephemeral-storage": DISK},
)


def _help() -> dict[str, str]:
    fields = {f.name.replace("_", "-"): f.metadata["help"] for f in dataclasses.fields(TriggersConfig)}
    return {name: fields[name] for name in CHECK_DEFAULTS}


def retrain_manifest() -> str:
    """The Workflow `submit-retrain` creates; Argo fills in the `{{inputs.parameters.*}}` before creating it."""

    def inputs(name: str) -> str:
        return "{{inputs.parameters." + name + "}}"

    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "generateName": "distill-retrain-",
            "labels": {
                "app.kubernetes.io/name": "distillery",
                "app.kubernetes.io/component": "retrain",
                "distillery/triggers": inputs("triggers"),
                "distillery/champion-version": inputs("champion-version"),
            },
            "annotations": {
                "workflows.argoproj.io/description": "retrain: " + inputs("summary"),
                "distillery/reasons": inputs("summary"),
            },
        },
        "spec": {
            "workflowTemplateRef": {"name": TEMPLATE_REF},
            "arguments": {
                "parameters": [{"name": p, "value": inputs(p)} for p in FROM_CHECK + FROM_CRON],
            },
            # One retrain at a time, however many checks fire while one runs.
            "synchronization": {"mutexes": [{"name": RETRAIN_MUTEX}]},
        },
    }
    return yaml.safe_dump(workflow, sort_keys=False, width=1000)


def build(schedule: str = SCHEDULE, images: Images = DEFAULT_IMAGES) -> CronWorkflow:
    helps = _help()
    with CronWorkflow(
        name="distill-retrain-check",
        schedules=[schedule],
        timezone=TIMEZONE,
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=5,
        entrypoint="check-and-retrain",
        service_account_name=security.STEPS,  # the check; submit-retrain runs as the submitter
        automount_service_account_token=False,
        executor=m.ExecutorConfig(service_account_name=security.STEPS),
        arguments=[Parameter(name=k, value=v, description=helps[k]) for k, v in CHECK_DEFAULTS.items()],
        labels={"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "retrain-check"},
        annotations={
            "workflows.argoproj.io/description": "check the retraining triggers; start distill when one fires"
        },
        active_deadline_seconds=1800,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=24 * 3600, seconds_after_failure=7 * 24 * 3600),
        security_context=POD_SECURITY,
    ) as cron:
        out = f"{OUT_DIR}/{OUTPUT}"
        check_template = Container(
            name=CHECK,
            image=images.ref("cpu"),
            command=["python"],
            args=["-m", "steps.check_triggers", "--out", out]
            + [a for name in CHECK_DEFAULTS for a in (f"--{name}", f"{{{{inputs.parameters.{name}}}}}")]
            # Every retry of the check shares the run's uid, so a retry repeats the decision instead of being
            # debounced by the tags its lost predecessor wrote.
            + ["--run-id", "{{workflow.uid}}"],
            inputs=[Parameter(name=name) for name in CHECK_DEFAULTS],
            outputs=[Parameter(name=o, value_from=m.ValueFrom(path=f"{out}/_outputs/{o}")) for o in CHECK_OUTPUTS],
            resources=RESOURCES,
            security_context=CONTAINER_SECURITY,
            env=step_env(CHECK),
            volumes=volumes(CHECK, sized=False),
            volume_mounts=volume_mounts(CHECK),
            node_selector=AMD64,  # the cpu image is amd64 only
            retry_strategy=DEFAULT_RETRY,
        )
        submit_template = Resource(
            name="submit-retrain",
            action="create",
            set_owner_reference=False,
            manifest=retrain_manifest(),
            inputs=[Parameter(name=p) for p in ("triggers", "summary", "champion-version", *FROM_CHECK, *FROM_CRON)],
            outputs=[Parameter(name="workflow-name", value_from=m.ValueFrom(json_path="{.metadata.name}"))],
            **SUBMITTER,
        )
        with DAG(name="check-and-retrain"):
            check = Task(
                name="check-triggers",
                template=check_template,
                arguments=[Parameter(name=name, value=cron.get_parameter(name).value) for name in CHECK_DEFAULTS],
            )
            Task(
                name="submit-retrain",
                template=submit_template,
                depends=f"{check.name}.Succeeded",
                when=f"{check.get_parameter('fire').value} == true",
                arguments=[
                    check.get_parameter(p).with_name(p)
                    for p in ("triggers", "summary", "champion-version", *FROM_CHECK)
                ]
                + [Parameter(name=p, value=cron.get_parameter(p).value) for p in FROM_CRON],
            )
    return cron


cron_workflow = build()
