"""Benchmark: what one token costs llama.cpp on this CPU — prompt prefill, and decode steps of 1…N sequences at once —
and the floor that puts under evaluate's wall time, whatever the Python around it does.

    python -m benchmarks.llama_kernels --gguf out/gguf --dataset out/dataset
    python -m benchmarks.llama_kernels --gguf out/gguf --dataset out/dataset --suite data/adversarial/suite.jsonl

For the served candidate GGUF (convert-gguf's result.json), per thread count: prefill tokens/s (one eval prompt per
stream, in n_batch chunks, as evaluate feeds them) and the wall time of one decode step that feeds one token to each
of S sequences (S = 1, 4, 8, 16; each in its own KV stream, as evaluate's `llama_internals.decode_batched` runs them).
When a step of S sequences costs S times a step of one, batching cannot help: the CPU is busy computing, not waiting.

The floor: every prompt token but the shared prefix (chat template and system prompt, computed once) has to be
prefilled once, and every answer token decoded once, so a contender's generation takes at least
prompt tokens / best prefill rate + answer tokens / best decode rate. Answer tokens are the candidate's own from
`--generations` (evaluate's generations.jsonl) when given, else the serving cap (`max_tokens`) per document.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = 24  # decode steps timed per (threads, streams)


def measure(llm: Any, prompt: list[int], streams: int) -> tuple[float, float]:
    """(prefill tokens/s, seconds per decode step of `streams` sequences) in a context of `streams` KV streams."""
    from steps.evaluate import llama_internals

    with llama_internals.streams_context(llm, 512 * streams, streams) as (_, n_batch, decode):
        start = time.perf_counter()
        for s in range(streams):
            for at in range(0, len(prompt), n_batch):
                chunk = prompt[at : at + n_batch]
                decode([(t, at + j, s, at + j == len(prompt) - 1) for j, t in enumerate(chunk)])
        prefill = streams * len(prompt) / (time.perf_counter() - start)
        start = time.perf_counter()
        for k in range(STEPS):
            decode([(prompt[k], len(prompt) + k, s, True) for s in range(streams)])
        return prefill, (time.perf_counter() - start) / STEPS


def prompt_tokens(llm: Any, documents: list[str]) -> tuple[int, int]:
    """(tokens to prefill for `documents` as evaluate sends them, the shared prefix computed once)."""
    from steps.evaluate import llama_internals

    prompts = [llama_internals.chat_request(llm, d)["prompt"] for d in documents]
    shared = llama_internals.shared_prefix(prompts)
    return sum(len(p) - shared for p in prompts) + shared, shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=ROOT / "out/gguf", help="convert-gguf's folder")
    parser.add_argument("--dataset", type=Path, default=ROOT / "out/dataset", help="fetch-dataset's folder")
    parser.add_argument("--suite", type=Path, help="an adversarial split to price instead of the dataset's")
    parser.add_argument("--generations", type=Path, help="evaluate's generations.jsonl: the candidate's answer lengths")
    parser.add_argument("--threads", default="1,2", help="thread counts to measure (comma list)")
    parser.add_argument("--streams", default="1,4,8,16", help="sequences per decode step (comma list)")
    args = parser.parse_args()

    from steps.contract import serving_config
    from steps.core.dataset import load_split
    from steps.core.io import read_json, read_jsonl
    from steps.evaluate import EvaluateConfig, generation, llama_internals

    gguf = args.gguf / read_json(args.gguf / "result.json")["candidate_gguf"]
    eval_rows = load_split(args.dataset, "eval")
    adversarial = read_jsonl(args.suite) if args.suite else load_split(args.dataset, "adversarial")
    documents = [r["document"] for r in eval_rows + adversarial]
    print(f"{gguf.name}; cpu {llama_internals.llama_cpu()}", flush=True)
    best_prefill = best_token = 0.0
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        llm = generation.open_llama(
            gguf, EvaluateConfig(dataset=args.dataset, gguf=args.gguf, out=ROOT, threads=threads)
        )
        prompt = llama_internals.chat_request(llm, eval_rows[0]["document"])["prompt"][: 512 - STEPS - 1]
        one = None
        for streams in (int(s) for s in args.streams.split(",")):
            prefill, step = measure(llm, prompt, streams)
            one = one or step
            best_prefill, best_token = max(best_prefill, prefill), max(best_token, streams / step)
            rows.append(f"| {threads} | {streams} | {prefill:.0f} | {step * 1000:.1f} | {streams / step:.1f} "
                        f"| {step / one / streams:.2f} |")  # fmt: skip
            print(rows[-1], flush=True)
        tokens, shared = prompt_tokens(llm, documents)
        llm.close()
    print("\n| threads | sequences per step | prefill tokens/s | decode step (ms) | decode tokens/s | step cost / "
          "(sequences x one) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.generations:
        answers = [json.loads(line) for line in args.generations.read_text().splitlines()]
        generated = sum(a["tokens"] for a in answers if a["model"] == "candidate")
        where = f"the candidate's {generated} answer tokens ({args.generations})"
    else:
        generated = serving_config.SERVING.max_tokens * len(documents)
        where = f"{generated} answer tokens at the serving cap ({serving_config.SERVING.max_tokens} a document)"
    floor = tokens / best_prefill + generated / best_token
    print(f"\n{len(documents)} documents ({len(eval_rows)} eval + {len(adversarial)} adversarial): {tokens} prompt "
          f"tokens to prefill (shared prefix of {shared} once) and {where}")  # fmt: skip
    print(f"floor per contender at the best rates measured ({best_prefill:.0f} prefill, {best_token:.1f} decode "
          f"tokens/s): {tokens / best_prefill:.0f} s + {generated / best_token:.0f} s = {floor:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
