"""What a `gpu` run reports beside tokens/s: its model FLOPs utilisation (MFU) and the model's parameter count.

MFU counts 4·N FLOPs per trained token for N base parameters (forward 2·N, backward through the frozen base 2·N; LoRA
computes no gradient of the base weights, so not the 6·N of full fine-tuning) against the card's dense bf16 peak
from its datasheet. A card not in the table gets no MFU (0.0 in result.json) rather than a guess.
"""

from __future__ import annotations

import math
from typing import Any

from steps import sizing


def peak_tflops(device_name: str) -> float | None:
    """The card's dense bf16 peak (TFLOP/s) from its datasheet (sizing.cluster.CARD_SHEETS), or None when the table
    has no such figure for it."""
    sheet = sizing.card_sheet(device_name)
    return sheet.bf16_tflops if sheet else None


def mfu(tokens_per_second: float, parameters: int, device_name: str) -> float:
    """Model FLOPs utilisation at 4·N FLOPs per token, as a fraction (0.0 when the card's peak is unknown)."""
    peak = peak_tflops(device_name)
    if peak is None or tokens_per_second <= 0:
        return 0.0
    return 4 * parameters * tokens_per_second / (peak * 1e12)


def base_parameters(model: Any) -> int:
    """The parameter count of the model's base, LoRA weights excluded; a 4-bit (bitsandbytes) weight is counted at
    its unpacked shape, not at the packed bytes it is stored in."""
    total = 0
    for name, p in model.named_parameters():
        if "lora_" in name:
            continue
        state = getattr(p, "quant_state", None)
        total += math.prod(state.shape) if state is not None else p.numel()
    return total
