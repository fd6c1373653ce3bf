"""What the project's CronWorkflows share: the WorkflowTemplate each runs by reference, the cron's own settings, and
the one-step container that runs a step with the template's parameters as its flags. `retrain.py` and `promote.py`
each build a pair from these."""

from __future__ import annotations

import dataclasses

from hera.workflows import Container, CronWorkflow, Parameter, WorkflowTemplate
from hera.workflows import models as m

from workflows import security
from workflows.images import Images
from workflows.pods import (
    AMD64,
    ARCHIVE_LOGS,
    CONTAINER_SECURITY,
    DEFAULT_RETRY,
    OUT_DIR,
    POD_SECURITY,
    fixed_disk,
    step_env,
    volume_mounts,
    volumes,
)

TIMEZONE = "UTC"
DAY = 24 * 3600


def flag_defaults(config: type, names: tuple[str, ...]) -> dict[str, str]:
    """The step config's defaults for `names` (flags: a field with '-' for '_'), as the text a parameter holds."""
    fields = {f.name.replace("_", "-"): f.default for f in dataclasses.fields(config)}
    return {name: str(fields[name]) for name in names}


def flag_help(config: type, names: dict[str, str]) -> dict[str, str]:
    """The step config's help text for each flag the cron exposes (a flag is a field with '-' for '_')."""
    fields = {f.name.replace("_", "-"): f.metadata["help"] for f in dataclasses.fields(config)}
    return {name: fields[name] for name in names}


def template(
    *,
    name: str,
    entrypoint: str,
    component: str,
    description: str,
    defaults: dict[str, str],
    helps: dict[str, str],
    active_deadline_seconds: int,
    keep_success_seconds: int,
) -> WorkflowTemplate:
    """The WorkflowTemplate a cron runs: as the steps' service account with no API token, `defaults` as its
    parameters, failed runs kept a week. Everything but the schedule lives here, so the CronWorkflow only references
    it: a controller with `templateReferencing: Strict` runs nothing else (operator.go setExecWorkflow), and refuses
    a referencing workflow that sets any spec field outside its allow-list (util/merge.go ValidateUserOverrides)."""
    return WorkflowTemplate(
        name=name,
        entrypoint=entrypoint,
        service_account_name=security.STEPS,
        automount_service_account_token=False,
        executor=m.ExecutorConfig(service_account_name=security.STEPS),
        arguments=[Parameter(name=k, value=v, description=helps[k]) for k, v in defaults.items()],
        labels=labels(component),
        annotations={"workflows.argoproj.io/description": description},
        active_deadline_seconds=active_deadline_seconds,
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=keep_success_seconds, seconds_after_failure=7 * DAY),
        security_context=POD_SECURITY,
        archive_logs=ARCHIVE_LOGS,
    )


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": component}


def cron(*, template: WorkflowTemplate, schedule: str, component: str, description: str) -> CronWorkflow:
    """A CronWorkflow that never overlaps itself and runs `template` by reference, setting nothing else in its
    workflow spec (the template's parameters are its defaults; `argo submit --from cronwf/… -p` overrides them)."""
    return CronWorkflow(
        name=template.name,
        schedules=[schedule],
        timezone=TIMEZONE,
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=5,
        workflow_template_ref=m.WorkflowTemplateRef(name=template.name),
        labels=labels(component),
        annotations={"workflows.argoproj.io/description": description},
    )


def step_container(
    *,
    step: str,
    module: str,
    output: str,
    flags: dict[str, str],
    outputs: tuple[str, ...],
    resources: m.ResourceRequirements,
    images: Images,
    extra_args: tuple[str, ...] = (),
) -> Container:
    """`python -m <module> --out …` in the cpu image, each of `flags` passed from an input parameter of its name,
    `outputs` read from `<out>/_outputs/`; retried like every other step."""
    out = f"{OUT_DIR}/{output}"
    return Container(
        name=step,
        image=images.ref("cpu"),
        command=["python"],
        args=["-m", module, "--out", out]
        + [a for name in flags for a in (f"--{name}", f"{{{{inputs.parameters.{name}}}}}")]
        + list(extra_args),
        inputs=[Parameter(name=name) for name in flags],
        outputs=[Parameter(name=o, value_from=m.ValueFrom(path=f"{out}/_outputs/{o}")) for o in outputs],
        resources=resources,
        security_context=CONTAINER_SECURITY,
        env=step_env(step),
        labels=security.pod_labels(step),
        volumes=volumes(step, fixed_disk(resources)),
        volume_mounts=volume_mounts(step),
        node_selector=AMD64,  # the cpu image is amd64 only
        retry_strategy=DEFAULT_RETRY,
    )
