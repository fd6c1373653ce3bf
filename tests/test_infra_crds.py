"""The cluster objects beyond Argo's own: the KubeRay RayJob that `train-ray` creates, the Karpenter spot GPU pool and
the RBAC, each checked against its CRD (strictly) and for the properties the design needs."""

from __future__ import annotations

import copy
import functools
import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, SHARED
from tests.manifests import (
    WORKFLOW_UID,
    argo_expression,
    default_artifact_repository,
    rayjob_template,
    rendered_rayjob,
    rendered_template,
    templates,
)
from workflows import distill, rayjob

SCHEMAS = SHARED / "schemas"
RAYJOB_CRD = SCHEMAS / "kuberay-v1.7.0-ray.io_rayjobs.yaml"
NODEPOOL_CRD = SCHEMAS / "karpenter-v1.14.1-karpenter.sh_nodepools.yaml"
NODECLASS_CRD = SCHEMAS / "karpenter-aws-v1.14.1-karpenter.k8s.aws_ec2nodeclasses.yaml"
NODEPOOL_FILE = ROOT / "infra/karpenter/nodepool-gpu-spot.yaml"
NODECLASS_FILE = ROOT / "infra/karpenter/ec2nodeclass-gpu.yaml"
needs_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"CRD schemas not found at {SCHEMAS}")


@functools.cache  # the RayJob CRD is 1.4 MB of YAML: parse it once
def crd_validator(crd_file: Path, version: str):
    """A validator for the CRD's openAPIV3Schema that, like the API server's strict field validation, rejects unknown
    fields: `additionalProperties: false` on every object schema that lists its properties and neither admits extra
    keys (`additionalProperties`) nor preserves unknown fields. CEL rules (x-kubernetes-validations) are not checked."""
    from jsonschema import Draft7Validator

    crd = yaml.load(crd_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = copy.deepcopy(next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"])

    def strict(node: object) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for child in node.values():
                strict(child)
        elif isinstance(node, list):
            for child in node:
                strict(child)

    strict(schema["openAPIV3Schema"])
    return Draft7Validator(schema["openAPIV3Schema"])


def errors(validator, doc: dict) -> list[str]:
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(doc)]


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def head(job: dict) -> dict:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]


def workers(job: dict) -> dict[str, dict]:
    return {g["groupName"]: g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}


def match_expressions(pod_template: dict) -> list[dict]:
    terms = pod_template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [e for term in terms["nodeSelectorTerms"] for e in term["matchExpressions"]]


# --- against the CRDs ---------------------------------------------------------------------------------------------


@needs_schemas
@pytest.mark.parametrize("replicas", [{}, {"ray-pi-workers": 0, "ray-small-workers": 0}], ids=["all-1", "no-pi"])
def test_rayjob_passes_kuberays_crd_strictly(replicas: dict):
    assert errors(crd_validator(RAYJOB_CRD, "v1"), rendered_rayjob(replicas)) == []


@needs_schemas
def test_nodepool_and_ec2nodeclass_pass_karpenters_crds_strictly():
    assert errors(crd_validator(NODEPOOL_CRD, "v1"), load(NODEPOOL_FILE)) == []
    assert errors(crd_validator(NODECLASS_CRD, "v1"), load(NODECLASS_FILE)) == []


@needs_schemas
def test_strict_crd_schema_catches_misspelled_fields():
    job = rendered_rayjob()
    job["spec"]["shutdownAfterJobFinish"] = True
    head(job)["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    found = errors(crd_validator(RAYJOB_CRD, "v1"), job)
    assert len(found) == 2, found
    pool = load(NODEPOOL_FILE)
    pool["spec"]["template"]["spec"]["taint"] = pool["spec"]["template"]["spec"].pop("taints")
    assert errors(crd_validator(NODEPOOL_CRD, "v1"), pool)
    node_class = load(NODECLASS_FILE)
    node_class["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSise"] = "200Gi"
    assert errors(crd_validator(NODECLASS_CRD, "v1"), node_class)


@needs_schemas
def test_a_string_where_the_crd_wants_a_replica_count_fails():
    # Why the manifest carries bare placeholders: quoted, Argo's substitution would leave a string here.
    job = rendered_rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "1"
    assert errors(crd_validator(RAYJOB_CRD, "v1"), job)


# --- the RayJob's shape -------------------------------------------------------------------------------------------


def test_head_is_a_coordinator_only_and_kept_off_spot():
    job = rendered_rayjob()
    assert head(job)["rayStartParams"]["num-cpus"] == "0"
    # NotIn, not In [on-demand]: homelab nodes have no capacity-type label and must still qualify.
    assert {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]} in match_expressions(
        head(job)["template"]
    )


def test_worker_groups_are_the_adr_s_four_each_pinned_to_its_architecture():
    groups = workers(rendered_rayjob())
    expected = {"large": (8, "32Gi", "amd64"), "medium": (4, "16Gi", "amd64"), "small": (2, "8Gi", "amd64")}
    expected["pi"] = (2, "3Gi", "arm64")
    assert set(groups) == set(expected)
    for name, (cpus, memory, arch) in expected.items():
        pod = groups[name]["template"]
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["requests"] == {"cpu": str(cpus), "memory": memory} == resources["limits"], name
        assert {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]} in match_expressions(pod), name
        # Ray must see the CPUs the pod was given, neither more (oversubscription) nor fewer (idle cores).
        assert groups[name]["rayStartParams"]["num-cpus"] == str(cpus), name


def test_replica_counts_come_from_the_workflow_parameters():
    groups = workers(rendered_rayjob({"ray-large-workers": 3, "ray-medium-workers": 2}))
    assert groups["large"]["replicas"] == groups["large"]["maxReplicas"] == 3
    assert groups["medium"]["replicas"] == 2
    parameters = {p["name"] for p in rendered_template()["spec"]["arguments"]["parameters"]}
    assert {g.parameter for g in rayjob.WORKER_GROUPS} <= parameters


def test_training_workers_are_computed_from_the_replicas():
    job_task = next(t for t in templates()["train-ray"]["dag"]["tasks"] if t["name"] == "rayjob")
    tag = next(a["value"] for a in job_task["arguments"]["parameters"] if a["name"] == "ray-workers")
    replicas = {"ray-large-workers": "2", "ray-medium-workers": "1", "ray-small-workers": "1", "ray-pi-workers": "3"}
    # threads 2: a large replica holds 4 workers, medium 2, small 1, a Pi 1.
    assert argo_expression(tag, {"inputs": {"parameters": replicas}}) == 2 * 4 + 1 * 2 + 1 + 3
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    assert words[words.index("--threads") + 1] == str(rayjob.THREADS_PER_WORKER)
    assert words[words.index("--ray-workers") + 1] == "6"  # the value the resource template was given


def pi_gate() -> str:
    pipeline = templates()["pipeline"]["dag"]["tasks"]
    ray_task = next(t for t in pipeline if t["name"] == "train-ray")
    return next(a["value"] for a in ray_task["arguments"]["parameters"] if a["name"] == "ray-pi-workers")


@pytest.mark.parametrize(("arm64_ok", "expected"), [("true", "4"), ("false", "0")])
def test_pi_group_gets_replicas_only_when_preflight_says_the_model_fits(arm64_ok: str, expected: str):
    env = {
        "tasks": {"preflight": {"outputs": {"parameters": {"arm64-ok": arm64_ok}}}},
        "workflow": {"parameters": {"ray-pi-workers": "4"}},
    }
    assert argo_expression(pi_gate(), env) == expected
    preflight = templates()["preflight"]
    assert "arm64-ok" in {p["name"] for p in preflight["outputs"]["parameters"]}


def test_entrypoint_is_the_train_step_joining_the_cluster_with_data_through_the_runs_s3_prefix():
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    assert words[:7] == ["python", "-m", "steps.train", "--train-backend", "ray", "--ray-address", "auto"]
    prefix = f"s3://{distill.BUCKET}/runs/{WORKFLOW_UID}"
    for flag, where in (("--dataset", "dataset"), ("--out", "adapter"), ("--checkpoint-dir", "ray")):
        assert words[words.index(flag) + 1] == f"{prefix}/{where}", flag
    assert words[words.index("--run-id") + 1] == WORKFLOW_UID


def test_rayjob_cleans_up_after_itself_and_belongs_to_the_workflow():
    spec = rendered_rayjob()["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] > 0 and spec["activeDeadlineSeconds"] > 0
    resource = rayjob_template()["resource"]
    assert resource["action"] == "create" and resource["setOwnerReference"] is True


def argo_conditions_hold(condition: str, status: dict, all_of: bool) -> bool:
    """Argo's resource executor: label-selector requirements on the object's JSON; the step succeeds when all success
    requirements match and fails as soon as any one failure requirement matches."""
    requirements = re.findall(r"([\w.]+) (==|in) (\([^)]*\)|\w+)", condition)
    assert ", ".join(" ".join(r) for r in requirements) == condition, "a requirement this reading does not know"
    results = []
    for key, op, value in requirements:
        actual = status.get(key.removeprefix("status."), "")
        wanted = [v.strip() for v in value.strip("()").split(",")] if op == "in" else [value]
        results.append(actual in wanted)
    return all(results) if all_of else any(results)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ({"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}, "succeeded"),
        ({"jobStatus": "FAILED", "jobDeploymentStatus": "Complete"}, "failed"),
        ({"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}, "failed"),
        ({"jobStatus": "RUNNING", "jobDeploymentStatus": "Failed"}, "failed"),  # activeDeadlineSeconds passed
        ({"jobDeploymentStatus": "Initializing"}, "waiting"),
        ({"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}, "waiting"),
    ],
)
def test_success_and_failure_conditions_follow_kuberay_s_status(status: dict, outcome: str):
    resource = rayjob_template()["resource"]
    if argo_conditions_hold(resource["failureCondition"], status, all_of=False):
        got = "failed"
    elif argo_conditions_hold(resource["successCondition"], status, all_of=True):
        got = "succeeded"
    else:
        got = "waiting"
    assert got == outcome


def test_ray_pods_run_unprivileged_as_the_workflow_s_service_account():
    job = rendered_rayjob()
    for pod in [head(job)["template"], *(g["template"] for g in workers(job).values())]:
        spec = pod["spec"]
        assert spec["serviceAccountName"] == distill.SERVICE_ACCOUNT
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        container = spec["containers"][0]["securityContext"]
        assert container["allowPrivilegeEscalation"] is False and container["capabilities"]["drop"] == ["ALL"]
        assert spec["containers"][0]["image"] == distill.IMAGE_RAY


# --- the Argo side of the Ray path ------------------------------------------------------------------------------------


def test_data_goes_to_the_runs_prefix_and_the_adapter_comes_back_as_an_artifact():
    ts = templates()
    dataset = next(a for a in ts["fetch-dataset"]["outputs"]["artifacts"] if a["name"] == "dataset")
    assert dataset["s3"] == {"key": "runs/{{workflow.uid}}/dataset"} and dataset["archive"] == {"none": {}}
    collect = ts["collect-adapter"]
    assert collect["inputs"]["artifacts"][0]["s3"] == {"key": "runs/{{workflow.uid}}/adapter"}
    assert {a["name"] for a in collect["outputs"]["artifacts"]} == {"adapter"}
    assert {p["name"] for p in collect["outputs"]["parameters"]} == {"final-loss"}
    outputs = ts["train-ray"]["outputs"]
    assert outputs["artifacts"] == [{"name": "adapter", "from": "{{tasks.collect-adapter.outputs.artifacts.adapter}}"}]
    assert outputs["parameters"][0]["name"] == "final-loss"


def test_run_prefix_bucket_is_the_artifact_repository_s():
    assert default_artifact_repository()["s3"]["bucket"] == distill.BUCKET


@pytest.mark.parametrize("backend", ["gpu", "cpu", "ray"])
def test_downstream_takes_the_adapter_from_whichever_train_task_ran(backend: str):
    pipeline = templates()["pipeline"]["dag"]["tasks"]
    convert = next(t for t in pipeline if t["name"] == "convert-gguf")
    adapter = next(a for a in convert["arguments"]["artifacts"] if a["name"] == "adapter")
    names = ["train-gpu", "train-cpu", "train-ray"]
    env = {
        "tasks": {
            n: {
                "status": "Succeeded" if n == f"train-{backend}" else "Skipped",
                "outputs": {"artifacts": {"adapter": f"adapter of {n}"}},
            }
            for n in names
        }
    }
    assert argo_expression(adapter["fromExpression"], env) == f"adapter of train-{backend}"
    assert all(f"{n}.Succeeded" in convert["depends"] for n in names)


def test_gpu_and_cpu_train_pods_checkpoint_to_the_runs_prefix():
    for name in ("train-gpu", "train-cpu"):
        args = templates()[name]["container"]["args"]
        checkpoints = f"s3://{distill.BUCKET}/runs/{{{{workflow.uid}}}}/checkpoints"
        assert args[args.index("--checkpoint-dir") + 1] == checkpoints, name
        assert args[args.index("--run-id") + 1] == "{{workflow.uid}}", name


# --- Karpenter and RBAC ---------------------------------------------------------------------------------------------


def test_nodepool_is_what_the_gpu_train_pod_selects_and_tolerates():
    pool = load(NODEPOOL_FILE)
    node_class = load(NODECLASS_FILE)
    gpu = templates()["train-gpu"]
    assert gpu["nodeSelector"]["karpenter.sh/nodepool"] == pool["metadata"]["name"]
    requirements = {r["key"]: r for r in pool["spec"]["template"]["spec"]["requirements"]}
    capacity = requirements["karpenter.sh/capacity-type"]
    assert capacity["operator"] == "In" and capacity["values"] == [gpu["nodeSelector"]["karpenter.sh/capacity-type"]]
    for taint in pool["spec"]["template"]["spec"]["taints"]:
        assert any(
            t["key"] == taint["key"]
            and t.get("effect") in (None, taint["effect"])
            and (t["operator"] == "Exists" or t.get("value") == taint.get("value"))
            for t in gpu["tolerations"]
        ), f"the GPU train pod does not tolerate {taint}"
    assert {t["key"] for t in pool["spec"]["template"]["spec"]["taints"]} == {"nvidia.com/gpu"}
    assert pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] == node_class["metadata"]["name"]
    assert gpu["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def test_karpenter_objects_have_their_own_kustomization():
    kustomization = load(ROOT / "infra/karpenter/kustomization.yaml")
    assert {ROOT / "infra/karpenter" / r for r in kustomization["resources"]} == {NODEPOOL_FILE, NODECLASS_FILE}


def test_rbac_grants_rayjobs_and_nothing_broader():
    role = next(d for d in yaml.safe_load_all((ROOT / "infra/rbac/role.yaml").read_text()) if d["kind"] == "Role")
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
    ray_rules = [r for r in role["rules"] if "ray.io" in r["apiGroups"]]
    assert len(ray_rules) == 1 and ray_rules[0]["apiGroups"] == ["ray.io"]
    assert ray_rules[0]["resources"] == ["rayjobs"]  # not rayclusters: KubeRay manages those itself
    assert set(ray_rules[0]["verbs"]) == {"create", "get", "list", "watch", "delete"}
