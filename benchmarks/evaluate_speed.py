"""Benchmark: evaluate's generation, one document at a time (the old path) vs batched (the new), same GGUFs, documents
and threads, with a profile of where each spends its time.

    python -m benchmarks.evaluate_speed --dataset out/dataset --gguf out/gguf --repeats 3

What it times is what evaluate generates with a cold generation cache: base and candidate (convert-gguf's served
GGUFs, listed in its result.json) on the eval and adversarial splits. Rounds alternate (old, new, old, new, …) in one
process, so machine noise hits both; each side's median is reported, and the ratio of medians. The profile splits a
round's wall time into llama.cpp decode calls (prompt tokens and generated tokens fed) and the rest (Python: chat
template, tokenising, detokenising, stop checks); it also counts decode calls, the lever batching pulls. The outputs of
the two paths are compared document by document. The CPU line is llama.cpp's own (`llama_print_system_info`): the
SIMD paths the installed build uses.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class DecodeTimer:
    """Wraps llama_decode where both paths call it (llama-cpp-python's internals through its low-level module,
    `llama_internals.decode_batched` through the package): calls, tokens and seconds inside."""

    def __init__(self) -> None:
        import llama_cpp
        import llama_cpp.llama_cpp as low_level

        self.inner = low_level.llama_decode
        self.calls = self.tokens = 0
        self.seconds = 0.0
        llama_cpp.llama_decode = low_level.llama_decode = self

    def __call__(self, ctx: Any, batch: Any) -> int:
        start = time.perf_counter()
        rc = self.inner(ctx, batch)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.tokens += batch.n_tokens
        return rc

    def take(self) -> dict[str, float]:
        out = {"decode_calls": self.calls, "decode_tokens": self.tokens, "decode_s": self.seconds}
        self.calls = self.tokens = 0
        self.seconds = 0.0
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=ROOT / "out/dataset", help="fetch-dataset's folder")
    parser.add_argument("--gguf", type=Path, default=ROOT / "out/gguf", help="convert-gguf's folder")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per side")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: all cores, as evaluate)")
    parser.add_argument(
        "--contenders", default="base,candidate", help="which of convert-gguf's GGUFs to generate with (comma list)"
    )
    args = parser.parse_args()

    from steps.core.dataset import load_split
    from steps.core.io import read_json
    from steps.evaluate import EvaluateConfig, generation, llama_internals
    from steps.evaluate.config import thread_count

    rows = load_split(args.dataset, "eval") + load_split(args.dataset, "adversarial")
    documents = [r["document"] for r in rows]
    result = read_json(args.gguf / "result.json")
    contenders = {name: args.gguf / result[f"{name}_gguf"] for name in args.contenders.split(",")}
    cfg = EvaluateConfig(dataset=args.dataset, gguf=args.gguf, out=args.gguf, threads=args.threads)
    paths = {"old": generation.generate_sequential, "new": generation.generate_all}
    timer = DecodeTimer()
    walls: dict[str, list[float]] = {side: [] for side in paths}
    profiles: dict[str, list[dict[str, float]]] = {side: [] for side in paths}
    outputs: dict[str, dict[str, list[dict]]] = {side: {} for side in paths}
    print(f"{len(documents)} documents x {len(contenders)} contenders, {thread_count(cfg)} threads, "
          f"parallel {generation.PARALLEL}; cpu {llama_internals.llama_cpu()}", flush=True)  # fmt: skip
    for round_ in range(args.repeats):
        for side, generate in paths.items():
            timer.take()
            start = time.perf_counter()
            tokens = 0
            for name, gguf in contenders.items():
                outputs[side][name], _ = generate(gguf, documents, cfg)
                tokens += sum(o["tokens"] for o in outputs[side][name])
            wall = time.perf_counter() - start
            walls[side].append(wall)
            profiles[side].append({**timer.take(), "wall_s": wall, "generated": tokens})
            p = profiles[side][-1]
            print(f"round {round_ + 1} {side}: {wall:.1f} s, {p['decode_calls']} decode calls, "
                  f"{p['decode_s']:.1f} s in llama_decode, {tokens} tokens generated", flush=True)  # fmt: skip

    old, new = statistics.median(walls["old"]), statistics.median(walls["new"])
    print("\n| path | median wall (s) | rounds | ratio to old |")
    print("|---|---|---|---|")
    print(f"| old: one document at a time (create_chat_completion) | {old:.1f} | {len(walls['old'])} | 1.00 |")
    print(f"| new: {generation.PARALLEL} sequences per decode | {new:.1f} | {len(walls['new'])} | {new / old:.2f} "
          f"({old / new:.2f}x faster) |")  # fmt: skip
    print("\nprofile (median round):")
    for side in paths:
        p = sorted(profiles[side], key=lambda q: q["wall_s"])[len(profiles[side]) // 2]
        rest = p["wall_s"] - p["decode_s"]
        print(f"  {side}: llama_decode {p['decode_s']:.1f} s ({p['decode_s'] / p['wall_s']:.0%}) in "
              f"{p['decode_calls']} calls of {p['decode_tokens'] / max(p['decode_calls'], 1):.1f} tokens on average "
              f"({p['decode_tokens']} tokens fed, {p['generated']} generated); outside it {rest:.1f} s "
              f"({rest / p['wall_s']:.0%}): model load, chat template, tokens to text, stop checks")  # fmt: skip
    same = sum(a == b for name in contenders for a, b in zip(outputs["old"][name], outputs["new"][name], strict=True))
    total = len(documents) * len(contenders)
    print(f"\nidentical outputs, old vs new: {same}/{total} ({same / total:.1%})")


if __name__ == "__main__":
    main()
