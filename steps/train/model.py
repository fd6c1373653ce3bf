"""The model the loop trains: the base with LoRA attached (peft), bf16 on CUDA (4-bit NF4 base with `--qlora`),
float32 on CPU."""

from __future__ import annotations

from typing import Any

from steps.train.config import TrainConfig


def build_model(cfg: TrainConfig, device: Any) -> tuple[Any, Any]:
    """(PEFT model on `device`, tokenizer): bf16 on CUDA (4-bit NF4 base with `--qlora`), float32 on CPU."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    set_seed(cfg.seed)  # the same LoRA init on every rank and in every restart
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
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
