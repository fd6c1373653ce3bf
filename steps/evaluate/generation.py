"""Generation: every contender answers every document as `steps.contract.model` serves it, through llama.cpp's chat
completion with the chat template in its GGUF, the prompt from `steps.contract.prompting` and the serving configuration
(`steps.contract.serving_config`). A greedy configuration (the served one) is decoded PARALLEL documents per llama.cpp
decode (`generate_all`, through `llama_internals`, the one module that touches llama-cpp-python's internals); anything
else one document at a time (`generate_sequential`). `progress_line` prints how far a contender is."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.contract.prompting import messages
from steps.contract.threads import llama_threads
from steps.evaluate.config import EvaluateConfig
from steps.evaluate.llama_internals import (
    UTF8_SLACK,
    admissible,
    chat_request,
    decode_batched,
    is_greedy,
    release_context,
)

# Sequences llama.cpp decodes together in `generate_all`, each in n_ctx / PARALLEL tokens of KV cache (with the served
# 2048: 512, room for all but the longest documents' prompts and answers). Part of the generation cache key.
PARALLEL = 4

Progress = Callable[[int, int, int, float], None]  # (documents done, documents, tokens generated, seconds)


def open_llama(gguf: Path, cfg: EvaluateConfig) -> Any:
    """The GGUF loaded as the server loads it: the serving configuration's model settings and the step's threads, its
    layers on the GPU when `--gpu-layers` asks (refused, not ignored, by a llama.cpp built without a GPU backend)."""
    import llama_cpp

    if cfg.gpu_layers and not llama_cpp.llama_supports_gpu_offload():
        raise ValueError(
            f"--gpu-layers {cfg.gpu_layers}: this llama.cpp has no GPU backend (llama-cpp-python built for the CPU); "
            "run in the cuda image (images/cuda.Dockerfile builds llama.cpp with CUDA) or pass --gpu-layers 0"
        )
    threads = llama_threads(cfg.threads)
    return llama_cpp.Llama(
        model_path=str(gguf), **threads, n_gpu_layers=cfg.gpu_layers, verbose=False,
        **serving_config.SERVING.model_kwargs(),
    )  # fmt: skip


def generate_sequential(
    gguf: Path, documents: list[str], cfg: EvaluateConfig, progress: Progress | None = None
) -> tuple[list[dict[str, Any]], float]:
    """One document at a time through `Llama.create_chat_completion`, exactly as `steps.contract.model` answers a
    request: the reference `generate_all` is measured against (tests/test_integration.py,
    benchmarks/evaluate_speed.py), and its path for a sampled (non-greedy) serving configuration."""
    llm = open_llama(gguf, cfg)
    outputs = []
    tokens = 0
    start = time.perf_counter()
    for document in documents:
        reply = llm.create_chat_completion(messages=messages(document), **serving_config.SERVING.completion_kwargs())
        choice = reply["choices"][0]
        tokens += reply["usage"]["completion_tokens"]
        outputs.append({"text": choice["message"]["content"].strip(), "stopped": choice["finish_reason"] == "stop",
                        "tokens": reply["usage"]["completion_tokens"]})  # fmt: skip
        if progress:
            progress(len(outputs), len(documents), tokens, time.perf_counter() - start)
    return outputs, tokens / max(time.perf_counter() - start, 1e-9)


def generate_all(
    gguf: Path, documents: list[str], cfg: EvaluateConfig, progress: Progress | None = None
) -> tuple[list[dict[str, Any]], float]:
    """Summaries of `documents` from one GGUF, served as `steps.contract.model` serves it (the chat template in the
    GGUF, `steps.contract.prompting`, the serving configuration); returns the outputs (text, stopped by itself, tokens
    generated) and generated tokens per second. What changes its outputs for the same inputs changes GENERATION_VERSION.

    A greedy configuration (the served one) decodes PARALLEL documents at a time (`llama_internals.decode_batched`) in
    the served context's memory: n_ctx / PARALLEL tokens of KV cache each; a document whose prompt and answer need more
    is answered afterwards alone, in the whole context. Each answer is `create_chat_completion`'s, step for step (chat
    template, stop at end of generation or a stop string, the token cap, the text it returns), with greedy's argmax
    taken by numpy (the first of equal largest logits, as llama.cpp's greedy sampler). The logits come from other matrix
    shapes than one-at-a-time decoding (several sequences per matrix product), so they need not be bit-identical, and at
    a near-tie greedy could pick another token; llama.cpp's own server batches its parallel slots the same way.
    tests/test_integration.py measures the agreement with `generate_sequential`. A sampled configuration goes one
    document at a time through `generate_sequential`."""
    llm = open_llama(gguf, cfg)
    requests = [chat_request(llm, d) for d in documents]
    if not all(is_greedy(r) for r in requests):
        del llm
        return generate_sequential(gguf, documents, cfg, progress)
    n_ctx = llm.n_ctx()
    release_context(llm)  # the served context's memory goes to the batched one (the same n_ctx)
    stream = n_ctx // PARALLEL // 256 * 256  # llama.cpp pads a stream to 256 cells
    parallel = PARALLEL if stream else 1
    needs = [len(r["prompt"]) + admissible(r, n_ctx)[1] + UTF8_SLACK for r in requests]
    short = [(i, r) for i, r in enumerate(requests) if parallel > 1 and needs[i] <= stream]
    long = [(i, r) for i, r in enumerate(requests) if not (parallel > 1 and needs[i] <= stream)]
    outputs: list[dict[str, Any]] = [{}] * len(requests)
    tokens = 0
    start = time.perf_counter()

    def done(output: dict[str, Any]) -> None:
        nonlocal tokens
        outputs[output.pop("index")] = output
        tokens += output["tokens"]
        if progress:
            progress(sum(bool(o) for o in outputs), len(outputs), tokens, time.perf_counter() - start)

    if short:
        decode_batched(llm, short, stream * parallel, parallel, done)
    if long:
        decode_batched(llm, long, n_ctx, 1, done)
    return outputs, tokens / max(time.perf_counter() - start, 1e-9)


def progress_line(name: str, every: float = 5.0) -> Progress:
    """Prints how far a contender's generation is, at most every `every` seconds and when it ends, with its rate."""
    last = -every

    def report(done: int, total: int, tokens: int, seconds: float) -> None:
        nonlocal last
        if done == total or seconds - last >= every:
            last = seconds
            print(f"  {name}: {done}/{total} documents, {tokens} tokens in {seconds:.1f} s "
                  f"({done / max(seconds, 1e-9):.2f} documents/s, {tokens / max(seconds, 1e-9):.1f} tokens/s)",
                  flush=True)  # fmt: skip

    return report
