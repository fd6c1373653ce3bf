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

The schedule is a build argument (`build(schedule=...)`), not a workflow parameter: Argo reads it before any
templating happens.
"""

from __future__ import annotations

import dataclasses

from hera.workflows import DAG, Container, CronWorkflow, Parameter, Task
from hera.workflows import models as m

from steps import sizing
from steps.pipeline import param
from steps.promote import PromoteConfig
from workflows import security
from workflows.distill import (
    AMD64,
    CONTAINER_SECURITY,
    DEFAULT_RETRY,
    OUT_DIR,
    POD_SECURITY,
    step_env,
    volume_mounts,
    volumes,
)
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images

SCHEDULE = "41 5 * * *"  # daily, before the working day (UTC), off the hour
TIMEZONE = "UTC"
STEP = "promote"
OUTPUT = "promote"

# The step's flags that the cron exposes as parameters, with the cluster's defaults (the step's own where it has one).
_DEFAULTS = {f.name.replace("_", "-"): f.default for f in dataclasses.fields(PromoteConfig)}
PROMOTE_DEFAULTS = {
    "tracking-uri": param("tracking-uri").cluster,
    "model-name": param("model-name").cluster,
    **{k: str(_DEFAULTS[k]) for k in ("action", "hold-days", "min-samples", "margin", "confidence", "reason")},
}
DISK = f"{sizing.FIXED_DISK_GIB[STEP]}Gi"
RESOURCES = m.ResourceRequirements(
    requests={"cpu": "100m", "memory": "256Mi", "ephemeral-storage": DISK},
    limits={"memory": "512Mi", "ephemeral-storage": DISK},
)


def _help() -> dict[str, str]:
    fields = {f.name.replace("_", "-"): f.metadata["help"] for f in dataclasses.fields(PromoteConfig)}
    return {name: fields[name] for name in PROMOTE_DEFAULTS}


def build(schedule: str = SCHEDULE, images: Images = DEFAULT_IMAGES) -> CronWorkflow:
    helps = _help()
    with CronWorkflow(
        name="distill-promote",
        schedules=[schedule],
        timezone=TIMEZONE,
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=5,
        entrypoint="decide",
        service_account_name=security.STEPS,
        automount_service_account_token=False,
        executor=m.ExecutorConfig(service_account_name=security.STEPS),
        arguments=[Parameter(name=k, value=v, description=helps[k]) for k, v in PROMOTE_DEFAULTS.items()],
        labels={"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "promote"},
        annotations={
            "workflows.argoproj.io/description": "promote the challenger once it has held up online (or roll back)"
        },
        active_deadline_seconds=900,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=7 * 24 * 3600, seconds_after_failure=7 * 24 * 3600),
        security_context=POD_SECURITY,
    ) as cron:
        out = f"{OUT_DIR}/{OUTPUT}"
        template = Container(
            name=STEP,
            image=images.ref("cpu"),
            command=["python"],
            args=["-m", "steps.promote", "--out", out]
            + [a for name in PROMOTE_DEFAULTS for a in (f"--{name}", f"{{{{inputs.parameters.{name}}}}}")],
            inputs=[Parameter(name=name) for name in PROMOTE_DEFAULTS],
            outputs=[
                Parameter(name=o, value_from=m.ValueFrom(path=f"{out}/_outputs/{o}"))
                for o in ("decision", "changed", "champion-version")
            ],
            resources=RESOURCES,
            security_context=CONTAINER_SECURITY,
            env=step_env(STEP),
            volumes=volumes(STEP, sized=False),
            volume_mounts=volume_mounts(STEP),
            node_selector=AMD64,  # the cpu image is amd64 only
            # Safe to retry: a retry re-reads the aliases and either repeats the same writes or finds them done.
            retry_strategy=DEFAULT_RETRY,
        )
        with DAG(name="decide"):
            Task(
                name=STEP,
                template=template,
                arguments=[Parameter(name=name, value=cron.get_parameter(name).value) for name in PROMOTE_DEFAULTS],
            )
    return cron


cron_workflow = build()
