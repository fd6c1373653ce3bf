"""Fast pre-checks on the Argo objects `python -m workflows.render` writes, kept only for what the engines the unit
tier runs cannot say: each names the template, task and field, and cites the Argo or Kubernetes code that would
refuse the object later — at `kubectl apply`, or while the pipeline runs, hours in.

What the engines already refuse is not ported here (tests/test_engines.py is the authority): `argo lint --offline
--strict` runs Argo's submission-time validator (workflow/validate/validate.go) on every rendered object and the
Workflow the retrain cron creates, and refuses a broken copy for each class of error it covers (names, entrypoint and
exit handler, arguments, inputs and outputs, template types, variables, DAG dependencies and results, resource
templates, retry policy, podGC, CronWorkflow schedules, fields v4 removed); the harness (engines/harness/) runs every
`when`, `{{=…}}` tag, resource condition and retry expression through Argo's own code.

Kept, each rule with a broken fixture in tests/test_argo_rules.py that `argo lint` lets through:

- `object_name_dns`, `object_labels`: the API server's ObjectMeta validation (apimachinery). Lint checks neither,
  and the unit tier has no API server; labels of the Workflow submit-retrain creates are filled from check-triggers'
  output, so the API server would refuse them only when the retrain cron fires.
- `retry_backoff`: backoff durations, factor and limit are parsed by the controller on the first retry only.
- `resource_owner_reference`: `setOwnerReference` needs a manifest of one object with a kind; the controller finds
  out when the resource step runs.
- `synchronization`: duplicate locks and semaphores without a source fail when the lock is taken.
- `task_reads`: a DAG task's `when`, `{{=…}}` tags and `fromExpression` may read `tasks.X` only of tasks that run
  before it (its ancestors), and only outputs X's template declares. Lint skips expression tags and lets a `when`
  read any task of its DAG; the harness evaluates what it is handed. At run time a `when` that reads a later task
  requeues the task for ever and an expression fails ("failed to evaluate expression: … is missing").

Entry point: `validate(obj)` for a WorkflowTemplate, CronWorkflow or Workflow dict; `findings(obj)` pairs each
message with its rule; `RULES` lists them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator

import yaml

from tests.argo_versions import strings

TAG = re.compile(r"\{\{(.*?)\}\}", re.S)  # fasttemplate with "{{" and "}}": a tag ends at the first "}}"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built in: the RayJob manifest is large


def _spec(obj: dict) -> dict:
    spec = obj.get("spec") or {}
    return spec.get("workflowSpec") or spec


def _templates(obj: dict) -> list[dict]:
    return _spec(obj).get("templates") or []


# --------------------------------------------------------------------------------------------------------------------
# Shared parsers: Kubernetes names and labels, Go durations, DAG ancestry, expr-lang member paths

DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"^{DNS1123_LABEL}(\.{DNS1123_LABEL})*$")
QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def qualified_name_errors(key: str) -> list[str]:
    """k8s apimachinery pkg/util/validation/validation.go: IsQualifiedName."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional prefix"]
    name = parts[-1]
    errors = []
    if len(parts) == 2 and (not parts[0] or not DNS1123_SUBDOMAIN.match(parts[0]) or len(parts[0]) > 253):
        errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not QUALIFIED_NAME_PART.match(name):
        errors.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """k8s apimachinery pkg/util/validation/validation.go: IsValidLabelValue."""
    errors = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not LABEL_VALUE.match(value):
        errors.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return errors


GO_DURATION = re.compile(r"^[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$")


def duration_error(text: object) -> str | None:
    """argo-workflows pkg/apis/workflow/v1alpha1/utils.go: ParseStringToDuration — a bare integer is seconds, else a
    Go duration (time.ParseDuration: a signed sequence of decimal numbers with units, or "0")."""
    s = str(text)
    if re.fullmatch(r"[+-]?\d+", s) or GO_DURATION.match(s):
        return None
    return f"unable to parse {s} as a duration"


# workflow/common/ancestry.go: taskNameRegex — a `depends` word is a task, or a task and its result.
TASK_NAME = re.compile(r"([a-zA-Z0-9][-a-zA-Z0-9]*?)\.[A-Z][a-zA-Z]+|([a-zA-Z0-9][-a-zA-Z0-9]*)")


def ancestry(tasks: list[dict]) -> dict[str, set[str]]:
    """workflow/common/ancestry.go: GetTaskDependencies and GetTaskAncestry — every task that runs before each task
    (its `depends` expression or legacy `dependencies` list, followed back)."""
    deps = {}
    for task in tasks:
        depends = task.get("depends") or " && ".join(task.get("dependencies") or [])
        deps[task.get("name", "")] = {m.group(1) or m.group(2) for m in TASK_NAME.finditer(depends)}
    found: dict[str, set[str]] = {}
    for name in deps:
        seen: set[str] = set()
        todo = list(deps[name])
        while todo:
            dep = todo.pop()
            if dep in deps and dep not in seen:
                seen.add(dep)
                todo += deps[dep]
        found[name] = seen - {name}
    return found


_EXPR_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|(?P<num>\d[\d_.]*)|(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)"""
    r"""|(?P<op>\?\.|\?\?|[^\sA-Za-z0-9_$'"]))"""
)


def expression_paths(expression: str, root: str = "tasks") -> list[str]:
    """util/template/expression_template.go: getIdentifiers/getMemberPath — the paths under `root` an expr-lang
    expression reads: `a.b['c']` is `a.b.c`; a `?.` or `??` guard ends the path (the guarded part may be absent)."""
    tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in _EXPR_TOKEN.finditer(expression) if m.lastgroup]
    paths = []
    for i, (kind, text) in enumerate(tokens):
        if kind != "id" or text != root or (i and tokens[i - 1][1] in (".", "?.")):
            continue
        parts, j = [text], i + 1
        while j < len(tokens):
            if tokens[j][1] == "." and j + 1 < len(tokens) and tokens[j + 1][0] == "id":
                parts.append(tokens[j + 1][1])
                j += 2
            elif tokens[j][1] == "[" and j + 2 < len(tokens) and tokens[j + 1][0] == "str" and tokens[j + 2][1] == "]":
                parts.append(tokens[j + 1][1][1:-1])
                j += 3
            else:
                break
        if j < len(tokens) and tokens[j][1] == "??":
            parts = parts[:1]
        paths.append(".".join(parts))
    return paths


@functools.lru_cache(maxsize=256)
def parse_manifest(text: str) -> tuple[list[object], str | None]:
    """A resource manifest's YAML documents with `{{…}}` replaced by placeholders (what validation substitutes before
    parsing it: validate.go SubstituteResourceManifestExpressions and ProcessArgs), or the YAML error."""
    try:
        return list(yaml.load_all(TAG.sub("placeholder", text), Loader=_LOADER)), None
    except yaml.YAMLError as e:
        return [], str(e)


# --------------------------------------------------------------------------------------------------------------------
# The rules


def object_name_dns(obj: dict) -> list[str]:
    """kubernetes apimachinery pkg/api/validation/objectmeta.go: ValidateObjectMetaAccessor with NameIsDNSSubdomain
    (generic.go; a generateName is checked with its trailing '-' masked) — what the API server refuses for any Argo
    object before Argo sees it."""
    meta = obj.get("metadata") or {}
    errors = []
    for key in ("name", "generateName"):
        value = meta.get(key)
        if not value:
            continue
        checked = value[:-1] + "a" if key == "generateName" and value.endswith("-") else value
        if len(checked) > 253 or not DNS1123_SUBDOMAIN.match(checked):
            errors.append(
                f"metadata.{key}: Invalid value: {value!r}: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            )
    if not meta.get("name") and not meta.get("generateName"):
        errors.append("metadata.name: Required value: name or generateName is required")
    return errors


def object_labels(obj: dict) -> list[str]:
    """kubernetes apimachinery pkg/apis/meta/v1/validation/validation.go: ValidateLabels and
    pkg/api/validation/objectmeta.go: ValidateAnnotations — label and annotation keys are qualified names, label
    values at most 63 alphanumerics, '-', '_', '.': the API server refuses the object otherwise (for a Workflow a
    resource template creates: when that step runs)."""
    meta = obj.get("metadata") or {}
    errors = []
    for key, value in (meta.get("labels") or {}).items():
        if errs := qualified_name_errors(str(key)):
            errors.append(f"metadata.labels: Invalid value: {key!r}: {'; '.join(errs)}")
        if errs := label_value_errors(str(value)):
            errors.append(f"metadata.labels: Invalid value: {str(value)!r}: {'; '.join(errs)}")
    for key in meta.get("annotations") or {}:
        if errs := qualified_name_errors(str(key).lower()):
            errors.append(f"metadata.annotations: Invalid value: {key!r}: {'; '.join(errs)}")
    return errors


def retry_backoff(obj: dict) -> list[str]:
    """argo-workflows workflow/controller/operator.go: processNodeRetries — at run time, on the first retry: a backoff
    needs a duration ("no base duration specified for retryStrategy"), duration / maxDuration / cap parse with
    ParseStringToDuration, factor and limit resolve to integers (util/intstr Int32: "value '%s' cannot be resolved to
    an int"). Values still holding `{{…}}` are left to run time."""
    errors = []
    for t in _templates(obj):
        retry = t.get("retryStrategy")
        if retry is None:
            continue
        where = f"templates.{t.get('name')}.retryStrategy"
        backoff = retry.get("backoff")
        if backoff is not None:
            if not backoff.get("duration"):
                errors.append(f"{where}: no base duration specified for retryStrategy")
            for key in ("duration", "maxDuration", "cap"):
                value = backoff.get(key)
                if value and "{{" not in str(value) and (err := duration_error(value)):
                    errors.append(f"{where}.backoff.{key}: {err}")
        for key, value in (("backoff.factor", (backoff or {}).get("factor")), ("limit", retry.get("limit"))):
            if value is not None and "{{" not in str(value) and not re.fullmatch(r"[+-]?\d+", str(value)):
                errors.append(f"{where}.{key}: value '{value}' cannot be resolved to an int")
    return errors


def resource_owner_reference(obj: dict) -> list[str]:
    """argo-workflows workflow/controller/operator.go: executeResource — with setOwnerReference the controller
    unmarshals the manifest into an unstructured object to add the Workflow as owner; apimachinery's
    UnstructuredJSONScheme refuses a document that is not one object with a kind ("Object 'Kind' is missing in …")."""
    errors = []
    for t in _templates(obj):
        res = t.get("resource") or {}
        if not res.get("setOwnerReference") or not res.get("manifest"):
            continue
        docs, error = parse_manifest(res["manifest"])
        if error is not None:
            continue  # argo lint refuses it ("resource.manifest must be a valid yaml")
        if len(docs) != 1 or not isinstance(docs[0], dict) or not docs[0].get("kind"):
            errors.append(
                f"templates.{t.get('name')}.resource.setOwnerReference: Object 'Kind' is missing in the manifest"
            )
    return errors


def synchronization(obj: dict) -> list[str]:
    """argo-workflows workflow/sync/syncitems.go: allSyncItems/checkDuplicates and lock_name.go:
    getSemaphoreLockName, as sync_manager.go TryAcquire applies them at run time ("requested configuration is
    invalid: …"): no two identical locks; a semaphore names a configMapKeyRef or a database, not both."""
    holders = [("spec.synchronization", _spec(obj).get("synchronization") or {})]
    holders += [(f"templates.{t.get('name')}.synchronization", t.get("synchronization") or {}) for t in _templates(obj)]
    errors = []
    for where, sync in holders:
        items = [("semaphore", s) for s in sync.get("semaphores") or []]
        items += [("mutex", m) for m in sync.get("mutexes") or []]
        seen = []
        for kind, item in items:
            if (kind, item) in seen:
                errors.append(f"{where}: requested configuration is invalid: duplicate synchronization item found")
            seen.append((kind, item))
            if kind == "semaphore" and item.get("configMapKeyRef") and item.get("database"):
                errors.append(f"{where}: invalid semaphore with both ConfigMapKeyRef and Database")
            elif kind == "semaphore" and not item.get("configMapKeyRef") and not item.get("database"):
                errors.append(f"{where}: cannot get LockName for a Semaphore without a ConfigMapRef or Database")
    return errors


def _task_reads(dag: dict) -> Iterator[tuple[str, str, str, set[str]]]:
    """(where, what, `tasks.…` path, the tasks it may read) for every run-time read of a task in a DAG template."""
    tasks = (dag.get("dag") or {}).get("tasks") or []
    before = ancestry(tasks)
    for task in tasks:
        where, readable = f"templates.{dag.get('name')}.tasks.{task.get('name')}", before[task.get("name", "")]
        for tag in TAG.findall(task.get("when") or ""):
            if tag.strip().startswith("tasks."):
                yield f"{where}.when", "the task is requeued, never run", tag.strip(), readable
        for text in strings(task):
            for tag in TAG.findall(text):
                for path in expression_paths(tag[1:]) if tag.startswith("=") else []:
                    yield where, "failed to evaluate expression", path, readable
        for art in (task.get("arguments") or {}).get("artifacts") or []:
            for path in expression_paths(art.get("fromExpression") or ""):
                yield f"{where}.arguments.artifacts.{art.get('name')}.fromExpression", "Argo fails", path, readable
    # operator.go getTemplateOutputsFromScope: a DAG's outputs see every task of the DAG
    every = {t.get("name", "") for t in tasks}
    outs = dag.get("outputs") or {}
    for kind in ("parameters", "artifacts"):
        for o in outs.get(kind) or []:
            expression = (o.get("valueFrom") or {}).get("expression") or o.get("fromExpression") or ""
            for path in expression_paths(expression):
                yield f"templates.{dag.get('name')}.outputs.{kind}.{o.get('name')}", "Argo fails", path, every


def task_reads(obj: dict) -> list[str]:
    """argo-workflows workflow/controller/dag.go: buildLocalScopeFromTask (a DAG task's run-time scope holds only its
    ancestors' results), steps.go shouldExecute after ReplaceStrictAny (a `when` that does not resolve is requeued)
    and util/template/expression_template.go expressionReplaceStrict ("failed to evaluate expression: %s is
    missing") — every `tasks.X.…` a task's `when`, `{{=…}}` tag or fromExpression reads names an ancestor X, and an
    output X's template declares. validate.go lets a `when` read any task of its DAG and skips expression tags."""
    by_name = {t.get("name"): t for t in _templates(obj)}
    tasks_of = {
        t.get("name"): {k.get("name"): by_name.get(k.get("template")) for k in t["dag"].get("tasks") or []}
        for t in _templates(obj)
        if t.get("dag") is not None
    }
    errors = []
    for dag in (t for t in _templates(obj) if t.get("dag") is not None):
        for where, outcome, path, readable in _task_reads(dag):
            parts = path.split(".")
            task = parts[1] if len(parts) > 1 else ""
            if task not in readable:
                what = "does not run before this task" if task in tasks_of[dag.get("name")] else "is no task of the DAG"
                errors.append(f"{where} reads {path}: '{task}' {what}: {outcome}")
                continue
            if len(parts) > 4 and parts[2] == "outputs" and parts[3] in ("parameters", "artifacts"):
                tmpl = tasks_of[dag.get("name")].get(task)  # None: a templateRef, not ours to read
                declared = {o.get("name") for o in ((tmpl or {}).get("outputs") or {}).get(parts[3]) or []}
                if tmpl is not None and parts[4] not in declared:
                    errors.append(f"{where} reads {path}: template {tmpl.get('name')!r} declares no such output")
    return errors


RULES: dict[str, Callable[[dict], list[str]]] = {
    r.__name__: r
    for r in (object_name_dns, object_labels, retry_backoff, resource_owner_reference, synchronization, task_reads)
}


def findings(obj: dict) -> list[tuple[str, str]]:
    """(rule, message) for everything these pre-checks refuse in `obj`."""
    if obj.get("kind") not in ("Workflow", "WorkflowTemplate", "CronWorkflow"):
        return [("kind", f"{obj.get('kind')!r} is not a Workflow, WorkflowTemplate or CronWorkflow")]
    return [(name, message) for name, rule in RULES.items() for message in rule(obj)]


def validate(obj: dict) -> list[str]:
    """Every message for a WorkflowTemplate, CronWorkflow or Workflow dict (empty: it passes)."""
    return [message for _, message in findings(obj)]
