"""The rendered Argo objects run through the real engines (tests/engines.py; built by scripts/engines.sh):

- level 1, Argo's CLI: `argo lint --offline --strict` over every rendered object and the Workflow `submit-retrain`
  creates, for each Argo release built, and a broken copy for each class of error it refuses (`LINT_BROKEN`);
- level 2, the engines' packages (engines/harness/): expr-lang, through Argo's util/template, on every `{{=…}}`
  with Argo's variables; every `when` as the controller evaluates it; every resource condition through
  apimachinery's labels.Parse; every retryStrategy.expression through Argo's EvalBool; and the workflow specs that
  `templateReferencing: Strict` lets through (util.ValidateUserOverrides); and Kubernetes' Pod Security evaluator
  (engines/podsecurity/) on every pod Argo and KubeRay would create (as tests/argo_pods.py builds them).

What these engines refuse is not ported to Python: tests/argo_rules.py keeps only what they cannot see (names and
labels the API server judges, and what Argo's controller finds only at run time; its docstring lists them). The other
ports (tests/argo_pods.py, tests/pod_security.py) stay as fast pre-checks with field-named messages; where a port and
an engine judge the same thing, this file is the authority.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.argo_pods import ControllerConfig, rayjob_pods, shipped_config, workflow_pods, workflow_spec
from tests.conftest import ROOT
from tests.engines import ARGO_VERSIONS, argo_lint, ask, binary, harness, pod_security
from tests.manifests import rendered_rayjob, substitute
from tests.pod_security import check

ARGO_DIR = ROOT / "infra/argo"
RETRAIN_INPUTS = {
    "triggers": "quality.feedback",
    "summary": "feedback: 60 new row(s)",
    "champion-version": "3",
    "dataset-repo": "https://example.org/data.git",
    "dataset-rev": "a" * 40,
    "base-model": "org/base",
    "base-revision": "main",
    "model-name": "distillery-summariser",
    "tracking-uri": "http://mlflow:5000",
}


@functools.cache
def _rendered() -> dict[str, dict]:
    return {p.name: yaml.load(p.read_text(), Loader=yaml.CSafeLoader) for p in sorted(ARGO_DIR.glob("*.yaml"))}


def rendered() -> dict[str, dict]:
    """The rendered objects by file name (a fresh copy: tests break them)."""
    return copy.deepcopy(_rendered())


def retrain_workflow() -> dict:
    """The Workflow submit-retrain creates, its `{{inputs.parameters.*}}` filled in as Argo would."""
    spec = rendered()["retrain-workflowtemplate.yaml"]["spec"]
    creator = next(t for t in spec["templates"] if "kind: Workflow" in (t.get("resource") or {}).get("manifest", ""))
    return yaml.safe_load(substitute(creator["resource"]["manifest"], RETRAIN_INPUTS))


def write(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# --- level 1: argo lint --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ARGO_VERSIONS)
def test_argo_lint_passes_every_rendered_object_and_the_retrain_workflow(version: str, tmp_path: Path):
    files = [*sorted(ARGO_DIR.glob("*.yaml")), write(tmp_path, "retrain-workflow.yaml", retrain_workflow())]
    proc = argo_lint(version, *files)
    assert proc.returncode == 0, f"argo {version} lint:\n{proc.stdout}{proc.stderr}"
    assert "no linting errors found" in proc.stdout + proc.stderr


# One broken copy of a rendered object per class of error Argo's submission-time validator refuses: these classes are
# not ported to Python (tests/argo_rules.py holds only what lint cannot see), so here is where each is shown refused.


def _spec(doc: dict) -> dict:
    return doc["spec"].get("workflowSpec") or doc["spec"]


def _template(doc: dict, pick: Callable[[dict], bool] | str) -> dict:
    test = (lambda t: t["name"] == pick) if isinstance(pick, str) else pick
    return next(t for t in _spec(doc)["templates"] if test(t))


def _task(doc: dict, pick: Callable[[dict], bool] | str) -> dict:
    test = (lambda t: t["name"] == pick) if isinstance(pick, str) else pick
    return next(t for t in _template(doc, _spec(doc)["entrypoint"])["dag"]["tasks"] if test(t))


def _leaf(t: dict) -> bool:
    return "container" in t and bool((t.get("inputs") or {}).get("parameters"))


def _leaf_with_artifacts(t: dict) -> bool:
    return "container" in t and bool((t.get("inputs") or {}).get("artifacts"))


def _creates(t: dict) -> bool:
    return (t.get("resource") or {}).get("action") == "create"


def _artifact_args(k: dict) -> bool:
    return bool((k.get("arguments") or {}).get("artifacts"))


def _param_args(k: dict) -> bool:
    return bool((k.get("arguments") or {}).get("parameters"))


def _put(obj: dict, key: str, value: object) -> None:
    obj[key] = value


def _add_argument(task: dict, value: str) -> None:
    task["arguments"]["parameters"].append({"name": "x", "value": value})


def _known_defect(doc: dict) -> None:
    """The hand-off the pipeline once had: the adapter picked with an expression, no `from`, no location, no key."""
    artifacts = _task(doc, _artifact_args)["arguments"]["artifacts"]
    artifacts[0] = {
        "name": artifacts[0]["name"],
        "fromExpression": "tasks['train-gpu'].status == 'Succeeded' ? tasks['train-gpu'].outputs.artifacts.adapter"
        " : tasks['train-cpu'].outputs.artifacts.adapter",
    }


DISTILL, CRON, CRON_TEMPLATE, WORKFLOW = (
    "distill-workflowtemplate.yaml",
    "retrain-cronworkflow.yaml",
    "retrain-workflowtemplate.yaml",
    "retrain-workflow.yaml",
)
# (id, the file broken, how, what argo lint says)
LINT_BROKEN: list[tuple[str, str, Callable[[dict], object], str]] = [
    ("name-64", DISTILL, lambda d: _put(d["metadata"], "name", "d" * 64), "must not be more than 63 characters"),
    ("cron-name-53", CRON, lambda d: _put(d["metadata"], "name", "c" * 53), "must not be more than 52 characters"),
    ("no-schedules", CRON, lambda d: d["spec"].pop("schedules"), "cron workflow must have at least one schedule"),
    (
        "singular-schedule",
        CRON,
        lambda d: _put(d["spec"], "schedule", d["spec"].pop("schedules")[0]),
        'unknown field "spec.schedule"',
    ),
    ("four-fields", CRON, lambda d: _put(d["spec"], "schedules", ["17 */6 * *"]), "expected exactly 5 fields"),
    ("bad-timezone", CRON, lambda d: _put(d["spec"], "timezone", "Mars/Olympus"), 'invalid timezone "Mars/Olympus"'),
    ("bad-concurrency", CRON, lambda d: _put(d["spec"], "concurrencyPolicy", "Sometimes"), "not a valid concurrency"),
    ("negative-deadline", CRON, lambda d: _put(d["spec"], "startingDeadlineSeconds", -1), "must be positive"),
    (
        "singular-mutex",
        WORKFLOW,
        lambda d: _put(d["spec"], "synchronization", {"mutex": {"name": "distill-retrain"}}),
        'unknown field "spec.synchronization.mutex"',
    ),
    (
        "ref-misspelt",
        WORKFLOW,
        lambda d: _put(d["spec"]["workflowTemplateRef"], "name", "distil"),
        'couldn\'t find workflow template "distil"',
    ),
    (
        "ref-with-templates",
        WORKFLOW,
        lambda d: _put(d["spec"], "templates", [{"name": "x", "suspend": {}}]),
        "Templates is invalid field in spec if workflow referred WorkflowTemplate reference",
    ),
    (
        "workflow-entrypoint-misspelt",
        WORKFLOW,
        lambda d: _put(d["spec"], "entrypoint", "pipelin"),
        "template reference distill.pipelin not found",
    ),
    (
        "template-name-underscore",
        DISTILL,
        lambda d: _put(_template(d, "cleanup"), "name", "clean_up"),
        "'clean_up' is invalid",
    ),
    (
        "template-name-twice",
        DISTILL,
        lambda d: d["spec"]["templates"].append(copy.deepcopy(_template(d, "cleanup"))),
        "name 'cleanup' is not unique",
    ),
    ("entrypoint-misspelt", DISTILL, lambda d: _put(d["spec"], "entrypoint", "pipelin"), "'pipelin' undefined"),
    ("on-exit-misspelt", DISTILL, lambda d: _put(d["spec"], "onExit", "cleanp"), "template name 'cleanp' undefined"),
    (
        "argument-name-space",
        DISTILL,
        lambda d: _put(d["spec"]["arguments"]["parameters"][0], "name", "dataset repo"),
        "'dataset repo' is invalid",
    ),
    ("known-defect-fromExpression-only", DISTILL, _known_defect, "from, artifact location, or key is required"),
    (
        "value-outside-enum",
        CRON_TEMPLATE,
        lambda d: _put(d["spec"]["arguments"]["parameters"][0], "enum", ["a", "b"]),
        "enum list",
    ),
    (
        "container-and-script",
        DISTILL,
        lambda d: _put(_template(d, _leaf), "script", {"image": "x", "source": "x"}),
        "multiple template types specified",
    ),
    (
        "input-artifact-climbs-out",
        DISTILL,
        lambda d: _put(_template(d, _leaf_with_artifacts)["inputs"]["artifacts"][0], "path", "/work/in/../../etc"),
        "Directory traversal is not permitted",
    ),
    (
        "task-drops-parameter",
        DISTILL,
        lambda d: _task(d, _param_args)["arguments"]["parameters"].pop(0),
        "was not supplied",
    ),
    (
        "task-drops-artifacts",
        DISTILL,
        lambda d: _task(d, _artifact_args)["arguments"].pop("artifacts"),
        "was not supplied",
    ),
    (
        "retry-policy",
        DISTILL,
        lambda d: _put(_template(d, _leaf)["retryStrategy"], "retryPolicy", "Sometimes"),
        "Sometimes is not a valid RetryPolicy",
    ),
    (
        "dag-deadline",
        DISTILL,
        lambda d: _put(_template(d, "pipeline"), "activeDeadlineSeconds", 60),
        "activeDeadlineSeconds is only valid for leaf templates",
    ),
    (
        "leaf-timeout-number",
        CRON_TEMPLATE,
        lambda d: _put(d["spec"]["templates"][0], "timeout", "30"),
        "has invalid duration format in timeout",
    ),
    (
        "undeclared-input",
        DISTILL,
        lambda d: _template(d, _leaf)["container"]["args"].append("{{inputs.parameters.nope}}"),
        "failed to resolve {{inputs.parameters.nope}}",
    ),
    (
        "undeclared-task-output",
        DISTILL,
        lambda d: _add_argument(_task(d, "propose"), "{{tasks.register.outputs.parameters.nope}}"),
        "failed to resolve {{tasks.register.outputs.parameters.nope}}",
    ),
    ("no-image", DISTILL, lambda d: _put(_template(d, _leaf)["container"], "image", ""), "image may not be empty"),
    (
        "mount-twice",
        DISTILL,
        lambda d: _put(
            _template(d, _leaf_with_artifacts)["container"],
            "volumeMounts",
            [{"name": "a", "mountPath": "/m"}, {"name": "b", "mountPath": "/m"}],
        ),
        "mountPath '/m' already mounted",
    ),
    (
        "resource-action",
        DISTILL,
        lambda d: _put(_template(d, _creates)["resource"], "action", "upsert"),
        "resource.action must be one of",
    ),
    (
        "resource-bad-yaml",
        DISTILL,
        lambda d: _put(_template(d, _creates)["resource"], "manifest", "kind: RayJob\nspec: [a"),
        "resource.manifest must be a valid yaml",
    ),
    (
        "resource-output-path",
        DISTILL,
        lambda d: _put(_template(d, _creates)["outputs"]["parameters"][0], "valueFrom", {"path": "/a"}),
        ".jqFilter or jsonPath must be specified for Resource templates",
    ),
    (
        "dag-output-path",
        DISTILL,
        lambda d: _put(
            _template(d, "pipeline"), "outputs", {"parameters": [{"name": "decision", "valueFrom": {"path": "/a"}}]}
        ),
        "parameter or expression must be specified for DAG templates",
    ),
    (
        "task-template-misspelt",
        DISTILL,
        lambda d: _put(_task(d, "push-adapter"), "template", "propse"),
        "template name 'propse' undefined",
    ),
    (
        "depends-on-missing",
        DISTILL,
        lambda d: _put(_task(d, lambda k: "depends" in k), "depends", "preflght.Succeeded"),
        "sorting failed: invalid dependency preflght",
    ),
    (
        "cycle",
        DISTILL,
        lambda d: _put(_task(d, "check-parameters"), "depends", "push-adapter.Succeeded"),
        "sorting failed: graph with cycle",
    ),
    (
        "any-succeeded-without-items",
        CRON_TEMPLATE,
        lambda d: _put(_task(d, "submit-retrain"), "depends", "check-triggers.AnySucceeded"),
        "uses an items-based condition such as .AnySucceeded or .AllFailed but does not contain any items",
    ),
    (
        "result-misspelt",
        DISTILL,
        lambda d: _put(_task(d, lambda k: "depends" in k), "depends", "preflight.Succeded"),
        "task result 'Succeded' for task 'preflight' is invalid",
    ),
    (
        "argument-from-non-ancestor",
        DISTILL,
        lambda d: _add_argument(_task(d, "check-parameters"), "{{tasks.propose.outputs.parameters.proposed}}"),
        "missing dependency 'propose' for parameter 'x'",
    ),
    ("pod-gc-strategy", DISTILL, lambda d: _put(d["spec"]["podGC"], "strategy", "OnSuccess"), "unknown strategy"),
]


@pytest.fixture(scope="module", params=ARGO_VERSIONS)
def lint_of_broken_copies(request, tmp_path_factory) -> tuple[str, dict[str, str]]:
    """One `argo lint` over every broken copy beside the unbroken objects they reference: what it says of each file."""
    folder = tmp_path_factory.mktemp("broken")
    whole = {**rendered(), WORKFLOW: retrain_workflow()}
    files = [*sorted(ARGO_DIR.glob("*.yaml")), write(folder, WORKFLOW, whole[WORKFLOW])]
    for case_id, name, mutate, _ in LINT_BROKEN:
        doc = copy.deepcopy(whole[name])
        if doc["kind"] != "Workflow":  # a name of its own: the unbroken objects keep theirs for the references
            doc["metadata"]["name"] = f"broken-{case_id}"[:52].lower()
        mutate(doc)
        files.append(write(folder, f"{case_id}.yaml", doc))
    proc = argo_lint(request.param, *files)
    said: dict[str, str] = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        path = line.split(": in ", 1)[0]
        key = Path(path).name if path.startswith(str(folder)) else path
        said[key] = said.get(key, "") + line
    return request.param, said


@pytest.mark.parametrize(("case_id", "expected"), [(c[0], c[3]) for c in LINT_BROKEN], ids=[c[0] for c in LINT_BROKEN])
def test_argo_lint_refuses_each_broken_copy(lint_of_broken_copies, case_id: str, expected: str):
    version, said = lint_of_broken_copies
    found = said.get(f"{case_id}.yaml", "")
    assert expected in found, f"argo {version} lint on {case_id}: {found or 'nothing'}"


def test_argo_lint_refuses_only_the_broken_copies(lint_of_broken_copies):
    _, said = lint_of_broken_copies
    assert set(said) == {f"{c[0]}.yaml" for c in LINT_BROKEN}, set(said) ^ {f"{c[0]}.yaml" for c in LINT_BROKEN}


# --- level 2: the engines' packages --------------------------------------------------------------------------------


@functools.cache
def specs() -> dict[str, dict]:
    """Every rendered workflow spec (a referencing CronWorkflow's is its template's) and the retrain Workflow's."""
    found = {name: workflow_spec(doc) for name, doc in rendered().items() if doc["kind"] == "WorkflowTemplate"}
    found["retrain-workflow"] = workflow_spec(retrain_workflow())
    return found


def _tags(text: str) -> set[str]:
    return set(re.findall(r"\{\{([^=}][^}]*)\}\}", text))


def variables(spec: dict, text: str) -> dict[str, str]:
    """Plausible values for the variables `text` names, as the controller's scope holds them at run time: the
    workflow's parameters at their defaults, task outputs as small integers ("true" for a flag), the status Failed."""
    values = {
        f"workflow.parameters.{p['name']}": str(p.get("value", "x"))
        for p in (spec.get("arguments") or {}).get("parameters", [])
    }
    values["workflow.status"] = "Failed"
    for task, output in re.findall(r"tasks\['([^']+)'\]\.outputs\.parameters\['([^']+)'\]", text):
        values[f"tasks.{task}.outputs.parameters.{output}"] = "1"
    for tag in _tags(text):
        if tag.startswith("tasks."):
            values[tag] = "true" if tag.endswith(".fire") else "1"
    return values


def expression_sites() -> list[tuple[str, str, str]]:
    """(spec, where, text) for every string holding a `{{=…}}` tag."""
    sites = []
    for name, spec in specs().items():
        for tmpl in spec.get("templates", []):
            for task in (tmpl.get("dag") or {}).get("tasks", []):
                for p in (task.get("arguments") or {}).get("parameters", []):
                    if "{{=" in str(p.get("value", "")):
                        sites.append((name, f"{tmpl['name']}.{task['name']}.{p['name']}", p["value"]))
    return sites


def when_sites() -> list[tuple[str, str, str]]:
    return [
        (name, f"{tmpl['name']}.{task['name']}", task["when"])
        for name, spec in specs().items()
        for tmpl in spec.get("templates", [])
        for task in (tmpl.get("dag") or {}).get("tasks", [])
        if task.get("when")
    ]


def test_every_expression_tag_compiles_and_evaluates_in_argo():
    sites = expression_sites()
    assert len(sites) >= 10, sites  # the Ray sizing: replicas, CPUs per group, workers, the GPU switch
    answers = harness(
        [{"op": "replace", "text": json.dumps(text), "vars": variables(specs()[name], text)} for name, _, text in sites]
    )
    failed = {f"{name}:{where}": a["error"] for (name, where, _), a in zip(sites, answers, strict=True) if "error" in a}
    assert not failed, failed
    values = {where: json.loads(a["value"]) for (_, where, _), a in zip(sites, answers, strict=True)}
    # Integers, never `2.5` or `1e+00`: the RayJob's replicas and Ray's --num-cpus read them as such (memory and disk:
    # whole GiB).
    assert all(re.fullmatch(r"\d+|\d+Gi|true|false", v) for v in values.values()), values


def test_argo_refuses_an_expression_tag_with_an_undeclared_variable():
    text = "{{=asInt(workflow.parameters['ray-lagre-workers']) * 2}}"
    answer = ask({"op": "replace", "text": json.dumps(text), "vars": {"workflow.parameters.ray-large-workers": "1"}})
    assert "error" in answer, answer


def test_every_when_evaluates_to_a_boolean_in_argo():
    sites = when_sites()
    assert len(sites) >= 5, sites  # the three train backends, the exit handler's delete, the retrain's submit
    filled = harness(
        [{"op": "replace", "text": json.dumps(text), "vars": variables(specs()[name], text)} for name, _, text in sites]
    )
    assert all("error" not in f for f in filled), filled
    answers = harness([{"op": "when", "text": json.loads(f["value"])} for f in filled])
    failed = {where: a for (_, where, _), a in zip(sites, answers, strict=True) if not isinstance(a.get("value"), bool)}
    assert not failed, failed


def test_the_train_backend_decides_which_train_task_runs():
    ray_when = next(text for _, where, text in when_sites() if where == "pipeline.train-ray")
    for backend, runs in (("ray", True), ("gpu", False)):
        text = ray_when.replace("{{workflow.parameters.train-backend}}", backend)
        assert ask({"op": "when", "text": text}) == {"value": runs}


def test_argo_refuses_a_when_that_does_not_parse():
    assert "Invalid 'when' expression" in ask({"op": "when", "text": "'gpu' == = 'gpu'"}).get("error", "")


def conditions() -> list[tuple[str, str]]:
    return [
        (f"{tmpl['name']}.{key}", tmpl["resource"][key])
        for spec in specs().values()
        for tmpl in spec.get("templates", [])
        if "resource" in tmpl
        for key in ("successCondition", "failureCondition")
        if tmpl["resource"].get(key)
    ]


def test_every_resource_condition_parses_as_a_label_selector():
    found = conditions()
    assert {w for w, _ in found} >= {"train-ray.successCondition", "train-ray.failureCondition"}
    answers = harness([{"op": "selector", "text": text} for _, text in found])
    failed = {where: a["error"] for (where, _), a in zip(found, answers, strict=True) if "error" in a}
    assert not failed, failed
    # Each requirement as apimachinery reads it: train-ray's pair of status fields, values as written (KubeRay's).
    parsed = {where: sorted(a["value"]) for (where, _), a in zip(found, answers, strict=True)}
    assert parsed["train-ray.successCondition"] == [
        "status.jobDeploymentStatus==Complete",
        "status.jobStatus==SUCCEEDED",
    ]
    assert parsed["train-ray.failureCondition"] == [
        "status.jobDeploymentStatus in (Failed,ValidationFailed)",
        "status.jobStatus in (FAILED,STOPPED)",
    ]


def test_a_condition_apimachinery_refuses_is_refused():
    assert "error" in ask({"op": "selector", "text": "status.jobStatus in FAILED"})


def retry_expressions() -> list[tuple[str, str]]:
    return [
        (tmpl["name"], tmpl["retryStrategy"]["expression"])
        for spec in specs().values()
        for tmpl in spec.get("templates", [])
        if (tmpl.get("retryStrategy") or {}).get("expression")
    ]


@pytest.mark.parametrize(
    ("phase", "exit_code", "retried"),
    [("Error", "-1", True), ("Failed", "137", True), ("Failed", "143", True), ("Failed", "1", False)],
)
def test_every_retry_expression_runs_in_argo(phase: str, exit_code: str, retried: bool):
    """A reclaimed spot pod (Error, or killed: 137/143) is retried; a failure of the step's own (1) is not."""
    found = retry_expressions()
    assert found
    answers = harness(
        [{"op": "retry", "expression": e, "node": {"exitCode": exit_code, "phase": phase}} for _, e in found]
    )
    assert [a.get("value", a.get("error")) for a in answers] == [retried] * len(found)


def test_argo_refuses_a_retry_expression_reading_a_workflow_parameter():
    """buildRetryStrategyLocalScope holds only `retries` and `lastRetry.*`: a workflow parameter is unknown there."""
    expression = "workflow.parameters['train-backend'] == 'gpu'"
    answer = ask({"op": "retry", "expression": expression, "node": {"exitCode": "1", "phase": "Failed"}})
    assert "unknown name workflow" in answer.get("error", ""), answer


# --- templateReferencing: Strict -------------------------------------------------------------------------------------


def strict_specs() -> dict[str, dict]:
    """What a controller with `templateReferencing: Strict` is handed: each CronWorkflow's workflowSpec and the
    Workflow submit-retrain creates."""
    found = {n: d["spec"]["workflowSpec"] for n, d in rendered().items() if d["kind"] == "CronWorkflow"}
    found["retrain-workflow"] = retrain_workflow()["spec"]
    return found


@pytest.mark.parametrize("name", sorted(strict_specs()))
def test_strict_template_referencing_runs_each_workflow_the_project_submits(name: str):
    """operator.go setExecWorkflow: without workflowTemplateRef the workflow errors; with one, util/merge.go
    ValidateUserOverrides refuses any spec field outside its allow-list (issue #26 (2))."""
    spec = strict_specs()[name]
    assert spec.get("workflowTemplateRef"), f"{name}: Strict runs only workflows that reference a template"
    assert ask({"op": "overrides", "spec": spec}) == {"value": True}


def test_strict_refuses_a_referencing_workflow_that_sets_its_own_mutex():
    spec = {**retrain_workflow()["spec"], "synchronization": {"mutexes": [{"name": "distill"}]}}
    answer = ask({"op": "overrides", "spec": spec})
    assert "fields [Synchronization] are not permitted" in answer.get("error", ""), answer


# --- Pod Security admission ------------------------------------------------------------------------------------------


def every_pod() -> dict[str, dict]:
    """The pods Argo (both executor layouts, the shipped controller settings) and KubeRay would create, as
    tests/argo_pods.py builds them from the rendered objects."""
    found = {}
    for layout, initless in (("legacy", False), ("initless", True)):
        for path in sorted(ARGO_DIR.glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            for name, pod in workflow_pods(doc, shipped_config(initless=initless)).items():
                found[f"{layout}/{path.stem}/{name}"] = pod
    found |= {f"rayjob/{name}": pod for name, pod in rayjob_pods(rendered_rayjob()).items()}
    return found


def test_kubernetes_admits_every_pod_in_a_restricted_namespace():
    pods = every_pod()
    assert any(k.startswith("rayjob/worker-") for k in pods) and any("train-gpu" in k for k in pods)
    verdicts = pod_security(pods)
    refused = {k: f"{v['reason']}: {v['detail']}" for k, v in verdicts.items() if not v["allowed"]}
    assert not refused, refused


def test_kubernetes_refuses_argos_executor_containers_without_the_shipped_settings():
    doc = yaml.safe_load((ARGO_DIR / "distill-workflowtemplate.yaml").read_text())
    pod = workflow_pods(doc, ControllerConfig())["train-gpu"]
    verdict = pod_security({"train-gpu": pod})["train-gpu"]
    assert not verdict["allowed"]
    assert 'containers "init", "wait" must set' in verdict["detail"], verdict


def _main(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "main")


# One way each to break `restricted`, applied to a real pod: the port (tests/pod_security.py) and Kubernetes' own
# evaluator must both refuse each, and both admit the pod unbroken.
BREAKS = {
    "privileged": lambda p: _main(p)["securityContext"].update(privileged=True),
    "privilege-escalation": lambda p: _main(p)["securityContext"].update(allowPrivilegeEscalation=True),
    "root-user": lambda p: _main(p)["securityContext"].update(runAsUser=0),
    "added-capability": lambda p: _main(p)["securityContext"].update(capabilities={"add": ["NET_ADMIN"]}),
    "host-network": lambda p: p["spec"].update(hostNetwork=True),
    "host-path": lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "unconfined-seccomp": lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
}


def test_the_pod_security_port_and_kubernetes_agree_on_broken_pods():
    pod = every_pod()["legacy/distill-workflowtemplate/train-gpu"]
    broken = {"as-rendered": pod}
    for name, breaks in BREAKS.items():
        broken[name] = copy.deepcopy(pod)
        breaks(broken[name])
    verdicts = pod_security(broken)
    engine = {name: v["allowed"] for name, v in verdicts.items()}
    port = {name: not check(p) for name, p in broken.items()}
    assert engine == port == {"as-rendered": True} | {name: False for name in BREAKS}


def test_a_missing_engine_fails_the_test_naming_the_build_command(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DISTILLERY_ENGINES", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"harness: .* is not built; run scripts/engines.sh"):
        binary.__wrapped__("harness")
