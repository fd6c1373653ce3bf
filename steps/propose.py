"""propose: set the `challenger` alias on the registered version only if the evaluation gate passed.

    python -m steps.propose --registration out/register --evaluation out/evaluate \
        --tracking-uri sqlite:///.cache/mlflow/mlflow.db --out out/propose

Always tags the version with the outcome (`proposal`, `proposal.reasons`), so the registry says why a version was or
was not proposed. Never touches `champion`: promotion happens at home after the online comparison.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from steps.common import atomic_dir, parse_config, read_json, write_result

ALIAS = "challenger"


@dataclass
class ProposeConfig:
    registration: Path = field(metadata={"help": "folder written by register"})
    evaluation: Path = field(metadata={"help": "folder written by evaluate (decision.json)"})
    out: Path = field(metadata={"help": "folder to write the outcome into"})
    tracking_uri: str = field(
        default="", metadata={"help": "MLflow tracking URI (empty: the MLFLOW_TRACKING_URI environment variable)"}
    )


@dataclass
class ProposeResult:
    model_name: str
    model_version: str
    proposed: bool
    alias: str
    reasons: list[str]


def run(cfg: ProposeConfig) -> ProposeResult:
    from mlflow import MlflowClient

    uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise ValueError("no MLflow tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI")
    reg = read_json(Path(cfg.registration) / "result.json")
    decision = read_json(Path(cfg.evaluation) / "decision.json")
    client = MlflowClient(tracking_uri=uri)
    name, version = reg["model_name"], reg["model_version"]
    passed = bool(decision["passed"])
    if passed:
        client.set_registered_model_alias(name, ALIAS, version)
    client.set_model_version_tag(name, version, "proposal", ALIAS if passed else "refused")
    client.set_model_version_tag(name, version, "proposal.reasons", "; ".join(decision["reasons"]))
    result = ProposeResult(name, version, passed, ALIAS if passed else "", decision["reasons"])
    with atomic_dir(cfg.out) as out:
        write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ProposeConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"propose: {e}", file=sys.stderr)
        return 1
    if result.proposed:
        print(f"{result.model_name} version {result.model_version} is now '{ALIAS}'")
    else:
        print(f"{result.model_name} version {result.model_version} NOT proposed:")
        for reason in result.reasons:
            print(f"  - {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
