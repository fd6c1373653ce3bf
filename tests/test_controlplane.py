"""The shipped templates run by the real engines (issue #26, level 3): `argo submit` against kube-apiserver built from
k8s.io/kubernetes, Argo's own workflow-controller deciding the DAG, retries and template referencing, every pod admitted
by the API server's Pod Security admission in the `restricted` namespace under the service accounts the templates
name, the executor's reports written under the RBAC of infra/rbac/ (tests/controlplane.py, tests/standin_kubelet.py).

One control plane per test session (the `control_plane` fixture). The `distill` mutex runs these workflows one at a
time, so each test waits for its own. The cluster tier (`scripts/test.sh --cluster`): its engines take about an hour to
build cold on 2 cores (`scripts/engines.sh --cluster`), more than CI's 90 minutes can hold beside the other tiers.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
import yaml

from steps.pipeline import EVALUATE_FANOUT_PARAMS, EVALUATE_SHARDS_PARAM
from tests.conftest import ROOT
from tests.controlplane import NAMESPACE, ApiError, Cluster, ControlPlane
from tests.engines import ARGO_VERSIONS, binary
from tests.standin_kubelet import OUTPUT_VALUES, StandInKubelet
from workflows.deploy import account

pytestmark = pytest.mark.cluster

ARGO = f"argo-{ARGO_VERSIONS[-1]}"
WF_API = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/workflows"


def argo(plane: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Argo's CLI against the API server (its Kubernetes-API mode: no Argo Server), as the admin."""
    done = subprocess.run(
        [str(binary(ARGO)), "-n", NAMESPACE, *args], capture_output=True, text=True, timeout=120, env=plane.env()
    )
    if check and done.returncode != 0:
        raise AssertionError(f"argo {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done


def wait_workflow(plane: ControlPlane, kubelet: StandInKubelet, name: str, timeout: float = 150) -> dict:
    """The workflow once it has finished (Succeeded, Failed or Error)."""
    deadline = time.monotonic() + timeout
    while True:
        wf = plane.get(f"{WF_API}/{name}")
        phase = (wf.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error"):
            return wf
        if kubelet.errors:
            raise AssertionError(f"workflow {name}: the stand-in kubelet failed: {kubelet.errors}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"workflow {name} still {phase} after {timeout}s: {json.dumps(nodes_by_template(wf), indent=1)}\n"
                f"kubelet errors: {kubelet.errors}\ncontroller:\n{plane.log_tail('workflow-controller')}"
            )
        time.sleep(0.5)


def nodes_by_template(wf: dict) -> dict[str, list[dict[str, Any]]]:
    """Each pod node's attempts: template -> [{phase, exitCode, message}], in start order."""
    out: dict[str, list[dict[str, Any]]] = {}
    nodes = sorted((wf.get("status") or {}).get("nodes", {}).values(), key=lambda n: n.get("startedAt") or "")
    for n in nodes:
        if n["type"] != "Pod":
            continue
        exit_code = (n.get("outputs") or {}).get("exitCode")
        out.setdefault(n["templateName"], []).append(
            {"phase": n["phase"], "exitCode": exit_code, "message": n.get("message", "")}
        )
    return out


DATASET_REPO = OUTPUT_VALUES["dataset-repo"]  # the one parameter without a default (never cloned)


def submit_distill(plane: ControlPlane, name: str, *params: str) -> None:
    args = ["submit", "--from", "workflowtemplate/distill", "--name", name, "-p", f"dataset-repo={DATASET_REPO}"]
    for p in params:
        args += ["-p", p]
    argo(plane, *args)


@pytest.fixture(scope="module")
def cluster(control_plane: Cluster) -> Cluster:
    return control_plane


# --- the cluster as shipped ----------------------------------------------------------------------------------------


def test_namespace_enforces_restricted_and_refuses_a_root_pod(cluster):
    """The API server's own Pod Security admission is on for the shipped namespace: a pod `restricted` forbids is
    refused (so the workflows' pods below were judged, not waved through)."""
    plane = cluster.plane
    ns = plane.get(f"/api/v1/namespaces/{NAMESPACE}")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root-probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"runAsUser": 0}}]},
    }
    with pytest.raises(ApiError) as refused:
        plane.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    assert refused.value.code == 403 and "violates PodSecurity" in refused.value.body


def test_strict_referencing_refuses_an_inline_workflow(cluster):
    """The controller runs under `templateReferencing: Strict`: a Workflow with its own templates does not run (so
    the CronWorkflow scenarios below ran because they reference their WorkflowTemplates)."""
    plane, kubelet = cluster.plane, cluster.kubelet
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "inline-probe"},
        "spec": {"entrypoint": "x", "templates": [{"name": "x", "suspend": {}}]},
    }
    plane.api("POST", WF_API, wf)
    done = wait_workflow(plane, kubelet, "inline-probe", timeout=60)
    assert done["status"]["phase"] == "Error"
    assert "workflowTemplateRef" in done["status"]["message"]


# --- distill on the GPU backend ------------------------------------------------------------------------------------


def test_distill_gpu_succeeds_with_every_pod_admitted(cluster):
    """`argo submit --from workflowtemplate/distill` with the GPU backend: every step's pod is created by Argo's
    controller and admitted by the API server in the `restricted` namespace, under the service accounts the
    templates name; every report is written with the executor's token (RBAC as shipped); the workflow Succeeds."""
    plane, kubelet = cluster.plane, cluster.kubelet
    submit_distill(plane, "distill-gpu", "train-backend=gpu")
    wf = wait_workflow(plane, kubelet, "distill-gpu")
    nodes = nodes_by_template(wf)
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), nodes, kubelet.errors)
    # evaluate fanned out: evaluate-fanout's real command deals the default shards into lanes, one shard pod each
    shards = int(next(p.cluster for p in EVALUATE_FANOUT_PARAMS if p.name == EVALUATE_SHARDS_PARAM))
    expected = ["check-parameters", "preflight", "fetch-dataset", "train-gpu", "convert-gguf", "evaluate-fanout",
                *["evaluate-shard-gpu"] * shards, "evaluate", "register", "propose"]  # fmt: skip
    assert sorted(nodes) == sorted(set(expected))
    assert len(nodes["evaluate-shard-gpu"]) == shards
    runs = [r for r in kubelet.runs if r.workflow == "distill-gpu"]
    assert sorted(r.template for r in runs) == sorted(expected)
    # each step under the account its template names: register alone writes MLflow's artifacts (#27)
    assert {r.template: r.service_account for r in runs} == {t: account(t) for t in expected}
    assert {r.executor_secret for r in runs} == {"distillery-steps.service-account-token"}
    # the sized pods as the controller filled their podSpecPatch: preflight's numbers read by asInt (issue 37 item 3)
    [preflight] = [
        n for n in wf["status"]["nodes"].values() if n.get("templateName") == "preflight" and n["type"] == "Pod"
    ]
    numbers = {p["name"]: p["value"] for p in preflight["outputs"]["parameters"]}
    distill = yaml.safe_load((ROOT / "infra/argo/distill-workflowtemplate.yaml").read_text())
    patched = {t["name"] for t in distill["spec"]["templates"] if "podSpecPatch" in t}
    sized = {r.template: r.spec for r in runs if r.template in patched}
    assert set(sized) == {"train-gpu", "convert-gguf", "evaluate-shard-gpu", "evaluate", "register"}
    for template, spec in sized.items():
        step = "evaluate" if template.startswith("evaluate-shard") else template
        [main] = [c for c in spec["containers"] if c["name"] == "main"]
        want = {"memory": f"{numbers[step + '-memory-gib']}Gi", "ephemeral-storage": f"{numbers[step + '-disk-gib']}Gi"}
        for section in ("limits", "requests"):  # the template's own cpu and GPU stay beside them
            assert {k: main["resources"][section][k] for k in want} == want, (template, section)
    [term] = sized["train-gpu"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert term["values"] == [numbers["train-gpu-gpu-over-mib"]]
    assert not kubelet.errors


def test_distill_runs_kd_targets_and_push_adapter_when_asked(cluster):
    """The optional tasks on the real controller: with kd-weight > 0 kd-targets runs before train (and train takes
    its keyed output), with adapter-repo set push-adapter runs after propose; their Argo `when`s decided by the
    controller itself (the default run above skips both)."""
    plane, kubelet = cluster.plane, cluster.kubelet
    submit_distill(
        plane, "distill-kd", "train-backend=gpu", "kd-weight=0.5", "adapter-repo=https://gitea.example/ml/a.git"
    )
    wf = wait_workflow(plane, kubelet, "distill-kd")
    nodes = nodes_by_template(wf)
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), nodes, kubelet.errors)
    assert {"kd-targets", "push-adapter"} <= set(nodes), nodes
    started = {n["templateName"]: n["startedAt"] for n in wf["status"]["nodes"].values() if n["type"] == "Pod"}
    assert started["kd-targets"] <= started["train-gpu"] and started["propose"] <= started["push-adapter"]
    assert not kubelet.errors


def test_train_gpu_reclaim_is_retried(cluster):
    """A spot reclaim (exit 137) of train-gpu is retried by the template's own retryStrategy expression, evaluated by
    Argo's controller; the retry succeeds and so does the workflow."""
    plane, kubelet = cluster.plane, cluster.kubelet
    kubelet.outcomes.exit_codes[("distill-reclaim", "train-gpu")] = [137]
    submit_distill(plane, "distill-reclaim", "train-backend=gpu")
    wf = wait_workflow(plane, kubelet, "distill-reclaim", timeout=200)
    attempts = nodes_by_template(wf)["train-gpu"]
    assert [a["exitCode"] for a in attempts] == ["137", "0"], attempts
    assert attempts[0]["phase"] == "Failed"
    assert wf["status"]["phase"] == "Succeeded", wf["status"].get("message")


def test_train_gpu_code_error_is_not_retried(cluster):
    """A code error (exit 1) is not retried: the expression excludes exit codes 1 and 2; the workflow fails."""
    plane, kubelet = cluster.plane, cluster.kubelet
    kubelet.outcomes.exit_codes[("distill-error", "train-gpu")] = [1]
    submit_distill(plane, "distill-error", "train-backend=gpu")
    wf = wait_workflow(plane, kubelet, "distill-error")
    attempts = nodes_by_template(wf)["train-gpu"]
    assert [a["exitCode"] for a in attempts] == ["1"], attempts
    assert wf["status"]["phase"] == "Failed"
    assert "convert-gguf" not in nodes_by_template(wf)


def test_mistyped_parameter_is_stopped_by_check_parameters(cluster):
    """A mistyped parameter: check-parameters (its real command, run by the stand-in kubelet) exits non-zero, the
    controller fails the workflow before any other step's pod is created."""
    plane, kubelet = cluster.plane, cluster.kubelet
    submit_distill(plane, "distill-typo", "train-backend=gpu", "lora-r=sixteen")
    wf = wait_workflow(plane, kubelet, "distill-typo")
    nodes = nodes_by_template(wf)
    assert wf["status"]["phase"] == "Failed"
    assert list(nodes) == ["check-parameters"], nodes
    assert nodes["check-parameters"][0]["exitCode"] not in (None, "0")
    assert "lora-r" in kubelet.logs[("distill-typo", "check-parameters")]


# --- the CronWorkflows under templateReferencing: Strict -----------------------------------------------------------


def test_retrain_cron_fires_distill_under_strict_referencing(cluster):
    """The retrain CronWorkflow, fired (`argo submit --from cronwf/…`: the Workflow the cron would create) under
    `templateReferencing: Strict`: check-triggers fires, submit-retrain creates the `distill` Workflow with the
    submitter's token (RBAC as shipped), and that Workflow runs to Succeeded under Strict too."""
    plane, kubelet = cluster.plane, cluster.kubelet
    done = argo(plane, "submit", "--from", "cronwf/distill-retrain-check", "-o", "json")
    name = json.loads(done.stdout)["metadata"]["name"]
    wf = wait_workflow(plane, kubelet, name)
    log = kubelet.logs.get((name, "submit-retrain"))
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), nodes_by_template(wf), log)
    [submit] = [r for r in kubelet.runs if r.workflow == name and r.template == "submit-retrain"]
    assert submit.executor_secret == "distillery-submitter.service-account-token"
    child = next(p["value"] for n in wf["status"]["nodes"].values() if n["templateName"] == "submit-retrain"
                 for p in n["outputs"]["parameters"] if p["name"] == "workflow-name")  # fmt: skip
    created = wait_workflow(plane, kubelet, child)
    assert created["spec"]["workflowTemplateRef"]["name"] == "distill"
    assert created["status"]["phase"] == "Succeeded", (created["status"].get("message"), nodes_by_template(created))


def test_promote_cron_runs_under_strict_referencing(cluster):
    plane, kubelet = cluster.plane, cluster.kubelet
    done = argo(plane, "submit", "--from", "cronwf/distill-promote", "-o", "json")
    name = json.loads(done.stdout)["metadata"]["name"]
    wf = wait_workflow(plane, kubelet, name)
    assert wf["status"]["phase"] == "Succeeded", (wf["status"].get("message"), nodes_by_template(wf))
    assert list(nodes_by_template(wf)) == ["promote"]


# --- distill on the Ray backend ------------------------------------------------------------------------------------

RAY_PARAMS = ("train-backend=ray", "ray-small-workers=1")


@pytest.mark.parametrize(
    ("job_status", "phase"),
    [("SUCCEEDED", "Succeeded"), ("FAILED", "Failed"), ("STOPPED", "Failed")],
)
def test_ray_job_terminal_state_ends_train_ray(cluster, job_status, phase):
    """train-ray on the Ray backend: Argo's `argoexec resource` creates the RayJob with the submitter's token (the
    workflow its controller owner: OwnerReferencesPermissionEnforcement asks for workflows/finalizers update), KubeRay's
    operator builds the RayCluster and submits the job to the head's dashboard through the API server, and the job's
    terminal state, as the dashboard reports it, ends the step through the template's success/failure conditions."""
    plane, kubelet, dashboard = cluster.plane, cluster.kubelet, cluster.dashboard
    name = f"distill-ray-{job_status.lower()}"
    submit_distill(plane, name, *RAY_PARAMS)
    uid = plane.get(f"{WF_API}/{name}")["metadata"]["uid"]
    dashboard.final[uid] = job_status
    wf = wait_workflow(plane, kubelet, name, timeout=240)
    nodes = nodes_by_template(wf)
    assert nodes["train-ray"][0]["phase"] == phase, (nodes, kubelet.logs.get((name, "train-ray")))
    assert wf["status"]["phase"] == phase, (wf["status"].get("message"), nodes)
    assert any(f"--run-id {uid}" in s["entrypoint"].replace("'", "") for s in dashboard.submitted)
    ray_pods = [p for p in kubelet.ray_pods if uid in p["metadata"]["labels"]["ray.io/cluster"]]  # distill-<uid>-…
    # KubeRay's head and worker pods, admitted under `restricted`, run as the account the RayJob names
    assert {p["metadata"]["labels"]["ray.io/node-type"] for p in ray_pods} == {"head", "worker"}
    assert {p["spec"]["serviceAccountName"] for p in ray_pods} == {"distillery-ray"}
    # defect 1 of #26, on Argo's own pod builder: with archiveLogs on for resource templates the controller adds a
    # `wait` container to upload the step's log as the submitter, which holds no S3 role, and the node errs after
    # the RayJob's end; the shipped artifact repository keeps it off, so a resource pod is `main` alone
    resource_runs = [r for r in kubelet.runs if r.workflow == name and r.template in ("train-ray", "delete-rayjob")]
    assert resource_runs and {r.containers for r in resource_runs} == {("main",)}, resource_runs
    if phase == "Succeeded":
        assert "convert-gguf" in nodes
    else:  # the exit handler deletes the RayJob with the submitter's token
        assert nodes["delete-rayjob"][0]["phase"] == "Succeeded", kubelet.logs.get((name, "delete-rayjob"))
