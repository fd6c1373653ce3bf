"""Memory: what each step's process holds at its peak, term by term (bytes), and the pod's need in GiB.
The model is the package's docstring; each constant says where in the steps' code it comes from and why."""

from __future__ import annotations

import math
from collections.abc import Callable

from steps.gguf.quants import QUANTS
from steps.gguf.settings import CONVERT_N_CTX, MERGE_SHARD_BYTES, PARITY_EVAL_BATCH, PARITY_TOKENS, parity_n_ctx
from steps.sizing.cluster import GIB
from steps.sizing.shape import Knobs, Micro, Shape

# train_loop computes logits only for the summary tail (left padding + logits_to_keep = the longest summary in the
# batch + 1). The data's summaries are at most ~30 words (~45 tokens) and the served model may answer with at most
# serving_config.SERVING.max_tokens (64): 128 bounds the tail of any dataset made for this pipeline with room to
# spare; a longer one is capped by max-seq-len.
TAIL_TOKENS = 128
# Bytes per logit of that tail at the loss's peak: the logits (held by train_loop), their float32 copy for
# cross_entropy, log_softmax's saved output and, in backward, its gradient and the logits' gradient.
LOGIT_BYTES = 16
# train.TrainConfig.lora_targets' default: every linear layer of a Llama block. Counted with the unfused shapes; a
# fused architecture (Phi-3's qkv_proj, gate_up_proj) matches fewer names, so this is an upper bound there.
LORA_MODULES = 7
# LoRA parameters in float32 (peft keeps adapters in float32 even on a bf16 base): weight, gradient, AdamW's exp_avg and
# exp_avg_sq; DDP (ray) adds a float32 gradient bucket per parameter.
LORA_STATE_BYTES = 16
DDP_BUCKET_BYTES = 4
# bitsandbytes NF4 with double quantisation (train.build_model): 4 bits per weight + an 8-bit absmax per block of 64 +
# a float32 per 256 absmaxes. prepare_model_for_kbit_training casts everything not quantised (embeddings, an untied
# head, norms, biases) to float32.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
# Measured here (2 cores, torch 2.13 CPU): peak RSS grows 1.52x the bytes autograd saves for backward per extra example
# on SmolLM2-135M's shape (batch 2 -> 4, 512 tokens, one step), 1.37x on hidden 1024 / 2 layers, 1.79x on hidden 256
# / 4 layers: glibc keeps the heap's high-water mark (freed forward temporaries sit between live activations, and
# backward adds gradients). The CUDA caching allocator reuses freed blocks, so the GPU gets one transient layer instead.
# Fitted with CPU_CHECKPOINT_LAYERS and CPU_RUNTIME_GIB on the Llama-3.2-1B rows of `python -m benchmarks.cpu_rows`
# (benchmarks/results/2026-12-04-xeon16-h200/, a 16-core Xeon with AMX, torch 2.11; `--refit` reproduces all three)
# and checked on the Llama-3.2-3B rows (docs/sizing.md): 1.29 is the least that makes a bf16 row's plan grow from
# micro-batch 1 to 2 as much as its peak did (2.48 GiB an example on 1B); float32 rows grow less (~1.0x), so they
# are planned up to 1.15x.
CPU_ACTIVATION_FACTOR = 1.29
# Layers' worth of activations (each scaled by CPU_ACTIVATION_FACTOR) a CPU step with gradient checkpointing holds at
# its peak besides every layer's input: the layer recomputed in backward, its gradients and what the heap keeps of
# them. Fitted as above: the least that makes the 1B bf16 checkpointing rows' plan grow from micro-batch 1 to 2 as
# their peak did (0.86 GiB an example; one layer, as counted before, gave 0.41 and the 3B rows went 3-8 % under).
# Which tensors make up the other ~3 layers was not taken apart.
CPU_CHECKPOINT_LAYERS = 4.1
# Whatever the terms below miss (allocator variance, Python objects, the dataset, a few temporaries), on what scales.
MARGIN = 1.1
# Per process: Python + torch + transformers + peft + the tokenizer measured 0.44 GiB RSS here; a Ray worker with
# ray.train too 0.52 GiB; the steps import more (fsspec, matplotlib, mlflow, llama_cpp).
PROCESS_GIB = 0.75
# A training process once it computes: oneDNN's and the BLAS's kernels and scratch buffers, allocated at the first
# forward/backward, not at import. Fitted with the two above (the 1B rows): the most a row's peak held above its own
# imports (0.48 GiB there) and every term counted here, so PROCESS_GIB's slack on that machine is not fitted in. Not
# scaled by MARGIN: it is taken not to grow with the model (the 3B check rows agree within their 3 % of room).
CPU_RUNTIME_GIB = 0.37
# A Ray worker pod besides its training workers: raylet, dashboard and runtime-env agents, log monitor (~0.35 GiB
# measured), idle worker processes (~80 MiB each) and the object store's few objects (the training rows).
RAY_POD_GIB = 1.0
# The CUDA context and the libraries' state live on the card outside torch's allocator: 1.35 GiB measured on one H200
# (driver 580.159, torch 2.11+cu130; `python -m benchmarks.gpu_train --plan-card ...`: the card's used memory less the
# allocator's reserved, the same in every row), 1.5 with a stated margin until the pool's own cards (A10G, L4, L40S)
# measure it: a context grows with the card's multiprocessors (the L40S has 142 to the H200's 132). The caching
# allocator reserves more than it allocates: 1.01-1.05x measured there. No MARGIN on the GPU terms: on that card they
# came out above the allocator's peak in every row (docs/sizing.md).
CUDA_CONTEXT_GIB = 1.5
CUDA_ALLOCATOR_MARGIN = 1.1
# The train-gpu process on the host: CUDA runtime, cuBLAS, cuDNN and NCCL libraries mapped in (~2-3 GB, not measured
# here) besides Python; without QLoRA the bf16 weights pass through host memory before .to("cuda").
GPU_HOST_GIB = 3.0
# llama.cpp, as the steps call it: convert-gguf's parity (parity.open_gguf opens its Llama with CONVERT_N_CTX
# and logits_all=True) and evaluate (the served context, serving_config.SERVING.n_ctx, read when sizing);
# llama-cpp-python's default n_batch/n_ubatch of 512.
LLAMA_N_BATCH = 512
# convert-gguf's HF references: 5 probe documents (parity.PROBE_DOCUMENTS; a test keeps the two equal) x PARITY_TOKENS
# greedy tokens of logits (float32), one model's at a time, kept while its GGUFs are checked; its converter subprocess
# (Python + the gguf package + torch: 0.70 GiB measured on the tiny shape) and the tensor it converts: 1.47x the
# largest tensor in float32 on top measured on Llama 3.2 3B's shape (benchmarks/convert_memory.py).
PARITY_PROBES = 5
CONVERTER_GIB = 0.75
CONVERTER_TENSOR_COPIES = 1.5
# convert-gguf's batched HF forward over eval documents (parity.hf_rows), per token, float32, one layer at a time: the
# residual stream, its norm, attention's q/k/v/output and the decoder's output (hidden-sized), the MLP's gate, up and
# their product (intermediate-sized); besides, the attention weights (heads x width^2, float32: with the mask
# transformers builds, SDPA on CPU takes its math path). Measured on SmolLM2-135M's shape, 4 documents x 2048 tokens,
# 128 rows each: 873 MiB over the resident before; these terms (and the rows kept) 924 MiB.
CONVERT_HF_HIDDEN_COPIES = 6
CONVERT_HF_MLP_COPIES = 3
# Per logits row compared with llama.cpp, bytes per vocabulary entry: llama.cpp's output buffer, llama-cpp-python's
# scores row and parity.llama_rows' copy (float32 each), then _log_softmax's float64 result and temporary.
CONVERT_ROW_BYTES = 3 * 4 + 2 * 8
GGUF_METADATA_BYTES = 2**20  # + 40 bytes per vocabulary entry (token text, score, type) and the merges
REGISTER_GIB = 2.0  # register's memory: the MLflow client streams files; what its pod had before it was sized
# The frozen base's bytes per weight on CPU (steps/train/model.py): bf16 where the run computes in bf16, float32
# elsewhere. `auto` is bf16 on a CPU with AMX or AVX-512-BF16 and float32 elsewhere unless float32 does not fit the
# process's memory (then bf16 weights, emulated: slower, but it runs); preflight cannot see the nodes' CPUs, so it sizes
# `auto` as float32 where float32 fits and as bf16 where only bf16 does (plan.resolve_precision).
CPU_WEIGHT_BYTES = {"fp32": 4, "bf16": 2}
# A CPU process computes at most this many tokens per forward/backward: one 512-token row already keeps a CPU's
# matmuls busy (two rows of Llama-3.2-3B's layers took 2.0x one row's time on 2 cores here; `python -m
# benchmarks.memory_calibration --throughput` measures it), so a larger micro-batch buys no speed and costs memory and
# padding (each micro-batch pads to its longest row). GPUs take the largest micro-batch that fits.
CPU_MICRO_TOKENS = 512


def cpu_weight_bytes(k: Knobs) -> int:
    """Bytes per frozen weight on CPU; `auto` must be resolved first (plan.resolve_precision, budget.choose)."""
    if k.precision not in CPU_WEIGHT_BYTES:
        raise ValueError(f"precision {k.precision!r} is not resolved to fp32 or bf16")
    return CPU_WEIGHT_BYTES[k.precision]


def layer_activation_bytes(s: Shape, r: int, *, width: int, mask: int) -> float:
    """Bytes one decoder layer keeps for backward per token (LoRA with dropout on all 7 projections), for activations
    of `width` bytes (2: bf16, 4: float32) and a dropout mask of `mask` bytes per element (CUDA keeps a bool; CPU a
    noise tensor in the activations' dtype).

    Counted from what autograd saves (measured here with saved_tensors_hooks: 39.8 KB per token per layer on a hidden
    256 / intermediate 1024 / 4-head Llama with padding, this formula 39.4 KB):
    - the two RMSNorms' inputs, upcast to float32 (h each);
    - each LoRA dropout's output (lora_A's input): q, k, v, gate, up read the normed hidden (5h), o the attention
      output, down the MLP product (i); plus dropout's mask;
    - SDPA's q, k, v and output, k and v repeated to every head (transformers repeats them whenever there is a padding
      mask, and train_loop left-pads), and its logsumexp;
    - the MLP's gate (SiLU's input), SiLU's output and up (3i); lora_A's outputs (7r).
    """
    h, i, attn = s.hidden, s.intermediate, s.attention
    dropout_inputs = 5 * h + attn + i
    kept = dropout_inputs + 4 * attn + 3 * i + LORA_MODULES * r
    return kept * width + dropout_inputs * mask + 2 * h * 4 + s.heads * 4


def _tail_bytes(s: Shape, examples: int, seq: int) -> float:
    return examples * min(TAIL_TOKENS, seq) * s.vocab * LOGIT_BYTES


def _mask_bytes(examples: int, seq: int, width: int) -> float:
    return examples * seq * seq * width  # the 4D padding mask transformers builds for SDPA, shared by the layers


def _activations(
    s: Shape, k: Knobs, micro: Micro, *, width: int, mask: int, factor: float, extra_layers: int, held: float
) -> float:
    """What the micro-batch's forward keeps for backward. Without checkpointing: every layer's activations (and
    `extra_layers` more: on the GPU backward's gradients of the layer it is in). With it (non-reentrant
    torch.utils.checkpoint around each decoder layer): every layer's input, and in backward `held` layers' worth of
    activations (the layer recomputed whole, and what its backward adds)."""
    tokens = micro.examples * k.max_seq_len
    layer = layer_activation_bytes(s, k.lora_r, width=width, mask=mask) * factor
    kept = s.layers * s.hidden * width + held * layer if micro.checkpointing else (s.layers + extra_layers) * layer
    return tokens * kept + _mask_bytes(micro.examples, k.max_seq_len, 4 if width == 4 else 1)


def train_memory(s: Shape, k: Knobs, micro: Micro, *, device: str) -> dict[str, float]:
    """The terms (bytes) of one training process on `device` ("cpu", "ray" for a Ray worker, "gpu", "qlora") running
    `micro`. For the GPU the terms are on the card; `gpu_host_gib` gives the process's host side."""
    lora = s.lora_parameters(k.lora_r)
    terms: dict[str, float] = {}
    if device in ("cpu", "ray"):
        width = cpu_weight_bytes(k)
        terms["weights"] = width * s.parameters
        terms["lora"] = lora * (LORA_STATE_BYTES + (DDP_BUCKET_BYTES if device == "ray" else 0))
        # peft casts the LoRA path's input to the adapter's float32 before its dropout: float32 masks on a bf16 base
        terms["activations"] = _activations(
            s, k, micro, width=width, mask=4, factor=CPU_ACTIVATION_FACTOR, extra_layers=0, held=CPU_CHECKPOINT_LAYERS
        )
    elif device == "gpu":
        terms["weights"] = 2.0 * s.parameters
        terms["lora"] = lora * LORA_STATE_BYTES
        terms["activations"] = _activations(s, k, micro, width=2, mask=1, factor=1.0, extra_layers=1, held=2)
    elif device == "qlora":
        linear = s.linear_parameters
        terms["weights"] = linear * NF4_BYTES + 4.0 * (s.parameters - linear)
        terms["lora"] = lora * LORA_STATE_BYTES
        # Gradient checkpointing always (prepare_model_for_kbit_training): each layer keeps only its input, float32
        # since the embeddings were cast; backward recomputes one layer at a time, whose LoRA dropouts then read that
        # float32 stream (5h at 4 bytes instead of 2); plus one weight dequantised to bf16 at a time.
        tokens = micro.examples * k.max_seq_len
        recomputed = layer_activation_bytes(s, k.lora_r, width=2, mask=1) + 2 * 5 * s.hidden
        terms["activations"] = tokens * (s.layers * 4 * s.hidden + recomputed) + _mask_bytes(
            micro.examples, k.max_seq_len, 1
        )
        terms["activations"] += 2 * s.hidden * max(s.intermediate, s.attention)
    else:
        raise ValueError(f"unknown device {device!r}")
    terms["logits"] = _tail_bytes(s, micro.examples, k.max_seq_len)
    return terms


def total_gib(terms: dict[str, float], fixed_gib: float) -> float:
    """GiB: the process's fixed part plus the modelled terms with MARGIN."""
    return fixed_gib + MARGIN * sum(terms.values()) / GIB


def runs_as(share: int, micro: int) -> int:
    """The largest micro-batch train runs when asked for at most `micro` examples of a `share`: the share in
    ceil(share / micro) calls of sizes differing by at most one (steps/train/loop.py, data.micro_batches). A share
    of 16 at 12 runs as 8 + 8: planning 12 would size memory nothing uses."""
    calls = math.ceil(share / max(1, min(micro, share)))
    return math.ceil(share / calls)


def micro_options(k: Knobs, share: int, *, gpu: bool = False) -> list[Micro]:
    """The ways one process may run its `share` of a global batch, best first: without gradient checkpointing before
    with it (it recomputes each forward, ~1/3 more compute), then the largest micro-batch first (on CPU at most
    CPU_MICRO_TOKENS tokens), each a size train runs (`runs_as`); `--micro-batch` and `--gradient-checkpointing
    on|off` pin either."""
    share = max(1, share)
    if k.micro_batch:
        sizes = [runs_as(share, k.micro_batch)]
    else:
        cap = share if gpu else max(1, min(share, CPU_MICRO_TOKENS // k.max_seq_len))
        sizes = sorted({runs_as(share, m) for m in range(1, cap + 1)}, reverse=True)
    ways = {"off": [False], "on": [True], "auto": [False, True]}[k.gradient_checkpointing]
    return [Micro(m, c) for c in ways for m in sizes]


def fit_micro(options: list[Micro], need_gib: Callable[[Micro], float], budget_gib: float) -> Micro | None:
    """The first of `options` whose need is within `budget_gib`; None when none is."""
    return next((m for m in options if need_gib(m) <= budget_gib), None)


def load_mapped_bytes(s: Shape, k: Knobs) -> float:
    """What loading the base holds besides its weights: transformers maps the checkpoint's safetensors and, when it
    loads another dtype than the file's (float32 weights from the hub's bf16), holds the mapped file (its pages
    touched, so resident) until every tensor is converted. Loading the file's own dtype maps the weights in place.
    Measured on Llama-3.2-1B's shape: float32 from bf16 peaked at load, 7.69 GiB (0.49 of imports + 4.60 of float32
    weights + 2.30 of the bf16 file + 0.30); bf16 from bf16 held 0.87 GiB after load."""
    return 0.0 if cpu_weight_bytes(k) == s.checkpoint_bytes else s.checkpoint_bytes * s.parameters


def cpu_process_phases(s: Shape, k: Knobs, terms: dict[str, float]) -> dict[str, float]:
    """A CPU training process's two peaks in GiB: `loading` the base (its weights and the mapped checkpoint) and
    `training` (the fixed parts and the frozen weights as they are, exact: every byte of them is resident once the
    first step has read them, MARGIN on the estimated rest). The process's peak is the larger."""
    estimated = sum(v for name, v in terms.items() if name != "weights")
    return {
        "training": PROCESS_GIB + CPU_RUNTIME_GIB + (terms["weights"] + MARGIN * estimated) / GIB,
        "loading": PROCESS_GIB + (terms["weights"] + MARGIN * load_mapped_bytes(s, k)) / GIB,
    }


def _cpu_process_gib(s: Shape, k: Knobs, terms: dict[str, float]) -> float:
    return max(cpu_process_phases(s, k, terms).values())


def cpu_train_gib(s: Shape, k: Knobs, micro: Micro) -> float:
    return _cpu_process_gib(s, k, train_memory(s, k, micro, device="cpu"))


def ray_worker_gib(s: Shape, k: Knobs, micro: Micro) -> float:
    return _cpu_process_gib(s, k, train_memory(s, k, micro, device="ray"))


def ray_pod_gib(s: Shape, k: Knobs, workers: int, micro: Micro) -> float:
    """A Ray pod with `workers` training workers, each running `micro`."""
    return RAY_POD_GIB + workers * ray_worker_gib(s, k, micro)


def ray_share(k: Knobs, workers: int) -> int:
    """The most examples of a global batch one worker computes when its pod holds `workers` of them: the run has at
    least as many workers as this pod, and train_loop gives rank r every world-size-th example."""
    return math.ceil(k.batch_size / workers)


def gpu_card_gib(s: Shape, k: Knobs, micro: Micro) -> float:
    """GPU memory train-gpu needs on its card: the allocator's peak with its margin, and the CUDA context."""
    terms = train_memory(s, k, micro, device="qlora" if k.qlora else "gpu")
    return CUDA_CONTEXT_GIB + CUDA_ALLOCATOR_MARGIN * sum(terms.values()) / GIB


def device_ways(
    s: Shape, k: Knobs, device: str, share: int, pod_workers: int = 1
) -> tuple[list[Micro], Callable[[Micro], float]]:
    """The ways one process may run its `share` of the batch on `device` ("cpu": train-cpu; "ray": a Ray worker whose
    pod holds `pod_workers`; "gpu": train-gpu's card), best first, and the GiB each needs there. The plan (pod
    requests, whole GiB) and train at run time (its raw limit, budget.choose) both ask this one place."""
    if device == "gpu":
        return micro_options(k, share, gpu=True), lambda m: gpu_card_gib(s, k, m)
    if device == "ray":
        return micro_options(k, share), lambda m: ray_pod_gib(s, k, pod_workers, m)
    if device == "cpu":
        return micro_options(k, share), lambda m: cpu_train_gib(s, k, m)
    raise ValueError(f"device {device!r}: name cpu, ray or gpu")


def gpu_host_gib(s: Shape, k: Knobs) -> float:
    """train-gpu's host memory: the CUDA process, and without QLoRA the bf16 weights on their way to the card."""
    return total_gib({"weights": 0.0 if k.qlora else 2.0 * s.parameters}, GPU_HOST_GIB)


def gguf_bytes(s: Shape, quantization: str) -> float:
    """A GGUF of the base at `quantization`: its weights at llama.cpp's bits per weight, and the vocabulary."""
    quant = QUANTS[quantization]
    bits = quant.bits
    if quant.k_quant and (s.hidden % quant.block or s.intermediate % quant.block):
        bits = QUANTS["Q8_0"].bits
    return s.parameters * bits / 8 + GGUF_METADATA_BYTES + 40 * s.vocab


def llama_context_bytes(s: Shape, n_ctx: int, logits_rows: int) -> float:
    """llama.cpp's buffers besides the weights: the f16 KV cache, the logits (llama-cpp-python's `scores` array of
    `logits_rows` rows and llama.cpp's output buffer of a batch) and the compute buffer of one 512-token batch."""
    kv_cache = n_ctx * s.layers * 2 * s.kv * 2
    logits = (logits_rows + LLAMA_N_BATCH) * s.vocab * 4
    compute = LLAMA_N_BATCH * 4 * (s.vocab + n_ctx * s.heads + 4 * max(s.hidden, s.intermediate))
    return kv_cache + logits + compute


def convert_memory(
    s: Shape, k: Knobs, eval_batch: tuple[int, int, int] | None = None, parity_tokens: int = PARITY_TOKENS
) -> dict[str, float]:
    """convert-gguf's peak terms (bytes). No model is held whole (steps/convert_gguf/streamed.py): the step's peak is
    its largest phase, plus what it keeps throughout (one model's probe references, the adapter's float32 weights):
    - llama.cpp checks the F16 GGUF (its mapped pages are all touched), one probe at a time;
    - the served file's eval-split check: that GGUF in llama.cpp while HF scores PARITY_EVAL_BATCH documents of up to
      the served context at once (one layer's activations at a time, float32) and keeps their summaries' logits;
    - the converter, in its own process beside the step, reading the merged shards a tensor at a time;
    - the merge: a shard of the converter's input filling, and one target's float32 terms;
    - the streamed HF forward (references, merge check): one module's weights at a time, the largest (embeddings or
      head) as stored and in float32.
    llama.cpp's buffers are counted as resident, not as allocated: the f16 KV cache (cleared, so touched, when the
    context is made), one 512-token ubatch's activations, and the logits of the rows compared — llama-cpp-python's
    scores array has a row per context position, but the rows never written stay untouched zero pages.
    `eval_batch`: (documents, padded width, logit rows per document) of the largest HF batch; by default the worst a
    dataset can ask: PARITY_EVAL_BATCH documents at the served context, TAIL_TOKENS rows each. `parity_tokens`: the
    step's --parity-tokens."""
    docs, width, tail = eval_batch or (PARITY_EVAL_BATCH, parity_n_ctx(), TAIL_TOKENS)
    largest = max(s.vocab, s.intermediate) * s.hidden  # elements of the largest tensor: embeddings, head or an MLP
    target = s.hidden * max(s.intermediate, s.attention)  # the largest LoRA target

    def llama(n_ctx: int, rows: int) -> float:
        kv_cache = n_ctx * s.layers * 2 * s.kv * 2
        ubatch = LLAMA_N_BATCH * 4 * (2 * max(s.hidden, s.intermediate) + s.heads * n_ctx)
        return kv_cache + ubatch + rows * s.vocab * CONVERT_ROW_BYTES

    hf_rows = docs * width * 4 * (CONVERT_HF_HIDDEN_COPIES * s.hidden + CONVERT_HF_MLP_COPIES * s.intermediate)
    hf_rows += docs * s.heads * width * width * 4  # SDPA's attention weights: transformers passes a causal mask
    phases = {
        "llama.cpp F16": gguf_bytes(s, "F16") + llama(CONVERT_N_CTX, parity_tokens + 1),
        "eval split": max(gguf_bytes(s, q) for q in k.quantizations)
        + llama(max(CONVERT_N_CTX, width), tail)
        + hf_rows
        + docs * tail * s.vocab * 4,
        "converter": CONVERTER_GIB * GIB + CONVERTER_TENSOR_COPIES * 4.0 * largest,
        "HF forward": largest * (4.0 + s.checkpoint_bytes),
        # The shard filling (at most the whole model as written: float16 targets, the rest as stored) and a target's
        # float32 base, delta and sum, and its float16 result.
        "merge": min(max(MERGE_SHARD_BYTES, largest * s.checkpoint_bytes), s.checkpoint_bytes * s.parameters)
        + target * (3 * 4 + 2),
    }
    peak = max(phases, key=lambda name: phases[name])
    return {
        f"largest phase ({peak})": phases[peak],
        "HF references": PARITY_PROBES * parity_tokens * s.vocab * 4.0,
        "LoRA (float32)": s.lora_parameters(k.lora_r) * 4.0,
    }


def evaluate_memory(s: Shape, k: Knobs) -> dict[str, float]:
    """evaluate's peak terms (bytes): one served GGUF at a time in llama.cpp (base, champion, candidate in turn). The
    served quantisation is one of the ladder (convert_gguf.ladder checks): the largest rung bounds it. The context is
    the served one (steps/contract/serving_config.py)."""
    from steps.contract import serving_config

    return {
        "served GGUF": max(gguf_bytes(s, q) for q in k.quantizations),
        "llama.cpp context": llama_context_bytes(s, serving_config.SERVING.n_ctx, LLAMA_N_BATCH),
    }
