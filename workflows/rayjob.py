"""The KubeRay `RayJob` that trains on the CPU Ray pool (train-backend ray), as an Argo resource template manifest.

One RayJob per run: KubeRay creates a RayCluster from `rayClusterSpec`, submits `entrypoint` to it when the cluster is
ready, and deletes the cluster the moment the job ends (`shutdownAfterJobFinishes` with `ttlSecondsAfterFinished: 0`).
The entrypoint is the train step's own command line, `python -m steps.train --train-backend ray --ray-address auto …`:
Ray Train's `TorchTrainer` starts `--ray-workers` data-parallel workers of `--threads` CPUs each (Gloo, float32) across
the worker groups below.

The cluster, as in seed ADR 0058:
- **head**: coordinator only. `num-cpus: "0"`, so Ray schedules no training worker there; it runs the driver (the
  entrypoint) and the GCS, whose loss ends the job. So it is kept off spot capacity, Karpenter's and EKS managed node
  groups' alike (`karpenter.sh/capacity-type NotIn [spot]` and `eks.amazonaws.com/capacityType NotIn [SPOT]` in one
  nodeSelectorTerm: NotIn also matches a node without the label, so homelab nodes still qualify), off the Raspberry Pis
  (amd64), and out of Karpenter's voluntary disruptions (`karpenter.sh/do-not-disrupt`: no consolidation or drift
  replacement of its node while it runs).
- **worker groups**, heterogeneous, one per node group of `steps/sizing/` (`RAY_NODE_GROUPS`: large and medium and
  small x86, arm64 Raspberry Pis), each pinned to its architecture by node affinity. A group's pods take their size
  from the run: `ray-<group>-memory` (a quantity: preflight's whole GiB read with asInt) and `ray-<group>-cpus`
  (workers per pod × the run's threads per worker, for requests, limits and Ray's `num-cpus`, so Ray sees exactly
  what the pod was given and every CPU it requests computes), which preflight works out for the base model; every
  worker of the run computes with the same `ray-threads` (the entrypoint's `--threads`: DDP steps at its slowest
  worker's pace); replica counts are `ray-<group>-workers`. Workers may land on spot: Ray Train restarts the worker
  group from the latest S3 checkpoint (`--max-failures`); `do-not-disrupt` keeps Karpenter from spending those
  restarts on consolidation.
- **gpu** (`GPU_GROUP`, optional, `ray-gpu-workers`, 0 by default): the home GPU box, one `nvidia.com/gpu` per pod,
  selected by its node label and tolerating its `nvidia.com/training` taint. Used alone: with GPU replicas every CPU
  group must have none (check-parameters refuses the mix), and the entrypoint's `--ray-gpu` (true exactly then) puts
  every Ray Train worker on a GPU (`use_gpu`, NCCL).

`submissionMode: HTTPMode`: the operator submits the job to the head's dashboard itself, which it already polls for the
job's status. No submitter pod (K8sJobMode) to schedule, secure for the namespace's `restricted` Pod Security level,
pull an image for, or lose to an eviction; no extra container in the head pod (SidecarMode).

Deadlines (KubeRay `rayjob_controller.go`, both measured from the RayJob's `status.startTime`, when it leaves `New`):
`preRunningDeadlineSeconds` (KubeRay ≥ 1.6.0) fails it when the cluster is not ready in time
(`checkPreRunningDeadlineAndUpdateStatusIfNeeded`: reason PreRunningDeadlineExceeded), e.g. a Pi replica with no
arm64 node to run on, instead of holding the rest of the pool until `activeDeadlineSeconds`
(`checkActiveDeadlineAndUpdateStatusIfNeeded`: DeadlineExceeded), the bound on the whole run.

Clean-up. The RayCluster goes when the job reaches a terminal deployment status, Complete or Failed
(`handleShutdownAfterJobFinishes`: `ttlSecondsAfterFinished` after `status.endTime`; 0, so no idle cluster holds
nodes; the head's logs go with it). The RayJob object itself stays, a small record of the run's status, until: the
exit handler deletes it when the run did not succeed (`delete_manifest`, `workflows/distill.py`), which also frees the
cluster of a RayJob that ends ValidationFailed (KubeRay deletes nothing then); or the Workflow is deleted (its
ttlStrategy) and takes the RayJob along by its owner reference (`setOwnerReference`). KubeRay's newer
`deletionStrategy.deletionRules` (v1.5.0, feature gate RayJobDeletionPolicy) is not used: it excludes
`shutdownAfterJobFinishes`, its conditions name only jobStatus SUCCEEDED/FAILED or deployment Failed (a STOPPED job,
deployment Complete, would keep its cluster), and its `DeleteSelf` would remove the RayJob before Argo reads its final
status (Argo fails a step whose resource is gone: `checkResourceState`). The same goes for the operator option
DELETE_RAYJOB_CR_AFTER_JOB_FINISHES: the operator must run without it.

One name per workflow, `distill-{{workflow.uid}}` (`NAME`), not a generated one: the workflow's exit handler deletes
the RayJob by that name when the run did not succeed. KubeRay wants a DNS-1035 label of at most 47 characters (the
RayCluster it creates appends 6 to it, and its Services' names must stay within 63): a uid is 36 lowercase hex digits
and dashes, the prefix starts it with a letter, 44 in all. The workflow's name would not do: `argo submit --name` and
generateName prefixes have no such bound. A second create under the same workflow (`argo retry` while the first RayJob
still exists) fails with AlreadyExists rather than start a second cluster.

Integer fields that come from workflow parameters (replica counts) are written as bare `{{…}}` placeholders: Argo
substitutes them before it parses the manifest, so the API server receives numbers. `yaml.safe_dump` would quote them
as strings (which the CRD rejects), hence `_unquote`. The manifest is therefore only YAML after substitution. CPU and
memory are quantities (the CRD takes a string) and `num-cpus` a string, so their placeholders stay quoted.

When the Argo step ends (`SUCCESS_CONDITION`, `FAILURE_CONDITION`): see the comment above them, and
`tests/test_rayjob_states.py` for every (jobStatus, jobDeploymentStatus) KubeRay can produce.
"""

# One module, though long: it builds one manifest, and a quarter of it is the docstring and comments citing the KubeRay
# behaviour each field relies on; split, those reasons would sit apart from the fields they explain.

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from steps import sizing
from steps.pipeline import ray_replicas_param
from workflows.security import SCRATCH_DIR, SCRATCH_VOLUME, trust_mount, trust_volume

API_VERSION = "ray.io/v1"
RAY_VERSION = "2.60.0"  # the ray wheel in images/ray.Dockerfile (constraints.txt); KubeRay gates features on it
# The resource template's input holding every training worker's threads (preflight's plan: sizing.ray_threads).
THREADS_INPUT = sizing.RAY_THREADS_OUTPUT
MAX_FAILURES = 3  # Ray Train worker-group restarts from the latest checkpoint (spot reclaims, a lost Pi)
# The whole RayJob, cluster start included, from its status.startTime; within the workflow's own deadline (8 h), which
# started earlier. Past it KubeRay fails the job (DeadlineExceeded) and deletes the cluster.
ACTIVE_DEADLINE_S = sizing.DEADLINE_S
# From status.startTime to a ready cluster (every pod of every group running, then the job is submitted): enough for
# Karpenter (~1–2 min) or the cluster-autoscaler (~3–5 min) to bring nodes and for each to pull the multi-GB Ray
# image over a slow home link (~10 min), with room to spare. A cluster that cannot be ready (a Pi replica and no arm64
# node, a memory request no node has) then fails within 30 minutes, not at ACTIVE_DEADLINE_S.
PRE_RUNNING_DEADLINE_S = 30 * 60
# The RayCluster's lifetime after the job ends (shutdownAfterJobFinishes): none. The job's result is in S3 and its
# status on the RayJob, which stays; an idle cluster would only hold nodes.
TTL_AFTER_FINISHED_S = 0
AUTH_MODE = "token"
MIN_RAY_FOR_TOKEN_AUTH = "2.52.0"  # KubeRay utils/validation.go ValidateRayClusterSpec refuses token auth below it
HEAD_RESOURCES = {"cpu": "2", "memory": "8Gi"}  # the driver loads the tokenizer and data; no training there
# The RayJob's name (see the module docstring): the create manifest and the exit handler's delete both use it.
NAME = "distill-{{workflow.uid}}"
MAX_NAME_LENGTH = 47  # KubeRay's MaxRayJobNameLength: its RayCluster name limit (53) minus the 6 characters it appends
# Karpenter leaves a node alone (no consolidation, no drift replacement) while a pod with this annotation runs on it.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
# Not on spot: Karpenter labels its nodes karpenter.sh/capacity-type (spot, on-demand, reserved), EKS managed node
# groups eks.amazonaws.com/capacityType (SPOT, ON_DEMAND, CAPACITY_BLOCK). NotIn matches a node without the label.
NOT_SPOT = (
    {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
    {"key": "eks.amazonaws.com/capacityType", "operator": "NotIn", "values": ["SPOT"]},
)


@dataclass(frozen=True)
class WorkerGroup:
    """A Ray worker group: one node group of `steps.sizing.RAY_NODE_GROUPS`."""

    name: str
    cpus: int  # the most a pod of this group can have (what one node of the group gives a pod)
    memory: str  # likewise, a quantity: a node's allocatable memory (sizing.cluster.NodeGroup.memory_gib)
    arch: str  # kubernetes.io/arch of the nodes it may run on
    default_replicas: int
    why: str

    @property
    def parameter(self) -> str:
        """The parameter holding this group's replica count (workflow parameter and resource-template input)."""
        return ray_replicas_param(self.name)

    @property
    def memory_parameter(self) -> str:
        """The resource-template input holding the memory of this group's pods (requests = limits), a quantity."""
        return f"ray-{self.name}-memory"

    @property
    def disk_parameter(self) -> str:
        """The resource-template input holding the ephemeral storage of this group's pods (requests = limits, and
        the size of their /tmp emptyDir), a quantity."""
        return f"ray-{self.name}-disk"

    @property
    def cpus_parameter(self) -> str:
        """The resource-template input holding the CPUs of this group's pods (requests = limits = Ray's num-cpus)."""
        return sizing.ray_cpus_output(self.name)


WORKER_GROUPS: tuple[WorkerGroup, ...] = tuple(
    WorkerGroup(g.name, g.cpus, f"{g.memory_gib:g}Gi", g.arch, g.default_replicas, g.why)
    for g in sizing.RAY_NODE_GROUPS
)


@dataclass(frozen=True)
class GpuGroup:
    """The optional GPU worker group: the home GPU box (a DGX Spark) joining the cluster, one GPU per pod.

    Ray Train runs one DDP group per job, and a group is either every worker on CPUs (Gloo) or every worker on a GPU
    (NCCL): with GPU replicas the CPU groups must have none (check-parameters refuses the mix, naming the settings),
    and the train step gets --ray-gpu (`use_gpu` in Ray's ScalingConfig). Its pod size is the box's, not preflight's:
    one GPU and the CPUs and memory below, requests = limits."""

    name: str = sizing.RAY_GPU_GROUP
    cpus: int = 8  # host threads for the data loader and the optimiser; Ray's num-cpus = this
    memory: str = "96Gi"  # the box's 128 GB of unified memory, less the system's share
    disk: str = "200Gi"  # the hub download, checkpoints on their way to S3, Ray's session folder
    # The box is found by a label the cluster's admin sets on its node (`kubectl label node <box> distillery/gpu-box=
    # true`) and kept for training by a taint (`kubectl taint node <box> nvidia.com/training=true:NoSchedule`).
    node_label: tuple[str, str] = ("distillery/gpu-box", "true")
    taint_key: str = "nvidia.com/training"
    resource: str = "nvidia.com/gpu"  # NVIDIA's device plugin's resource name

    @property
    def parameter(self) -> str:
        return ray_replicas_param(self.name)


GPU_GROUP = GpuGroup()
# The train step's --ray-gpu: true exactly when the GPU group has replicas (the resource template's input).
RAY_GPU_INPUT = "ray-gpu"


def parameter_help(group: WorkerGroup) -> str:
    return (
        f"Ray worker pods in the {group.name} group (up to {group.cpus} CPU / {group.memory} each, {group.arch}; "
        f"{group.why}), each holding as many training workers as fit for the base model, all of them computing with "
        "the run's threads per worker (preflight's plan); train-backend ray only"
    )


def gpu_parameter_help() -> str:
    g = GPU_GROUP
    return (
        f"Ray worker pods on the GPU box (node label {'='.join(g.node_label)}, tolerating the {g.taint_key} taint; "
        f"one GPU, {g.cpus} CPU / {g.memory} each); train-backend ray only. Not with CPU workers: set every "
        "ray-<group>-workers to 0 when this is above 0"
    )


def input_parameters() -> list[str]:
    """The resource template's inputs the RayJob reads, per group: replicas, CPUs, memory, disk; the GPU group's
    replicas; every worker's threads."""
    cpu = [p for g in WORKER_GROUPS for p in (g.parameter, g.cpus_parameter, g.memory_parameter, g.disk_parameter)]
    return [*cpu, GPU_GROUP.parameter, THREADS_INPUT]


def train_workers_expression(replicas: Mapping[str, str], workers_per_pod: Mapping[str, str]) -> str:
    """Argo expression for `--ray-workers`: Σ replicas × workers per pod over the CPU groups, plus the GPU group's
    replicas (one worker per GPU pod), each given per group name as an Argo expression (e.g.
    `workflow.parameters['ray-large-workers']`). Products and sums only: expr-lang's `/` gives a float, which Argo
    would write as `2.5`. CPU and GPU groups are never both used (check-parameters), so the sum is one kind's."""
    groups = {g.name for g in WORKER_GROUPS}
    missing = sorted((groups - set(replicas)) | (groups - set(workers_per_pod)) | ({GPU_GROUP.name} - set(replicas)))
    if missing:
        raise ValueError(f"train_workers_expression: no replicas or workers-per-pod expression for groups {missing}")
    terms = [f"asInt({replicas[g.name]}) * asInt({workers_per_pod[g.name]})" for g in WORKER_GROUPS]
    terms.append(f"asInt({replicas[GPU_GROUP.name]})")
    return "{{=" + " + ".join(terms) + "}}"


def gpu_expression(gpu_replicas: str) -> str:
    """Argo expression for the train step's `--ray-gpu`: true when the GPU group has replicas."""
    return f"{{{{=asInt({gpu_replicas}) > 0 ? 'true' : 'false'}}}}"


def _param(name: str) -> str:
    return "{{inputs.parameters." + name + "}}"


def entrypoint(args: list[str]) -> str:
    """A shell command line (Ray runs the entrypoint through a shell): every word quoted; Argo fills in `{{…}}`."""
    return " ".join(shlex.quote(a) for a in args)


def _node_affinity(*terms: dict) -> dict:
    """Required node affinity of one nodeSelectorTerm: its expressions must all hold."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": list(terms)}
    ]}}}  # fmt: skip


def _pod(
    container: str,
    image: str,
    cpus: str,
    memory: str,
    disk: str,
    affinity: dict,
    service_account: str,
    pod_security: dict,
    container_security: dict,
    env: list[dict],
    gpus: int = 0,
    node_selector: dict | None = None,
    tolerations: list[dict] | None = None,
) -> dict:
    resources: dict[str, str | int] = {"cpu": cpus, "memory": memory, "ephemeral-storage": disk}
    if gpus:
        resources[GPU_GROUP.resource] = gpus
    placement: dict = {"affinity": affinity}
    if node_selector:
        placement["nodeSelector"] = node_selector
    if tolerations:
        placement["tolerations"] = tolerations
    return {
        "metadata": {
            "labels": {"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "train-ray"},
            # The head's loss ends the job, a worker's restarts Ray Train from its last checkpoint: neither is worth
            # a cheaper node. Spot reclaims still happen; this only stops Karpenter's own disruptions.
            "annotations": dict(DO_NOT_DISRUPT),
        },
        "spec": {
            # IRSA gives this identity the S3 prefix the job reads its data from and writes to. Ray needs no
            # Kubernetes API (autoscaling is off): no token in the pod.
            "serviceAccountName": service_account,
            "automountServiceAccountToken": False,
            "securityContext": pod_security,
            **placement,
            "containers": [
                {
                    "name": container,
                    "image": image,
                    # Requests = limits: Ray reads the limits, and Guaranteed pods are evicted last.
                    "resources": {"requests": resources, "limits": resources},
                    "securityContext": container_security,
                    # Where Ray and the libraries write (the root filesystem is read-only), and the credentials the
                    # train step uses (optional secret references: workflows/security.py).
                    # RAY_AUTH_MODE set here too: an operator that drops `authOptions` (an older CRD prunes it) gives
                    # no token, and Ray then refuses to start rather than serve the dashboard and GCS to anyone.
                    "env": [*env, {"name": "RAY_AUTH_MODE", "value": AUTH_MODE}],
                    "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}, trust_mount()],
                }
            ],
            # /tmp: Ray's session folder (/tmp/ray), the hub download, the checkpoints on their way to S3. The private
            # CA, if any (a ConfigMap: no Secret may be mounted here), for the hub mirror and S3 over TLS.
            "volumes": [{"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": disk}}, trust_volume()],
        },
    }


def rayjob(
    *,
    image: str,
    entrypoint_args: list[str],
    service_account: str,
    pod_security: dict,
    container_security: dict,
    env: list[dict],
) -> dict:
    """The RayJob as a dict, with `{{…}}` placeholders where Argo fills in the workflow's values."""
    pod = {
        "image": image,
        "service_account": service_account,
        "pod_security": pod_security,
        "container_security": container_security,
        "env": env,
    }
    head_affinity = _node_affinity(*NOT_SPOT, {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]})
    workers = []
    for g in WORKER_GROUPS:
        replicas = _param(g.parameter)
        cpus = _param(g.cpus_parameter)
        workers.append(
            {
                "groupName": g.name,
                "replicas": replicas,
                "minReplicas": 0,
                "maxReplicas": replicas,  # autoscaling is off: exactly `replicas` pods
                "rayStartParams": {"num-cpus": cpus},  # what the pod was given, no more (oversubscribed) or less (idle)
                "template": _pod(
                    "ray-worker",
                    cpus=cpus,
                    memory=_param(g.memory_parameter),
                    disk=_param(g.disk_parameter),
                    affinity=_node_affinity({"key": "kubernetes.io/arch", "operator": "In", "values": [g.arch]}),
                    **pod,
                ),
            }
        )
    gpu = GPU_GROUP
    gpu_replicas = _param(gpu.parameter)
    workers.append(
        {
            "groupName": gpu.name,
            "replicas": gpu_replicas,
            "minReplicas": 0,
            "maxReplicas": gpu_replicas,
            "rayStartParams": {"num-cpus": str(gpu.cpus), "num-gpus": "1"},
            "template": _pod(
                "ray-worker",
                cpus=str(gpu.cpus),
                memory=gpu.memory,
                disk=gpu.disk,
                # The box's own architecture, whichever it is (a DGX Spark is arm64; the ray image is multi-arch).
                affinity=_node_affinity({"key": gpu.node_label[0], "operator": "In", "values": [gpu.node_label[1]]}),
                gpus=1,
                node_selector={gpu.node_label[0]: gpu.node_label[1]},
                tolerations=[{"key": gpu.taint_key, "operator": "Exists", "effect": "NoSchedule"}],
                **pod,
            ),
        }
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "RayJob",
        "metadata": {
            "name": NAME,
            "labels": {
                "app.kubernetes.io/name": "distillery",
                "app.kubernetes.io/component": "train-ray",
                "workflows.argoproj.io/workflow": "{{workflow.name}}",
            },
        },
        "spec": {
            "entrypoint": entrypoint(entrypoint_args),
            "submissionMode": "HTTPMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_S,
            "preRunningDeadlineSeconds": PRE_RUNNING_DEADLINE_S,
            # A failed job is not resubmitted here: Ray Train already retried its workers; rerunning the workflow
            # resumes from the run's S3 checkpoints. FAILURE_CONDITION relies on it: with retries, a FAILED jobStatus
            # would be followed by Retrying, not the end.
            "backoffLimit": 0,
            "rayClusterSpec": {
                "rayVersion": RAY_VERSION,
                "enableInTreeAutoscaling": False,
                # Ray token authentication (Ray >= 2.52; KubeRay >= 1.6.0, an older CRD prunes the field silently):
                # KubeRay generates a random token in a Secret owned by the cluster and gives it to every Ray container
                # (RAY_AUTH_MODE, RAY_AUTH_TOKEN) and to its own dashboard client; without it the dashboard (8265)
                # and GCS (6379) serve anyone.
                "authOptions": {"mode": AUTH_MODE},
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "0"},
                    "template": _pod(
                        "ray-head",
                        cpus=HEAD_RESOURCES["cpu"],
                        memory=HEAD_RESOURCES["memory"],
                        disk=f"{sizing.RAY_HEAD_DISK_GIB}Gi",
                        affinity=head_affinity,
                        **pod,
                    ),
                },
                "workerGroupSpecs": workers,
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:  # the pod templates share dicts: write them out, no &anchors
        return True


def _unquote(text: str, placeholders: list[str]) -> str:
    for p in placeholders:
        text = text.replace(f"'{p}'", p)
    return text


def manifest(job: dict) -> str:
    """The RayJob as the resource template's manifest: YAML, integer placeholders bare (see the module docstring)."""
    text = yaml.dump(job, Dumper=_Dumper, sort_keys=False, width=10_000)
    return _unquote(text, [_param(g.parameter) for g in WORKER_GROUPS] + [_param(GPU_GROUP.parameter)])


def delete_manifest() -> str:
    """The exit handler's manifest: just enough of the RayJob for `kubectl delete -f` to find it by name (in the
    workflow's namespace, like the create). KubeRay's finalizer stops the Ray job, and the RayCluster, which the
    RayJob owns, goes with it."""
    return yaml.safe_dump({"apiVersion": API_VERSION, "kind": "RayJob", "metadata": {"name": NAME}}, sort_keys=False)


# When Argo's resource step ends (workflow/executor/resource.go, matchConditions): it fails as soon as ANY one failure
# requirement matches (checked first), and succeeds only when ALL success requirements match; otherwise it polls on.
# Requirements are label-selector ones on the RayJob's JSON (labels.Parse; a missing field fails `==`/`in`).
# - success: the Ray job SUCCEEDED and KubeRay marked the deployment Complete (in K8sJobMode/SidecarMode a SUCCEEDED job
#   waits for its submitter before Complete, and may still end Failed).
# - failure: the Ray job FAILED or was STOPPED (STOPPED ends with deployment Complete, so the success condition alone
#   would never end such a step); or the deployment Failed whatever the job's status (activeDeadlineSeconds,
#   preRunningDeadlineSeconds, the dashboard unreachable, a failed submission; the job status may be absent); or
#   ValidationFailed (an invalid spec: KubeRay stops there and never moves on; at creation, with no job status).
# Everything else (New, Initializing, Running with a job PENDING/RUNNING, Suspending/Suspended, Retrying) is waiting.
SUCCESS_CONDITION = "status.jobStatus == SUCCEEDED, status.jobDeploymentStatus == Complete"
FAILURE_CONDITION = "status.jobStatus in (FAILED, STOPPED), status.jobDeploymentStatus in (Failed, ValidationFailed)"
