"""The admission policies of infra/admission/ (ValidatingAdmissionPolicy, admissionregistration.k8s.io/v1), run with
Kubernetes' own CEL environment and admission code (engines/harness, op `admission`: k8s.io/apiserver's validating
plugin at the harness's Kubernetes version) on what the project renders — the RayJob, every pod Argo would create —
and on broken copies, each refused by the rule meant for it and by no other. The API server's matching (namespace,
labels, resources) is checked on the YAML; a real API server runs them when the engines issue's control plane does."""

from __future__ import annotations

import copy
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from steps.core import trust
from tests.argo_pods import shipped_config, workflow_pods
from tests.conftest import ROOT
from tests.engines import ENGINES_SH, harness
from tests.manifests import rendered_rayjob
from tests.test_pod_security import argo_docs
from workflows import distill, security
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images, argo_release, argoexec_from_env, argoexec_problems, default_argoexec
from workflows.render import main as render_main
from workflows.render import step_pods_policy

RAYJOB_POLICY, RAYJOB_BINDING = yaml.safe_load_all((ROOT / "infra/admission/rayjob-pods.yaml").read_text())
PODS_POLICY, PODS_BINDING = yaml.safe_load_all((ROOT / "infra/admission/step-pods.yaml").read_text())
RAYJOBS = "rayjobs.v1.ray.io"
PODS = "pods.v1."


def judge(policy: dict, objects: list[dict], resource: str) -> list[list[dict]]:
    """Every decision of `policy` on the CREATE of each object, in one harness run."""
    answers = harness([{"op": "admission", "policy": policy, "object": o, "resource": resource} for o in objects])
    for a in answers:
        assert "error" not in a, a["error"]
    return [a["value"] for a in answers]


def refusals(decisions: list[dict]) -> list[str]:
    assert all(d["evaluation"] != "error" for d in decisions), decisions  # a rule that fails to compile or run
    return [d["message"] for d in decisions if d["action"] != "admit"]


def engines_path(name: str) -> str:
    """Where scripts/engines.sh builds `name` (its folder is <name>-<release>); builds nothing."""
    return subprocess.run([ENGINES_SH, "--path", name], check=True, capture_output=True, text=True).stdout.strip()


def variable(policy: dict, name: str) -> set[str]:
    expression = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == name)
    return set(yaml.safe_load(expression))  # a CEL list of string literals reads as a YAML flow sequence


# --- the RayJob -------------------------------------------------------------------------------------------------------


def broken_rayjobs() -> dict[str, tuple[dict, str]]:
    """name → (a RayJob broken one way, a word of the one message that must refuse it)."""
    base = rendered_rayjob()
    cases: dict[str, tuple[dict, str]] = {}

    def case(name: str, needle: str):
        job = copy.deepcopy(base)
        cases[name] = (job, needle)
        return job

    spec = case("worker as another account", "distillery-ray")["spec"]
    spec["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"]["serviceAccountName"] = "argo-server"
    del case("head without an account", "distillery-ray")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"][
        "spec"
    ]["serviceAccountName"]
    head = case("head with a token", "API token")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["automountServiceAccountToken"] = True
    head = case("secret volume", "mount no Secret")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["volumes"].append({"name": "loot", "secret": {"secretName": "argo-server-sso"}})
    worker = case("projected token", "mount no Secret")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    worker["spec"].setdefault("volumes", []).append(
        {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    )
    worker = case("env from a foreign secret", "environment only from")["spec"]["rayClusterSpec"]["workerGroupSpecs"][
        0
    ]["template"]["spec"]
    worker["containers"][0]["env"].append(
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "distillery-mlflow", "key": "token"}}}
    )
    head = case("envFrom a secret", "environment only from")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    head["spec"]["containers"][0]["envFrom"] = [{"secretRef": {"name": "distillery-s3"}}]
    job = case("joins a cluster", "own Ray cluster")
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "someone-elses"}
    job = case("submitter pod", "HTTPMode")
    job["spec"]["submissionMode"] = "K8sJobMode"
    job = case("submitter template", "HTTPMode")
    job["spec"]["submitterPodTemplate"] = {
        "spec": {"serviceAccountName": "distillery-ray", "automountServiceAccountToken": False, "containers": []}
    }
    return cases


def test_the_rendered_rayjob_is_admitted():
    (decisions,) = judge(RAYJOB_POLICY, [rendered_rayjob()], RAYJOBS)
    assert len(decisions) == len(RAYJOB_POLICY["spec"]["validations"])
    assert refusals(decisions) == []


def test_each_broken_rayjob_is_refused_by_its_rule_alone():
    cases = broken_rayjobs()
    answers = judge(RAYJOB_POLICY, [job for job, _ in cases.values()], RAYJOBS)
    for (name, (_, needle)), decisions in zip(cases.items(), answers, strict=True):
        refused = refusals(decisions)
        assert len(refused) == 1 and needle in refused[0], (name, refused)


def test_a_rule_that_does_not_compile_is_an_error_not_an_admit():
    broken = copy.deepcopy(RAYJOB_POLICY)
    broken["spec"]["validations"][0]["expression"] = "object.spec.rayClusterSpec.("
    (decisions,) = judge(broken, [rendered_rayjob()], RAYJOBS)
    assert decisions[0]["evaluation"] == "error" and decisions[0]["action"] == "deny"  # failurePolicy: Fail


def test_the_rayjob_may_use_exactly_the_secrets_the_ray_pods_are_given():
    given = {e.secret for credential, users in security.USERS.items() if "train-ray" in users
             for e in security.SECRETS[credential]}  # fmt: skip
    assert variable(RAYJOB_POLICY, "allowedSecrets") == given


# --- the pods Argo creates --------------------------------------------------------------------------------------------


def step_pods() -> dict[str, dict]:
    config = shipped_config()
    return {f"{stem}/{n}": p for stem, doc in argo_docs().items() for n, p in workflow_pods(doc, config).items()}


def test_every_pod_argo_would_create_is_admitted():
    pods = step_pods()
    answers = judge(PODS_POLICY, list(pods.values()), PODS)
    assert {name: refusals(d) for name, d in zip(pods, answers, strict=True) if refusals(d)} == {}
    assert len(pods) > 20


def test_a_patched_pod_is_refused():
    """What a compromised preflight's podSpecPatch could add to a later step's pod, each refused. (convert-gguf: one
    that takes the patch and holds only the shared role; register's and the gather's pods are held to more, below.)"""
    pod = step_pods()["distill-workflowtemplate/convert-gguf"]
    variants = {}
    variants["account"] = copy.deepcopy(pod)
    variants["account"]["spec"]["serviceAccountName"] = "argo-server"
    variants["secret volume"] = copy.deepcopy(pod)
    variants["secret volume"]["spec"]["volumes"].append({"name": "x", "secret": {"secretName": "argo-server-sso"}})
    variants["host path"] = copy.deepcopy(pod)
    variants["host path"]["spec"]["volumes"].append({"name": "x", "hostPath": {"path": "/"}})
    variants["env"] = copy.deepcopy(pod)
    variants["env"]["spec"]["containers"][-1]["env"].append(
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "kube-root-secrets", "key": "k"}}}
    )
    answers = judge(PODS_POLICY, list(variants.values()), PODS)
    needles = {"account": "runs as one of", "secret volume": "mounts Secrets only", "host path": "no host path",
               "env": "environment only from"}  # fmt: skip
    for (name, _), decisions in zip(variants.items(), answers, strict=True):
        refused = refusals(decisions)
        assert len(refused) == 1 and needles[name] in refused[0], (name, refused)


def test_the_pod_policy_allows_exactly_what_the_templates_use():
    pods = step_pods().values()
    accounts = {p["spec"]["serviceAccountName"] for p in pods}
    volumes = {v["secret"]["secretName"] for p in pods for v in p["spec"].get("volumes", []) if "secret" in v}
    env = {e["valueFrom"]["secretKeyRef"]["name"] for p in pods
           for c in p["spec"]["containers"] + p["spec"].get("initContainers", []) for e in c.get("env", [])
           if "secretKeyRef" in e.get("valueFrom", {})}  # fmt: skip
    assert variable(PODS_POLICY, "accounts") == accounts
    assert variable(PODS_POLICY, "secretVolumes") == volumes
    assert variable(PODS_POLICY, "secretEnv") == env
    # The images of the pods held to their step: register, the gather, a CPU shard; a GPU shard.
    images = {n: main_of(p)["image"] for n, p in step_pods().items() if n.startswith("distill-workflowtemplate/")}
    stems = ("register", "evaluate", "evaluate-shard-cpu")
    assert variable(PODS_POLICY, "projectImages") == {images[f"distill-workflowtemplate/{n}"] for n in stems}
    assert variable(PODS_POLICY, "shardImages") == {images["distill-workflowtemplate/evaluate-shard-gpu"]}
    # The private CA's ConfigMap, mounted where the templates mount it (a CEL map reads as a YAML flow mapping).
    mounts = {(v["name"], v["configMap"]["name"]) for p in pods for v in p["spec"]["volumes"] if "configMap" in v}
    assert mounts == {(security.TRUST_VOLUME, trust.CONFIGMAP)}
    fixed = next(v["expression"] for v in PODS_POLICY["spec"]["variables"] if v["name"] == "fixedMounts")
    assert yaml.safe_load(fixed)[security.TRUST_VOLUME] == trust.DIR
    assert f"v.configMap.name == '{trust.CONFIGMAP}'" in yaml.safe_dump(PODS_POLICY["spec"]["validations"], width=999)


# --- matching and installation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy,binding", [(RAYJOB_POLICY, RAYJOB_BINDING), (PODS_POLICY, PODS_BINDING)])
def test_the_policies_deny_in_the_namespace_and_are_installed(policy, binding):
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": security_namespace()}
    resources = yaml.safe_load((ROOT / "infra/kustomization.yaml").read_text())["resources"]
    assert {"admission/rayjob-pods.yaml", "admission/step-pods.yaml"} <= set(resources)


def security_namespace() -> str:
    return yaml.safe_load((ROOT / "infra/namespace.yaml").read_text())["metadata"]["name"]


def test_the_pod_policy_matches_argo_s_pods_only():
    selector = PODS_POLICY["spec"]["matchConstraints"]["objectSelector"]
    assert selector == {"matchExpressions": [{"key": "workflows.argoproj.io/workflow", "operator": "Exists"}]}
    assert all("workflows.argoproj.io/workflow" in p["metadata"]["labels"] for p in step_pods().values())


# --- EKS: the pod identity webhook's mutation ---------------------------------------------------------------------


def irsa_roles() -> dict[str, str]:
    """account -> the IAM role its `eks.amazonaws.com/role-arn` annotation names (infra/rbac/)."""
    docs = yaml.safe_load_all((ROOT / "infra/rbac/serviceaccount.yaml").read_text())
    return {d["metadata"]["name"]: d["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] for d in docs
            if d and d["kind"] == "ServiceAccount" and "eks.amazonaws.com/role-arn" in
            (d["metadata"].get("annotations") or {})}  # fmt: skip


EKS_TOKEN_DIR = "/var/run/secrets/eks.amazonaws.com/serviceaccount"


def eks_mutated(pod: dict, role: str) -> dict:
    """The pod as amazon-eks-pod-identity-webhook leaves it for an annotated account (pkg/handler: Modifier defaults
    volName `aws-iam-token`, tokenName `token`, Audience `sts.amazonaws.com`, Expiration 86400, MountPath; the
    variables `addEnvToContainer` adds to every container and init container)."""
    pod = copy.deepcopy(pod)
    token = {"audience": "sts.amazonaws.com", "expirationSeconds": 86400, "path": "token"}
    volume = {"name": "aws-iam-token", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": token}]}}
    pod["spec"]["volumes"].insert(0, volume)
    env = [("AWS_STS_REGIONAL_ENDPOINTS", "regional"), ("AWS_DEFAULT_REGION", "eu-west-1"),
           ("AWS_REGION", "eu-west-1"), ("AWS_ROLE_ARN", role),
           ("AWS_WEB_IDENTITY_TOKEN_FILE", f"{EKS_TOKEN_DIR}/token")]  # fmt: skip
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        c.setdefault("env", []).extend({"name": k, "value": v} for k, v in env)
        c.setdefault("volumeMounts", []).append({"name": "aws-iam-token", "readOnly": True, "mountPath": EKS_TOKEN_DIR})
    return pod


def eks_pods() -> dict[str, dict]:
    roles = irsa_roles()
    return {name: eks_mutated(pod, roles[pod["spec"]["serviceAccountName"]]) for name, pod in step_pods().items()
            if pod["spec"]["serviceAccountName"] in roles}  # fmt: skip


def test_every_step_pod_the_eks_webhook_mutated_is_admitted():
    pods = eks_pods()
    assert {"distill-workflowtemplate/register", "distill-workflowtemplate/evaluate"} <= set(pods)
    answers = judge(PODS_POLICY, list(pods.values()), PODS)
    assert {name: refusals(d) for name, d in zip(pods, answers, strict=True) if refusals(d)} == {}


def test_only_the_webhook_s_own_token_is_admitted():
    pod = eks_pods()["distill-workflowtemplate/convert-gguf"]
    variants = {}
    variants["api audience"] = copy.deepcopy(pod)
    variants["api audience"]["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["audience"] = (
        "https://kubernetes.default.svc"
    )
    variants["no audience"] = copy.deepcopy(pod)
    del variants["no audience"]["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["audience"]
    variants["another name"] = copy.deepcopy(pod)
    variants["another name"]["spec"]["volumes"].append(
        {**copy.deepcopy(pod["spec"]["volumes"][0]), "name": "more-tokens"}
    )
    variants["a secret beside it"] = copy.deepcopy(pod)
    variants["a secret beside it"]["spec"]["volumes"][0]["projected"]["sources"].append(
        {"secret": {"name": "argo-server-sso"}}
    )
    variants["mounted elsewhere"] = copy.deepcopy(pod)
    variants["mounted elsewhere"]["spec"]["containers"][-1]["volumeMounts"][-1]["mountPath"] = "/work/in/token"
    answers = judge(PODS_POLICY, list(variants.values()), PODS)
    needles = {"mounted elsewhere": "is mounted at"}
    for (name, _), decisions in zip(variants.items(), answers, strict=True):
        refused = refusals(decisions)
        assert len(refused) == 1 and needles.get(name, "no projected token but") in refused[0], (name, refused)


# --- the pods with power: register's account, the verdict's signing key ----------------------------------------------


def main_of(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "main")


def powered_variants() -> dict[str, tuple[dict, str]]:
    """name -> (a pod a podSpecPatch could make, a word of a message that must refuse it)."""
    pods = eks_pods()
    register, gather = pods["distill-workflowtemplate/register"], pods["distill-workflowtemplate/evaluate"]
    convert = pods["distill-workflowtemplate/convert-gguf"]
    cases: dict[str, tuple[dict, str]] = {}

    def case(name: str, pod: dict, needle: str) -> dict:
        pod = copy.deepcopy(pod)
        cases[name] = (pod, needle)
        return pod

    case("another step as register", convert, "runs only python -m steps.register")["spec"]["serviceAccountName"] = (
        security.REGISTER
    )
    main = main_of(case("a shell as register", register, "runs only python -m steps.register"))
    main["command"] = [*main["command"][:-1], "sh"]
    main["args"] = ["-c", "aws s3 cp s3://x s3://y"]
    main = main_of(case("a python one-liner as register", register, "runs only python -m steps.register"))
    main["args"] = ["-c", "import os", *main["args"]]
    main = main_of(case("a second -- as register", register, "runs only python -m steps.register"))
    main["command"] = [*main["command"][:-1], "env", "X=1", "--", "python"]
    main_of(case("another image", register, "runs its step as rendered"))["image"] = "evil.example/distillery-cpu:1"
    main_of(case("PYTHONPATH", register, "runs its step as rendered"))["env"].append(
        {"name": "PYTHONPATH", "value": "/work/in/evaluation"}
    )
    main_of(case("a working directory", register, "runs its step as rendered"))["workingDir"] = "/work/in/evaluation"
    main_of(case("envFrom", register, "runs its step as rendered"))["envFrom"] = [{"configMapRef": {"name": "x"}}]
    main_of(case("artifacts over the key", register, "runs its step as rendered"))["volumeMounts"].append(
        {"name": "input-artifacts", "mountPath": "/var/run/secrets/distillery-verdict", "subPath": "evaluation"}
    )
    main_of(case("artifacts over the code", register, "runs its step as rendered"))["volumeMounts"].append(
        {"name": "input-artifacts", "mountPath": "/usr/local/lib/python3.11/site-packages/steps", "subPath": "x"}
    )
    pod = case("no public key", register, "runs its step as rendered")
    main_of(pod)["volumeMounts"] = [m for m in main_of(pod)["volumeMounts"]
                                    if m["name"] != "secret-distillery-verdict-public"]  # fmt: skip
    pod = case("a sidecar", register, "runs its step as rendered")
    pod["spec"]["containers"].append({**copy.deepcopy(main_of(register)), "name": "helper"})
    wait = next(c for c in case("emissary in wait", register, "runs its step as rendered")["spec"]["containers"]
                if c["name"] == "wait")  # fmt: skip
    wait["command"] = ["argoexec", "emissary", "--", "sh", "-c", "x"]
    pod = case("the key in another step", convert, "signing key")
    pod["spec"]["volumes"].append({"name": "secret-distillery-verdict-key",
                                   "secret": {"secretName": "distillery-verdict-key"}})  # fmt: skip
    main_of(case("the gather without --gather", gather, "signing key"))["args"] = ["-m", "steps.evaluate", "--shard",
                                                                                   "0/2"]  # fmt: skip
    main_of(case("the gather's image", gather, "runs its step as rendered"))["image"] = "alpine:3"
    # The shards' key: in a shard of evaluate only (cpu or cuda image), and held to the template like the others.
    shard_cpu, shard_gpu = pods["distill-workflowtemplate/evaluate-shard-cpu"], pods[
        "distill-workflowtemplate/evaluate-shard-gpu"]  # fmt: skip
    pod = case("the shard key in another step", convert, "shards' signing key")
    pod["spec"]["volumes"].append({"name": "secret-distillery-shard-key",
                                   "secret": {"secretName": "distillery-shard-key"}})  # fmt: skip
    pod = case("the shard key in the gather", gather, "shards' signing key")
    pod["spec"]["volumes"].append({"name": "secret-distillery-shard-key",
                                   "secret": {"secretName": "distillery-shard-key"}})  # fmt: skip
    main_of(case("a shard turned gather", shard_cpu, "shards' signing key"))["args"] = [
        "-m", "steps.evaluate", "--gather", "/work/in/evaluation-shards"]  # fmt: skip
    main = main_of(case("a shell with the shard key", shard_gpu, "shards' signing key"))
    main["command"] = [*main["command"][:-1], "sh"]
    main["args"] = ["-c", "cat /var/run/secrets/distillery-shard/private-key"]
    main_of(case("the shard's image", shard_gpu, "runs its step as rendered"))["image"] = "alpine:3"
    main_of(case("a shard with PYTHONPATH", shard_cpu, "runs its step as rendered"))["env"].append(
        {"name": "PYTHONPATH", "value": "/work/in/dataset"}
    )
    main_of(case("the shard key where artifacts go", shard_cpu, "runs its step as rendered"))["volumeMounts"].append(
        {"name": "input-artifacts", "mountPath": "/var/run/secrets/distillery-shard", "subPath": "dataset"}
    )
    # The private CA: only the ConfigMap distillery-trust, only where the template mounts it. Another ConfigMap, or
    # the trust mounted over certifi's store, would choose which servers register believes.
    pod = case("another ConfigMap as the trust", register, "runs its step as rendered")
    next(v for v in pod["spec"]["volumes"] if v["name"] == security.TRUST_VOLUME)["configMap"]["name"] = "elsewhere"
    main = main_of(case("the trust over certifi's store", register, "runs its step as rendered"))
    next(m for m in main["volumeMounts"] if m["name"] == security.TRUST_VOLUME)["mountPath"] = (
        "/usr/local/lib/python3.11/site-packages/certifi"
    )
    # The egress label opens HTTPS to any public host (infra/networkpolicy/steps.yaml); a workflow's podMetadata can
    # put it on any pod, so the powered ones refuse it: a key or register's role never gets a way out on 443.
    for name, pod in (("register", register), ("the gather", gather), ("a shard", shard_gpu)):
        labelled = case(f"{name} with the internet label", pod, "carries no distillery/egress label")
        labelled["metadata"].setdefault("labels", {})[security.EGRESS_LABEL] = security.INTERNET
    return cases


def test_register_s_account_and_the_signing_key_run_only_their_own_step():
    cases = powered_variants()
    answers = judge(PODS_POLICY, [pod for pod, _ in cases.values()], PODS)
    for (name, (_, needle)), decisions in zip(cases.items(), answers, strict=True):
        refused = refusals(decisions)
        assert any(needle in r for r in refused), (name, refused)


def test_the_verdict_s_keys_reach_the_gather_and_the_verifiers_only():
    # The signing key in evaluate's gather alone; the public key in register and propose. The shards' key in the
    # shards alone; its public half in the gather.
    mounted: dict[str, set[str]] = {}
    for name, pod in step_pods().items():
        for v in pod["spec"]["volumes"]:
            if "secret" in v and v["secret"]["secretName"].startswith(("distillery-verdict", "distillery-shard")):
                mounted.setdefault(v["secret"]["secretName"], set()).add(name.split("/")[1])
    assert mounted == {
        "distillery-verdict-key": {"evaluate"}, "distillery-verdict-public": {"register", "propose"},
        "distillery-shard-key": {"evaluate-shard-cpu", "evaluate-shard-gpu"}, "distillery-shard-public": {"evaluate"},
    }  # fmt: skip


def test_the_powered_pods_variables_are_the_templates_and_the_webhook_s():
    pods = step_pods()
    powered = ("register", "evaluate", "evaluate-shard-cpu", "evaluate-shard-gpu")
    used = {e["name"] for n in powered for e in main_of(pods[f"distill-workflowtemplate/{n}"])["env"]}
    webhook = {e["name"] for e in main_of(eks_pods()["distill-workflowtemplate/register"])["env"]} - used
    argo = {name for name in used if name.startswith("ARGO_")}  # Argo's own: admitted by their prefix
    assert variable(PODS_POLICY, "mainEnv") == (used - argo) | webhook


# --- the project's images: exactly the references the render wrote, by digest where it knew one ------------------


PINNED = Images(
    DEFAULT_IMAGES.registry, DEFAULT_IMAGES.tag, {"cpu": "sha256:" + "a" * 64, "cuda": "sha256:" + "b" * 64}
)
POWERED = ("register", "evaluate", "evaluate-shard-cpu", "evaluate-shard-gpu")


def powered_pods(images: Images) -> dict[str, dict]:
    """register's, the gather's and the shards' pods as Argo creates them from distill rendered with `images`."""
    pods = workflow_pods(distill.build(images).to_dict(), shipped_config())
    return {name: pods[name] for name in POWERED}


def with_image(pod: dict, image: str) -> dict:
    pod = copy.deepcopy(pod)
    main_of(pod)["image"] = image
    return pod


def test_a_pinned_render_admits_exactly_its_digests_and_refuses_a_tag():
    """Rendered with DISTILLERY_IMAGE_DIGEST_CPU/_CUDA, the templates name `<repo>:<tag>@sha256:…`; the policy the same
    render writes admits those pods, and refuses the same pod naming the tag alone, another digest or another tag (a
    podSpecPatch or a later template change could swap the image; a tag is whatever was pushed under it last)."""
    (policy, _) = yaml.safe_load_all(step_pods_policy(PINNED))
    pods = powered_pods(PINNED)
    assert {main_of(p)["image"] for p in pods.values()} == {PINNED.ref("cpu"), PINNED.ref("cuda")}
    other = Images(PINNED.registry, PINNED.tag, {"cpu": "sha256:" + "c" * 64, "cuda": "sha256:" + "d" * 64})
    variants = {f"{name} as rendered": (pod, True) for name, pod in pods.items()}
    for name, pod in pods.items():
        kind = "cuda" if name == "evaluate-shard-gpu" else "cpu"
        variants[f"{name} by its tag"] = (with_image(pod, DEFAULT_IMAGES.ref(kind)), False)
        variants[f"{name} by another digest"] = (with_image(pod, other.ref(kind)), False)
        variants[f"{name} by another tag"] = (with_image(pod, Images(PINNED.registry, "0.2.0").ref(kind)), False)
    answers = judge(policy, [pod for pod, _ in variants.values()], PODS)
    for (name, (_, admitted)), decisions in zip(variants.items(), answers, strict=True):
        refused = refusals(decisions)
        if admitted:
            assert refused == [], (name, refused)
        else:
            assert len(refused) == 1 and "runs its step as rendered" in refused[0], (name, refused)
            assert PINNED.ref("cpu") in refused[0], (name, refused)  # the message names what is admitted


def test_the_shipped_policy_refuses_another_tag_of_the_project_s_images():
    """Unpinned (the committed render), the references are the render's tag: another tag of the same repository is
    another image, refused like any other (before, any tag of ghcr.io/distillery-ml/distillery-cpu was admitted)."""
    pods = powered_pods(DEFAULT_IMAGES)
    later = Images(DEFAULT_IMAGES.registry, "0.2.0", {"cpu": "sha256:" + "e" * 64})
    variants = {}
    for name, pod in pods.items():
        kind = "cuda" if name == "evaluate-shard-gpu" else "cpu"
        variants[f"{name} by another tag"] = with_image(pod, later.ref(kind))
    answers = judge(PODS_POLICY, [*pods.values(), *variants.values()], PODS)
    assert [refusals(d) for d in answers[: len(pods)]] == [[]] * len(pods)
    for name, decisions in zip(variants, answers[len(pods) :], strict=True):
        refused = refusals(decisions)
        assert len(refused) == 1 and "runs its step as rendered" in refused[0], (name, refused)


# --- Argo's executor: exactly the image of the Argo release the project is built for, or the one the render is given


ARGOEXEC_DIGEST = "sha256:" + "f" * 64
MIRRORED = f"registry.example.com/mirror/argoexec:v4.0.6@{ARGOEXEC_DIGEST}"


def with_executor(pod: dict, image: str) -> dict:
    """`pod` with every container of Argo's but `main` (init, wait) naming `image`."""
    pod = copy.deepcopy(pod)
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        if c["name"] != "main":
            c["image"] = image
    return pod


def test_the_shipped_policy_admits_argo_s_executor_at_the_tested_release_and_no_other_tag():
    """The pods that hold more than the shared role run Argo's `init` and `wait` beside their step. The policy admits
    the executor image of the Argo release the project is built and tested against (engines/harness/go.mod's, where
    scripts/engines.sh builds the controller and argoexec too), whole; another tag of argoexec (one that starts with
    the pinned tag too), the same tag under another registry or argoexec by a digest alone are other images, refused
    (before: any reference starting `quay.io/argoproj/argoexec:` or `…@`)."""
    release = argo_release()
    assert default_argoexec() == f"quay.io/argoproj/argoexec:{release}"
    assert Path(engines_path("argoexec")).parent.name == f"argoexec-{release}"  # the executor the node runs
    assert Path(engines_path("workflow-controller")).parent.name == f"workflow-controller-{release}"
    assert variable(PODS_POLICY, "executorImages") == {default_argoexec()}
    pods = powered_pods(DEFAULT_IMAGES)
    executors = {c["image"] for p in pods.values() for c in p["spec"]["containers"] + p["spec"]["initContainers"]
                 if c["name"] != "main"}  # fmt: skip
    assert executors == {default_argoexec()}
    others = ("quay.io/argoproj/argoexec:v4.0.4", "quay.io/argoproj/argoexec:latest",
              f"quay.io/argoproj/argoexec:{release}-rc1", f"quay.io/argoproj/argoexec@{ARGOEXEC_DIGEST}",
              f"registry.example.com/argoproj/argoexec:{release}")  # fmt: skip
    variants = {f"{name} with argoexec {image}": with_executor(pod, image) for name, pod in pods.items()
                for image in others}  # fmt: skip
    answers = judge(PODS_POLICY, [*pods.values(), *variants.values()], PODS)
    assert [refusals(d) for d in answers[: len(pods)]] == [[]] * len(pods)
    for name, decisions in zip(variants, answers[len(pods) :], strict=True):
        refused = refusals(decisions)
        # the rule every step pod answers to (test_a_controller_with_another_executor_is_refused_at_the_first_pod…)
        assert len(refused) == 1 and "--argoexec-image" in refused[0], (name, refused)
        assert f"Argo's executor (init, wait, supervisor) must be {default_argoexec()}" in refused[0], (name, refused)


def test_a_controller_with_another_executor_is_refused_at_the_first_pod_with_the_fix_named():
    """A controller whose executor.image is not the one rendered (a newer Argo, a mirror, with the shipped render) is
    refused at every pod the workflows create, check-parameters' first, not only at register's after training ran:
    each pod of every template refused, the message naming the admitted executor and --argoexec-image."""
    pods = step_pods()
    other = {name: with_executor(pod, "quay.io/argoproj/argoexec:v4.0.7") for name, pod in pods.items()}
    answers = judge(PODS_POLICY, list(other.values()), PODS)
    for name, decisions in zip(other, answers, strict=True):
        named = [r for r in refusals(decisions) if "--argoexec-image" in r]
        assert len(named) == 1 and default_argoexec() in named[0], (name, refusals(decisions))
    assert "distill-workflowtemplate/check-parameters" in other, sorted(other)


def test_a_render_given_a_mirrored_argoexec_admits_exactly_it():
    """An installation whose controller names a mirrored executor (or another release, by digest) renders with
    `--argoexec-image` (DISTILLERY_ARGOEXEC_IMAGE): the policy admits that reference and refuses Argo's default."""
    (policy, _) = yaml.safe_load_all(step_pods_policy(DEFAULT_IMAGES, argoexec=MIRRORED))
    assert variable(policy, "executorImages") == {MIRRORED}
    pods = workflow_pods(distill.build(DEFAULT_IMAGES).to_dict(), replace(shipped_config(), executor_image=MIRRORED))
    mirrored = {name: pods[name] for name in POWERED}
    default = {f"{name} with Argo's default executor": with_executor(p, default_argoexec())
               for name, p in mirrored.items()}  # fmt: skip
    answers = judge(policy, [*mirrored.values(), *default.values()], PODS)
    assert [refusals(d) for d in answers[: len(mirrored)]] == [[]] * len(mirrored)
    for name, decisions in zip(default, answers[len(mirrored) :], strict=True):
        refused = refusals(decisions)
        assert len(refused) == 1 and f"must be {MIRRORED}" in refused[0], (name, refused)


def test_the_render_refuses_an_executor_that_is_not_a_whole_reference(capsys: pytest.CaptureFixture):
    for prefix in ("quay.io/argoproj/argoexec:", "quay.io/argoproj/argoexec", "quay.io/argoproj/argoexec@sha256:1"):
        assert argoexec_problems(prefix), prefix
        with pytest.raises(SystemExit):
            render_main(["--check", "--argoexec-image", prefix])
        assert "--argoexec-image" in capsys.readouterr().err
        with pytest.raises(ValueError, match="DISTILLERY_ARGOEXEC_IMAGE"):
            argoexec_from_env({"DISTILLERY_ARGOEXEC_IMAGE": prefix})
    assert argoexec_problems(MIRRORED) == []
    assert argoexec_from_env({"DISTILLERY_ARGOEXEC_IMAGE": MIRRORED}) == MIRRORED
    assert argoexec_from_env({}) == default_argoexec()


def test_the_render_names_the_image_lists_it_cannot_find():
    text = (ROOT / "infra/admission/step-pods.yaml").read_text()
    assert step_pods_policy(DEFAULT_IMAGES, text) == text  # the committed file is the default render
    broken = text.replace("- name: shardImages", "- name: gpuImages")
    with pytest.raises(ValueError, match="expected one variable shardImages"):
        step_pods_policy(PINNED, broken)
