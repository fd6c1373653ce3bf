"""Benchmark: evaluate's two decoding paths on shards of the full adversarial suite — each one's cost per 100 cases
per contender, the cluster's fan-out time for the whole suite, and whether the gate's verdict depends on the path.

    python -m benchmarks.evaluate_paths --gguf out/gguf --shard 0/16 --contender candidate --path batched
    python -m benchmarks.evaluate_paths --gguf out/gguf --shard 0/16 --contender candidate --path served
    python -m benchmarks.evaluate_paths --gguf out/gguf --shard 0/16 --contender base --path batched
    python -m benchmarks.evaluate_paths --gguf out/gguf --shard 0/16 --contender base --path served
    python -m benchmarks.evaluate_paths --report
    python -m benchmarks.evaluate_paths --gguf out/gguf --every-shard 16    # all of those runs, resuming, then --report

One run generates one contender's answers (convert-gguf's served base or candidate GGUF, named in its result.json) to
one shard of `--suite` (every k-th case from the i-th, as `evaluate --shard i/k` picks documents) by one path —
`batched`: `generation.generate_all`, PARALLEL documents per llama.cpp decode, what evaluate runs; `served`:
`generation.generate_sequential`, one request at a time through `create_chat_completion`, as the server answers —
and writes its answers and wall time (model load included) to `--out`, so that each run stays short and runs add up.

`--report` reads every run in `--out` and prints, over the cases both paths answered for both contenders:
- seconds per 100 cases per contender and path, and the projected wall time of the full suite's evaluation on the
  cluster with the fan-out's defaults (steps/pipeline.py: shards, parallelism): ceil(shards / parallelism) shards in a
  row per lane, each shard a k-th of the suite and of the eval split, the candidate generated (the base from the
  generation cache after the first run on it; the first run generates it too), at this machine's rate per document;
- the agreement of the two paths: identical answers, identical judge verdicts (steps/adversarial/), per family the
  pass rates by each path and their difference, and the gate's safety verdict (steps/evaluate/gate.py, non-inferiority
  per family against the base) computed on each path's answers;
- what share of the suite that covers.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("batched", "served")
CONTENDERS = ("base", "candidate")


def _rows(suite: Path) -> list[dict]:
    from steps.core.dataset import parse_split

    numbered, problems = parse_split(suite.read_bytes(), str(suite), "adversarial")
    if problems:
        raise SystemExit("\n".join(problems))
    return [row for _, row in numbered]


def run_file(contender: str, path: str, i: int, k: int) -> str:
    """The name of one run's file in --out: one per contender, path and shard, so `--every-shard` can skip it."""
    return f"{contender}-{path}-{i}-{k}.json"


def generate(args: argparse.Namespace) -> None:
    from steps.core.io import read_json, write_json
    from steps.evaluate import EvaluateConfig, generation, llama_internals
    from steps.evaluate.config import shard_of, thread_count

    rows = _rows(args.suite)
    spec = shard_of(args.shard)
    if spec is None:
        raise SystemExit(f"--shard {args.shard!r}: write i/k with 0 <= i < k")
    i, k = spec
    picked = list(range(i, len(rows), k))
    gguf = args.gguf / read_json(args.gguf / "result.json")[f"{args.contender}_gguf"]
    cfg = EvaluateConfig(dataset=args.gguf, gguf=args.gguf, out=args.out, threads=args.threads)
    run = {"batched": generation.generate_all, "served": generation.generate_sequential}[args.path]
    print(f"{args.contender} {args.path}: {len(picked)} of {len(rows)} cases (shard {args.shard}), "
          f"{thread_count(cfg)} threads; cpu {llama_internals.llama_cpu()}", flush=True)  # fmt: skip
    start = time.perf_counter()
    outputs, tok_s = run(gguf, [rows[j]["document"] for j in picked], cfg, generation.progress_line(args.contender))
    wall = time.perf_counter() - start
    name = run_file(args.contender, args.path, i, k)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / name, {
        "contender": args.contender, "path": args.path, "shard": args.shard, "suite": str(args.suite),
        "gguf": gguf.name, "threads": thread_count(cfg), "cpu": llama_internals.llama_cpu(),
        "ids": [rows[j]["id"] for j in picked], "outputs": outputs, "seconds": wall, "tokens_per_second": tok_s,
    })  # fmt: skip
    print(f"{len(picked)} cases in {wall:.1f} s ({100 * wall / len(picked):.0f} s per 100 cases): {args.out / name}")


def report(args: argparse.Namespace) -> None:
    from steps import pipeline
    from steps.evaluate import EvaluateConfig, gate
    from steps.evaluate.scoring import adversarial

    rows = {r["id"]: r for r in _rows(args.suite)}
    runs: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)  # (contender, path) -> id -> output
    seconds: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for file in sorted(args.out.glob("*.json")):
        run = json.loads(file.read_text())
        key = (run["contender"], run["path"])
        runs[key].update(zip(run["ids"], run["outputs"], strict=True))
        seconds[key].append((run["seconds"], len(run["ids"])))
    if not runs:
        raise SystemExit(f"no runs in {args.out}: run the generating commands first (this docstring)")
    common = set(rows)
    for key in [(c, p) for c in CONTENDERS for p in PATHS]:
        common &= set(runs[key])
    ids = [i for i in rows if i in common]  # suite order
    print(f"cases answered by both paths for both contenders: {len(ids)} of {len(rows)} ({len(ids) / len(rows):.1%} "
          "of the suite)\n")  # fmt: skip

    print("| contender | path | cases timed | s per 100 cases |")
    print("|---|---|---|---|")
    per_doc = {}
    for key in sorted(seconds):
        s, n = sum(x for x, _ in seconds[key]), sum(n for _, n in seconds[key])
        per_doc[key] = s / n
        print(f"| {key[0]} | {key[1]} | {n} | {100 * s / n:.0f} |")
    defaults = {p.name: int(p.cluster or 1) for p in pipeline.EVALUATE_FANOUT_PARAMS}
    k, par = defaults[pipeline.EVALUATE_SHARDS_PARAM], defaults[pipeline.EVALUATE_PARALLELISM_PARAM]
    documents = len(rows) + args.eval_documents
    in_a_row = math.ceil(k / par) * math.ceil(documents / k)
    for contender_set, label in ((("candidate",), "a run on a cached base"), (CONTENDERS, "the first run on a base")):
        if all((c, "batched") in per_doc for c in contender_set):
            secs = in_a_row * sum(per_doc[(c, "batched")] for c in contender_set)
            print(f"\nprojected, full suite ({documents} documents) on the cluster, {k} shards, {par} at once, "
                  f"{label} ({' + '.join(contender_set)}, batched, at this machine's rate per document): "
                  f"{secs / 60:.0f} min of generation per lane (+ pod start and model load per shard)")  # fmt: skip
    if not ids:
        return

    judged = {}
    for path in PATHS:
        judged[path] = {c: adversarial([runs[(c, path)][i] for i in ids], [rows[i] for i in ids]) for c in CONTENDERS}
    print("\n| contender | identical answers | same verdict |")
    print("|---|---|---|")
    for c in CONTENDERS:
        same = sum(runs[(c, "batched")][i]["text"] == runs[(c, "served")][i]["text"] for i in ids)
        verdicts = sum(a["passed"] == b["passed"] for a, b in zip(judged["batched"][c], judged["served"][c],
                                                                   strict=True))  # fmt: skip
        print(
            f"| {c} | {same}/{len(ids)} ({same / len(ids):.1%}) | {verdicts}/{len(ids)} ({verdicts / len(ids):.1%}) |"
        )

    print("\n| family | cases | candidate batched | candidate served | difference | base batched | base served | "
          "difference |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    largest = 0.0
    for family in sorted({rows[i]["family"] for i in ids}):
        at = [j for j, i in enumerate(ids) if rows[i]["family"] == family]
        rates = {(c, p): sum(judged[p][c][j]["passed"] for j in at) / len(at) for c in CONTENDERS for p in PATHS}
        diffs = [rates[(c, "batched")] - rates[(c, "served")] for c in ("candidate", "base")]
        largest = max(largest, *map(abs, diffs))
        print(f"| {family} | {len(at)} | {rates[('candidate', 'batched')]:.0%} | {rates[('candidate', 'served')]:.0%} "
              f"| {diffs[0]:+.0%} | {rates[('base', 'batched')]:.0%} | {rates[('base', 'served')]:.0%} "
              f"| {diffs[1]:+.0%} |")  # fmt: skip
    cfg = EvaluateConfig(dataset=args.out, gguf=args.out, out=args.out)
    print(f"\nlargest per-family difference between the paths: {largest:.0%} (the margin δ: "
          f"{cfg.max_attack_regression:.0%})")  # fmt: skip
    checks = {path: gate.safety_checks(judged[path], cfg) for path in PATHS}
    for path in PATHS:
        summary = checks[path][-1]
        print(f"safety verdict on the {path} answers: {summary['verdict'].upper()} — {summary['reason']}")
    outcomes = {path: {c["check"]: c["verdict"] for c in checks[path][:-1]} for path in PATHS}
    moved = [
        f"{name.removeprefix('adversarial_')}: {verdict} batched, {outcomes['served'][name]} served"
        for name, verdict in outcomes["batched"].items()
        if verdict != outcomes["served"][name]
    ]
    print(f"family verdicts that differ between the paths: {len(moved)} of {len(outcomes['batched'])}")
    for line in moved:
        print(f"  - {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=ROOT / "out/gguf", help="convert-gguf's folder")
    parser.add_argument("--suite", type=Path, default=ROOT / "data/adversarial/suite.jsonl", help="the full suite")
    parser.add_argument("--shard", default="0/16", help="i/k: every k-th case from the i-th")
    parser.add_argument("--contender", choices=CONTENDERS, default="candidate")
    parser.add_argument("--path", choices=PATHS, default="batched")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: all cores, as evaluate)")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache/benchmarks/evaluate_paths", help="runs folder")
    parser.add_argument("--eval-documents", type=int, default=24, help="the eval split's documents (projection)")
    parser.add_argument("--report", action="store_true", help="summarise the runs in --out instead of generating")
    parser.add_argument("--every-shard", type=int, default=0, metavar="K",
                        help="run every shard i/K for both contenders and paths, one run at a time, skipping the runs "
                             "already in --out (so an interrupted sweep resumes)")  # fmt: skip
    args = parser.parse_args()
    if args.report:
        report(args)
    elif args.every_shard:
        sweep(args)
    else:
        generate(args)


def sweep(args: argparse.Namespace) -> None:
    """Every shard of `--every-shard K`, each contender and path: the runs `generate` would make one by one."""
    runs = [(i, c, p) for i in range(args.every_shard) for c in CONTENDERS for p in PATHS]
    for n, (i, contender, path) in enumerate(runs, 1):
        if (args.out / run_file(contender, path, i, args.every_shard)).exists():
            continue
        print(f"[run {n}/{len(runs)}]", flush=True)
        generate(argparse.Namespace(**{**vars(args), "shard": f"{i}/{args.every_shard}", "contender": contender,
                                       "path": path}))  # fmt: skip


if __name__ == "__main__":
    main()
