"""Batched greedy decoding, and every use of llama-cpp-python's internals in the project: read from llama-cpp-python
WRITTEN_FOR (pyproject.toml pins it; tests/test_evaluate_gate.py holds the two together). Its public API answers one
request at a time; answering several per llama.cpp decode, as llama.cpp's server runs its parallel slots, needs what
the public API does not offer. Upgrading llama-cpp-python means rereading, in its llama.py and llama_chat_format.py:

- `Llama.create_chat_completion` calls `self.create_completion` with the request it built (`chat_request` records it
  through a stand-in `Llama`, so the prompt is the one the chat handler really builds);
- `Llama._create_completion`: the prompt/token-cap rules (`admissible`), its generation loop (`_step`: end of
  generation, the unfinished UTF-8 character, stop strings, stopping criteria, the cap) and the text it returns
  (`_finish`), and the sampler chain that makes a request greedy (`is_greedy`);
- the private attributes `Llama._model` (`.model`, `.vocab`), `Llama._ctx` (`release_context`) and
  `Llama.context_params`;
- the low-level bindings `llama_cpp.llama_init_from_model`, `llama_batch_init`/`llama_batch_free`, `llama_decode`,
  `llama_get_logits_ith`, `llama_get_memory`, `llama_memory_seq_cp`/`llama_memory_seq_rm`, `llama_vocab_is_eog`,
  `llama_free` and `llama_print_system_info` (`llama_cpu`).

tests/test_integration.py checks that the batched answers are `create_chat_completion`'s, document by document;
benchmarks/evaluate_speed.py and benchmarks/llama_kernels.py time them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from steps.contract import serving_config
from steps.contract.prompting import messages

# The llama-cpp-python release whose internals this module mirrors.
WRITTEN_FOR = "0.3.36"

Decode = Callable[[list[tuple[int, int, int, bool]]], None]  # one llama_decode of (token, position, sequence, logits?)


class _RequestRecorder:
    """Stands in for the `Llama` that llama-cpp-python's chat handler calls: everything is the real model's, but
    `create_completion` keeps the request (prompt tokens, stop strings, stopping criteria, sampling settings) instead of
    running it. So the prompt is built by the very code `create_chat_completion` runs (the GGUF's chat template or a
    format llama-cpp-python recognises in it), not by a copy of it."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.request: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, **request: Any) -> dict[str, Any]:
        self.request = request
        return {"id": "", "object": "text_completion", "created": 0, "model": "",
                "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}  # fmt: skip


def chat_request(llm: Any, document: str) -> dict[str, Any]:
    """What `llm.create_chat_completion(messages(document), **serving)` asks of `create_completion`."""
    from llama_cpp import Llama

    recorder = _RequestRecorder(llm)
    Llama.create_chat_completion(recorder, messages=messages(document), **serving_config.SERVING.completion_kwargs())
    return recorder.request


def is_greedy(request: dict[str, Any]) -> bool:
    """The request samples the argmax of the raw logits: llama-cpp-python's sampler chain is then penalties (neutral
    here) + greedy, which `decode_batched` reproduces; anything else goes through `generate_sequential`."""
    return (
        request.get("temperature") == 0
        and request.get("repeat_penalty") == 1
        and request.get("presence_penalty") == 0
        and request.get("frequency_penalty") == 0
        and not request.get("logprobs")
        and not request.get("stream")
        and request.get("grammar") is None
        and request.get("logits_processor") is None
        and not request.get("logit_bias")
        and isinstance(request.get("prompt"), list)
    )


@dataclass
class _Sequence:
    """One document being answered: its request as `Llama._create_completion` would run it, and how far it got."""

    index: int
    prompt: list[int]
    max_tokens: int
    stop: list[bytes]
    criteria: Any
    slot: int = -1
    fed: int = 0  # prompt tokens in the KV cache
    completion: list[int] = field(default_factory=list)
    pending: int | None = None  # the sampled token to feed next step
    multibyte_fix: int = 0
    logits_at: int = -1  # its row in this step's batch outputs


def _finish(seq: _Sequence, llm: Any, text: bytes, reason: str) -> dict[str, Any]:
    evaluated = seq.prompt + seq.completion[: len(seq.completion) - (seq.pending is not None)]
    if seq.criteria is not None and seq.criteria(evaluated, None):
        text, reason = llm.detokenize(seq.completion, prev_tokens=seq.prompt), "stop"
    return {"text": text.decode("utf-8", errors="ignore").strip(), "stopped": reason == "stop",
            "tokens": len(seq.completion)}  # fmt: skip


def _step(seq: _Sequence, token: int, llm: Any, vocab: Any) -> dict[str, Any] | None:
    """`Llama._create_completion`'s loop body for one sampled token: the output when the sequence ends, else None."""
    import llama_cpp

    seq.pending = None
    if seq.criteria is not None and seq.criteria(seq.prompt + seq.completion, None):
        return _finish(seq, llm, b"", "length")  # its generator ends before yielding the token
    if llama_cpp.llama_vocab_is_eog(vocab, token):
        return _finish(seq, llm, llm.detokenize(seq.completion, prev_tokens=seq.prompt), "stop")
    seq.completion.append(token)
    seq.pending = token
    all_text = llm.detokenize(seq.completion, prev_tokens=seq.prompt)
    for k, char in enumerate(all_text[-3:]):  # an incomplete UTF-8 character: read on before any check
        k = 3 - k
        for num, pattern in ((2, 192), (3, 224), (4, 240)):
            if num > k and pattern & char == pattern:
                seq.multibyte_fix = num - k
    if seq.multibyte_fix > 0:
        seq.multibyte_fix -= 1
        return None
    found = [s for s in seq.stop if s in all_text]
    if found:
        return _finish(seq, llm, all_text[: all_text.index(found[0])], "stop")
    if len(seq.completion) >= seq.max_tokens:
        return _finish(seq, llm, all_text, "length")
    return None


def admissible(request: dict[str, Any], n_ctx: int) -> tuple[list[int], int]:
    """The prompt and the token cap `Llama._create_completion` runs `request` with, in a context of `n_ctx` tokens."""
    prompt = list(request["prompt"])
    if len(prompt) >= n_ctx:  # its own refusal, word for word
        raise ValueError(f"Requested tokens ({len(prompt)}) exceed context window of {n_ctx}")
    max_tokens = request["max_tokens"] if request["max_tokens"] and request["max_tokens"] > 0 else n_ctx - len(prompt)
    return prompt, max_tokens if max_tokens + len(prompt) < n_ctx else n_ctx - len(prompt)


# An unfinished UTF-8 character makes `_create_completion` read up to 3 tokens past its cap.
UTF8_SLACK = 3


def shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt shares (chat template, system prompt): computed once for all of them. Each
    prompt keeps at least its last token to decode, for its logits."""
    shared = min(len(p) for p in prompts) - 1
    for prompt in prompts[1:]:
        shared = next((j for j in range(shared) if prompts[0][j] != prompt[j]), shared)
    return shared


def batch_decoder(ctx: Any, batch: Any) -> Decode:
    """`decode(items)`: one `llama_decode` of (token, position, sequence id, wants logits) items through `batch` in
    `ctx`; a non-zero return is raised."""
    import llama_cpp

    def decode(items: list[tuple[int, int, int, bool]]) -> None:
        for j, (token, pos, seq_id, logits) in enumerate(items):
            batch.token[j], batch.pos[j], batch.n_seq_id[j] = token, pos, 1
            batch.seq_id[j][0], batch.logits[j] = seq_id, logits
        batch.n_tokens = len(items)
        rc = llama_cpp.llama_decode(ctx, batch)  # looked up per call: benchmarks/evaluate_speed.py times it
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} on a batch of {len(items)} tokens")

    return decode


@contextmanager
def streams_context(llm: Any, n_ctx: int, streams: int) -> Iterator[tuple[Any, int, Decode]]:
    """(context, n_batch, `batch_decoder` of it): a llama.cpp context on `llm`'s model of `streams` KV streams of
    n_ctx / streams cells (`kv_unified` off: one per sequence), with the served threads, batch size and attention;
    freed on leaving."""
    import llama_cpp

    params = type(llm.context_params).from_buffer_copy(llm.context_params)  # the served threads, batch, attention
    params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, streams, False
    ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
    if ctx is None:
        raise RuntimeError(f"llama.cpp could not create a context of {streams} x {n_ctx // streams} tokens")
    batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
    try:
        yield ctx, params.n_batch, batch_decoder(ctx, batch)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)


def step_items(running: dict[int, _Sequence], n_batch: int) -> list[tuple[int, int, int, bool]]:
    """One decode's (token, position, sequence id, wants logits) items, in slot order (llama.cpp splits a multi-stream
    batch into runs of consecutive sequence ids): each generating sequence's last token, and as much of each feeding
    sequence's prompt as fits — `n_batch` items in all, room kept for every generating sequence after it (the batch
    holds n_batch; one item more writes past it). Records in each sequence what it fed and where its logits are."""
    items: list[tuple[int, int, int, bool]] = []
    to_come = sum(seq.pending is not None for seq in running.values())
    for slot in sorted(running):
        seq = running[slot]
        if seq.pending is not None:
            to_come -= 1
            seq.logits_at = len(items)
            items.append((seq.pending, len(seq.prompt) + len(seq.completion) - 1, slot, True))
        elif len(items) + to_come < n_batch:
            take = seq.prompt[seq.fed : seq.fed + n_batch - len(items) - to_come]
            items += [(t, seq.fed + j, slot, False) for j, t in enumerate(take)]
            seq.fed += len(take)
            if seq.fed == len(seq.prompt):
                items[-1] = (*items[-1][:3], True)
                seq.logits_at = len(items) - 1
    return items


def decode_batched(
    llm: Any, requests: list[tuple[int, dict[str, Any]]], n_ctx: int, streams: int, progress: Callable[[dict], None]
) -> None:
    """Greedy answers to `requests` ((index, request recorded by `chat_request`)), `streams` sequences per llama.cpp
    decode, as llama.cpp's server runs parallel slots with continuous batching: each step feeds every running sequence
    its last token, or the next chunk of its prompt. Every sequence has its own KV stream of n_ctx / streams cells
    (`kv_unified` off), laid out as one-at-a-time decoding lays out its context, and the prompt prefix all requests
    share (chat template, system prompt) is computed once and copied into each stream and kept there between requests,
    as `create_chat_completion` keeps it from one request to the next. `progress` gets each output, index included."""
    import llama_cpp
    import numpy as np

    vocab = llm._model.vocab
    n_vocab = llm.n_vocab()
    seqs = [_Sequence(i, *admissible(r, n_ctx), [s.encode() for s in r["stop"] or []], r["stopping_criteria"])
            for i, r in requests]  # fmt: skip
    shared = shared_prefix([seq.prompt for seq in seqs])
    with streams_context(llm, n_ctx, streams) as (ctx, n_batch, decode):
        mem = llama_cpp.llama_get_memory(ctx)
        for at in range(0, shared, n_batch):
            decode([(t, at + j, 0, False) for j, t in enumerate(seqs[0].prompt[at : min(at + n_batch, shared)])])
        for slot in range(1, streams):
            if shared:
                llama_cpp.llama_memory_seq_cp(mem, 0, slot, -1, -1)  # a copy of stream 0's cells
        waiting = list(reversed(seqs))
        running: dict[int, _Sequence] = {}
        while waiting or running:
            for slot in range(streams):
                if slot not in running and waiting:
                    running[slot] = waiting.pop()
                    running[slot].slot, running[slot].fed = slot, shared
            decode(step_items(running, n_batch))
            for slot, seq in list(running.items()):
                if seq.logits_at < 0:
                    continue
                row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, seq.logits_at), shape=(n_vocab,))
                seq.logits_at = -1
                done = _step(seq, int(np.argmax(row)), llm, vocab)  # greedy: the first of the largest logits
                if done is not None:
                    del running[slot]
                    llama_cpp.llama_memory_seq_rm(mem, slot, shared, -1)  # keeps the shared prefix
                    progress({"index": seq.index, **done})


def release_context(llm: Any) -> None:
    """Frees `llm`'s own context (its KV cache) and keeps the model: `decode_batched` makes its own context of the same
    size from the model, so the memory is not held twice."""
    llm._ctx.close()


def llama_cpu() -> str:
    """The CPU as llama.cpp computes on it: the architecture and the SIMD paths it uses (AVX2, NEON, …).

    Greedy output is the argmax of logits whose last bits depend on the kernels; at near-ties another path can pick
    another token, so generations made on an arm64 Pi are not reused on an x86 node, or the reverse.
    """
    import platform

    import llama_cpp

    return f"{platform.machine()}: {llama_cpp.llama_print_system_info().decode().strip()}"
