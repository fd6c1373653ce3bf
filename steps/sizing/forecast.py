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
- on the GPU pool, the rates an H200 measured at the A10G plan's micro-batches (GPU_MEASURED), interpolated between
  the measured bases by parameters and scaled to each pool card by the smaller of its dense-bf16 and memory-bandwidth
  ratios to the H200 (CARD_SHEETS' datasheet figures): an estimate until a pool card measures itself, taken for the
  slowest card the pod may land on;
- the time to load the base, checkpoint and start pods is not counted.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from steps.sizing.cluster import GPU_CARDS, TRAIN_CPU_CPUS, GpuCard, card_sheet, gpu_over_mib
from steps.sizing.planning import Plan, cpu_knobs, gpu_cards_holding

# The measured rates the model scales, and where they come from.
# CPU: the train step's loop on SmolLM2-135M (parameters counted by sizing: REFERENCE_BASE), 2 cores, 2026-12-02
# (shared TOOLCHAIN.md): 231 tokens/s in bf16 on an AMD Zen 4 (AVX-512-BF16), 77 tokens/s in float32 on an AVX2 EPYC.
CPU_TOKENS_PER_CORE_SECOND = {"bf16": 231 / 2, "fp32": 77 / 2}
REFERENCE_BASE = "SmolLM2-135M"
# GPU: tokens/s measured on one H200 run alone (2026-12-04), each base's whole shape (random-init, 128k vocabulary) at
# the cluster's defaults (batch 16 x max-seq-len 512) pinned to the way the plan runs it on an A10G (1B micro-batch 8,
# 3B micro-batch 4, 8B micro-batch 4 with checkpointing): `python -m benchmarks.gpu_train --plan-card "NVIDIA A10G"
# --batch-size 16 --tokenizer <SmolLM2's tokenizer folder> --json gpu.json`, GPU_MEASUREMENT (its tokens_per_second).
# The card they were measured on is no card of the pool: GPU_CARD_RATES scales them to the pool's cards.
GPU_MEASURED_ON = "NVIDIA H200"
GPU_MEASUREMENT = "benchmarks/results/2026-12-04-xeon16-h200/run3-gpu/gpu.json"
GPU_MEASURED: dict[str, float] = {"Llama-3.2-1B": 10045.1, "Llama-3.2-3B": 5371.5, "Llama-3.1-8B": 2751.2}
# QLoRA was not measured at the plan's micro-batches: the H200's batch-8 runs on the 3B shape (docs/training.md) gave
# 2,365 tokens/s against 2,586 in bf16, and the forecast applies that ratio (an estimate).
QLORA_OVER_BF16 = 2365 / 2586
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


def _measured_gpu_rate(parameters: int) -> float:
    """Tokens/s on GPU_MEASURED_ON for a base of `parameters`: tokens/s x parameters (the FLOPs rate the card reached)
    interpolated linearly in log(parameters) between the measured bases, held at the nearest one outside them."""
    points = sorted((_reference_parameters(name), rate * _reference_parameters(name)) for name, rate in
                    GPU_MEASURED.items())  # fmt: skip
    if parameters <= points[0][0]:
        return points[0][1] / parameters
    for (n0, e0), (n1, e1) in itertools.pairwise(points):
        if parameters <= n1:
            w = math.log(parameters / n0) / math.log(n1 / n0)
            return (e0 + w * (e1 - e0)) / parameters
    return points[-1][1] / parameters


def card_ratio(card: str) -> tuple[float, str]:
    """How fast `card` trains against GPU_MEASURED_ON, and on what figures: the smaller of the two datasheet ratios
    (dense bf16 tensor peak, memory bandwidth) both cards publish. At the plan's micro-batches the H200 ran at ~7 % of
    its bf16 peak, so a step is far from compute-bound and part of it scales with bandwidth; the smaller ratio is the
    longer forecast. (1.0, 'measured') on the card itself; ValueError for a card without figures."""
    if card == GPU_MEASURED_ON:
        return 1.0, "measured"
    ref, sheet = card_sheet(GPU_MEASURED_ON), card_sheet(card)
    if ref is None or sheet is None:
        raise ValueError(f"no datasheet figures for {card}: add it to sizing.cluster.CARD_SHEETS")
    ratios = []
    if sheet.bf16_tflops and ref.bf16_tflops:
        ratios.append(
            (sheet.bf16_tflops / ref.bf16_tflops, f"dense bf16 {sheet.bf16_tflops:g}/{ref.bf16_tflops:g} TFLOP/s")
        )
    if sheet.memory_gb_s and ref.memory_gb_s:
        ratios.append(
            (sheet.memory_gb_s / ref.memory_gb_s, f"memory bandwidth {sheet.memory_gb_s:g}/{ref.memory_gb_s:g} GB/s")
        )
    if not ratios:
        raise ValueError(f"no datasheet figure of {card} to compare with {GPU_MEASURED_ON}'s: add one to CARD_SHEETS")
    return min(ratios)


def gpu_rate(parameters: int, qlora: bool, card: str) -> float:
    """Tokens/s of train-gpu on `card` for a base of `parameters`: the measured rate, scaled (card_ratio); QLoRA at
    QLORA_OVER_BF16 of it."""
    return _measured_gpu_rate(parameters) * card_ratio(card)[0] * (QLORA_OVER_BF16 if qlora else 1.0)


def gpu_card_rates(parameters: int, qlora: bool = False) -> list[tuple[str, float, str]]:
    """The throughput table, per card: (card, tokens/s, what it rests on) for the measured card and each card of the
    GPU NodePool."""
    rows = []
    for card in [GPU_MEASURED_ON, *dict.fromkeys(c.name for c in GPU_CARDS)]:
        ratio, basis = card_ratio(card)
        measured = parameters in {_reference_parameters(name) for name in GPU_MEASURED}
        rate_here = "measured" if measured else "interpolated by parameters between the measured bases"
        how = rate_here if basis == "measured" else f"estimated: {GPU_MEASURED_ON}'s rate x {ratio:.3f} ({basis})"
        rows.append((card, gpu_rate(parameters, qlora, card), how + (", QLoRA estimated" if qlora else "")))
    return rows


def _slowest(cards: list[GpuCard], parameters: int, qlora: bool) -> tuple[GpuCard, float] | None:
    """Of the cards a train-gpu pod may land on, the slowest and its rate: the forecast a run must meet on any."""
    rated = [(c, gpu_rate(parameters, qlora, c.name)) for c in cards]
    return min(rated, key=lambda cr: cr[1], default=None)


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
        how = (f"ray: {workers} workers at the default replicas, {threads} threads each, {precision}, "
               f"{CPU_TOKENS_PER_CORE_SECOND[precision]:.1f} tokens/s per core on {REFERENCE_BASE} scaled by "
               "parameters")  # fmt: skip
    elif k.backend == "gpu":
        over = gpu_over_mib(p.steps["train-gpu"].gpu_memory_gib)
        slowest = _slowest([c for c in GPU_CARDS if c.memory_mib > over], s.parameters, k.qlora) if p.gpu_card else None
        rate = slowest[1] if slowest else 0.0
        card = slowest[0].name if slowest else "no card"
        ratio, basis = card_ratio(card) if slowest else (0.0, "")
        how = (f"gpu{' QLoRA' if k.qlora else ''} on the slowest card the pod may get, an {card}: estimated as "
               f"{GPU_MEASURED_ON}'s measured rate ({GPU_MEASUREMENT}) scaled by parameters, x {ratio:.3f} for "
               f"{basis}" if slowest else "gpu: no card of the pool holds it")  # fmt: skip
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
        share = f"at most {fraction:.0%}" if fraction >= 0.1 else f"at most {100 * fraction:.2g}%"
        if fraction < 0.0001:
            share = "less than 0.01%"
        ways = [f"fewer training tokens: {share} of them (fewer epochs, or a shorter max-seq-len)"]
        slowest = _slowest(gpu_cards_holding(p.shape, replace(p.knobs, backend="gpu", qlora=False)),
                           p.shape.parameters, False)  # fmt: skip
        if p.knobs.backend != "gpu" and slowest and f.tokens / slowest[1] <= DEADLINE_S:
            gpu = forecast(f.tokens, slowest[1], prices.get("gpu", 0.0), "")
            ways.append(f"train-backend gpu (forecast {_duration(gpu.seconds)} on an {slowest[0].name})")
        if p.knobs.backend == "ray":
            ways.append(f"{math.ceil(_ray_workers(p) / fraction):,} Ray workers or more (more replicas)")
        problems.append(
            f"training {p.base} is forecast to take {_duration(f.seconds)}, past the workflow's "
            f"{DEADLINE_S // 3600} h deadline ({f.tokens:,} tokens at {f.tokens_per_second:,.1f} tokens/s; {f.how}); "
            "use " + " or ".join(ways)
        )
    return problems
