"""The KubeRay `RayJob` that trains on the CPU Ray pool (train-backend ray), as an Argo resource template manifest.

One RayJob per run: KubeRay creates a RayCluster from `rayClusterSpec`, submits `entrypoint` to it when the head is
ready, and deletes the cluster when the job ends (`shutdownAfterJobFinishes`, then the RayJob itself after
`ttlSecondsAfterFinished`). The entrypoint is the train step's own command line, `python -m steps.train --train-backend
ray --ray-address auto …`: Ray Train's `TorchTrainer` starts `--ray-workers` data-parallel workers of `--threads` CPUs
each (Gloo, float32) across the worker groups below.

The cluster, as in seed ADR 0058:
- **head**: coordinator only. `num-cpus: "0"`, so Ray schedules no training worker there; it runs the driver (the
  entrypoint) and the GCS, whose loss ends the job, so it is kept off spot capacity (`karpenter.sh/capacity-type NotIn
  [spot]`: homelab nodes carry no such label and still qualify) and off the Raspberry Pis (amd64).
- **worker groups**, heterogeneous: large x86 (8 CPU / 32Gi), medium (4 / 16Gi), small (2 / 8Gi), and `pi`, arm64
  Raspberry Pis (2 / 3Gi), each pinned to its architecture by node affinity. Replica counts are workflow parameters;
  the caller gates the Pi count (0 unless preflight says the base model is small enough for a Pi).
  `num-cpus` equals the pod's CPU so Ray sees exactly what the pod was given, and every group's CPU is a multiple of
  `THREADS_PER_WORKER`: a group replica hosts `cpus // THREADS_PER_WORKER` training workers and no CPU idles.
  Workers may land on spot: Ray Train restarts the worker group from the latest S3 checkpoint (`--max-failures`).

`submissionMode: HTTPMode`: the operator submits the job to the head's dashboard itself, which it already polls for the
job's status. No submitter pod (K8sJobMode) to schedule, secure for the namespace's `restricted` Pod Security level,
pull an image for, or lose to an eviction; no extra container in the head pod (SidecarMode).

One name per workflow, `distill-{{workflow.uid}}` (`NAME`), not a generated one: the workflow's exit handler deletes
the RayJob by that name when the run did not succeed (`delete_manifest`, `workflows/distill.py`). KubeRay wants a
DNS-1035 label of at most 47 characters (the RayCluster it creates appends 6 to it, and its Services' names must stay
within 63): a uid is 36 lowercase hex digits and dashes, the prefix starts it with a letter, 44 in all. The workflow's
name would not do: `argo submit --name` and generateName prefixes have no such bound. A second create under the same
workflow (`argo retry` while the first RayJob still exists) fails with AlreadyExists rather than start a second cluster.

Integer fields that come from workflow parameters (replica counts) are written as bare `{{…}}` placeholders: Argo
substitutes them before it parses the manifest, so the API server receives numbers. `yaml.safe_dump` would quote them
as strings (which the CRD rejects), hence `_unquote`. The manifest is therefore only YAML after substitution.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import yaml

API_VERSION = "ray.io/v1"
RAY_VERSION = "2.60.0"  # the ray wheel in images/ray.Dockerfile (constraints.txt); KubeRay gates features on it
THREADS_PER_WORKER = 2  # torch threads (and Ray CPUs) per training worker: the smallest groups hold exactly one
MAX_FAILURES = 3  # Ray Train worker-group restarts from the latest checkpoint (spot reclaims, a lost Pi)
ACTIVE_DEADLINE_S = 8 * 3600  # the whole RayJob, cluster start included; the workflow's own deadline is 8 h
TTL_AFTER_FINISHED_S = 600  # keep the finished RayJob (its status, events) 10 min for a look, then delete it
HEAD_RESOURCES = {"cpu": "2", "memory": "8Gi"}  # the driver loads the tokenizer and data; no training there
# The RayJob's name (see the module docstring): the create manifest and the exit handler's delete both use it.
NAME = "distill-{{workflow.uid}}"
MAX_NAME_LENGTH = 47  # KubeRay's MaxRayJobNameLength: its RayCluster name limit (53) minus the 6 characters it appends


@dataclass(frozen=True)
class WorkerGroup:
    name: str
    cpus: int
    memory: str
    arch: str  # kubernetes.io/arch of the nodes it may run on
    default_replicas: int
    why: str

    @property
    def parameter(self) -> str:
        """The workflow parameter holding this group's replica count."""
        return f"ray-{self.name}-workers"

    @property
    def train_workers(self) -> int:
        """Ray Train workers one replica hosts."""
        return self.cpus // THREADS_PER_WORKER


WORKER_GROUPS: tuple[WorkerGroup, ...] = (
    WorkerGroup("large", 8, "32Gi", "amd64", 1, "large x86 nodes"),
    WorkerGroup("medium", 4, "16Gi", "amd64", 1, "medium x86 nodes"),
    WorkerGroup("small", 2, "8Gi", "amd64", 0, "small x86 nodes"),
    # Opt-in: DDP steps at the pace of the slowest worker, and a Pi is much slower than an x86 core.
    WorkerGroup("pi", 2, "3Gi", "arm64", 0, "arm64 Raspberry Pis, only for a base model of at most 3B parameters"),
)
assert all(g.cpus % THREADS_PER_WORKER == 0 for g in WORKER_GROUPS), "a group's CPUs must fit whole workers"


def parameter_help(group: WorkerGroup) -> str:
    return (
        f"Ray worker pods in the {group.name} group ({group.cpus} CPU / {group.memory}, {group.arch}; "
        f"{group.why}), {group.train_workers} training worker(s) each; train-backend ray only"
    )


def train_workers_expression(inputs: str = "inputs.parameters") -> str:
    """Argo expression for `--ray-workers`: the training workers all replicas hold, e.g. 4·large + 2·medium + …"""
    return "{{=" + " + ".join(f"{g.train_workers} * asInt({inputs}['{g.parameter}'])" for g in WORKER_GROUPS) + "}}"


def _param(name: str) -> str:
    return "{{inputs.parameters." + name + "}}"


def entrypoint(args: list[str]) -> str:
    """A shell command line (Ray runs the entrypoint through a shell): every word quoted; Argo fills in `{{…}}`."""
    return " ".join(shlex.quote(a) for a in args)


def _node_affinity(*terms: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": list(terms)}
    ]}}}  # fmt: skip


def _pod(
    container: str,
    image: str,
    cpus: str,
    memory: str,
    affinity: dict,
    service_account: str,
    pod_security: dict,
    container_security: dict,
    env_secret: str,
) -> dict:
    resources = {"cpu": cpus, "memory": memory}
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "train-ray"}},
        "spec": {
            # The workflow's identity: IRSA gives it the S3 prefix the job reads its data from and writes to.
            "serviceAccountName": service_account,
            "securityContext": pod_security,
            "affinity": affinity,
            "containers": [
                {
                    "name": container,
                    "image": image,
                    # Requests = limits: Ray reads the limits, and Guaranteed pods are evicted last.
                    "resources": {"requests": resources, "limits": resources},
                    "securityContext": container_security,
                    # At home, S3 keys and endpoint (AWS_*) come from this secret; on EKS it is absent and IRSA serves.
                    "envFrom": [{"secretRef": {"name": env_secret, "optional": True}}],
                }
            ],
        },
    }


def rayjob(
    *,
    image: str,
    entrypoint_args: list[str],
    service_account: str,
    pod_security: dict,
    container_security: dict,
    env_secret: str,
) -> dict:
    """The RayJob as a dict, with `{{…}}` placeholders where Argo fills in the workflow's values."""
    pod = {
        "image": image,
        "service_account": service_account,
        "pod_security": pod_security,
        "container_security": container_security,
        "env_secret": env_secret,
    }
    head_affinity = _node_affinity(
        {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    )
    workers = []
    for g in WORKER_GROUPS:
        replicas = _param(g.parameter)
        workers.append(
            {
                "groupName": g.name,
                "replicas": replicas,
                "minReplicas": 0,
                "maxReplicas": replicas,  # autoscaling is off: exactly `replicas` pods
                "rayStartParams": {"num-cpus": str(g.cpus)},
                "template": _pod(
                    "ray-worker",
                    cpus=str(g.cpus),
                    memory=g.memory,
                    affinity=_node_affinity({"key": "kubernetes.io/arch", "operator": "In", "values": [g.arch]}),
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
            # A failed job is not resubmitted here: Ray Train already retried its workers; rerunning the workflow
            # resumes from the run's S3 checkpoints.
            "backoffLimit": 0,
            "rayClusterSpec": {
                "rayVersion": RAY_VERSION,
                "enableInTreeAutoscaling": False,
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "0"},
                    "template": _pod(
                        "ray-head",
                        cpus=HEAD_RESOURCES["cpu"],
                        memory=HEAD_RESOURCES["memory"],
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
    return _unquote(text, [_param(g.parameter) for g in WORKER_GROUPS])


def delete_manifest() -> str:
    """The exit handler's manifest: just enough of the RayJob for `kubectl delete -f` to find it by name (in the
    workflow's namespace, like the create). KubeRay's finalizer stops the Ray job, and the RayCluster, which the
    RayJob owns, goes with it."""
    return yaml.safe_dump({"apiVersion": API_VERSION, "kind": "RayJob", "metadata": {"name": NAME}}, sort_keys=False)


# Argo's resource executor fails the step when any one failure requirement matches (they are ORed, unlike the success
# requirements, which must all match): the Ray job failed or was stopped, or KubeRay gave up on the deployment
# (activeDeadlineSeconds passed, the cluster never came up, an invalid spec).
SUCCESS_CONDITION = "status.jobStatus == SUCCEEDED"
FAILURE_CONDITION = "status.jobStatus in (FAILED, STOPPED), status.jobDeploymentStatus in (Failed, ValidationFailed)"
