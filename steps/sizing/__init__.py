"""What each step needs from a node for a given base model, and which node groups can hold it.

    python -m steps.preflight --base-model Qwen/Qwen2.5-3B-Instruct --train-backend gpu --max-seq-len 512 ...

Plain data and arithmetic on the base's config (no weights, no torch unless the parameters must be counted):
preflight calls `plan(...)` and exports the results as Argo output parameters that the pods take (podSpecPatch) and the
RayJob's worker groups take (memory, workers per pod); `check(plan)` says, with the fix, what cannot run.

The model of memory, read from the steps' code (each constant below says where and why):
- train, per model replica (one process; a Ray worker is one): weights by dtype (float32 on CPU, bf16 on the GPU, 4-bit
  NF4 linear layers + float32 rest with QLoRA) + LoRA parameters, gradients and AdamW's two moments (float32, 16 bytes
  each; +4 for DDP's gradient buckets) + activations kept for backward, per token per layer, of every example at
  `max-seq-len` (train_loop pads each batch to its longest row and does not micro-batch; only QLoRA checkpoints
  gradients) + the loss's logits, for the summary tail only (`logits_to_keep`) + the process (Python, torch, ...).
- convert-gguf: the base and then the merged model in float32 (one at a time), while llama.cpp's F16 GGUF of it is
  loaded for parity (or the converter runs beside it), + llama.cpp's context (KV cache, logits of every position).
- evaluate: llama.cpp with one served GGUF at a time, its KV cache and logits buffers.
Disk (ephemeral storage) per pod: the base downloaded from the hub (safetensors in the checkpoint's dtype), what the
step writes (float32 checkpoints for conversion, GGUFs, training checkpoints), its input artifacts, and Argo's copies of
its output folder (see ARGO_OUTPUT_COPIES).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from steps.gguf.quants import QUANTS
from steps.gguf.settings import CONVERT_N_CTX, PARITY_TOKENS, parity_n_ctx


@dataclass(frozen=True)
class NodeGroup:
    name: str
    cpus: int
    memory_gib: int  # the pod's ceiling in this group (what a node of the group can give one pod)
    arch: str  # kubernetes.io/arch
    default_replicas: int
    why: str


# The homelab/EKS CPU node groups of seed ADR 0058, which the Ray backend's worker groups map onto one to one.
RAY_NODE_GROUPS: tuple[NodeGroup, ...] = (
    NodeGroup("large", 8, 32, "amd64", 1, "large x86 nodes"),
    NodeGroup("medium", 4, 16, "amd64", 1, "medium x86 nodes"),
    NodeGroup("small", 2, 8, "amd64", 0, "small x86 nodes"),
    # Opt-in: DDP steps at the pace of the slowest worker, and a Pi is much slower than an x86 core.
    NodeGroup("pi", 2, 3, "arm64", 0, "arm64 Raspberry Pis, only when a training worker fits in one"),
)

# preflight's output parameters (result fields, '_' -> '-'), read by workflows/distill.py:
#   <step>-pod-patch            for step in POD_PATCH_STEPS: a JSON podSpecPatch (requests/limits of memory,
#                               ephemeral-storage; for train-gpu also GPU-memory node affinity)
#   ray-<group>-workers-per-pod for each RAY_NODE_GROUPS: training workers one replica of the group holds (0: none)
#   ray-<group>-memory          for each RAY_NODE_GROUPS: the pod's memory request/limit (a quantity, <= the group's)
POD_PATCH_STEPS = ("train-gpu", "train-cpu", "convert-gguf", "evaluate", "register")
# The pods' emptyDirs (workflows/distill.py: the output folder and the scratch folder at /tmp that holds the hub
# download and every cache; the root filesystem is read-only). Each may take up to the step's whole disk need: the
# pod's ephemeral-storage limit bounds their sum.
SIZED_VOLUMES = ("out", "scratch")
# Disk of the pods preflight does not size (GiB, requests = limits): small, whatever the base model.
FIXED_DISK_GIB = {
    "check-parameters": 1,  # reads parameters only
    "preflight": 2,  # the base's config and tokenizer, a vocabulary-only GGUF for the tokenizer probe
    "fetch-dataset": 4,  # the dataset's JSONL files (text) and the git clone DVC reads them through
    "propose": 1,  # MLflow answers only
    "check-triggers": 2,  # a clone of the dataset repository and its feedback file
    # build-dataset's steps
    "ingest": 8,  # the documents downloaded from the S3 prefix (PDFs) and their extracted text
    "feedback": 1,  # the feedback file and its merged rows
    "teacher": 4,  # the chunks, the answers and the cache's copies; the open-weights teacher's GGUF is in the image
    "filter-split": 2,  # the rows, twice (kept and dropped)
    "publish": 4,  # a clone of the dataset repository, the split files and DVC's cache of them
    "promote": 1,  # MLflow answers only
}
# The Ray head: the driver (tokenizer, the run's dataset) and Ray's session folder; no model, no checkpoints.
RAY_HEAD_DISK_GIB = 4


def pod_patch_output(step: str) -> str:
    return f"{step}-pod-patch"


def ray_workers_output(group: str) -> str:
    return f"ray-{group}-workers-per-pod"


def ray_memory_output(group: str) -> str:
    return f"ray-{group}-memory"


def ray_disk_output(group: str) -> str:
    return f"ray-{group}-disk"


def preflight_exports() -> tuple[str, ...]:
    """Every sizing output parameter preflight writes."""
    return (
        *(pod_patch_output(s) for s in POD_PATCH_STEPS),
        *(ray_workers_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_memory_output(g.name) for g in RAY_NODE_GROUPS),
        *(ray_disk_output(g.name) for g in RAY_NODE_GROUPS),
    )


# --- The cluster -------------------------------------------------------------------------------------------------

# torch threads (and Ray CPUs) per Ray training worker: every group's CPUs are a multiple, and the smallest groups hold
# exactly one worker. workflows/rayjob.py reads it from here.
RAY_THREADS_PER_WORKER = 2
assert all(g.cpus % RAY_THREADS_PER_WORKER == 0 for g in RAY_NODE_GROUPS), "a group's CPUs must fit whole workers"
# The optional GPU worker group (workflows/rayjob.py GPU_GROUP): the home GPU box, sized by itself, not by preflight.
RAY_GPU_GROUP = "gpu"
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
GPU_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
# infra/karpenter/ec2nodeclass-gpu.yaml gives GPU nodes a 200 GiB root volume; the CUDA image takes ~10 GB of it and
# the kubelet evicts at 10 % free: what a train-gpu pod may write.
GPU_NODE_EPHEMERAL_GIB = 170

# --- What the steps do (read from their code) --------------------------------------------------------------------

GIB = 2**30
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
# greedy tokens of logits (float32), kept while its GGUFs are checked; its converter subprocess (Python + torch + the
# lazy tensors it converts a few at a time).
PARITY_PROBES = 5
CONVERTER_GIB = 0.75
GGUF_METADATA_BYTES = 2**20  # + 40 bytes per vocabulary entry (token text, score, type) and the merges
# Ephemeral storage besides the model files: logs, Python caches, the tokenizer, the dataset, small outputs.
SCRATCH_GIB = 2.0
# Argo's emissary (v4.1.2 cmd/argoexec/commands/emissary.go `saveArtifact`) tars and gzips an output folder that is
# not on a volume into /var/run/argo (an emptyDir); the wait container copies that tarball and, the archive being
# `none`, unpacks it before uploading (workflow/executor/executor.go `stageArchiveFile`): three more copies of the
# output on the pod's ephemeral storage (gzip barely shrinks weights), and minutes of CPU. workflows/distill.py mounts
# an emptyDir at the output path (OUTPUT_VOLUME there), which the wait container mirrors and uploads from directly
# ("Staging from mirrored volume mount ... staging skipped" for archive none): no copy. A test keeps the two agreeing.
ARGO_OUTPUT_COPIES = 0
REGISTER_GIB = 2.0  # register's memory: the MLflow client streams files; what its pod had before it was sized
# A Ray worker pod's own disk: Ray's session folder (logs, spilled objects) besides the base download and checkpoints.
RAY_SESSION_GIB = 2.0


# --- The base ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The transformer dimensions sizing needs, from a transformers config."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    parameters: int
    checkpoint_bytes: int  # bytes per parameter of the hub's safetensors (the config's dtype)

    @property
    def attention(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def linear_parameters(self) -> int:
        """The blocks' projection weights: what QLoRA quantises to 4 bits (embeddings and the head stay)."""
        per_layer = 2 * self.hidden * self.attention + 2 * self.hidden * self.kv + 3 * self.hidden * self.intermediate
        return self.layers * per_layer

    def lora_parameters(self, r: int) -> int:
        """A and B of rank r on q, k, v, o, gate, up and down of every layer."""
        h, i = self.hidden, self.intermediate
        per_layer = (h + self.attention) * 2 + (h + self.kv) * 2 + (h + i) * 3
        return self.layers * r * per_layer


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def count_parameters(config: Any) -> int:
    """The parameter count of the causal LM `config` describes, without allocating it.

    On the `meta` device every tensor has a shape but no storage, so even a 70B model is built in seconds and a few MB.
    Tied weights count once (`parameters()` yields a shared tensor once), as in the real model.
    """
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def shape_of(config: Any, parameters: int | None = None) -> Shape:
    """The dimensions of `config` (a transformers config); counts the parameters on the meta device unless given."""
    text = config.get_text_config()
    heads = text.num_attention_heads
    dtype = str(config.dtype).removeprefix("torch.") if config.dtype is not None else None
    return Shape(
        hidden=text.hidden_size,
        intermediate=text.intermediate_size,
        layers=text.num_hidden_layers,
        heads=heads,
        kv_heads=text.num_key_value_heads or heads,
        # Llama's config has head_dim; Qwen2's and Phi-3's derive it (hidden / heads).
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
        vocab=text.vocab_size,
        tied=bool(text.tie_word_embeddings),
        parameters=parameters if parameters is not None else count_parameters(config),
        # A config without a dtype: the hub's default save is float32.
        checkpoint_bytes=DTYPE_BYTES.get(dtype or "float32", 4),
    )


# --- Memory ------------------------------------------------------------------------------------------------------


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


# train's --precision on CPU (steps/train/precision.py): auto takes bf16 autocast where the node's CPU runs bf16
# natively (AMX, AVX-512-BF16), which preflight cannot see, so auto is sized as bf16.
PRECISIONS = ("auto", "fp32", "bf16")
# Under CPU bf16 autocast every nn.Linear's weight is cast to bf16 on each use and autograd keeps the cast for backward:
# a bf16 copy of the blocks' projections and of the head until the step's backward (the frozen float32 weights stay).
# Measured on SmolLM2-135M (one step, 32 tokens): +240 MiB resident over float32 against 257 MiB of copies counted here.
AUTOCAST_COPY_BYTES = 2


@dataclass(frozen=True)
class Knobs:
    """The run's settings that size it (preflight's flags)."""

    backend: str
    qlora: bool
    max_seq_len: int
    batch_size: int
    lora_r: int
    quantizations: tuple[str, ...]
    precision: str = "auto"  # CPU training precision (PRECISIONS)


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


def _total(terms: dict[str, float], fixed_gib: float) -> float:
    """GiB: the process's fixed part plus the modelled terms with MARGIN."""
    return fixed_gib + MARGIN * sum(terms.values()) / GIB


def cpu_train_gib(s: Shape, k: Knobs) -> float:
    return _total(train_memory(s, k, device="cpu"), PROCESS_GIB)


def ray_worker_gib(s: Shape, k: Knobs, examples: int) -> float:
    return _total(train_memory(s, k, device="ray", examples=examples), PROCESS_GIB)


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
    return _total({"weights": 0.0 if k.qlora else 2.0 * s.parameters}, GPU_HOST_GIB)


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


def convert_memory(s: Shape, k: Knobs) -> dict[str, float]:
    """convert-gguf's peak terms (bytes). It holds one float32 model at a time (the base for its own conversion, then
    the reloaded base with the adapter merged in place); while that model is held, the converter runs in a subprocess
    and then llama.cpp loads each GGUF (F16 the largest) for parity, with logits for every position."""
    largest_tensor = 4.0 * s.vocab * s.hidden
    parity = gguf_bytes(s, "F16") + llama_context_bytes(s, parity_n_ctx(), parity_n_ctx())
    converter = CONVERTER_GIB * GIB + 3 * largest_tensor
    merge_check = 2 * CONVERT_N_CTX * s.vocab * 4.0  # the merged model's logits over the longest probe
    return {
        "float32 model": 4.0 * s.parameters + s.lora_parameters(k.lora_r) * 4.0,
        "parity (llama.cpp F16) or converter": max(parity, converter, merge_check),
        "HF references": 2 * PARITY_PROBES * PARITY_TOKENS * s.vocab * 4.0,
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


# --- Disk --------------------------------------------------------------------------------------------------------


def hub_download_bytes(s: Shape) -> float:
    """The base from the hub, into HF_HOME on the pod (safetensors in the checkpoint's dtype; the tokenizer)."""
    return s.parameters * s.checkpoint_bytes + 50e6


def adapter_bytes(s: Shape, k: Knobs) -> float:
    return 4.0 * s.lora_parameters(k.lora_r) + 1e6  # float32 safetensors, its config, loss.csv/png, summaries


def checkpoint_bytes(s: Shape, k: Knobs) -> float:
    """One training checkpoint: the adapter and AdamW's two moments (float32), scheduler, RNG, step log."""
    return 12.0 * s.lora_parameters(k.lora_r) + 1e6


def gguf_folder_bytes(s: Shape, k: Knobs) -> dict[str, float]:
    """convert-gguf's output folder: the candidate's F16, each rung of the ladder, the base at the served
    quantisation (bounded by the ladder's largest rung), the reports."""
    served = max(gguf_bytes(s, q) for q in k.quantizations)
    return {
        "F16": gguf_bytes(s, "F16"),
        **{q: gguf_bytes(s, q) for q in k.quantizations},
        "base served": served,
        "reports": 1e6,
    }


def _with_staging(inputs: float, run_peak: float, kept: float, output: float) -> float:
    """A pod's disk peak: while the step runs, or after it, when `kept` (its HF cache, inputs, output folder) is still
    on the pod and Argo stages ARGO_OUTPUT_COPIES more copies of the output."""
    return max(inputs + run_peak, kept + ARGO_OUTPUT_COPIES * output) + SCRATCH_GIB * GIB


def train_disk(s: Shape, k: Knobs) -> float:
    """train-gpu / train-cpu: the hub download, checkpoints (written locally, then to S3: one at a time, and one
    downloaded to resume from), the adapter folder."""
    hub = hub_download_bytes(s)
    out = adapter_bytes(s, k)
    return _with_staging(0.0, hub + 2 * checkpoint_bytes(s, k) + out, hub + out, out)


def ray_pod_disk(s: Shape, k: Knobs) -> float:
    """A Ray worker pod: its own hub download (the workers share the pod's HF_HOME), checkpoints on their way to S3,
    Ray's session folder."""
    return hub_download_bytes(s) + 2 * checkpoint_bytes(s, k) + (SCRATCH_GIB + RAY_SESSION_GIB) * GIB


def convert_disk(s: Shape, k: Knobs) -> float:
    """convert-gguf: the hub download; in its work folder (kept until the end) each model saved in float32 for the
    converter and the base's F16 GGUF; the output folder; the base cache's copy of the served base file."""
    hub = hub_download_bytes(s)
    inputs = adapter_bytes(s, k)
    folder = sum(gguf_folder_bytes(s, k).values())
    fp32_checkpoint = 4.0 * s.parameters
    work = 2 * fp32_checkpoint + gguf_bytes(s, "F16")
    cache_copy = gguf_folder_bytes(s, k)["base served"]
    return _with_staging(inputs, hub + work + folder + cache_copy, hub + inputs + folder, folder)


def evaluate_disk(s: Shape, k: Knobs) -> float:
    """evaluate: the served GGUFs of candidate and base (workflows/distill.py GGUF_READS) and the champion's, which it
    downloads from the registry; its own output is small."""
    served = gguf_folder_bytes(s, k)["base served"]
    return 3 * served + SCRATCH_GIB * GIB


def register_disk(s: Shape, k: Knobs) -> float:
    """register: the candidate's served GGUF, and MLflow's local copy of it for
    log_model, the adapter."""
    served = gguf_folder_bytes(s, k)["base served"]
    return 2 * served + adapter_bytes(s, k) + SCRATCH_GIB * GIB


# --- The plan ----------------------------------------------------------------------------------------------------


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


def whole_gib(gib: float) -> int:
    """`gib` rounded up to whole GiB (at least 1): what a pod requests."""
    return max(1, math.ceil(gib - 1e-9))


def quantity(gib: float) -> str:
    """A Kubernetes quantity in whole GiB, rounded up."""
    return f"{whole_gib(gib)}Gi"


def gpu_affinity(card_gib: float) -> dict[str, Any]:
    """Required node affinity on Karpenter's per-card memory label (MiB): a card of at least `card_gib`."""
    need_mib = math.ceil(card_gib * 1024)
    term = {"key": GPU_MEMORY_LABEL, "operator": "Gt", "values": [str(need_mib - 1)]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [term]}
    ]}}}  # fmt: skip


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
            _total(convert_memory(s, known), PROCESS_GIB),
            convert_disk(s, known) / GIB,
            why=_gib(convert_memory(s, known)),
        ),
        "evaluate": Need(
            _total(evaluate_memory(s, known), PROCESS_GIB),
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


# --- Bytes moved per run -----------------------------------------------------------------------------------------


def transfer_bytes(
    p: Plan,
    *,
    optimiser_steps: int,
    checkpoint_every: int = 10,
    ray_pods: int = 2,
    dataset_bytes: float = 0.2e6,
    base_cached: bool = False,
    champion: bool = True,
) -> dict[str, dict[str, float]]:
    """What each step downloads and uploads in one run (bytes), by step: {step: {"down": ..., "up": ..., ...}}.

    The hub download happens in every pod that loads the base (train, each Ray pod, convert-gguf); checkpoints go to
    S3 every `checkpoint_every` steps and at the end; convert-gguf uploads its whole folder (F16, the ladder, the base's
    served file) and, on a base-cache miss, the base's served file to the cache; evaluate and register download only
    the served files they read (workflows/distill.py GGUF_READS).
    """
    s, k = p.shape, p.knobs
    hub = hub_download_bytes(s)
    folder = gguf_folder_bytes(s, k)
    served = folder["base served"]
    checkpoints = math.ceil(optimiser_steps / checkpoint_every) if checkpoint_every else 1  # and always the last
    adapter = adapter_bytes(s, k)
    pods = ray_pods if k.backend == "ray" else 1
    return {
        "fetch-dataset": {"down": dataset_bytes, "up": dataset_bytes},
        "train": {
            "down": pods * hub + dataset_bytes,
            "up": checkpoints * checkpoint_bytes(s, k) + adapter,
            "hub": pods * hub,
        },
        "convert-gguf": {
            "down": hub + adapter + dataset_bytes + (served if base_cached else 0.0),
            "up": sum(folder.values()) + (0.0 if base_cached else served),
            "hub": hub,
        },
        "evaluate": {"down": 2 * served + (served if champion else 0.0) + dataset_bytes, "up": 1e6},
        "register": {"down": served + adapter + dataset_bytes + 1e6, "up": served + adapter + 1e6},
    }


def transfer_table(p: Plan, **kwargs: Any) -> str:
    """`transfer_bytes(p, **kwargs)` as a Markdown table in GB, with the totals."""
    moved = transfer_bytes(p, **kwargs)
    rows = [f"| {step} | {v['down'] / 1e9:.2f} | {v['up'] / 1e9:.2f} |" for step, v in moved.items()]
    down, up = (sum(v[d] for v in moved.values()) / 1e9 for d in ("down", "up"))
    return "\n".join(
        ["| step | downloads GB | uploads GB |", "|---|---|---|", *rows, f"| total | {down:.2f} | {up:.2f} |"]
    )
