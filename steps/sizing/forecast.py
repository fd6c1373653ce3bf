"""How long training will take and what it will cost, before it starts: the training tokens over a throughput model
calibrated on measured runs, scaled to the base and to the CPUs the plan gives the run.

The model, and what it assumes (each an estimate until a run on the pool measures it; register records the run's
real wall time beside this forecast, `train.forecast_seconds`, so each run checks it):
- a trained token costs compute in proportion to the base's parameters (forward and backward through the frozen base:
  4·N FLOPs; attention's and the summary tail's own cost ignored), so tokens/s scales as 1/N from the measured base;
- on CPU, tokens/s grows linearly with the threads computing it (measured on 2 cores only), at the rate of the
  precision the plan sized (float32 where float32 fits: a CPU with native bf16 then trains faster than forecast);
- Ray's workers add up (the LoRA gradients' all-reduce ignored), at the pace of the one with the largest share of
  each batch (every worker has the same threads: plan.ray_threads);
- on the GPU pool, the rate measured on an H200 (a g5/g6/g6e card is slower: the forecast is a lower bound there);
- the time to load the base, checkpoint and start pods is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from steps.sizing.cluster import TRAIN_CPU_CPUS
from steps.sizing.plan import Plan, cpu_knobs

# The measured rates the model scales, and where they come from.
# CPU: the train step's loop on SmolLM2-135M (parameters counted by sizing: REFERENCE_BASE), 2 cores, 2026-12-02
# (shared TOOLCHAIN.md): 231 tokens/s in bf16 on an AMD Zen 4 (AVX-512-BF16), 77 tokens/s in float32 on an AVX2 EPYC.
CPU_TOKENS_PER_CORE_SECOND = {"bf16": 231 / 2, "fp32": 77 / 2}
REFERENCE_BASE = "SmolLM2-135M"
# GPU: benchmarks/gpu_train.py on one H200, Llama-3.2-3B's shape, batch 8 (docs/training.md): 2,586 tokens/s in bf16,
# 2,365 with QLoRA.
GPU_TOKENS_PER_SECOND = {"gpu": 2586.0, "qlora": 2365.0}
GPU_REFERENCE_BASE = "Llama-3.2-3B"
# The workflow's deadline (workflows/distill.py and the RayJob's activeDeadlineSeconds read it): a run whose training
# alone is forecast past it is refused before it starts.
DEADLINE_S = 8 * 3600


@dataclass(frozen=True)
class Forecast:
    """Training's expected wall time and cost, and how they were reached."""

    tokens: int  # trained tokens: every epoch's examples, each at most max-seq-len
    tokens_per_second: float
    seconds: float
    usd: float
    price_per_hour: float
    how: str  # the workers, threads, precision and measured rate behind tokens_per_second

    def record(self) -> dict[str, float | int | str]:
        return {
            "tokens": self.tokens,
            "tokens_per_second": round(self.tokens_per_second, 2),
            "seconds": round(self.seconds, 1),
            "usd": round(self.usd, 4),
            "price_per_hour": self.price_per_hour,
            "how": self.how,
        }

    def __str__(self) -> str:
        return (
            f"training forecast {_duration(self.seconds)} (${self.usd:.2f} at ${self.price_per_hour:.2f}/h): "
            f"{self.tokens:,} tokens at {self.tokens_per_second:,.1f} tokens/s, {self.how}"
        )


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def train_tokens(example_tokens: list[int], max_seq_len: int, epochs: float) -> int:
    """The tokens training computes: each example's tokens (capped at max-seq-len: longer ones are cut), every epoch."""
    return math.ceil(sum(min(n, max_seq_len) for n in example_tokens) * epochs)


def _reference_parameters(name: str) -> int:
    from steps.sizing.seeds import shape

    return shape(name).parameters


def cpu_rate(parameters: int, precision: str, threads: int) -> float:
    """Tokens/s of one CPU training process of `threads` threads in `precision` (fp32 or bf16) on a base of
    `parameters`."""
    if precision not in CPU_TOKENS_PER_CORE_SECOND:
        raise ValueError(f"precision {precision!r}: resolve auto to fp32 or bf16 first")
    return CPU_TOKENS_PER_CORE_SECOND[precision] * threads * _reference_parameters(REFERENCE_BASE) / parameters


def ray_rate(parameters: int, precision: str, threads: int, workers: int, batch_size: int) -> float:
    """Tokens/s of `workers` Ray workers of `threads` threads each: their rates added, paced by the largest share of
    a batch (train_loop gives rank r every world-size-th example)."""
    share = math.ceil(batch_size / workers)
    return workers * cpu_rate(parameters, precision, threads) * (batch_size / workers) / share


def gpu_rate(parameters: int, qlora: bool) -> float:
    """Tokens/s of train-gpu on a base of `parameters` (the H200's measured rate, scaled)."""
    return GPU_TOKENS_PER_SECOND["qlora" if qlora else "gpu"] * _reference_parameters(GPU_REFERENCE_BASE) / parameters


def forecast(tokens: int, tokens_per_second: float, price_per_hour: float, how: str) -> Forecast:
    seconds = tokens / tokens_per_second
    return Forecast(tokens, tokens_per_second, seconds, seconds / 3600 * price_per_hour, price_per_hour, how)


def _ray_workers(p: Plan) -> int:
    """The Ray run's training workers at the workflow's default replicas (NodeGroup.default_replicas)."""
    return sum(g.group.default_replicas * g.workers_per_pod for g in p.ray)


def plan_forecast(p: Plan, tokens: int, prices: dict[str, float], cpu_threads: int = TRAIN_CPU_CPUS) -> Forecast:
    """Training's forecast for plan `p` on its backend: `tokens` at the rate the plan gives it, priced at the
    backend's $/h in `prices` (register's --price-table; 0 where it names none). `cpu_threads`: the cpu backend's
    threads (its pod's CPUs on the cluster; fewer where the machine has fewer, as the embedded run's)."""
    s, k = p.shape, p.knobs
    price = prices.get(k.backend, 0.0)
    if k.backend == "ray":
        workers, threads, precision = _ray_workers(p), p.ray_threads, p.ray_precision
        rate = ray_rate(s.parameters, precision, threads, max(workers, 1), k.batch_size) if workers else 0.0
        how = (f"ray: {workers} workers (the default replicas) x {threads} threads, {precision}, "
               f"{CPU_TOKENS_PER_CORE_SECOND[precision]:.1f} tokens/s per core on {REFERENCE_BASE} scaled by "
               "parameters")  # fmt: skip
    elif k.backend == "gpu":
        rate = gpu_rate(s.parameters, k.qlora)
        how = (f"gpu{' QLoRA' if k.qlora else ''}: measured on an H200 on {GPU_REFERENCE_BASE}'s shape, scaled by "
               f"parameters (a lower bound on {p.gpu_card.name if p.gpu_card else 'the pool'})")  # fmt: skip
    else:
        precision = cpu_knobs(s, k).precision
        rate = cpu_rate(s.parameters, precision, cpu_threads)
        how = (f"cpu: one process of {cpu_threads} threads, {precision}, {CPU_TOKENS_PER_CORE_SECOND[precision]:.1f} "
               f"tokens/s per core on {REFERENCE_BASE} scaled by parameters")  # fmt: skip
    if rate <= 0:  # nothing can train: check() refuses the plan itself
        return Forecast(tokens, 0.0, math.inf, math.inf, price, how)
    return forecast(tokens, rate, price, how)


def check_forecast(p: Plan, f: Forecast, prices: dict[str, float]) -> list[str]:
    """Why the forecast refuses this run, with what would fit: training alone past DEADLINE_S, or no price for the
    backend (the cost could not be stated)."""
    problems = []
    if p.knobs.backend not in prices:
        problems.append(f"--price-table has no price for {p.knobs.backend}: add {p.knobs.backend}=<$ per hour>")
    if math.isfinite(f.seconds) and f.seconds > DEADLINE_S:
        fraction = DEADLINE_S / f.seconds
        ways = [f"fewer training tokens: at most {fraction:.0%} of them (fewer epochs, or a shorter max-seq-len)"]
        if p.knobs.backend != "gpu":
            gpu = forecast(f.tokens, gpu_rate(p.shape.parameters, False), prices.get("gpu", 0.0), "")
            ways.append(f"train-backend gpu (forecast {_duration(gpu.seconds)})")
        if p.knobs.backend == "ray":
            ways.append(f"{math.ceil(_ray_workers(p) / fraction)} Ray workers or more (more replicas)")
        problems.append(
            f"training {p.base} is forecast at {_duration(f.seconds)} ({f}), past the workflow's "
            f"{DEADLINE_S // 3600} h deadline; use " + " or ".join(ways)
        )
    return problems
