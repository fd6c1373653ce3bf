"""The cluster sizing fits runs to: the CPU node groups (the Ray backend's worker groups map onto them one to one),
the GPU cards of the GPU NodePool, and pods' requests as Kubernetes quantities."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from steps.core.pod import GIB as GIB  # the project's GiB, re-exported by steps.sizing

# What a node keeps from its pods, in GiB: its allocatable memory is its RAM less this, and a pod that asks for more
# never schedules. It covers the RAM the kernel and firmware keep out of MemTotal (~0.2-0.5 GiB; a Pi's GPU share
# too), the kubelet's hard eviction threshold (memory.available<100Mi by default) and the kubelet, container runtime
# and node daemons (CNI, kube-proxy, log and metrics agents: ~0.3-0.5 GiB together). A node whose kubelet reserves
# more (EKS's kube-reserved is 255 MiB + 11 MiB per allowed pod, ~0.9 GiB on an 8-vCPU node) has less: compare
# `kubectl get nodes -o custom-columns=NAME:.metadata.name,ALLOCATABLE:.status.allocatable.memory` with
# RAY_NODE_GROUPS' allocatable and raise this where a node reports less.
NODE_RESERVED_GIB = 1.0


@dataclass(frozen=True)
class NodeGroup:
    name: str
    cpus: int
    ram_gib: int  # a node's RAM as the node group declares it
    arch: str  # kubernetes.io/arch
    default_replicas: int
    why: str

    @property
    def memory_gib(self) -> float:
        """The pod's ceiling in this group: a node's allocatable memory (its RAM less NODE_RESERVED_GIB)."""
        return self.ram_gib - NODE_RESERVED_GIB


# The homelab/EKS CPU node groups of seed ADR 0058, which the Ray backend's worker groups map onto one to one: CPUs
# and RAM per node. The repository holds no inventory of the seeds' nodes beyond these figures; the Pis are the 4 GB
# Raspberry Pi 4/5 (3 GiB allocatable after NODE_RESERVED_GIB, the figure the plan always gave them).
RAY_NODE_GROUPS: tuple[NodeGroup, ...] = (
    NodeGroup("large", 8, 32, "amd64", 1, "large x86 nodes"),
    NodeGroup("medium", 4, 16, "amd64", 1, "medium x86 nodes"),
    NodeGroup("small", 2, 8, "amd64", 0, "small x86 nodes"),
    # Opt-in: DDP steps at the pace of the slowest worker, and a Pi is much slower than an x86 core.
    NodeGroup("pi", 2, 4, "arm64", 0, "arm64 Raspberry Pis, only when a training worker fits in one"),
)

# The threads of a Ray training worker are not a constant: the plan picks one count for the whole run (DDP steps at
# the pace of its slowest worker, so every worker gets the same CPUs) and each pod requests workers x threads CPUs
# (plan.ray_threads). The groups that choose it are the ones a run has by default (default_replicas > 0).
# The optional GPU worker group (workflows/rayjob.py GPU_GROUP): the home GPU box, sized by itself, not by preflight.
RAY_GPU_GROUP = "gpu"
# train-cpu's CPU request (workflows/distill.py reads it): the threads the cpu backend trains with.
TRAIN_CPU_CPUS = 4
# The CPU pods (train-cpu, convert-gguf, evaluate) have no node selector: the biggest x86 node is their ceiling.
CPU_NODE = max((g for g in RAY_NODE_GROUPS if g.arch == "amd64"), key=lambda g: g.memory_gib)


@dataclass(frozen=True)
class GpuCard:
    family: str  # karpenter.k8s.aws/instance-family
    name: str
    memory_mib: int  # karpenter.k8s.aws/instance-gpu-memory: one card's memory, as Karpenter labels the node


# The families infra/karpenter/nodepool-gpu-spot.yaml allows (a test keeps the two in step), with the per-card memory
# Karpenter puts in the label: EC2's GpuInfo.Gpus[0].MemoryInfo.SizeInMiB (karpenter-provider-aws
# pkg/providers/instancetype/types.go; values from its website/content/en/preview/reference/instance-types.md).
# A10G and L4 both report 22888 MiB, not the marketed 24 GB.
GPU_CARDS: tuple[GpuCard, ...] = (
    GpuCard("g5", "NVIDIA A10G", 22888),
    GpuCard("g6", "NVIDIA L4", 22888),
    GpuCard("g6e", "NVIDIA L40S", 45776),
)


@dataclass(frozen=True)
class CardSheet:
    """A GPU's vendor figures, matched as a substring of torch.cuda.get_device_name() (first match wins, so "H100
    PCIe" comes before "H100" and "L40S" before "L4")."""

    key: str
    bf16_tflops: float | None  # dense (no sparsity) bf16 tensor-core peak; None where the vendor publishes none
    memory_gb_s: float | None  # memory bandwidth, GB/s; None where the card comes in variants that differ


# From NVIDIA's datasheets (AWS publishes no tensor-core figure for the A10G, g5's variant of the A10: only its 24 GB
# of GDDR6 at 600 GB/s). train's MFU reads bf16_tflops; the forecast scales a measured card's tokens/s by these.
CARD_SHEETS: tuple[CardSheet, ...] = (
    CardSheet("H200", 989.4, 4800.0),
    CardSheet("H100 PCIe", 756.0, 2000.0),
    CardSheet("H100", 989.4, 3350.0),
    CardSheet("A100", 312.0, None),
    CardSheet("L40S", 362.1, 864.0),
    CardSheet("A10G", None, 600.0),
    CardSheet("L4", 121.0, 300.0),
)


def card_sheet(device_name: str) -> CardSheet | None:
    """The first of CARD_SHEETS whose key `device_name` contains; None for a card not in the table."""
    return next((c for c in CARD_SHEETS if c.key in device_name), None)


GPU_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
# infra/karpenter/ec2nodeclass-gpu.yaml gives GPU nodes a 200 GiB root volume; the CUDA image takes ~10 GB of it and
# the kubelet evicts at 10 % free: what a train-gpu pod may write.
GPU_NODE_EPHEMERAL_GIB = 170


def whole_gib(gib: float) -> int:
    """`gib` rounded up to whole GiB (at least 1): what a pod requests."""
    return max(1, math.ceil(gib - 1e-9))


def gpu_over_mib(card_gib: float) -> int:
    """The MiB a GPU card's memory must exceed to hold `card_gib` (Karpenter's label is in MiB; the rule is Gt)."""
    return math.ceil(card_gib * 1024) - 1


def gpu_affinity(over_mib: str) -> dict[str, Any]:
    """Required node affinity on Karpenter's per-card memory label: a card of more than `over_mib` MiB (the number's
    text: gpu_over_mib's, or the Argo expression a template fills it with)."""
    term = {"key": GPU_MEMORY_LABEL, "operator": "Gt", "values": [over_mib]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [term]}
    ]}}}  # fmt: skip
