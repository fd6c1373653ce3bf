"""The Pods the cluster would run for the rendered templates, built the way their controllers build them, so Pod
Security admission (tests/pod_security.py) and the Pod schema (kubernetes-validate) can judge them without a cluster.

A fast pre-check (unit tier), not the authority: tests/test_controlplane.py (integration tier) has Argo v4.0.5's own
controller create the pods of the GPU, Ray and cron paths on a real API server that admits them. This port stays for
what that run does not cover (the CPU backend's pods, the init-less layout, KubeRay's pods as v1.7.0 builds them).

Argo (argoproj/argo-workflows v4.1.2, `workflow/controller/`; v3.7.18 builds the same legacy layout):
- operator.go `executeContainer` / `executeScript`: the template's container becomes `main`; `executeResource` and
  `executeData` make `main` an executor container running `argoexec resource|data`.
- workflowpod.go `podBuilder.build` (v3.7: `createWorkflowPod`): pod-level fields from the workflow spec and template;
  the aux container (`newWaitContainer`, or `newSupervisorContainer` in the init-less layout) unless the template is a
  data template or a resource template that does not archive logs; the `init` container (`newInitContainers`) on
  EVERY pod of the legacy layout, none in the init-less one (workflowpod_layout.go); `addSchedulingConstraints` (pod
  securityContext from the template, else the workflow); `addInputArtifactsVolumes`, `addOutputArtifactsVolumes`,
  `addInitContainers`, `addSidecars`; `processPodSpecPatch` + util.go `ApplyPodSpecPatch` (workflow's podSpecPatch,
  then the template's, strategic merge on the PodSpec); then the emissary wrapper on every non-aux container.
- `newExecContainer`: executor containers get the ConfigMap's `executor` image pull policy, env, resources, args and
  securityContext; when that securityContext is unset, resource templates get `common.MinimalCtrSC()` with the root
  filesystem left writable for `init`/`wait`/`supervisor`.

KubeRay (ray-project/kuberay, `ray-operator/controllers/ray/`): common/pod.go `DefaultHeadPodTemplate`,
`DefaultWorkerPodTemplate` (the `wait-gcs-ready` init container, copying the Ray container's securityContext),
`BuildPod` (/dev/shm emptyDir, the ray start command, probes), `BuildAutoscalerContainer` (no securityContext unless
`autoscalerOptions.securityContext`); common/job.go `GetSubmitterTemplate` (K8sJobMode's submitter pod, no
securityContext by default) and rayjob_controller.go `getSubmitterContainer` (SidecarMode).

Left out, as no Pod Security control or schema rule reads them: most environment variables' values, the offloading of
large templates to a ConfigMap, retry affinity, artifact plugins, the kubeconfig.
"""

from __future__ import annotations

import copy
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.manifests import WORKFLOW_NAME, WORKFLOW_UID, default_artifact_repository
from workflows.images import default_argoexec

EXECUTOR_SETTINGS = ROOT / "infra/argo-controller/executor-security-context.yaml"
NAMESPACE = "distillery"
# What a template's `podSpecPatch: '{{inputs.parameters.…}}'` holds at run time (preflight's sizing of the step).
PLAUSIBLE_POD_SPEC_PATCH = json.dumps(
    {
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"memory": "10Gi", "ephemeral-storage": "40Gi"},
                    "limits": {"memory": "12Gi", "ephemeral-storage": "40Gi"},
                },
            }
        ]
    }
)
PLAUSIBLE_QUANTITY = "10Gi"  # a placeholder inside a larger podSpecPatch (a single field's value)
PLAUSIBLE_NUMBER = "10"  # an expression tag inside a larger podSpecPatch (`{{=asInt(…)}}`, a number of the field)

# workflow/common/common.go
MAIN, INIT, WAIT, SUPERVISOR = "main", "init", "wait", "supervisor"
VAR_RUN_ARGO = "/var/run/argo"
EXECUTOR_ARTIFACT_BASE_DIR = "/argo/inputs/artifacts"
EXECUTOR_MAIN_FILESYSTEM_DIR = "/mainctrfs"
EXECUTOR_STAGING_DIR = "/argo/staging"
ARGO_BIN_MOUNT = "/argo-bin"
SERVICE_ACCOUNT_TOKEN_VOLUME = "exec-sa-token"
SERVICE_ACCOUNT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
LOG_OPTS = ["--loglevel", "info", "--log-format", "text", "--gloglevel", "0"]  # getExecutorLogOpts, defaults


@dataclass(frozen=True)
class ControllerConfig:
    """What Argo's workflow-controller-configmap and flags decide about step pods."""

    executor: dict = field(default_factory=dict)  # the ConfigMap's `executor` key, parsed; {} is Argo's default
    initless: bool = False  # `initlessPod: {enabled: true}` (v4.1 beta): supervisor instead of init + wait
    # The controller's --executor-image: Argo's own at the release the engines require (the admission policy's).
    executor_image: str = field(default_factory=default_argoexec)


def executor_image(config: ControllerConfig) -> str:
    """config.go `executorImage`: the ConfigMap's `executor.image`, else the controller's flag."""
    return config.executor.get("image") or config.executor_image


def shipped_config(initless: bool = False) -> ControllerConfig:
    """The controller settings this project ships (infra/argo-controller/), read from the one file that holds them."""
    patch = yaml.safe_load(EXECUTOR_SETTINGS.read_text())
    return ControllerConfig(executor=yaml.safe_load(patch["data"]["executor"]), initless=initless)


def workflow_spec(doc: dict) -> dict:
    """The workflow spec of a WorkflowTemplate / Workflow, or of a CronWorkflow's `workflowSpec`; one that only
    references a rendered WorkflowTemplate gets that template's spec under its own fields, as the controller runs it
    (operator.go setExecWorkflow: the stored spec, util.JoinWorkflowSpec)."""
    spec = doc["spec"].get("workflowSpec", doc["spec"])
    ref = spec.get("workflowTemplateRef")
    if ref is None or "templates" in spec:
        return spec
    referenced = copy.deepcopy(rendered_workflow_templates()[ref["name"]]["spec"])
    own = {k: v for k, v in spec.items() if k != "workflowTemplateRef"}
    merged = {**referenced, **own}
    if "arguments" in own:  # util.MergeParameters: the workflow's own first, then the template's it does not name
        mine = own["arguments"].get("parameters", [])
        named = {p["name"] for p in mine}
        theirs = [p for p in (referenced.get("arguments") or {}).get("parameters", []) if p["name"] not in named]
        merged["arguments"] = {**own["arguments"], "parameters": mine + theirs}
    return merged


def rendered_workflow_templates() -> dict[str, dict]:
    """The WorkflowTemplates in infra/argo/, by name."""
    docs = (yaml.load(p.read_text(), Loader=yaml.CSafeLoader) for p in sorted((ROOT / "infra/argo").glob("*.yaml")))
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "WorkflowTemplate"}


POD_TEMPLATE_TYPES = ("container", "script", "resource", "data", "containerSet")


def template_type(tmpl: dict) -> str | None:
    return next((t for t in POD_TEMPLATE_TYPES if t in tmpl), None)


def workflow_pods(doc: dict, config: ControllerConfig, artifact_repository: dict | None = None) -> dict[str, dict]:
    """One Pod per template that runs as a pod, keyed by template name."""
    spec = workflow_spec(doc)
    repo = default_artifact_repository() if artifact_repository is None else artifact_repository
    return {t["name"]: template_pod(spec, t, config, repo) for t in spec["templates"] if template_type(t)}


# --- placeholders --------------------------------------------------------------------------------------------------


def fill_pod_spec_patch(patch: str) -> str:
    """A podSpecPatch as the controller sees it after substitution: a patch that is one `{{…}}` placeholder becomes
    PLAUSIBLE_POD_SPEC_PATCH, a placeholder inside a larger patch a plausible field value, an expression tag (the
    sized templates' numbers) a plausible number."""
    if re.fullmatch(r"\s*\{\{[^{}]+\}\}\s*", patch):
        return PLAUSIBLE_POD_SPEC_PATCH
    patch = re.sub(r"\{\{=[^{}]+\}\}", PLAUSIBLE_NUMBER, patch)
    return re.sub(r"\{\{[^{}]+\}\}", PLAUSIBLE_QUANTITY, patch)


# --- strategic merge patch on a PodSpec ----------------------------------------------------------------------------

# patchMergeKey of the PodSpec's merge lists (k8s.io/api/core/v1 types.go); every other list is replaced whole.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "imagePullSecrets": "name", "hostAliases": "ip", "resourceClaims": "name", "schedulingGates": "name",
    "topologySpreadConstraints": "topologyKey", "ports": "containerPort", "env": "name", "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}  # fmt: skip


def strategic_merge(original: dict, patch: dict) -> dict:
    """apimachinery's strategicpatch.StrategicMergePatch for the PodSpec: maps merge, `null` deletes, lists with a
    merge key merge element by element (`$patch: delete|replace` honoured), other lists are replaced."""
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(original)
    for key, value in patch.items():
        if key.startswith("$"):  # $setElementOrder/…, $retainKeys: ordering and pruning hints
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            if value.get("$patch") == "delete":
                out.pop(key)
            else:
                out[key] = strategic_merge(out[key], value)
        elif isinstance(value, list) and key in MERGE_KEYS:
            out[key] = _merge_list(out.get(key) or [], value, MERGE_KEYS[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(original: list, patch: list, key: str) -> list:
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [e for e in patch if not (isinstance(e, dict) and e.get("$patch"))]
    out = copy.deepcopy(original)
    for element in patch:
        at = next((i for i, e in enumerate(out) if e.get(key) == element.get(key)), None)
        if element.get("$patch") == "delete":
            out = [e for e in out if e.get(key) != element.get(key)]
        elif at is None:
            out.append(copy.deepcopy(element))
        else:
            out[at] = strategic_merge(out[at], element)
    return out


def apply_pod_spec_patches(pod_spec: dict, patches: list[str]) -> dict:
    """util.go `ApplyPodSpecPatch`: each patch (YAML or JSON) merged onto the PodSpec in turn."""
    for text in patches:
        pod_spec = strategic_merge(pod_spec, yaml.safe_load(text))
    return pod_spec


# --- Argo ----------------------------------------------------------------------------------------------------------


def executor_service_account(spec: dict, tmpl: dict) -> str:
    """workflowpod.go `executorServiceAccountName`: the template's executor account, else the workflow's, else ""."""
    return (tmpl.get("executor") or {}).get("serviceAccountName") or (spec.get("executor") or {}).get(
        "serviceAccountName", ""
    )


def _exec_container(name: str, tmpl: dict, config: ControllerConfig, spec: dict | None = None) -> dict:
    """workflowpod.go `newExecContainer`."""
    executor = config.executor
    ctr = {
        "name": name,
        "image": executor_image(config),
        "env": [
            {"name": "ARGO_POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "ARGO_POD_UID", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}}},
            {"name": "ARGO_WORKFLOW_NAME", "value": WORKFLOW_NAME},
            {"name": "ARGO_WORKFLOW_UID", "value": WORKFLOW_UID},
            *copy.deepcopy(executor.get("env") or []),
        ],
        "resources": copy.deepcopy(executor.get("resources") or {}),
    }
    if "imagePullPolicy" in executor:
        ctr["imagePullPolicy"] = executor["imagePullPolicy"]
    if executor.get("args"):
        ctr["args"] = list(executor["args"])
    security_context = copy.deepcopy(executor.get("securityContext"))
    if template_type(tmpl) == "resource" and security_context is None:
        # "lock down resource pods by default": common/security_context.go MinimalCtrSC
        security_context = {
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "runAsNonRoot": True,
            "runAsUser": 8737,
            "allowPrivilegeEscalation": False,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        if name not in (INIT, WAIT, SUPERVISOR):  # "TODO: always set RO FS once #10787 is fixed"
            security_context["readOnlyRootFilesystem"] = True
    if security_context is not None:
        ctr["securityContext"] = security_context
    if executor_service_account(spec or {}, tmpl):  # the executor's token, at the path client-go reads it from
        ctr["volumeMounts"] = [
            {"name": SERVICE_ACCOUNT_TOKEN_VOLUME, "mountPath": SERVICE_ACCOUNT_TOKEN_PATH, "readOnly": True}
        ]
    return ctr


def _main_containers(tmpl: dict, config: ControllerConfig, spec: dict) -> list[dict]:
    """operator.go: what each template type hands createWorkflowPod as its main container(s)."""
    kind = template_type(tmpl)
    if kind == "container":
        return [{**copy.deepcopy(tmpl["container"]), "name": MAIN}]
    if kind == "script":
        ctr = {k: copy.deepcopy(v) for k, v in tmpl["script"].items() if k != "source"}
        if tmpl["script"].get("source"):
            ctr["args"] = [*ctr.get("args", []), f"{EXECUTOR_STAGING_DIR}/script"]
        return [{**ctr, "name": MAIN}]
    if kind == "containerSet":
        return copy.deepcopy(tmpl["containerSet"]["containers"])
    ctr = _exec_container(MAIN, tmpl, config, spec)
    if kind == "resource":
        ctr["command"] = ["argoexec", "resource", tmpl["resource"]["action"], *LOG_OPTS]
    else:
        ctr["command"] = ["argoexec", "data", json.dumps(tmpl["data"]), *LOG_OPTS]
    return [ctr]


def archive_logs(spec: dict, tmpl: dict, repo: dict) -> bool:
    """workflowpod.go `IsArchiveLogs`: the artifact repository's archiveLogs, else the workflow's or template's."""
    if repo.get("archiveLogs"):
        return True
    archive = spec.get("archiveLogs", False)
    return (tmpl.get("archiveLocation") or {}).get("archiveLogs", archive)


def _needs_archive_location(spec: dict, tmpl: dict, repo: dict) -> bool:
    """`addArchiveLocation`: the template gets the repository as archive location (and so its archiveLogs) when it
    archives logs or has an artifact without its own location."""
    if archive_logs(spec, tmpl, repo):
        return True
    artifacts = [*(tmpl.get("inputs") or {}).get("artifacts", []), *(tmpl.get("outputs") or {}).get("artifacts", [])]
    return any(
        not set(a) & {"s3", "gcs", "git", "http", "artifactory", "hdfs", "raw", "oss", "azure"} for a in artifacts
    )


def _secret_volumes(tmpl: dict, repo: dict) -> tuple[list[dict], list[dict]]:
    """`createSecretVolumesAndMounts`: S3 key secrets of the archive location and the artifacts, mounted read-only
    into the executor containers."""
    locations = [repo.get("s3") or {}]
    for art in [*(tmpl.get("inputs") or {}).get("artifacts", []), *(tmpl.get("outputs") or {}).get("artifacts", [])]:
        locations.append(art.get("s3") or {})
    items: dict[str, list[str]] = {}
    for loc in locations:
        for key in ("accessKeySecret", "secretKeySecret", "sessionTokenSecret"):
            secret = loc.get(key) or {}
            if secret.get("name") and secret.get("key") and secret["key"] not in items.setdefault(secret["name"], []):
                items[secret["name"]].append(secret["key"])
    volumes = [
        {"name": n, "secret": {"secretName": n, "items": [{"key": k, "path": k} for k in keys]}}
        for n, keys in items.items()
    ]
    mounts = [{"name": n, "mountPath": f"/argo/secret/{n}", "readOnly": True} for n in items]
    return volumes, mounts


def _container(pod: dict, name: str) -> dict | None:
    return next((c for c in pod["spec"]["containers"] if c["name"] == name), None)


def template_pod(spec: dict, tmpl: dict, config: ControllerConfig, repo: dict) -> dict:
    """The Pod Argo's controller creates for one template of the workflow `spec` (workflowpod.go `build`)."""
    tmpl = copy.deepcopy(tmpl)
    kind = template_type(tmpl)
    node_name = f"{WORKFLOW_NAME}.{tmpl['name']}"
    node_id = f"{WORKFLOW_NAME}-{zlib.crc32(node_name.encode())}"
    pod_name = f"{WORKFLOW_NAME}-{tmpl['name']}-{zlib.crc32(node_name.encode())}"[:63].rstrip("-")
    mains = _main_containers(tmpl, config, spec)

    volumes = [{"name": "var-run-argo", "emptyDir": {}}, {"name": "tmp-dir-argo", "emptyDir": {}}]
    volumes += copy.deepcopy(tmpl.get("volumes") or [])
    if config.initless:  # workflowpod_layout.go initlessLayout.extraVolumes → buildArgoBinVolume
        image = {"reference": executor_image(config)}
        if "imagePullPolicy" in config.executor:
            image["pullPolicy"] = config.executor["imagePullPolicy"]
        volumes.append({"name": "argoexec-bin", "image": image})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": NAMESPACE,
            "labels": {"workflows.argoproj.io/workflow": WORKFLOW_NAME, "workflows.argoproj.io/completed": "false"},
            "annotations": {"workflows.argoproj.io/node-name": node_name, "workflows.argoproj.io/node-id": node_id},
        },
        "spec": {"restartPolicy": "Never", "volumes": volumes, "containers": []},
    }
    pod_spec = pod["spec"]
    deadline = tmpl.get("activeDeadlineSeconds", spec.get("activeDeadlineSeconds"))
    if deadline is not None:
        pod_spec["activeDeadlineSeconds"] = int(deadline)
    for key in ("imagePullSecrets", "hostNetwork", "dnsPolicy", "dnsConfig"):
        if key in spec:
            pod_spec[key] = copy.deepcopy(spec[key])

    # setupServiceAccount
    if tmpl.get("serviceAccountName") or spec.get("serviceAccountName"):
        pod_spec["serviceAccountName"] = tmpl.get("serviceAccountName") or spec["serviceAccountName"]
    automount = tmpl.get("automountServiceAccountToken", spec.get("automountServiceAccountToken"))
    if automount is False:
        pod_spec["automountServiceAccountToken"] = False
    executor_account = executor_service_account(spec, tmpl)
    if executor_account:  # the account's token Secret (util/secrets TokenNameForServiceAccount: by its name)
        secret = {"secretName": f"{executor_account}.service-account-token"}
        volumes.append({"name": SERVICE_ACCOUNT_TOKEN_VOLUME, "secret": secret})
    elif automount is False:
        raise ValueError("executor.serviceAccountName must not be empty if automountServiceAccountToken is false")

    has_aux = kind not in ("resource", "data") or (kind == "resource" and archive_logs(spec, tmpl, repo))
    if config.initless and kind == "resource" and "manifestFrom" in tmpl["resource"]:
        has_aux = True  # initlessLayout.templateRequiresAuxContainer
    if has_aux:
        aux = _exec_container(SUPERVISOR if config.initless else WAIT, tmpl, config, spec)
        aux["command"] = ["argoexec", "supervisor" if config.initless else "wait", *LOG_OPTS]
        if config.initless:
            aux["env"].append({"name": "ARGO_INITLESS_POD", "value": "true"})
        pod_spec["containers"].append(aux)
    pod_spec["containers"] += mains
    default = MAIN if _container(pod, MAIN) else pod_spec["containers"][-1]["name"]
    pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] = default
    if spec.get("podGC"):
        pod["metadata"]["annotations"]["workflows.argoproj.io/pod-gc-strategy"] = f"{spec['podGC']['strategy']}/0s"

    if not config.initless:  # legacyLayout.initContainers → newInitContainers: always `init`
        init = _exec_container(INIT, tmpl, config, spec)
        init["command"] = ["argoexec", "init", *LOG_OPTS]
        pod_spec["initContainers"] = [init]

    # addSchedulingConstraints: the template's value, else the workflow's
    scheduling = {"nodeSelector": "nodeSelector", "affinity": "affinity", "tolerations": "tolerations",
                  "schedulerName": "schedulerName", "priorityClassName": "podPriorityClassName"}  # fmt: skip
    for key, wf_key in scheduling.items():
        value = tmpl.get(key) or spec.get(wf_key)
        if value:
            pod_spec[key] = copy.deepcopy(value)
    security_context = tmpl["securityContext"] if "securityContext" in tmpl else spec.get("securityContext")
    if security_context is not None:
        pod_spec["securityContext"] = copy.deepcopy(security_context)
    aliases = [*(spec.get("hostAliases") or []), *(tmpl.get("hostAliases") or [])]
    if aliases:
        pod_spec["hostAliases"] = copy.deepcopy(aliases)

    # addMetadata: the workflow's podMetadata, then the template's metadata
    for source in (spec.get("podMetadata") or {}, tmpl.get("metadata") or {}):
        pod["metadata"]["labels"].update(source.get("labels") or {})
        pod["metadata"]["annotations"].update(source.get("annotations") or {})
    if tmpl.get("podResources") or spec.get("podResources"):
        pod_spec["resources"] = copy.deepcopy(tmpl.get("podResources") or spec["podResources"])

    # addVolumeReferences: workflow-level volumes the template mounts, and the artifact key secrets
    mounted = {m["name"] for c in mains for m in c.get("volumeMounts") or []}
    for volume in spec.get("volumes") or []:
        if volume["name"] in mounted and all(v["name"] != volume["name"] for v in pod_spec["volumes"]):
            pod_spec["volumes"].append(copy.deepcopy(volume))
    secret_volumes, secret_mounts = _secret_volumes(tmpl, repo if _needs_archive_location(spec, tmpl, repo) else {})
    pod_spec["volumes"] += secret_volumes
    for ctr in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        if ctr["name"] in (INIT, WAIT, SUPERVISOR):
            ctr.setdefault("volumeMounts", []).extend(copy.deepcopy(secret_mounts))

    _add_input_artifacts_volume(pod, tmpl, config)
    if kind == "script":  # addScriptStagingVolume
        pod_spec["volumes"].append({"name": "argo-staging", "emptyDir": {}})
        for name in (INIT, SUPERVISOR, MAIN):
            for ctr in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
                if ctr["name"] == name:
                    ctr.setdefault("volumeMounts", []).append(
                        {"name": "argo-staging", "mountPath": EXECUTOR_STAGING_DIR}
                    )

    # addInitContainers, addSidecars: the template's own, after Argo's
    main = _container(pod, MAIN)
    for extra, where in (
        (tmpl.get("initContainers") or [], "initContainers"),
        (tmpl.get("sidecars") or [], "containers"),
    ):
        for ctr in copy.deepcopy(extra):
            if ctr.pop("mirrorVolumeMounts", False) and main:
                ctr.setdefault("volumeMounts", []).extend(copy.deepcopy(main.get("volumeMounts") or []))
            pod_spec.setdefault(where, []).append(ctr)

    if kind not in ("resource", "data"):  # addOutputArtifactsVolumes: main's mounts mirrored under /mainctrfs
        for ctr in pod_spec["containers"]:
            if ctr["name"] in (WAIT, SUPERVISOR):
                have = {m["mountPath"] for m in ctr.get("volumeMounts") or []}
                for mount in (main or {}).get("volumeMounts") or []:
                    path = f"{EXECUTOR_MAIN_FILESYSTEM_DIR}{mount['mountPath']}"
                    if path not in have:
                        ctr.setdefault("volumeMounts", []).append({**mount, "mountPath": path, "readOnly": False})
    for ctr in pod_spec.get("initContainers", []):
        ctr.setdefault("volumeMounts", []).append({"name": "var-run-argo", "mountPath": VAR_RUN_ARGO})

    simplified = {**tmpl, "inputs": {"artifacts": (tmpl.get("inputs") or {}).get("artifacts", [])}}
    template_env = {"name": "ARGO_TEMPLATE", "value": json.dumps(simplified, separators=(",", ":"))}
    standard_env = [
        {"name": "ARGO_NODE_ID", "value": node_id},
        {"name": "ARGO_INCLUDE_SCRIPT_OUTPUT", "value": "false"},
        {"name": "ARGO_DEADLINE", "value": "0001-01-01T00:00:00Z"},
        {"name": "ARGO_WORKFLOW_NAME", "value": WORKFLOW_NAME},
    ]
    for ctr in pod_spec.get("initContainers", []):
        ctr.setdefault("env", []).extend([{"name": "ARGO_CONTAINER_NAME", "value": ctr["name"]}, template_env])
        ctr["env"] += copy.deepcopy(standard_env)
    for ctr in pod_spec["containers"]:
        ctr.setdefault("env", []).append({"name": "ARGO_CONTAINER_NAME", "value": ctr["name"]})
        ctr["env"] += copy.deepcopy(standard_env)
        if ctr["name"] == SUPERVISOR or (config.initless and not has_aux and ctr["name"] == MAIN):
            ctr["env"].append(template_env)

    patches = [p for p in (spec.get("podSpecPatch"), tmpl.get("podSpecPatch")) if p]
    pod["spec"] = pod_spec = apply_pod_spec_patches(pod_spec, [fill_pod_spec_patch(p) for p in patches])

    argoexec = f"{ARGO_BIN_MOUNT}/bin/argoexec" if config.initless else f"{VAR_RUN_ARGO}/argoexec"
    for i, ctr in enumerate(pod_spec["containers"]):
        if ctr["name"] not in (WAIT, SUPERVISOR):
            ctr["command"] = [argoexec, "emissary", *LOG_OPTS, "--", *ctr.get("command", [])]
            if config.initless:  # initlessLayout.decorateUserContainer
                if has_aux:
                    ctr.setdefault("env", []).append({"name": "ARGO_WAIT_FOR_READY", "value": "true"})
                ctr.setdefault("volumeMounts", []).append(
                    {"name": "argoexec-bin", "mountPath": ARGO_BIN_MOUNT, "readOnly": True}
                )
        if ctr["image"] == executor_image(config):
            ctr.setdefault("volumeMounts", []).append({"name": "tmp-dir-argo", "mountPath": "/tmp", "subPath": str(i)})
        ctr.setdefault("volumeMounts", []).append({"name": "var-run-argo", "mountPath": VAR_RUN_ARGO})
    return pod


def _add_input_artifacts_volume(pod: dict, tmpl: dict, config: ControllerConfig) -> None:
    """workflowpod.go `addInputArtifactsVolumes`."""
    artifacts = (tmpl.get("inputs") or {}).get("artifacts") or []
    if not artifacts:
        return
    spec = pod["spec"]
    spec["volumes"].append({"name": "input-artifacts", "emptyDir": {}})
    main = _container(pod, MAIN)
    executor_mounts = [{"name": "input-artifacts", "mountPath": EXECUTOR_ARTIFACT_BASE_DIR}]
    executor_mounts += [
        {**m, "mountPath": f"{EXECUTOR_MAIN_FILESYSTEM_DIR}{m['mountPath']}"}
        for m in (main or {}).get("volumeMounts") or []
    ]
    for ctr in [*spec.get("initContainers", []), *spec["containers"]]:
        if ctr["name"] == INIT or (config.initless and ctr["name"] == SUPERVISOR):
            ctr.setdefault("volumeMounts", []).extend(copy.deepcopy(executor_mounts))
    if main is None:
        return
    if config.initless:
        main.setdefault("volumeMounts", []).append({"name": "input-artifacts", "mountPath": EXECUTOR_ARTIFACT_BASE_DIR})
        return
    user_paths = [m["mountPath"] for m in main.get("volumeMounts") or []]
    for art in artifacts:
        path = art.get("path", "").rstrip("/")
        if art.get("optional") and not set(art) - {"name", "path", "optional"}:
            continue
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in user_paths):
            continue  # overlaps a user volume: init writes the artifact into that volume instead
        main.setdefault("volumeMounts", []).append(
            {"name": "input-artifacts", "mountPath": path, "subPath": art["name"]}
        )


# --- KubeRay -------------------------------------------------------------------------------------------------------

RAY_CONTAINER = 0  # utils.RayContainerIndex
BASH = ["/bin/bash", "-c", "--"]  # utils.GetContainerCommand


def rayjob_pods(rayjob: dict) -> dict[str, dict]:
    """The Pods KubeRay creates for a RayJob: `head`, one `worker-<group>` per worker group, and the submitter pod of
    K8sJobMode (the default mode) as `submitter`."""
    spec = rayjob["spec"]
    cluster = spec["rayClusterSpec"]
    cluster_name = f"{rayjob['metadata']['name']}-raycluster"[:63]
    mode = spec.get("submissionMode", "K8sJobMode")
    pods = {"head": _ray_pod(cluster, cluster["headGroupSpec"], "head", cluster_name)}
    for group in cluster.get("workerGroupSpecs") or []:
        pods[f"worker-{group['groupName']}"] = _ray_pod(cluster, group, "worker", cluster_name)
    head_image = cluster["headGroupSpec"]["template"]["spec"]["containers"][RAY_CONTAINER]["image"]
    if mode == "SidecarMode":  # rayjob_controller.go getSubmitterContainer: common/job.go GetDefaultSubmitterContainer
        pods["head"]["spec"]["containers"].append(_default_submitter(head_image))
    if mode == "K8sJobMode":  # common/job.go GetSubmitterTemplate
        template = copy.deepcopy(spec.get("submitterPodTemplate")) or {
            "spec": {"containers": [_default_submitter(head_image)], "restartPolicy": "Never"}
        }
        pods["submitter"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**(template.get("metadata") or {}), "name": f"{rayjob['metadata']['name']}-submitter"},
            "spec": template["spec"],
        }
        pods["submitter"]["metadata"]["namespace"] = NAMESPACE
    return pods


def _default_submitter(image: str) -> dict:
    return {
        "name": "ray-job-submitter",
        "image": image,
        "command": ["/bin/bash", "-ce", "--"],
        "args": ["ray job submit --address http://$RAY_DASHBOARD_ADDRESS -- …"],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}},
    }


def _ray_pod(cluster: dict, group: dict, node_type: str, cluster_name: str) -> dict:
    template = copy.deepcopy(group["template"])
    spec = template["spec"]
    ray = spec["containers"][RAY_CONTAINER]
    group_name = "headgroup" if node_type == "head" else group["groupName"]
    if node_type == "worker":  # DefaultWorkerPodTemplate (ENABLE_INIT_CONTAINER_INJECTION defaults to true)
        wait = {
            "name": "wait-gcs-ready",
            "image": ray["image"],
            "command": BASH,
            "args": [f"until ray health-check --address {cluster_name}-head-svc:6379; do sleep 5; done"],
            "resources": {"limits": {"cpu": "200m", "memory": "256Mi"}, "requests": {"cpu": "200m", "memory": "256Mi"}},
        }
        if "imagePullPolicy" in ray:
            wait["imagePullPolicy"] = ray["imagePullPolicy"]
        for key in ("securityContext", "env", "volumeMounts"):
            if key in ray:
                wait[key] = copy.deepcopy(ray[key])
        spec.setdefault("initContainers", []).append(wait)
    labels = {  # labelPod: the template's labels may not override the first three
        "ray.io/node-type": node_type, "ray.io/group": group_name, "ray.io/cluster": cluster_name,
        "ray.io/is-ray-node": "yes", "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }  # fmt: skip
    for key, value in ((template.get("metadata") or {}).get("labels") or {}).items():
        if key not in ("ray.io/node-type", "ray.io/group", "ray.io/cluster"):
            labels[key] = value
    metadata = {**(template.get("metadata") or {}), "labels": labels, "namespace": NAMESPACE}
    metadata["name"] = f"{cluster_name}-{node_type}" if node_type == "head" else f"{cluster_name}-{group_name}-worker"
    autoscaling = node_type == "head" and cluster.get("enableInTreeAutoscaling")
    if autoscaling:  # BuildAutoscalerContainer + mergeAutoscalerOverrides
        options = cluster.get("autoscalerOptions") or {}
        autoscaler = {
            "name": "autoscaler",
            "image": options.get("image", ray["image"]),
            "imagePullPolicy": options.get("imagePullPolicy", "IfNotPresent"),
            "command": options.get("command", BASH),
            "args": options.get("args", ["ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME)"]),
            "resources": options.get(
                "resources",
                {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}},
            ),
        }
        if options.get("securityContext"):
            autoscaler["securityContext"] = copy.deepcopy(options["securityContext"])
        spec["containers"].append(autoscaler)
    if not any(p.get("name") == "metrics" for p in ray.get("ports") or []):
        ray.setdefault("ports", []).append({"name": "metrics", "containerPort": 8080})

    # BuildPod
    if "plasma-directory" not in (group.get("rayStartParams") or {}):
        limit = (ray.get("resources") or {}).get("limits", {}).get("memory")
        size = limit or (ray.get("resources") or {}).get("requests", {}).get("memory")
        _add_empty_dir(
            spec, ray, "shared-mem", "/dev/shm", {"medium": "Memory", **({"sizeLimit": size} if size else {})}
        )
    if autoscaling:
        for ctr in (ray, spec["containers"][-1]):
            _add_empty_dir(spec, ctr, "ray-logs", "/tmp/ray", {})
    command = " ".join([*ray.get("command", []), *ray.get("args", [])])
    if "ray start" not in command:
        start = "ray start --head" if node_type == "head" else "ray start"
        start += "".join(f" --{k}={v}" for k, v in (group.get("rayStartParams") or {}).items()) + " --block"
        generated = f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {start}"
        ray["command"] = BASH
        ray["args"] = [f"{command} && {generated}" if command else generated]
    probe = {"httpGet": {"path": "/api/healthz", "port": 52365}}  # Ray ≥ 2.53: unified HTTP health check
    ray.setdefault("livenessProbe", {**probe, "initialDelaySeconds": 30, "periodSeconds": 5, "failureThreshold": 120})
    ray.setdefault("readinessProbe", {**probe, "initialDelaySeconds": 10, "periodSeconds": 5, "failureThreshold": 10})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _add_empty_dir(spec: dict, ctr: dict, name: str, path: str, source: dict) -> None:
    """pod.go `addEmptyDir`."""
    if any(m["mountPath"] == path for m in ctr.get("volumeMounts") or []):
        return
    if all(v["name"] != name for v in spec.get("volumes") or []):
        spec.setdefault("volumes", []).append({"name": name, "emptyDir": source})
    ctr.setdefault("volumeMounts", []).append({"name": name, "mountPath": path})


def write_pods(pods: dict[str, dict], folder: Path) -> list[Path]:
    """Each pod as its own YAML file (what kubernetes-validate reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, pod in pods.items():
        path = folder / f"{re.sub(r'[^a-z0-9.-]+', '-', name.lower())}.yaml"
        path.write_text(yaml.safe_dump(pod, sort_keys=False))
        paths.append(path)
    return paths
