"""What every step pod of every template shares (distill, build-dataset, the crons, serving): its folders and
emptyDirs, environment, security contexts, placement, retry, and the resource templates' submitter identity.
Identities, credentials and writable paths themselves are `workflows/security.py`'s."""

from __future__ import annotations

from hera.workflows import NoneArchiveStrategy, RetryStrategy
from hera.workflows import models as m

from steps.contract.threads import CPUS_ENV as CPUS_ENV_NAME
from workflows import security

IN_DIR = "/work/in"
OUT_DIR = "/work/out"


def fixed_resources(cpu: str, memory: str, limit: str, disk_gib: int) -> m.ResourceRequirements:
    """What a pod preflight does not size asks for: `cpu` and `memory` (`limit` at most), and `disk_gib` of ephemeral
    storage (requests = limits), which also caps each of its emptyDirs (`volumes`)."""
    return m.ResourceRequirements(
        requests={"cpu": cpu, "memory": memory, "ephemeral-storage": f"{disk_gib}Gi"},
        limits={"memory": limit, "ephemeral-storage": f"{disk_gib}Gi"},
    )


def fixed_disk(resources: m.ResourceRequirements) -> str:
    """The ephemeral storage `fixed_resources` gave a pod (a quantity)."""
    return resources.limits["ephemeral-storage"].root


# The output folder on an emptyDir: Argo's wait container mirrors the volume and uploads an unarchived output from it
# directly; from the container's own filesystem it would be tarred, gzipped, copied and unpacked first (three copies
# of GBs of weights on the node's disk, minutes of CPU: executor.go stageArchiveFile). steps/sizing/ counts on it.
OUTPUT_VOLUME = m.Volume(name="out", empty_dir=m.EmptyDirVolumeSource())
# /tmp: the only other place a step writes (the root filesystem is read-only; security.WRITABLE_ENV sends every cache
# there). Sized steps get both emptyDirs' sizeLimit from preflight's patch (sizing.SIZED_VOLUMES).
SCRATCH_VOLUME = m.Volume(name=security.SCRATCH_VOLUME, empty_dir=m.EmptyDirVolumeSource())


def volumes(step: str, disk: str | None) -> list[m.Volume]:
    """The pod's emptyDirs, each capped at its fixed `disk` (`fixed_disk`; None: sized by preflight's patch), its
    credential files (optional secret volumes) and the private CA (an optional ConfigMap)."""
    files = [m.Volume.model_validate(v) for v in [*security.secret_volumes(step)[0], security.trust_volume()]]
    if disk is None:
        return [OUTPUT_VOLUME, SCRATCH_VOLUME, *files]
    return [
        *(
            m.Volume(name=v.name, empty_dir=m.EmptyDirVolumeSource(size_limit=disk))
            for v in (OUTPUT_VOLUME, SCRATCH_VOLUME)
        ),
        *files,
    ]


def volume_mounts(step: str) -> list[m.VolumeMount]:
    return [
        m.VolumeMount(name=OUTPUT_VOLUME.name, mount_path=OUT_DIR),
        m.VolumeMount(name=SCRATCH_VOLUME.name, mount_path=security.SCRATCH_DIR),
        *(m.VolumeMount.model_validate(v) for v in [*security.secret_volumes(step)[1], security.trust_mount()]),
    ]


# The container's own CPU request (after the preflight's pod patch), rounded up to whole CPUs: the threads a step runs
# when --threads is 0 (`steps.contract.threads.cpu_threads`). The pods have no CPU limit, so nothing else in the pod
# says it.
CPUS_ENV = {"name": CPUS_ENV_NAME, "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1"}}}


def step_env(step: str) -> list[m.EnvVar]:
    """A step's environment: where it may write, the CPUs it asked for, and the credentials it uses (optional secret
    references)."""
    return [m.EnvVar.model_validate(e) for e in [*security.writable_env(), CPUS_ENV, *security.secret_env(step)]]


# Every pod runs as the image's unprivileged user (uid 1000), under the runtime's default seccomp profile.
POD_SECURITY = m.PodSecurityContext(
    run_as_non_root=True,
    run_as_user=1000,
    run_as_group=1000,
    fs_group=1000,
    seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
)
CONTAINER_SECURITY = m.SecurityContext(
    allow_privilege_escalation=False,
    capabilities=m.Capabilities(drop=["ALL"]),
    run_as_non_root=True,
    read_only_root_filesystem=True,
)
# The resource templates' pods: argoexec only, as the submitter (security.py), with its own token (the workflow
# turns automount off for the steps). No log archive: the submitter has no S3 access, and a failed log upload
# (wait container, SaveLogs) turns the node to Error after its resource action succeeded. The workflow's
# `archiveLogs: true` (ARCHIVE_LOGS) would otherwise reach them; the artifact repository leaves it to both.
SUBMITTER = {
    "service_account_name": security.SUBMITTER,
    "executor": m.ExecutorConfig(service_account_name=security.SUBMITTER),
    "archive_location": m.ArtifactLocation(archive_logs=False),
}
# Every step's log goes to the artifact repository (the steps' account reaches S3); set per workflow, not in the
# repository's config, whose `true` would override the resource templates' `false` (workflowpod.go IsArchiveLogs).
ARCHIVE_LOGS = True

# The cpu and cuda images are built for linux/amd64 only (docker-bake.hcl): their pods stay off the arm64 Raspberry
# Pis of the homelab cluster (only the ray image is multi-arch). Resource templates run Argo's own multi-arch image.
AMD64 = {"kubernetes.io/arch": "amd64"}

DEFAULT_RETRY = RetryStrategy(limit="2", retry_policy="OnError", backoff=m.Backoff(duration="10s", factor="2"))
UNARCHIVED = NoneArchiveStrategy()
