"""The step pods' NetworkPolicy (infra/networkpolicy/steps.yaml), evaluated with NetworkPolicy's semantics
(tests/netpol.py) on the pods Argo's controller would create for every rendered workflow (tests/argo_pods.py), beside
the Ray pods' policy, the serving pods' and the namespace's default deny; the egress allow-list (only the steps with a
public host reach the internet, the rest and the serving pods only the private endpoints); and the cluster's address
ranges (infra/networkpolicy/cluster-network.yaml) kept out of every egress rule, in the files and in the build."""

from __future__ import annotations

import copy
import ipaddress
import re
import shutil

import pytest
import yaml

from tests.argo_pods import rayjob_pods, shipped_config, workflow_pods
from tests.conftest import ROOT
from tests.manifests import rendered_rayjob
from tests.netpol import Endpoint, allowed, matches
from tests.test_pod_security import argo_docs
from workflows import security

NAMESPACE = "distillery"
POLICY_FILES = [
    ROOT / "infra/networkpolicy/steps.yaml",
    ROOT / "infra/networkpolicy/ray.yaml",
    ROOT / "infra/networkpolicy/default-deny.yaml",
    ROOT / "infra/serving/networkpolicy.yaml",
]
NETWORK = yaml.safe_load((ROOT / "infra/networkpolicy/cluster-network.yaml").read_text())["data"]

DNS = Endpoint("kube-system", {"k8s-app": "kube-dns"})
S3 = Endpoint(ip="52.216.1.1")  # a public address: S3's, the hub's, an attacker's alike
API_SERVER = Endpoint(ip="10.0.0.12")  # a control-plane address (k3s: 6443)
# An address in the private endpoints' range (cluster-network.yaml endpoints-cidr): S3's and STS's VPC interface
# endpoints, the API server's private endpoint on EKS (443).
PRIVATE_ENDPOINT = Endpoint(ip=str(ipaddress.ip_network(NETWORK["endpoints-cidr"])[5]))
IMDS = Endpoint(ip="169.254.169.254")
MLFLOW = Endpoint("mlflow", {"app": "mlflow"})
MINIO = Endpoint("minio", {"app": "minio"})
STRANGER = Endpoint(NAMESPACE, {"app": "something-else"})
ELSEWHERE = Endpoint("default", {"app": "something-else"})
# Pods and Services of the cluster, by address (as an ipBlock sees them), each serving HTTPS on 443.
POD_ELSEWHERE = Endpoint("default", {"app": "web"}, pod_ip=str(ipaddress.ip_network(NETWORK["pod-cidr"])[7]))
SERVICE_IP = Endpoint(ip=str(ipaddress.ip_network(NETWORK["service-cidr"])[10]))
SERVE = Endpoint(NAMESPACE, {"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "serve",
                             "distillery/alias": "champion"})  # fmt: skip
GATEWAY = Endpoint("gateway", {"app": "envoy"})


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
    selector = next(p for p in policies if p["metadata"]["name"] == "distillery-steps")["spec"]["podSelector"]
    workflows = {name.split("/")[0] for name in steps}
    assert {"distill-workflowtemplate", "build-dataset-workflowtemplate", "retrain-cronworkflow"} <= workflows
    assert {"promote-cronworkflow"} <= workflows
    assert [name for name, pod in steps.items() if not matches(selector, pod.labels)] == []
    assert [name for name, pod in ray.items() if matches(selector, pod.labels)] == []


@pytest.mark.parametrize("port", [80, 443, 8080, 8265])
def test_nothing_connects_to_a_step_pod(policies, steps, ray, port):
    for source in (STRANGER, ELSEWHERE, ray["head"], *steps.values()):
        assert not any(allowed(policies, source, pod, port) for pod in steps.values())


def test_steps_reach_dns_the_private_endpoints_the_api_server_and_in_cluster_mlflow_and_minio(policies, steps):
    for name, pod in steps.items():
        assert allowed(policies, pod, DNS, 53, "UDP") and allowed(policies, pod, DNS, 53, "TCP"), name
        assert allowed(policies, pod, PRIVATE_ENDPOINT, 443), name
        assert allowed(policies, pod, API_SERVER, 6443), name
        assert allowed(policies, pod, MLFLOW, 5000) and allowed(policies, pod, MINIO, 9000), name


def test_only_the_steps_with_a_public_host_reach_the_internet(policies, steps):
    # The egress allow-list (issue 37, item 8): a token stolen in a pod without a public host to reach cannot leave on
    # 443. The internet pods are exactly the templates workflows/security.py labels (the hub, git, a hosted teacher,
    # Gitea, ingest's tokenizer); evaluate's shards and gather, register, propose and promote are not among them.
    public = {name for name, pod in steps.items() if allowed(policies, pod, S3, 443)}
    templates = {name.split("/")[1] for name in public}
    assert templates == set(security.PUBLIC_HOST_STEPS) & {n.split("/")[1] for n in steps}, templates
    for held in ("evaluate", "evaluate-shard-cpu", "evaluate-shard-gpu", "register", "propose", "promote"):
        assert held not in templates, held
    assert {"preflight", "train-gpu", "convert-gguf", "fetch-dataset", "push-adapter", "teacher"} <= templates
    for name, pod in steps.items():
        assert not allowed(policies, pod, IMDS, 443), name
    # The label alone opens it: a pod that loses it is held to the private endpoints.
    convert = next(pod for name, pod in steps.items() if name.endswith("/convert-gguf"))
    assert allowed(policies, convert, S3, 443)
    unlabelled = Endpoint(NAMESPACE, {k: v for k, v in convert.labels.items() if k != security.EGRESS_LABEL})
    assert not allowed(policies, unlabelled, S3, 443) and allowed(policies, unlabelled, PRIVATE_ENDPOINT, 443)


def documented_templates(phrase: str) -> set[str]:
    """The templates docs/security.md names, as code spans, in the parenthesis right after `phrase`."""
    text = " ".join((ROOT / "docs/security.md").read_text().split())
    found = re.search(re.escape(phrase) + r" \(([^()]*)\)", text)
    assert found, f"docs/security.md no longer says '{phrase} (…)'"
    return set(re.findall(r"`([^`]+)`", found.group(1)))


def test_the_security_page_names_exactly_the_steps_with_and_without_a_public_host(policies, steps):
    # The page's lists were written by hand beside PUBLIC_HOST_STEPS; a step added to (or taken from) the internet
    # rule, or a new template, must show on the page a reader trusts: it is held to the policies' own answer.
    public = {name.split("/")[1] for name, pod in steps.items() if allowed(policies, pod, S3, 443)}
    every = {name.split("/")[1] for name in steps}
    assert documented_templates("the steps that reach a public host") == public
    assert documented_templates("the pods without a public host to reach") == every - public


def test_the_private_endpoints_range_is_no_cluster_range_and_not_the_metadata_address():
    endpoints = ipaddress.ip_network(NETWORK["endpoints-cidr"])
    for other in (NETWORK["pod-cidr"], NETWORK["service-cidr"], "169.254.169.254/32"):
        assert not endpoints.overlaps(ipaddress.ip_network(other)), other


def test_steps_reach_neither_instance_metadata_nor_other_pods_nor_plain_http(policies, steps, ray):
    for name, pod in steps.items():
        assert not allowed(policies, pod, IMDS, 80) and not allowed(policies, pod, IMDS, 443), name
        assert not allowed(policies, pod, S3, 80), name
        assert not allowed(policies, pod, STRANGER, 8080) and not allowed(policies, pod, ray["head"], 8265), name
        assert not allowed(policies, pod, MLFLOW, 22) and not allowed(policies, pod, MINIO, 5000), name


def without_default_deny(policies: list[dict]) -> list[dict]:
    """The policies but the namespace's default deny: each must hold on its own too (the deny is a second wall)."""
    return copy.deepcopy([p for p in policies if p["metadata"]["name"] != "distillery-default-deny"])


def test_a_selector_missing_a_workflow_s_pods_is_caught(policies, steps):
    broken = without_default_deny(policies)
    broken[0]["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/component": "pipeline"}}
    assert any(not matches(broken[0]["spec"]["podSelector"], pod.labels) for pod in steps.values())
    assert any(allowed(broken, STRANGER, pod, 8080) for pod in steps.values())
    with_deny = [*broken, *(p for p in policies if p["metadata"]["name"] == "distillery-default-deny")]
    assert not any(allowed(with_deny, STRANGER, pod, 8080) for pod in steps.values())  # the default deny holds


def test_a_policy_without_egress_type_would_leave_egress_open(policies, steps):
    broken = without_default_deny(policies)
    broken[0]["spec"]["policyTypes"] = ["Ingress"]
    held = next(pod for pod in steps.values() if security.EGRESS_LABEL not in pod.labels)  # only that policy selects it
    assert allowed(broken, held, IMDS, 80)


def test_the_policy_is_installed_with_the_rest():
    resources = yaml.safe_load((ROOT / "infra/kustomization.yaml").read_text())["resources"]
    assert "networkpolicy/steps.yaml" in resources


# --- the namespace's default deny, the cluster's ranges, the serving pods ---------------------------------------------


def test_a_pod_no_other_policy_selects_reaches_nothing_and_nothing_reaches_it(policies):
    for port, protocol in ((443, "TCP"), (53, "UDP"), (8080, "TCP")):
        for other in (S3, DNS, MLFLOW, IMDS, ELSEWHERE):
            assert not allowed(policies, STRANGER, other, port, protocol), (other, port)
        assert not allowed(policies, ELSEWHERE, STRANGER, port, protocol)
    without = [p for p in policies if p["metadata"]["name"] != "distillery-default-deny"]
    assert allowed(without, STRANGER, S3, 443) and allowed(without, ELSEWHERE, STRANGER, 8080)


def test_https_egress_excludes_the_cluster_s_pods_and_services(policies, steps, ray):
    """443 to 0.0.0.0/0 would reach every pod and Service of the cluster (as Calico and Cilium read ipBlocks)."""
    senders = {**steps, **{f"ray/{n}": p for n, p in ray.items()}, "serve": SERVE}
    for name, pod in senders.items():
        assert allowed(policies, pod, S3, 443) or allowed(policies, pod, PRIVATE_ENDPOINT, 443), name
        assert not allowed(policies, pod, POD_ELSEWHERE, 443), name
        assert not allowed(policies, pod, SERVICE_IP, 443), name
    opened = copy.deepcopy(policies)
    for p in opened:
        for rule in p["spec"].get("egress") or []:
            for peer in rule.get("to") or []:
                if "ipBlock" in peer:
                    peer["ipBlock"]["except"] = ["169.254.169.254/32"]
    internet = next(pod for pod in steps.values() if pod.labels.get(security.EGRESS_LABEL) == security.INTERNET)
    assert allowed(opened, internet, POD_ELSEWHERE, 443)  # the evaluator sees pod addresses


def https_excepts(docs: list[dict]) -> dict[str, list[str]]:
    """NetworkPolicy name → the `except` of its 0.0.0.0/0 rule."""
    return {
        d["metadata"]["name"]: peer["ipBlock"]["except"]
        for d in docs
        if d.get("kind") == "NetworkPolicy"
        for rule in d["spec"].get("egress") or []
        for peer in rule.get("to") or []
        if peer.get("ipBlock", {}).get("cidr") == "0.0.0.0/0"
    }


OUTSIDE = {"distillery-steps", "distillery-steps-internet", "distillery-ray"}  # policies with a 0.0.0.0/0 rule
PRIVATE = {"distillery-steps", "distillery-serve"}  # policies with the private endpoints' rule


def endpoints_rules(docs: list[dict]) -> dict[str, str]:
    """NetworkPolicy name → the cidr of its HTTPS rule that is not 0.0.0.0/0."""
    return {
        d["metadata"]["name"]: peer["ipBlock"]["cidr"]
        for d in docs
        if d.get("kind") == "NetworkPolicy"
        for rule in d["spec"].get("egress") or []
        if any(p.get("port") == 443 for p in rule.get("ports") or [])
        for peer in rule.get("to") or []
        if peer.get("ipBlock", {}).get("cidr", "0.0.0.0/0") != "0.0.0.0/0"
    }


def test_the_cluster_ranges_are_set_in_one_place(policies):
    expected = ["169.254.169.254/32", NETWORK["pod-cidr"], NETWORK["service-cidr"]]
    found = https_excepts(policies)
    assert set(found) == OUTSIDE
    assert all(v == expected for v in found.values()), found
    assert endpoints_rules(policies) == dict.fromkeys(PRIVATE, NETWORK["endpoints-cidr"])


@pytest.mark.slow
def test_kustomize_copies_the_cluster_ranges_into_every_https_rule(tmp_path):
    """Changing only cluster-network.yaml's values changes every policy's except list in the build (the replacement
    paths point at the right rules), and the ConfigMap itself is not applied."""
    from tests.test_kustomize import kustomize

    infra = tmp_path / "infra"
    shutil.copytree(ROOT / "infra", infra)
    network = infra / "networkpolicy/cluster-network.yaml"
    doc = yaml.safe_load(network.read_text())
    doc["data"] = {"pod-cidr": "100.64.0.0/16", "service-cidr": "172.20.0.0/16", "endpoints-cidr": "10.0.128.0/20"}
    network.write_text(yaml.safe_dump(doc))
    docs = kustomize(infra)
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "distillery-cluster-network"]
    found = https_excepts(docs)
    assert set(found) == OUTSIDE
    assert all(v == ["169.254.169.254/32", "100.64.0.0/16", "172.20.0.0/16"] for v in found.values()), found
    assert endpoints_rules(docs) == dict.fromkeys(PRIVATE, "10.0.128.0/20")


def test_serving_reaches_dns_mlflow_and_the_store_only(policies, steps):
    assert allowed(policies, SERVE, DNS, 53, "UDP") and allowed(policies, SERVE, PRIVATE_ENDPOINT, 443)
    assert not allowed(policies, SERVE, S3, 443)  # no public host: S3 through its VPC endpoint
    assert allowed(policies, SERVE, MLFLOW, 5000) and allowed(policies, SERVE, MINIO, 9000)
    assert not allowed(policies, SERVE, IMDS, 80) and not allowed(policies, SERVE, IMDS, 443)
    assert not allowed(policies, SERVE, S3, 80) and not allowed(policies, SERVE, API_SERVER, 6443)
    for pod in (*steps.values(), STRANGER):
        assert not allowed(policies, SERVE, pod, 8080)
    assert allowed(policies, GATEWAY, SERVE, 8080) and not allowed(policies, STRANGER, SERVE, 8080)
