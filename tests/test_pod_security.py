"""The pods Argo and KubeRay would create for infra/argo/*.yaml, judged as the `distillery` namespace judges them:
Pod Security `restricted` (tests/pod_security.py, ported from Kubernetes) and the Pod schema (kubernetes-validate).

The pods are built by tests/argo_pods.py the way the controllers build them, with the Argo controller settings this
project ships (infra/argo-controller/, read from there) — and without them, to show the check sees the containers
Argo adds."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.argo_pods import (
    PLAUSIBLE_POD_SPEC_PATCH,
    ControllerConfig,
    apply_pod_spec_patches,
    fill_pod_spec_patch,
    rayjob_pods,
    shipped_config,
    template_type,
    workflow_pods,
    workflow_spec,
    write_pods,
)
from tests.conftest import ROOT
from tests.manifests import kubernetes_validate, rendered_rayjob
from tests.pod_security import CHECKS, check, violations
from workflows import security
from workflows.deploy import account

ARGO_FILES = sorted((ROOT / "infra/argo").glob("*.yaml"))
LAYOUTS = {"legacy": False, "initless": True}  # Argo's default layout, and v4.1's opt-in init-less one


@functools.cache
def _parsed() -> dict[str, dict]:
    return {
        path.stem: yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        for path in ARGO_FILES
    }


def argo_docs() -> dict[str, dict]:
    """The rendered Argo objects by file stem (a fresh copy: tests change them)."""
    return copy.deepcopy(_parsed())


def pods(config: ControllerConfig) -> dict[str, dict]:
    """`<file stem>/<template>` → the pod Argo creates for that template."""
    return {
        f"{stem}/{name}": pod for stem, doc in argo_docs().items() for name, pod in workflow_pods(doc, config).items()
    }


def argo_templates() -> dict[str, dict]:
    """`<file stem>/<template>` → every template that runs as a pod."""
    docs = argo_docs()
    return {
        f"{stem}/{t['name']}": t
        for stem, doc in docs.items()
        for t in workflow_spec(doc)["templates"]
        if template_type(t)
    }


TEMPLATES = argo_templates()
POD_TEMPLATES = sorted(TEMPLATES)
CONTAINER_TEMPLATES = [
    k for k in POD_TEMPLATES if template_type(TEMPLATES[k]) in ("container", "script", "containerSet")
]


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict[str, dict]]:
    return {layout: pods(shipped_config(initless=initless)) for layout, initless in LAYOUTS.items()}


@pytest.fixture(scope="module")
def argo_defaults() -> dict[str, dict]:
    return pods(ControllerConfig())


def test_namespace_enforces_latest_restricted():
    labels = yaml.safe_load((ROOT / "infra/namespace.yaml").read_text())["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels.get("pod-security.kubernetes.io/enforce-version", "latest") == "latest"


def test_every_file_has_pod_templates():
    assert {key.split("/")[0] for key in POD_TEMPLATES} == {p.stem for p in ARGO_FILES}
    assert CONTAINER_TEMPLATES, "no container templates: the test below would prove nothing"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("key", POD_TEMPLATES)
def test_pod_passes_restricted_with_shipped_settings(shipped, layout, key):
    assert check(shipped[layout][key]) == []


@pytest.mark.parametrize("key", CONTAINER_TEMPLATES)
def test_pod_is_refused_without_the_settings(argo_defaults, key):
    """Argo's default executor has no securityContext: `restricted` refuses its init and wait, not our main."""
    found = check(argo_defaults[key])
    assert found, "the check does not see Argo's init/wait containers"
    text = " ".join(found)
    assert '"init"' in text and '"wait"' in text and '"main"' not in text, found


def test_resource_pods_pass_without_the_settings(argo_defaults):
    """newExecContainer locks resource-template pods down by itself (common.MinimalCtrSC)."""
    resource = [k for k in POD_TEMPLATES if k not in CONTAINER_TEMPLATES]
    assert resource
    assert {k: check(argo_defaults[k]) for k in resource} == {k: [] for k in resource}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_executor_container_gets_the_shipped_security_context(shipped, layout):
    expected = shipped_config().executor["securityContext"]
    for key, pod in shipped[layout].items():
        for ctr in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            if ctr["name"] in ("init", "wait", "supervisor"):
                assert ctr["securityContext"] == expected, f"{key} {ctr['name']}"


def test_pod_security_context_comes_from_the_workflow(shipped):
    docs = argo_docs()
    for key, pod in shipped["legacy"].items():
        spec = workflow_spec(docs[key.split("/")[0]])
        assert pod["spec"]["securityContext"] == spec["securityContext"], key
        # the resource templates (argoexec only) run as the submitter, register as its own account (the one IAM role
        # that writes MLflow's artifacts), every other step as the steps' account
        own = account(key.split("/")[1])
        expected = security.SUBMITTER if "resource" in TEMPLATES[key] else own
        assert pod["spec"]["serviceAccountName"] == expected, key


# --- podSpecPatch --------------------------------------------------------------------------------------------------


PATCHED_TEMPLATES = [k for k in POD_TEMPLATES if "podSpecPatch" in TEMPLATES[k]]


@pytest.mark.parametrize("key", PATCHED_TEMPLATES)
def test_rendered_pod_spec_patch_reaches_main(shipped, key):
    """The templates sized by preflight (a podSpecPatch around preflight's numbers) get the patch on `main`."""
    main = next(c for c in shipped["legacy"][key]["spec"]["containers"] if c["name"] == "main")
    patch = json.loads(fill_pod_spec_patch(TEMPLATES[key]["podSpecPatch"]))
    for section, values in patch["containers"][0]["resources"].items():
        assert main["resources"][section] | values == main["resources"][section], section


def test_template_pod_spec_patch_placeholder_sizes_main():
    stem, name = CONTAINER_TEMPLATES[0].split("/")
    doc = argo_docs()[stem]
    tmpl = next(t for t in workflow_spec(doc)["templates"] if t["name"] == name)
    tmpl["podSpecPatch"] = "{{inputs.parameters.pod-spec-patch}}"
    pod = workflow_pods(doc, shipped_config())[name]
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    for section, values in json.loads(PLAUSIBLE_POD_SPEC_PATCH)["containers"][0]["resources"].items():
        assert main["resources"][section] | values == main["resources"][section], section
    assert main["securityContext"] == tmpl["container"]["securityContext"], "the patch replaced more than resources"
    assert check(pod) == []


def test_workflow_pod_spec_patch_is_applied_and_judged():
    """A patch can undo what the ConfigMap set: it is applied last, and the check sees the result."""
    doc = argo_docs()[CONTAINER_TEMPLATES[0].split("/")[0]]
    workflow_spec(doc)["podSpecPatch"] = yaml.safe_dump(
        {"containers": [{"name": "wait", "securityContext": {"allowPrivilegeEscalation": True}}]}
    )
    pod = workflow_pods(doc, shipped_config())[CONTAINER_TEMPLATES[0].split("/")[1]]
    assert list(violations(pod)) == ["allowPrivilegeEscalation"]


def test_strategic_merge_patch_merges_containers_by_name():
    spec = {
        "containers": [
            {"name": "wait", "image": "w"},
            {"name": "main", "image": "m", "env": [{"name": "A", "value": "1"}]},
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "a", "operator": "Exists"}],
    }
    patch = {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}], "image": None}],
             "tolerations": [{"key": "b", "operator": "Exists"}]}  # fmt: skip
    out = apply_pod_spec_patches(spec, [json.dumps(patch)])
    merged_env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert out["containers"] == [{"name": "wait", "image": "w"}, {"name": "main", "env": merged_env}]
    assert out["volumes"] == spec["volumes"]
    assert out["tolerations"] == [{"key": "b", "operator": "Exists"}], "lists without a merge key are replaced"


# --- KubeRay -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rayjob() -> dict:
    return rendered_rayjob()


@pytest.fixture(scope="module")
def ray_pods(rayjob) -> dict[str, dict]:
    return rayjob_pods(rayjob)


def test_rayjob_pods_pass_restricted(ray_pods):
    assert {"head", "worker-large"} <= set(ray_pods)
    assert "submitter" not in ray_pods, "HTTPMode submits from the operator: no submitter pod"
    assert {name: check(pod) for name, pod in ray_pods.items()} == {name: [] for name in ray_pods}


def test_kuberay_wait_gcs_ready_is_judged_with_the_worker(rayjob):
    """KubeRay's `wait-gcs-ready` init container copies the Ray container's securityContext: drop it and both fail."""
    rayjob = copy.deepcopy(rayjob)
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    del group["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"]
    pod = rayjob_pods(rayjob)[f"worker-{group['groupName']}"]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["wait-gcs-ready"]
    reason = violations(pod)["allowPrivilegeEscalation"]
    assert '"wait-gcs-ready"' in reason and f'"{group["template"]["spec"]["containers"][0]["name"]}"' in reason


def test_kuberay_autoscaler_needs_its_own_security_context(rayjob):
    rayjob = copy.deepcopy(rayjob)
    cluster = rayjob["spec"]["rayClusterSpec"]
    cluster["enableInTreeAutoscaling"] = True
    assert '"autoscaler"' in " ".join(check(rayjob_pods(rayjob)["head"]))
    cluster["autoscalerOptions"] = {
        "securityContext": copy.deepcopy(
            cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["securityContext"]
        )
    }
    assert check(rayjob_pods(rayjob)["head"]) == []


def test_kuberay_default_submitter_pod_is_refused(rayjob):
    """K8sJobMode (KubeRay's default mode) runs a submitter pod without any securityContext."""
    rayjob = copy.deepcopy(rayjob)
    rayjob["spec"].pop("submissionMode")
    assert check(rayjob_pods(rayjob)["submitter"])


# --- each control refuses a broken pod -----------------------------------------------------------------------------


Change = Callable[[dict], object]


def _ctr(name: str) -> Callable[[dict], dict]:
    def get(pod: dict) -> dict:
        spec = pod["spec"]
        return next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name)

    return get


def _sc(get: Callable[[dict], dict]) -> Callable[[dict], dict]:
    return lambda pod: get(pod).setdefault("securityContext", {})


init, main = _ctr("init"), _ctr("main")
init_sc, wait_sc, main_sc = _sc(init), _sc(_ctr("wait")), _sc(main)
pod_sc = _sc(lambda pod: pod["spec"])


def put(get: Callable[[dict], dict], **values) -> Change:
    """Set fields of the object `get` finds in the pod."""
    return lambda pod: get(pod).update(copy.deepcopy(values))


def drop(get: Callable[[dict], dict], key: str) -> Change:
    return lambda pod: get(pod).pop(key)


def volume(**source) -> Change:
    return lambda pod: pod["spec"]["volumes"].append({"name": "extra", **source})


def spec(pod: dict) -> dict:
    return pod["spec"]


def caps(pod: dict) -> dict:
    return init_sc(pod)["capabilities"]


def annotations(pod: dict) -> dict:
    return pod["metadata"]["annotations"]


DEBUG_CONTAINER = {"name": "debug", "image": "busybox", "securityContext": {"allowPrivilegeEscalation": False}}
# check id → what breaks it, on a shipped pod (so `init` and `wait` are Argo's own containers)
BROKEN: dict[str, list[tuple[str, Change]]] = {
    "hostNamespaces": [("hostPID", put(spec, hostPID=True)), ("hostNetwork", put(spec, hostNetwork=True))],
    "privileged": [("init privileged", put(init_sc, privileged=True))],
    "capabilities_baseline": [("init adds SYS_ADMIN", put(caps, add=["SYS_ADMIN"]))],
    "hostPathVolumes": [("hostPath volume", volume(hostPath={"path": "/"}))],
    "hostPorts": [("init hostPort", put(init, ports=[{"containerPort": 80, "hostPort": 80}]))],
    "appArmorProfile": [
        ("main Unconfined", put(main_sc, appArmorProfile={"type": "Unconfined"})),
        ("wait annotation", put(annotations, **{"container.apparmor.security.beta.kubernetes.io/wait": "unconfined"})),
    ],
    "seLinuxOptions": [
        ("init type spc_t", put(init_sc, seLinuxOptions={"type": "spc_t"})),
        ("pod user", put(pod_sc, seLinuxOptions={"user": "root"})),
    ],
    "procMount_baseline": [("init Unmasked", put(init_sc, procMount="Unmasked"))],
    "seccompProfile_baseline": [("pod Unconfined", put(pod_sc, seccompProfile={"type": "Unconfined"}))],
    "sysctls": [("kernel.msgmax", put(pod_sc, sysctls=[{"name": "kernel.msgmax", "value": "1"}]))],
    "windowsHostProcess": [("pod hostProcess", put(pod_sc, windowsOptions={"hostProcess": True}))],
    "hostProbesAndHostLifecycle": [
        ("main probe host", put(main, livenessProbe={"httpGet": {"port": 80, "host": "10.0.0.1"}})),
        ("init preStop host", put(init, lifecycle={"preStop": {"tcpSocket": {"port": 80, "host": "node"}}})),
    ],
    "restrictedVolumes": [("nfs volume", volume(nfs={"server": "s", "path": "/"}))],
    "allowPrivilegeEscalation": [
        ("init unset", drop(init_sc, "allowPrivilegeEscalation")),
        ("wait true", put(wait_sc, allowPrivilegeEscalation=True)),
    ],
    "runAsNonRoot": [
        ("pod false", put(pod_sc, runAsNonRoot=False)),
        ("pod and main unset", lambda p: (drop(pod_sc, "runAsNonRoot")(p), drop(main_sc, "runAsNonRoot")(p))),
    ],
    "runAsUser": [("init root", put(init_sc, runAsUser=0)), ("pod root", put(pod_sc, runAsUser=0))],
    "seccompProfile_restricted": [
        ("pod Unconfined", put(pod_sc, seccompProfile={"type": "Unconfined"})),
        ("unset on pod and main", drop(pod_sc, "seccompProfile")),
    ],
    "capabilities_restricted": [
        ("wait keeps all", lambda p: wait_sc(p)["capabilities"].update(drop=[])),
        ("init adds NET_RAW", put(caps, add=["NET_RAW"])),
        ("ephemeral container", put(spec, ephemeralContainers=[DEBUG_CONTAINER])),
    ],
    "procMount_restricted": [("init Unmasked", put(init_sc, procMount="Unmasked"))],
}
# baseline checks that restricted replaces by a stricter one (OverrideCheckIDs)
OVERRIDDEN = {
    "hostPathVolumes": "restrictedVolumes",
    "seccompProfile_baseline": "seccompProfile_restricted",
    "capabilities_baseline": "capabilities_restricted",
    "procMount_baseline": "procMount_restricted",
}
# what restricted allows, so the port is not stricter than the API server
ALLOWED: list[tuple[str, Change]] = [
    ("writable root filesystem", put(main_sc, readOnlyRootFilesystem=False)),
    ("NET_BIND_SERVICE", put(caps, add=["NET_BIND_SERVICE"])),
    ("Localhost seccomp", put(main_sc, seccompProfile={"type": "Localhost", "localhostProfile": "x.json"})),
    ("image volume", volume(image={"reference": "registry.example/data:1"})),
    ("safe sysctl", put(pod_sc, sysctls=[{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}])),
    ("container_t", put(init_sc, seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"})),
    ("AppArmor RuntimeDefault", put(pod_sc, appArmorProfile={"type": "RuntimeDefault"})),
    ("probe without host", put(main, readinessProbe={"httpGet": {"port": 80, "path": "/"}})),
]


@pytest.fixture(scope="module")
def base_pod(shipped) -> dict:
    return shipped["legacy"][CONTAINER_TEMPLATES[0]]


def test_every_control_has_a_broken_fixture():
    assert set(BROKEN) == {cid for cid, *_ in CHECKS}


@pytest.mark.parametrize(
    ("cid", "break_it"),
    [pytest.param(cid, fn, id=f"{cid}-{label}") for cid, cases in BROKEN.items() for label, fn in cases],
)
def test_control_refuses_broken_pod(base_pod, cid, break_it):
    assert check(base_pod) == []
    pod = copy.deepcopy(base_pod)
    break_it(pod)
    level = "baseline" if cid in OVERRIDDEN else "restricted"
    assert cid in violations(pod, level), violations(pod, level)
    assert check(pod), "restricted admits it"
    if cid in OVERRIDDEN:
        assert OVERRIDDEN[cid] in violations(pod), "the overriding restricted check does not refuse it"


@pytest.mark.parametrize(("label", "change"), ALLOWED, ids=[label for label, _ in ALLOWED])
def test_restricted_allows(base_pod, label, change):
    pod = copy.deepcopy(base_pod)
    change(pod)
    assert check(pod) == []


def test_windows_pods_are_exempt_from_linux_only_controls(base_pod):
    pod = copy.deepcopy(base_pod)
    pod["spec"]["os"] = {"name": "windows"}
    for ctr in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
        for key in ("allowPrivilegeEscalation", "capabilities", "seccompProfile"):
            ctr["securityContext"].pop(key, None)
    pod["spec"]["securityContext"].pop("seccompProfile")
    assert check(pod) == []


# --- the Pod schema ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema_results(shipped, ray_pods, tmp_path_factory) -> dict[Path, str]:
    """kubernetes-validate --strict over every synthesized pod at once, plus one with a misspelled field."""
    folder = tmp_path_factory.mktemp("pods")
    broken = copy.deepcopy(shipped["legacy"][CONTAINER_TEMPLATES[0]])
    broken["spec"]["initContainers"][0]["securityContext"]["runAsNonRot"] = True
    files = [
        *write_pods(shipped["legacy"], folder / "legacy"),
        *write_pods(shipped["initless"], folder / "initless"),
        *write_pods(ray_pods, folder / "kuberay"),
        *write_pods({"misspelled": broken}, folder / "broken"),
    ]
    return kubernetes_validate(files)


def test_every_pod_passes_the_pod_schema_strictly(schema_results, ray_pods):
    results = {path.relative_to(path.parent.parent).as_posix(): line for path, line in schema_results.items()}
    assert len(results) == len(POD_TEMPLATES) * 2 + len(ray_pods) + 1
    assert "did not validate" in results.pop("broken/misspelled.yaml") and "runAsNonRot" not in str(results)
    assert {name: "passed for resource pod/" in line for name, line in results.items()} == dict.fromkeys(results, True)
