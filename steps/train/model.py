"""The model the loop trains: the base with LoRA attached (peft). The frozen base is bf16 where the run computes in
bf16 (CUDA, with a 4-bit NF4 base under `--qlora`; a CPU run whose precision resolved to bf16: AMX or AVX-512-BF16,
or `--precision bf16`), float32 elsewhere; the LoRA weights and their optimiser state are float32 always (peft
upcasts adapters on a bf16 base). A bf16 base under bf16 autocast computes what a float32 base under the same
autocast does, each weight rounded to bf16 once at load instead of at every use, at half the memory and without
autocast's per-step bf16 copies of the weights."""

from __future__ import annotations

from typing import Any

from steps.train.config import TrainConfig


def build_model(cfg: TrainConfig, device: Any, precision: str = "fp32") -> tuple[Any, Any]:
    """(PEFT model on `device`, tokenizer): the base in bf16 on CUDA (4-bit NF4 with `--qlora`) and where `precision`
    (what `precision.detect` resolved) is bf16, float32 elsewhere."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    set_seed(cfg.seed)  # the same LoRA init on every rank and in every restart
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    dtype = torch.bfloat16 if device.type == "cuda" or precision == "bf16" else torch.float32
    extra: dict[str, Any] = {}
    if cfg.qlora:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as e:
            raise ValueError("--qlora needs bitsandbytes: install the gpu extra (pip install '.[gpu]')") from e
        from transformers import BitsAndBytesConfig

        extra["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        extra["device_map"] = {"": device.index or 0}
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, revision=cfg.base_revision, dtype=dtype, **extra)
    if cfg.qlora:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=[t.strip() for t in cfg.lora_targets.split(",") if t.strip()],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora)
    if not cfg.qlora:
        model = model.to(device)
    return model, tokenizer


def pad_id_of(tokenizer: Any) -> int:
    """The id batches are padded with: the tokenizer's pad token, else its end-of-sequence token."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def use_gradient_checkpointing(model: Any) -> None:
    """Recompute each decoder layer in backward instead of keeping its activations: torch's non-reentrant checkpoint
    (no input needs a gradient; dropout's RNG state is replayed, so the recomputed forward is the same)."""
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
