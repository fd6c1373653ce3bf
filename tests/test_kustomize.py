"""What users apply with kustomize builds offline, and its core objects pass the Kubernetes schema strictly:
`kubectl apply -k infra/`, `kubectl apply -k infra/karpenter/`, and the infra/argo-controller/ Component inside an
Argo installation's kustomization. Custom resources are judged against their CRDs elsewhere (test_infra_crds.py,
test_workflows.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.argo_pods import EXECUTOR_SETTINGS
from tests.conftest import ROOT, console_script
from tests.manifests import argo_install, kubernetes_validate
from workflows import serving

# Argo's own ConfigMap as an Argo install ships it (manifests/base/workflow-controller/...), with a key of the user's.
ARGO_CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "workflow-controller-configmap", "namespace": "argo"},
    "data": {"parallelism": "10"},
}


def kustomize(folder: Path) -> list[dict]:
    done = subprocess.run([console_script("kubectl"), "kustomize", str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, f"kubectl kustomize {folder}:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Each build once: infra/, infra/karpenter/, and an Argo installation that uses the Component."""
    argo = argo_install(tmp_path_factory.mktemp("argo-install"), ARGO_CONFIGMAP)
    return {
        "infra": kustomize(ROOT / "infra"),
        "karpenter": kustomize(ROOT / "infra/karpenter"),
        "argo-with-component": kustomize(argo),
    }


def is_core(doc: dict) -> bool:
    """Built into Kubernetes (its schema is kubernetes-validate's), not a custom resource."""
    group = doc["apiVersion"].rpartition("/")[0]
    return group in ("", "apps", "batch", "policy", "rbac.authorization.k8s.io", "networking.k8s.io", "storage.k8s.io")


@pytest.fixture(scope="module")
def schema_results(builds, tmp_path_factory) -> dict[str, str]:
    """kubernetes-validate --strict once over every core object of every build, plus one misspelled object."""
    folder = tmp_path_factory.mktemp("core")
    broken = {**ARGO_CONFIGMAP, "metadata": {**ARGO_CONFIGMAP["metadata"], "labelz": {"a": "b"}}}
    files = []
    for build, docs in [*builds.items(), ("broken", [broken])]:
        for i, doc in enumerate(d for d in docs if is_core(d)):
            files.append(folder / f"{build}-{i}-{doc['kind'].lower()}.yaml")
            files[-1].write_text(yaml.safe_dump(doc))
    return {path.name: line for path, line in kubernetes_validate(files).items()}


def test_infra_builds_with_everything_it_lists(builds):
    kinds = {(d["kind"], d["metadata"]["name"]) for d in builds["infra"]}
    assert {
        ("Namespace", "distillery"),
        ("ServiceAccount", "distillery-steps"),
        ("WorkflowTemplate", "distill"),
        ("Deployment", "distillery-serve-champion"),
        ("Service", "distillery-serve-challenger"),
        ("HTTPRoute", "distillery-summariser"),
    } <= kinds
    namespaced = [d for d in builds["infra"] if d["kind"] != "Namespace"]
    assert {d["metadata"].get("namespace") for d in namespaced} == {"distillery"}


def test_karpenter_builds(builds):
    assert {d["kind"] for d in builds["karpenter"]} == {"NodePool", "EC2NodeClass"}


def test_component_sets_the_executor_security_context_and_keeps_the_rest(builds):
    (configmap,) = builds["argo-with-component"]
    assert configmap["metadata"] == ARGO_CONFIGMAP["metadata"]
    assert configmap["data"]["parallelism"] == ARGO_CONFIGMAP["data"]["parallelism"]
    settings = yaml.safe_load(EXECUTOR_SETTINGS.read_text())["data"]["executor"]
    assert yaml.safe_load(configmap["data"]["executor"]) == yaml.safe_load(settings)
    assert "securityContext" in yaml.safe_load(settings)


def test_merge_patch_applies_as_the_readme_says(tmp_path):
    """`kubectl patch --type merge --patch-file` on Argo's ConfigMap, done locally (no cluster)."""
    live = tmp_path / "configmap.yaml"
    live.write_text(yaml.safe_dump(ARGO_CONFIGMAP))
    done = subprocess.run(
        [console_script("kubectl"), "patch", "--local", "-f", str(live), "--type", "merge",
         "--patch-file", str(EXECUTOR_SETTINGS), "-o", "yaml"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    patched = yaml.safe_load(done.stdout)
    assert patched["metadata"]["namespace"] == "argo" and patched["data"]["parallelism"] == "10"
    assert patched["data"]["executor"] == yaml.safe_load(EXECUTOR_SETTINGS.read_text())["data"]["executor"]


def test_core_objects_pass_the_kubernetes_schema_strictly(schema_results):
    names = list(schema_results)
    assert any(n.startswith("infra-") and "configmap" in n for n in names), names
    assert any("rolebinding" in n for n in names) and any(n.startswith("argo-with-component-") for n in names), names
    assert "did not validate" in schema_results.pop("broken-0-configmap.yaml")
    assert {n: " passed " in line for n, line in schema_results.items()} == dict.fromkeys(schema_results, True)


def test_each_serving_side_logs_what_it_answered_to_a_claim_of_its_own(builds):
    # The audit (item 8): online-metrics believes an outcome only for a request serve logged (--served-log). The
    # Deployments must pass it, to a volume that is writable (the root is read-only) and outlives the pod (not the
    # scratch emptyDir), one writer per claim.
    docs = {(d["kind"], d["metadata"]["name"]): d for d in builds["infra"]}
    claims = []
    for alias in serving.ALIASES:
        deployment = docs[("Deployment", serving.name(alias))]
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert "--served-log" in container["args"], alias
        log = Path(container["args"][container["args"].index("--served-log") + 1])
        mount = next(m for m in container["volumeMounts"] if log.is_relative_to(m["mountPath"]))
        assert not mount.get("readOnly") and mount["mountPath"] != "/tmp", (alias, mount)
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        claim = docs[("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])]
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}, alias  # no second writer during a rollout
        claims.append(claim["metadata"]["name"])
    assert len(set(claims)) == len(serving.ALIASES)  # each side its own log
