"""Benchmark: wall time and peak memory of the convert-gguf step vs llama.cpp's converter + quantiser run directly.

    python -m benchmarks.convert_overhead --adapter out/adapter --repeats 3

Both sides start from the same checkpoint: the base model plus the adapter, merged once into an HF folder for the
direct side (llama.cpp's converter needs a merged model). Runs alternate (ours, direct, ours, direct, …) in one
process tree so machine noise hits both; each side's median is reported, and the ratio of medians.
- direct: convert_hf_to_gguf.py → F16, then llama.cpp's quantiser → each quantisation of the ladder;
- ours: `python -m steps.convert_gguf` on the unmerged adapter: merge + merge check + the same conversions, plus the
  base at the served quantisation, plus the parity checks (the part that costs, and the point of the step), with no
  base cache: what the first run on a new base costs;
- ours-cached: the same with `--base-cache` warmed by one run before the rounds: every later run on that base;
- now (with `--baseline REV`): the step as it was at git rev REV (its steps/ extracted to a temporary folder), cold,
  in the same rounds: the before/after of a change measured in one run.
Peak memory is the child process tree's max RSS. The profile printed at the end is the last cold run's own record
(parity.json's `seconds`: where its time went, and each file's parity pass).

Profile before the batching (c367d71, SmolLM2-135M, 2 shared cores, one cold run, 100 s in README's 3-run median):
per file, llama.cpp generated 48 tokens one at a time per probe and then evaluated the same 48 again teacher-forced,
with logits for every prompt position (5 files x 5 probes, ~1,800 prompt tokens each); HF generated each probe
alone (5 x 48 sequential steps per model, base and candidate) and the merge check ran a second unbatched pass.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from steps.core.defaults import SHARED
from steps.gguf.quants import LADDER

ROOT = Path(__file__).resolve().parent.parent

DIRECT = """
import resource, subprocess, sys, llama_cpp
from pathlib import Path

from steps.gguf.quants import LADDER
from steps.gguf.quants import QUANTS
merged, work, converter, quants = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
subprocess.run([sys.executable, converter + "/convert_hf_to_gguf.py", str(merged), "--outfile",
                str(work / "m-F16.gguf"), "--outtype", "f16"], check=True, capture_output=True)
for q in quants:
    p = llama_cpp.llama_model_quantize_default_params(); p.ftype = QUANTS[q].ftype
    assert llama_cpp.llama_model_quantize(str(work / "m-F16.gguf").encode(), str(work / f"m-{q}.gguf").encode(), p) == 0
print(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
"""

OURS = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-m", "steps.convert_gguf", *sys.argv[1:]], check=True, capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def timed(cmd: list[str], cwd: Path = ROOT, label: str = "direct") -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{proc.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    print(f"  {label}: {seconds:.1f}s", flush=True)  # each run as it ends: a cut-short run still reports
    return seconds, int(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", type=Path, default=ROOT / "out/adapter")
    parser.add_argument("--dataset", type=Path, default=ROOT / "out/dataset")
    parser.add_argument("--base-model", default=str(ROOT / SHARED.base_model))
    parser.add_argument("--converter-dir", default=str(ROOT / ".cache/llama.cpp"))
    parser.add_argument("--quantizations", default=",".join(LADDER))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default="", help="git rev whose convert-gguf runs beside ours, cold ('now')")
    parser.add_argument("--json", type=Path, help="also write the summary here (benchmarks/targets.py reads it)")
    args = parser.parse_args()

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp_str:
        tmp = Path(tmp_str)
        merged = tmp / "merged"
        base = AutoModelForCausalLM.from_pretrained(args.base_model, dtype=torch.float32)
        PeftModel.from_pretrained(base, str(args.adapter)).merge_and_unload().save_pretrained(merged)
        AutoTokenizer.from_pretrained(args.base_model).save_pretrained(merged)
        del base

        def ours(out: Path, cache: str, tree: Path = ROOT) -> tuple[float, int]:
            return timed(
                [sys.executable, "-c", OURS, "--adapter", str(args.adapter), "--dataset", str(args.dataset),
                 "--base-model", args.base_model, "--out", str(out), "--quantizations", args.quantizations,
                 "--converter-dir", args.converter_dir, "--base-cache", cache], cwd=tree, label=out.name,
            )  # fmt: skip

        baseline = tmp / "baseline"
        if args.baseline:
            baseline.mkdir()
            archive = subprocess.run(
                ["git", "archive", args.baseline, "steps"], cwd=ROOT, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(baseline)], input=archive.stdout, check=True)

        cache = str(tmp / "base-cache")
        ours(tmp / "warm-up", cache)
        runs: dict[str, list[tuple[float, int]]] = {"ours": [], "ours-cached": [], "direct": []}
        if args.baseline:
            runs["now"] = []
        for i in range(args.repeats):
            work = tmp / f"direct-{i}"
            work.mkdir()
            runs["direct"].append(
                timed([sys.executable, "-c", DIRECT, str(merged), str(work), args.converter_dir, args.quantizations])
            )
            runs["ours"].append(ours(tmp / f"ours-{i}", ""))
            runs["ours-cached"].append(ours(tmp / f"ours-cached-{i}", cache))
            if args.baseline:
                runs["now"].append(ours(tmp / f"now-{i}", "", baseline))
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1][0]:.1f}s" for k, v in runs.items()), flush=True)
        parity = json.loads((tmp / f"ours-{args.repeats - 1}/parity.json").read_text())

    summary = {}
    for side, values in runs.items():
        summary[side] = {
            "median_seconds": round(statistics.median(v[0] for v in values), 1),
            "peak_rss_mb": round(max(v[1] for v in values) / 1024, 0),
        }
    for side in ("ours", "ours-cached", "now")[: 3 if args.baseline else 2]:
        summary[f"ratio_{side}_over_direct"] = round(
            summary[side]["median_seconds"] / summary["direct"]["median_seconds"], 2
        )
    summary["ours_convert_and_quantise_seconds_candidate"] = parity["candidate"]["convert_and_quantise_seconds"]
    summary["ours_convert_and_quantise_seconds_base"] = parity["base"]["convert_and_quantise_seconds"]
    summary["profile_of_ours_cold"] = {
        **parity["seconds"],
        **{
            f"parity pass {who} {q}": r["seconds"]
            for who in ("base", "candidate")
            for q, r in parity[who]["files"].items()
        },
        "eval split (included above)": parity["eval_split"]["seconds"],
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
