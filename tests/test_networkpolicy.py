"""The Ray pods' NetworkPolicy (infra/networkpolicy/ray.yaml), evaluated with NetworkPolicy's semantics on the pods
KubeRay would create for the rendered RayJob, and the RayJob's Ray token authentication against KubeRay's rules.

The NetworkPolicy semantics are tests/netpol.py's.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.argo_pods import rayjob_pods
from tests.conftest import ROOT
from tests.manifests import rendered_rayjob
from tests.netpol import Endpoint, allowed, matches
from workflows import rayjob, security

POLICY_FILE = ROOT / "infra/networkpolicy/ray.yaml"
NAMESPACE = "distillery"
DASHBOARD, GCS, CLIENT = 8265, 6379, 10001  # KubeRay's default head ports (utils: DefaultDashboardPort, …)
OPERATOR_NAMESPACE = "kuberay-operator"


@pytest.fixture(scope="module")
def policies() -> list[dict]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


@pytest.fixture(scope="module")
def ray() -> dict[str, Endpoint]:
    return {n: Endpoint(NAMESPACE, p["metadata"]["labels"]) for n, p in rayjob_pods(rendered_rayjob()).items()}


STEP_POD = Endpoint(NAMESPACE, {"workflows.argoproj.io/workflow": "distill-x", "app.kubernetes.io/name": "distillery"})
STRANGER = Endpoint(NAMESPACE, {"app": "something-else"})
OTHER_NAMESPACE = Endpoint("default", {"app.kubernetes.io/component": "train-ray", "ray.io/is-ray-node": "yes"})
OPERATOR = Endpoint(OPERATOR_NAMESPACE, {"app.kubernetes.io/name": "kuberay-operator"})
OPERATOR_IMPOSTOR = Endpoint("default", {"app.kubernetes.io/name": "kuberay-operator"})
DNS = Endpoint("kube-system", {"k8s-app": "kube-dns"})
S3 = Endpoint(ip="52.216.1.1")
IMDS = Endpoint(ip="169.254.169.254")


def test_the_policy_selects_every_ray_pod(policies, ray):
    assert ray and all(matches(policies[0]["spec"]["podSelector"], e.labels) for e in ray.values())


@pytest.mark.parametrize("port", [DASHBOARD, GCS, CLIENT, 52365])
@pytest.mark.parametrize("who", [STEP_POD, STRANGER, OTHER_NAMESPACE, OPERATOR_IMPOSTOR])
def test_no_other_pod_reaches_the_head(policies, ray, who, port):
    assert not allowed(policies, who, ray["head"], port)


def test_ray_pods_reach_each_other(policies, ray):
    for port in (GCS, DASHBOARD, 8076, 12345):
        assert allowed(policies, ray["worker-large"], ray["head"], port)
        assert allowed(policies, ray["head"], ray["worker-pi"], port)


def test_the_operator_reaches_the_dashboard_only(policies, ray):
    assert allowed(policies, OPERATOR, ray["head"], DASHBOARD)
    assert not allowed(policies, OPERATOR, ray["head"], GCS)


def test_ray_pods_reach_dns_and_https_but_not_instance_metadata_or_other_pods(policies, ray):
    worker = ray["worker-large"]
    assert allowed(policies, worker, DNS, 53, "UDP") and allowed(policies, worker, DNS, 53, "TCP")
    assert allowed(policies, worker, S3, 443)
    assert not allowed(policies, worker, IMDS, 443) and not allowed(policies, worker, IMDS, 80)
    assert not allowed(policies, worker, S3, 80)
    assert not allowed(policies, worker, STEP_POD, 8080)


def test_without_the_policy_anyone_reaches_the_head(ray):
    assert allowed([], STRANGER, ray["head"], DASHBOARD) and allowed([], STRANGER, ray["head"], GCS)


def test_a_rule_open_to_the_namespace_is_caught(policies, ray):
    broken = copy.deepcopy(policies)
    broken[0]["spec"]["ingress"].append({"from": [{"podSelector": {}}], "ports": [{"port": DASHBOARD}]})
    assert allowed(broken, STRANGER, ray["head"], DASHBOARD)


def test_a_policy_without_egress_type_would_leave_egress_open(policies, ray):
    broken = copy.deepcopy(policies)
    broken[0]["spec"]["policyTypes"] = ["Ingress"]
    assert allowed(broken, ray["head"], IMDS, 80)


def test_no_egress_to_mlflow_as_the_ray_job_gets_no_mlflow_credentials(policies, ray):
    assert "train-ray" not in security.USERS["mlflow"]
    mlflow = Endpoint("mlflow", {"app": "mlflow"})
    assert not allowed(policies, ray["head"], mlflow, 5000)


# --- Ray token authentication ---------------------------------------------------------------------------------------


def test_ray_token_auth_is_on_and_kuberay_accepts_it():
    """KubeRay utils/validation.go ValidateRayClusterSpec: mode token needs rayVersion >= 2.52.0; RayJob refuses
    enableK8sTokenAuth (ValidateRayJobSpec). Without secretName KubeRay generates a per-cluster token Secret
    (raycluster_controller.go reconcileAuthSecret) and sets RAY_AUTH_MODE / RAY_AUTH_TOKEN in every Ray container."""
    cluster = rendered_rayjob()["spec"]["rayClusterSpec"]
    auth = cluster["authOptions"]
    assert auth == {"mode": "token"}
    version = tuple(int(x) for x in cluster["rayVersion"].split("."))
    assert version >= tuple(int(x) for x in rayjob.MIN_RAY_FOR_TOKEN_AUTH.split("."))
