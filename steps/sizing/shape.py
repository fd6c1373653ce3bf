"""What every size is a function of: the base's shape, read from its transformers config, and the run's settings
(`Knobs`, preflight's flags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steps.core.defaults import SHARED


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


# train's --precision on CPU (steps/train/precision.py): auto takes bf16 autocast where the node's CPU runs bf16
# natively (AMX, AVX-512-BF16), which preflight cannot see, so auto is sized as bf16.
PRECISIONS = ("auto", "fp32", "bf16")
# train's --gradient-checkpointing: auto turns it on only when one example per micro-batch does not fit without it.
CHECKPOINTING = ("auto", "on", "off")


def knob_problems(cfg: Any) -> list[str]:
    """The ranges of the settings that size a run, as train and preflight both refuse them (each config has these
    fields under these names: a test keeps their defaults equal), each named by its flag."""
    problems = []
    for name in ("batch_size", "max_seq_len", "lora_r"):
        if getattr(cfg, name) < 1:
            problems.append(f"--{name.replace('_', '-')} {getattr(cfg, name)}: needs at least 1")
    if cfg.micro_batch < 0:
        problems.append(f"--micro-batch {cfg.micro_batch}: use 0 (sized from the memory) or a positive number")
    if cfg.gradient_checkpointing not in CHECKPOINTING:
        problems.append(
            f"--gradient-checkpointing {cfg.gradient_checkpointing!r} is not one of {', '.join(CHECKPOINTING)}"
        )
    if not cfg.epochs > 0:
        problems.append(f"--epochs {cfg.epochs}: use more than 0 passes over the training split (fractions allowed)")
    return problems


@dataclass(frozen=True)
class Knobs:
    """The run's settings that size it (preflight's flags)."""

    backend: str
    qlora: bool
    max_seq_len: int
    batch_size: int
    lora_r: int
    quantizations: tuple[str, ...]
    precision: str = SHARED.precision  # CPU training precision (PRECISIONS)
    micro_batch: int = SHARED.micro_batch  # examples per forward/backward (0: the largest that fits, `fit_micro`)
    gradient_checkpointing: str = SHARED.gradient_checkpointing  # CHECKPOINTING


@dataclass(frozen=True)
class Micro:
    """How one training process runs its share of a global batch: `examples` per forward/backward (the rest of the
    share accumulated into the same step), each decoder layer recomputed in backward when `checkpointing`."""

    examples: int
    checkpointing: bool

    def __str__(self) -> str:
        return f"micro-batch {self.examples}{' with gradient checkpointing' if self.checkpointing else ''}"
