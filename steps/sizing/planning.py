"""The plan: each sized step's memory and disk, each Ray group's workers per pod, the GPU card; its podSpecPatches
and output parameters; and `check`, what cannot run and what to do instead."""

from __future__ import annotations

import itertools
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
    NODE_RESERVED_GIB,
    RAY_NODE_GROUPS,
    GpuCard,
    NodeGroup,
    gpu_affinity,
    gpu_over_mib,
    whole_gib,
)
from steps.sizing.disk import convert_disk, evaluate_disk, ray_pod_disk, register_disk, train_disk
from steps.sizing.exports import (
    CPU_INPUT,
    DISK_INPUT,
    GPU_OVER_INPUT,
    MEMORY_INPUT,
    POD_PATCH_STEPS,
    RAY_THREADS_OUTPUT,
    SIZED_VOLUMES,
    ray_cpus_output,
    ray_disk_output,
    ray_memory_output,
    ray_workers_output,
    size_inputs,
    size_output,
)
from steps.sizing.memory import (
    PROCESS_GIB,
    RAY_POD_GIB,
    REGISTER_GIB,
    convert_memory,
    cpu_train_gib,
    device_ways,
    evaluate_memory,
    fit_micro,
    gpu_card_gib,
    gpu_host_gib,
    micro_options,
    ray_pod_gib,
    ray_share,
    total_gib,
    train_memory,
)
from steps.sizing.shape import Knobs, Micro, Shape, shape_of


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
    micro: Micro  # how each worker runs its share (0 workers: the smallest way, for the record)
    precision: str  # the CPU weights of every worker of the run: fp32 or bf16 (ray_precision)
    threads: int  # torch threads and Ray CPUs of every worker of the run (ray_threads)

    @property
    def cpus(self) -> int:
        """The pod's CPU request (= limit = Ray's num-cpus): its workers' threads, every one of them busy."""
        return self.workers_per_pod * self.threads

    @property
    def memory_gib(self) -> int:
        """The pod's memory request/limit in whole GiB: its need, or the group's ceiling when it gets no workers
        (unused then)."""
        return whole_gib(self.pod_memory_gib if self.workers_per_pod else self.group.memory_gib)

    @property
    def memory(self) -> str:
        """memory_gib as a Kubernetes quantity."""
        return f"{self.memory_gib}Gi"


def pod_patch(step: str, number: Callable[[str], str | None]) -> dict[str, Any]:
    """`step`'s podSpecPatch, its one shape: memory and ephemeral storage (requests = limits, so the scheduler reserves
    what the step uses and the pod is not evicted for using what it asked for) and its emptyDirs' size limit; train-gpu
    also requires a card with enough memory; the CPU steps (THREADED_STEPS) request `cpus` CPUs when it is given
    (None: no request in the patch). `number(name)` is the text of each of size_inputs(step): the plan's
    digits, or in a template the Argo expression that reads its input parameter as a whole number (so a patch holds
    nothing but those numbers, whatever preflight wrote)."""
    memory, disk = f"{number(MEMORY_INPUT)}Gi", f"{number(DISK_INPUT)}Gi"
    resources = {"memory": memory, "ephemeral-storage": disk}
    requests = dict(resources)
    cpus = number(CPU_INPUT) if CPU_INPUT in size_inputs(step) else None
    if cpus:  # a request only: no CPU limit, so a step is never throttled below what it asked for
        requests["cpu"] = cpus
    patch: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": resources}}],
        "volumes": [{"name": v, "emptyDir": {"sizeLimit": disk}} for v in SIZED_VOLUMES],
    }
    if GPU_OVER_INPUT in size_inputs(step):
        patch["affinity"] = gpu_affinity(number(GPU_OVER_INPUT))
    return patch


@dataclass(frozen=True)
class Plan:
    base: str
    shape: Shape
    knobs: Knobs
    steps: dict[str, Need]  # POD_PATCH_STEPS
    ray: tuple[RayGroupPlan, ...]
    gpu_card: GpuCard | None  # the smallest card of the GPU NodePool that holds train-gpu; None: none does
    micro: dict[str, Micro]  # train-cpu's and train-gpu's micro-batch on the pod sized for them
    # The run's `threads` (0: not set): the CPU steps (THREADED_STEPS) then ask for exactly the CPUs they compute with
    # instead of their templates' CPU request, so a cluster whose CPU nodes are smaller than that request runs them.
    threads: int = 0

    def size(self, step: str) -> dict[str, int]:
        """`step`'s numbers (exports.size_inputs): memory and disk in whole GiB, for train-gpu the card's floor."""
        need = self.steps[step]
        numbers = {MEMORY_INPUT: whole_gib(need.memory_gib), DISK_INPUT: whole_gib(need.disk_gib)}
        if CPU_INPUT in size_inputs(step):
            numbers[CPU_INPUT] = self.threads
        if GPU_OVER_INPUT in size_inputs(step):
            numbers[GPU_OVER_INPUT] = gpu_over_mib(need.gpu_memory_gib)
        return numbers

    def pod_patch(self, step: str) -> str:
        """The JSON podSpecPatch `step`'s pod gets: pod_patch with this plan's numbers (no CPU request without
        `threads`: the template's stays)."""
        numbers = self.size(step)
        text = {n: str(v) for n, v in numbers.items() if v or n != CPU_INPUT}
        return json.dumps(pod_patch(step, text.get), sort_keys=True, separators=(",", ":"))

    def outputs(self) -> dict[str, str | int]:
        """Every sizing output parameter (sizing.preflight_exports()), by name."""
        values: dict[str, str | int] = {
            size_output(s, name): n for s in POD_PATCH_STEPS for name, n in self.size(s).items()
        }
        for g in self.ray:
            values[ray_workers_output(g.group.name)] = g.workers_per_pod
            values[ray_memory_output(g.group.name)] = g.memory_gib
            values[ray_disk_output(g.group.name)] = whole_gib(g.disk_gib)
            values[ray_cpus_output(g.group.name)] = str(g.cpus)
        values[RAY_THREADS_OUTPUT] = self.ray_threads
        return values

    @property
    def ray_threads(self) -> int:
        """Every Ray worker's threads (one count for the run: ray_threads)."""
        return self.ray[0].threads

    @property
    def ray_precision(self) -> str:
        """Every Ray worker's precision (one for the run's DDP group: ray_precision)."""
        return self.ray[0].precision

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
            "ray_threads": self.ray_threads,
            "ray_precision": self.ray_precision,
            "ray": {
                g.group.name: {
                    "workers_per_pod": g.workers_per_pod,
                    "cpus": g.cpus,
                    "memory": g.memory,
                    "pod_memory_gib": round(g.pod_memory_gib, 2),
                    "disk_gib": round(g.disk_gib, 2),
                    "precision": g.precision,
                    "micro_batch": g.micro.examples,
                    "gradient_checkpointing": g.micro.checkpointing,
                }
                for g in self.ray
            },
            "gpu_card": self.gpu_card.name if self.gpu_card else None,
            "micro": {
                step: {"micro_batch": m.examples, "gradient_checkpointing": m.checkpointing}
                for step, m in self.micro.items()
            },
        }


def _gib(terms: dict[str, float]) -> str:
    return ", ".join(f"{name} {value / GIB:.1f}" for name, value in terms.items())


def resolve_precision(k: Knobs, fits: Callable[[Knobs], bool]) -> Knobs:
    """`k` with `auto` sized as what a worker will load: float32 where float32 fits (a node without native bf16 then
    trains at full speed, one with it in bf16 with room to spare), bf16 where only bf16 does (a node without native
    bf16 then loads bf16 weights and emulates: slower, but it runs: budget.choose does the same at run time)."""
    if k.precision != "auto":
        return k
    fp32 = replace(k, precision="fp32")
    return fp32 if fits(fp32) else replace(k, precision="bf16")


def ray_group_at(s: Shape, k: Knobs, group: NodeGroup, threads: int) -> RayGroupPlan:
    """`group`'s pods at `threads` per worker (`k`'s precision resolved): as many workers as its CPUs allow and its
    memory holds, each running the best of `micro_options` that fits beside the others (more workers before larger
    micro-batches: a worker is CPUs at work, a micro-batch only fewer calls); 0 workers when not one fits."""
    disk = ray_pod_disk(s, k) / GIB
    for workers in range(group.cpus // threads, 0, -1):
        options, need = device_ways(s, k, "ray", ray_share(k, workers), workers)
        micro = fit_micro(options, lambda m, need=need: whole_gib(need(m)), group.memory_gib)
        if micro is not None:
            return RayGroupPlan(group, workers, ray_pod_gib(s, k, workers, micro), disk, micro, k.precision, threads)
    smallest = micro_options(k, ray_share(k, 1))[-1]
    return RayGroupPlan(group, 0, ray_pod_gib(s, k, 1, smallest), disk, smallest, k.precision, threads)


def _holds_one(s: Shape, k: Knobs, group: NodeGroup) -> bool:
    return ray_group_at(s, k, group, 1).workers_per_pod > 0


def _deciding(s: Shape, k: Knobs) -> list[NodeGroup]:
    """The groups whose pods choose the run's precision and threads: those a run has by default (default_replicas >
    0) that hold a worker at all; if none does, every group that does."""
    holding = [g for g in RAY_NODE_GROUPS if _holds_one(s, k, g)]
    return [g for g in holding if g.default_replicas] or holding


def ray_precision(s: Shape, k: Knobs) -> str:
    """The one precision of the Ray run's DDP group (its frozen weights; one dtype for every worker, so no float32
    worker paces bf16 ones and every gradient is computed the same way). Pinned: as given. `auto`: float32 when every
    deciding group (`_deciding`) holds a float32 worker, else bf16 — the weakest pod decides for all. At run time the
    workers agree the same way, adding what preflight cannot see: a CPU without native bf16 keeps the group in
    float32 where float32 fits every worker (steps/train/precision.py `agree`)."""
    if k.precision != "auto":
        return k.precision
    fp32, bf16 = replace(k, precision="fp32"), replace(k, precision="bf16")
    groups = _deciding(s, bf16)
    return "fp32" if groups and all(_holds_one(s, fp32, g) for g in groups) else "bf16"


def ray_threads(s: Shape, k: Knobs) -> int:
    """Threads (and Ray CPUs) per worker for the whole run (`k`'s precision resolved): one count for every worker,
    since DDP steps at the pace of the slowest and every worker computes an equal share of the batch. Each pod then
    holds min(its CPUs // threads, what its memory holds) workers and requests workers x threads CPUs, all of them
    busy. The count keeps the most CPUs of the deciding groups busy, then of every group (so the opt-in small and Pi
    groups still hold a worker where that costs nothing), then the larger count (fewer processes: each holds the frozen
    weights whole). The model behind "most CPUs busy": a worker's speed grows linearly with its threads — an estimate,
    not measured beyond 2 cores (docs/sizing.md)."""
    deciding = _deciding(s, k)
    if not deciding:  # nothing holds a worker: `check` refuses the run; any count will do
        return min(g.cpus for g in RAY_NODE_GROUPS)

    def busy(threads: int, groups: tuple[NodeGroup, ...] | list[NodeGroup]) -> int:
        return sum(ray_group_at(s, k, g, threads).workers_per_pod * threads for g in groups)

    candidates = range(1, min(g.cpus for g in deciding) + 1)
    return max(candidates, key=lambda t: (busy(t, deciding), busy(t, RAY_NODE_GROUPS), t))


def ray_plan(s: Shape, k: Knobs) -> tuple[RayGroupPlan, ...]:
    """Every Ray group's pods for this run: one precision (`ray_precision`) and one thread count (`ray_threads`) for
    all its workers."""
    k = replace(k, precision=ray_precision(s, k))
    threads = ray_threads(s, k)
    return tuple(ray_group_at(s, k, g, threads) for g in RAY_NODE_GROUPS)


def ray_group_plan(s: Shape, k: Knobs, group: NodeGroup) -> RayGroupPlan:
    """`group`'s pods as the run's plan places them (`ray_plan`)."""
    return next(g for g in ray_plan(s, k) if g.group == group)


def cpu_micro(s: Shape, k: Knobs, memory_gib: float) -> Micro:
    """train-cpu's way on a pod of at most `memory_gib` (`k`'s precision resolved): the best that fits, else the
    smallest (`check` refuses it)."""
    options, need = device_ways(s, k, "cpu", k.batch_size)
    return fit_micro(options, lambda m: whole_gib(need(m)), memory_gib) or options[-1]


def gpu_micro(s: Shape, k: Knobs, card: GpuCard | None) -> Micro:
    """train-gpu's way on `card` (None: the biggest card): the best that fits it, else the smallest."""
    biggest = card or max(GPU_CARDS, key=lambda c: c.memory_mib)
    options, need = device_ways(s, k, "gpu", k.batch_size)
    return fit_micro(options, lambda m: need(m) * 1024, biggest.memory_mib) or options[-1]


def gpu_cards_holding(s: Shape, k: Knobs) -> list[GpuCard]:
    """The cards of the GPU NodePool that hold train-gpu in some way, smallest first (a stable sort: GPU_CARDS' order
    among cards of one size)."""
    options, need = device_ways(s, k, "gpu", k.batch_size)
    return [
        card
        for card in sorted(GPU_CARDS, key=lambda c: c.memory_mib)
        if fit_micro(options, lambda m: need(m) * 1024, card.memory_mib) is not None
    ]


def gpu_card(s: Shape, k: Knobs) -> GpuCard | None:
    """The smallest card of the GPU NodePool that holds train-gpu in some way; None: none does."""
    return next(iter(gpu_cards_holding(s, k)), None)


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
    micro_batch: int = 0,
    gradient_checkpointing: str = "auto",
    parameters: int | None = None,
    base_model: str = "",
    threads: int = 0,
) -> Plan:
    """What each step needs for the base `config` describes, under these settings (preflight's flags); `threads`: the
    run's CPU threads (0: not set), which the CPU steps' pods then request."""
    if isinstance(quantizations, str):
        quantizations = tuple(q.strip() for q in quantizations.split(",") if q.strip())
    knobs = Knobs(
        backend, qlora, max_seq_len, batch_size, lora_r, tuple(quantizations), precision, micro_batch,
        gradient_checkpointing,
    )  # fmt: skip
    shape = shape_of(config, parameters)
    return replace(plan_for(shape, knobs, base_model or config.name_or_path or "the base model"), threads=threads)


def _cpu_precision(k: Knobs, sized: str) -> str:
    weights = "float32" if sized == "fp32" else "bf16"
    return f"auto's {weights} weights" if k.precision == "auto" else f"{weights} weights"


def cpu_knobs(s: Shape, k: Knobs) -> Knobs:
    """train-cpu's knobs with `auto` resolved for the biggest CPU node."""
    return resolve_precision(k, lambda kk: _cpu_fits(s, kk))


def plan_for(s: Shape, k: Knobs, base: str) -> Plan:
    """`plan` on a Shape: pure arithmetic."""
    known = replace(k, quantizations=tuple(q for q in k.quantizations if q in QUANTS) or ("Q8_0",))
    cpu_k = cpu_knobs(s, known)
    cpu_way = cpu_micro(s, cpu_k, CPU_NODE.memory_gib)
    card = gpu_card(s, known)
    gpu_way = gpu_micro(s, known, card)
    device = "qlora" if k.qlora else "gpu"
    steps = {
        "train-gpu": Need(
            gpu_host_gib(s, known),
            train_disk(s, known) / GIB,
            gpu_card_gib(s, known, gpu_way),
            f"{'QLoRA (NF4)' if k.qlora else 'bf16'} on the card, {gpu_way}: "
            f"{_gib(train_memory(s, known, gpu_way, device=device))} GiB + CUDA context",
        ),
        "train-cpu": Need(
            cpu_train_gib(s, cpu_k, cpu_way),
            train_disk(s, known) / GIB,
            why=f"{_cpu_precision(k, cpu_k.precision)}, {cpu_way}: "
            f"{_gib(train_memory(s, cpu_k, cpu_way, device='cpu'))} GiB",
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
    return Plan(
        base=base,
        shape=s,
        knobs=k,
        steps=steps,
        ray=ray_plan(s, known),
        gpu_card=card,
        micro={"train-cpu": cpu_way, "train-gpu": gpu_way},
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


def _together(words: list[str]) -> str:
    """'A', 'A together with B', 'A, B together with C': settings that only fit when changed together."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} together with {words[-1]}"


def _shrink(fits: Callable[[Knobs], bool], k: Knobs) -> list[str]:
    """The settings that would make `fits` hold, each in words: every smallest set of the relaxations (bf16, gradient
    checkpointing back to auto, micro-batch back to 0) that fits, then the longest max-seq-len that fits as given or,
    where none does, with every relaxation; none: no setting of this backend does. The batch size is not one:
    micro-batches take any batch."""
    relax: list[tuple[str, dict[str, Any]]] = []
    if k.precision != "bf16":
        relax.append(("precision bf16 (a bf16 base: half the weights; slow where the CPU lacks AMX or AVX-512-BF16)",
                      {"precision": "bf16"}))  # fmt: skip
    if k.gradient_checkpointing == "off":
        relax.append(("gradient-checkpointing auto", {"gradient_checkpointing": "auto"}))
    if k.micro_batch:
        relax.append(("micro-batch 0 (sized from the memory)", {"micro_batch": 0}))

    def changed(combo: tuple[tuple[str, dict[str, Any]], ...]) -> Knobs:
        return replace(k, **{name: v for _, change in combo for name, v in change.items()})

    ways: list[str] = []
    fitting: list[set[str]] = []
    for size in range(1, len(relax) + 1):
        for combo in itertools.combinations(relax, size):
            names = {words for words, _ in combo}
            if not any(f <= names for f in fitting) and fits(changed(combo)):
                fitting.append(names)
                ways.append(_together([words for words, _ in combo]))
    seq = _largest(fits, k, "max_seq_len")
    if seq:
        ways.append(f"a max-seq-len of at most {seq}")
    elif relax and (seq := _largest(fits, changed(tuple(relax)), "max_seq_len")):
        ways.append(_together([words for words, _ in relax] + [f"a max-seq-len of at most {seq}"]))
    return ways


def _a(amount: str) -> str:
    """The article before a number as it is read aloud: 'an 8.3', 'an 11', 'an 18', 'a 16', 'a 1038.0'."""
    whole = amount.split(".")[0].replace(",", "")
    lead = int(whole[: len(whole) % 3 or 3]) if whole.isdigit() else 0
    return "an" if str(lead).startswith("8") or lead in (11, 18) else "a"


def _use(ways: list[str], last_resort: str) -> str:
    """'use A or B' from the ways that fit; `last_resort` where none does (the weights alone do not fit, at any
    max-seq-len)."""
    return "use " + " or ".join(ways) if ways else last_resort


def _a_card(card: GpuCard | None) -> str:
    """'an NVIDIA A10G': a card with its article."""
    return f"an {card.name}" if card else "no card"


def _gpu_alternatives(s: Shape, k: Knobs) -> list[str]:
    """The GPU pool's ways to hold the base, each with the plan of the smallest card that does."""
    fits = []
    for qlora, what in ((False, "in bf16"), (True, "with qlora true")):
        kk = replace(k, qlora=qlora)
        card = gpu_card(s, kk)
        if card is not None:
            need = gpu_card_gib(s, kk, gpu_micro(s, kk, card))
            fits.append(f"train-backend gpu {what} ({need:.1f} GiB of {_a_card(card)}, {gpu_micro(s, kk, card)})")
    return fits


def _cpu_fits(s: Shape, k: Knobs) -> bool:
    if k.precision == "auto":
        return _cpu_fits(s, replace(k, precision="bf16"))  # the smaller of what auto may load
    options = micro_options(k, k.batch_size)
    return fit_micro(options, lambda m: whole_gib(cpu_train_gib(s, k, m)), CPU_NODE.memory_gib) is not None


def _ray_fits(s: Shape, k: Knobs, group: NodeGroup) -> bool:
    return ray_group_plan(s, k, group).workers_per_pod > 0


# What a refusal says when no setting of the backend holds the base (its weights alone do not fit).
_SMALLER_BASE = "no setting of this backend holds it (its weights alone do not fit): pick a smaller base model"


def check(p: Plan) -> list[str]:
    """Why this run cannot fit the cluster, one problem per line, each with what to do; empty: it fits.

    The chosen backend's training pod, and convert-gguf and evaluate (every run has them), must fit their nodes. The
    values themselves (a backend's name, a quantisation's) are the steps' to judge (their `config_problems`, which
    check-parameters runs); a plan sizes the ladder's known rungs."""
    s, k = p.shape, p.knobs
    problems = []
    node = f"the biggest CPU node ({CPU_NODE.name}: {CPU_NODE.cpus} CPU / {CPU_NODE.memory_gib:g} GiB allocatable)"
    if k.backend == "cpu" and whole_gib(p.steps["train-cpu"].memory_gib) > CPU_NODE.memory_gib:
        other = _gpu_alternatives(s, k)
        problems.append(
            f"train-backend cpu cannot hold {p.base}: training needs {p.steps['train-cpu'].memory_gib:.1f} GiB "
            f"({p.steps['train-cpu'].why}) and {node} has less; "
            + _use(other + _shrink(lambda kk: _cpu_fits(s, kk), k), _SMALLER_BASE)
        )
    if k.backend == "ray" and not any(g.workers_per_pod for g in p.ray):
        groups = max(RAY_NODE_GROUPS, key=lambda g: g.memory_gib)
        other = _gpu_alternatives(s, k)
        one = next(g for g in p.ray if g.group == groups)
        pod = f"{one.pod_memory_gib:.1f}"
        problems.append(
            f"train-backend ray cannot hold {p.base}: one training worker ({_cpu_precision(k, one.precision)}, "
            f"{one.micro}) needs {_a(pod)} {pod} GiB pod "
            f"({_gib(train_memory(s, replace(k, precision=one.precision), one.micro, device='ray'))} GiB + Ray "
            f"{RAY_POD_GIB:.1f} GiB), and the biggest Ray node group ({groups.name}: {groups.memory_gib:g} GiB "
            "allocatable) has less; " + _use(other + _shrink(lambda kk: _ray_fits(s, kk, groups), k), _SMALLER_BASE)
        )
    if k.backend == "gpu":
        need = p.steps["train-gpu"]
        biggest = max(GPU_CARDS, key=lambda c: c.memory_mib)
        if p.gpu_card is None:
            nf4k = replace(k, qlora=True)
            nf4_card = gpu_card(s, nf4k)
            nf4 = gpu_card_gib(s, nf4k, gpu_micro(s, nf4k, nf4_card))
            qlora = [f"qlora true ({nf4:.1f} GiB of {_a_card(nf4_card)})"] if not k.qlora and nf4_card else []
            card = f"{need.gpu_memory_gib:.1f}"
            problems.append(
                f"train-backend gpu cannot hold {p.base}: training ({need.why}) needs {_a(card)} {card} GiB card, "
                f"and the GPU NodePool's biggest ({biggest.name}, {biggest.memory_mib} MiB) is smaller; "
                + _use(qlora + _shrink(lambda kk: gpu_card(s, kk) is not None, k), "pick a smaller base model")
                + ", or add a bigger GPU family to infra/karpenter/nodepool-gpu-spot.yaml and sizing.cluster.GPU_CARDS"
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
                f"at least {whole_gib(need.memory_gib + NODE_RESERVED_GIB)} GiB of RAM (and raise "
                "sizing.RAY_NODE_GROUPS' large group to it)"
            )
    return problems


def ray_notes(p: Plan) -> list[str]:
    """The Ray node groups a ray run leaves out, one sentence each: the group, what one worker would need in its pods,
    that it gets no replicas whatever its replica parameter asks (the workflow gives a group whose pods hold no worker
    0 replicas), and what would let it hold one. Empty for the other backends."""
    if p.knobs.backend != "ray":
        return []
    s, k = p.shape, p.knobs
    notes = []
    for g in p.ray:
        if g.workers_per_pod:
            continue
        group, pod = g.group, f"{g.pod_memory_gib:.1f}"
        ways = _shrink(lambda kk, group=group: _ray_fits(s, kk, group), k)
        fix = "for this run, use " + " or ".join(ways) + "; or, " if ways else ""
        notes.append(
            f"the {group.name} group ({group.arch}, {group.cpus} CPU / {group.memory_gib:g} GiB allocatable) cannot "
            f"hold one {p.base} "
            f"training worker ({_cpu_precision(k, g.precision)}, {g.micro}: {_a(pod)} {pod} GiB pod), so it gets no "
            f"replicas whatever ray-{group.name}-workers asks; to train on it, {fix}if its nodes have more memory "
            f"than the {group.ram_gib} GiB declared, raise its ram_gib in sizing.cluster.RAY_NODE_GROUPS"
        )
    return notes
