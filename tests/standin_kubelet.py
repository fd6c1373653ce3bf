"""A stand-in kubelet and Ray dashboard for the control plane of tests/controlplane.py: what a node, Argo's executor
containers and a Ray head do to the API server, and nothing that decides how a workflow goes.

For each pod the controllers create in the namespace it binds the pod to a stand-in Node, reports it Running, and then:
- an Argo container step: its `main` container exits with the code the test's `Outcomes` gives (default 0). The steps
  in `REAL_STEPS` are not scripted: their container's command runs here, in this repository's Python (check-parameters
  is milliseconds of argument checks), and its exit code is the container's. The `wait` container's report is made as
  `argoexec wait` makes it (Argo v4.0.5 workflow/executor/executor.go: InitializeOutput, ReportOutputs with the output
  parameters, the output artifacts keyed as `saveArtifactFromFile` keys them and the `main-logs` artifact when the
  template archives logs, then FinalizeOutput), with the token of the executor's service account from the Secret Argo
  mounted (kube-controller-manager's token controller filled it): RBAC as shipped decides;
- an Argo resource step: `harness resource <action>` (engines/harness/resource.go: `argoexec resource` on Argo
  v4.0.5's own executor package; argoexec itself does not build from the module zip) runs with the pod's environment
  and that token, so kubectl, the success/failure conditions, the output parameters and the report are Argo's code;
- a KubeRay pod (head, workers): Running and Ready at `ray_pod_ip()`, where `RayDashboard` answers the operator's job
  calls (the operator runs with --use-kubernetes-proxy: it reaches the dashboard through the API server's service
  proxy, which resolves the head Service's Endpoints that kube-controller-manager writes from these pods);
- the pod's terminal status: Succeeded, or Failed with `main` terminated by that exit code (137/143: a spot reclaim's
  SIGKILL/SIGTERM; 1: a code error). A deleted pod is removed as a kubelet confirms a deletion (grace period 0).

What the step's program writes to its output files is test data (`OUTPUT_VALUES`, per workflow by `Outcomes`;
preflight's sizing from steps/sizing/): no model is trained here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

from tests.conftest import ROOT, console_script
from tests.controlplane import NAMESPACE, ApiError, ControlPlane, write_kubeconfig
from tests.engines import binary

NODE = "standin-node"
ARGO_POD_IP = "10.244.0.10"  # Argo's step pods: nobody connects to them
RAY_DASHBOARD_PORT = 8265  # the head Service's `dashboard` port (KubeRay's default)
# Steps whose container command runs for real (cheap, no network): their exit code is the container's, and their
# output parameters are the files they wrote (the container's /work/out mapped into a scratch folder here):
# evaluate-fanout's lanes are what withParam fans out over.
REAL_STEPS = ("check-parameters", "evaluate-fanout")
CONTAINER_OUT = "/work/out"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
COMPLETED_LABEL = "workflows.argoproj.io/report-outputs-completed"
# What the steps' programs write into their output files, by parameter name (a template's parameter not named here
# gets "x").
OUTPUT_VALUES: dict[str, str] = {
    "architecture": "LlamaForCausalLM",
    "parameters-billion": "0.135",
    "dataset-commit": "0123456789abcdef0123456789abcdef01234567",
    "dataset-hash": "md5-0123456789abcdef",
    "final-loss": "1.25",
    "parity-passed": "true",
    "candidate-gguf": "candidate-Q8_0.gguf",
    "base-gguf": "base-Q8_0.gguf",
    "decision": "propose",
    "model-version": "3",
    "proposed": "true",
    # check-triggers (the retrain CronWorkflow): a trigger fires, for the dataset distill is then submitted with
    "fire": "true",
    "triggers": "new-data",
    "summary": "12 new rows",
    "dataset-repo": "https://git.example.com/distillery/data.git",
    "dataset-rev": "main",
    "changed": "false",
    "champion-version": "2",
}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ray_pod_ip() -> str:
    """This machine's first non-loopback IPv4 address: the API server's proxy dials it (Endpoints may not hold a
    loopback address)."""
    import psutil

    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name == "AF_INET" and not a.address.startswith("127."):
                return a.address
    raise RuntimeError("no non-loopback IPv4 address on this machine for the stand-in Ray head")


@dataclass
class PodRun:
    """What the stand-in saw of one Argo pod."""

    name: str
    workflow: str
    template: str
    exit_code: int
    service_account: str
    executor_secret: str | None
    containers: tuple[str, ...] = ()  # as the controller built the pod (a resource pod: `main`, and `wait` to log)
    spec: dict = field(default_factory=dict)  # the pod's spec as the API server admitted it


@dataclass
class Outcomes:
    """The scenario's script: `exit_codes[(workflow, template)]` is the list of exit codes of that step's successive
    pods (then 0); `outputs[workflow]` overrides OUTPUT_VALUES for one workflow."""

    exit_codes: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)

    def next_exit(self, workflow: str, template: str) -> int:
        codes = self.exit_codes.get((workflow, template))
        return codes.pop(0) if codes else 0

    def value(self, workflow: str, name: str, computed: dict[str, str]) -> str:
        if name in self.outputs.get(workflow, {}):
            return self.outputs[workflow][name]
        return computed.get(name) or OUTPUT_VALUES.get(name, "x")


# The base the default parameters name (HuggingFaceTB/SmolLM2-135M-Instruct), as its config.json states it: preflight's
# sizing outputs (the later steps' podSpecPatches) come from steps/sizing/ for these dimensions, as preflight computes
# them from the downloaded config.
SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152, "tie_word_embeddings": True,
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip
SMOLLM2_135M_PARAMETERS = 134_515_008


def preflight_outputs(tmpl: dict) -> dict[str, str]:
    """preflight's sizing outputs for the flags its container was given (steps/sizing/ `plan(...).outputs()`)."""
    from transformers import LlamaConfig

    from steps import sizing

    args = tmpl["container"].get("args", [])
    flags = {args[i][2:]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    plan = sizing.plan(
        LlamaConfig(**SMOLLM2_135M),
        backend=flags["train-backend"],
        qlora=flags["qlora"] == "true",
        max_seq_len=int(flags["max-seq-len"]),
        batch_size=int(flags["batch-size"]),
        lora_r=int(flags["lora-r"]),
        quantizations=flags["quantizations"],
        precision=flags["precision"],
        micro_batch=int(flags["micro-batch"]),
        gradient_checkpointing=flags["gradient-checkpointing"],
        parameters=SMOLLM2_135M_PARAMETERS,
        base_model=flags["base-model"],
    )
    return {name: str(value) for name, value in plan.outputs().items()}


class StandInKubelet:
    def __init__(self, plane: ControlPlane, outcomes: Outcomes | None = None, poll: float = 0.3):
        self.plane = plane
        self.outcomes = outcomes or Outcomes()
        self.poll = poll
        self.runs: list[PodRun] = []
        self.ray_pods: list[dict] = []  # KubeRay's pods, as the API server admitted them
        self.errors: list[str] = []
        self.logs: dict[tuple[str, str], str] = {}  # (workflow, template) -> what a real or resource step printed
        self.scratch: dict[tuple[str, str], Path] = {}  # (workflow, template) -> a real step's /work/out, here
        self.ray_ip = ray_pod_ip()
        self._seen: set[str] = set()
        self._deleted: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="standin-kubelet", daemon=True)
        self._lock = threading.Lock()
        self._manifest_lock = threading.Lock()  # argoexec resource stages its manifest at a fixed path

    # --- life cycle ----------------------------------------------------------------------------------------------

    def start(self) -> StandInKubelet:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        }
        self.plane.api("POST", "/api/v1/nodes", node)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for folder in self.scratch.values():
            shutil.rmtree(folder, ignore_errors=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self.plane.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            except Exception as e:  # the API server going away at teardown
                if not self._stop.is_set():
                    self.errors.append(f"list pods: {e}")
                time.sleep(self.poll)
                continue
            for pod in pods:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    if meta["uid"] not in self._deleted:
                        self._deleted.add(meta["uid"])
                        self._confirm_deletion(meta["name"], meta["uid"])
                    continue
                if meta["uid"] in self._seen:
                    continue
                self._seen.add(meta["uid"])
                threading.Thread(target=self._run_safely, args=(pod,), daemon=True).start()
            time.sleep(self.poll)

    def _run_safely(self, pod: dict) -> None:
        try:
            self.run_pod(pod)
        except BaseException:  # pytest.fail (a missing engine) included: the test reads self.errors
            self.errors.append(f"pod {pod['metadata']['name']}: {traceback.format_exc()}")

    def _confirm_deletion(self, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with contextlib.suppress(ApiError):
            self.plane.api("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", body)

    # --- one pod -------------------------------------------------------------------------------------------------

    def run_pod(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        self._bind(name)
        if WORKFLOW_LABEL not in labels:  # KubeRay's head and workers: running until deleted
            self._status(name, "Running", pod, ip=self.ray_ip)
            with self._lock:
                self.ray_pods.append(pod)
            return
        tmpl = self._template(pod)
        workflow = labels[WORKFLOW_LABEL]
        run = PodRun(
            name,
            workflow,
            tmpl["name"],
            0,
            pod["spec"].get("serviceAccountName", "default"),
            self._token_secret(pod),
            tuple(c["name"] for c in pod["spec"]["containers"]),
            pod["spec"],
        )
        self._status(name, "Running", pod)
        token = self._executor_token(pod)
        if "resource" in tmpl:
            run.exit_code = self._argoexec_resource(pod, tmpl, token, workflow)
        else:
            env = {e["name"]: e.get("value", "") for c in pod["spec"]["containers"] for e in c.get("env", [])}
            result = TaskResult(self.plane, token, env["ARGO_NODE_ID"], workflow, env["ARGO_WORKFLOW_UID"])
            result.initialize()
            run.exit_code = self._main_exit(workflow, tmpl)
            result.report(self._container_outputs(workflow, tmpl, run.exit_code))
            result.finalize()
        self._status(name, "Succeeded" if run.exit_code == 0 else "Failed", pod, run.exit_code)
        with self._lock:
            self.runs.append(run)

    def _bind(self, name: str) -> None:
        target = {"kind": "Node", "name": NODE}
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": target}
        self.plane.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/binding", body)

    def _template(self, pod: dict) -> dict:
        raw = next(
            e["value"]
            for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
            for e in c.get("env", [])
            if e["name"] == "ARGO_TEMPLATE"
        )
        if raw == "offloaded":  # workflowpod.go: a template larger than 128 KiB goes to a ConfigMap named as the pod
            raw = self.plane.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{pod['metadata']['name']}")["data"][
                "ARGO_TEMPLATE"
            ]
        return json.loads(raw)

    @staticmethod
    def _token_secret(pod: dict) -> str | None:
        """The Secret Argo mounts as the executor's token (workflowpod.go setupServiceAccount: `exec-sa-token`)."""
        for v in pod["spec"].get("volumes", []):
            if v["name"] == "exec-sa-token":
                return v["secret"]["secretName"]
        return None

    def _executor_token(self, pod: dict) -> str:
        secret = self._token_secret(pod)
        if secret is not None:
            return self.plane.secret_token(secret)
        return self.plane.service_account_token(pod["spec"].get("serviceAccountName", "default"))

    def _status(self, name: str, phase: str, pod: dict, exit_code: int = 0, ip: str = ARGO_POD_IP) -> None:
        running = phase == "Running"
        stamp = now()

        def state(code: int) -> dict:
            if running:
                return {"running": {"startedAt": stamp}}
            reason = "Completed" if code == 0 else "Error"
            return {"terminated": {"exitCode": code, "reason": reason, "startedAt": stamp, "finishedAt": stamp}}

        statuses = [
            {"name": c["name"], "state": state(exit_code if c["name"] == "main" else 0), "ready": running,
             "started": running, "restartCount": 0, "image": c["image"], "imageID": ""}
            for c in pod["spec"]["containers"]
        ]  # fmt: skip
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}}
        init = [
            {"name": c["name"], "state": done, "ready": True, "restartCount": 0, "image": c["image"], "imageID": ""}
            for c in pod["spec"].get("initContainers", [])
        ]
        ready = "True" if running else "False"
        status = {
            "phase": phase,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": self.ray_ip,
            "startTime": stamp,
            "containerStatuses": statuses,
            "initContainerStatuses": init,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": stamp},
                {"type": "Ready", "status": ready, "lastTransitionTime": stamp},
            ],
        }
        self.plane.api(
            "PATCH",
            f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    # --- container steps -----------------------------------------------------------------------------------------

    def _main_exit(self, workflow: str, tmpl: dict) -> int:
        scripted = self.outcomes.next_exit(workflow, tmpl["name"])
        if tmpl["name"] not in REAL_STEPS or scripted != 0:
            return scripted
        ctr = tmpl["container"]
        scratch = Path(tempfile.mkdtemp(prefix="standin-out-"))
        self.scratch[(workflow, tmpl["name"])] = scratch
        cmd = [self._local(a, scratch) for a in [*ctr.get("command", []), *ctr.get("args", [])]]
        if cmd[0] in ("python", "python3"):
            cmd[0] = sys.executable
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        self.logs[(workflow, tmpl["name"])] = done.stdout + done.stderr
        return done.returncode

    @staticmethod
    def _local(path: str, scratch: Path) -> str:
        """A container path under /work/out, in this step's scratch folder; anything else as it is."""
        return str(scratch / path.lstrip("/")) if path.startswith(CONTAINER_OUT) else path

    def _written(self, workflow: str, tmpl: dict) -> dict[str, str]:
        """A real step's output parameters, read from the files it wrote (Argo's valueFrom.path)."""
        scratch = self.scratch.get((workflow, tmpl["name"]))
        if scratch is None:
            return {}
        declared = (tmpl.get("outputs") or {}).get("parameters", [])
        files = {p["name"]: Path(self._local(p["valueFrom"]["path"], scratch)) for p in declared if "valueFrom" in p}
        return {name: f.read_text().strip() for name, f in files.items() if f.is_file()}

    def _container_outputs(self, workflow: str, tmpl: dict, exit_code: int) -> dict:
        outputs: dict[str, Any] = {}
        declared = tmpl.get("outputs") or {}
        location = tmpl.get("archiveLocation") or {}
        arts = []
        if exit_code == 0:  # a failed main leaves no output files: SaveParameters/SaveArtifacts save nothing
            computed = preflight_outputs(tmpl) if tmpl["name"] == "preflight" else self._written(workflow, tmpl)
            params = [
                {**p, "value": self.outcomes.value(workflow, p["name"], computed)}
                for p in declared.get("parameters", [])
            ]
            if params:
                outputs["parameters"] = params
            arts = [artifact(a, location) for a in declared.get("artifacts", [])]
        if location.get("archiveLogs"):
            arts.append(artifact({"name": "main-logs"}, location, file_name="main.log"))
        if arts:
            outputs["artifacts"] = arts
        return outputs

    # --- resource steps: Argo's own executor ---------------------------------------------------------------------

    def _argoexec_resource(self, pod: dict, tmpl: dict, token: str, workflow: str) -> int:
        """The resource pod's `main` container, `argoexec resource <action>`, as `harness resource <action>` (Argo's
        executor package) with its environment (fieldRefs filled in as the kubelet does), a kubeconfig holding the
        executor's token, and kubectl on PATH."""
        [main] = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
        meta = pod["metadata"]
        fields = {"metadata.name": meta["name"], "metadata.uid": meta["uid"], "metadata.namespace": NAMESPACE}
        env = {}
        # The init container's environment first: it holds ARGO_TEMPLATE, which it writes to /var/run/argo/template
        # for the containers that follow (init.go Init reads that file when the variable is absent).
        init_env = [e for c in pod["spec"].get("initContainers", []) if c["name"] == "init" for e in c.get("env", [])]
        for e in [*init_env, *main.get("env", [])]:
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "fieldRef" in (e.get("valueFrom") or {}):
                env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        kubeconfig = self.plane.workdir / f"exec-{meta['name']}.kubeconfig"
        write_kubeconfig(kubeconfig, self.plane.url, self.plane.ca, token, NAMESPACE)
        kubectl_dir = str(Path(console_script("kubectl")).parent)
        env.update(KUBECONFIG=str(kubeconfig), PATH=f"{kubectl_dir}:{os.environ['PATH']}", HOME=str(self.plane.workdir))
        env["RESOURCE_STATE_CHECK_INTERVAL"] = "1s"  # resource.go WaitResource polls every 5 s by default: test time
        # operator.go: argoexec resource <action> <log opts>, wrapped by the emissary (`… emissary … -- <command>`)
        line = [*main.get("command", []), *main.get("args", [])]
        line = line[line.index("--") + 1 :] if "--" in line else line
        if line[:2] != ["argoexec", "resource"]:
            raise RuntimeError(f"pod {meta['name']}: main is not `argoexec resource …`: {line}")
        cmd = [str(binary("harness")), "resource", line[2]]
        with self._manifest_lock:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        self.logs[(workflow, tmpl["name"])] = done.stdout + done.stderr
        return done.returncode


def artifact(art: dict, location: dict, file_name: str = "") -> dict:
    """executor.go saveArtifactFromFile: an artifact without its own key goes to the archive location under
    `<location key>/<file>` (`<name>.tgz` for the default tar archive, the path's base name for `archive: none`)."""
    out = dict(art)
    s3 = dict(art.get("s3") or {})
    if "key" not in s3:
        base = location.get("s3") or {}
        if not file_name:
            file_name = (
                PurePosixPath(art["path"]).name if "none" in (art.get("archive") or {}) else f"{art['name']}.tgz"
            )
        s3 = {**base, "key": str(PurePosixPath(base.get("key", "")) / file_name)}
    out["s3"] = s3
    return out


class TaskResult:
    """executor/taskresult.go: the node's WorkflowTaskResult, created then merge-patched, as the executor's identity."""

    def __init__(self, plane: ControlPlane, token: str, node_id: str, workflow: str, workflow_uid: str):
        self.plane, self.token, self.node_id = plane, token, node_id
        self.workflow, self.workflow_uid = workflow, workflow_uid
        self.base = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/workflowtaskresults"

    def initialize(self) -> None:
        owner = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "name": self.workflow,
            "uid": self.workflow_uid,
        }
        body = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "WorkflowTaskResult",
            "metadata": {
                "name": self.node_id,
                "labels": {WORKFLOW_LABEL: self.workflow, COMPLETED_LABEL: "false"},
                "ownerReferences": [owner],
            },
        }
        try:
            self.plane.api("POST", self.base, body, token=self.token)
        except ApiError as e:
            if e.code != 409:
                raise

    def report(self, outputs: dict) -> None:
        if outputs:
            self._patch({"outputs": outputs})

    def finalize(self) -> None:
        self._patch({"metadata": {"labels": {COMPLETED_LABEL: "true"}}})

    def _patch(self, body: dict) -> None:
        self.plane.api(
            "PATCH", f"{self.base}/{self.node_id}", body, token=self.token, content_type="application/merge-patch+json"
        )


# --- the Ray head's dashboard --------------------------------------------------------------------------------------


class RayDashboard:
    """The Ray job REST API the operator calls (KubeRay v1.5.0 dashboardclient: POST /api/jobs/, GET /api/jobs/<id>,
    POST /api/jobs/<id>/stop, DELETE /api/jobs/<id>, GET /api/jobs/<id>/logs), on the Ray pods' address.

    `final[run_id]` is the terminal status a job whose entrypoint carries `--run-id <run_id>` reaches (SUCCEEDED,
    FAILED or STOPPED) after `running_polls` answers of RUNNING; `submitted` records each submission."""

    def __init__(self, host: str, port: int = RAY_DASHBOARD_PORT, running_polls: int = 2):
        self.final: dict[str, str] = {}
        self.submitted: list[dict] = []
        self.polls: dict[str, int] = {}
        self.running_polls = running_polls
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.rstrip("/")
                if path == "/api/jobs":
                    dashboard.submitted.append(body)
                    self._send(200, {"job_id": body["submission_id"], "submission_id": body["submission_id"]})
                elif path.endswith("/stop"):
                    self._send(200, {"stopped": True})
                else:
                    self._send(404, {})

            def do_GET(self) -> None:
                path = self.path.rstrip("/")
                if path.endswith("/logs"):
                    self._send(200, {"logs": ""})
                    return
                job = dashboard.job(path.rsplit("/", 1)[-1])
                self._send(200, job) if job else self._send(404, {})

            def do_DELETE(self) -> None:
                self._send(200, {"deleted": True})

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="ray-dashboard", daemon=True)

    def job(self, submission_id: str) -> dict | None:
        sub = next((s for s in self.submitted if s.get("submission_id") == submission_id), None)
        if sub is None:
            return None
        words = sub["entrypoint"].split()
        run_id = words[words.index("--run-id") + 1].strip("'") if "--run-id" in words else ""
        polls = self.polls[submission_id] = self.polls.get(submission_id, 0) + 1
        status = "RUNNING" if polls <= self.running_polls else self.final.get(run_id, "RUNNING")
        info = {"job_id": submission_id, "submission_id": submission_id, "entrypoint": sub["entrypoint"],
                "status": status, "start_time": 1, "message": f"stand-in dashboard: {status}"}  # fmt: skip
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            info["end_time"] = 2
        return info

    def start(self) -> RayDashboard:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
