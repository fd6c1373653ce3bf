"""Print what preflight plans for the seed's base models (shapes from configs, no weights), as the README shows it.

    python scripts/sizes.py                        # the cluster's defaults: batch 16 x max-seq-len 512
    python scripts/sizes.py --batch-size 8 --max-seq-len 256
    python scripts/sizes.py --transfers Llama-3.2-3B   # bytes moved per run, QLoRA on the GPU pool

The shapes are the ones the tests check (`tests/test_sizing.py: SEED_BASES`); the arithmetic is `steps/sizing/`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steps import sizing
from tests.test_sizing import SEED_BASES, knobs, largest_pi_base, plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--precision", choices=sizing.PRECISIONS, default="auto", help="train's CPU precision")
    parser.add_argument("--transfers", metavar="BASE", choices=sorted(SEED_BASES), help="print bytes moved instead")
    args = parser.parse_args(argv)

    def k(backend: str, qlora: bool = False) -> sizing.Knobs:
        settings = {"batch_size": args.batch_size, "max_seq_len": args.max_seq_len, "precision": args.precision}
        return replace(knobs(backend, qlora=qlora), **settings)

    if args.transfers:
        print(sizing.transfer_table(plan(args.transfers, k("gpu", qlora=True)), optimiser_steps=18))
        return 0
    groups = "/".join(g.name for g in sizing.RAY_NODE_GROUPS)
    print(f"| base | train-cpu (= a Ray worker) | gpu bf16 card | gpu QLoRA card | convert-gguf | evaluate | "
          f"Ray workers per pod ({groups}) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in SEED_BASES:
        cpu, bf16, nf4 = plan(name, k("cpu")), plan(name, k("gpu")), plan(name, k("gpu", qlora=True))
        ray = plan(name, k("ray"))

        def card(p: sizing.Plan) -> str:
            need = p.steps["train-gpu"].gpu_memory_gib
            return f"{need:.1f}" + ("" if p.gpu_card else " (no card)")

        workers = "/".join(str(g.workers_per_pod) for g in ray.ray)
        print(
            f"| {name} | {cpu.steps['train-cpu'].memory_gib:.1f} | {card(bf16)} | {card(nf4)} | "
            f"{cpu.steps['convert-gguf'].memory_gib:.1f} | {cpu.steps['evaluate'].memory_gib:.1f} | {workers} |"
        )
    print(f"\nThe largest of these bases a Pi (3 GiB pod) holds a worker for: {largest_pi_base(k('ray')) or 'none'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
