"""evaluate-fanout: the cluster run's list of evaluate shards, dealt into lanes, for the fan-out's withParam.

    python -m steps.evaluate.fanout --shards 8 --parallelism 4 --out /work/out/fanout

Writes `<out>/lanes.json`: a JSON list of `parallelism` lanes, each a list of {"shard": "i/k", "index": "i"}
(`steps.pipeline.shard_lanes`). On Argo (`workflows/distill.py`) the lanes run side by side and each lane runs its
shards one after the other, every shard a pod running `python -m steps.evaluate --shard i/k`; the gather pod
(`--gather`) then decides. So at most `parallelism` shards run at once, which Argo's `parallelism` field cannot be told
by a workflow parameter (argo-workflows#1780). Exit 1 naming the bad value and what is allowed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from steps.core.cli import refuse
from steps.pipeline import LANES_FILE, fanout_problems, shard_lanes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="k: shards, each answering every k-th document")
    parser.add_argument("--parallelism", required=True, help="shards running at once (lanes)")
    parser.add_argument("--out", type=Path, required=True, help=f"folder to write {LANES_FILE} into")
    args = parser.parse_args(argv)
    try:
        refuse(fanout_problems(args.shards, args.parallelism), "evaluate-fanout")
    except ValueError as e:
        print(f"evaluate-fanout: {e}", file=sys.stderr)
        return 1
    lanes = shard_lanes(int(args.shards), int(args.parallelism))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / LANES_FILE).write_text(json.dumps(lanes))
    print(f"evaluate-fanout: {args.shards} shards in {len(lanes)} lanes: {json.dumps(lanes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
