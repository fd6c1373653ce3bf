"""The step pods' NetworkPolicy (infra/networkpolicy/steps.yaml), evaluated with NetworkPolicy's semantics
(tests/netpol.py) on the pods Argo's controller would create for every rendered workflow (tests/argo_pods.py), beside
the Ray pods' policy."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.argo_pods import rayjob_pods, shipped_config, workflow_pods
from tests.conftest import ROOT
from tests.manifests import rendered_rayjob
from tests.netpol import Endpoint, allowed, matches
from tests.test_pod_security import argo_docs

NAMESPACE = "distillery"
POLICY_FILES = [ROOT / "infra/networkpolicy/steps.yaml", ROOT / "infra/networkpolicy/ray.yaml"]

DNS = Endpoint("kube-system", {"k8s-app": "kube-dns"})
S3 = Endpoint(ip="52.216.1.1")
API_SERVER = Endpoint(ip="10.0.0.12")  # a control-plane address (k3s: 6443; EKS: 443)
IMDS = Endpoint(ip="169.254.169.254")
MLFLOW = Endpoint("mlflow", {"app": "mlflow"})
MINIO = Endpoint("minio", {"app": "minio"})
STRANGER = Endpoint(NAMESPACE, {"app": "something-else"})
ELSEWHERE = Endpoint("default", {"app": "something-else"})


@pytest.fixture(scope="module")
def policies() -> list[dict]:
    return [d for path in POLICY_FILES for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def steps() -> dict[str, Endpoint]:
    """`<workflow>/<template>` → the pod Argo creates for it, as a NetworkPolicy endpoint."""
    config = shipped_config()
    pods = {
        f"{stem}/{name}": pod for stem, doc in argo_docs().items() for name, pod in workflow_pods(doc, config).items()
    }
    return {name: Endpoint(NAMESPACE, pod["metadata"]["labels"]) for name, pod in pods.items()}


@pytest.fixture(scope="module")
def ray() -> dict[str, Endpoint]:
    return {n: Endpoint(NAMESPACE, p["metadata"]["labels"]) for n, p in rayjob_pods(rendered_rayjob()).items()}


def test_every_pod_of_every_workflow_is_selected_and_no_ray_pod_is(policies, steps, ray):
    selector = policies[0]["spec"]["podSelector"]
    workflows = {name.split("/")[0] for name in steps}
    assert {"distill-workflowtemplate", "build-dataset-workflowtemplate", "retrain-cronworkflow"} <= workflows
    assert {"promote-cronworkflow"} <= workflows
    assert [name for name, pod in steps.items() if not matches(selector, pod.labels)] == []
    assert [name for name, pod in ray.items() if matches(selector, pod.labels)] == []


@pytest.mark.parametrize("port", [80, 443, 8080, 8265])
def test_nothing_connects_to_a_step_pod(policies, steps, ray, port):
    for source in (STRANGER, ELSEWHERE, ray["head"], *steps.values()):
        assert not any(allowed(policies, source, pod, port) for pod in steps.values())


def test_steps_reach_dns_https_the_api_server_and_in_cluster_mlflow_and_minio(policies, steps):
    for name, pod in steps.items():
        assert allowed(policies, pod, DNS, 53, "UDP") and allowed(policies, pod, DNS, 53, "TCP"), name
        assert allowed(policies, pod, S3, 443), name
        assert allowed(policies, pod, API_SERVER, 6443) and allowed(policies, pod, API_SERVER, 443), name
        assert allowed(policies, pod, MLFLOW, 5000) and allowed(policies, pod, MINIO, 9000), name


def test_steps_reach_neither_instance_metadata_nor_other_pods_nor_plain_http(policies, steps, ray):
    for name, pod in steps.items():
        assert not allowed(policies, pod, IMDS, 80) and not allowed(policies, pod, IMDS, 443), name
        assert not allowed(policies, pod, S3, 80), name
        assert not allowed(policies, pod, STRANGER, 8080) and not allowed(policies, pod, ray["head"], 8265), name
        assert not allowed(policies, pod, MLFLOW, 22) and not allowed(policies, pod, MINIO, 5000), name


def test_a_selector_missing_a_workflow_s_pods_is_caught(policies, steps):
    broken = copy.deepcopy(policies)
    broken[0]["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/component": "pipeline"}}
    assert any(not matches(broken[0]["spec"]["podSelector"], pod.labels) for pod in steps.values())
    assert any(allowed(broken, STRANGER, pod, 8080) for pod in steps.values())


def test_a_policy_without_egress_type_would_leave_egress_open(policies, steps):
    broken = copy.deepcopy(policies)
    broken[0]["spec"]["policyTypes"] = ["Ingress"]
    assert allowed(broken, next(iter(steps.values())), IMDS, 80)


def test_the_policy_is_installed_with_the_rest():
    resources = yaml.safe_load((ROOT / "infra/kustomization.yaml").read_text())["resources"]
    assert "networkpolicy/steps.yaml" in resources
