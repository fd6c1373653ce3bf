"""Two evaluations of the same pipeline side by side: did the gate decide the same, check by check, and how many
answers moved? For re-runs that should not change the verdict (another thread count, another CPU):

    scripts/run_local.sh && cp -r out/evaluation /tmp/evaluation-default
    scripts/run_local.sh -S threads=1
    python scripts/compare_decisions.py /tmp/evaluation-default out/evaluation

Each argument is an evaluation folder (`decision.json`, `generations.jsonl`). Exit status 0 when every check has the
same verdict in both, 1 when one differs (a flip is real only where that check's interval sits near its margin).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def load(folder: Path) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """The folder's decision and its answers by (contender, case id)."""
    decision = json.loads((folder / "decision.json").read_text())
    answers = {}
    generations = folder / "generations.jsonl"
    if generations.is_file():
        for line in generations.read_text().splitlines():
            row = json.loads(line)
            answers[(row["model"], row["id"])] = row["text"]
    return decision, answers


def figures(check: dict[str, Any]) -> str:
    """The numbers a check was decided on, short: the gain and its interval, or per rival the worse/better cases, the
    non-inferiority p-value and the comparison's outcome."""
    if "gain" in check:
        return f"gain {check['gain']:+.4f} [{check['lower']:+.4f}, {check['upper']:+.4f}]"
    parts = []
    if "candidate" in check:
        parts.append(f"cand {check['candidate']:.0%}")
    for c in check.get("comparisons", []):
        parts.append(f"{c['rival']}: {c['worse_cases']}w/{c['better_cases']}b p {c['p_value']:.3g} {c['outcome']}")
    return "; ".join(parts)


def compare(a: Path, b: Path) -> tuple[list[str], list[str]]:
    """Printable lines, and the checks whose verdicts differ."""
    (da, ga), (db, gb) = load(a), load(b)
    checks_a = {c["check"]: c for c in da["checks"]}
    checks_b = {c["check"]: c for c in db["checks"]}
    verdict = {True: "PASS", False: "FAIL", None: "-"}
    lines = [f"gate: {verdict[da['passed']]} ({a}) vs {verdict[db['passed']]} ({b})"]
    flipped = []
    width = max(len(n) for n in [*checks_a, *checks_b])
    for name in [*checks_a, *(n for n in checks_b if n not in checks_a)]:
        ca, cb = checks_a.get(name), checks_b.get(name)
        pa, pb = (verdict[c["passed"]] if c else "-" for c in (ca, cb))
        if pa != pb:
            flipped.append(name)
        mark = "  " if pa == pb else "!!"
        fa, fb = (figures(c) if c else "-" for c in (ca, cb))
        lines.append(f"{mark} {name:<{width}}  {pa:<4} {pb:<4}  {fa}  |  {fb}")
    for model in sorted({m for m, _ in ga} | {m for m, _ in gb}):
        ids = sorted({i for m, i in ga if m == model} & {i for m, i in gb if m == model})
        moved = sum(ga[(model, i)] != gb[(model, i)] for i in ids)
        lines.append(f"answers of {model}: {moved} of {len(ids)} differ")
    return lines, (["gate"] if da["passed"] != db["passed"] else []) + flipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="an evaluation folder (decision.json, generations.jsonl)")
    parser.add_argument("second", type=Path, help="another evaluation folder")
    args = parser.parse_args(argv)
    for folder in (args.first, args.second):
        if not (folder / "decision.json").is_file():
            print(f"{folder}: no decision.json here; pass an evaluation folder (out/evaluation)", file=sys.stderr)
            return 2
    lines, flipped = compare(args.first, args.second)
    print("\n".join(lines))
    if flipped:
        print(f"verdicts differ: {', '.join(flipped)}")
        return 1
    print("same verdict on every check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
