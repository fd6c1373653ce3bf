"""Argo's own semantic rules (tests/argo_rules.py, ported from argo-workflows v3.7.18 and v4.1.2) applied to what is
rendered under infra/: every Argo object passes them, so does the Workflow the retrain cron creates (validated with
the `distill` WorkflowTemplate it references), and every rule refuses a copy of the rendered objects broken on
purpose, so none of them can pass by never firing. Also: the oldest Argo release has every feature the YAML uses
(tests/argo_versions.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests import argo_rules, argo_versions
from tests.argo_rules import findings, validate
from tests.conftest import ROOT
from tests.manifests import substitute

TEMPLATE_FILE = ROOT / "infra/argo/distill-workflowtemplate.yaml"
CRON_FILE = ROOT / "infra/argo/retrain-cronworkflow.yaml"
# The cron's templates: the CronWorkflow references this WorkflowTemplate (templateReferencing: Strict).
CRON_TEMPLATE_FILE = ROOT / "infra/argo/retrain-workflowtemplate.yaml"
ARGO_KINDS = ("Workflow", "WorkflowTemplate", "CronWorkflow")

# Plausible values for the submit-retrain step's inputs, as check-triggers writes them (steps/check_triggers.py:
# triggers '.'-joined so they stay a valid label value, summary '; '-joined for an annotation).
RETRAIN_INPUTS = {
    "triggers": "feedback.base-model",
    "summary": "62 new feedback rows; base model revision changed",
    "champion-version": "7",
    "dataset-repo": "https://github.com/distillery-ml/summaries-data.git",
    "dataset-rev": "4e1f0c2a9b7d",
    "base-model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "base-revision": "main",
    "model-name": "distillery-summariser",
    "tracking-uri": "http://mlflow.mlflow.svc.cluster.local:5000",
}


@cache
def _load(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=argo_rules._LOADER) if d]


def rendered_argo_objects() -> list[tuple[str, dict]]:
    """Every Workflow, WorkflowTemplate and CronWorkflow under infra/, with its file."""
    found = []
    for path in sorted((ROOT / "infra").rglob("*.yaml")):
        found += [(str(path.relative_to(ROOT)), d) for d in _load(path) if d.get("kind") in ARGO_KINDS]
    return found


def template_doc() -> dict:
    return copy.deepcopy(_load(TEMPLATE_FILE)[0])


def cron_doc() -> dict:
    return copy.deepcopy(_load(CRON_FILE)[0])


def cron_template_doc() -> dict:
    return copy.deepcopy(_load(CRON_TEMPLATE_FILE)[0])


def _spec(doc: dict) -> dict:
    return doc["spec"].get("workflowSpec") or doc["spec"]


def _templates(doc: dict) -> list[dict]:
    return _spec(doc)["templates"]


def _template(doc: dict, pick: Callable[[dict], bool] | str) -> dict:
    test = (lambda t: t["name"] == pick) if isinstance(pick, str) else pick
    return next(t for t in _templates(doc) if test(t))


def _entry_tasks(doc: dict) -> list[dict]:
    return _template(doc, _spec(doc)["entrypoint"])["dag"]["tasks"]


def _task(doc: dict, pick: Callable[[dict], bool] | str) -> dict:
    test = (lambda t: t["name"] == pick) if isinstance(pick, str) else pick
    return next(t for t in _entry_tasks(doc) if test(t))


def retrain_workflow(cron: dict | None = None) -> dict:
    """The Workflow the cron's submit-retrain resource template creates, its `{{inputs.parameters.*}}` filled in."""
    creator = _template(
        cron or cron_template_doc(), lambda t: "kind: Workflow" in (t.get("resource") or {}).get("manifest", "")
    )
    return yaml.load(substitute(creator["resource"]["manifest"], RETRAIN_INPUTS), Loader=argo_rules._LOADER)


# --------------------------------------------------------------------------------------------------------------------
# (1) and (2): what is rendered passes


@pytest.mark.parametrize(
    ("path", "obj"), [pytest.param(p, o, id=f"{p}:{o['metadata']['name']}") for p, o in rendered_argo_objects()]
)
def test_rendered_argo_object_passes_argos_rules(path: str, obj: dict):
    assert validate(obj) == [], f"{path} ({obj['kind']} {obj['metadata'].get('name')})"


def test_infra_holds_the_pipeline_template_and_the_retrain_and_promote_crons():
    kinds = {(o["kind"], o["metadata"]["name"]) for _, o in rendered_argo_objects()}
    expected = {("WorkflowTemplate", "distill"), ("CronWorkflow", "distill-retrain-check")}
    assert expected | {("CronWorkflow", "distill-promote"), ("WorkflowTemplate", "build-dataset")} <= kinds


def test_retrain_workflow_passes_argos_rules_with_the_template_it_references():
    workflow = retrain_workflow()
    assert workflow["spec"]["workflowTemplateRef"]["name"] == "distill"
    assert validate(workflow, {"distill": template_doc()}) == []


def test_retrain_workflow_names_only_parameters_the_template_declares():
    """Not an Argo rule (Argo merges unknown names into the globals without a word): a misspelt name would silently
    leave the template's default in place."""
    declared = {p["name"] for p in template_doc()["spec"]["arguments"]["parameters"]}
    passed = {p["name"] for p in retrain_workflow()["spec"]["arguments"]["parameters"]}
    assert passed <= declared, f"not declared by distill: {sorted(passed - declared)}"


def test_retrain_workflow_supplies_every_template_parameter_without_a_default():
    """Argo's arguments_values refuses a missing value when the Workflow is submitted; Hera renders a parameter
    given no default as the string 'null', which Argo would take as a value, so that counts as missing too."""
    required = {
        p["name"] for p in template_doc()["spec"]["arguments"]["parameters"] if p.get("value") in (None, "null")
    }
    passed = {p["name"] for p in retrain_workflow()["spec"]["arguments"]["parameters"] if p.get("value") is not None}
    assert required <= passed, f"the retrain Workflow does not set {sorted(required - passed)}"


def test_a_workflow_template_alone_may_read_undeclared_workflow_parameters_but_not_a_workflow_using_it():
    """validate.go resolveAllVariables lets `workflow.parameters.*` through for a WorkflowTemplate checked on its
    own (the submitting Workflow may declare them), not for the Workflow that references it."""
    doc = template_doc()
    _template(doc, lambda t: "container" in t)["container"]["args"].append("{{workflow.parameters.not-declared}}")
    assert validate(doc) == []
    assert any(
        "failed to resolve {{workflow.parameters.not-declared}}" in m
        for m in validate(retrain_workflow(), {"distill": doc})
    )


# --------------------------------------------------------------------------------------------------------------------
# (3): every rule refuses a deliberately broken copy


def _leaf_with_outputs(t: dict) -> bool:
    return "container" in t and bool((t.get("outputs") or {}).get("parameters"))


def _leaf_with_inputs(t: dict) -> bool:
    return "container" in t and bool((t.get("inputs") or {}).get("parameters"))


def _creates_resource(t: dict) -> bool:
    return (t.get("resource") or {}).get("action") == "create"


def _has_artifact_args(k: dict) -> bool:
    return bool((k.get("arguments") or {}).get("artifacts"))


def _has_param_args(k: dict) -> bool:
    return bool((k.get("arguments") or {}).get("parameters"))


@dataclass
class Broken:
    id: str
    rule: str
    target: str  # "template", "cron", "cron-template" (the WorkflowTemplate the cron references) or "workflow" (the
    # retrain Workflow, validated with the template in `docs`)
    mutate: Callable[[dict[str, dict]], object]
    expected: str


def _set(obj: dict, key: str, value: object) -> None:
    obj[key] = value


def _swap_schedules(cron: dict) -> None:
    cron["spec"]["schedule"] = cron["spec"].pop("schedules")[0]


def _known_defect(d: dict[str, dict]) -> None:
    """The hand-off the pipeline had: the adapter picked with an expression, no `from`, no location, no key."""
    task = _task(d["template"], _has_artifact_args)
    task["arguments"]["artifacts"][0] = {
        "name": task["arguments"]["artifacts"][0]["name"],
        "fromExpression": "tasks['train-gpu'].status == 'Succeeded' ? tasks['train-gpu'].outputs.artifacts.adapter"
        " : tasks['train-cpu'].outputs.artifacts.adapter",
    }


def _drop_value(d: dict[str, dict], name: str) -> None:
    param = next(p for p in d["template"]["spec"]["arguments"]["parameters"] if p["name"] == name)
    param.pop("value", None)


def _add_arg(task: dict, name: str, value: str) -> None:
    task.setdefault("arguments", {}).setdefault("parameters", []).append({"name": name, "value": value})


def _depends_on_last(d: dict[str, dict]) -> None:
    tasks = _entry_tasks(d["template"])
    tasks[0]["depends"] = f"{tasks[-1]['name']}.Succeeded"


def _first_leaf_input_artifact(d: dict[str, dict]) -> dict:
    return _template(d["template"], lambda t: "container" in t and (t.get("inputs") or {}).get("artifacts"))["inputs"][
        "artifacts"
    ][0]


def _drop_first_task_param(d: dict[str, dict]) -> None:
    _task(d["template"], _has_param_args)["arguments"]["parameters"].pop(0)


def _drop_task_artifacts(d: dict[str, dict]) -> None:
    _task(d["template"], _has_artifact_args)["arguments"].pop("artifacts")


BROKEN: list[Broken] = [
    # object-level rules
    Broken(
        "name-64",
        "object_name_length",
        "template",
        lambda d: _set(d["template"]["metadata"], "name", "d" * 64),
        "must not be more than 63 characters long",
    ),
    Broken(
        "cron-name-53",
        "object_name_length",
        "cron",
        lambda d: _set(d["cron"]["metadata"], "name", "c" * 53),
        "must not be more than 52 characters long",
    ),
    Broken(
        "name-not-dns",
        "object_name_dns",
        "template",
        lambda d: _set(d["template"]["metadata"], "name", "Distill_X"),
        "lowercase RFC 1123 subdomain",
    ),
    Broken(
        "label-with-comma",
        "object_labels",
        "workflow",
        lambda d: _set(d["workflow"]["metadata"]["labels"], "distillery/triggers", "feedback,base-model"),
        "metadata.labels: Invalid value: 'feedback,base-model'",
    ),
    Broken(
        "no-schedules",
        "cron_schedules",
        "cron",
        lambda d: d["cron"]["spec"].pop("schedules"),
        "cron workflow must have at least one schedule",
    ),
    Broken(
        "schedule-and-schedules",
        "cron_schedules",
        "cron",
        lambda d: _set(d["cron"]["spec"], "schedule", "0 * * * *"),
        "cant be configured with both Spec.Schedule and Spec.Schedules",
    ),
    Broken(
        "four-fields",
        "cron_schedule_syntax",
        "cron",
        lambda d: _set(d["cron"]["spec"], "schedules", ["17 */6 * *"]),
        "is malformed: expected exactly 5 fields, found 4",
    ),
    Broken(
        "minute-61",
        "cron_schedule_syntax",
        "cron",
        lambda d: _set(d["cron"]["spec"], "schedules", ["61 * * * *"]),
        "end of range (61) above maximum (59)",
    ),
    Broken(
        "bad-timezone",
        "cron_timezone",
        "cron",
        lambda d: _set(d["cron"]["spec"], "timezone", "Mars/Olympus"),
        'invalid timezone "Mars/Olympus"',
    ),
    Broken(
        "bad-concurrency",
        "cron_concurrency_policy",
        "cron",
        lambda d: _set(d["cron"]["spec"], "concurrencyPolicy", "Sometimes"),
        "'Sometimes' is not a valid concurrencyPolicy",
    ),
    Broken(
        "negative-deadline",
        "cron_starting_deadline",
        "cron",
        lambda d: _set(d["cron"]["spec"], "startingDeadlineSeconds", -1),
        "startingDeadlineSeconds must be positive",
    ),
    Broken(
        "singular-schedule",
        "v4_removed_fields",
        "cron",
        lambda d: _swap_schedules(d["cron"]),
        "spec.schedule was removed in Argo v4",
    ),
    Broken(
        "singular-mutex",
        "v4_removed_fields",
        "workflow",
        lambda d: _set(d["workflow"]["spec"], "synchronization", {"mutex": {"name": "distill-retrain"}}),
        "spec.synchronization.mutex was removed in Argo v4",
    ),
    Broken(
        "ref-misspelt",
        "workflow_template_ref",
        "workflow",
        lambda d: _set(d["workflow"]["spec"]["workflowTemplateRef"], "name", "distil"),
        'workflowtemplates.argoproj.io "distil" not found',
    ),
    Broken(
        "ref-with-templates",
        "workflow_template_ref",
        "workflow",
        lambda d: _set(d["workflow"]["spec"], "templates", [{"name": "x", "suspend": {}}]),
        "Templates is invalid field in spec if workflow referred WorkflowTemplate reference",
    ),
    # workflow-spec rules
    Broken(
        "template-name-underscore",
        "template_names",
        "template",
        lambda d: _set(_template(d["template"], "cleanup"), "name", "clean_up"),
        "name: 'clean_up' is invalid",
    ),
    Broken(
        "template-name-twice",
        "template_names",
        "template",
        lambda d: _templates(d["template"]).append(copy.deepcopy(_template(d["template"], "cleanup"))),
        "name 'cleanup' is not unique",
    ),
    Broken(
        "entrypoint-misspelt",
        "entrypoint",
        "template",
        lambda d: _set(d["template"]["spec"], "entrypoint", "pipelin"),
        "template name 'pipelin' undefined",
    ),
    Broken(
        "workflow-entrypoint-misspelt",
        "entrypoint",
        "workflow",
        lambda d: _set(d["workflow"]["spec"], "entrypoint", "pipelin"),
        "template reference distill.pipelin not found",
    ),
    Broken(
        "cron-without-entrypoint",
        "entrypoint",
        "cron",
        # the cron's templates inline again, without the entrypoint the WorkflowTemplate gave them
        lambda d: _set(d["cron"]["spec"], "workflowSpec", {"templates": d["cron-template"]["spec"]["templates"]}),
        "cannot validate Workflow: spec.entrypoint is required",
    ),
    Broken(
        "on-exit-misspelt",
        "on_exit",
        "template",
        lambda d: _set(d["template"]["spec"], "onExit", "cleanp"),
        "template name 'cleanp' undefined",
    ),
    Broken(
        "argument-name-space",
        "arguments_field_names",
        "template",
        lambda d: _set(d["template"]["spec"]["arguments"]["parameters"][0], "name", "dataset repo"),
        "spec.arguments.parameters[0].name: 'dataset repo' is invalid",
    ),
    Broken(
        "argument-twice",
        "arguments_field_names",
        "cron-template",
        lambda d: _spec(d["cron-template"])["arguments"]["parameters"].append({"name": "model-name", "value": "x"}),
        "name 'model-name' is not unique",
    ),
    Broken(
        "known-defect-fromExpression-only",
        "arguments_values",
        "template",
        _known_defect,
        "from, artifact location, or key is required",
    ),
    Broken(
        "from-and-fromExpression",
        "arguments_values",
        "template",
        lambda d: _set(_task(d["template"], _has_artifact_args)["arguments"]["artifacts"][0], "fromExpression", "x"),
        "shouldn't have both `from` and `fromExpression` in Artifact",
    ),
    Broken(
        "workflow-leaves-parameter-unset",
        "arguments_values",
        "workflow",
        lambda d: _drop_value(d, "seed"),
        "spec.arguments.seed.value or spec.arguments.seed.valueFrom is required",
    ),
    Broken(
        "value-outside-enum",
        "arguments_values",
        "cron-template",
        lambda d: _set(_spec(d["cron-template"])["arguments"]["parameters"][0], "enum", ["a", "b"]),
        ".value should be present in spec.arguments.",
    ),
    Broken(
        "container-and-script",
        "template_type",
        "template",
        lambda d: _set(_template(d["template"], _leaf_with_inputs), "script", {"image": "x", "source": "x"}),
        "multiple template types specified",
    ),
    Broken(
        "no-template-type",
        "template_type",
        "template",
        lambda d: _template(d["template"], _leaf_with_inputs).pop("container"),
        "template type unspecified",
    ),
    Broken(
        "input-artifact-without-path",
        "inputs",
        "template",
        lambda d: _first_leaf_input_artifact(d).pop("path"),
        "did not specify a path",
    ),
    Broken(
        "input-artifact-climbs-out",
        "inputs",
        "template",
        lambda d: _set(_first_leaf_input_artifact(d), "path", "/work/in/../../etc"),
        "Directory traversal is not permitted",
    ),
    Broken(
        "input-artifact-from",
        "inputs",
        "template",
        lambda d: _set(_first_leaf_input_artifact(d), "from", "{{x}}"),
        "from not valid in inputs",
    ),
    Broken("task-drops-parameter", "inputs_supplied", "template", _drop_first_task_param, "was not supplied"),
    Broken("task-drops-artifacts", "inputs_supplied", "template", _drop_task_artifacts, "inputs.artifacts."),
    Broken(
        "retry-policy",
        "retry_policy",
        "template",
        lambda d: _set(_template(d["template"], _leaf_with_inputs)["retryStrategy"], "retryPolicy", "Sometimes"),
        "Sometimes is not a valid RetryPolicy",
    ),
    Broken(
        "backoff-words",
        "retry_backoff",
        "template",
        lambda d: _set(
            _template(d["template"], _leaf_with_inputs)["retryStrategy"]["backoff"], "duration", "10 seconds"
        ),
        "unable to parse 10 seconds as a duration",
    ),
    Broken(
        "limit-word",
        "retry_backoff",
        "cron-template",
        lambda d: _set(_templates(d["cron-template"])[0]["retryStrategy"], "limit", "two"),
        "value 'two' cannot be resolved to an int",
    ),
    Broken(
        "retry-expression-reads-parameter",
        "retry_expression",
        "template",
        lambda d: _set(
            _template(d["template"], _leaf_with_inputs)["retryStrategy"],
            "expression",
            "workflow.parameters['train-backend'] == 'gpu'",
        ),
        "retryStrategy.expression reads workflow.parameters.train-backend",
    ),
    Broken(
        "dag-deadline",
        "non_leaf_fields",
        "template",
        lambda d: _set(_template(d["template"], "pipeline"), "activeDeadlineSeconds", 60),
        "templates.pipeline.activeDeadlineSeconds is only valid for leaf templates",
    ),
    Broken(
        "leaf-parallelism",
        "leaf_fields",
        "template",
        lambda d: _set(_template(d["template"], _leaf_with_inputs), "parallelism", 2),
        "parallelism is only valid",
    ),
    Broken(
        "leaf-timeout-number",
        "leaf_fields",
        "cron-template",
        lambda d: _set(_templates(d["cron-template"])[0], "timeout", "30"),
        "has invalid duration format in timeout",
    ),
    Broken(
        "undeclared-input",
        "variables",
        "template",
        lambda d: _template(d["template"], _leaf_with_inputs)["container"]["args"].append("{{inputs.parameters.nope}}"),
        "failed to resolve {{inputs.parameters.nope}}",
    ),
    Broken(
        "undeclared-task-output",
        "variables",
        "template",
        lambda d: _add_arg(_task(d["template"], "propose"), "x", "{{tasks.register.outputs.parameters.nope}}"),
        "failed to resolve {{tasks.register.outputs.parameters.nope}}",
    ),
    Broken(
        "undeclared-workflow-parameter",
        "variables",
        "cron",  # the cron runs its WorkflowTemplate as a Workflow: every workflow parameter must be declared
        lambda d: _add_arg(_entry_tasks(d["cron-template"])[0], "x", "{{workflow.parameters.nope}}"),
        "failed to resolve {{workflow.parameters.nope}}",
    ),
    Broken(
        "no-image",
        "container_fields",
        "template",
        lambda d: _set(_template(d["template"], _leaf_with_inputs)["container"], "image", ""),
        "container.image may not be empty",
    ),
    Broken(
        "mount-twice",
        "container_fields",
        "template",
        lambda d: _set(
            _template(d["template"], lambda t: "container" in t and (t.get("inputs") or {}).get("artifacts"))[
                "container"
            ],
            "volumeMounts",
            [{"name": "a", "mountPath": "/m"}, {"name": "b", "mountPath": "/m"}],
        ),
        "mountPath '/m' already mounted",
    ),
    Broken(
        "resource-action",
        "resource_template",
        "template",
        lambda d: _set(_template(d["template"], _creates_resource)["resource"], "action", "upsert"),
        "resource.action must be one of: get, create, apply, delete, replace, patch",
    ),
    Broken(
        "resource-no-manifest",
        "resource_template",
        "cron-template",
        lambda d: _template(d["cron-template"], _creates_resource)["resource"].pop("manifest"),
        "resource.manifest or templates.submit-retrain.resource.manifestFrom must be specified",
    ),
    Broken(
        "resource-bad-yaml",
        "resource_template",
        "template",
        lambda d: _set(_template(d["template"], _creates_resource)["resource"], "manifest", "kind: RayJob\nspec: [a"),
        "resource.manifest must be a valid yaml",
    ),
    Broken(
        "condition-with-and",
        "resource_conditions",
        "template",
        lambda d: _set(
            _template(d["template"], _creates_resource)["resource"],
            "successCondition",
            "status.jobStatus == SUCCEEDED && status.jobDeploymentStatus == Complete",
        ),
        "success condition 'status.jobStatus == SUCCEEDED && status.jobDeploymentStatus == Complete' failed to parse",
    ),
    Broken(
        "condition-in-without-parens",
        "resource_conditions",
        "template",
        lambda d: _set(
            _template(d["template"], _creates_resource)["resource"], "failureCondition", "status.jobStatus in FAILED"
        ),
        "failed to parse: unable to parse requirement: found 'FAILED' expected: '('",
    ),
    Broken(
        "owner-reference-without-kind",
        "resource_owner_reference",
        "template",
        lambda d: _set(_template(d["template"], _creates_resource)["resource"], "manifest", "metadata: {name: x}\n"),
        "Object 'Kind' is missing",
    ),
    Broken(
        "container-output-jsonpath",
        "outputs",
        "template",
        lambda d: _set(
            _template(d["template"], _leaf_with_outputs)["outputs"]["parameters"][0], "valueFrom", {"jsonPath": "{.a}"}
        ),
        ".path must be specified for Container templates",
    ),
    Broken(
        "resource-output-path",
        "outputs",
        "template",
        lambda d: _set(
            _template(d["template"], _creates_resource)["outputs"]["parameters"][0], "valueFrom", {"path": "/a"}
        ),
        ".jqFilter or jsonPath must be specified for Resource templates",
    ),
    Broken(
        "dag-output-path",
        "outputs",
        "template",
        lambda d: _set(
            _template(d["template"], "pipeline"),
            "outputs",
            {"parameters": [{"name": "decision", "valueFrom": {"path": "/a"}}]},
        ),
        "parameter or expression must be specified for DAG templates",
    ),
    Broken(
        "output-without-value",
        "outputs",
        "cron-template",
        lambda d: _templates(d["cron-template"])[0]["outputs"]["parameters"][0].pop("valueFrom"),
        "does not have valueFrom or value specified",
    ),
    Broken(
        "task-template-misspelt",
        "dag_tasks",
        "template",
        lambda d: _set(_entry_tasks(d["template"])[-1], "template", "propse"),
        "template name 'propse' undefined",
    ),
    Broken(
        "no-tasks",
        "dag_tasks",
        "template",
        lambda d: _set(_template(d["template"], "cleanup")["dag"], "tasks", []),
        "templates.cleanup must have at least one task",
    ),
    Broken(
        "depends-on-missing",
        "dag_dependencies",
        "template",
        lambda d: _set(_task(d["template"], lambda k: "depends" in k), "depends", "preflght.Succeeded"),
        "sorting failed: invalid dependency preflght",
    ),
    Broken("cycle", "dag_dependencies", "template", _depends_on_last, "sorting failed: graph with cycle"),
    Broken(
        "depends-and-dependencies",
        "dag_dependencies",
        "cron-template",
        lambda d: (
            _set(_entry_tasks(d["cron-template"])[0], "dependencies", [])
            or _set(_entry_tasks(d["cron-template"])[-1], "dependencies", [_entry_tasks(d["cron-template"])[0]["name"]])
        ),
        "cannot use both 'depends' and 'dependencies' in the same DAG template",
    ),
    Broken(
        "any-succeeded-without-items",
        "dag_dependencies",
        "cron-template",
        lambda d: _set(
            _entry_tasks(d["cron-template"])[-1],
            "depends",
            f"{_entry_tasks(d['cron-template'])[0]['name']}.AnySucceeded",
        ),
        "uses an items-based condition such as .AnySucceeded or .AllFailed but does not contain any items",
    ),
    Broken(
        "result-misspelt",
        "dag_task_results",
        "template",
        lambda d: _set(_task(d["template"], lambda k: "depends" in k), "depends", "preflight.Succeded"),
        "task result 'Succeded' for task 'preflight' is invalid",
    ),
    Broken(
        "argument-from-non-ancestor",
        "dag_argument_dependency",
        "template",
        lambda d: _add_arg(_entry_tasks(d["template"])[0], "x", "{{tasks.propose.outputs.parameters.proposed}}"),
        "missing dependency 'propose' for parameter 'x'",
    ),
    Broken(
        "when-single-equals",
        "when_expressions",
        "template",
        lambda d: _set(
            _task(d["template"], lambda k: "when" in k), "when", "'{{workflow.parameters.train-backend}}' = 'gpu'"
        ),
        "= 'gpu'': Invalid token: '='",
    ),
    Broken(
        "when-not-bool",
        "when_expressions",
        "template",
        lambda d: _set(_task(d["template"], lambda k: "when" in k), "when", "'{{workflow.parameters.train-backend}}'"),
        "Expected boolean evaluation for '",
    ),
    Broken(
        "when-unquoted-model",
        "when_expressions",
        "template",
        lambda d: _set(
            _task(d["template"], lambda k: "when" in k), "when", "{{workflow.parameters.base-model}} != none"
        ),
        "!= none': Cannot transition token types",
    ),
    Broken(
        "when-reads-later-task",
        "when_expressions",
        "template",
        lambda d: _set(
            _task(d["template"], lambda k: "when" in k),
            "when",
            "'{{tasks.evaluate.outputs.parameters.decision}}' == 'x'",
        ),
        "when reads {{tasks.evaluate.outputs.parameters.decision}}, not an ancestor's output",
    ),
    Broken(
        "expression-misspelt-task",
        "expression_variables",
        "template",
        lambda d: _add_arg(
            _task(d["template"], lambda k: "depends" in k), "x", "{{=asInt(tasks['preflght'].outputs.parameters['a'])}}"
        ),
        "failed to evaluate expression: tasks.preflght.outputs.parameters.a is missing",
    ),
    Broken(
        "expression-undeclared-parameter",
        "expression_variables",
        "template",
        lambda d: _add_arg(_entry_tasks(d["template"])[0], "x", "{{=workflow.parameters['nope'] == 'a'}}"),
        "expression reads workflow.parameters.nope, which is not defined there",
    ),
    Broken(
        "fromExpression-non-ancestor",
        "expression_variables",
        "template",
        lambda d: (
            _set(
                _task(d["template"], _has_artifact_args)["arguments"]["artifacts"][0],
                "fromExpression",
                "tasks['propose'].outputs.artifacts.proposal",
            )
            or _task(d["template"], _has_artifact_args)["arguments"]["artifacts"][0].pop("from")
        ),
        "failed to evaluate expression: tasks.propose.outputs.artifacts.proposal is missing",
    ),
    Broken(
        "mutex-twice",
        "synchronization",
        "template",
        lambda d: d["template"]["spec"]["synchronization"]["mutexes"].append({"name": "distill"}),
        "duplicate synchronization item found",
    ),
    Broken(
        "semaphore-without-source",
        "synchronization",
        "template",
        lambda d: _set(d["template"]["spec"]["synchronization"], "semaphores", [{"namespace": "x"}]),
        "cannot get LockName for a Semaphore without a ConfigMapRef or Database",
    ),
    Broken(
        "pod-gc-strategy",
        "pod_gc",
        "template",
        lambda d: _set(d["template"]["spec"]["podGC"], "strategy", "OnSuccess"),
        "podGC.strategy unknown strategy 'OnSuccess'",
    ),
    Broken(
        "pod-spec-patch-not-a-pod-spec",
        "pod_spec_patch",
        "template",
        lambda d: _set(_template(d["template"], _leaf_with_inputs), "podSpecPatch", "containers: {name: main}"),
        "invalid podSpecPatch",
    ),
]


def _broken_object(case: Broken) -> tuple[dict, dict[str, dict]]:
    docs = {"template": template_doc(), "cron": cron_doc(), "cron-template": cron_template_doc()}
    docs["workflow"] = retrain_workflow(docs["cron-template"])
    case.mutate(docs)
    referenced = {"distill": docs["template"], docs["cron-template"]["metadata"]["name"]: docs["cron-template"]}
    return docs[case.target], referenced


@pytest.mark.parametrize("case", BROKEN, ids=lambda c: f"{c.rule}:{c.id}")
def test_rule_refuses_a_broken_copy(case: Broken):
    obj, templates = _broken_object(case)
    found = findings(obj, templates)
    assert any(rule == case.rule and case.expected in message for rule, message in found), (
        f"{case.rule} did not say {case.expected!r}; all findings: {found}"
    )


def test_every_rule_has_a_broken_fixture():
    assert set(argo_rules.RULES) <= {c.rule for c in BROKEN}, set(argo_rules.RULES) - {c.rule for c in BROKEN}


def test_every_rule_cites_the_argo_source_it_ports():
    for name, rule in argo_rules.RULES.items():
        doc = " ".join((rule.__doc__ or "").split())
        assert "argo-workflows" in doc or "kubernetes apimachinery" in doc, name
        assert ".go" in doc, name


# --------------------------------------------------------------------------------------------------------------------
# the oldest Argo version that runs the rendered YAML


def _rendered() -> list[dict]:
    return [obj for _, obj in rendered_argo_objects()]


@pytest.mark.parametrize("feature", argo_versions.FEATURES, ids=lambda f: f.name)
def test_feature_detector_fires_on_its_example(feature: argo_versions.Feature):
    assert feature.detect([yaml.safe_load(feature.example)])


def test_every_feature_the_rendered_yaml_uses_exists_in_the_oldest_supported_argo():
    oldest = argo_versions.version(argo_versions.OLDEST_SUPPORTED)
    too_new = [
        f"{f.name} ({f.since})"
        for f in argo_versions.used_features(_rendered())
        if argo_versions.version(f.since) > oldest
    ]
    assert not too_new, f"needs a newer Argo than {argo_versions.OLDEST_SUPPORTED}: {too_new}"


def test_oldest_supported_argo_is_the_newest_feature_used():
    """The stated floor is tight: some feature used first appeared in exactly that release."""
    assert argo_versions.oldest_version_for(_rendered()) == argo_versions.OLDEST_SUPPORTED


def test_rendered_yaml_uses_no_field_argo_v4_removed():
    used = {f.name for f in argo_versions.used_features(_rendered())}
    assert "synchronization.mutex (singular; removed in v4.0.0)" not in used
