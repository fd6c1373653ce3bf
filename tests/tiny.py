"""Random-init causal LMs built here around a real tokenizer (nothing is downloaded); tests and benchmarks share them.

build_model(tokenizer_dir, out)                      # the 2-layer, hidden-64 Llama the tests train and convert
build_model(tokenizer_dir, out, arch="qwen2")        # the same shape as Qwen2
build_model(tokenizer_dir, out, shape="1b", dtype=torch.bfloat16, tie=False)   # benchmarks/gpu_train.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SHAPES = {  # hidden, intermediate, layers, attention heads, key/value heads
    "tiny": (64, 128, 2, 4, 2),
    "1b": (2048, 5632, 22, 32, 4),
    "3b": (3072, 8192, 28, 24, 8),
    "8b": (4096, 14336, 32, 32, 8),
}
# The real models' whole shapes, vocabulary and tied embeddings included (each model's config.json): what the GPU
# plan check and convert-gguf's memory benchmark build, so the logits and embeddings are the real ones' size.
REAL_SHAPES = {  # hidden, intermediate, layers, attention heads, key/value heads, vocabulary, tied embeddings
    "llama3.2-1b": (2048, 8192, 16, 32, 8, 128256, True),
    "llama3.2-3b": (3072, 8192, 28, 24, 8, 128256, True),
    "llama3.1-8b": (4096, 14336, 32, 32, 8, 128256, False),
}


def build_model(
    tokenizer_dir: Path,
    out: Path,
    *,
    arch: str = "llama",
    shape: str = "tiny",
    seed: int = 0,
    max_positions: int = 2048,
    tie: bool = True,
    init_range: float | None = None,
    dtype: Any = None,
    vocab: int = 0,
    device: str = "cpu",
) -> int:
    """Save a random-init `arch` model of `shape` (SHAPES, or REAL_SHAPES with its own vocabulary and tying) with
    `tokenizer_dir`'s tokenizer (and its special tokens) at `out`; returns its parameter count. `init_range` widens
    the init (std) where a test needs a model that says something; `vocab` makes the embedding that big when larger
    than the tokenizer (the real model's size; ids past the tokenizer are never seen); `device` builds it there (a
    GPU initialises an 8B in seconds)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    if shape in REAL_SHAPES:
        hidden, intermediate, layers, heads, kv_heads, vocab, tie = REAL_SHAPES[shape]
    else:
        hidden, intermediate, layers, heads, kv_heads = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    extra = {} if init_range is None else {"initializer_range": init_range}
    config = config_cls(
        vocab_size=max(vocab, len(tokenizer)), hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **extra,
    )  # fmt: skip
    torch.manual_seed(seed)
    with torch.device(device):
        model = model_cls(config) if dtype is None else model_cls(config).to(dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())
