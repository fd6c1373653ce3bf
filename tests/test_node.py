"""On a real node (issue 35): pods run by kubelet, containerd and runc on this machine (tests/node.py, the `real_node`
fixture), and Argo's workflows run by its real executor (`argoexec` init/wait/emissary in the pods, built here),
beside the stand-in scenarios of tests/test_controlplane.py.

    scripts/engines.sh --cluster && python -m pytest -m cluster tests/test_node.py    # as root
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from steps.core import trust, verdict
from steps.pipeline import PARAMS
from steps.train.checkpoints import CHECKPOINT_PREFIX
from tests.conftest import (
    AWS_ENV,
    ROOT,
    assert_same_adapter,
    console_script,
    free_port,
    make_bucket,
    running_mlflow,
    running_moto,
    s3_client,
    stop,
    wait_http,
)
from tests.controlplane import ARGO_NAMESPACE, NAMESPACE, ControlPlane
from tests.node import (
    BASE_IMAGE,
    IMAGE_CACHE,
    POLICY_CHAINS,
    HubMirror,
    Node,
    StepImage,
    argoexec_image_name,
    start_hub_mirror,
)
from tests.test_controlplane import WF_API, argo
from tests.tls import PrivateCA, make_ca
from tests.tls import https_git as tls_git
from workflows import rayjob, security
from workflows.images import Images

pytestmark = pytest.mark.cluster

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
WFT_API = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/workflowtemplates"
# What the shipped namespace's Pod Security level (restricted) asks of every container.
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_pod(plane: ControlPlane, name: str, phases: tuple[str, ...], timeout: float, node: Node) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        pod = plane.get(f"{PODS}/{name}")
        if pod["status"].get("phase") in phases:
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(
                f"pod {name} still {pod['status'].get('phase')} after {timeout}s: {json.dumps(pod['status'])[:3000]}\n"
                f"kubelet:\n{node.log_tail('kubelet', 3000)}\ncontainerd:\n{node.log_tail('containerd', 2000)}"
            )
        time.sleep(0.3)


def pod(name: str, script: str, **container: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": POD_SECURITY,
            "containers": [{"name": "main", "image": BASE_IMAGE, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script], "securityContext": RESTRICTED, **container}],
        },
    }  # fmt: skip


def test_a_pod_succeeds_on_the_real_kubelet(real_node: Node):
    """Scheduled by kube-scheduler, started by the kubelet through containerd and runc on the CNI bridge, as the
    restricted namespace's uid; its log read back through the API server from the kubelet."""
    plane = real_node.plane
    created = time.time()
    plane.api("POST", PODS, pod("hello", "echo hello from $(id -u)"))
    done = wait_pod(plane, "hello", ("Succeeded", "Failed"), 120, real_node)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["spec"]["nodeName"] == "distillery-node"
    assert done["status"]["podIP"] in {str(ip) for ip in real_node.net.subnet}
    log = plane.kubectl("logs", "hello").stdout
    assert "hello from 1000" in log, log
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    print(f"pod start overhead: created -> container started {_time(state['startedAt']) - created:.1f} s")
    plane.api("DELETE", f"{PODS}/hello")


def test_a_pod_over_its_memory_limit_is_oom_killed(real_node: Node):
    """The memory cgroup the kubelet sets from the limit is enforced by the kernel: the container is OOMKilled."""
    plane = real_node.plane
    spec = pod("hog", "tail /dev/zero", resources={"limits": {"memory": "48Mi", "cpu": "500m"}})
    plane.api("POST", PODS, spec)
    done = wait_pod(plane, "hog", ("Succeeded", "Failed"), 120, real_node)
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert done["status"]["phase"] == "Failed" and state["reason"] == "OOMKilled" and state["exitCode"] == 137, state
    plane.api("DELETE", f"{PODS}/hog")


def test_a_pod_resolves_services_by_name_through_the_cluster_dns(real_node: Node):
    """CoreDNS (tests/node.py) answers the names a pod's resolv.conf searches, from the API server: the `kubernetes`
    Service by its short and full names gives its cluster IP (what KubeRay's workers do with the Ray head's Service);
    a name outside the cluster resolves to nothing."""
    plane = real_node.plane
    cluster_ip = plane.get("/api/v1/namespaces/default/services/kubernetes")["spec"]["clusterIP"]
    script = ("cat /etc/resolv.conf; for n in kubernetes.default kubernetes.default.svc.cluster.local; do "
              "getent hosts $n || echo \"unresolved $n\"; done; "
              "getent hosts huggingface.co || echo 'unresolved huggingface.co'")  # fmt: skip
    plane.api("POST", PODS, pod("dns", script))
    done = wait_pod(plane, "dns", ("Succeeded", "Failed"), 120, real_node)
    log = plane.kubectl("logs", "dns").stdout
    plane.api("DELETE", f"{PODS}/dns")
    assert done["status"]["phase"] == "Succeeded", (done["status"], log)
    assert f"nameserver {real_node.net.gateway}" in log, log
    resolved = [line.split() for line in log.splitlines() if line.startswith(cluster_ip)]
    assert {names[1] for names in resolved} == {"kubernetes.default.svc.cluster.local"}, log
    assert len(resolved) == 2 and "unresolved huggingface.co" in log, log


# --- the shipped NetworkPolicies, enforced ----------------------------------------------------------------------------

# The namespace infra/networkpolicy/steps.yaml opens to the steps on one port (an S3-compatible store at home, MinIO
# on 9000): the probes' peer runs there, listening on that port and on one beside it.
PEER_NAMESPACE, PEER_PORTS, STEP_PORT = "minio", (9000, 9001), 8080
# A listener on the port given as the first argument, closing each connection it accepts (perl-base is in the test
# pods' Debian; bash's /dev/tcp is the client).
LISTEN = ("perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => $ARGV[0], Listen => 16, ReuseAddr => 1)"
          " or die $!; while ($c = $s->accept) { close $c }'")  # fmt: skip
PROBE = 'timeout 5 bash -c "exec 3<>/dev/tcp/$0/$1" 2>/dev/null; echo "probe exit $?"'


def probe_pod(name: str, namespace: str, listens: tuple[int, ...], labels: dict[str, str] | None = None) -> dict:
    """A pod that listens on `listens` and otherwise waits (at most 15 minutes) for the test to probe from it."""
    script = "".join(f"{LISTEN} {port} & " for port in listens) + "exec sleep 900"
    spec = pod(name, script)
    spec["metadata"].update(namespace=namespace, labels=labels or {})
    return spec


def wait_running(plane: ControlPlane, name: str, namespace: str, timeout: float) -> str:
    """The pod's address once it runs."""
    deadline = time.monotonic() + timeout
    while True:
        status = plane.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["status"]
        if status.get("phase") == "Running":
            return status["podIP"]
        assert time.monotonic() < deadline, f"{namespace}/{name} not Running after {timeout} s: {status}"
        time.sleep(0.3)


def connects(plane: ControlPlane, name: str, namespace: str, address: str, port: int) -> bool:
    """A TCP connection from inside pod `name` to address:port (bash's /dev/tcp, 5 s at most): True when it was
    accepted, False when refused (kube-router's REJECT) or timed out."""
    done = plane.kubectl("exec", "-n", namespace, name, "--", "bash", "-c", PROBE, address, str(port), check=False)
    found = re.search(r"probe exit (\d+)", done.stdout)
    assert found, f"kubectl exec into {namespace}/{name} did not run the probe: {done.stdout}{done.stderr}"
    return found.group(1) == "0"


def test_the_shipped_network_policies_block_what_they_forbid(real_node: Node):
    """infra/networkpolicy/ as applied (default-deny, steps, ray), enforced on the node by kube-router's network
    policy controller (tests/node.py `enforce_network_policies`; the bridge CNI enforces none). From inside pods, by
    real TCP connections to listeners that answer: a step pod (Argo's workflow label, the steps' account) reaches a
    pod of namespace `minio` on 9000, which distillery-steps allows, and not the same pod on 9001, nor a port of the
    node on the bridge's address; a pod of the namespace that no policy but the default deny selects reaches
    nothing; nothing reaches the step pod (`ingress: []`). Each connection first succeeds with no enforcer (the
    listeners answer, the bridge alone blocks nothing), and again once the enforcer is stopped and its rules are
    removed (nothing of it left on the host)."""
    import socket

    plane, gateway = real_node.plane, real_node.net.gateway
    host = socket.create_server((gateway, 0))  # an ephemeral port: outside kube-router's node-port range

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed at the end
            while True:
                host.accept()[0].close()

    threading.Thread(target=accept, daemon=True).start()
    step_labels = {"workflows.argoproj.io/workflow": "policy-probe"}
    pods = {
        "probe-peer": probe_pod("probe-peer", PEER_NAMESPACE, PEER_PORTS),
        "probe-step": probe_pod("probe-step", NAMESPACE, (STEP_PORT,), step_labels),
        "probe-plain": probe_pod("probe-plain", NAMESPACE, ()),
    }
    pods["probe-step"]["spec"]["serviceAccountName"] = "distillery-steps"  # admission: a step pod runs as a step
    plane.kubectl("create", "namespace", PEER_NAMESPACE)
    try:
        for spec in pods.values():
            plane.api("POST", f"/api/v1/namespaces/{spec['metadata']['namespace']}/pods", spec)
        ips = {name: wait_running(plane, name, spec["metadata"]["namespace"], 120) for name, spec in pods.items()}
        port = host.getsockname()[1]
        # (from, its namespace, to, port): allowed by the shipped policies?
        cases = {
            "step -> minio pod :9000": ("probe-step", NAMESPACE, ips["probe-peer"], 9000, True),
            "step -> minio pod :9001": ("probe-step", NAMESPACE, ips["probe-peer"], 9001, False),
            f"step -> node {gateway}:{port}": ("probe-step", NAMESPACE, gateway, port, False),
            "unselected pod -> minio pod :9000": ("probe-plain", NAMESPACE, ips["probe-peer"], 9000, False),
            f"minio pod -> step :{STEP_PORT}": ("probe-peer", PEER_NAMESPACE, ips["probe-step"], STEP_PORT, False),
        }

        def probe_all() -> dict[str, bool]:
            return {case: connects(plane, *c[:4]) for case, c in cases.items()}

        open_before = probe_all()
        began = time.monotonic()
        try:
            real_node.enforce_network_policies()
            deadline = time.monotonic() + 60
            while not all(real_node.policed(n, NAMESPACE) for n in ("probe-step", "probe-plain")):
                assert time.monotonic() < deadline, f"not policed after 60 s:\n{real_node.log_tail('kube-router')}"
                time.sleep(0.5)
            enforced_s = time.monotonic() - began
            enforced = probe_all()
        finally:
            real_node.stop_network_policies()
        open_after = probe_all()
        left = [x for x in real_node.leftovers() if "ipset" in x or any(c in x for c in POLICY_CHAINS)]
    finally:
        for name, spec in pods.items():
            ns = spec["metadata"]["namespace"]
            plane.kubectl("delete", "pod", "-n", ns, name, "--grace-period=0", "--force", "--wait=false", check=False)
        plane.kubectl("delete", "namespace", PEER_NAMESPACE, "--wait=false", check=False)
        host.close()
    print(f"kube-router policed the probe pods {enforced_s:.1f} s after it started; connected before/enforced/after:")
    for case in cases:
        print(f"  {case}: {open_before[case]} / {enforced[case]} / {open_after[case]}")
    assert all(open_before.values()), open_before
    assert enforced == {case: c[4] for case, c in cases.items()}, (enforced, real_node.log_tail("kube-router"))
    assert all(open_after.values()), open_after
    assert not left, left


# --- Argo's real executor --------------------------------------------------------------------------------------------


def wait_workflow(node: Node, name: str, timeout: float) -> dict:
    plane = node.plane
    deadline = time.monotonic() + timeout
    while True:
        wf = plane.get(f"{WF_API}/{name}")
        phase = (wf.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error"):
            return wf
        if time.monotonic() > deadline:
            raise AssertionError(
                f"workflow {name} still {phase} after {timeout}s: {json.dumps(wf.get('status'))[:4000]}\n"
                f"controller:\n{plane.log_tail('workflow-controller', 3000)}\n"
                f"kubelet:\n{node.log_tail('kubelet', 3000)}"
            )
        time.sleep(0.5)


def template(name: str, templates: list[dict], entrypoint: str = "main") -> dict:
    """A WorkflowTemplate as the shipped ones are set up (their service accounts, the executor's token from its
    Secret, restricted pods): Strict referencing runs only Workflows that reference one."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": entrypoint,
            "automountServiceAccountToken": False,
            "executor": {"serviceAccountName": "distillery-steps"},
            "serviceAccountName": "distillery-steps",
            "securityContext": {**POD_SECURITY, "fsGroup": 1000},
            "templates": templates,
        },
    }


def container(script: str) -> dict:
    return {"image": BASE_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script],
            "securityContext": RESTRICTED}  # fmt: skip


def test_an_output_parameter_read_by_argoexec_reaches_the_next_step(real_node: Node):
    """Argo's emissary executor for real: `init` copies argoexec into the pod, `emissary` runs the step's command and
    keeps its output file, `wait` reads it and reports it through the API server (WorkflowTaskResult, the executor's
    token, RBAC as shipped); the controller hands it to the next step, whose command checks it."""
    plane = real_node.plane
    plane.api("POST", WFT_API, template("node-params", [
        {"name": "main", "steps": [
            [{"name": "produce", "template": "produce"}],
            [{"name": "consume", "template": "consume",
              "arguments": {"parameters": [{"name": "word", "value": "{{steps.produce.outputs.parameters.word}}"}]}}],
        ]},
        {"name": "produce", "container": container("printf 'written-by-%s' $(id -u) > /tmp/word"),
         "outputs": {"parameters": [{"name": "word", "valueFrom": {"path": "/tmp/word"}}]}},
        {"name": "consume", "inputs": {"parameters": [{"name": "word"}]},
         "container": container('test "{{inputs.parameters.word}}" = written-by-1000')},
    ]))  # fmt: skip
    began = time.monotonic()
    argo(plane, "submit", "--from", "workflowtemplate/node-params", "--name", "node-params")
    wf = wait_workflow(real_node, "node-params", 300)
    print(f"two-step workflow: {time.monotonic() - began:.1f} s")
    assert wf["status"]["phase"] == "Succeeded", json.dumps(wf["status"])[:4000]
    produced = [n for n in wf["status"]["nodes"].values() if n.get("templateName") == "produce"]
    assert produced[0]["outputs"]["parameters"][0]["value"] == "written-by-1000"


ARGO_RECENTLY_STARTED_S = 10  # Argo's default RECENTLY_STARTED_POD_DURATION (the controller's environment)


def test_a_deleted_step_pod_is_retried(real_node: Node):
    """A step's pod deleted while it runs (what a reclaimed node does to it): Argo's controller sees it gone and its
    retryStrategy runs the step again, which then succeeds."""
    plane = real_node.plane
    plane.api("POST", WFT_API, template("node-retry", [
        {"name": "main", "retryStrategy": {"limit": 2, "retryPolicy": "Always"},
         "container": container('if [ "{{retries}}" = 0 ]; then sleep 300; fi; echo attempt {{retries}}')},
    ]))  # fmt: skip
    argo(plane, "submit", "--from", "workflowtemplate/node-retry", "--name", "node-retry")
    deadline = time.monotonic() + 180
    while True:
        pods = plane.get(f"{PODS}?labelSelector=workflows.argoproj.io/workflow=node-retry")["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        nodes = plane.get(f"{WF_API}/node-retry").get("status", {}).get("nodes", {}).values()
        started = [_time(n["startedAt"]) for n in nodes if n["type"] == "Pod" and n.get("startedAt")]
        # Argo re-creates, under the same attempt, a pod that goes missing within RECENTLY_STARTED_POD_DURATION
        # (10 s by default) of its node's start (v4.0.5 workflow/controller/operator.go, recentlyStarted): the first
        # run of this test deleted it 5 s in and saw it made again, not retried. A reclaim comes later than that.
        if running and started and time.time() - max(started) > ARGO_RECENTLY_STARTED_S + 5:
            break
        assert time.monotonic() < deadline, f"no running pod: {[p['status'] for p in pods]}"
        time.sleep(0.5)
    plane.api("DELETE", f"{PODS}/{running[0]['metadata']['name']}")
    wf = wait_workflow(real_node, "node-retry", 300)
    assert wf["status"]["phase"] == "Succeeded", json.dumps(wf["status"])[:4000]
    attempts = sorted((n for n in wf["status"]["nodes"].values() if n["type"] == "Pod"), key=lambda n: n["startedAt"])
    assert len(attempts) == 2 and attempts[0]["phase"] in ("Failed", "Error"), attempts


# --- artifacts through a real S3 server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_s3(real_node: Node) -> Iterator[tuple[str, str]]:
    """moto's S3 server on the pod bridge's address (pods reach it, nothing else does), made the namespace's
    artifact repository: the shipped `artifact-repositories` ConfigMap with its endpoint, bucket and region pointed
    there, and the executor given the `distillery-s3` Secret's keys as environment (the AWS SDK's credential chain
    under `useSDKCreds`, which IRSA fills on EKS). Yields the endpoint and the shipped bucket."""
    plane, gateway = real_node.plane, real_node.net.gateway
    with running_moto(gateway, real_node.workdir / "moto.log", 60) as endpoint:
        keys = {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint}
        secret = [f"--from-literal={k}={v}" for k, v in keys.items()]
        plane.kubectl("create", "secret", "generic", "distillery-s3", *secret)
        repos = plane.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/artifact-repositories")
        for name, text in repos["data"].items():
            repo = yaml.safe_load(text)
            bucket = repo["s3"]["bucket"]
            repo["s3"].update({"endpoint": endpoint.removeprefix("http://"), "insecure": True,
                               "region": AWS_ENV["AWS_DEFAULT_REGION"]})  # fmt: skip
            repos["data"][name] = yaml.safe_dump(repo)
        make_bucket(endpoint, bucket)
        plane.api("PUT", f"/api/v1/namespaces/{NAMESPACE}/configmaps/artifact-repositories", repos)
        path = f"/api/v1/namespaces/{ARGO_NAMESPACE}/configmaps/workflow-controller-configmap"
        config = plane.get(path)
        executor = yaml.safe_load(config["data"]["executor"])
        executor["env"] = [
            {"name": k, "valueFrom": {"secretKeyRef": {"name": "distillery-s3", "key": k}}} for k in keys
        ]
        config["data"]["executor"] = yaml.safe_dump(executor)
        plane.api("PUT", path, config)
        yield endpoint, bucket


def test_an_output_artifact_goes_through_s3_to_the_next_step(real_node: Node, node_s3: tuple[str, str]):
    """`wait` tars the step's output folder and uploads it to the S3 server under the repository's keyFormat; the next
    step's `init` downloads and unpacks it, and its command reads the file."""
    plane = real_node.plane
    time.sleep(3)  # the controller reloads its ConfigMap on a watch event
    plane.api("POST", WFT_API, template("node-artifacts", [
        {"name": "main", "steps": [
            [{"name": "produce", "template": "produce"}],
            [{"name": "consume", "template": "consume",
              "arguments": {"artifacts": [{"name": "data", "from": "{{steps.produce.outputs.artifacts.data}}"}]}}],
        ]},
        {"name": "produce", "container": container("mkdir -p /tmp/out && echo payload-$(id -u) > /tmp/out/file.txt"),
         "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out"}]}},
        {"name": "consume", "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in"}]},
         "container": container("grep -x payload-1000 /tmp/in/file.txt")},
    ]))  # fmt: skip
    argo(plane, "submit", "--from", "workflowtemplate/node-artifacts", "--name", "node-artifacts")
    wf = wait_workflow(real_node, "node-artifacts", 300)
    assert wf["status"]["phase"] == "Succeeded", json.dumps(wf["status"])[:4000]
    endpoint, bucket = node_s3
    keys = [o["Key"] for o in s3_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any(k.endswith("/data.tgz") and "node-artifacts" in k for k in keys), keys


# --- a shipped step in its own image --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset_git(real_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """This repository (a bare clone) served by `git daemon` on the pod bridge's address: the dataset repo the
    committed splits are read from, reachable from the pods and nowhere else. Yields its git:// URL and HEAD's
    commit."""
    folder = tmp_path_factory.mktemp("dataset-git")
    subprocess.run(["git", "clone", "--quiet", "--bare", str(ROOT), str(folder / "distillery.git")], check=True,
                   timeout=120)  # fmt: skip
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    with git_daemon(real_node, folder, "distillery.git") as url:
        yield url, commit


@contextlib.contextmanager
def git_daemon(node: Node, folder: Path, repo: str, push: bool = False) -> Iterator[str]:
    """`git daemon` serving the bare repository `folder/repo` on the pod bridge's address (with `push`, taking pushes:
    the dataset repository build-dataset publishes to); yields its git:// URL once it answers."""
    gateway, port = node.net.gateway, free_port()
    log = folder / "git-daemon.log"
    with log.open("w") as f:
        proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
                                 *(["--enable=receive-pack"] if push else []),
                                 f"--base-path={folder}", f"--listen={gateway}", f"--port={port}", str(folder)],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        url = f"git://{gateway}:{port}/{repo}"
        while subprocess.run(["git", "ls-remote", url, "HEAD"], capture_output=True, timeout=10).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield url
    finally:
        stop(proc)


def step_image(node: Node, kind: str) -> StepImage:
    found = [i for i in node.step_images if i.kind == kind]
    if not found:
        pytest.fail(f"the {kind} step image is not built for the current inputs: run scripts/images.sh {kind} "
                    f"(it lands in {IMAGE_CACHE}; tests/node.py step_images)", pytrace=False)  # fmt: skip
    return found[0]


def test_the_shipped_fetch_dataset_step_runs_in_the_cpu_image(
    real_node: Node, node_s3: tuple[str, str], dataset_git: tuple[str, str], tmp_path: Path
):
    """The shipped `distill` WorkflowTemplate, rendered with the cpu image scripts/images.sh built (pinned by its
    digest, as `DISTILLERY_IMAGE_DIGEST_CPU` renders it), run from its `fetch-dataset` entry: the step's real command
    in its own image (uid 1000, read-only root, the template's volumes and limits) clones the dataset repo over the
    pod network; `argoexec` reads its output parameters from the files the template names and uploads its output
    folder and its log to S3. Both equal a local run of the same step on the same repo and commit."""
    from steps import fetch_dataset
    from workflows import distill
    from workflows.images import Images, image_name

    plane = real_node.plane
    cpu = step_image(real_node, "cpu")
    repo, tag = cpu.name.rsplit(":", 1)
    registry = repo.removesuffix("/distillery-cpu")
    assert image_name(registry, "cpu") == repo, cpu.name
    rendered = distill.build(Images(registry, tag, {"cpu": cpu.digest})).to_dict()
    plane.kubectl("replace", "-f", "-", input=yaml.safe_dump(rendered))
    url, commit = dataset_git

    began = time.monotonic()
    local = fetch_dataset.run(fetch_dataset.FetchConfig(out=tmp_path / "local", dataset_repo=url, dataset_rev=commit))
    local_s = time.monotonic() - began

    began = time.monotonic()
    argo(plane, "submit", "--from", "workflowtemplate/distill", "--name", "node-fetch", "--entrypoint",
         "fetch-dataset", "-p", f"dataset-repo={url}", "-p", f"dataset-rev={commit}")  # fmt: skip
    wf = wait_workflow(real_node, "node-fetch", 600)
    took = time.monotonic() - began
    assert wf["status"]["phase"] == "Succeeded", json.dumps(wf["status"])[:4000]
    (step,) = [n for n in wf["status"]["nodes"].values() if n["type"] == "Pod"]
    params = {p["name"]: p["value"] for p in step["outputs"]["parameters"]}
    assert params == {"dataset-commit": commit, "dataset-hash": local.dataset_hash}, params
    assert local.dataset_commit == commit

    endpoint, bucket = node_s3
    s3 = s3_client(endpoint)
    artifacts = {a["name"]: a for a in step["outputs"]["artifacts"]}
    prefix = artifacts["dataset"]["s3"]["key"]
    assert prefix == f"runs/{wf['metadata']['uid']}/dataset", prefix
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
    uploaded = {o["Key"].removeprefix(prefix + "/") for o in listed}
    produced = {str(f.relative_to(tmp_path / "local")) for f in (tmp_path / "local").rglob("*") if f.is_file()}
    assert uploaded == produced, (uploaded, produced)
    for name in ("train.jsonl", "eval.jsonl", "adversarial.jsonl", "lineage.json"):
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
        assert body == (tmp_path / "local" / name).read_bytes(), name
    # archiveLogs: the wait container uploads the step's log too.
    log = s3.get_object(Bucket=bucket, Key=artifacts["main-logs"]["s3"]["key"])["Body"].read().decode()
    assert f"dataset {commit[:12]} sha256 {local.dataset_hash[:12]}" in log, log[-2000:]
    pod_s = _time(step["finishedAt"]) - _time(step["startedAt"])
    print(f"fetch-dataset on the node: workflow {took:.1f} s (its pod node {pod_s:.0f} s), local run {local_s:.1f} s")


# --- the whole pipeline on the node ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub_mirror(real_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubMirror]:
    """The base (the embedded run's SmolLM2-135M-Instruct, scripts/setup.sh) served as the hub repository the cluster's
    `base-model` names, by olah on the pod bridge's address: the pods reach it through HF_ENDPOINT, which the
    `distillery-settings` ConfigMap sets as a cluster without huggingface.co would."""
    from steps.core.defaults import SHARED

    model = ROOT / SHARED.base_model
    assert (model / "config.json").is_file(), f"{model}: run scripts/setup.sh (it prepares the embedded run's base)"
    repo_id = next(p.cluster for p in PARAMS if p.name == "base-model")
    mirror = start_hub_mirror(model, str(repo_id), real_node.net.gateway, free_port(),
                              tmp_path_factory.mktemp("hub"))  # fmt: skip
    try:
        wait_http(f"{mirror.endpoint}/api/models/{repo_id}/revision/{mirror.revision}", mirror.proc, 60, mirror.log)
        ((_, key),) = security.SETTINGS["model-hub"]
        real_node.plane.kubectl("create", "configmap", security.SETTINGS_CONFIGMAP,
                                f"--from-literal={key}={mirror.endpoint}")  # fmt: skip
        yield mirror
    finally:
        mirror.stop()


@pytest.fixture(scope="module")
def node_mlflow(real_node: Node, node_s3: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server` on the pod bridge's address, its artifacts proxied to a bucket of the node's S3 server: the
    tracking URI the pods get as `tracking-uri`."""
    with running_mlflow(real_node.net.gateway, tmp_path_factory.mktemp("mlflow"), node_s3[0], 120) as url:
        yield url


# The embedded run's epochs and batch (params.yaml) instead of the cluster's 3 x 16, documents cut at 256 tokens: the
# node's 2 CPUs train SmolLM2-135M at 20-40 tokens/s, so the cluster's defaults would train for about an hour.
SMALL_RUN = ("-p", "epochs=1", "-p", "batch-size=8", "-p", "max-seq-len=256")


def failed_logs(plane: ControlPlane, workflow: str, chars: int = 3000) -> dict[str, str]:
    """The end of each failed pod's step log (its `main` container, read from the kubelet through the API server,
    the emissary's own lines left out)."""
    pods = plane.get(f"{PODS}?labelSelector=workflows.argoproj.io/workflow={workflow}")["items"]
    logs = {}
    for p in pods:
        if p["status"].get("phase") == "Failed":
            name = p["metadata"]["name"]
            done = plane.kubectl("logs", name, "-c", "main", check=False)
            step = [line for line in (done.stdout + done.stderr).splitlines() if "argo=true" not in line]
            logs[name] = "\n".join(step)[-chars:]  # the step's own lines, not the emissary's
    return logs


STEP_POD_POLICY = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/distillery-step-pods"


def allow_images(plane: ControlPlane, images: Images) -> None:
    """What infra/admission/step-pods.yaml asks of a cluster whose images are not the rendered defaults: its project
    image lists as the render fills them for the images built here (`workflows.render.admission_images`: exactly the
    pinned references), and, as for a mirrored argoexec (`--argoexec-image`), `executorImages` the executor built
    here, exactly. Without it the policy refused evaluate's gather on the node (its first run there)."""
    from workflows.render import admission_images

    policy = plane.get(STEP_POD_POLICY)
    lists = admission_images(images, argoexec_image_name())
    for v in policy["spec"]["variables"]:
        if v["name"] in lists:
            v["expression"] = json.dumps(lists[v["name"]])
    plane.api("PUT", STEP_POD_POLICY, policy)


def verdict_keys(plane: ControlPlane, folder: Path) -> None:
    """The gate's key pair and the shards' made and stored as docs/security.md says (steps/core/verdict.py
    `Signer.make_keys`)."""
    kubectl = f"{console_script('kubectl')} --kubeconfig {plane.kubeconfig}"
    for signer in verdict.SIGNERS:
        where = folder / signer.private_secret
        where.mkdir(parents=True)
        subprocess.run(["bash", "-c", signer.make_keys.replace("kubectl", kubectl)], cwd=where, check=True,
                       capture_output=True, timeout=60)  # fmt: skip


def install_template(node: Node, build: Any, edits: tuple[Any, ...] = ()) -> None:
    """A shipped WorkflowTemplate (`build`: its module's build function) rendered with the step images built here,
    pinned by digest, `edits` applied, stored in the cluster; the admission policy's image lists filled for those
    images as the render fills them (`allow_images`)."""
    repo, tag = step_image(node, "cpu").name.rsplit(":", 1)
    digests = {i.kind: i.digest for i in node.step_images if i.name.rsplit(":", 1)[1] == tag}
    images = Images(repo.removesuffix("/distillery-cpu"), tag, digests)
    rendered = build(images).to_dict()
    for edit in edits:
        edit(rendered)
    node.plane.kubectl("replace", "-f", "-", input=yaml.safe_dump(rendered))
    allow_images(node.plane, images)


def submit_distill(
    node: Node, name: str, dataset_git: tuple[str, str], hub: HubMirror, mlflow_url: str, keys: Path, *params: str
) -> tuple[dict, list[tuple[str, str, int]], float]:
    """The shipped `distill`, rendered with the step images built here (pinned by digest), submitted as a user would
    (`argo submit --from workflowtemplate/distill`) with `params` on top of the node's: the dataset from the git
    daemon, the base from the hub mirror, MLflow on the bridge, every CPU step asking for the node's CPUs. Returns the
    finished Workflow, its pods (template, phase, seconds) and its wall time; prints Argo's reason and the step log of
    every pod that failed."""
    from workflows import distill

    plane = node.plane
    install_template(node, distill.build, RENDER_EDITS.get(name, ()))
    if not keys.exists():
        verdict_keys(plane, keys)
    url, commit = dataset_git
    threads = str(len(os.sched_getaffinity(0)))  # the node's CPUs: every CPU step's pod asks for all of them
    began = time.monotonic()
    argo(plane, "submit", "--from", "workflowtemplate/distill", "--name", name,
         "-p", f"dataset-repo={url}", "-p", f"dataset-rev={commit}", "-p", f"base-revision={hub.revision}",
         "-p", f"threads={threads}", "-p", f"tracking-uri={mlflow_url}",
         "-p", "evaluate-shards=2", "-p", "evaluate-parallelism=1", *SMALL_RUN, *params)  # fmt: skip
    wf, steps = finished(node, name, 3000, began)
    return wf, steps, time.monotonic() - began


def finished(node: Node, name: str, timeout: float, began: float) -> tuple[dict, list[tuple[str, str, int]]]:
    """Workflow `name` once it ends, and its pods (template, phase, seconds), printed with the wall time since
    `began`; for a workflow that did not succeed, Argo's reason for each pod that failed or never ran and the end of
    each failed pod's step log."""
    wf = wait_workflow(node, name, timeout)
    steps = sorted(((n["templateName"], n["phase"], round(_time(n["finishedAt"]) - _time(n["startedAt"])))
                    for n in wf["status"]["nodes"].values() if n["type"] == "Pod"), key=lambda s: s[0])  # fmt: skip
    print(f"{name} on the node: {time.monotonic() - began:.0f} s; pods: {steps}")
    if wf["status"]["phase"] != "Succeeded":
        for n in wf["status"]["nodes"].values():
            if n["type"] == "Pod" and n["phase"] in ("Failed", "Error"):
                print(f"--- {n['templateName']} {n['phase']}: {n.get('message')}")
        for pod_name, log in failed_logs(node.plane, name).items():
            print(f"--- {pod_name}\n{log}")
    return wf, steps


# Per workflow name, edits of the rendered distill before it is stored (RAY_ON_ONE_NODE).
RENDER_EDITS: dict[str, tuple[Any, ...]] = {}
# The steps every backend runs in a pod of its own.
COMMON_STEPS = {"check-parameters", "preflight", "fetch-dataset", "convert-gguf", "evaluate-fanout",
                "evaluate-shard-cpu", "evaluate", "register", "propose"}  # fmt: skip


def registered_version(mlflow_url: str, workflow: dict) -> Any:
    """The model version the workflow registered (register's run id is the workflow uid, named in the version's
    description)."""
    from mlflow import MlflowClient

    model = next(p.cluster for p in PARAMS if p.name == "model-name")
    versions = MlflowClient(mlflow_url).search_model_versions(f"name='{model}'")
    mine = [v for v in versions if workflow["metadata"]["uid"] in (v.description or "")]
    assert len(mine) == 1, [v.description for v in versions]
    return mine[0]


def registered_decision(mlflow_url: str, workflow: dict) -> str:
    """The gate's decision tag on the model version the workflow registered."""
    tags = registered_version(mlflow_url, workflow).tags
    assert tags[verdict.DECISION_TAG] in (verdict.PASS, verdict.FAIL), tags
    return tags[verdict.DECISION_TAG]


@pytest.fixture(scope="module")
def cpu_distill(
    real_node: Node,
    node_s3: tuple[str, str],
    dataset_git: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict:
    """`train-backend=cpu` run once on the node, uninterrupted: its own test checks it, the reclaim test compares its
    adapter with the resumed one's."""
    keys = tmp_path_factory.getbasetemp() / "verdict-keys"
    wf, steps, _ = submit_distill(real_node, "node-distill", dataset_git, hub_mirror, node_mlflow, keys,
                                  "-p", "train-backend=cpu")  # fmt: skip
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), steps)
    return wf


def test_distill_on_the_cpu_backend_succeeds_with_every_step_in_its_image(cpu_distill: dict, node_mlflow: str):
    """`train-backend=cpu`: every step in its own pod on the real kubelet, outputs passed by Argo's executor through
    S3, the base downloaded from the hub mirror, the dataset cloned over the pod network, MLflow on the bridge. It
    Succeeds; the candidate is registered with the gate's signed decision."""
    ran = {n["templateName"] for n in cpu_distill["status"]["nodes"].values() if n["type"] == "Pod"}
    assert ran >= COMMON_STEPS | {"train-cpu"}, ran
    print(f"registered: {verdict.DECISION_TAG}={registered_decision(node_mlflow, cpu_distill)}")


def test_the_node_trains_the_adapter_a_local_run_trains_on_the_same_data(
    cpu_distill: dict, node_s3: tuple[str, str], hub_mirror: HubMirror, tmp_path_factory: pytest.TempPathFactory
):
    """The node's train-cpu against `python -m steps.train` run here on the same inputs: the dataset folder
    fetch-dataset uploaded, the base from the same hub mirror at the same revision, and the arguments of the template
    as the workflow stored it with the parameters the node's step was given (its checkpoints kept in a local folder
    instead of the run's S3 prefix). The adapters agree within the Ray-equivalence test's 1e-4
    (tests/test_train.py): the image, the executor and the pod change nothing the training computes."""
    endpoint, bucket = node_s3
    work = tmp_path_factory.mktemp("node-vs-local")
    (train,) = step_pods(cpu_distill, "train-cpu")
    (fetch,) = step_pods(cpu_distill, "fetch-dataset")
    dataset = fetch_output(endpoint, bucket, fetch, "dataset", work / "dataset")
    node_adapter = fetch_output(endpoint, bucket, train, "adapter", work / "node")
    given = {p["name"]: p["value"] for p in train["inputs"]["parameters"]}
    spec = cpu_distill["status"]["storedWorkflowTemplateSpec"]
    (template,) = [t for t in spec["templates"] if t["name"] == "train-cpu"]
    uid = cpu_distill["metadata"]["uid"]
    args = [re.sub(r"\{\{inputs\.parameters\.([a-z-]+)\}\}", lambda m: given[m[1]], a).replace("{{workflow.uid}}", uid)
            for a in template["container"]["args"]]  # fmt: skip
    local = work / "local"
    flags = dict(zip(args[2::2], args[3::2], strict=True))  # -m steps.train, then --flag value pairs
    flags.update({"--out": str(local), "--dataset": str(dataset), "--kd-targets": str(work / "no-kd-targets"),
                  "--checkpoint-dir": str(work / "checkpoints")})  # fmt: skip
    # The pod's environment in what decides the numbers: the hub, and no precision override (auto decides by the CPU).
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "DISTILLERY_AUTO_PRECISION")}
    env.update(HF_ENDPOINT=hub_mirror.endpoint, HF_HOME=str(work / "hf"))
    began = time.monotonic()
    done = subprocess.run([sys.executable, *args[:2], *(x for kv in flags.items() for x in kv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"local train: {time.monotonic() - began:.0f} s: {done.stdout.strip().splitlines()[-1]}")
    for where, folder in (("node", node_adapter), ("local", local)):
        r = json.loads((folder / "result.json").read_text())
        print(f"{where}: {r['device']}, {r['precision']}, final loss {r['final_loss']}")
    print(f"adapter: node vs local, max |difference| {assert_same_adapter(node_adapter, local, atol=1e-4):.2e}")


def step_pods(wf: dict, template: str) -> list[dict]:
    """The workflow's pod nodes of `template`, oldest first (a retried step has one per attempt)."""
    pods = [n for n in wf["status"]["nodes"].values() if n["type"] == "Pod" and n["templateName"] == template]
    return sorted(pods, key=lambda n: n["startedAt"])


def fetch_output(endpoint: str, bucket: str, pod: dict, name: str, into: Path) -> Path:
    """Output artifact `name` of a finished pod node, fetched from the node's S3 as Argo's `wait` stored it — an
    unarchived folder (one object per file under its key), a .tgz (unpacked) or one object — and returned as the
    folder or file it was in the pod, under `into`."""
    import tarfile

    (art,) = [a for a in pod["outputs"]["artifacts"] if a["name"] == name]
    key = art["s3"]["key"]
    s3 = s3_client(endpoint)
    into.mkdir(parents=True, exist_ok=True)
    local = into / Path(key).name
    files = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{key}/").get("Contents", [])]
    for k in files:
        dest = local / k.removeprefix(f"{key}/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, k, str(dest))
    if files:
        return local
    s3.download_file(bucket, key, str(local))
    if key.endswith(".tgz"):
        with tarfile.open(local) as tar:
            tar.extractall(into, filter="data")
        local.unlink()
        (only,) = list(into.iterdir())
        return only
    return local


RECLAIM_RUN = "node-distill-reclaim"
RECLAIM_EVERY = 3  # checkpoint-every: 96 rows at batch 8 = 12 steps, sealed checkpoints at 3, 6, 9


def test_a_reclaimed_training_pod_resumes_from_its_s3_checkpoint(
    real_node: Node,
    node_s3: tuple[str, str],
    dataset_git: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    cpu_distill: dict,
    tmp_path_factory: pytest.TempPathFactory,
):
    """The spot reclaim, on the cpu backend: once train-cpu has sealed a checkpoint in S3 its pod is deleted with no
    grace (`kubectl delete --force --grace-period=0`, as when its node is gone); Argo runs the step again, the new pod
    finds the run's checkpoints under `runs/<uid>/checkpoints/` and resumes there, the workflow Succeeds, and the
    adapter equals the uninterrupted run's (`cpu_distill`) within the local resume test's 1e-6.

    How Argo v4.0.5 runs it again, seen on the node: the controller marks the node Error ("pod deleted") and then
    creates the pod again under the same node and pod name (`train-cpu(0)`), which ends Succeeded: no second attempt
    node. So the test reads the re-run from the step's own log (archived to S3 by the executor), not from the
    attempts' count."""
    plane = real_node.plane
    endpoint, bucket = node_s3
    s3 = s3_client(endpoint)
    reclaimed: dict[str, Any] = {}
    errors: list[str] = []  # the watcher's last failure, for the message when nothing was reclaimed
    done = threading.Event()

    def reclaim() -> None:  # bounded: the workflow's own wait below ends the test first
        deadline = time.monotonic() + 2400
        while not done.wait(1) and time.monotonic() < deadline:
            try:
                uid = plane.get(f"{WF_API}/{RECLAIM_RUN}")["metadata"]["uid"]
                listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{uid}/checkpoints/").get("Contents", [])
                sealed = sorted(o["Key"] for o in listed if o["Key"].endswith("/COMPLETE.json"))
                pods = plane.get(f"{PODS}?labelSelector=workflows.argoproj.io/workflow={RECLAIM_RUN}")["items"]
                running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
                training = [name for name in running if "train-cpu" in name]
                if sealed and training:
                    plane.kubectl("delete", "pod", training[0], "--force", "--grace-period=0")
                    reclaimed.update(pod=training[0], sealed=sealed, at=time.monotonic())
                    return
            except Exception as e:  # the workflow not created yet, an API or S3 hiccup: try again next second
                errors[:] = [repr(e)]

    killer = threading.Thread(target=reclaim, daemon=True)
    killer.start()
    keys = tmp_path_factory.getbasetemp() / "verdict-keys"
    try:
        wf, steps, _ = submit_distill(real_node, RECLAIM_RUN, dataset_git, hub_mirror, node_mlflow, keys,
                                      "-p", "train-backend=cpu", "-p", f"checkpoint-every={RECLAIM_EVERY}")  # fmt: skip
    finally:
        done.set()
        killer.join(10)
    print(f"reclaimed: {reclaimed}")
    assert reclaimed, f"train-cpu never sealed a checkpoint while its pod ran: nothing was reclaimed ({errors})"
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), steps)
    attempts = step_pods(wf, "train-cpu")
    print(f"train-cpu attempts: {[(a['name'], a['phase'], a.get('message')) for a in attempts]}")
    assert attempts[-1]["phase"] == "Succeeded", attempts
    marks = ('msg="marking node as error"', 'error="pod deleted"', f"nodeName={RECLAIM_RUN}.train-cpu")
    controller = plane.log_tail("workflow-controller", 10**8).splitlines()  # its fields come in any order
    assert any(all(m in line for m in marks) for line in controller), "the controller never saw train-cpu's pod go"
    work = tmp_path_factory.mktemp("reclaim")
    log = fetch_output(endpoint, bucket, attempts[-1], "main-logs", work / "log").read_text()
    first = min(int(k.rsplit("/", 2)[-2].removeprefix("step-")) for k in reclaimed["sealed"])
    resumed = re.search(r"resuming at step (\d+)/(\d+)", log)
    assert resumed and int(resumed[1]) >= first, log[-3000:]
    print(f"resumed at step {resumed[1]}/{resumed[2]} (first sealed: {first})")
    (whole,) = step_pods(cpu_distill, "train-cpu")
    assert_same_adapter(fetch_output(endpoint, bucket, attempts[-1], "adapter", work / "resumed"),
                        fetch_output(endpoint, bucket, whole, "adapter", work / "whole"), atol=1e-6)  # fmt: skip


def _ray_requests_fit_one_node(rendered: dict) -> None:
    """The node has 2 CPUs and one machine's memory; the rendered RayJob asks a head of 2 CPUs and 8 GiB and two
    small-group workers of 2 CPUs each (requests = limits). Only the pods' *requests* are scaled down (250m CPU, 1 GiB)
    so all three schedule on the one node: limits, Ray's num-cpus, threads, images and everything else as rendered."""
    (train,) = [t for t in rendered["spec"]["templates"] if t["name"] == "train-ray"]
    lines, out, in_requests = train["resource"]["manifest"].splitlines(), [], False
    for line in lines:
        key = line.strip().split(":", 1)[0]
        if key == "requests":
            in_requests = True
        elif in_requests and key in ("cpu", "memory"):
            line = line.split(":", 1)[0] + (": 250m" if key == "cpu" else ": 1Gi")
        elif in_requests and key != "ephemeral-storage":
            in_requests = False
        out.append(line)
    assert sum(" 250m" in line for line in out) >= 3, "no request scaled: the RayJob's layout changed"
    train["resource"]["manifest"] = "\n".join(out) + "\n"


def _ray_auth_off_for_kuberay_1_5(rendered: dict) -> None:
    """The node's operator is KubeRay v1.5.0 (the newest the module proxy serves), which predates `authOptions`: it
    makes no token, so the head, told RAY_AUTH_MODE=token by the template (fail closed), refuses to start ("Token
    authentication is enabled but no authentication token was found": the first run here), and its HTTP submitter
    could not send one either. This run turns the token off in the RayJob's pods alone, to exercise Ray across pods;
    the token between operator, dashboard and workers needs KubeRay >= 1.6 and is not exercised here."""
    (train,) = [t for t in rendered["spec"]["templates"] if t["name"] == "train-ray"]
    manifest, turned = re.subn(r"(- name: RAY_AUTH_MODE\n\s*value: )token\b", r"\1disabled",
                               train["resource"]["manifest"])  # fmt: skip
    assert turned >= 2, "no RAY_AUTH_MODE turned off in the head and workers: the RayJob's layout changed"
    train["resource"]["manifest"] = manifest


RAY_RUN = "node-distill-ray"
RENDER_EDITS[RAY_RUN] = (_ray_requests_fit_one_node, _ray_auth_off_for_kuberay_1_5)


class RayPods:
    """The RayJob's pods as seen every 2 s while the run lasts (they exist only while the job runs: the cluster is
    deleted when it ends): name -> type, pod address, the phases seen in order."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane, self.seen, self._stop = plane, {}, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(2):
            with contextlib.suppress(Exception):  # an API hiccup: the next look
                for p in self.plane.get(f"{PODS}?labelSelector=ray.io/node-type")["items"]:
                    was = self.seen.get(p["metadata"]["name"], {"phases": [], "ip": ""})
                    phase = p["status"].get("phase")
                    self.seen[p["metadata"]["name"]] = {
                        "type": p["metadata"]["labels"]["ray.io/node-type"],
                        "ip": p["status"].get("podIP") or was["ip"],
                        "phases": was["phases"] if was["phases"][-1:] == [phase] else [*was["phases"], phase],
                        "node": p["spec"].get("nodeName"),
                    }

    def __enter__(self) -> RayPods:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        print(f"Ray pods seen: {json.dumps(self.seen)}")

    def of(self, kind: str) -> list[dict]:
        return [p for p in self.seen.values() if p["type"] == kind]


@contextlib.contextmanager
def acting_while_it_runs(act: Callable[[], bool]) -> Iterator[list[str]]:
    """Calls `act` every 2 s in a thread while the block runs, until it returns True (it did what it waits to do);
    bounded (40 min) and by the block's end (the workflow's own wait ends a test first). Yields the last error `act`
    raised (the workflow not created yet, an API or S3 hiccup: the next look), for the test's message."""
    errors: list[str] = []
    done = threading.Event()

    def loop() -> None:
        deadline = time.monotonic() + 2400
        while not done.wait(2) and time.monotonic() < deadline:
            try:
                if act():
                    return
            except Exception as e:
                errors[:] = [repr(e)]

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        done.set()
        thread.join(10)


RAY_WORKERS = ("-p", "train-backend=ray", "-p", "ray-large-workers=0", "-p", "ray-medium-workers=0",
               "-p", "ray-small-workers=2")  # fmt: skip


def ray_result(node_s3: tuple[str, str], wf: dict) -> dict:
    """The adapter's result.json as train-ray's driver wrote it to the run's prefix."""
    endpoint, bucket = node_s3
    result = s3_client(endpoint).get_object(Bucket=bucket, Key=f"runs/{wf['metadata']['uid']}/adapter/result.json")
    return json.loads(result["Body"].read())


def test_distill_on_the_ray_backend_trains_across_two_worker_pods(
    real_node: Node,
    node_s3: tuple[str, str],
    dataset_git: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    tmp_path_factory: pytest.TempPathFactory,
):
    """`train-backend=ray` with two small-group workers: Argo's resource step creates the RayJob, KubeRay's operator
    starts a head and two worker pods from the ray image, the workers find the head through its Service's DNS name
    (CoreDNS), Ray Train runs two data-parallel workers, one per pod (Gloo between them), the driver on the head; the
    cluster goes when the job ends, and the rest of the pipeline runs as on the cpu backend."""
    plane = real_node.plane
    step_image(real_node, "ray")
    keys = tmp_path_factory.getbasetemp() / "verdict-keys"
    with RayPods(plane) as pods:
        wf, steps, _ = submit_distill(real_node, RAY_RUN, dataset_git, hub_mirror, node_mlflow, keys, *RAY_WORKERS)
    job = plane.get(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs")["items"]
    print(f"RayJob status: {json.dumps([j.get('status') for j in job])[:2000]}")
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), steps)
    ran = {name for name, _, _ in steps}
    assert ran >= COMMON_STEPS and "train-cpu" not in ran, ran
    workers, heads = pods.of("worker"), pods.of("head")
    assert len(heads) == 1 and len(workers) == 2, pods.seen
    # Each pod Running while the job ran; a worker is seen Failed after it when the operator deletes the cluster.
    assert len({p["ip"] for p in workers + heads}) == 3 and all("Running" in p["phases"] for p in workers), pods.seen
    device = ray_result(node_s3, wf)["device"]
    print(f"trained on: {device}")
    assert "2 CPU workers" in device, device  # Ray Train's two workers, one in each worker pod
    print(f"registered: {verdict.DECISION_TAG}={registered_decision(node_mlflow, wf)}")


RAY_KILL_RUN = "node-distill-ray-kill"
RENDER_EDITS[RAY_KILL_RUN] = RENDER_EDITS[RAY_RUN]


def test_a_killed_ray_worker_pod_is_replaced_and_training_resumes_from_its_checkpoint(
    real_node: Node,
    node_s3: tuple[str, str],
    dataset_git: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    tmp_path_factory: pytest.TempPathFactory,
):
    """A Ray worker lost while it trains (a spot worker reclaimed, a Pi unplugged): once Ray Train has registered a
    checkpoint in S3 (the run's prefix) one worker pod is deleted with no grace. What the templates promise
    (workflows/rayjob.py): KubeRay's operator makes the worker pod again, Ray Train restarts its worker group from
    the latest checkpoint (`--max-failures`, rayjob.MAX_FAILURES restarts), the RayJob SUCCEEDS and the workflow with
    it; the adapter's result.json says it resumed."""
    plane = real_node.plane
    endpoint, bucket = node_s3
    s3 = s3_client(endpoint)
    step_image(real_node, "ray")
    keys = tmp_path_factory.getbasetemp() / "verdict-keys"
    killed: dict[str, Any] = {}
    # Ray Train registers a checkpoint after every rank's files are in; one is surely registered once the next one's
    # files appear (checkpoint-every=RECLAIM_EVERY: step-00000003, then step-00000006).
    second = f"/{CHECKPOINT_PREFIX}{2 * RECLAIM_EVERY:08d}/"

    def kill() -> bool:
        uid = plane.get(f"{WF_API}/{RAY_KILL_RUN}")["metadata"]["uid"]
        # Ray Train's storage path is the run's `ray/` prefix (train-ray's --checkpoint-dir), not train-cpu's
        # `checkpoints/`: the first run of this test watched the wrong prefix and never killed.
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{uid}/ray/").get("Contents", [])
        workers = [p["metadata"]["name"] for p in plane.get(f"{PODS}?labelSelector=ray.io/node-type=worker")["items"]
                   if p["status"].get("phase") == "Running"]  # fmt: skip
        if not (any(second in o["Key"] for o in listed) and len(workers) == 2):
            return False
        plane.kubectl("delete", "pod", workers[0], "--force", "--grace-period=0")
        killed.update(pod=workers[0], at=time.monotonic())
        return True

    with acting_while_it_runs(kill) as errors, RayPods(plane) as pods:
        wf, steps, _ = submit_distill(real_node, RAY_KILL_RUN, dataset_git, hub_mirror, node_mlflow, keys,
                                      *RAY_WORKERS, "-p", f"checkpoint-every={RECLAIM_EVERY}")  # fmt: skip
    print(f"killed: {killed}")
    assert killed, f"no registered checkpoint while both workers ran: nothing was killed ({errors})"
    job = plane.get(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs")["items"]
    print(f"RayJob status: {json.dumps([j.get('status') for j in job])[:2000]}")
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), steps)
    workers = pods.of("worker")
    assert len(workers) == 3 and sum("Running" in p["phases"] for p in workers) == 3, pods.seen  # one made again
    result = ray_result(node_s3, wf)
    print(f"trained on: {result['device']}; resumed from step {result['resumed_from_step']}")
    assert "2 CPU workers" in result["device"] and result["resumed_from_step"] >= RECLAIM_EVERY, result


RAY_STOP_RUN = "node-distill-ray-stop"


def rayjob_name(uid: str) -> str:
    """The RayJob a workflow with this uid creates (and its exit handler deletes)."""
    return rayjob.NAME.replace("{{workflow.uid}}", uid)


RENDER_EDITS[RAY_STOP_RUN] = RENDER_EDITS[RAY_RUN]


def test_a_stopped_ray_job_fails_the_workflow_and_its_exit_handler_frees_the_pool(
    real_node: Node,
    dataset_git: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    tmp_path_factory: pytest.TempPathFactory,
):
    """A Ray job stopped while it trains (`ray job stop` on the head, what an operator does to a runaway job): what the
    templates promise (workflows/rayjob.py FAILURE_CONDITION, workflows/distill.py's exit handler) on KubeRay's real
    operator: the RayJob ends jobStatus STOPPED, train-ray fails on its failure condition (the success condition alone
    would never end it), the workflow Fails without training again (backoffLimit 0), the exit handler's delete-rayjob
    runs and the RayJob, its RayCluster and every Ray pod are gone."""
    plane = real_node.plane
    step_image(real_node, "ray")
    keys = tmp_path_factory.getbasetemp() / "verdict-keys"
    rayjobs = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
    stopped: dict[str, Any] = {}

    def stop() -> bool:
        uid = plane.get(f"{WF_API}/{RAY_STOP_RUN}")["metadata"]["uid"]
        status = plane.get(f"{rayjobs}/{rayjob_name(uid)}").get("status", {})
        heads = [p["metadata"]["name"] for p in plane.get(f"{PODS}?labelSelector=ray.io/node-type=head")["items"]
                 if p["status"].get("phase") == "Running"]  # fmt: skip
        if status.get("jobStatus") != "RUNNING" or len(heads) != 1:
            return False
        stop_job = ("ray", "job", "stop", "--address", "http://127.0.0.1:8265", status["jobId"])
        done = plane.kubectl("exec", "-n", NAMESPACE, heads[0], "-c", "ray-head", "--", *stop_job, timeout=180)
        stopped.update(job=status["jobId"], head=heads[0], out=done.stdout[-500:], at=time.monotonic())
        return True

    with acting_while_it_runs(stop) as errors, RayPods(plane) as pods:
        wf, steps, _ = submit_distill(real_node, RAY_STOP_RUN, dataset_git, hub_mirror, node_mlflow, keys, *RAY_WORKERS)
    print(f"stopped: {stopped}")
    assert stopped, f"the RayJob was never seen RUNNING with its head Running: nothing was stopped ({errors})"
    assert wf["status"]["phase"] == "Failed", (wf["status"].get("message"), steps)
    nodes = {n["templateName"]: n for n in wf["status"]["nodes"].values() if n["type"] == "Pod"}
    assert nodes["train-ray"]["phase"] == "Failed", nodes["train-ray"]
    print(f"train-ray: {nodes['train-ray'].get('message')}")
    assert "convert-gguf" not in nodes, steps  # nothing after training ran
    assert nodes["delete-rayjob"]["phase"] == "Succeeded", nodes.get("delete-rayjob")
    # The RayJob and its cluster go with the exit handler's delete (KubeRay's finalizer), then the pods: bounded wait.
    uid, left = wf["metadata"]["uid"], {}
    for _ in range(60):
        listed = {"rayjobs": rayjobs, "rayclusters": f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters",
                  "pods": f"{PODS}?labelSelector=ray.io/node-type"}  # fmt: skip
        left = {kind: [o["metadata"]["name"] for o in plane.get(path)["items"]] for kind, path in listed.items()}
        if not any(left.values()):
            break
        time.sleep(2)
    print(f"left after the exit handler: {left}; Ray pods seen: {len(pods.seen)}")
    assert rayjob_name(uid) not in left["rayjobs"] and not left["rayclusters"] and not left["pods"], left


OOM_RUN = "node-distill-oom"
# Below what train-cpu needs to load SmolLM2-135M (538 MB of float32 weights) and train; above its imports.
OOM_LIMIT = "512Mi"


def _train_cpu_memory(limit: str) -> Any:
    def edit(rendered: dict) -> None:
        """train-cpu's pod limited to `limit` whatever preflight sized: its podSpecPatch's memory request and limit."""
        (train,) = [t for t in rendered["spec"]["templates"] if t["name"] == "train-cpu"]
        sized = '"memory":"{{=asInt(inputs.parameters[\'memory-gib\'])}}Gi"'
        assert train["podSpecPatch"].count(sized) == 2, "train-cpu's memory no longer comes from memory-gib"
        train["podSpecPatch"] = train["podSpecPatch"].replace(sized, f'"memory":"{limit}"')

    return edit


RENDER_EDITS[OOM_RUN] = (_train_cpu_memory(OOM_LIMIT),)


def test_a_step_over_its_memory_limit_fails_the_workflow_naming_the_step_and_the_limit(
    real_node: Node,
    dataset_git: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    tmp_path_factory: pytest.TempPathFactory,
):
    """train-cpu's pod given less memory than the run needs (micro-batch and checkpointing pinned, so the step does not
    refuse the budget itself but runs into it): the kernel kills it (OOMKilled, 137), the step is not retried (its
    retry is OnError: the same limit would kill it again), the workflow Fails, and `argo get` names the step and the
    limit: Argo appends the container's termination message, which the step wrote as it started (steps/core/pod.py)."""
    keys = tmp_path_factory.getbasetemp() / "verdict-keys"
    wf, steps, _ = submit_distill(real_node, OOM_RUN, dataset_git, hub_mirror, node_mlflow, keys,
                                  "-p", "train-backend=cpu", "-p", "micro-batch=1",
                                  "-p", "gradient-checkpointing=on")  # fmt: skip
    print(f"workflow: {wf['status']['phase']}: {wf['status'].get('message')}")
    assert wf["status"]["phase"] == "Failed", steps
    (train,) = step_pods(wf, "train-cpu")  # one attempt: not retried
    print(f"train-cpu: {train['phase']}: {train.get('message')}")
    limit_gib = int(OOM_LIMIT.removesuffix("Mi")) / 1024
    assert train["phase"] == "Failed" and "OOMKilled (exit code 137)" in train["message"], train
    assert f"train ran with a memory limit of {limit_gib:.2f} GiB" in train["message"], train
    shown = argo(real_node.plane, "get", OOM_RUN).stdout
    print(shown)
    assert re.search(r"train-cpu.*OOMKilled \(exit code 137\): train ran with a memory limit of", shown), shown


BUILD_RUN = "node-build-dataset"
PUBLISHED_RUN = "node-distill-published"


def _teacher_fits_the_node(rendered: dict) -> None:
    """The teacher's pod asks for 4 CPUs (workflows/deploy.py: llama.cpp serving the teacher beside the step); the node
    has 2. Only its CPU request is lowered, to 1: limits, memory and everything else as rendered."""
    (teacher,) = [t for t in rendered["spec"]["templates"] if t["name"] == "teacher"]
    assert teacher["container"]["resources"]["requests"]["cpu"] == "4", teacher["container"]["resources"]
    teacher["container"]["resources"]["requests"]["cpu"] = "1"


@pytest.fixture(scope="module")
def published(
    real_node: Node,
    node_s3: tuple[str, str],
    hub_mirror: HubMirror,
    node_mlflow: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict]:
    """`argo submit --from workflowtemplate/build-dataset` on the node, then `distill` on the tag it published: the
    team's dataset repository (git with DVC, its default remote a prefix of the node's bucket, whose endpoint the
    repository's DVC config names, as for any S3-compatible store) served by `git daemon` on the bridge, taking
    pushes; the committed documents and feedback file in the node's S3. Yields both workflows, publish's outputs, the
    repository's git:// URL and the folder of its bare copy (the retrain cron serves it over https)."""
    from workflows import build_dataset

    plane = real_node.plane
    endpoint, bucket = node_s3
    s3 = s3_client(endpoint)
    work = tmp_path_factory.mktemp("build-dataset")
    seed, served = work / "seed", work / "served"
    seed.mkdir()
    served.mkdir()

    def run(*cmd: str, cwd: Path = seed) -> None:
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, timeout=120)

    run("git", "init", "-q", "-b", "main")
    run(sys.executable, "-m", "dvc", "init", "-q")
    run(sys.executable, "-m", "dvc", "remote", "add", "-d", "store", f"s3://{bucket}/dvc")
    run(sys.executable, "-m", "dvc", "remote", "modify", "store", "endpointurl", endpoint)
    run("git", "add", "-A")
    run("git", "-c", "user.name=team", "-c", "user.email=team@example.invalid", "commit", "-qm", "dataset repository")
    run("git", "clone", "-q", "--bare", str(seed), str(served / "dataset.git"), cwd=work)
    for f in sorted((ROOT / "data" / "documents").iterdir()):
        s3.upload_file(str(f), bucket, f"documents/{f.name}")
    s3.upload_file(str(ROOT / "data" / "feedback" / "feedback.jsonl"), bucket, "feedback/feedback.jsonl")
    with git_daemon(real_node, served, "dataset.git", push=True) as url:
        install_template(real_node, build_dataset.build, (_teacher_fits_the_node,))
        began = time.monotonic()
        argo(plane, "submit", "--from", "workflowtemplate/build-dataset", "--name", BUILD_RUN,
             "-p", f"documents=s3://{bucket}/documents/", "-p", f"feedback=s3://{bucket}/feedback/feedback.jsonl",
             "-p", f"dataset-repo={url}", "-p", f"base-revision={hub_mirror.revision}")  # fmt: skip
        build, pods = finished(real_node, BUILD_RUN, 1800, began)
        assert build["status"]["phase"] == "Succeeded", (build["status"].get("message"), pods)
        (publish,) = step_pods(build, "publish")
        outputs = {p["name"]: p["value"] for p in publish["outputs"]["parameters"]}
        print(f"published: {outputs}")
        keys = tmp_path_factory.getbasetemp() / "verdict-keys"
        distilled, steps, _ = submit_distill(real_node, PUBLISHED_RUN, (url, outputs["dataset-rev"]), hub_mirror,
                                             node_mlflow, keys, "-p", "train-backend=cpu")  # fmt: skip
        assert distilled["status"]["phase"] == "Succeeded", (distilled["status"].get("message"), steps)
        yield {"build": build, "distill": distilled, "published": outputs, "url": url, "served": served}


def test_build_dataset_publishes_a_revision_that_distill_then_trains_on(
    published: dict, node_s3: tuple[str, str], node_mlflow: str
):
    """build-dataset: ingest (the documents from S3, chunked with the base's tokenizer from the hub mirror), feedback
    (the file from S3), the bundled teacher (llama.cpp in the teacher's pod), filter-split, and publish pushing a
    tagged revision to the dataset repository over the pod network with its files in the DVC remote; then distill on
    that tag, whose fetch-dataset pulls the files back through DVC and finds the dataset hash publish recorded."""
    endpoint, bucket = node_s3
    outputs, tag = published["published"], published["published"]["dataset-rev"]
    # An annotated tag: ls-remote lists the tag object, and the commit it points to as `<tag>^{}`.
    listed = subprocess.run(["git", "ls-remote", published["url"], f"refs/tags/{tag}^{{}}"], capture_output=True,
                            text=True, check=True, timeout=30).stdout.split()  # fmt: skip
    assert tag.startswith("dataset-") and listed[:1] == [outputs["dataset-commit"]], (listed, outputs)
    stored = s3_client(endpoint).list_objects_v2(Bucket=bucket, Prefix="dvc/").get("KeyCount", 0)
    assert stored > 0, "publish pushed nothing to the DVC remote"
    (fetch,) = step_pods(published["distill"], "fetch-dataset")
    fetched = {p["name"]: p["value"] for p in fetch["outputs"]["parameters"]}
    assert fetched["dataset-hash"] == outputs["dataset-hash"], (fetched, outputs)
    print(f"distill on {tag}: {stored} objects in the DVC remote; registered "
          f"{verdict.DECISION_TAG}={registered_decision(node_mlflow, published['distill'])}")  # fmt: skip


@contextlib.contextmanager
def https_git(node: Node, folder: Path, repo: str, work: Path) -> Iterator[tuple[str, PrivateCA]]:
    """The bare repositories in `folder` over https on the pod bridge's address, with a certificate for that address
    from a CA made here (tests/tls.py): what check-triggers accepts as a dataset repository (https or a local path: no
    git://), behind a private CA as a homelab's Gitea is. Yields the URL of `repo` and the CA."""
    ca = make_ca(work / "tls", node.net.gateway)
    with tls_git(folder, node.net.gateway, free_port(), ca) as base:
        url = f"{base}/{repo}"
        env = {**os.environ, "GIT_SSL_CAINFO": str(ca.ca)}  # the variable, which outranks git's config
        listed = subprocess.run(["git", "ls-remote", url, "HEAD"], env=env, capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        yield url, ca


RETRAIN_CRON = "distill-retrain-check"
# The shipped schedule fires every six hours; the test's, every minute (Argo's cron scheduler checks each minute).
EVERY_MINUTE = "* * * * *"


def test_the_retrain_cron_fires_on_its_schedule_and_starts_distill(
    real_node: Node, published: dict, node_mlflow: str, tmp_path_factory: pytest.TempPathFactory
):
    """The retrain CronWorkflow as shipped but for its schedule (every minute) and its template's defaults (this
    node's MLflow; the team's dataset repository, the one build-dataset published to, over https): the controller's
    scheduler creates the Workflow by itself, check-triggers runs in its pod against MLflow and the repository, finds
    the champion (the version distilled on the published revision, aliased as a promotion would) trained on another
    base revision than the cron's, fires, and submit-retrain creates the `distill` Workflow with the dataset the check
    resolved. The retrain itself is deleted once created (its run is the distill scenarios')."""
    from mlflow import MlflowClient

    from workflows import retrain

    plane = real_node.plane
    work = tmp_path_factory.mktemp("retrain-cron")
    version = registered_version(node_mlflow, published["distill"])
    MlflowClient(node_mlflow).set_registered_model_alias(version.name, "champion", version.version)
    with https_git(real_node, published["served"], "dataset.git", work) as (url, ca):
        # The team's private CA, as docs/cluster.md has it created (the optional ConfigMap every step pod mounts,
        # steps/core/trust.py): check-triggers verifies the dataset host against it, with TLS verification on.
        plane.kubectl("create", "configmap", trust.CONFIGMAP, f"--from-file={trust.KEY}={ca.ca}")

        def defaults(rendered: dict) -> None:
            for p in rendered["spec"]["arguments"]["parameters"]:
                p["value"] = {"tracking-uri": node_mlflow, "dataset-repo": url}.get(p["name"], p["value"])

        install_template(real_node, retrain.build, (defaults,))
        began = time.monotonic()
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(retrain.build_cron(schedule=EVERY_MINUTE).to_dict()))
        try:
            deadline, fired = time.monotonic() + 240, []
            while not fired and time.monotonic() < deadline:
                fired = plane.get(f"{WF_API}?labelSelector=workflows.argoproj.io/cron-workflow={RETRAIN_CRON}")["items"]
                time.sleep(2)
            assert fired, f"the cron made no Workflow in 240 s: {plane.log_tail('workflow-controller', 3000)}"
            name = fired[0]["metadata"]["name"]
            print(f"the cron fired {time.monotonic() - began:.0f} s after it was created: {name}")
        finally:
            # One run is enough. Suspended, not deleted: the Workflows a CronWorkflow made are its dependents, and
            # deleting it then garbage-collects them (the first version of this test lost its Workflow that way).
            plane.kubectl("patch", "cronworkflow", RETRAIN_CRON, "--type", "merge", "-p", '{"spec":{"suspend":true}}',
                          check=False)  # fmt: skip
        wf, pods = finished(real_node, name, 900, began)
    assert wf["status"]["phase"] == "Succeeded", pods
    (check,) = step_pods(wf, retrain.CHECK)
    decided = {p["name"]: p["value"] for p in check["outputs"]["parameters"]}
    print(f"check-triggers: {decided}")
    assert decided["fire"] == "true" and "base" in decided["triggers"], decided
    # The Workflow submit-retrain created (retrain.retrain_manifest's labels), not the cron's own run.
    children = plane.get(f"{WF_API}?labelSelector=app.kubernetes.io/component=retrain")["items"]
    assert len(children) == 1, [w["metadata"]["name"] for w in children]
    child = children[0]
    given = {p["name"]: p["value"] for p in child["spec"]["arguments"]["parameters"]}
    print(f"retrain created: {child['metadata']['name']} with {given}")
    assert child["spec"]["workflowTemplateRef"]["name"] == "distill" and given["dataset-repo"] == url, given
    assert given["dataset-rev"] == published["published"]["dataset-commit"], given  # main, resolved by the check
    plane.kubectl("delete", "workflow", child["metadata"]["name"], "--wait=false")


def test_node_figures(real_node: Node):
    """What the node cost to start and holds in memory, printed for docs/engines.md (run with -s); last in the file,
    after the scenarios above have run their pods."""
    figures = {"start (s)": {k: round(v, 1) for k, v in {**real_node.plane.timings, **real_node.timings}.items()},
               "peak memory (MiB)": {k: round(v) for k, v in real_node.peak_memory_mib().items()}}  # fmt: skip
    print(json.dumps(figures, indent=1))
    assert real_node.ready()
