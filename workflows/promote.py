"""CronWorkflow `distill-promote`: once a day, decide whether the `challenger` has held up online and promote it.

    kubectl apply -k infra/                                   # installs it with the rest
    argo submit -n distillery --from cronwf/distill-promote   # decide now, outside the schedule

One task, `promote`: `python -m steps.promote` in the cpu image (hold, online samples, acceptance non-inferior to the
champion's with an interval, no safety incident; every decision tagged on both versions). It only reads the online
series steps/online_metrics.py writes and moves MLflow aliases, so it needs MLflow and nothing else: no S3, no
dataset, no Kubernetes API. The cron never overlaps itself (`concurrencyPolicy: Forbid`); a manual submit beside a
scheduled run is safe too (steps/promote.py: two runs at once leave one champion).

Rollback is not scheduled: `python -m steps.promote --action rollback` by hand, or
`argo submit -n distillery --from cronwf/distill-promote -p action=rollback -p reason="…"`.

The CronWorkflow only references the WorkflowTemplate `distill-promote` (`build()`), which holds the step, so both
run under `templateReferencing: Strict`. The schedule is a build argument (`build_cron(schedule=...)`), not a
workflow parameter: Argo reads it before any
templating happens.
"""

from __future__ import annotations

from hera.workflows import DAG, CronWorkflow, Parameter, Task, WorkflowTemplate

from steps.pipeline import param
from steps.promote import PromoteConfig
from workflows import cron as crons
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images
from workflows.pods import fixed_resources

SCHEDULE = "41 5 * * *"  # daily, before the working day (UTC), off the hour
STEP = "promote"
OUTPUT = "promote"

# The step's flags that the cron exposes as parameters, with the cluster's defaults (the step's own where it has one).
PROMOTE_DEFAULTS = {
    "tracking-uri": param("tracking-uri").cluster,
    "model-name": param("model-name").cluster,
    **crons.flag_defaults(PromoteConfig, ("action", "hold-days", "min-samples", "margin", "confidence", "reason")),
}
RESOURCES = fixed_resources("100m", "256Mi", "512Mi", disk_gib=1)  # disk: MLflow answers only


NAME = "distill-promote"
COMPONENT = "promote"
DESCRIPTION = "promote the challenger once it has held up online (or roll back)"


def build(images: Images = DEFAULT_IMAGES) -> WorkflowTemplate:
    """The WorkflowTemplate the cron runs: the one promote step."""
    with crons.template(
        name=NAME,
        entrypoint="decide",
        component=COMPONENT,
        description=DESCRIPTION,
        defaults=PROMOTE_DEFAULTS,
        helps=crons.flag_help(PromoteConfig, PROMOTE_DEFAULTS),
        active_deadline_seconds=900,
        keep_success_seconds=7 * crons.DAY,
    ) as wt:
        # Safe to retry: a retry re-reads the aliases and either repeats the same writes or finds them done.
        template = crons.step_container(
            step=STEP,
            module="steps.promote",
            output=OUTPUT,
            flags=PROMOTE_DEFAULTS,
            outputs=("decision", "changed", "champion-version"),
            resources=RESOURCES,
            images=images,
        )
        with DAG(name="decide"):
            Task(
                name=STEP,
                template=template,
                arguments=[Parameter(name=name, value=wt.get_parameter(name).value) for name in PROMOTE_DEFAULTS],
            )
    return wt


def build_cron(schedule: str = SCHEDULE) -> CronWorkflow:
    return crons.cron(template=build(), schedule=schedule, component=COMPONENT, description=DESCRIPTION)


workflow_template = build()
cron_workflow = build_cron()
