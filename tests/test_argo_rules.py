"""The pre-checks of tests/argo_rules.py (what the engines of the unit tier cannot say: see its docstring) on what is
rendered under infra/: every Argo object passes them, so does the Workflow the retrain cron creates, and every rule
refuses a copy of the rendered objects broken on purpose, so none of them can pass by never firing. Also: what the
retrain Workflow passes the template it references, and the oldest Argo release has every feature the YAML uses
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


def test_retrain_workflow_passes_the_pre_checks():
    workflow = retrain_workflow()
    assert workflow["spec"]["workflowTemplateRef"]["name"] == "distill"
    assert validate(workflow) == []


def test_retrain_workflow_names_only_parameters_the_template_declares():
    """Not an Argo rule (Argo merges unknown names into the globals without a word): a misspelt name would silently
    leave the template's default in place."""
    declared = {p["name"] for p in template_doc()["spec"]["arguments"]["parameters"]}
    passed = {p["name"] for p in retrain_workflow()["spec"]["arguments"]["parameters"]}
    assert passed <= declared, f"not declared by distill: {sorted(passed - declared)}"


def test_retrain_workflow_supplies_every_template_parameter_without_a_default():
    """validate.go validateArgumentsValues refuses a missing value when the Workflow is submitted (`argo lint` lets
    it through); Hera renders a parameter given no default as the string 'null', which Argo would take as a value, so
    that counts as missing too."""
    required = {
        p["name"] for p in template_doc()["spec"]["arguments"]["parameters"] if p.get("value") in (None, "null")
    }
    passed = {p["name"] for p in retrain_workflow()["spec"]["arguments"]["parameters"] if p.get("value") is not None}
    assert required <= passed, f"the retrain Workflow does not set {sorted(required - passed)}"


# --------------------------------------------------------------------------------------------------------------------
# (3): every rule refuses a deliberately broken copy (each one `argo lint` lets through: tests/test_engines.py holds
# the broken copies the engine refuses)


def _creates_resource(t: dict) -> bool:
    return (t.get("resource") or {}).get("action") == "create"


def _has_artifact_args(k: dict) -> bool:
    return bool((k.get("arguments") or {}).get("artifacts"))


def _with_retry(t: dict) -> bool:
    return "container" in t and bool((t.get("retryStrategy") or {}).get("backoff"))


@dataclass
class Broken:
    id: str
    rule: str
    target: str  # "template", "cron-template" (the WorkflowTemplate the cron references) or "workflow" (the retrain
    # Workflow)
    mutate: Callable[[dict[str, dict]], object]
    expected: str


def _set(obj: dict, key: str, value: object) -> None:
    obj[key] = value


def _add_arg(task: dict, name: str, value: str) -> None:
    task.setdefault("arguments", {}).setdefault("parameters", []).append({"name": name, "value": value})


def _from_expression(d: dict[str, dict], expression: str) -> None:
    artifact = _task(d["template"], _has_artifact_args)["arguments"]["artifacts"][0]
    artifact["fromExpression"] = expression
    artifact.pop("from")


BROKEN: list[Broken] = [
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
        "backoff-words",
        "retry_backoff",
        "template",
        lambda d: _set(_template(d["template"], _with_retry)["retryStrategy"]["backoff"], "duration", "10 seconds"),
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
        "owner-reference-without-kind",
        "resource_owner_reference",
        "template",
        lambda d: _set(_template(d["template"], _creates_resource)["resource"], "manifest", "metadata: {name: x}\n"),
        "Object 'Kind' is missing",
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
        "when-reads-later-task",
        "task_reads",
        "template",
        lambda d: _set(
            _task(d["template"], lambda k: "when" in k),
            "when",
            "'{{tasks.evaluate.outputs.parameters.decision}}' == 'x'",
        ),
        "when reads tasks.evaluate.outputs.parameters.decision: 'evaluate' does not run before this task: the task is "
        "requeued, never run",
    ),
    Broken(
        "expression-misspelt-task",
        "task_reads",
        "template",
        lambda d: _add_arg(
            _task(d["template"], lambda k: "depends" in k), "x", "{{=asInt(tasks['preflght'].outputs.parameters['a'])}}"
        ),
        "reads tasks.preflght.outputs.parameters.a: 'preflght' is no task of the DAG: failed to evaluate expression",
    ),
    Broken(
        "expression-undeclared-output",
        "task_reads",
        "template",
        lambda d: _add_arg(
            _task(d["template"], "propose"), "x", "{{=asInt(tasks['register'].outputs.parameters['nope'])}}"
        ),
        "reads tasks.register.outputs.parameters.nope: template 'register' declares no such output",
    ),
    Broken(
        "fromExpression-non-ancestor",
        "task_reads",
        "template",
        lambda d: _from_expression(d, "tasks['propose'].outputs.artifacts.proposal"),
        "fromExpression reads tasks.propose.outputs.artifacts.proposal: 'propose' does not run before this task",
    ),
]


def _broken_object(case: Broken) -> dict:
    docs = {"template": template_doc(), "cron-template": cron_template_doc()}
    docs["workflow"] = retrain_workflow(docs["cron-template"])
    case.mutate(docs)
    return docs[case.target]


@pytest.mark.parametrize("case", BROKEN, ids=lambda c: f"{c.rule}:{c.id}")
def test_rule_refuses_a_broken_copy(case: Broken):
    found = findings(_broken_object(case))
    assert any(rule == case.rule and case.expected in message for rule, message in found), (
        f"{case.rule} did not say {case.expected!r}; all findings: {found}"
    )


def test_every_rule_has_a_broken_fixture():
    assert set(argo_rules.RULES) == {c.rule for c in BROKEN}, set(argo_rules.RULES) ^ {c.rule for c in BROKEN}


def test_every_rule_cites_the_source_that_refuses_at_run_time():
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
