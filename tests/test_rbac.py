"""Least privilege: the Roles in infra/rbac/ grant exactly the verbs the rendered templates use, per service account,
and only Argo's executor containers hold an API token.

The verbs are derived from infra/argo/*.yaml the way Argo v4.1.2 uses them (workflow/executor/):
- every pod's executor reports its node's outputs: workflowtaskresults create, patch (taskresult.go);
- a resource template runs `kubectl <action> -f manifest` (resource.go getKubectlArguments): its action on the
  manifest's kind; `delete` also waits for the object to be gone unless `--wait=false` (kubectl wait IsDeleted: get,
  then list + watch); `apply` reads, then creates or patches;
- a successCondition/failureCondition reads the object by its self link (checkResourceState): get;
- an output parameter from jsonPath/jqFilter is `kubectl get` (SaveResourceParameters): get;
- `setOwnerReference: true` makes the workflow the object's controller owner (operator.go, metav1.NewControllerRef:
  blockOwnerDeletion true), which OwnerReferencesPermissionEnforcement admits only with update on workflows/finalizers.
The CronWorkflow's schedule creates its Workflows with the controller's own identity, not the workflow's.
"""

from __future__ import annotations

import copy
import functools
import re
from collections import defaultdict

import pytest
import yaml

from tests.argo_pods import (
    SERVICE_ACCOUNT_TOKEN_PATH,
    executor_service_account,
    shipped_config,
    template_type,
    workflow_pods,
    workflow_spec,
)
from tests.conftest import ROOT
from workflows import security

ARGO_FILES = sorted((ROOT / "infra/argo").glob("*.yaml"))
RBAC = ROOT / "infra/rbac"
# kind -> (apiGroup, resource) for the kinds the manifests name
RESOURCES = {
    "Workflow": ("argoproj.io", "workflows"),
    "RayJob": ("ray.io", "rayjobs"),
    "WorkflowTaskResult": ("argoproj.io", "workflowtaskresults"),
}
OWNER_FINALIZERS = ("argoproj.io", "workflows/finalizers")
ACTION_VERBS = {"create": {"create"}, "get": {"get"}, "patch": {"patch"}, "replace": {"update"},
                "apply": {"get", "create", "patch"}, "delete": {"delete"}}  # fmt: skip

Grants = dict[str, dict[tuple[str, str], set[str]]]  # service account -> (apiGroup, resource) -> verbs


@functools.cache
def _parsed() -> tuple[dict, ...]:
    return tuple(yaml.load(p.read_text(), Loader=yaml.CSafeLoader) for p in ARGO_FILES)


def docs() -> list[dict]:
    """The rendered docs, a fresh copy each call (tests break them)."""
    return copy.deepcopy(list(_parsed()))


def template_verbs(spec: dict, tmpl: dict) -> tuple[str, dict[tuple[str, str], set[str]]]:
    """(the service account whose token the pod's executor uses, the verbs it uses): the template's or the
    workflow's `executor.serviceAccountName`, else the pod's own account (workflowpod.go setupServiceAccount)."""
    pod_account = tmpl.get("serviceAccountName") or spec.get("serviceAccountName") or "default"
    account = executor_service_account(spec, tmpl) or pod_account
    verbs: dict[tuple[str, str], set[str]] = defaultdict(set)
    verbs[RESOURCES["WorkflowTaskResult"]] |= {"create", "patch"}
    resource = tmpl.get("resource")
    if resource:
        # the manifest is YAML only after Argo's substitution (bare integer placeholders): read its top-level kind
        kind = re.search(r"(?m)^kind:\s*(\S+)", resource["manifest"]).group(1)
        target = RESOURCES[kind]
        action = resource["action"]
        verbs[target] |= ACTION_VERBS[action]
        flags = resource.get("flags") or []
        if action == "delete" and "--wait=false" not in flags:
            verbs[target] |= {"get", "list", "watch"}
        if resource.get("successCondition") or resource.get("failureCondition"):
            verbs[target].add("get")
        if any(
            p.get("valueFrom", {}).keys() & {"jsonPath", "jqFilter"}
            for p in tmpl.get("outputs", {}).get("parameters", [])
        ):
            verbs[target].add("get")
        if resource.get("setOwnerReference"):
            verbs[OWNER_FINALIZERS].add("update")
    return account, verbs


def used(documents: list[dict]) -> Grants:
    grants: Grants = defaultdict(lambda: defaultdict(set))
    for doc in documents:
        spec = workflow_spec(doc)
        for tmpl in spec.get("templates", []):  # a CronWorkflow that references a WorkflowTemplate has none
            if template_type(tmpl):
                account, verbs = template_verbs(spec, tmpl)
                for target, v in verbs.items():
                    grants[account][target] |= v
    return grants


def granted(objects: list[dict]) -> Grants:
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    grants: Grants = defaultdict(lambda: defaultdict(set))
    for binding in (o for o in objects if o["kind"] == "RoleBinding"):
        role = roles[binding["roleRef"]["name"]]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", subject
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        grants[subject["name"]][(group, resource)] |= set(rule["verbs"])
    return grants


def rbac_objects() -> list[dict]:
    return [d for p in sorted(RBAC.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def differences(want: Grants, have: Grants) -> list[str]:
    problems = []
    for account in sorted(set(want) | set(have)):
        for target in sorted(set(want.get(account, {})) | set(have.get(account, {}))):
            w, h = want.get(account, {}).get(target, set()), have.get(account, {}).get(target, set())
            if w - h:
                problems.append(f"{account} lacks {sorted(w - h)} on {target}")
            if h - w:
                problems.append(f"{account} has unused {sorted(h - w)} on {target}")
    return problems


def test_roles_grant_exactly_the_verbs_the_templates_use():
    assert differences(used(docs()), granted(rbac_objects())) == []


def test_no_wildcards_in_any_rule():
    for obj in rbac_objects():
        for rule in obj.get("rules", []):
            assert not any("*" in rule[f] for f in ("apiGroups", "resources", "verbs")), rule


def test_an_extra_verb_in_a_role_is_reported():
    objects = rbac_objects()
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == security.SUBMITTER)
    role["rules"].append({"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["delete"]})
    assert differences(used(docs()), granted(objects)) == [
        f"{security.SUBMITTER} has unused ['delete'] on ('ray.io', 'rayclusters')"
    ]


def test_a_template_that_needs_more_is_reported():
    documents = docs()
    spec = workflow_spec(next(d for d in documents if d["metadata"]["name"] == "distill"))
    delete = next(t for t in spec["templates"] if t.get("resource", {}).get("action") == "delete")
    delete["resource"]["action"] = "apply"
    assert differences(used(documents), granted(rbac_objects())) == [
        f"{security.SUBMITTER} lacks ['patch'] on ('ray.io', 'rayjobs')",
        f"{security.SUBMITTER} has unused ['delete', 'list', 'watch'] on ('ray.io', 'rayjobs')",
    ]


def test_a_step_template_run_as_the_submitter_is_caught_by_pod_accounts():
    documents = docs()
    spec = workflow_spec(documents[0])
    spec["templates"][0]["executor"] = {"serviceAccountName": "default"}
    assert "default lacks ['create', 'patch'] on ('argoproj.io', 'workflowtaskresults')" in differences(
        used(documents), granted(rbac_objects())
    )


def test_service_accounts_are_security_s_and_mount_no_token_by_default():
    accounts = {o["metadata"]["name"]: o for o in rbac_objects() if o["kind"] == "ServiceAccount"}
    assert set(accounts) == set(security.SERVICE_ACCOUNTS)
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    # IRSA only where S3 is used: the steps, the Ray pods, register and serving, not the submitter
    irsa = {n for n, a in accounts.items() if "eks.amazonaws.com/role-arn" in a["metadata"].get("annotations", {})}
    assert irsa == {security.STEPS, security.RAY, security.REGISTER, security.SERVE}


def test_every_executor_account_has_its_token_secret():
    secrets = {o["metadata"]["name"]: o for o in rbac_objects() if o["kind"] == "Secret"}
    executors = set()
    for doc in docs():
        spec = workflow_spec(doc)
        executors.add(spec["executor"]["serviceAccountName"])
        executors |= {t["executor"]["serviceAccountName"] for t in spec["templates"] if "executor" in t}
    assert executors == {security.STEPS, security.SUBMITTER}
    for account in executors:
        secret = secrets[f"{account}.service-account-token"]
        assert secret["type"] == "kubernetes.io/service-account-token"
        assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == account


@pytest.fixture(scope="module")
def pods() -> dict[str, dict]:
    config = shipped_config()
    return {f"{d['kind']}/{n}": p for d in docs() for n, p in workflow_pods(d, config).items()}


def token_holders(pod: dict) -> set[str]:
    """Containers with an API token: the executor's mounted Secret, or the kubelet's automount."""
    automount = pod["spec"].get("automountServiceAccountToken", True)
    holders = set()
    for ctr in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        mounted = any(m["mountPath"] == SERVICE_ACCOUNT_TOKEN_PATH for m in ctr.get("volumeMounts") or [])
        if mounted or automount:
            holders.add(ctr["name"])
    return holders


def test_only_argo_s_executor_containers_hold_a_token(pods):
    for key, pod in pods.items():
        holders = token_holders(pod)
        image = {c["name"]: c["image"] for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]}
        assert holders, key  # the executor must report its outputs
        assert all("argoexec" in image[name] for name in holders), (key, holders)


def test_a_step_container_with_automount_would_hold_a_token(pods):
    pod = copy.deepcopy(pods["WorkflowTemplate/evaluate"])
    pod["spec"].pop("automountServiceAccountToken")
    assert "main" in token_holders(pod)
