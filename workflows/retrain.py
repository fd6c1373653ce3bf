"""CronWorkflow `distill-retrain-check`: on a schedule, check the retraining triggers; when one fires, start `distill`.

    kubectl apply -k infra/                                      # installs it with the rest
    argo submit -n distillery --from cronwf/distill-retrain-check  # check now, outside the schedule

Two tasks. `check-triggers` runs `python -m steps.check_triggers` in the cpu image (online quality drop, new
feedback rows in the DVC dataset, a new base model revision; each measured against the `champion`, each debounced on
it). Only when it says `fire == true`, `submit-retrain` — an Argo `resource` template — creates a Workflow from the
`distill` WorkflowTemplate with the dataset commit the check resolved, the triggers as a label and their reasons as an
annotation. That Workflow only references `distill` and sets its arguments (what `templateReferencing: Strict`
allows); `distill` itself holds the `distill` mutex, so runs go one at a time however many checks fire; the cron
itself never overlaps (`concurrencyPolicy: Forbid`). The created Workflow has no owner reference: pruning old check runs
(history limits) must not delete a retrain.

The CronWorkflow only references the WorkflowTemplate `distill-retrain-check` (`build()`), which holds the
templates, so both run under `templateReferencing: Strict`. The schedule is a build argument
(`build_cron(schedule=...)`), not a workflow parameter: Argo reads it before any
templating happens.
"""

from __future__ import annotations

import yaml
from hera.workflows import DAG, CronWorkflow, Parameter, Resource, Task, WorkflowTemplate
from hera.workflows import models as m

from steps.check_triggers import TriggersConfig
from steps.pipeline import param
from workflows import cron as crons
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images
from workflows.pods import SUBMITTER, fixed_resources

SCHEDULE = "17 */6 * * *"  # every 6 hours, off the hour
TEMPLATE_REF = "distill"
OUTPUT = "triggers"

# The check's flags that the cron exposes as parameters, with the cluster's defaults (the step's own where the pipeline
# has none; dataset-repo's, empty, means the champion's dataset.repo tag); the rest keep the step's own.
CHECK_DEFAULTS = {
    "tracking-uri": param("tracking-uri").cluster,
    "model-name": param("model-name").cluster,
    **crons.flag_defaults(TriggersConfig, ("dataset-repo",)),
    "dataset-rev": param("dataset-rev").cluster,
    **crons.flag_defaults(
        TriggersConfig,
        (
            "feedback-file",
            "min-feedback-rows",
            "online-metric",
            "baseline-points",
            "recent-points",
            "max-quality-drop",
        ),
    ),
    "base-model": param("base-model").cluster,
    "base-revision": param("base-revision").cluster,
}
# What the check tells the retrain (its Argo output parameters, `_outputs/<name>`).
CHECK_OUTPUTS = ("fire", "triggers", "summary", "dataset-repo", "dataset-rev", "champion-version")
# distill's parameters the retrain sets: the data the check resolved, and the cron's own model and registry settings.
FROM_CHECK = ("dataset-repo", "dataset-rev")
FROM_CRON = ("base-model", "base-revision", "model-name", "tracking-uri")

CHECK = "check-triggers"
RESOURCES = fixed_resources("250m", "512Mi", "1Gi", disk_gib=2)  # disk: a clone of the dataset repository, its feedback


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
            # Nothing else: under `templateReferencing: Strict` a referencing Workflow may set only the fields of
            # util/merge.go's allow-list (arguments, not synchronization). One run at a time is the `distill`
            # WorkflowTemplate's own mutex (distill.RUN_MUTEX).
        },
    }
    return yaml.safe_dump(workflow, sort_keys=False, width=1000)


NAME = "distill-retrain-check"
COMPONENT = "retrain-check"
DESCRIPTION = "check the retraining triggers; start distill when one fires"


def build(images: Images = DEFAULT_IMAGES) -> WorkflowTemplate:
    """The WorkflowTemplate the cron runs: check, then submit the retrain when the check fires."""
    # It runs as the steps' service account (the check); submit-retrain runs as the submitter.
    with crons.template(
        name=NAME,
        entrypoint="check-and-retrain",
        component=COMPONENT,
        description=DESCRIPTION,
        defaults=CHECK_DEFAULTS,
        helps=crons.flag_help(TriggersConfig, CHECK_DEFAULTS),
        active_deadline_seconds=1800,
        keep_success_seconds=crons.DAY,
    ) as wt:
        check_template = crons.step_container(
            step=CHECK,
            module="steps.check_triggers",
            output=OUTPUT,
            flags=CHECK_DEFAULTS,
            outputs=CHECK_OUTPUTS,
            resources=RESOURCES,
            images=images,
            # Every retry of the check shares the run's uid, so a retry repeats the decision instead of being
            # debounced by the tags its lost predecessor wrote.
            extra_args=("--run-id", "{{workflow.uid}}"),
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
                arguments=[Parameter(name=name, value=wt.get_parameter(name).value) for name in CHECK_DEFAULTS],
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
                + [Parameter(name=p, value=wt.get_parameter(p).value) for p in FROM_CRON],
            )
    return wt


def build_cron(schedule: str = SCHEDULE) -> CronWorkflow:
    return crons.cron(template=build(), schedule=schedule, component=COMPONENT, description=DESCRIPTION)


workflow_template = build()
cron_workflow = build_cron()
