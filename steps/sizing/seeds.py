"""The seed list's base models, as shapes built from their real configs (no weights): what `scripts/sizes.py` prints,
docs/sizing.md tabulates, `benchmarks.memory_calibration` measures and tests/test_sizing.py checks. Here, not in the
tests, so that the documented `python scripts/sizes.py` runs where pytest is not installed."""

from __future__ import annotations

import functools
from typing import Any

from steps.sizing.shape import Knobs, Shape, shape_of

# transformers config class, dimensions (the real models' config.json), published parameter count.
SEED_BASES: dict[str, tuple[str, dict[str, Any], float]] = {
    "SmolLM2-135M": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                   tie_word_embeddings=True), 135e6),
    "SmolLM2-360M": ("llama", dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                                   num_attention_heads=15, num_key_value_heads=5, vocab_size=49152,
                                   tie_word_embeddings=True), 362e6),
    "Qwen2.5-0.5B": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                   tie_word_embeddings=True), 494e6),
    "Llama-3.2-1B": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                   tie_word_embeddings=True), 1.24e9),
    "Qwen2.5-3B": ("qwen2", dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                                 num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                                 tie_word_embeddings=True), 3.09e9),
    "Llama-3.2-3B": ("llama", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                                   num_attention_heads=24, num_key_value_heads=8, vocab_size=128256,
                                   tie_word_embeddings=True), 3.21e9),
    "Phi-3.5-mini": ("phi3", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                                  num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                                  tie_word_embeddings=False), 3.8e9),
    "Llama-3.1-8B": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                   tie_word_embeddings=False), 8.03e9),
}  # fmt: skip


def config(name: str, **overrides: Any) -> Any:
    """The transformers config of seed base `name` (bf16, as the hub's checkpoints are)."""
    from transformers import LlamaConfig, Phi3Config, Qwen2Config

    arch, dims, _ = SEED_BASES[name]
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "phi3": Phi3Config}[arch]
    return cls(dtype="bfloat16", **{**dims, **overrides})


@functools.cache
def shape(name: str) -> Shape:
    """Seed base `name`'s shape, its parameters counted on the meta device."""
    return shape_of(config(name))


def largest_pi_base(k: Knobs) -> str:
    """The largest of SEED_BASES (by parameters) whose worker the Pi group holds in a run with knobs `k`; '' if none."""
    from steps.sizing.plan import ray_plan

    fitting = [n for n in SEED_BASES if any(g.workers_per_pod for g in ray_plan(shape(n), k) if g.group.name == "pi")]
    return max(fitting, key=lambda n: shape(n).parameters, default="")
