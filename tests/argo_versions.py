"""The oldest Argo Workflows release that can run what this project renders, and the evidence for it.

Each Argo feature the rendered objects could use is listed with the first release that has it, found by reading the
argo-workflows git tags (each minor's `.0` release, v2.0.0 … v4.1.0): the first tag whose source or docs carry the
named marker (a field in `pkg/apis/workflow/v1alpha1`, a function, a documented variable). Each feature has a detector
that looks for it in the rendered objects (and in the Workflow a resource template creates); a test runs every
detector against the rendered YAML and checks that `OLDEST_SUPPORTED` has all the features found.

Conclusion: v3.6.0. CronWorkflow `schedules` (a list; Hera 7 renders no other form) and `synchronization.mutexes`
(plural, in the Workflow the retrain cron creates) both first appear in v3.6.0 (absent from v3.5.x and from
v3.6.0-rc1 for `mutexes`). Every other feature used is older (expression tags, `fromExpression` and `asInt` v3.1.0,
parameter `description` v3.3.0, key-only artifacts v3.0.0, `depends` and `workflowTemplateRef` v2.9.0). The singular
forms that v3.6 deprecated (`schedule`, `mutex`, `semaphore`) were removed in v4.0.0 and are not used, so v4.x runs
the same YAML.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import yaml

OLDEST_SUPPORTED = "v3.6.0"
NEWEST_READ = "v4.1.2"
ARGO_OBJECT_KINDS = ("Workflow", "WorkflowTemplate", "CronWorkflow", "ClusterWorkflowTemplate")
TYPES = "pkg/apis/workflow/v1alpha1"
ARGO_KIND_LINE = re.compile(rf"(?m)^kind: ({'|'.join(ARGO_OBJECT_KINDS)})\s*$")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def version(tag: str) -> tuple[int, ...]:
    return tuple(int(p) for p in tag.lstrip("v").split("."))


def walk(value: object) -> Iterator[tuple[str, object, dict]]:
    """(key, value, the dict holding it) for every key at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v, value
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


def strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def argo_objects(docs: list[dict]) -> list[dict]:
    """The rendered objects plus every Argo object their resource templates create (the retrain cron's Workflow),
    read with the `{{…}}` placeholders replaced: features used there must exist in the cluster's Argo too."""
    found = list(docs)
    for doc in docs:
        for key, value, _ in walk(doc):
            if key == "manifest" and isinstance(value, str) and re.search(ARGO_KIND_LINE, value):
                created = yaml.load(re.sub(r"\{\{[^{}]*\}\}", "x", value), Loader=LOADER)
                if isinstance(created, dict) and created.get("kind") in ARGO_OBJECT_KINDS:
                    found.append(created)
    return found


def _has_key(name: str, where: Callable[[dict], bool] = lambda holder: True) -> Callable[[list[dict]], bool]:
    return lambda docs: any(k == name and where(h) for d in docs for k, _, h in walk(d))


def _has_text(pattern: str) -> Callable[[list[dict]], bool]:
    rx = re.compile(pattern)
    return lambda docs: any(rx.search(s) for d in docs for s in strings(d))


def _kind(kind: str, key: str | None = None) -> Callable[[list[dict]], bool]:
    return lambda docs: any(d.get("kind") == kind and (key is None or key in (d.get("spec") or {})) for d in docs)


def _key_only_artifact(docs: list[dict]) -> bool:
    """An artifact with an s3 key but no bucket/endpoint: completed from the default artifact repository."""
    return any(
        k == "s3" and isinstance(v, dict) and v.get("key") and not v.get("bucket") and "name" in h
        for d in docs
        for k, v, h in walk(d)
    )


def _string_in_retry(key: str) -> Callable[[list[dict]], bool]:
    def detect(docs: list[dict]) -> bool:
        for d in docs:
            for k, v, _ in walk(d):
                if k == "retryStrategy" and isinstance(v, dict):
                    value = (v.get("backoff") or {}).get(key) if key == "factor" else v.get(key)
                    if isinstance(value, str):
                        return True
        return False

    return detect


def _expression_texts(docs: list[dict]) -> Iterator[str]:
    for d in docs:
        for k, v, _ in walk(d):
            if k in ("fromExpression", "expression") and isinstance(v, str):
                yield v
        for s in strings(d):
            yield from re.findall(r"\{\{=(.*?)\}\}", s, re.S)


@dataclass(frozen=True)
class Feature:
    name: str
    since: str
    evidence: str
    detect: Callable[[list[dict]], bool]
    example: str  # YAML of a minimal object using the feature: each detector is shown able to fire


FEATURES: list[Feature] = [
    Feature(
        "CronWorkflow spec.schedules (a list)",
        "v3.6.0",
        f"{TYPES}/cron_workflow_types.go `Schedules []string`: absent in v3.5.0, present in v3.6.0",
        _kind("CronWorkflow", "schedules"),
        "kind: CronWorkflow\nspec: {schedules: ['0 * * * *']}",
    ),
    Feature(
        "synchronization.mutexes (a list)",
        "v3.6.0",
        f"{TYPES}/workflow_types.go `Mutexes []*Mutex` ('v3.6 and after'): absent in v3.6.0-rc1, present in v3.6.0",
        _has_key("mutexes"),
        "kind: Workflow\nspec: {synchronization: {mutexes: [{name: m}]}}",
    ),
    Feature(
        "synchronization.mutex (singular; removed in v4.0.0)",
        "v2.11.0",
        f"{TYPES}/workflow_types.go `Mutex *Mutex` from v2.11.0; docs/upgrading.md: removed in v4.0",
        _has_key("mutex", lambda h: "mutexes" not in h),
        "kind: Workflow\nspec: {synchronization: {mutex: {name: m}}}",
    ),
    Feature(
        "parameter description",
        "v3.3.0",
        f"{TYPES}/workflow_types.go Parameter `Description *AnyString` from v3.3.0",
        _has_key("description", lambda h: "name" in h),
        "kind: WorkflowTemplate\nspec: {arguments: {parameters: [{name: p, description: d}]}}",
    ),
    Feature(
        "retryStrategy.expression",
        "v3.2.0",
        f"{TYPES}/workflow_types.go RetryStrategy `Expression string` from v3.2.0",
        _has_key("expression", lambda h: "limit" in h or "retryPolicy" in h),
        "kind: Workflow\nspec: {templates: [{name: t, retryStrategy: {limit: 1, expression: 'true'}}]}",
    ),
    Feature(
        "expression tags {{=…}}",
        "v3.1.0",
        "util/template/expression_template.go (kindExpression) from v3.1.0",
        _has_text(r"\{\{="),
        "kind: Workflow\nspec: {templates: [{name: t, container: {args: ['{{=1 + 1}}']}}]}",
    ),
    Feature(
        "artifact fromExpression",
        "v3.1.0",
        f"{TYPES}/workflow_types.go Artifact `FromExpression string` from v3.1.0",
        _has_key("fromExpression"),
        "kind: Workflow\nspec: {templates: [{name: t, outputs: {artifacts: [{name: a, fromExpression: x}]}}]}",
    ),
    Feature(
        "asInt() in expressions",
        "v3.1.0",
        "docs/variables.md documents asInt from v3.1.0 (argoproj/pkg expr env, util/expr/env/env.go; a builtin alias "
        "there since v3.7.0)",
        lambda docs: any("asInt(" in e for e in _expression_texts(docs)),
        "kind: Workflow\nspec: {templates: [{name: t, container: {args: ['{{=asInt(\"1\")}}']}}]}",
    ),
    Feature(
        "key-only artifacts (default artifact repository)",
        "v3.0.0",
        f"{TYPES}/workflow_types.go `func (a *ArtifactLocation) HasKey` from v3.0.0",
        _key_only_artifact,
        "kind: Workflow\nspec: {templates: [{name: t, outputs: {artifacts: [{name: a, path: /p, s3: {key: k}}]}}]}",
    ),
    Feature(
        "retryStrategy limit / backoff.factor as strings (IntOrString)",
        "v2.11.0",
        f"{TYPES}/workflow_types.go `Limit *intstr.IntOrString`, `Factor *intstr.IntOrString` from v2.11.0",
        lambda docs: _string_in_retry("limit")(docs) or _string_in_retry("factor")(docs),
        "kind: Workflow\nspec: {templates: [{name: t, retryStrategy: {limit: '2'}}]}",
    ),
    Feature(
        "DAG task depends",
        "v2.9.0",
        f"{TYPES}/workflow_types.go DAGTask `Depends string` from v2.9.0",
        _has_key("depends"),
        "kind: Workflow\nspec: {templates: [{name: t, dag: {tasks: [{name: a, depends: b}]}}]}",
    ),
    Feature(
        "workflowTemplateRef",
        "v2.9.0",
        f"{TYPES}/workflow_types.go `WorkflowTemplateRef *WorkflowTemplateRef` from v2.9.0",
        _has_key("workflowTemplateRef"),
        "kind: Workflow\nspec: {workflowTemplateRef: {name: w}}",
    ),
    Feature(
        "resource flags",
        "v2.8.0",
        f"{TYPES}/workflow_types.go ResourceTemplate `Flags []string` from v2.8.0",
        _has_key("flags", lambda h: "action" in h),
        "kind: Workflow\nspec: {templates: [{name: t, resource: {action: delete, flags: [--wait]}}]}",
    ),
    Feature(
        "CronWorkflow (timezone, concurrencyPolicy, startingDeadlineSeconds, history limits)",
        "v2.5.0",
        f"{TYPES}/cron_workflow_types.go `type CronWorkflow struct`, `Timezone string` from v2.5.0",
        _kind("CronWorkflow"),
        "kind: CronWorkflow\nspec: {timezone: UTC}",
    ),
    Feature(
        "retryPolicy and backoff (duration, factor, maxDuration)",
        "v2.5.0",
        f"{TYPES}/workflow_types.go `RetryPolicy RetryPolicy`, Backoff `MaxDuration string` from v2.5.0",
        lambda docs: _has_key("retryPolicy")(docs) or _has_key("backoff")(docs),
        "kind: Workflow\nspec: {templates: [{name: t, retryStrategy: {retryPolicy: OnError}}]}",
    ),
    Feature(
        "ttlStrategy",
        "v2.5.0",
        f"{TYPES}/workflow_types.go `TTLStrategy *TTLStrategy` from v2.5.0",
        _has_key("ttlStrategy"),
        "kind: Workflow\nspec: {ttlStrategy: {secondsAfterSuccess: 1}}",
    ),
    Feature(
        "podSpecPatch",
        "v2.5.0",
        f"{TYPES}/workflow_types.go `PodSpecPatch string` from v2.5.0",
        _has_key("podSpecPatch"),
        "kind: Workflow\nspec: {podSpecPatch: '{}'}",
    ),
    Feature(
        "tasks.<name>.status",
        "v2.5.0",
        "docs/variables.md lists tasks.<TASKNAME>.status from v2.5.0",
        _has_text(r"tasks\[['\"][^'\"]+['\"]\]\.status|tasks\.[-\w]+\.status"),
        "kind: Workflow\nspec: {templates: [{name: t, dag: {tasks: [{name: a, when: '{{tasks.b.status}} == x'}]}}]}",
    ),
    Feature(
        "WorkflowTemplate",
        "v2.4.0",
        f"{TYPES}/workflow_template_types.go `type WorkflowTemplate struct` from v2.4.0",
        _kind("WorkflowTemplate"),
        "kind: WorkflowTemplate\nspec: {}",
    ),
    Feature(
        "podGC (OnPodSuccess)",
        "v2.4.0",
        f"{TYPES}/workflow_types.go `PodGC *PodGC`, `PodGCOnPodSuccess` from v2.4.0",
        _has_key("podGC"),
        "kind: Workflow\nspec: {podGC: {strategy: OnPodSuccess}}",
    ),
    Feature(
        "resource setOwnerReference",
        "v2.4.0",
        f"{TYPES}/workflow_types.go ResourceTemplate `SetOwnerReference bool` from v2.4.0",
        _has_key("setOwnerReference"),
        "kind: Workflow\nspec: {templates: [{name: t, resource: {action: create, setOwnerReference: true}}]}",
    ),
    Feature(
        "workflow-level securityContext",
        "v2.4.0",
        f"{TYPES}/workflow_types.go WorkflowSpec `SecurityContext *apiv1.PodSecurityContext` from v2.4.0",
        lambda docs: (
            any("securityContext" in (d.get("spec") or {}) for d in docs)
            or any("securityContext" in ((d.get("spec") or {}).get("workflowSpec") or {}) for d in docs)
        ),
        "kind: Workflow\nspec: {securityContext: {runAsNonRoot: true}}",
    ),
    Feature(
        "archive: none",
        "v2.2.0",
        f"{TYPES}/workflow_types.go `NoneStrategy` from v2.2.0",
        lambda docs: any(k == "archive" and isinstance(v, dict) and "none" in v for d in docs for k, v, _ in walk(d)),
        "kind: Workflow\nspec: {templates: [{name: t, outputs: {artifacts: [{name: a, archive: {none: {}}}]}}]}",
    ),
    Feature(
        "template metadata, tolerations",
        "v2.1.0",
        f"{TYPES}/workflow_types.go Template `Metadata Metadata`, `Tolerations []apiv1.Toleration` from v2.1.0",
        lambda docs: any(
            k == "templates" and any("metadata" in t or "tolerations" in t for t in v or [])
            for d in docs
            for k, v, _ in walk(d)
        ),
        "kind: Workflow\nspec: {templates: [{name: t, metadata: {labels: {a: b}}}]}",
    ),
    Feature(
        "onExit, {{workflow.status}}, {{workflow.uid}}, resource outputs valueFrom.jsonPath, DAG, when",
        "v2.0.0",
        f"{TYPES}/workflow_types.go `OnExit string`, `JSONPath string`, `When string`; workflow/common/common.go "
        "GlobalVarWorkflowStatus/GlobalVarWorkflowUID, all in v2.0.0",
        lambda docs: _has_key("onExit")(docs) or _has_text(r"\{\{workflow\.(status|uid)\}\}")(docs),
        "kind: Workflow\nspec: {onExit: cleanup}",
    ),
]


def used_features(docs: list[dict]) -> list[Feature]:
    """The features the given objects (and the Argo objects they create) use."""
    objects = argo_objects(docs)
    return [f for f in FEATURES if f.detect(objects)]


def oldest_version_for(docs: list[dict]) -> str:
    """The newest `since` among the features used: the oldest release that has them all."""
    return max((f.since for f in used_features(docs)), key=version)
