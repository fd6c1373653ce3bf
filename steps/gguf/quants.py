"""The GGUF file types this pipeline makes: one row per type, everything the steps need to know about it.

convert-gguf quantises to them (steps/gguf/conversion.py reads `ftype`) and judges each file by its parity thresholds;
preflight sizes the files by their bits per weight and block size (steps/sizing/memory.py); the pipeline's defaults
(the served type, the ladder) are named here too. Plain data: no llama.cpp import.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quant:
    name: str  # llama.cpp's name (`llama-quantize --help`), as in the file names
    ftype: int  # enum llama_ftype: llama-cpp-python's LLAMA_FTYPE_MOSTLY_<name> (a test keeps the two equal)
    bits: float  # bits per weight of the whole file, from llama.cpp's block layouts
    block: int  # weights per quantisation block: a tensor's rows must be a multiple of it
    # A K-quant (or IQ type): its 256-weight super-blocks do not fit a row of another length, and llama.cpp then falls
    # back to a larger type for that tensor (Q6_K -> Q8_0, ...); preflight sizes such a shape as Q8_0.
    k_quant: bool
    # Parity (convert-gguf's defaults, recorded in every report): the least teacher-forced top-1 agreement with the HF
    # model and the largest mean KL(HF || GGUF) of next-token distributions. None for F16, which must reproduce HF's
    # greedy output (the step stops otherwise).
    min_top1: float | None = None
    max_kl: float | None = None


# Bits per weight: F16 2 bytes a weight; Q8_0 34 bytes per 32 weights; Q6_K 210 per 256; the K_M mixes keep some
# tensors (attn_v, half of ffn_down, output) at Q6_K, averaging ~5.7 (Q5_K_M) and ~4.9 (Q4_K_M).
TABLE: tuple[Quant, ...] = (
    Quant("F16", ftype=1, bits=16.0, block=1, k_quant=False),
    Quant("Q8_0", ftype=7, bits=8.5, block=32, k_quant=False, min_top1=0.9, max_kl=0.05),
    Quant("Q6_K", ftype=18, bits=6.5625, block=256, k_quant=True, min_top1=0.85, max_kl=0.1),
    Quant("Q5_K_M", ftype=17, bits=5.7, block=256, k_quant=True, min_top1=0.8, max_kl=0.2),
    Quant("Q4_K_M", ftype=15, bits=4.9, block=256, k_quant=True, min_top1=0.7, max_kl=0.5),
)
QUANTS: dict[str, Quant] = {q.name: q for q in TABLE}
# The quantisations a ladder may hold (F16 is always made: the others are quantised from it), in the table's order.
QUANTIZATIONS: tuple[str, ...] = tuple(q.name for q in TABLE if q.min_top1 is not None)
# The pipeline's defaults: the quantisation that is evaluated and served, and the ladder built besides F16.
SERVED = "Q8_0"
LADDER: tuple[str, ...] = ("Q8_0", "Q4_K_M")


def thresholds(field: str) -> str:
    """A parity threshold of every quantisation, as the step's flags take it: `Q8_0=0.9,Q6_K=0.85,...`."""
    return ",".join(f"{name}={getattr(QUANTS[name], field)}" for name in QUANTIZATIONS)
