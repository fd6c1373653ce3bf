"""Print what preflight plans for the seed's base models (shapes from configs, no weights), as the README shows it.

    python scripts/sizes.py                        # the cluster's defaults: batch 16 x max-seq-len 512
    python scripts/sizes.py --batch-size 8 --max-seq-len 256
    python scripts/sizes.py --transfers Llama-3.2-3B   # bytes moved per run, QLoRA on the GPU pool

The shapes are the seed list's (`steps/sizing/seeds.py`: SEED_BASES, which the tests check too); the arithmetic is
`steps/sizing/`. Needs transformers and torch (the parameters are counted on the meta device), not pytest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steps import sizing
from steps.gguf.quants import LADDER
from steps.sizing.seeds import SEED_BASES, largest_pi_base, shape


def plan(name: str, k: sizing.Knobs) -> sizing.Plan:
    return sizing.plan_for(shape(name), k, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--precision", choices=sizing.PRECISIONS, default="auto", help="train's CPU precision")
    parser.add_argument("--transfers", metavar="BASE", choices=sorted(SEED_BASES), help="print bytes moved instead")
    args = parser.parse_args(argv)

    def k(backend: str, qlora: bool = False) -> sizing.Knobs:
        return sizing.Knobs(backend, qlora, args.max_seq_len, args.batch_size, 16, LADDER, args.precision)

    if args.transfers:
        print(sizing.transfer_table(plan(args.transfers, k("gpu", qlora=True)), optimiser_steps=18))
        return 0
    groups = "/".join(g.name for g in sizing.RAY_NODE_GROUPS)
    print(f"| base | train-cpu (= a Ray worker) | gpu bf16 card | gpu QLoRA card | convert-gguf | evaluate | "
          f"Ray workers per pod ({groups}) x threads, precision |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in SEED_BASES:
        cpu, bf16, nf4 = plan(name, k("cpu")), plan(name, k("gpu")), plan(name, k("gpu", qlora=True))
        ray = plan(name, k("ray"))

        def card(p: sizing.Plan) -> str:
            need = p.steps["train-gpu"].gpu_memory_gib
            return f"{need:.1f}" + ("" if p.gpu_card else " (no card)")

        per_pod = "/".join(str(g.workers_per_pod) for g in ray.ray)
        workers = f"{per_pod} x {ray.ray_threads} threads, {ray.ray_precision}"
        print(
            f"| {name} | {cpu.steps['train-cpu'].memory_gib:.1f} | {card(bf16)} | {card(nf4)} | "
            f"{cpu.steps['convert-gguf'].memory_gib:.1f} | {cpu.steps['evaluate'].memory_gib:.1f} | {workers} |"
        )
    pi = next(g for g in sizing.RAY_NODE_GROUPS if g.name == "pi")
    largest = largest_pi_base(k("ray"))
    if largest:
        print(f"\nThe largest of these bases a Pi ({pi.memory_gib:g} GiB pod) holds a worker for: {largest}.")
    else:
        smallest = min(SEED_BASES, key=lambda n: shape(n).parameters)
        [note] = [n for n in sizing.ray_notes(plan(smallest, k("ray"))) if n.startswith(f"the {pi.name} group")]
        print(f"\nA Pi ({pi.memory_gib:g} GiB pod) holds a worker for none of these bases at these settings: preflight "
              f"gives the {pi.name} group no replicas and says so; for {smallest}: {note}.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
