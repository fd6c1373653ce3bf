"""A contender's generations kept between runs: sealed folders (steps/core/sealed.py) under the sha256 of everything
the outputs are a function of (`generation_key`), so the base and the champion are not generated again.

The key holds the inputs' digests and `GENERATION_VERSION`, never source files: a reworded report line keeps every
cached generation; a change to how outputs are made bumps the version.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.contract.prompting import messages
from steps.core.io import read_json, sha256_file, write_json
from steps.core.sealed import SealedFolders
from steps.evaluate.config import EvaluateConfig, thread_count
from steps.evaluate.generation import PARALLEL, Progress, generate_all
from steps.evaluate.llama_internals import llama_cpu

CACHE_OUTPUTS = "outputs.json"
# The generating code's version, part of the generation cache key. Bump it when a change to `generate_all` (how the
# model is called, how a reply becomes an output) would change the kept outputs for the same GGUF, prompts and serving
# configuration; not for changes to scoring or reports, which are always recomputed from the kept outputs.
# 2: batched decoding (PARALLEL sequences per llama.cpp decode) and each output's token count.
# 3: prompts prefilled with the key's thread count (before: llama-cpp-python's default, every core of the machine).
GENERATION_VERSION = 3


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def gpu_devices() -> str:
    """The GPUs this container was given and their driver, as nvidia-smi names them (the NVIDIA container toolkit
    mounts it: NVIDIA_DRIVER_CAPABILITIES `utility`, images/cuda.Dockerfile): offloaded layers compute with their
    kernels, so generations made on one card are not reused on another."""
    query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    try:
        return subprocess.run(query, capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise ValueError(
            f"--gpu-layers with a generation cache: `{' '.join(query)}` failed ({e}), so the cache cannot tell which "
            "GPU made the generations; run where nvidia-smi is mounted, or pass --generation-cache ''"
        ) from e


def generation_key(gguf: Path, documents: list[str], cfg: EvaluateConfig) -> str:
    """What a contender's generations are a function of, hashed: the inputs' digests and the generating code's version,
    not its source files, so a reworded report line keeps every cached generation."""
    import llama_cpp

    what = {
        "gguf": sha256_file(gguf),  # its weights, tokenizer and chat template
        "documents": _digest(documents),
        "prompts": _digest([messages(d) for d in documents]),  # the serving prompt around each document, as sent
        "serving": serving_config.SERVING.record(),
        "threads": thread_count(cfg),  # greedy output can move with the thread count at near-ties
        "parallel": PARALLEL,  # and with the batch's shapes
        "cpu": llama_cpu(),  # and with the kernels
        "llama_cpp_python": llama_cpp.__version__,
        "generation_version": GENERATION_VERSION,
    }
    if cfg.gpu_layers:  # layers computed by the GPU's kernels instead (a key of its own; CPU keys stay as they were)
        what["gpu"] = {"layers": cfg.gpu_layers, "devices": gpu_devices()}
    return _digest(what)[:32]


def cached_generate(
    gguf: Path, documents: list[str], cfg: EvaluateConfig, progress: Progress | None = None
) -> tuple[list[dict[str, Any]], float, bool]:
    """`generate_all`, through the generation cache when there is one: (outputs, tokens/s, from the cache)."""
    if not cfg.generation_cache:
        return (*generate_all(gguf, documents, cfg, progress), False)
    store = SealedFolders(cfg.generation_cache, "evaluate")
    key = generation_key(gguf, documents, cfg)
    with store.get(key) as cached:
        if cached is not None:
            kept = read_json(cached / CACHE_OUTPUTS)
            return kept["outputs"], kept["tokens_per_second"], True
    outputs, tok_s = generate_all(gguf, documents, cfg, progress)
    store.put(key, lambda folder: write_json(folder / CACHE_OUTPUTS, {"outputs": outputs, "tokens_per_second": tok_s}))
    return outputs, tok_s, False
