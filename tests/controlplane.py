"""A real Kubernetes control plane on loopback for the cluster scenarios (tests/test_controlplane.py): etcd,
kube-apiserver (RBAC, Pod Security admission, OwnerReferencesPermissionEnforcement) and kube-controller-manager
(service-account tokens, Jobs, garbage collection), the Argo, KubeRay, Karpenter and Gateway API CRDs, the shipped
infra/, Argo's workflow-controller and KubeRay's ray-operator, all built from their Go modules by scripts/engines.sh.

No kubelet and no scheduler run: tests/standin_kubelet.py binds the pods the controllers create and moves them through
their phases. Everything else (admission, RBAC, CRD validation, Argo's DAG, retries, template referencing, KubeRay's
state machine) is the engines' own code.

    plane = start(workdir)      # seconds once the binaries are built; plane.stop() tears it down
    plane.kubectl("get", "pods")                # as the admin
    plane.kubectl("create", "-f", "-", input=..., token=plane.service_account_token("distillery-submitter"))
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT, console_script, free_port
from tests.engines import binary
from tests.manifests import argo_install
from workflows import images

NAMESPACE = "distillery"
ARGO_NAMESPACE = "argo"  # where the workflow-controller's ConfigMap lives, as Argo's own install puts it
SCHEMAS = ROOT / "tests/schemas"
# CRDs the Go module cache holds (scripts/engines.sh downloaded the modules to build the engines).
ARGO_MODULE = f"{images.ARGO_MODULE}@{images.argo_release()}"  # the release engines/harness/go.mod requires
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator@v1.5.0"
GATEWAY_MODULE = "sigs.k8s.io/gateway-api@v1.6.1"  # the release tests/schemas holds the HTTPRoute CRD of
# The controller settings this project ships (infra/argo-controller/ Component on Argo's own ConfigMap) plus what the
# README advises an installation to set, and what a test process needs (no metrics listener on a fixed port).
EXTRA_CONTROLLER_CONFIG = {
    "workflowRestrictions": "templateReferencing: Strict\n",
    "metricsConfig": "enabled: false\n",
    "telemetryConfig": "enabled: false\n",
}
# The API server's admin (a static token in group system:masters) and the controllers run with it.
ADMIN_TOKEN = "distillery-admin-token"
# The cluster's service range, as the shipped NetworkPolicies name it (infra/networkpolicy/cluster-network.yaml); the
# `kubernetes` Service takes its first address.
CLUSTER_NETWORK = yaml.safe_load((ROOT / "infra/networkpolicy/cluster-network.yaml").read_text())["data"]
SERVICE_CIDR = ipaddress.ip_network(CLUSTER_NETWORK["service-cidr"])
KUBERNETES_SERVICE_IP = str(SERVICE_CIDR[1])
# The executor image the workflow-controller puts in every step pod (Argo's own; tests/node.py imports its own build).
EXECUTOR_IMAGE = images.default_argoexec()


def go_module_dir(module: str) -> Path:
    """Where `go mod download` put `module` (path@version); downloads it when absent (seconds, the proxy)."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", module], capture_output=True, text=True, check=False, cwd="/"
    )
    if done.returncode != 0:
        raise RuntimeError(f"go mod download {module}: {done.stdout}{done.stderr}")
    return Path(json.loads(done.stdout)["Dir"])


def crd_files() -> list[Path]:
    """The CRDs of every kind the shipped objects and the engines use, from the engines' own modules (Karpenter's and
    KubeRay v1.7.0's RayJob from tests/schemas, whose modules the proxy here does not serve). Argo's kinds that this
    project writes (Workflow, WorkflowTemplate, CronWorkflow) get Argo's full CRDs, with the whole OpenAPI schema; the
    ones it never writes get Argo's default (minimal) CRDs: a full CRD is 2.5 MB the API server compiles at start."""
    crds = go_module_dir(ARGO_MODULE) / "manifests/base/crds"
    written = ("workflows", "workflowtemplates", "cronworkflows")
    files = [crds / ("full" if p.stem.split("_")[1] in written else "minimal") / p.name
             for p in sorted((crds / "minimal").glob("argoproj.io_*.yaml"))]  # fmt: skip
    # The RayJob CRD of the KubeRay release the templates are written for (v1.7.0: authOptions); the RayCluster and
    # RayService CRDs of the operator that runs (v1.5.0), the other kinds it watches.
    kuberay = go_module_dir(KUBERAY_MODULE) / "config/crd/bases"
    files += [kuberay / "ray.io_rayclusters.yaml", kuberay / "ray.io_rayservices.yaml"]
    files += [SCHEMAS / "kuberay-v1.7.0-ray.io_rayjobs.yaml"]
    # Gateway API: the kind infra/serving/ holds (HTTPRoute), from the standard channel.
    files += [go_module_dir(GATEWAY_MODULE) / "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"]
    files += sorted(SCHEMAS.glob("karpenter-*.yaml"))
    return files


@dataclass
class ControlPlane:
    url: str
    workdir: Path
    ca: Path
    kubeconfig: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    _tokens: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    # --- talking to it -----------------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, token: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """kubectl against this API server, as the admin or as whoever `token` is."""
        cmd = [console_script("kubectl"), "--kubeconfig", str(self.kubeconfig)]
        if token is not None:
            cmd += ["--token", token]
        done = subprocess.run(
            [*cmd, *args], input=input, capture_output=True, text=True, timeout=timeout, env=self.env()
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.workdir), "KUBECONFIG": str(self.kubeconfig)}

    def api(self, method: str, path: str, body: Any = None, token: str = ADMIN_TOKEN, content_type: str = "") -> Any:
        """One REST call; the decoded answer. An HTTP error raises ApiError with the server's Status."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type or "application/json")
        ctx = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None

    def ready(self) -> bool:
        req = urllib.request.Request(self.url + "/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(self.ca)), timeout=5) as r:
            return r.status == 200

    def get(self, path: str) -> Any:
        return self.api("GET", path)

    def service_account_token(self, name: str, namespace: str = NAMESPACE) -> str:
        """A bound token of service account `name` (TokenRequest, as a kubelet gets for a projected token)."""
        key = f"{namespace}/{name}"
        if key not in self._tokens:
            answer = self.api(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}},
            )
            self._tokens[key] = answer["status"]["token"]
        return self._tokens[key]

    def secret_token(self, secret: str, namespace: str = NAMESPACE, timeout: float = 30) -> str:
        """The token kube-controller-manager's token controller writes into a service-account-token Secret (what
        Argo mounts into its executor containers)."""
        import base64

        deadline = time.monotonic() + timeout
        while True:
            data = self.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}").get("data") or {}
            if "token" in data:
                return base64.b64decode(data["token"]).decode()
            if time.monotonic() > deadline:
                raise TimeoutError(f"secret {namespace}/{secret}: no token after {timeout}s (kube-controller-manager)")
            time.sleep(0.2)

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = self.logs.get(name)
        return path.read_text(errors="replace")[-chars:] if path and path.exists() else ""

    def stop(self) -> None:
        """Everything at once (SIGTERM to each process group), then SIGKILL what is left after 5 s: nothing here
        holds state worth a graceful shutdown."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):  # what is left, children included
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs.clear()


@dataclass
class Cluster:
    """The `control_plane` fixture: the API server and controllers, the stand-in kubelet, the stand-in dashboard."""

    plane: ControlPlane
    kubelet: Any  # tests.standin_kubelet.StandInKubelet
    dashboard: Any  # tests.standin_kubelet.RayDashboard


class ApiError(RuntimeError):
    def __init__(self, code: int, body: str):
        super().__init__(f"HTTP {code}: {body[:2000]}")
        self.code = code
        self.body = body


# --- start-up ------------------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(folder: Path, address: str = "127.0.0.1") -> None:
    """A CA, the API server's serving certificate for 127.0.0.1 and `address`, the service-account signing key pair,
    and the client certificate the API server shows a kubelet (logs, exec: tests/node.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=distillery-test-ca", cwd=folder)  # fmt: skip
    (folder / "server.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,IP:{address},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        f"DNS:kubernetes.default.svc,IP:{KUBERNETES_SERVICE_IP}\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=kube-apiserver", cwd=folder)  # fmt: skip
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=folder)  # fmt: skip
    (folder / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kubelet-client.key", "-out", "kubelet-client.csr",
             "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client", cwd=folder)  # fmt: skip
    _openssl("x509", "-req", "-in", "kubelet-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "kubelet-client.crt", "-days", "2", "-extfile", "client.ext", cwd=folder)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


def _spawn(plane: ControlPlane, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    log = plane.workdir / f"{name}.log"
    plane.logs[name] = log
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env or plane.env(), cwd=plane.workdir
        )
    plane.procs[name] = proc
    return proc


def _wait(what: str, ready: Any, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        with contextlib.suppress(Exception):
            if ready():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout}s:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.3)


def write_kubeconfig(path: Path, url: str, ca: Path, token: str, namespace: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority": str(ca)}}],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin", "namespace": namespace}}],
                "current-context": "test",
            }
        )
    )


# The controllers a real node needs besides: the API server's TaintNodesByCondition admission registers every Node
# with the node.kubernetes.io/not-ready:NoSchedule taint, and only the node-lifecycle controller takes it off once
# the kubelet reports Ready (no pod would be scheduled otherwise). Not for the stand-in kubelet's plane, whose nodes
# send no heartbeats: this controller would mark them unreachable.
NODE_CONTROLLERS = ("node-lifecycle-controller",)


def start_apiserver(workdir: Path, address: str = "127.0.0.1", controllers: tuple[str, ...] = ()) -> ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager (with `controllers` besides its usual ones), ready. The API
    server listens on `address` (a real node's pods reach it there through the `kubernetes` Service: tests/node.py
    gives the address of its pod bridge)."""
    certs = workdir / "pki"
    make_certs(certs, address)
    (certs / "tokens.csv").write_text(f'{ADMIN_TOKEN},distillery-admin,1,"system:masters"\n')
    port = free_port()
    url = f"https://{address}:{port}"
    plane = ControlPlane(url=url, workdir=workdir, ca=certs / "ca.crt", kubeconfig=workdir / "admin.kubeconfig")
    write_kubeconfig(plane.kubeconfig, url, plane.ca, ADMIN_TOKEN, NAMESPACE)
    try:
        client, peer = free_port(), free_port()
        etcd = _spawn(plane, "etcd", [
            str(binary("etcd")), "--name", "test", "--data-dir", str(workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level", "warn",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
        ])  # fmt: skip
        _wait("etcd", lambda: urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=2).status == 200,
              etcd, plane.logs["etcd"], 60)  # fmt: skip
        apiserver = _spawn(plane, "kube-apiserver", [
            str(binary("kube-apiserver")), "--etcd-servers", f"http://127.0.0.1:{client}",
            "--bind-address", address, "--advertise-address", address, "--secure-port", str(port),
            "--tls-cert-file", str(certs / "server.crt"), "--tls-private-key-file", str(certs / "server.key"),
            "--client-ca-file", str(certs / "ca.crt"), "--token-auth-file", str(certs / "tokens.csv"),
            "--authorization-mode", "RBAC",
            # PodSecurity, ServiceAccount, NamespaceLifecycle … are on by default; this one is what hardened clusters
            # add (issue #26: the RayJob's controller owner reference needs workflows/finalizers update).
            "--enable-admission-plugins", "OwnerReferencesPermissionEnforcement",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(certs / "sa.pub"),
            "--service-account-signing-key-file", str(certs / "sa.key"),
            "--service-cluster-ip-range", str(SERVICE_CIDR), "--enable-priority-and-fairness=false",
            "--kubelet-client-certificate", str(certs / "kubelet-client.crt"),
            "--kubelet-client-key", str(certs / "kubelet-client.key"),
            "--kubelet-preferred-address-types", "InternalIP",
            "--profiling=false", "--cert-dir", str(certs),
        ])  # fmt: skip
        _wait("kube-apiserver", plane.ready, apiserver, plane.logs["kube-apiserver"], 120)
        _spawn(plane, "kube-controller-manager", [
            str(binary("kube-controller-manager")), "--kubeconfig", str(plane.kubeconfig),
            "--authentication-kubeconfig", str(plane.kubeconfig), "--authorization-kubeconfig", str(plane.kubeconfig),
            "--leader-elect=false", "--secure-port", "0",
            "--service-account-private-key-file", str(certs / "sa.key"), "--root-ca-file", str(certs / "ca.crt"),
            "--controllers", "serviceaccount-token-controller,serviceaccount-controller,job-controller,"
            "garbage-collector-controller,endpoints-controller,endpointslice-controller,namespace-controller,"
            # kube-root-ca.crt in every namespace: a kubelet mounts it into each service-account token volume
            "root-ca-certificate-publisher-controller" + "".join(f",{c}" for c in controllers),
        ])  # fmt: skip
    except BaseException:
        plane.stop()
        raise
    return plane


def kustomize(folder: Path, plane: ControlPlane) -> str:
    return plane.kubectl("kustomize", str(folder)).stdout


def controller_configmap(plane: ControlPlane) -> str:
    """Argo's own workflow-controller-configmap (its install manifests) with the shipped Component applied by
    kustomize, as tests/test_kustomize.py builds it, plus EXTRA_CONTROLLER_CONFIG."""
    install = plane.workdir / "argo-install"
    install.mkdir()
    own = go_module_dir(ARGO_MODULE) / "manifests/base/workflow-controller/workflow-controller-configmap.yaml"
    base = yaml.safe_load(own.read_text())
    base["metadata"]["namespace"] = ARGO_NAMESPACE
    base["data"] = {**(base.get("data") or {}), **EXTRA_CONTROLLER_CONFIG}
    argo_install(install, base)
    return kustomize(install, plane)


def established(crd: dict) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(k["type"] == "Established" and k["status"] == "True" for k in conditions)


def apply_everything(plane: ControlPlane, executor_image: str = EXECUTOR_IMAGE) -> None:
    """The CRDs (established), Argo's namespace and ConfigMap, and what users apply: infra/ and infra/karpenter/; the
    step-pods admission policy rendered for `executor_image` where it is not Argo's default (the node's executor is
    built here), as docs/cluster.md tells a cluster whose controller names another (`--argoexec-image`): the policy
    checks the executor of every step pod."""
    args: list[str] = []
    for f in crd_files():
        args += ["-f", str(f)]
    # `create`: Argo's full CRDs are larger than client-side apply's last-applied annotation allows (and the API
    # server is fresh: nothing to update).
    plane.kubectl("create", *args)
    deadline = time.monotonic() + 120
    while True:
        crds = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        pending = [c["metadata"]["name"] for c in crds if not established(c)]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRDs not established after 120 s: {pending}")
        time.sleep(0.3)
    plane.kubectl("create", "namespace", ARGO_NAMESPACE)
    plane.kubectl("apply", "-f", "-", input=controller_configmap(plane))
    plane.kubectl("apply", "-k", str(ROOT / "infra"))
    plane.kubectl("apply", "-k", str(ROOT / "infra/karpenter"))
    if executor_image != EXECUTOR_IMAGE:
        from workflows.render import step_pods_policy

        plane.kubectl("apply", "-f", "-", input=step_pods_policy(argoexec=executor_image))


def start_controllers(plane: ControlPlane, executor_image: str = EXECUTOR_IMAGE) -> None:
    """Argo's workflow-controller (its ConfigMap in `argo`, watching every namespace) and KubeRay's operator
    (watching `distillery`), both as the admin (Argo's and KubeRay's own install RBAC is not what is tested here); no
    leader election, no metrics listeners."""
    argo_kubeconfig = plane.workdir / "argo.kubeconfig"
    write_kubeconfig(argo_kubeconfig, plane.url, plane.ca, ADMIN_TOKEN, ARGO_NAMESPACE)
    # DEFAULT_REQUEUE_TIME: how soon a workflow is looked at again (10 s by default); 1 s as Argo's e2e tests run it.
    env = {**plane.env(), "KUBECONFIG": str(argo_kubeconfig), "LEADER_ELECTION_DISABLE": "true",
           "DEFAULT_REQUEUE_TIME": "1s"}  # fmt: skip
    _spawn(plane, "workflow-controller", [
        str(binary("workflow-controller")), "--kubeconfig", str(argo_kubeconfig),
        "--executor-image", executor_image, "--loglevel", "info",
        "--workflow-workers", "4", "--pod-cleanup-workers", "2", "--cron-workflow-workers", "2",
    ], env=env)  # fmt: skip
    _spawn(plane, "ray-operator", [
        str(binary("ray-operator")), "--watch-namespace", NAMESPACE, "--enable-leader-election=false",
        "--metrics-addr", "0", "--health-probe-bind-address", "0", "--log-stdout-encoder", "console",
        # The dashboard through the API server's service proxy (the head Service's Endpoints), not cluster DNS.
        "--use-kubernetes-proxy",
    ], env={**plane.env(), "KUBECONFIG": str(plane.kubeconfig)})  # fmt: skip


def start(
    workdir: Path, address: str = "127.0.0.1", executor_image: str = EXECUTOR_IMAGE, controllers: tuple[str, ...] = ()
) -> ControlPlane:
    """The whole control plane, ready; `plane.timings` says how long each part took (seconds). `address`,
    `controllers` and `executor_image`: start_apiserver, start_controllers."""
    began = time.monotonic()
    plane = start_apiserver(workdir, address, controllers)
    plane.timings["apiserver"] = time.monotonic() - began
    try:
        began = time.monotonic()
        apply_everything(plane, executor_image)
        plane.timings["apply"] = time.monotonic() - began
        began = time.monotonic()
        start_controllers(plane, executor_image)
        plane.timings["controllers"] = time.monotonic() - began
    except BaseException:
        plane.stop()
        raise
    return plane
