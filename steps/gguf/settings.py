"""The parity check's settings that other steps read: convert-gguf records and judges by them, preflight sizes
convert-gguf's memory by them (steps/sizing/memory.py). The per-quantisation thresholds are steps/gguf/quants.py's
rows. Plain data that imports nothing when loaded, so sizing stays light.
"""

from __future__ import annotations

# The context llama.cpp is opened with for the probes (parity.open_gguf; preflight sizes convert-gguf's llama.cpp
# buffers by it).
CONVERT_N_CTX = 1536
# Greedy tokens of HF's reference continuation per probe (convert-gguf's --parity-tokens default).
PARITY_TOKENS = 48
# convert-gguf's parity thresholds besides the per-quantisation ones (steps/gguf/quants.py): for every file, how much
# less often than HF it may stop. On the fixed probes the thresholds bound the point figures; on the eval split's
# documents (the served distribution) they bound the interval's far end: PARITY_CONFIDENCE two-sided, from
# PARITY_RESAMPLES bootstrap resamples of documents. ConvertConfig's defaults are made from these and every report
# records the ones it was judged by.
PARITY_MAX_EOS_DROP = 0.2
PARITY_CONFIDENCE = 0.95
PARITY_RESAMPLES = 2000
# The eval documents scored in one batched HF forward (its activations and the kept logits rows scale with it).
PARITY_EVAL_BATCH = 8
# convert-gguf's merge writes the converter's input in shards of at most this many bytes (or one tensor, where larger):
# a shard is held while it fills (safetensors 0.8 writes it from the tensors' own memory, no serialised copy).
MERGE_SHARD_BYTES = 2**30


def parity_n_ctx() -> int:
    """The largest llama.cpp context convert-gguf opens: the probes' (CONVERT_N_CTX), or the served context when the
    eval split's documents are checked as served (parity.eval_parity refuses a longer one)."""
    from steps.contract import serving_config

    return max(CONVERT_N_CTX, serving_config.SERVING.n_ctx)
