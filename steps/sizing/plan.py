"""The plan: each sized step's memory and disk, each Ray group's workers per pod, the GPU card; its podSpecPatches
and output parameters; and `check`, what cannot run and what to do instead."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from steps.gguf.quants import QUANTS
from steps.sizing.cluster import (
    CPU_NODE,
    GIB,
    GPU_CARDS,
    GPU_NODE_EPHEMERAL_GIB,
    RAY_NODE_GROUPS,
    RAY_THREADS_PER_WORKER,
    GpuCard,
    NodeGroup,
    gpu_affinity,
    quantity,
    whole_gib,
)
from steps.sizing.disk import convert_disk, evaluate_disk, ray_pod_disk, register_disk, train_disk
from steps.sizing.exports import (
    POD_PATCH_STEPS,
    SIZED_VOLUMES,
    pod_patch_output,
    ray_disk_output,
    ray_memory_output,
    ray_workers_output,
)
from steps.sizing.memory import (
    PROCESS_GIB,
    REGISTER_GIB,
    convert_memory,
    cpu_train_gib,
    evaluate_memory,
    gpu_card_gib,
    gpu_host_gib,
    ray_pod_gib,
    total_gib,
    train_memory,
)
from steps.sizing.shape import Knobs, Shape, shape_of


@dataclass(frozen=True)
class Need:
    """One step's pod: memory and ephemeral storage in GiB (unrounded), and for train-gpu the card's memory."""

    memory_gib: float
    disk_gib: float
    gpu_memory_gib: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class RayGroupPlan:
    group: NodeGroup
    workers_per_pod: int  # 0: the group's pods cannot hold one training worker; it gets no replicas
    pod_memory_gib: float  # what a pod of `workers_per_pod` workers needs (0 workers: one worker's pod, for the record)
    disk_gib: float

    @property
    def memory(self) -> str:
        """The pod's memory request/limit: its need, or the group's ceiling when it gets no workers (unused then)."""
        return quantity(self.pod_memory_gib) if self.workers_per_pod else f"{self.group.memory_gib}Gi"


@dataclass(frozen=True)
class Plan:
    base: str
    shape: Shape
    knobs: Knobs
    steps: dict[str, Need]  # POD_PATCH_STEPS
    ray: tuple[RayGroupPlan, ...]
    gpu_card: GpuCard | None  # the smallest card of the GPU NodePool that holds train-gpu; None: none does

    def pod_patch(self, step: str) -> str:
        """The JSON podSpecPatch of `step`: memory and ephemeral storage (requests = limits, so the scheduler reserves
        what the step uses and the pod is not evicted for using what it asked for); train-gpu also requires a card
        with enough memory."""
        need = self.steps[step]
        resources = {"memory": quantity(need.memory_gib), "ephemeral-storage": quantity(need.disk_gib)}
        patch: dict[str, Any] = {
            "containers": [{"name": "main", "resources": {"requests": resources, "limits": dict(resources)}}]
        }
        patch["volumes"] = [
            {"name": v, "emptyDir": {"sizeLimit": resources["ephemeral-storage"]}} for v in SIZED_VOLUMES
        ]
        if step == "train-gpu":
            patch["affinity"] = gpu_affinity(need.gpu_memory_gib)
        return json.dumps(patch, sort_keys=True, separators=(",", ":"))

    def outputs(self) -> dict[str, str | int]:
        """Every sizing output parameter (sizing.preflight_exports()), by name."""
        values: dict[str, str | int] = {pod_patch_output(s): self.pod_patch(s) for s in POD_PATCH_STEPS}
        for g in self.ray:
            values[ray_workers_output(g.group.name)] = g.workers_per_pod
            values[ray_memory_output(g.group.name)] = g.memory
            values[ray_disk_output(g.group.name)] = quantity(g.disk_gib)
        return values

    def summary(self) -> dict[str, Any]:
        """What preflight.json records: the knobs, the shape, each step's need and the Ray groups."""
        return {
            "knobs": asdict(self.knobs),
            "shape": asdict(self.shape),
            "steps": {
                name: {
                    "memory_gib": round(n.memory_gib, 2),
                    "disk_gib": round(n.disk_gib, 2),
                    **({"gpu_memory_gib": round(n.gpu_memory_gib, 2)} if n.gpu_memory_gib else {}),
                    "why": n.why,
                }
                for name, n in self.steps.items()
            },
            "ray": {
                g.group.name: {
                    "workers_per_pod": g.workers_per_pod,
                    "memory": g.memory,
                    "pod_memory_gib": round(g.pod_memory_gib, 2),
                    "disk_gib": round(g.disk_gib, 2),
                }
                for g in self.ray
            },
            "gpu_card": self.gpu_card.name if self.gpu_card else None,
        }


def _gib(terms: dict[str, float]) -> str:
    return ", ".join(f"{name} {value / GIB:.1f}" for name, value in terms.items())


def ray_group_plan(s: Shape, k: Knobs, group: NodeGroup) -> RayGroupPlan:
    """As many training workers per pod as the group's CPUs allow (RAY_THREADS_PER_WORKER each) and its memory holds."""
    disk = ray_pod_disk(s, k) / GIB
    for workers in range(group.cpus // RAY_THREADS_PER_WORKER, 0, -1):
        need = ray_pod_gib(s, k, workers)
        if whole_gib(need) <= group.memory_gib:
            return RayGroupPlan(group, workers, need, disk)
    return RayGroupPlan(group, 0, ray_pod_gib(s, k, 1), disk)


def plan(
    config: Any,
    *,
    backend: str,
    qlora: bool,
    max_seq_len: int,
    batch_size: int,
    lora_r: int,
    quantizations: str | tuple[str, ...],
    precision: str = "auto",
    parameters: int | None = None,
    base_model: str = "",
) -> Plan:
    """What each step needs for the base `config` describes, under these settings (preflight's flags)."""
    if isinstance(quantizations, str):
        quantizations = tuple(q.strip() for q in quantizations.split(",") if q.strip())
    knobs = Knobs(backend, qlora, max_seq_len, batch_size, lora_r, tuple(quantizations), precision)
    shape = shape_of(config, parameters)
    return plan_for(shape, knobs, base_model or config.name_or_path or "the base model")


def _cpu_precision(k: Knobs) -> str:
    return "float32" if k.precision == "fp32" else f"float32 + bf16 autocast copies ({k.precision})"


def plan_for(s: Shape, k: Knobs, base: str) -> Plan:
    """`plan` on a Shape: pure arithmetic."""
    known = replace(k, quantizations=tuple(q for q in k.quantizations if q in QUANTS) or ("Q8_0",))
    cpu = train_memory(s, known, device="cpu")
    card = gpu_card_gib(s, known)
    device = "qlora" if k.qlora else "gpu"
    steps = {
        "train-gpu": Need(
            gpu_host_gib(s, known),
            train_disk(s, known) / GIB,
            card,
            f"{'QLoRA (NF4)' if k.qlora else 'bf16'} on the card: {_gib(train_memory(s, known, device=device))} "
            f"GiB + CUDA context",
        ),
        "train-cpu": Need(
            cpu_train_gib(s, known), train_disk(s, known) / GIB, why=f"{_cpu_precision(k)}: {_gib(cpu)} GiB"
        ),
        "convert-gguf": Need(
            total_gib(convert_memory(s, known), PROCESS_GIB),
            convert_disk(s, known) / GIB,
            why=_gib(convert_memory(s, known)),
        ),
        "evaluate": Need(
            total_gib(evaluate_memory(s, known), PROCESS_GIB),
            evaluate_disk(s, known) / GIB,
            why=_gib(evaluate_memory(s, known)),
        ),
        # MLflow streams the GGUF up; 2 GiB was what the pod always had.
        "register": Need(max(PROCESS_GIB, REGISTER_GIB), register_disk(s, known) / GIB, why="MLflow client"),
    }
    fitting = [c for c in sorted(GPU_CARDS, key=lambda c: c.memory_mib) if c.memory_mib >= card * 1024]
    return Plan(
        base=base,
        shape=s,
        knobs=k,
        steps=steps,
        ray=tuple(ray_group_plan(s, known, g) for g in RAY_NODE_GROUPS),
        gpu_card=fitting[0] if fitting else None,
    )


# --- What cannot run, and what to do -----------------------------------------------------------------------------


def _largest(fits: Callable[[Knobs], bool], k: Knobs, name: str) -> int:
    """The largest value of knob `name` (below its current one) with which `fits` holds; 0 if none."""
    lo, hi = 0, getattr(k, name) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(replace(k, **{name: mid})):
            lo = mid
        else:
            hi = mid - 1
    return lo if lo and fits(replace(k, **{name: lo})) else 0


def _shrink(fits: Callable[[Knobs], bool], k: Knobs) -> str:
    """The knobs that would make `fits` hold, in words."""
    seq = _largest(fits, k, "max_seq_len")
    batch = _largest(fits, k, "batch_size")
    ways = []
    if k.precision != "fp32" and fits(replace(k, precision="fp32")):
        ways.append("precision fp32 (no bf16 autocast copies of the weights)")
    if seq:
        ways.append(f"a max-seq-len of at most {seq}")
    if batch:
        ways.append(f"a batch-size of at most {batch}")
    return " or ".join(ways) if ways else "no shorter max-seq-len or smaller batch-size fits: the weights alone do not"


def _gpu_alternatives(s: Shape, k: Knobs) -> str:
    biggest = max(GPU_CARDS, key=lambda c: c.memory_mib)
    bf16 = gpu_card_gib(s, replace(k, qlora=False))
    nf4 = gpu_card_gib(s, replace(k, qlora=True))
    fits = [f"train-backend gpu ({bf16:.1f} GiB of GPU memory in bf16)"] if bf16 * 1024 <= biggest.memory_mib else []
    if nf4 * 1024 <= biggest.memory_mib:
        fits.append(f"train-backend gpu with qlora true ({nf4:.1f} GiB)")
    return " or ".join(fits)


def check(p: Plan) -> list[str]:
    """Why this run cannot fit the cluster, one problem per line, each with what to do; empty: it fits.

    The chosen backend's training pod, and convert-gguf and evaluate (every run has them), must fit their nodes. The
    values themselves (a backend's name, a quantisation's) are the steps' to judge (their `config_problems`, which
    check-parameters runs); a plan sizes the ladder's known rungs."""
    s, k = p.shape, p.knobs
    problems = []
    node = f"the biggest CPU node ({CPU_NODE.name}: {CPU_NODE.cpus} CPU / {CPU_NODE.memory_gib} GiB)"
    if k.backend == "cpu" and whole_gib(p.steps["train-cpu"].memory_gib) > CPU_NODE.memory_gib:
        other = _gpu_alternatives(s, k)
        problems.append(
            f"train-backend cpu cannot hold {p.base}: training needs {p.steps['train-cpu'].memory_gib:.1f} GiB "
            f"({p.steps['train-cpu'].why}) and {node} has less; use "
            + (f"{other}, or " if other else "")
            + _shrink(lambda kk: whole_gib(cpu_train_gib(s, kk)) <= CPU_NODE.memory_gib, k)
        )
    if k.backend == "ray" and not any(g.workers_per_pod for g in p.ray):
        groups = max(RAY_NODE_GROUPS, key=lambda g: g.memory_gib)
        other = _gpu_alternatives(s, k)
        one = next(g for g in p.ray if g.group == groups)
        problems.append(
            f"train-backend ray cannot hold {p.base}: one training worker ({_cpu_precision(k)}) with the whole "
            f"batch of {k.batch_size} x {k.max_seq_len} tokens needs a {one.pod_memory_gib:.1f} GiB pod "
            f"({_gib(train_memory(s, k, device='ray'))} GiB + Ray), and the biggest Ray node group ({groups.name}: "
            f"{groups.memory_gib} GiB) has less; use "
            + (f"{other}, or " if other else "")
            + _shrink(lambda kk: whole_gib(ray_pod_gib(s, kk, 1)) <= groups.memory_gib, k)
        )
    if k.backend == "gpu":
        need = p.steps["train-gpu"]
        biggest = max(GPU_CARDS, key=lambda c: c.memory_mib)
        if p.gpu_card is None:
            nf4 = gpu_card_gib(s, replace(k, qlora=True))
            qlora = f"qlora true ({nf4:.1f} GiB), or " if not k.qlora and nf4 * 1024 <= biggest.memory_mib else ""
            problems.append(
                f"train-backend gpu cannot hold {p.base}: {need.why} needs a {need.gpu_memory_gib:.1f} GiB card and "
                f"the GPU NodePool's biggest ({biggest.name}, {biggest.memory_mib} MiB) is smaller; use {qlora}"
                + _shrink(lambda kk: gpu_card_gib(s, kk) * 1024 <= biggest.memory_mib, k)
                + " (or add a bigger GPU family to infra/karpenter/nodepool-gpu-spot.yaml and sizing.GPU_CARDS)"
            )
        if need.disk_gib > GPU_NODE_EPHEMERAL_GIB:
            problems.append(
                f"train-gpu for {p.base} needs {need.disk_gib:.0f} GiB of disk and a GPU node has "
                f"{GPU_NODE_EPHEMERAL_GIB} GiB; enlarge the root volume in infra/karpenter/ec2nodeclass-gpu.yaml"
            )
    for step in ("convert-gguf", "evaluate"):
        need = p.steps[step]
        if whole_gib(need.memory_gib) > CPU_NODE.memory_gib:
            problems.append(
                f"{step} cannot hold {p.base}: it needs {need.memory_gib:.1f} GiB ({need.why} GiB) and {node} has "
                f"less, whatever the training settings; pick a smaller base model, or give the CPU pool a node of "
                f"at least {whole_gib(need.memory_gib)} GiB (and raise sizing.RAY_NODE_GROUPS' large group to it)"
            )
    return problems
