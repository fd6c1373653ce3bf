"""Benchmark: the embedded pipeline (`dvc repro` over dvc.yaml) at a baseline revision ('now') and at this checkout's
HEAD ('after'), one after the other in one run, each on a fresh clone with cold caches, as a new user's first run.

    python -m benchmarks.pipeline_speed --baseline c367d71
    python -m benchmarks.pipeline_speed --baseline c367d71 --repeats 2 --keep /tmp/pipeline-speed

Each side is a `git clone --shared` of this repository checked out at its revision, with this checkout's `.venv`
(the same packages and llama.cpp build on both sides: what is compared is the code), the base model folder and
llama.cpp's converter (`.cache/models`, `.cache/llama.cpp`) linked in; everything else starts empty: the MLflow
store, the base-conversion cache and the generation cache, so no step reuses what the other side or an earlier
round made. Sides alternate (now, after, now, after, …) so machine noise hits both; per step, the median of
`dvc repro --single-item <stage>`'s wall time (imports and DVC's own bookkeeping included: what a user waits for) and
of the step's own `wall_seconds` (its result.json, from entering `run`), and the ratio now/after. Each stage's output
is written to `<keep>/<side>-<round>/logs/<stage>.log`; the decision each side reached is printed, so a faster side
that decided otherwise is visible. Uncommitted changes are not measured: commit first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
LINKED = (".cache/models", ".cache/llama.cpp")


def checkout(rev: str, dest: Path) -> str:
    """A clone of this repository at `rev` in `dest`, with the shared environment linked in; returns the commit."""
    subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(dest)], check=True)
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True)
    sha = commit.stdout.strip()
    subprocess.run(["git", "checkout", "--quiet", "--detach", sha], cwd=dest, check=True)
    (dest / ".cache").mkdir(exist_ok=True)
    for linked in LINKED:
        (dest / linked).symlink_to(ROOT / linked, target_is_directory=True)
    (dest / ".cache/mlflow").mkdir()
    return sha


def stages(tree: Path) -> dict[str, Path]:
    """`tree`'s dvc.yaml stages in file order (each depends only on earlier ones), each with its output folder."""
    found = {}
    for name, stage in yaml.safe_load((tree / "dvc.yaml").read_text())["stages"].items():
        output = stage["outs"][0]
        found[name] = tree / (next(iter(output)) if isinstance(output, dict) else output)
    return found


def run_pipeline(tree: Path, label: str) -> dict[str, Any]:
    """`dvc repro` stage by stage in `tree`; per stage the wall time of the command and the step's own wall_seconds."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "DVC_NO_ANALYTICS": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": f"{ROOT / '.venv/bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(ROOT / ".venv"),
    }
    logs = tree / "logs"
    logs.mkdir()
    wall: dict[str, float] = {}
    own: dict[str, float] = {}
    for stage, output in stages(tree).items():
        start = time.perf_counter()
        with (logs / f"{stage}.log").open("w") as log:
            done = subprocess.run(
                ["dvc", "repro", "--single-item", stage], cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        wall[stage] = round(time.perf_counter() - start, 1)
        if done.returncode != 0:
            raise SystemExit(f"{label}: stage {stage} failed (exit {done.returncode}); see {logs / stage}.log")
        result = output / "result.json"
        if result.is_file():
            own[stage] = round(json.loads(result.read_text()).get("wall_seconds", float("nan")), 1)
        print(f"  {label}: {stage} {wall[stage]:.1f} s", flush=True)  # as each ends: a cut-short run still reports
    decision = json.loads((tree / "out/evaluation/result.json").read_text())["decision"]
    return {"wall": wall, "own": own, "total": round(sum(wall.values()), 1), "decision": decision}


def summarise(runs: dict[str, list[dict[str, Any]]], commits: dict[str, str], repeats: int) -> dict[str, Any]:
    """Per stage and for the whole pipeline, each side's median wall time (and the step's own), and now/after."""
    names = list(dict.fromkeys(s for side in runs.values() for r in side for s in r["wall"]))

    def median(side: str, key: str, stage: str | None = None) -> float | None:
        values = [r[key] if stage is None else r[key].get(stage) for r in runs[side]]
        values = [v for v in values if v is not None]
        return round(statistics.median(values), 1) if values else None

    table = []
    for stage in [*names, None]:
        key = "wall" if stage else "total"
        now, after = median("now", key, stage), median("after", key, stage)
        table.append({
            "stage": stage or "pipeline",
            "now_s": now,
            "after_s": after,
            "now_over_after": round(now / after, 2) if now and after else None,
            "now_step_s": median("now", "own", stage) if stage else None,
            "after_step_s": median("after", "own", stage) if stage else None,
        })  # fmt: skip
    return {
        "commits": commits,
        "repeats": repeats,
        "decisions": {side: [r["decision"] for r in rs] for side, rs in runs.items()},
        "table": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git rev measured as 'now'")
    parser.add_argument("--after", default="HEAD", help="git rev measured as 'after' (default: HEAD)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds per side (a round is ~15 min on 2 cores)")
    parser.add_argument("--keep", type=Path, help="folder for the clones and logs (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    missing = [p for p in (".venv/bin/dvc", *LINKED) if not (ROOT / p).exists()]
    if missing:
        raise SystemExit(f"run scripts/setup.sh first: {', '.join(missing)} missing")

    with tempfile.TemporaryDirectory(prefix="pipeline-speed-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        runs: dict[str, list[dict[str, Any]]] = {"now": [], "after": []}
        commits = {}
        for i in range(args.repeats):
            for side, rev in (("now", args.baseline), ("after", args.after)):
                tree = work / f"{side}-{i}"
                commits[side] = checkout(rev, tree)
                runs[side].append(run_pipeline(tree, f"{side} ({rev}) round {i + 1}"))

    summary = summarise(runs, commits, args.repeats)
    table = summary["table"]
    print(f"\n{'stage':<16}{'now s':>9}{'after s':>9}{'now/after':>11}   (step's own wall_seconds: now, after)")
    for row in table:
        fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        own = f"   ({fmt(row['now_step_s'])}, {fmt(row['after_step_s'])})" if row["stage"] != "pipeline" else ""
        ratio = "-" if row["now_over_after"] is None else f"{row['now_over_after']:.2f}x"
        print(f"{row['stage']:<16}{fmt(row['now_s']):>9}{fmt(row['after_s']):>9}{ratio:>11}{own}")
    print(f"decisions: {summary['decisions']}; commits: {commits}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(main())
