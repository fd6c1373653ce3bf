"""Argo Workflows' own semantic rules, ported to Python so the tests can apply them to what `python -m workflows.render`
writes: a JSON schema sees field names and types, not these.

Read from the argo-workflows tags v3.7.18 (the newest v3.7) and v4.1.2; where the two differ, the docstring says so.
Most rules are the submission-time validator (`workflow/validate/validate.go`, run by `argo submit/lint`, the argo
server and the controller before a workflow starts); a few are checks the controller or executor only makes at run
time (a `when` expression, a `successCondition`, a retry backoff, a `podSpecPatch`, lock names), after the pipeline
may already have run for hours: those say so and name the function that makes them. Messages follow Argo's: they name
the template, task and field the way Argo's errors do. No Go code is copied; each function cites what it ports.

A fast pre-check, confirmed by the engines (tests/test_engines.py): Argo's own `argo lint --offline --strict` on every
rendered object, and Argo's own expression, `when`, resource-condition and Strict-referencing code through
engines/harness/. Where the two disagree, the engine is right and this port is fixed; the port stays for its
pinpointed, field-named messages and the broken fixtures each rule has.

Entry point: `validate(obj)` for a WorkflowTemplate, CronWorkflow or Workflow dict (a Workflow with
`spec.workflowTemplateRef` is validated together with the referenced template, read from `infra/argo/` unless given).
`findings(obj)` returns the same messages paired with the rule that produced them; `RULES` lists every rule.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import yaml

from tests.conftest import ROOT
from tests.manifests import WORKFLOW_NAME, WORKFLOW_UID

ARGO_DIR = ROOT / "infra/argo"

LEAF_TYPES = ("container", "containerSet", "script", "resource", "data", "http", "plugin")
POD_TYPES = ("container", "containerSet", "script", "resource", "data")
# validate.go: validateTemplateType lists these fields; GetType's names are what Argo prints ("Container", "DAG", …).
TEMPLATE_TYPES = {
    "container": "Container",
    "containerSet": "ContainerSet",
    "steps": "Steps",
    "dag": "DAG",
    "script": "Script",
    "resource": "Resource",
    "data": "Data",
    "suspend": "Suspend",
    "http": "HTTP",
    "plugin": "Plugin",
}
# workflow/common/common.go: GlobalVarValidWorkflowVariablePrefix; other tags are not Argo's to resolve.
VARIABLE_PREFIXES = ("item.", "steps.", "inputs.", "outputs.", "pod.", "workflow.", "tasks.")
TAG = re.compile(r"\{\{(.*?)\}\}", re.S)  # fasttemplate with "{{" and "}}": a tag ends at the first "}}"
PLACEHOLDER = "placeholder"  # what validation substitutes for a value only known at run time


# --------------------------------------------------------------------------------------------------------------------
# The object being validated, as Argo's validator sees it


@dataclass
class Ctx:
    """One Workflow as `validate.Workflow` sees it: its own spec, the templates that run (its own, or the referenced
    WorkflowTemplate's), the arguments merged with the referenced template's, and the global variables in scope."""

    kind: str
    metadata: dict
    spec: dict
    templates: list[dict]
    arguments: dict
    ref_spec: dict | None = None
    template_validation: bool = False  # a WorkflowTemplate validated on its own (validate.WorkflowTemplate)
    globals: set[str] = field(default_factory=set)
    by_name: dict[str, dict] = field(default_factory=dict)
    dags: dict[str, Dag] = field(default_factory=dict)

    @property
    def entrypoint(self) -> str:
        return self.spec.get("entrypoint") or (self.ref_spec or {}).get("entrypoint", "")

    @property
    def on_exit(self) -> str:
        return self.spec.get("onExit") or (self.ref_spec or {}).get("onExit", "")

    def parameter_value(self, name: str) -> str | None:
        for p in self.arguments.get("parameters") or []:
            if p.get("name") == name and p.get("value") is not None:
                return str(p["value"])
        return None


@dataclass
class Dag:
    """A DAG template's tasks with their dependencies (`common.GetTaskDependencies`) and ancestries
    (`common.GetTaskAncestry`)."""

    tmpl: dict
    tasks: list[dict]
    by_name: dict[str, dict]
    deps: dict[str, dict[str, str]]
    ancestry: dict[str, list[str]]


def _type(tmpl: dict) -> str | None:
    return next((k for k in TEMPLATE_TYPES if tmpl.get(k) is not None), None)


def _is_leaf(tmpl: dict) -> bool:
    return _type(tmpl) in LEAF_TYPES


def _strings(value: object) -> Iterator[str]:
    """Every string in a YAML value, keys included (Argo scans the template's JSON text)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _json(value: object) -> list[str]:
    """The JSON text validate.go scans for tags (it marshals the template or task and runs fasttemplate over it)."""
    return [json.dumps(value, ensure_ascii=False)]


def _args(holder: dict) -> dict:
    return holder.get("arguments") or {}


def _named(items: list[dict] | None, name: str) -> dict | None:
    return next((i for i in items or [] if i.get("name") == name), None)


def _dag(tmpl: dict) -> Dag:
    tasks = (tmpl.get("dag") or {}).get("tasks") or []
    by_name = {t.get("name", ""): t for t in tasks}
    deps = {t.get("name", ""): task_dependencies(t, by_name) for t in tasks}

    def ancestors(name: str, seen: set[str]) -> None:
        for dep in deps.get(name, {}):
            if dep in by_name and dep not in seen:
                seen.add(dep)
                ancestors(dep, seen)

    ancestry = {}
    for name in by_name:
        seen: set[str] = set()
        ancestors(name, seen)
        seen.discard(name)
        ancestry[name] = sorted(seen)
    return Dag(tmpl, tasks, by_name, deps, ancestry)


# workflow/common/ancestry.go (both tags): taskNameRegex, taskResultRegex
TASK_NAME = re.compile(r"([a-zA-Z0-9][-a-zA-Z0-9]*?\.[A-Z][a-zA-Z]+)|([a-zA-Z0-9][-a-zA-Z0-9]*)")
TASK_RESULT = re.compile(r"([a-zA-Z0-9][-a-zA-Z0-9]*?\.[A-Z][a-zA-Z]+)")


def task_dependencies(task: dict, by_name: dict[str, dict]) -> dict[str, str]:
    """argo-workflows v3.7.18/v4.1.2 workflow/common/ancestry.go: GetTaskDependencies — the tasks a `depends`
    expression (or the legacy `dependencies` list) names, "items" where it uses .AnySucceeded/.AllFailed."""
    depends = task.get("depends") or " && ".join(task.get("dependencies") or [])
    found: dict[str, str] = {}
    for m in TASK_NAME.finditer(depends):
        if m.group(1):
            name, result = m.group(1).split(".", 1)
            if result in ("AnySucceeded", "AllFailed"):
                found[name] = "items"
            else:
                found.setdefault(name, "task")
        else:
            found[m.group(2)] = "task"
    return found


def _context(obj: dict, workflow_templates: dict[str, dict] | None) -> tuple[Ctx | None, list[str]]:
    """Build what `validate.Workflow` works on; errors that stop Argo before any template is looked at."""
    kind = obj.get("kind", "")
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if kind == "CronWorkflow":
        # common.ConvertCronWorkflowToWorkflow: the workflow gets only a scheduled-time annotation, no labels.
        metadata = {
            "generateName": f"{metadata.get('name', '')}-",
            "annotations": {"workflows.argoproj.io/scheduled-time": ""},
        }
        spec = spec.get("workflowSpec") or {}
    ctx = Ctx(
        kind, metadata, spec, spec.get("templates") or [], _args(spec), template_validation=kind == "WorkflowTemplate"
    )
    ref = spec.get("workflowTemplateRef")
    if ref:
        if ctx.templates:  # validate.go: WorkflowTemplateRefFields
            return None, ["Templates is invalid field in spec if workflow referred WorkflowTemplate reference"]
        found = (workflow_templates if workflow_templates is not None else rendered_workflow_templates()).get(
            ref.get("name", "")
        )
        if found is None or ref.get("clusterScope"):
            kind_name = "clusterworkflowtemplates" if ref.get("clusterScope") else "workflowtemplates"
            return None, [f'{kind_name}.argoproj.io "{ref.get("name", "")}" not found']
        ctx.ref_spec = found.get("spec") or {}
        ctx.templates = ctx.ref_spec.get("templates") or []
        ctx.arguments = merge_arguments(_args(spec), _args(ctx.ref_spec))
    ctx.by_name = {t.get("name", ""): t for t in ctx.templates}
    ctx.dags = {t.get("name", ""): _dag(t) for t in ctx.templates if _type(t) == "dag"}
    ctx.globals = global_variables(ctx)
    return ctx, []


def merge_arguments(own: dict, referenced: dict) -> dict:
    """argo-workflows util/util.go: MergeParameters/MergeArtifacts — the Workflow's own arguments first, then the
    referenced template's that it does not name."""
    merged = {}
    for key in ("parameters", "artifacts"):
        items = list(own.get(key) or [])
        names = {i.get("name") for i in items}
        items += [i for i in referenced.get(key) or [] if i.get("name") not in names]
        if items:
            merged[key] = items
    return merged


def global_variables(ctx: Ctx) -> set[str]:
    """validate.go (v4.1.2 and v3.7.18): newTemplateValidationCtx and Workflow — the workflow.* variables every
    template may read."""
    names = {"workflow.name", "workflow.namespace", "workflow.mainEntrypoint", "workflow.serviceAccountName"}
    names |= {"workflow.uid", "workflow.status", "workflow.labels", "workflow.labels.json"}
    names |= {"workflow.annotations", "workflow.annotations.json"}
    params = ctx.arguments.get("parameters") or []
    if params:
        names |= {"workflow.parameters", "workflow.parameters.json"}
    names |= {f"workflow.parameters.{p['name']}" for p in params if p.get("name")}
    metadata_sources = [ctx.metadata, ctx.spec.get("workflowMetadata") or {}]
    if ctx.ref_spec is not None:
        metadata_sources.append(ctx.ref_spec.get("workflowMetadata") or {})
    for source in metadata_sources:
        names |= {f"workflow.annotations.{k}" for k in source.get("annotations") or {}}
        names |= {f"workflow.labels.{k}" for k in (source.get("labels") or {}) | (source.get("labelsFrom") or {})}
    if ctx.spec.get("priority") is not None:
        names.add("workflow.priority")
    if ctx.on_exit:
        names.add("workflow.failures")
    for tmpl in ctx.templates:  # addOutputsToScope: a globalName lifts an output to workflow.outputs.*
        outputs = tmpl.get("outputs") or {}
        for kind in ("parameters", "artifacts"):
            names |= {
                f"workflow.outputs.{kind}.{o['globalName']}" for o in outputs.get(kind) or [] if o.get("globalName")
            }
    return names


def rendered_workflow_templates() -> dict[str, dict]:
    """The WorkflowTemplates under infra/argo/, by name: what a `workflowTemplateRef` finds in the namespace."""
    found = {}
    for path in sorted(ARGO_DIR.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
            if doc and doc.get("kind") == "WorkflowTemplate":
                found[doc["metadata"]["name"]] = doc
    return found


# --------------------------------------------------------------------------------------------------------------------
# Scopes: which {{…}} a template, a task or an expression may read


def local_scope(tmpl: dict) -> set[str]:
    """validate.go: validateInputs + validateTemplate — a template's own inputs, pod name, retry variables and
    declared output paths."""
    leaf = _is_leaf(tmpl)
    inputs = tmpl.get("inputs") or {}
    scope = {f"inputs.parameters.{p.get('name')}" for p in inputs.get("parameters") or []}
    if inputs.get("parameters"):
        scope.add("inputs.parameters")
    for art in inputs.get("artifacts") or []:
        scope.add(f"inputs.artifacts.{art.get('name')}")
        if leaf:
            scope.add(f"inputs.artifacts.{art.get('name')}.path")
    if _type(tmpl) in POD_TYPES:
        scope.add("pod.name")
    if tmpl.get("retryStrategy") is not None:
        scope |= {"retries", "lastRetry.exitCode", "lastRetry.status", "lastRetry.duration", "lastRetry.message"}
    if leaf:
        outputs = tmpl.get("outputs") or {}
        scope |= {f"outputs.artifacts.{a.get('name')}.path" for a in outputs.get("artifacts") or [] if a.get("path")}
        scope |= {
            f"outputs.parameters.{p.get('name')}.path"
            for p in outputs.get("parameters") or []
            if (p.get("valueFrom") or {}).get("path")
        }
    return scope


def task_references(name: str, tmpl: dict | None, aggregate: bool, ancestor: bool) -> set[str]:
    """validate.go: addOutputsToScope — what `tasks.<name>.…` a task exposes to the rest of its DAG."""
    refs = {f"tasks.{name}.{k}" for k in ("id", "startedAt", "finishedAt", "hostNodeName")}
    if ancestor:
        refs.add(f"tasks.{name}.status")
    if tmpl is None:
        return refs
    kind = _type(tmpl)
    if tmpl.get("daemon"):
        refs.add(f"tasks.{name}.ip")
    if kind in ("container", "script", "data", "http", "plugin") or (
        kind == "containerSet" and _named((tmpl["containerSet"] or {}).get("containers"), "main")
    ):
        refs |= {f"tasks.{name}.outputs.result", f"tasks.{name}.exitCode"}
    outputs = tmpl.get("outputs") or {}
    refs |= {f"tasks.{name}.outputs.parameters.{p.get('name')}" for p in outputs.get("parameters") or []}
    refs |= {f"tasks.{name}.outputs.artifacts.{a.get('name')}" for a in outputs.get("artifacts") or []}
    if aggregate:
        refs.add(f"tasks.{name}.outputs.parameters")
        if kind in ("script", "containerSet"):
            refs |= {f"tasks.{name}.outputs.result", f"tasks.{name}.exitCode"}
    return refs


def _looped(task: dict) -> bool:
    return bool(task.get("withItems") or task.get("withParam"))


def dag_scope(ctx: Ctx, dag: Dag) -> set[str]:
    """validate.go: validateDAG — the DAG template's own scope plus every task's outputs."""
    scope = local_scope(dag.tmpl)
    for task in dag.tasks:
        scope |= task_references(task.get("name", ""), ctx.by_name.get(task.get("template", "")), _looped(task), False)
        if task.get("hooks"):
            scope.add(f"tasks.{task.get('name')}.status")
    return scope


def task_scope(ctx: Ctx, dag: Dag, task: dict) -> set[str]:
    """validate.go: validateDAG — what one task may read: the DAG scope, its ancestors' status and loop items."""
    scope = dag_scope(ctx, dag)
    for ancestor in dag.ancestry.get(task.get("name", ""), []):
        a_task = dag.by_name[ancestor]
        scope |= task_references(ancestor, ctx.by_name.get(a_task.get("template", "")), _looped(a_task), True)
    if task.get("withItems") or task.get("withParam") or task.get("withSequence"):
        scope.add("item")
        if task.get("withParam"):
            scope.add("item.*")
        for item in task.get("withItems") or []:
            if isinstance(item, dict):
                scope |= {f"item.{k}" for k in item}
    return scope


def runtime_task_scope(ctx: Ctx, dag: Dag, task: dict) -> set[str]:
    """dag.go (v4.1.2): buildLocalScopeFromTask — at run time a task sees its DAG template's inputs and only its
    ancestors' results (createScope + buildLocalScope per ancestor); validation is more lenient than this."""
    inputs = dag.tmpl.get("inputs") or {}
    scope = {f"inputs.parameters.{p.get('name')}" for p in inputs.get("parameters") or []}
    scope |= {f"inputs.artifacts.{a.get('name')}" for a in inputs.get("artifacts") or []}
    for ancestor in dag.ancestry.get(task.get("name", ""), []):
        a_task = dag.by_name[ancestor]
        scope |= task_references(ancestor, ctx.by_name.get(a_task.get("template", "")), _looped(a_task), True)
    return scope | ctx.globals


def unresolved_tags(texts: Iterator[str] | list[str], scope: set[str], ctx: Ctx) -> list[str]:
    """validate.go: resolveAllVariables — the `{{…}}` tags that are neither in scope nor one of the prefixes Argo
    lets through (expression tags `{{=…}}` are not validated: util/template/validate.go Validate)."""
    missing = []
    for text in texts:
        for match in TAG.finditer(text):
            tag = match.group(1)
            name = tag.strip()
            if tag.startswith("=") or not name.startswith(VARIABLE_PREFIXES):
                continue
            if name in scope or name in ctx.globals:
                continue
            allowed = (
                ((name == "item" or name.startswith("item.")) and "item.*" in scope)
                or name.startswith("outputs.")
                or name.startswith(("workflow.creationTimestamp", "workflow.scheduledTime", "workflow.duration"))
                or name.startswith(("tasks.name", "steps.name", "node.name"))
                or (name.startswith("workflow.parameters") and ctx.template_validation)
            )
            if not allowed and tag not in missing:
                missing.append(tag)
    return missing


# --------------------------------------------------------------------------------------------------------------------
# Shared parsers: names, durations, Kubernetes label selectors, robfig/cron, govaluate, expr-lang member paths

PARAM_OR_ARTIFACT_NAME = re.compile(r"^[-a-zA-Z0-9_]+$")
WORKFLOW_FIELD_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
PARAM_NAME_MESSAGE = (
    "Parameter/Artifact name must consist of alpha-numeric characters, '_' or '-' e.g. my_param_1, MY-PARAM-1"
)
PARAMETER_REFERENCE = re.compile(r"\{\{[-a-zA-Z0-9]+(\.[-a-zA-Z0-9_]+)*\}\}")  # validate.go: paramRegex


def field_name_errors(items: list[dict] | None, prefix: str, params_or_artifacts: bool) -> list[str]:
    """validate.go: validateWorkflowFieldNames (+ isValidParamOrArtifactName / isValidWorkflowFieldName)."""
    errors, names = [], set()
    for i, item in enumerate(items or []):
        name = item.get("name") or ""
        if not name:
            errors.append(f"{prefix}[{i}].name is required")
            continue
        if params_or_artifacts:
            problems = [] if PARAM_OR_ARTIFACT_NAME.match(name) else [PARAM_NAME_MESSAGE]
        else:
            problems = ["must be no more than 128 characters"] if len(name) > 128 else []
            if not WORKFLOW_FIELD_NAME.match(name):
                problems.append(
                    "name must consist of alpha-numeric characters or '-', and must start with an alpha-numeric "
                    "character (e.g. My-name1-2, 123-NAME)"
                )
        if problems:
            errors.append(f"{prefix}[{i}].name: '{name}' is invalid: {';'.join(problems)}")
        elif name in names:
            errors.append(f"{prefix}[{i}].name '{name}' is not unique")
        names.add(name)
    return errors


GO_DURATION = re.compile(r"^[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$")


def go_duration_ok(text: str) -> bool:
    """Go time.ParseDuration's grammar: signed sequence of decimal numbers with units, or "0"."""
    return text in ("0", "+0", "-0") or bool(GO_DURATION.match(text))


def duration_error(text: object) -> str | None:
    """argo-workflows pkg/apis/workflow/v1alpha1/utils.go (v4.1.2; v3.7.18 the same): ParseStringToDuration — a bare
    integer is seconds, else a Go duration."""
    s = str(text)
    if re.fullmatch(r"[+-]?\d+", s) or go_duration_ok(s):
        return None
    return f"unable to parse {s} as a duration"


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


# fmt: off
_SELECTOR_TOKENS = {
    ")": "CLOSE", ",": "COMMA", "!": "NOT", "==": "DEQ", "=": "EQ", ">": "GT", "in": "IN", "<": "LT", "!=": "NEQ",
    "notin": "NOTIN", "(": "OPEN",
}
# fmt: on
_SELECTOR_SPECIAL = set("=!(),><")


def _selector_lex(s: str) -> list[tuple[str, str]]:
    items, pos = [], 0
    while True:
        while pos < len(s) and s[pos] in " \t\r\n":
            pos += 1
        if pos >= len(s):
            items.append(("END", ""))
            return items
        if s[pos] in _SELECTOR_SPECIAL:
            buf, last = "", None
            while pos < len(s) and s[pos] in _SELECTOR_SPECIAL:
                buf += s[pos]
                pos += 1
                if buf in _SELECTOR_TOKENS:
                    last = (_SELECTOR_TOKENS[buf], buf)
                elif last is not None:
                    pos -= 1
                    break
            items.append(last or ("ERROR", f"error expected: keyword found '{buf}'"))
            continue
        start = pos
        while pos < len(s) and s[pos] not in _SELECTOR_SPECIAL and s[pos] not in " \t\r\n":
            pos += 1
        word = s[start:pos]
        items.append((_SELECTOR_TOKENS.get(word, "IDENT") if word in ("in", "notin") else "IDENT", word))


def label_selector_error(selector: str) -> str | None:
    """k8s apimachinery pkg/labels/selector.go: Parse (Lexer, Parser.parse, parseRequirement, NewRequirement) — the
    grammar `[!]KEY [in|notin (V, …) | =|==|!=|>|< V]`, requirements joined by commas."""
    items = _selector_lex(selector)
    pos = 0

    def look(values: bool = True) -> tuple[str, str]:
        tok, lit = items[pos]
        return ("IDENT" if values and tok in ("IN", "NOTIN") else tok), lit

    def take(values: bool = True) -> tuple[str, str]:
        nonlocal pos
        pos += 1
        tok, lit = items[pos - 1]
        return ("IDENT" if values and tok in ("IN", "NOTIN") else tok), lit

    def requirement() -> str | None:
        tok, key = take()
        negated = tok == "NOT"
        if negated:
            tok, key = take()
        if tok != "IDENT":
            return f"found '{key}', expected: identifier"
        if errs := qualified_name_errors(key):
            return f'Invalid value: "{key}": {"; ".join(errs)}'
        if look()[0] in ("END", "COMMA"):
            return None
        if negated:
            return f"found '{look()[1]}', expected: ',' or 'end of string'"
        op, lit = take(values=False)
        values: list[str] = []
        if op in ("IN", "NOTIN"):
            tok, lit = take()
            if tok != "OPEN":
                return f"found '{lit}' expected: '('"
            while True:
                tok, lit = take()
                if tok == "CLOSE":
                    break
                if tok == "IDENT":
                    values.append(lit)
                    if look()[0] not in ("COMMA", "CLOSE"):
                        return f"found '{look()[1]}', expected: ',' or ')'"
                elif tok != "COMMA":
                    return f"found '{lit}', expected: ',', or identifier"
            values = values or [""]
        elif op in ("EQ", "DEQ", "NEQ", "GT", "LT"):
            if look()[0] not in ("END", "COMMA"):
                tok, lit = take()
                if tok != "IDENT":
                    return f"found '{lit}', expected: identifier"
                values = [lit]
            else:
                values = [""]
            if op in ("GT", "LT") and not re.fullmatch(r"[+-]?\d+", values[0]):
                return f"Invalid value: \"{values[0]}\": for 'Gt', 'Lt' operators, the value must be an integer"
        else:
            return f"found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
        for v in values:
            if errs := label_value_errors(v):
                return f'Invalid value: "{v}": {"; ".join(errs)}'
        return None

    while True:
        tok, lit = look()
        if tok == "END":
            return None
        if tok not in ("IDENT", "NOT"):
            return f"found '{lit}', expected: !, identifier, or 'end of string'"
        if err := requirement():
            return f"unable to parse requirement: {err}"
        tok, lit = take()
        if tok == "END":
            return None
        if tok != "COMMA":
            return f"found '{lit}', expected: ',' or 'end of string'"
        if look()[0] not in ("IDENT", "NOT"):
            return f"found '{look()[1]}', expected: identifier after ','"


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_FIELDS = (  # robfig/cron v3.0.1 parser.go: minutes, hours, dom, months, dow bounds
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, {m: i + 1 for i, m in enumerate(MONTHS)}),
    (0, 6, {d: i for i, d in enumerate(WEEKDAYS)}),
)
_CRON_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def go_time_location_error(name: str) -> str | None:
    """Go time.LoadLocation: "" and "UTC" are UTC, "Local" the local zone, anything else an IANA zone name."""
    if name in ("", "UTC", "Local"):
        return None
    if ".." in name or name.startswith("/"):
        return "time: invalid location name"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name}"
    return None


def cron_error(spec: str) -> str | None:
    """robfig/cron v3.0.1 (the version argo-workflows' go.mod pins) parser.go: ParseStandard — an optional TZ=/CRON_TZ=
    prefix, then a descriptor or exactly 5 fields (minute hour day-of-month month day-of-week)."""
    if not spec:
        return "empty spec string"
    if spec.startswith(("TZ=", "CRON_TZ=")):
        space = spec.find(" ")
        if space < 0:
            return f"provided bad location {spec}"
        location = spec[spec.find("=") + 1 : space]
        if err := go_time_location_error(location):
            return f"provided bad location {location}: {err}"
        spec = spec[space:].strip()
    if spec.startswith("@"):
        if spec in _CRON_DESCRIPTORS:
            return None
        if spec.startswith("@every "):
            return None if go_duration_ok(spec[7:]) else f"failed to parse duration {spec}"
        return f"unrecognized descriptor: {spec}"
    fields = spec.split()
    if len(fields) != 5:
        return f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]"

    def number(text: str, names: dict[str, int]) -> int:
        if text.lower() in names:
            return names[text.lower()]
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax')
        if int(text) < 0:
            raise ValueError(f"negative number ({int(text)}) not allowed: {text}")
        return int(text)

    for text, (low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for expr in [e for e in text.split(",") if e]:
            range_and_step = expr.split("/")
            low_high = range_and_step[0].split("-")
            try:
                if low_high[0] in ("*", "?"):
                    start, end = low, high
                else:
                    start = number(low_high[0], names)
                    if len(low_high) > 2:
                        return f"too many hyphens: {expr}"
                    end = number(low_high[1], names) if len(low_high) == 2 else start
                if len(range_and_step) > 2:
                    return f"too many slashes: {expr}"
                step = 1
                if len(range_and_step) == 2:
                    step = number(range_and_step[1], {})
                    if len(low_high) == 1:
                        end = high
            except ValueError as e:
                return str(e)
            if start < low:
                return f"beginning of range ({start}) below minimum ({low}): {expr}"
            if end > high:
                return f"end of range ({end}) above maximum ({high}): {expr}"
            if start > end:
                return f"beginning of range ({start}) beyond end of range ({end}): {expr}"
            if step == 0:
                return f"step of range should be a positive number: {expr}"
    return None


class GovaluateError(Exception):
    pass


# fmt: off
_GV_SYMBOLS = frozenset((
    "==", "!=", ">", ">=", "<", "<=", "=~", "!~", "&&", "||", "&", "|", "^", ">>", "<<", "+", "-", "*", "/", "%",
    "**", "!", "~", "?", ":", "??",
))
# fmt: on


def _gv_tokens(expr: str) -> list[tuple[str, object]]:
    """Knetic/govaluate lexer.go (as argo-workflows' go.mod pins it): numbers, quoted strings, true/false, bare words
    (variables; steps.go shouldExecute turns them into strings), parentheses, commas and operator symbols."""
    tokens: list[tuple[str, object]] = []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c.isspace():
            i += 1
        elif c.isdigit():
            j = i
            while j < len(expr) and (expr[j].isdigit() or expr[j] == "."):
                j += 1
            try:
                tokens.append(("NUMERIC", float(expr[i:j])))
            except ValueError as e:
                raise GovaluateError(f"Unable to parse numeric value '{expr[i:j]}' to float64") from e
            i = j
        elif c in "'\"":
            j = expr.find(c, i + 1)
            if j < 0:
                raise GovaluateError("Unclosed string literal")
            tokens.append(("STRING", expr[i + 1 : j]))
            i = j + 1
        elif c == "[":
            j = expr.find("]", i)
            if j < 0:
                raise GovaluateError("Unclosed parameter bracket")
            tokens.append(("STRING", expr[i + 1 : j]))
            i = j + 1
        elif c.isalpha():
            j = i
            while j < len(expr) and (expr[j].isalnum() or expr[j] in "_."):
                j += 1
            word = expr[i:j]
            if word in ("true", "false"):
                tokens.append(("BOOLEAN", word == "true"))
            elif word == "in":
                tokens.append(("COMPARATOR", "in"))
            else:
                tokens.append(("VARIABLE", word))  # shouldExecute turns variables into strings
            i = j
        elif c in "(),":
            tokens.append(({"(": "CLAUSE", ")": "CLAUSE_CLOSE", ",": "SEPARATOR"}[c], c))
            i += 1
        else:
            j = i
            while j < len(expr) and not (expr[j].isalnum() or expr[j].isspace() or expr[j] in "'\"()[],_"):
                j += 1
            symbol = expr[i:j]
            if symbol not in _GV_SYMBOLS:
                raise GovaluateError(f"Invalid token: '{symbol}'")
            tokens.append(("SYMBOL", symbol))
            i = j
    if sum(t == ("CLAUSE", "(") for t in tokens) != sum(t == ("CLAUSE_CLOSE", ")") for t in tokens):
        raise GovaluateError("Unbalanced parenthesis")
    return tokens


def govaluate(expr: str) -> object:
    """Evaluate a `when` the way workflow/controller/steps.go shouldExecute does with govaluate: parse everything
    first (NewEvaluableExpression), then evaluate. Precedence: ternary < ?? < || < && < comparators < + - <
    * / % ** < prefix. Types are float, string and bool; a type mismatch is an error, as in govaluate's type checks."""
    tokens = _gv_tokens(expr)
    _GovaluateRun(tokens, evaluate=False).run()  # structure errors come before any type error
    return _GovaluateRun(tokens, evaluate=True).run()


class _GovaluateRun:
    def __init__(self, tokens: list[tuple[str, object]], evaluate: bool):
        self.tokens, self.evaluate, self.pos = tokens, evaluate, 0

    def run(self) -> object:
        result = self.ternary() if self.tokens else None
        if self.pos < len(self.tokens):
            (k1, v1), (k2, v2) = self.tokens[self.pos - 1] if self.pos else ("", ""), self.tokens[self.pos]
            raise GovaluateError(f"Cannot transition token types from {k1} [{_gv_text(v1)}] to {k2} [{_gv_text(v2)}]")
        return result

    def peek(self) -> tuple[str, object] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def symbol(self, *ops: str) -> str | None:
        tok = self.peek()
        if tok and tok[0] in ("SYMBOL", "COMPARATOR") and tok[1] in ops:
            self.pos += 1
            return str(tok[1])
        return None

    def apply(self, op: str, left: object, right: object) -> object:
        if not self.evaluate:
            return None

        def need(value: object, kind: type, what: str, type_name: str) -> None:
            if not isinstance(value, kind) or (kind is float and isinstance(value, bool)):
                raise GovaluateError(f"Value '{value}' cannot be used with the {what} '{op}', it is not a {type_name}")

        if op in ("||", "&&"):
            need(left, bool, "logical operator", "bool")
            need(right, bool, "logical operator", "bool")
            return (left or right) if op == "||" else (left and right)
        if op in ("==", "!="):
            return (left == right and type(left) is type(right)) == (op == "==")
        if op in ("=~", "!~"):
            need(left, str, "comparator", "string")
            need(right, str, "comparator", "string")
            return (re.search(str(right), str(left)) is not None) == (op == "=~")
        if op == "in":
            need(right, list, "comparator", "array")
            return left in right
        if op == "+" and (isinstance(left, str) or isinstance(right, str)):
            return f"{left}{right}"
        if op in (">", ">=", "<", "<=") and isinstance(left, str) and isinstance(right, str):
            return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right}[op]
        what = "comparator" if op in (">", ">=", "<", "<=") else "modifier"
        need(left, float, what, "number")
        need(right, float, what, "number")
        a, b = float(left), float(right)
        results = {">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b, "+": a + b, "-": a - b, "*": a * b}
        return results[op] if op in results else a / b if op == "/" else a % b if op == "%" else a**b

    def binary(self, ops: tuple[str, ...], operand: Callable[[], object]) -> object:
        left = operand()
        while op := self.symbol(*ops):
            left = self.apply(op, left, operand())
        return left

    def ternary(self) -> object:
        cond = self.binary(("??",), self.logical_or)
        if self.symbol("?"):
            yes = self.ternary()
            no = self.ternary() if self.symbol(":") else None
            return yes if cond is True else no
        return cond

    def logical_or(self) -> object:
        return self.binary(("||",), self.logical_and)

    def logical_and(self) -> object:
        return self.binary(("&&",), self.comparator)

    def comparator(self) -> object:
        return self.binary(("==", "!=", ">", ">=", "<", "<=", "=~", "!~", "in"), self.additive)

    def additive(self) -> object:
        return self.binary(("+", "-"), self.multiplicative)

    def multiplicative(self) -> object:
        return self.binary(("*", "/", "%", "**"), self.prefix)

    def prefix(self) -> object:
        if op := self.symbol("!", "-"):
            value = self.prefix()
            if not self.evaluate:
                return None
            if op == "!" and not isinstance(value, bool):
                raise GovaluateError(f"Value '{value}' cannot be used with the prefix '!', it is not a bool")
            if op == "-" and (not isinstance(value, float) or isinstance(value, bool)):
                raise GovaluateError(f"Value '{value}' cannot be used with the prefix '-', it is not a number")
            return not value if op == "!" else -value
        return self.value()

    def value(self) -> object:
        tok = self.peek()
        if tok is None:
            raise GovaluateError("Unexpected end of expression")
        self.pos += 1
        if tok[0] == "CLAUSE":
            items = [self.ternary()]
            while (nxt := self.peek()) and nxt[0] == "SEPARATOR":
                self.pos += 1
                items.append(self.ternary())
            if not (nxt := self.peek()) or nxt[0] != "CLAUSE_CLOSE":
                raise GovaluateError("Unbalanced parenthesis")
            self.pos += 1
            return items if len(items) > 1 else items[0]
        if tok[0] in ("NUMERIC", "STRING", "VARIABLE", "BOOLEAN"):
            return tok[1]
        raise GovaluateError(f"Unexpected token {tok[0]} [{_gv_text(tok[1])}]")


def _gv_text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


_EXPR_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|(?P<num>\d[\d_.]*)|(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)"""
    r"""|(?P<op>\?\.|\?\?|[^\sA-Za-z0-9_$'"]))"""
)
EXPRESSION_ROOTS = ("inputs", "outputs", "workflow", "tasks", "steps", "item", "pod", "retries", "lastRetry")


def expression_paths(expression: str, roots: tuple[str, ...] | set[str] = EXPRESSION_ROOTS) -> list[str]:
    """util/template/expression_template.go (v4.1.2): getIdentifiers/getMemberPath — the variable paths an expr-lang
    expression reads: `a.b['c']` is `a.b.c`; a `?.` or `??` guard ends the path (the guarded part may be absent)."""
    tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in _EXPR_TOKEN.finditer(expression) if m.lastgroup]
    paths = []
    for i, (kind, text) in enumerate(tokens):
        if kind != "id" or text not in roots:
            continue
        if i and tokens[i - 1][1] in (".", "?."):
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


def path_in_scope(path: str, scope: set[str]) -> bool:
    """util/template/expression_template.go: hasVarInEnv — a path is there if it is a key or leads into one."""
    return path in scope or any(k.startswith(path + ".") for k in scope)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built in: the RayJob manifest is large


@functools.lru_cache(maxsize=256)
def parse_manifest(text: str) -> tuple[list[object], str | None]:
    """A resource manifest's YAML documents with `{{…}}` replaced by placeholders, or the YAML error."""
    try:
        return list(yaml.load_all(_fill(text), Loader=_LOADER)), None
    except yaml.YAMLError as e:
        return [], str(e)


def _fill(text: str, placeholder: str = PLACEHOLDER) -> str:
    """What validation substitutes before it parses a manifest: expression tags (validate.go
    SubstituteResourceManifestExpressions) and simple tags (ProcessArgs) become placeholders."""
    return TAG.sub(placeholder, text)


# --------------------------------------------------------------------------------------------------------------------
# Object-level rules (metadata, CronWorkflow)

Finding = tuple[str, str]


def object_name_length(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 and v3.7.18 workflow/validate/validate.go: Workflow, WorkflowTemplate, CronWorkflow —
    a name of at most 63 characters (52 for a CronWorkflow: its workflows append `-<unix time>`)."""
    name = (obj.get("metadata") or {}).get("name") or ""
    limit, label = {
        "CronWorkflow": (52, "cron workflow"),
        "WorkflowTemplate": (63, "workflow template"),
    }.get(obj.get("kind", ""), (63, "workflow"))
    if len(name) > limit:
        return [f'{label} name "{name}" must not be more than {limit} characters long (currently {len(name)})']
    return []


def object_name_dns(obj: dict) -> list[str]:
    """kubernetes apimachinery pkg/api/validation/objectmeta.go: ValidateObjectMetaAccessor with NameIsDNSSubdomain
    (generic.go; a generateName is checked with its trailing '-' masked) — what the API server refuses for any Argo
    object before Argo sees it (read at the apimachinery version argo-workflows v4.1.2's go.mod pins, v0.35)."""
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
    pkg/api/validation/objectmeta.go: ValidateAnnotations (v0.35, as argo-workflows v4.1.2 pins it) — label keys and
    annotation keys are qualified names, label values at most 63 alphanumerics, '-', '_', '.': the API server refuses
    the object otherwise (for a Workflow a resource template creates: when that step runs)."""
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


def cron_schedules(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 validate.go: CronWorkflow — "cron workflow must have at least one schedule" (only the
    plural `schedules` exists in v4; the singular `schedule` was removed, docs/upgrading.md "Upgrading to v4.0");
    v3.7.18 validate.go: ValidateCronWorkflow refuses `schedule` and `schedules` together."""
    if obj.get("kind") != "CronWorkflow":
        return []
    spec = obj.get("spec") or {}
    errors = []
    if spec.get("schedule") and spec.get("schedules"):
        errors.append("cron workflow cant be configured with both Spec.Schedule and Spec.Schedules")
    if not spec.get("schedules"):
        errors.append("cron workflow must have at least one schedule")
    return errors


def cron_schedule_syntax(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: CronWorkflow — every schedule must parse with robfig/cron
    ParseStandard: "cron schedule %s is malformed: %s"."""
    if obj.get("kind") != "CronWorkflow":
        return []
    spec = obj.get("spec") or {}
    schedules = list(spec.get("schedules") or []) + ([spec["schedule"]] if spec.get("schedule") else [])
    return [f"cron schedule {s} is malformed: {err}" for s in schedules if (err := cron_error(str(s)))]


def cron_timezone(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: CronWorkflow — `timezone` must load with Go's
    time.LoadLocation: 'invalid timezone %q: %s'."""
    tz = (obj.get("spec") or {}).get("timezone") or ""
    if obj.get("kind") != "CronWorkflow" or not tz:
        return []
    err = go_time_location_error(tz)
    return [f'invalid timezone "{tz}": {err}'] if err else []


def cron_concurrency_policy(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: CronWorkflow — concurrencyPolicy is Allow, Forbid, Replace or
    empty: "'%s' is not a valid concurrencyPolicy"."""
    policy = (obj.get("spec") or {}).get("concurrencyPolicy", "")
    if obj.get("kind") == "CronWorkflow" and policy not in ("Allow", "Forbid", "Replace", ""):
        return [f"'{policy}' is not a valid concurrencyPolicy"]
    return []


def cron_starting_deadline(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: CronWorkflow — "startingDeadlineSeconds must be positive"
    (a negative value is refused; 0 is allowed)."""
    deadline = (obj.get("spec") or {}).get("startingDeadlineSeconds")
    if obj.get("kind") == "CronWorkflow" and deadline is not None and int(deadline) < 0:
        return ["startingDeadlineSeconds must be positive"]
    return []


def v4_removed_fields(obj: dict) -> list[str]:
    """argo-workflows v4.1.2 docs/upgrading.md "Upgrading to v4.0" and docs/deprecations.md "Removed features"; in
    v4.1.2 pkg/apis/workflow/v1alpha1/cron_workflow_types.go CronWorkflowSpec has only `Schedules` and
    workflow_types.go Synchronization only `Semaphores`/`Mutexes`: CronWorkflow `schedule`, synchronization `mutex` and
    `semaphore`, and `podPriority` no longer exist; v4 drops them silently, so a v3.7-only spelling loses its effect."""
    errors = []
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronWorkflow" and "schedule" in spec:
        errors.append("spec.schedule was removed in Argo v4: use spec.schedules")
    workflow_spec = spec.get("workflowSpec") or spec
    holders = [("spec", workflow_spec)] + [
        (f"templates.{t.get('name')}", t) for t in workflow_spec.get("templates") or []
    ]
    for where, holder in holders:
        for single in ("mutex", "semaphore"):
            if single in (holder.get("synchronization") or {}):
                errors.append(f"{where}.synchronization.{single} was removed in Argo v4: use {single}es")
        if "podPriority" in holder:
            errors.append(f"{where}.podPriority was removed in Argo v4: use podPriorityClassName")
    return errors


OBJECT_RULES: list[Callable[[dict], list[str]]] = [
    object_name_length,
    object_name_dns,
    object_labels,
    cron_schedules,
    cron_schedule_syntax,
    cron_timezone,
    cron_concurrency_policy,
    cron_starting_deadline,
    v4_removed_fields,
]


# --------------------------------------------------------------------------------------------------------------------
# Workflow-spec rules


def template_names(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: Workflow → validateWorkflowFieldNames(spec.templates): each
    template has a unique name of alphanumerics and '-' (at most 128 characters)."""
    return field_name_errors(ctx.templates, "spec.templates", params_or_artifacts=False)


def entrypoint(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: Workflow ("spec.entrypoint is required"; a WorkflowTemplate
    may leave it out) and validateTemplateHolder ("template name '%s' undefined"; through a workflowTemplateRef:
    "template reference %s.%s not found")."""
    if not ctx.entrypoint:
        return [] if ctx.kind == "WorkflowTemplate" else ["spec.entrypoint is required"]
    return _template_missing(ctx, ctx.entrypoint)


def on_exit(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: Workflow — the exit handler (`onExit`, the Workflow's own or the
    referenced template's) is resolved like any template holder (validateTemplateHolder)."""
    return _template_missing(ctx, ctx.on_exit) if ctx.on_exit else []


def _template_missing(ctx: Ctx, name: str) -> list[str]:
    if name in ctx.by_name:
        return []
    if ctx.ref_spec is not None:
        return [f"template reference {ctx.spec['workflowTemplateRef'].get('name')}.{name} not found"]
    return [f"template name '{name}' undefined"]


def _argument_holders(ctx: Ctx) -> Iterator[tuple[str, dict, bool]]:
    """(message prefix, arguments, empty values allowed) for spec.arguments and every DAG task's arguments."""
    # validate.go Workflow: allowEmptyValues := Lint || (WorkflowTemplateValidation && !Submit)
    yield "spec.arguments.", ctx.arguments, ctx.template_validation
    for name, dag in ctx.dags.items():
        for task in dag.tasks:
            yield f"templates.{name}.tasks.{task.get('name')}.arguments.", _args(task), False


def arguments_field_names(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateArgumentsFieldNames — argument parameters and artifacts
    have unique names of alphanumerics, '-' and '_'."""
    errors = []
    for prefix, args, _ in _argument_holders(ctx):
        for kind in ("parameters", "artifacts"):
            errors += field_name_errors(args.get(kind), f"{prefix}{kind}", params_or_artifacts=True)
    return errors


def arguments_values(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateArgumentsValues — every parameter has a value or a
    valueFrom (unless empty values are allowed: a WorkflowTemplate on its own), valueFrom only as configMapKeyRef /
    supplied / event, enum holds the value; every artifact has `from`, a location or a key (`fromExpression` alone is
    refused: HasLocationOrKey is false), and not both `from` and `fromExpression`."""
    errors = []
    for prefix, args, allow_empty in _argument_holders(ctx):
        for p in args.get("parameters") or []:
            name, value_from = p.get("name"), p.get("valueFrom")
            if value_from is None and p.get("value") is None and not allow_empty:
                errors.append(f"{prefix}{name}.value or {prefix}{name}.valueFrom is required")
            sourced = value_from is not None and (
                value_from.get("configMapKeyRef") is not None
                or bool(value_from.get("event"))
                or value_from.get("supplied") is not None
            )
            if value_from is not None and (
                not sourced or any(value_from.get(k) for k in ("path", "jsonPath", "parameter", "expression"))
            ):
                errors.append(f"{prefix}{name}.valueFrom only allows: default, configMapKeyRef and supplied")
            if p.get("enum") is not None:
                if not p["enum"]:
                    errors.append(f"{prefix}{name}.enum should contain at least one value")
                elif p.get("value") is None:
                    if allow_empty:
                        break  # validate.go returns nil here: the remaining arguments go unchecked
                    errors.append(f"{prefix}{name}.value is required")
                elif str(p["value"]) not in [str(e) for e in p["enum"]]:
                    errors.append(f"{prefix}{name}.value should be present in {prefix}{name}.enum list")
        else:
            for art in args.get("artifacts") or []:
                name = art.get("name")
                if not art.get("from") and not artifact_has_location_or_key(art):
                    errors.append(f"{prefix}{name}.from, artifact location, or key is required")
                if art.get("from") and art.get("fromExpression"):
                    errors.append(f"{prefix}{name} shouldn't have both `from` and `fromExpression` in Artifact")
    return errors


# pkg/apis/workflow/v1alpha1/workflow_types.go (v4.1.2): ArtifactLocation.Get's order and each type's HasLocation
# and GetKey.
_LOCATIONS: list[tuple[str, Callable[[dict], bool], Callable[[dict], str]]] = [
    ("artifactory", lambda a: bool(a.get("url") and a.get("usernameSecret")), lambda a: a.get("url", "")),
    ("azure", lambda a: bool(a.get("endpoint") and a.get("container") and a.get("blob")), lambda a: a.get("blob", "")),
    ("git", lambda a: bool(a.get("repo")), lambda a: ""),
    ("gcs", lambda a: bool(a.get("bucket") and a.get("key")), lambda a: a.get("key", "")),
    ("hdfs", lambda a: bool(a.get("addresses")), lambda a: a.get("path", "")),
    ("http", lambda a: bool(a.get("url")), lambda a: a.get("url", "")),
    ("oss", lambda a: bool(a.get("bucket") and a.get("endpoint") and a.get("key")), lambda a: a.get("key", "")),
    ("raw", lambda a: True, lambda a: ""),
    ("s3", lambda a: bool(a.get("endpoint") and a.get("bucket") and a.get("key")), lambda a: a.get("key", "")),
    ("plugin", lambda a: bool(a.get("name") and a.get("configuration") and a.get("key")), lambda a: a.get("key", "")),
]


def artifact_has_location_or_key(art: dict) -> bool:
    """pkg/apis/workflow/v1alpha1/workflow_types.go (v4.1.2, v3.7.18): ArtifactLocation.HasLocationOrKey — the first
    location type set decides (Get); it counts if it is a full location or has a non-empty key."""
    for key, has_location, get_key in _LOCATIONS:
        if art.get(key) is not None:
            location = art[key] or {}
            return has_location(location) or bool(get_key(location))
    return False


def template_type(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateTemplateType — exactly one of container, containerSet,
    steps, script, resource, dag, suspend, data, http, plugin."""
    errors = []
    for t in ctx.templates:
        count = sum(t.get(k) is not None for k in TEMPLATE_TYPES)
        choices = (
            "choose one of: container, containerSet, steps, script, resource, dag, suspend, template, template ref"
        )
        if count == 0:
            errors.append(f"templates.{t.get('name')} template type unspecified. {choices}")
        elif count > 1:
            errors.append(f"templates.{t.get('name')} multiple template types specified. {choices}")
    return errors


def clean_path_error(art: dict) -> str | None:
    """pkg/apis/workflow/v1alpha1/workflow_types.go (v4.1.2, v3.7.18): Artifact.CleanPath — a path is required and may
    not climb out of its directory with '..'."""
    path = art.get("path") or ""
    if not path:
        return f"Artifact '{art.get('name')}' did not specify a path"
    safe_dir = ""
    if "/../" in path:
        safe_dir = path.split("/../", 1)[0]
    elif path.endswith("/.."):
        safe_dir = path[:-3]
    cleaned = posixpath.normpath(path)
    if safe_dir and (not cleaned.startswith(safe_dir + "/") or len(cleaned) <= len(safe_dir) + 1):
        name = art.get("name")
        return f"Artifact '{name}' attempted to use a path containing '..'. Directory traversal is not permitted"
    return None


def inputs(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateInputs — input names; an input artifact of a
    container/script/resource template needs a clean path (CleanPath), one of a dag/steps template may not have one;
    `from` is not valid in inputs; a git artifact needs its repo (validateArtifactLocation)."""
    errors = []
    for t in ctx.templates:
        name, ins = t.get("name"), t.get("inputs") or {}
        errors += field_name_errors(ins.get("parameters"), f"templates.{name}.inputs.parameters", True)
        errors += field_name_errors(ins.get("artifacts"), f"templates.{name}.inputs.artifacts", True)
        for art in ins.get("artifacts") or []:
            ref = f"inputs.artifacts.{art.get('name')}"
            if _is_leaf(t):
                if err := clean_path_error(art):
                    errors.append(f"error in templates.{name}.{ref}: {err}")
            elif art.get("path"):
                errors.append(f"templates.{name}.{ref}.path only valid in container/script templates")
            if art.get("from"):
                errors.append(f"templates.{name}.{ref}.from not valid in inputs")
            if art.get("git") is not None and not (art["git"] or {}).get("repo"):
                errors.append(f"templates.{name}.{ref}.git.repo is required")
    return errors


def _input_value(p: dict) -> object:
    """common/util.go overwriteWithDefaultParams: an input's value, else its default."""
    return p["value"] if p.get("value") is not None else p.get("default")


def _supplied_errors(tmpl: dict, args: dict) -> list[str]:
    errors = []
    ins = tmpl.get("inputs") or {}
    for p in ins.get("parameters") or []:
        value = _input_value(p)
        value_from = p.get("valueFrom")
        arg = _named(args.get("parameters"), p.get("name", ""))
        if arg is not None:  # common/util.go overwriteWithArguments
            value, value_from = (arg["value"], None) if arg.get("value") is not None else (None, arg.get("valueFrom"))
        if value is None and not (value_from or {}).get("configMapKeyRef"):
            errors.append(f"inputs.parameters.{p.get('name')} was not supplied")
    for art in ins.get("artifacts") or []:
        if art.get("optional") or artifact_has_location_or_key(art):
            continue
        if _named(args.get("artifacts"), art.get("name", "")) is None:
            errors.append(f"inputs.artifacts.{art.get('name')} was not supplied")
    return errors


def inputs_supplied(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 workflow/common/util.go: ProcessArgs (+ substituteAndGetConfigMapValue), as
    validate.go calls it with the real arguments: the entrypoint with the workflow's (merged) arguments, the exit
    handler with the Workflow's own, each DAG task's template with the task's — every input parameter without a value
    or default must be supplied ("inputs.parameters.%s was not supplied"), every input artifact without a location,
    key or `optional` too. A WorkflowTemplate on its own is checked with placeholder arguments (FakeArguments), so its
    entrypoint's inputs are not."""
    errors = []
    if not ctx.template_validation:
        if entry := ctx.by_name.get(ctx.entrypoint):
            errors += [f"templates.{ctx.entrypoint} {e}" for e in _supplied_errors(entry, ctx.arguments)]
        if exit_tmpl := ctx.by_name.get(ctx.on_exit):
            errors += [f"templates.{ctx.on_exit} {e}" for e in _supplied_errors(exit_tmpl, _args(ctx.spec))]
    for name, dag in ctx.dags.items():
        for task in dag.tasks:
            if target := ctx.by_name.get(task.get("template", "")):
                where = f"templates.{name}.tasks.{task.get('name')} templates.{target.get('name')}"
                errors += [f"{where} {e}" for e in _supplied_errors(target, _args(task))]
    return errors


RETRY_POLICIES = ("Always", "OnError", "OnFailure", "OnTransientError", "")


def retry_policy(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateTemplateHolder — retryStrategy.retryPolicy is Always,
    OnError, OnFailure, OnTransientError or empty: "%s is not a valid RetryPolicy"."""
    errors = []
    for t in ctx.templates:
        policy = (t.get("retryStrategy") or {}).get("retryPolicy", "")
        if t.get("retryStrategy") is not None and policy not in RETRY_POLICIES:
            errors.append(f"templates.{t.get('name')} {policy} is not a valid RetryPolicy")
    return errors


def retry_backoff(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/controller/operator.go: processNodeRetries (v3.7.18 the same) — at run time, on
    the first retry: a backoff needs a duration ("no base duration specified for retryStrategy"), duration /
    maxDuration / cap parse with ParseStringToDuration, factor and limit resolve to integers (util/intstr Int32:
    "value '%s' cannot be resolved to an int"). Values still holding `{{…}}` are left to run time."""
    errors = []
    for t in ctx.templates:
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


RETRY_EXPRESSION_SCOPE = {
    "retries",
    "lastRetry.exitCode",
    "lastRetry.status",
    "lastRetry.duration",
    "lastRetry.message",
}


def retry_expression(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/controller/operator.go: processNodeRetries + buildRetryStrategyLocalScope
    (v3.7.18 the same) — at run time retryStrategy.expression is evaluated (argoexpr.EvalBool) over `retries` and
    `lastRetry.exitCode/status/duration/message` only: no workflow parameters, inputs or tasks. A name outside that
    scope is unknown to expr-lang's checker; a field of lastRetry that is not there reads as nil."""
    errors = []
    for t in ctx.templates:
        expression = (t.get("retryStrategy") or {}).get("expression")
        if not expression:
            continue
        roots = {"retries", "lastRetry", *EXPRESSION_ROOTS}
        for path in expression_paths(expression, roots):
            if not path_in_scope(path, RETRY_EXPRESSION_SCOPE):
                errors.append(
                    f"templates.{t.get('name')}.retryStrategy.expression reads {path}: only retries and "
                    "lastRetry.exitCode/status/duration/message are defined there"
                )
    return errors


def non_leaf_fields(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateNonLeaf ("templates.%s.activeDeadlineSeconds is only valid
    for leaf templates") and validateTemplate ("%s template doesn't support timeout field"; v4.1.2 also
    pendingTimeout)."""
    errors = []
    for t in ctx.templates:
        if _is_leaf(t) or _type(t) is None:
            continue
        if t.get("activeDeadlineSeconds") is not None:
            errors.append(f"templates.{t.get('name')}.activeDeadlineSeconds is only valid for leaf templates")
        for key in ("timeout", "pendingTimeout"):
            if t.get(key):
                errors.append(
                    f"templates.{t.get('name')}: {TEMPLATE_TYPES[_type(t)]} template doesn't support {key} field"
                )
    return errors


def leaf_fields(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateLeaf (activeDeadlineSeconds a non-negative integer or an
    Argo variable; "parallelism is only valid for steps and dag templates") and validateTemplate (a timeout that is a
    whole number: "%s has invalid duration format in timeout")."""
    errors = []
    for t in ctx.templates:
        if not _is_leaf(t):
            continue
        name, deadline = t.get("name"), t.get("activeDeadlineSeconds")
        if deadline is not None:
            text = str(deadline)
            is_variable = text.startswith("{{") and text.endswith("}}")
            if not is_variable and (not re.fullmatch(r"[+-]?\d+", text) or int(text) < 0):
                errors.append(
                    f"templates.{name}.activeDeadlineSeconds must be a positive integer > 0 or an argo variable"
                )
        if t.get("parallelism") is not None:
            errors.append(f"templates.{name}.parallelism is only valid for steps and dag templates")
        if t.get("timeout") is not None and re.fullmatch(r"[+-]?\d+", str(t["timeout"])):
            errors.append(f"{name} has invalid duration format in timeout")
    return errors


def variables(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: resolveAllVariables as validateLeaf, validateDAG and
    validateOutputs call it — every `{{inputs.…}}`, `{{tasks.…}}`, `{{workflow.…}}` (etc.) tag must be in scope:
    a template's own declared inputs; a DAG task's sibling tasks' declared outputs (and `.status` of its ancestors);
    `workflow.parameters.<name>` only if the workflow's (merged) arguments declare it — a WorkflowTemplate checked on
    its own lets any workflow.parameters through; the workflow globals (name, uid, status, …)."""
    errors = []
    for t in ctx.templates:
        name = t.get("name")
        if _is_leaf(t):
            errors += [
                f"templates.{name}: failed to resolve {{{{{tag}}}}}"
                for tag in unresolved_tags(_json(t), local_scope(t), ctx)
            ]
        elif (dag := ctx.dags.get(name)) is not None:
            for task in dag.tasks:
                for tag in unresolved_tags(_json(task), task_scope(ctx, dag, task), ctx):
                    errors.append(f"templates.{name}.tasks.{task.get('name')} failed to resolve {{{{{tag}}}}}")
            scope = dag_scope(ctx, dag)
            for tag in unresolved_tags([(t.get("dag") or {}).get("target") or ""], scope, ctx):
                errors.append(f"templates.{name}.targets failed to resolve {{{{{tag}}}}}")
            for tag in unresolved_tags(_json(t.get("outputs") or {}), scope, ctx):
                errors.append(f"templates.{name}.outputs failed to resolve {{{{{tag}}}}}")
    return errors


def container_fields(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateLeaf — a container/script needs an image (unless
    spec.templateDefaults gives one); no two volumeMounts / input artifacts at one path."""
    errors = []
    defaults = (ctx.ref_spec or ctx.spec).get("templateDefaults") or {}
    for t in ctx.templates:
        name = t.get("name")
        for kind in ("container", "script"):
            if t.get(kind) is not None and not t[kind].get("image") and not (defaults.get(kind) or {}).get("image"):
                errors.append(f"templates.{name}.{kind}.image may not be empty")
        if t.get("container") is None:
            continue
        mounted: dict[str, str] = {}
        for i, mount in enumerate(t["container"].get("volumeMounts") or []):
            if mount.get("mountPath") in mounted:
                errors.append(
                    f"templates.{name}.container.volumeMounts[{i}].mountPath '{mount['mountPath']}' already mounted "
                    f"in {mounted[mount['mountPath']]}"
                )
            mounted[mount.get("mountPath")] = f"container.volumeMounts.{mount.get('name')}"
        for i, art in enumerate((t.get("inputs") or {}).get("artifacts") or []):
            if art.get("path") in mounted:
                errors.append(
                    f"templates.{name}.inputs.artifacts[{i}].path '{art['path']}' already mounted in "
                    f"{mounted[art['path']]}"
                )
            mounted[art.get("path")] = f"inputs.artifacts.{art.get('name')}"
    return errors


RESOURCE_ACTIONS = ("get", "create", "apply", "delete", "replace", "patch")


def resource_template(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateLeaf — resource.action is one of get, create, apply,
    delete, replace, patch; every action but get/delete needs a manifest or manifestFrom (not both; manifestFrom's
    artifact must be an input); the manifest, with `{{…}}` replaced by placeholders, must be valid YAML."""
    errors = []
    for t in ctx.templates:
        res, name = t.get("resource"), t.get("name")
        if res is None:
            continue
        action = res.get("action", "")
        if "{{" not in action and action not in RESOURCE_ACTIONS:
            errors.append(f"templates.{name}.resource.action must be one of: {', '.join(RESOURCE_ACTIONS)}")
        if action in ("delete", "get"):
            continue
        manifest, manifest_from = res.get("manifest") or "", res.get("manifestFrom")
        if not manifest and manifest_from is None:
            errors.append(
                f"either templates.{name}.resource.manifest or templates.{name}.resource.manifestFrom must be specified"
            )
        if manifest and manifest_from is not None:
            errors.append(
                "shouldn't have both `manifest` and `manifestFrom` specified in `Manifest` for resource template"
            )
        artifact = (manifest_from or {}).get("artifact") or {}
        if artifact and _named((t.get("inputs") or {}).get("artifacts"), artifact.get("name", "")) is None:
            errors.append(f"artifact {artifact.get('name')} in `manifestFrom` refer to a non-exist artifact")
        if manifest and parse_manifest(manifest)[1] is not None:
            errors.append(f"templates.{name}.resource.manifest must be a valid yaml")
    return errors


def resource_conditions(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/executor/resource.go: WaitResource (v3.7.18 the same) — at run time, after the
    resource exists, successCondition and failureCondition are parsed as Kubernetes label selectors (labels.Parse):
    "success condition '%s' failed to parse: %v" / "fail condition '%s' failed to parse: %v". Conditions still
    holding `{{…}}` are left to run time."""
    errors = []
    for t in ctx.templates:
        res = t.get("resource") or {}
        for key, label in (("successCondition", "success"), ("failureCondition", "fail")):
            condition = res.get(key)
            if condition and "{{" not in condition and (err := label_selector_error(condition)):
                errors.append(
                    f"templates.{t.get('name')}.resource: {label} condition '{condition}' failed to parse: {err}"
                )
    return errors


def resource_owner_reference(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/controller/operator.go: executeResource (v3.7.18 the same) — with
    setOwnerReference the controller unmarshals the manifest into an unstructured object to add the Workflow as owner;
    apimachinery's UnstructuredJSONScheme refuses a document that is not one object with a kind ("Object 'Kind' is
    missing in …")."""
    errors = []
    for t in ctx.templates:
        res = t.get("resource") or {}
        if not res.get("setOwnerReference") or not res.get("manifest"):
            continue
        docs, error = parse_manifest(res["manifest"])
        if error is not None:
            continue  # resource_template reports it
        if len(docs) != 1 or not isinstance(docs[0], dict) or not docs[0].get("kind"):
            errors.append(
                f"templates.{t.get('name')}.resource.setOwnerReference: Object 'Kind' is missing in the manifest"
            )
    return errors


def _global_name_error(ref: str, item: dict) -> list[str]:
    name = item.get("globalName")
    if name and not PARAMETER_REFERENCE.search(name) and not PARAM_OR_ARTIFACT_NAME.match(name):
        return [f"{ref}.globalName: {PARAM_NAME_MESSAGE}"]
    return []


def _output_parameter_errors(ref: str, p: dict, kind: str | None) -> list[str]:
    """validate.go validateOutputParameter and the per-type part of validateOutputs for one output parameter."""
    value_from = p.get("valueFrom")
    if value_from is not None and p.get("value") is not None:
        return [f"{ref} has both valueFrom and value specified, choose one"]
    if p.get("value") is not None:
        return []
    if value_from is None:
        return [f"{ref} does not have valueFrom or value specified"]
    errors = []
    sources = [k for k in ("path", "jqFilter", "jsonPath", "parameter", "expression") if value_from.get(k)]
    sources += ["supplied"] if "supplied" in value_from else []
    if len(sources) != 1:
        choices = "choose one of: path, jqFilter, jsonPath, parameter, raw"
        problem = "multiple valueFrom types specified" if sources else "valueFrom type unspecified"
        errors.append(f"{ref}: {problem}. {choices}" + ("" if sources else ", expression"))
    type_name = TEMPLATE_TYPES.get(kind or "", "")
    if kind in ("container", "containerSet", "script") and not value_from.get("path"):
        errors.append(f"{ref}.path must be specified for {type_name} templates")
    elif kind == "resource" and not (value_from.get("jqFilter") or value_from.get("jsonPath")):
        errors.append(f"{ref} .jqFilter or jsonPath must be specified for {type_name} templates")
    elif kind in ("dag", "steps") and not value_from.get("parameter") and not value_from.get("expression"):
        errors.append(f"{ref}.parameter or expression must be specified for {type_name} templates")
    elif kind in ("dag", "steps") and value_from.get("parameter") and value_from.get("expression"):
        errors.append(
            f"{ref} shouldn't have both `from` and `expression` specified in `ValueFrom` for {type_name} templates"
        )
    return errors


def outputs(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateOutputs and validateOutputParameter — output names; a
    leaf's output artifacts need a clean path, a dag/steps template's may not have one; an output parameter has value
    or valueFrom (not both), exactly one valueFrom source, and the right one for its template: `path` for
    container/script, `jsonPath`/`jqFilter` for resource, `parameter`/`expression` for dag/steps; a globalName is a
    valid name."""
    errors = []
    for t in ctx.templates:
        name, outs = t.get("name"), t.get("outputs") or {}
        errors += field_name_errors(outs.get("parameters"), f"templates.{name}.outputs.parameters ", True)
        errors += field_name_errors(outs.get("artifacts"), f"templates.{name}.outputs.artifacts ", True)
        for art in outs.get("artifacts") or []:
            ref = f"outputs.artifacts.{art.get('name')}"
            if _is_leaf(t) and (err := clean_path_error(art)):
                errors.append(f"error in templates.{name}.{ref}: {err}")
            elif not _is_leaf(t) and art.get("path"):
                errors.append(f"templates.{name}.{ref}.path only valid in container/script templates")
            errors += _global_name_error(f"templates.{name}.{ref}", art)
        for p in outs.get("parameters") or []:
            ref = f"templates.{name}.outputs.parameters.{p.get('name')}"
            errors += _output_parameter_errors(ref, p, _type(t)) + _global_name_error(ref, p)
    return errors


def dag_tasks(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateDAG — a DAG has at least one task, task names are unique
    alphanumerics and '-' (validateWorkflowFieldNames), each task's template exists (validateTemplateHolder)."""
    errors = []
    for name, dag in ctx.dags.items():
        if not dag.tasks:
            errors.append(f"templates.{name} must have at least one task")
        errors += field_name_errors(dag.tasks, f"templates.{name}.tasks", params_or_artifacts=False)
        for task in dag.tasks:
            target = task.get("template")
            if target and target not in ctx.by_name:
                errors.append(f"templates.{name}.tasks.{task.get('name')} {_template_missing(ctx, target)[0]}")
            if task.get("template") and task.get("templateRef"):
                errors.append(
                    f"templates.{name}.tasks.{task.get('name')} template name cannot be specified with templateRef"
                )
    return errors


def dag_dependencies(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateDAG → sortDAGTasks (util/sorting TopologicalSorting:
    "sorting failed: invalid dependency %s" for a task that does not exist, "graph with cycle", "duplicated nodeName")
    and the checks after it: a task name that starts with a digit when depends/dependencies are used, depends and
    dependencies mixed in one DAG, continueOn with depends, an .AnySucceeded/.AllFailed dependency on a task without
    items."""
    errors = []
    for name, dag in ctx.dags.items():
        names = [t.get("name", "") for t in dag.tasks]
        sort_error = None
        if len(set(names)) != len(names):
            sort_error = f"duplicated nodeName {next(n for n in names if names.count(n) > 1)}"
        elif missing := [d for deps in dag.deps.values() for d in deps if d not in dag.by_name]:
            sort_error = f"invalid dependency {missing[0]}"
        else:
            remaining = {n: set(d) for n, d in dag.deps.items()}
            while ready := [n for n, d in remaining.items() if not d]:
                for n in ready:
                    del remaining[n]
                for d in remaining.values():
                    d.difference_update(ready)
            if remaining:
                sort_error = "graph with cycle"
        if sort_error:
            errors.append(f"templates.{name} sorting failed: {sort_error}")
            continue
        using_depends = any(t.get("depends") for t in dag.tasks)
        for task in dag.tasks:
            task_name = task.get("name", "")
            if (using_depends or task.get("dependencies")) and task_name[:1].isdigit():
                errors.append(
                    f"templates.{name}.tasks.{task_name} name cannot begin with a digit when using either 'depends' or "
                    "'dependencies'"
                )
            if using_depends and task.get("dependencies"):
                errors.append(f"templates.{name} cannot use both 'depends' and 'dependencies' in the same DAG template")
            if using_depends and task.get("continueOn") is not None:
                errors.append(
                    f"templates.{name} cannot use 'continueOn' when using 'depends'. Instead use "
                    "'dep-task.Failed'/'dep-task.Errored'"
                )
            for dep, dep_type in dag.deps[task_name].items():
                dep_task = dag.by_name[dep]
                looped = _looped(dep_task) or dep_task.get("withSequence") is not None
                if dep_type == "items" and not looped:
                    errors.append(
                        f"templates.{name}.tasks.{task_name} dependency '{dep}' uses an items-based condition such as "
                        ".AnySucceeded or .AllFailed but does not contain any items"
                    )
    return errors


TASK_RESULTS = ("Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned", "AnySucceeded", "AllFailed")


def dag_task_results(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 workflow/common/ancestry.go: ValidateTaskResults (called by validateDAG) — a
    `depends` result is one of Succeeded, Failed, Errored, Skipped, Omitted, Daemoned, AnySucceeded, AllFailed."""
    errors = []
    for name, dag in ctx.dags.items():
        for task in dag.tasks:
            for match in TASK_RESULT.findall(task.get("depends") or ""):
                task_name, result = match.split(".", 1)
                if result not in TASK_RESULTS:
                    errors.append(
                        f"templates.{name}.tasks.{task.get('name')} task result '{result}' for task '{task_name}' is "
                        "invalid"
                    )
    return errors


def dag_argument_dependency(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: validateDAGTaskArgumentDependency — an argument whose value (or
    artifact `from`) starts with `{{tasks.X.` must name an ancestor X: "missing dependency '%s' for parameter '%s'"."""
    errors = []
    for name, dag in ctx.dags.items():
        for task in dag.tasks:
            ancestry = dag.ancestry.get(task.get("name", ""), [])
            args = _args(task)
            refs = [("parameter", p.get("name"), str(p.get("value") or "")) for p in args.get("parameters") or []]
            refs += [("artifact", a.get("name"), a.get("from") or "") for a in args.get("artifacts") or []]
            for kind, arg, value in refs:
                if value.startswith("{{tasks.") and value.split(".")[1] not in ancestry:
                    errors.append(
                        f"templates.{name}.tasks.{task.get('name')} missing dependency '{value.split('.')[1]}' for "
                        f"{kind} '{arg}'"
                    )
    return errors


def _runtime_value(tag: str, ctx: Ctx, tmpl: dict) -> str | None:
    """A plausible run-time value for a simple tag, or None when only run time knows it."""
    if tag.startswith("workflow.parameters."):
        return ctx.parameter_value(tag.removeprefix("workflow.parameters."))
    if tag.startswith("inputs.parameters."):
        p = _named((tmpl.get("inputs") or {}).get("parameters"), tag.removeprefix("inputs.parameters."))
        return None if p is None or _input_value(p) is None else str(_input_value(p))
    return {"workflow.status": "Succeeded", "workflow.name": WORKFLOW_NAME, "workflow.uid": WORKFLOW_UID}.get(tag)


def _fill_when(when: str, ctx: Ctx, dag: Dag, task: dict) -> tuple[str, bool, list[str]]:
    """The `when` as shouldExecute gets it: tags replaced by plausible values; whether any value is only known at run
    time; the `{{tasks.X.…}}` tags whose X is not an ancestor (never in the task's run-time scope)."""
    runtime = runtime_task_scope(ctx, dag, task)
    unknown, outside = False, []

    def fill(match: re.Match) -> str:
        nonlocal unknown
        tag = match.group(1).strip()
        if tag.startswith("tasks.") and not path_in_scope(tag, runtime):
            outside.append(tag)
        value = _runtime_value(tag, ctx, dag.tmpl)
        unknown = unknown or value is None
        return PLACEHOLDER if value is None else value

    return TAG.sub(fill, when), unknown, outside


def when_expressions(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/controller/steps.go: shouldExecute, called by dag.go resolveDependencyReferences
    (v3.7.18 the same) — at run time, with its tags replaced, a task's `when` must parse and evaluate to a bool under
    govaluate (bare words count as strings): "Invalid 'when' expression '%s': %v", "Expected boolean evaluation for
    '%s'. Got %v". The tags are resolved first with ReplaceStrictAny over the task's run-time scope
    (buildLocalScopeFromTask: its ancestors only), so a `{{tasks.X.…}}` of a task that is not an ancestor never
    resolves: the task is requeued. Workflow parameters take their default; values only run time knows become a
    placeholder word, and then only parse errors count."""
    errors = []
    parse_errors = ("Invalid token", "Unbalanced", "Unclosed", "Cannot transition")
    for name, dag in ctx.dags.items():
        for task in dag.tasks:
            when = task.get("when")
            if not when or "{{item" in when:
                continue
            where = f"templates.{name}.tasks.{task.get('name')}"
            filled, unknown, outside = _fill_when(when, ctx, dag, task)
            errors += [
                f"{where} when reads {{{{{tag}}}}}, not an ancestor's output: the task is requeued" for tag in outside
            ]
            try:
                result = govaluate(filled)
            except GovaluateError as e:
                if not unknown or str(e).startswith(parse_errors):
                    errors.append(f"{where} Invalid 'when' expression '{filled}': {e}")
                continue
            if not isinstance(result, bool) and not unknown:
                errors.append(f"{where} Expected boolean evaluation for '{filled}'. Got {result}")
    return errors


def _expression_tags(value: object) -> list[str]:
    """The inside of every `{{=…}}` tag in a template or task."""
    if "{{=" not in _json(value)[0]:
        return []
    return [m.group(1)[1:] for text in _strings(value) for m in TAG.finditer(text) if m.group(1).startswith("=")]


def _expression_sites(ctx: Ctx) -> Iterator[tuple[str, str, set[str], bool]]:
    """(where, expression, run-time scope, strict) for every `{{=…}}` tag and `fromExpression` / output
    `valueFrom.expression`."""
    for t in ctx.templates:
        name = t.get("name")
        dag = ctx.dags.get(name)
        if dag is None:
            for expression in _expression_tags(t):
                yield f"templates.{name}", expression, local_scope(t) | ctx.globals, False
            continue
        for task in dag.tasks:
            scope = runtime_task_scope(ctx, dag, task)
            where = f"templates.{name}.tasks.{task.get('name')}"
            for expression in _expression_tags(task):
                yield where, expression, scope, True
            for art in _args(task).get("artifacts") or []:
                if art.get("fromExpression"):
                    yield (
                        f"{where}.arguments.artifacts.{art.get('name')}.fromExpression",
                        art["fromExpression"],
                        scope,
                        True,
                    )
        # operator.go getTemplateOutputsFromScope: a DAG's outputs see every task of the DAG that ran
        outs_scope = dag_scope(ctx, dag) | ctx.globals
        outs_scope |= {f"tasks.{t.get('name')}.status" for t in dag.tasks}
        outs = t.get("outputs") or {}
        for p in outs.get("parameters") or []:
            if (p.get("valueFrom") or {}).get("expression"):
                yield (
                    f"templates.{name}.outputs.parameters.{p.get('name')}",
                    p["valueFrom"]["expression"],
                    outs_scope,
                    True,
                )
        for art in outs.get("artifacts") or []:
            if art.get("fromExpression"):
                yield f"templates.{name}.outputs.artifacts.{art.get('name')}", art["fromExpression"], outs_scope, True


def expression_variables(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 util/template/expression_template.go (v3.7.18 the same): expressionReplaceStrict /
    missingVarsInEnv (and workflow/controller/scope.go resolveArtifact for fromExpression) — at run time every
    variable an expression reads must exist in the run-time scope (a DAG task: its DAG template's inputs, the workflow
    globals and its ancestors' results, dag.go buildLocalScopeFromTask). A missing `tasks.…`/`steps.…` path fails or
    requeues ("failed to evaluate expression: %s is missing"); any other missing variable leaves the tag unresolved,
    so the literal `{{=…}}` text is passed on. Validation skips expression tags (util/template/validate.go), so this
    is checked here."""
    errors = []
    for where, expression, scope, strict in _expression_sites(ctx):
        for path in expression_paths(expression):
            if path_in_scope(path, scope):
                continue
            if strict and path.startswith(("tasks.", "steps.")):
                errors.append(f"{where}: failed to evaluate expression: {path} is missing")
            else:
                errors.append(
                    f"{where}: expression reads {path}, which is not defined there: Argo leaves it unresolved"
                )
    return errors


def _sync_holders(ctx: Ctx) -> Iterator[tuple[str, dict]]:
    yield "spec.synchronization", ctx.spec.get("synchronization") or {}
    for t in ctx.templates:
        yield f"templates.{t.get('name')}.synchronization", t.get("synchronization") or {}


def synchronization(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/sync/syncitems.go: allSyncItems/checkDuplicates and lock_name.go:
    getSemaphoreLockName, as sync_manager.go TryAcquire applies them at run time ("requested configuration is
    invalid: …"): no two identical locks; a semaphore names a configMapKeyRef or a database, not both. v3.7.18 reads
    the same plural `mutexes`/`semaphores` (and the singular forms that v4 removed)."""
    errors = []
    for where, sync in _sync_holders(ctx):
        items = [("semaphore", s) for s in sync.get("semaphores") or []] + [
            ("mutex", m) for m in sync.get("mutexes") or []
        ]
        items += [(k, sync[k]) for k in ("semaphore", "mutex") if sync.get(k)]
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


POD_GC_STRATEGIES = ("", "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion", "OnWorkflowSuccess")


def pod_gc(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: Workflow — "podGC.strategy unknown strategy '%s'"
    (PodGCStrategy.IsValid). Checked on the Workflow's own spec, as Argo does; a WorkflowTemplate is validated as
    one."""
    strategy = (ctx.spec.get("podGC") or {}).get("strategy", "")
    return [] if strategy in POD_GC_STRATEGIES else [f"podGC.strategy unknown strategy '{strategy}'"]


def pod_spec_patch(ctx: Ctx) -> list[str]:
    """argo-workflows v4.1.2 workflow/util/util.go: ApplyPodSpecPatch (v3.7.18 the same), called when the controller
    builds each pod (workflowpod.go) — a podSpecPatch (workflow or template level) must be YAML/JSON of a PodSpec
    object: "invalid podSpecPatch %q". Patches holding `{{…}}` are only complete at run time and are skipped."""
    errors = []
    holders = [("spec", ctx.spec), ("spec", ctx.ref_spec or {})] + [
        (f"templates.{t.get('name')}", t) for t in ctx.templates
    ]
    for where, holder in holders:
        patch = holder.get("podSpecPatch")
        if not patch or "{{" in patch:
            continue
        try:
            doc = yaml.safe_load(patch)
        except yaml.YAMLError as e:
            errors.append(f"{where}.podSpecPatch: Failed to convert the PodSpecPatch yaml to json: {e}")
            continue
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k, []), list) for k in ("containers", "volumes")):
            errors.append(f"{where}.podSpecPatch: invalid podSpecPatch {json.dumps(patch)}")
    return errors


SPEC_RULES: list[Callable[[Ctx], list[str]]] = [
    template_names,
    entrypoint,
    on_exit,
    arguments_field_names,
    arguments_values,
    template_type,
    inputs,
    inputs_supplied,
    retry_policy,
    retry_backoff,
    retry_expression,
    non_leaf_fields,
    leaf_fields,
    variables,
    container_fields,
    resource_template,
    resource_conditions,
    resource_owner_reference,
    outputs,
    dag_tasks,
    dag_dependencies,
    dag_task_results,
    dag_argument_dependency,
    when_expressions,
    expression_variables,
    synchronization,
    pod_gc,
    pod_spec_patch,
]


def workflow_template_ref(obj: dict, workflow_templates: dict[str, dict] | None = None) -> list[str]:
    """argo-workflows v4.1.2 / v3.7.18 validate.go: Workflow — with spec.workflowTemplateRef the Workflow may not
    carry templates (WorkflowTemplateRefFields) and the referenced WorkflowTemplate must exist in the namespace."""
    spec = (obj.get("spec") or {}).get("workflowSpec") or obj.get("spec") or {}
    if not spec.get("workflowTemplateRef"):
        return []
    return _context(obj, workflow_templates)[1]


RULES: dict[str, Callable] = {r.__name__: r for r in [*OBJECT_RULES, workflow_template_ref, *SPEC_RULES]}


def findings(obj: dict, workflow_templates: dict[str, dict] | None = None) -> list[Finding]:
    """(rule, message) for everything Argo would refuse in `obj`; Argo stops at the first, this lists them all."""
    found: list[Finding] = []
    if obj.get("kind") not in ("Workflow", "WorkflowTemplate", "CronWorkflow"):
        return [("kind", f"{obj.get('kind')!r} is not a Workflow, WorkflowTemplate or CronWorkflow")]
    for rule in OBJECT_RULES:
        found += [(rule.__name__, m) for m in rule(obj)]
    ctx, errors = _context(obj, workflow_templates)
    found += [("workflow_template_ref", m) for m in errors]
    if ctx is not None:
        prefix = "cannot validate Workflow: " if obj["kind"] == "CronWorkflow" else ""
        for rule in SPEC_RULES:
            for message in rule(ctx):
                if (rule.__name__, prefix + message) not in found:
                    found.append((rule.__name__, prefix + message))
    return found


def validate(obj: dict, workflow_templates: dict[str, dict] | None = None) -> list[str]:
    """Every message Argo's rules give for a WorkflowTemplate, CronWorkflow or Workflow dict (empty: it passes).
    A Workflow with spec.workflowTemplateRef is checked together with the referenced template, looked up in
    `workflow_templates` (name → WorkflowTemplate dict) or, by default, among the WorkflowTemplates in infra/argo/."""
    return [message for _, message in findings(obj, workflow_templates)]
