"""Memory: what each step's process holds at its peak, term by term (bytes), and the pod's need in GiB.
The model is the package's docstring; each constant says where in the steps' code it comes from and why."""

from __future__ import annotations

import math

from steps.gguf.quants import QUANTS
from steps.gguf.settings import CONVERT_N_CTX, MERGE_SHARD_BYTES, PARITY_EVAL_BATCH, PARITY_TOKENS, parity_n_ctx
from steps.sizing.cluster import GIB
from steps.sizing.shape import Knobs, Shape

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
CPU_ACTIVATION_FACTOR = 1.5
# Whatever the terms below miss (allocator variance, Python objects, the dataset, a few temporaries), on what scales.
MARGIN = 1.1
# Per process: Python + torch + transformers + peft + the tokenizer measured 0.44 GiB RSS here; a Ray worker with
# ray.train too 0.52 GiB; the steps import more (fsspec, matplotlib, mlflow, llama_cpp).
PROCESS_GIB = 0.75
# A Ray worker pod besides its training workers: raylet, dashboard and runtime-env agents, log monitor (~0.35 GiB
# measured), idle worker processes (~80 MiB each) and the object store's few objects (the training rows).
RAY_POD_GIB = 1.0
# The CUDA context and cuBLAS/cuDNN workspaces live on the card outside torch's allocator (not measured here; 0.5-1 GiB
# on recent drivers); the caching allocator reserves more than it allocates (fragmentation). No MARGIN on the GPU
# terms: at the README's benchmark batches they come within 5 % of the measured allocator peaks (tests/test_sizing.py).
CUDA_CONTEXT_GIB = 1.0
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
# Under CPU bf16 autocast every nn.Linear's weight is cast to bf16 on each use and autograd keeps the cast for backward:
# a bf16 copy of the blocks' projections and of the head until the step's backward (the frozen float32 weights stay).
# Measured on SmolLM2-135M (one step, 32 tokens): +240 MiB resident over float32 against 257 MiB of copies counted here;
# on Llama-3.2-3B's layer shape (tests/test_sizing.py's calibration) the bf16 peak is above float32's by 0.73x the
# copies where the CPU computes bf16 natively (Zen 4). On small shapes oneDNN's native bf16 kernels hold more than the
# copies (1.28-1.41x at hidden 512, 1.00x at 1024): the real bases' shapes are what this sizes.
AUTOCAST_COPY_BYTES = 2


def layer_activation_bytes(s: Shape, r: int, *, gpu: bool) -> float:
    """Bytes one decoder layer keeps for backward per token (LoRA with dropout on all 7 projections, no checkpointing).

    Counted from what autograd saves (measured here with saved_tensors_hooks: 39.8 KB per token per layer on a hidden
    256 / intermediate 1024 / 4-head Llama with padding, this formula 39.4 KB):
    - the two RMSNorms' inputs, upcast to float32 (h each);
    - each LoRA dropout's output (lora_A's input): q, k, v, gate, up read the normed hidden (5h), o the attention
      output, down the MLP product (i); plus dropout's mask (CUDA: 1 byte; CPU: a float32 noise tensor);
    - SDPA's q, k, v and output, k and v repeated to every head (transformers repeats them whenever there is a padding
      mask, and train_loop left-pads), and its logsumexp;
    - the MLP's gate (SiLU's input), SiLU's output and up (3i); lora_A's outputs (7r).
    """
    h, i, attn = s.hidden, s.intermediate, s.attention
    dropout_inputs = 5 * h + attn + i
    width = 2 if gpu else 4  # bf16 autocast on the GPU, float32 on CPU
    mask = 1 if gpu else 4
    kept = dropout_inputs + 4 * attn + 3 * i + LORA_MODULES * r
    return kept * width + dropout_inputs * mask + 2 * h * 4 + s.heads * 4


def _tail_bytes(s: Shape, examples: int, seq: int) -> float:
    return examples * min(TAIL_TOKENS, seq) * s.vocab * LOGIT_BYTES


def _mask_bytes(examples: int, seq: int, width: int) -> float:
    return examples * seq * seq * width  # the 4D padding mask transformers builds for SDPA, shared by the layers


def train_memory(s: Shape, k: Knobs, *, device: str, examples: int | None = None) -> dict[str, float]:
    """The terms (bytes) of one training process on `device` ("cpu", "ray" for a Ray worker, "gpu", "qlora").

    `examples`: the batch this process computes at once (default: the whole batch). For the GPU the terms are on the
    card; `gpu_host_gib` gives the process's host side.
    """
    n = k.batch_size if examples is None else examples
    seq = k.max_seq_len
    lora = s.lora_parameters(k.lora_r)
    tokens = n * seq
    terms: dict[str, float] = {}
    if device in ("cpu", "ray"):
        terms["weights"] = 4.0 * s.parameters
        if k.precision != "fp32":
            terms["bf16 copies"] = AUTOCAST_COPY_BYTES * (s.linear_parameters + s.vocab * s.hidden)
        terms["lora"] = lora * (LORA_STATE_BYTES + (DDP_BUCKET_BYTES if device == "ray" else 0))
        per_token = s.layers * layer_activation_bytes(s, k.lora_r, gpu=False) * CPU_ACTIVATION_FACTOR
        terms["activations"] = tokens * per_token + _mask_bytes(n, seq, 4)
    elif device == "gpu":
        terms["weights"] = 2.0 * s.parameters
        terms["lora"] = lora * LORA_STATE_BYTES
        # One more layer than the model has: backward's gradients of the layer it is in, the embeddings' output.
        per_token = (s.layers + 1) * layer_activation_bytes(s, k.lora_r, gpu=True)
        terms["activations"] = tokens * per_token + _mask_bytes(n, seq, 1)
    elif device == "qlora":
        linear = s.linear_parameters
        terms["weights"] = linear * NF4_BYTES + 4.0 * (s.parameters - linear)
        terms["lora"] = lora * LORA_STATE_BYTES
        # Gradient checkpointing (prepare_model_for_kbit_training): each layer keeps only its input, float32 since the
        # embeddings were cast; backward recomputes one layer at a time, whose LoRA dropouts then read that float32
        # stream (5h at 4 bytes instead of 2); plus one weight dequantised to bf16 at a time.
        recomputed = layer_activation_bytes(s, k.lora_r, gpu=True) + 2 * 5 * s.hidden
        terms["activations"] = tokens * (s.layers * 4 * s.hidden + recomputed) + _mask_bytes(n, seq, 1)
        terms["activations"] += 2 * s.hidden * max(s.intermediate, s.attention)
    else:
        raise ValueError(f"unknown device {device!r}")
    terms["logits"] = _tail_bytes(s, n, seq)
    return terms


def total_gib(terms: dict[str, float], fixed_gib: float) -> float:
    """GiB: the process's fixed part plus the modelled terms with MARGIN."""
    return fixed_gib + MARGIN * sum(terms.values()) / GIB


def cpu_train_gib(s: Shape, k: Knobs) -> float:
    return total_gib(train_memory(s, k, device="cpu"), PROCESS_GIB)


def ray_worker_gib(s: Shape, k: Knobs, examples: int) -> float:
    return total_gib(train_memory(s, k, device="ray", examples=examples), PROCESS_GIB)


def ray_pod_gib(s: Shape, k: Knobs, workers: int) -> float:
    """A Ray pod with `workers` training workers. Each computes at most ceil(batch / workers) examples: the run has at
    least as many workers as this pod (train_loop gives rank r every world-size-th example of the global batch)."""
    return RAY_POD_GIB + workers * ray_worker_gib(s, k, math.ceil(k.batch_size / workers))


def gpu_card_gib(s: Shape, k: Knobs) -> float:
    """GPU memory train-gpu needs on its card: the allocator's peak with its margin, and the CUDA context."""
    terms = train_memory(s, k, device="qlora" if k.qlora else "gpu")
    return CUDA_CONTEXT_GIB + CUDA_ALLOCATOR_MARGIN * sum(terms.values()) / GIB


def gpu_allocated_gib(s: Shape, k: Knobs) -> float:
    """What torch.cuda.max_memory_allocated would report (train's peak_gpu_memory_gib): the modelled terms alone."""
    return sum(train_memory(s, k, device="qlora" if k.qlora else "gpu").values()) / GIB


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
