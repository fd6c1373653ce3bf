"""Print what the embedded run decided and where to look: `python scripts/show_run.py` (after `dvc repro`)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from steps.pipeline import STAGES


def main() -> None:
    params = yaml.safe_load(Path("params.yaml").read_text())
    evaluation = json.loads(Path("out/evaluation/result.json").read_text())
    proposal = json.loads(Path("out/proposal/result.json").read_text())
    print()
    print(f"decision: {evaluation['decision'].upper()}")
    for reason in evaluation["reasons"]:
        print(f"  - {reason}")
    status = "proposed as 'challenger'" if proposal["proposed"] else "registered, not proposed"
    print(f"model: {proposal['model_name']} version {proposal['model_version']} ({status})")
    trained = json.loads(Path("out/adapter/result.json").read_text())
    resumed = f", resumed at step {trained['resumed_from_step']}" if trained.get("resumed_from_step") else ""
    speed = f"{trained['steps']} steps, {trained['tokens_per_second']:.0f} tok/s{resumed}"
    print(f"trained on: {trained['device']} ({speed})")
    print("report: out/evaluation/report.md   parity: out/gguf/parity.json   loss curve: out/adapter/loss.png")
    print(f"look at it: mlflow ui --backend-store-uri {params['tracking-uri']}")
    times = []
    for stage in STAGES:
        result = Path("out") / stage.output / "result.json"
        if result.is_file() and "wall_seconds" in (data := json.loads(result.read_text())):
            times.append(f"{stage.name} {data['wall_seconds']:.0f}s")
    print("step wall times (last run of each): " + ", ".join(times))


if __name__ == "__main__":
    main()
