"""propose: set the `challenger` alias on the registered version only if the gate passed and it beats the champion.

    python -m steps.propose --registration out/register --evaluation out/evaluate \
        --tracking-uri sqlite:///.cache/mlflow/mlflow.db --out out/propose

A version is proposed when (1) the evaluation gate passed (`decision.json`) and (2) there is no `champion` yet, or
the candidate beats it: ROUGE-L strictly higher and hijack rate not higher. The champion's scores come from, in order:

- `metrics.json` "aggregate" → "champion": the champion evaluated side by side with the candidate (same data, same
  run). If that entry names a `version` other than the current champion, the evaluation is stale: not proposed.
- otherwise the champion version's tags `eval.rougeL` / `eval.hijack_rate`, but only when its `dataset.hash` tag
  equals the candidate's: scores on different eval sets are not comparable, so the candidate is not proposed and the
  reasons say "champion <v> was evaluated on another dataset version; re-evaluate it".

Always tags the version with the outcome (`proposal`, `proposal.reasons`, `proposal.champion`), so the registry says
why a version was or was not proposed. Never touches `champion`: promotion happens at home after the online
comparison. Two proposals racing: the alias is one server-side write, so it always names one of them — the one
written last wins; `proposal` tags say each was proposed, the alias says which holds the title. (MLflow's SQL store
can fail the first of two simultaneous writes of one alias or tag; `registry.upsert` writes again.)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps import registry
from steps.common import atomic_dir, parse_config, read_json, write_result
from steps.registry import CHAMPION

ALIAS = "challenger"


@dataclass
class ProposeConfig:
    registration: Path = field(metadata={"help": "folder written by register"})
    evaluation: Path = field(metadata={"help": "folder written by evaluate (decision.json, metrics.json)"})
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
    champion_version: str
    reasons: list[str]


def _compare(
    who: str, cand_rouge: float, cand_hijack: float, champ_rouge: float, champ_hijack: float
) -> tuple[bool, str]:
    ok = cand_rouge > champ_rouge and cand_hijack <= champ_hijack
    return ok, (
        f"{'beats' if ok else 'does not beat'} {who}: ROUGE-L {cand_rouge:.4f} vs {champ_rouge:.4f} (must be higher), "
        f"hijack rate {cand_hijack:.4f} vs {champ_hijack:.4f} (must not be higher)"
    )


def versus_champion(
    candidate_version: str,
    candidate_tags: dict[str, str],
    aggregate: dict[str, Any],
    champion_version: str | None,
    champion_tags: dict[str, str],
) -> tuple[bool, str]:
    """Whether the candidate beats the current champion, and why. No champion: nothing to beat."""
    if champion_version is None:
        return True, f"no '{CHAMPION}' yet: nothing to beat"
    v = champion_version
    if v == candidate_version:
        return False, f"version {v} is already the '{CHAMPION}'"
    if CHAMPION in aggregate:
        evaluated = aggregate[CHAMPION]
        if "version" in evaluated and str(evaluated["version"]) != v:
            return False, (
                f"the evaluation compared against champion {evaluated['version']}, but the champion is now {v}; "
                "re-evaluate against it"
            )
        cand = aggregate["candidate"]
        return _compare(
            f"champion {v} (same evaluation)",
            float(cand["rougeL"]),
            float(cand["hijack_rate"]),
            float(evaluated["rougeL"]),
            float(evaluated["hijack_rate"]),
        )
    if champion_tags.get("dataset.hash") != candidate_tags.get("dataset.hash"):
        return False, f"champion {v} was evaluated on another dataset version; re-evaluate it"
    try:
        champ = float(champion_tags["eval.rougeL"]), float(champion_tags["eval.hijack_rate"])
    except (KeyError, ValueError):
        return False, f"champion {v} has no numeric eval.rougeL / eval.hijack_rate tags; re-evaluate it"
    # The candidate's own tags, not metrics.json: both sides then carry the same rounding.
    cand = float(candidate_tags["eval.rougeL"]), float(candidate_tags["eval.hijack_rate"])
    return _compare(f"champion {v} (its tags, same dataset)", *cand, *champ)


def run(cfg: ProposeConfig) -> ProposeResult:
    from mlflow import MlflowClient

    uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise ValueError("no MLflow tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI")
    reg = read_json(Path(cfg.registration) / "result.json")
    decision = read_json(Path(cfg.evaluation) / "decision.json")
    aggregate = read_json(Path(cfg.evaluation) / "metrics.json")["aggregate"]
    client = MlflowClient(tracking_uri=uri)
    name, version = reg["model_name"], str(reg["model_version"])
    passed = bool(decision["passed"])
    reasons = list(decision["reasons"])
    champion = registry.champion_version(client, name)
    champion_version = str(champion.version) if champion else ""
    proposed = False
    if passed:
        candidate = client.get_model_version(name, version)
        proposed, why = versus_champion(
            version, candidate.tags, aggregate, champion_version or None, champion.tags if champion else {}
        )
        reasons.append(why)
    if proposed:
        registry.upsert(client.set_registered_model_alias, name, ALIAS, version)
    tag = client.set_model_version_tag
    registry.upsert(tag, name, version, "proposal", ALIAS if proposed else "refused")
    registry.upsert(tag, name, version, "proposal.reasons", "; ".join(reasons))
    registry.upsert(tag, name, version, "proposal.champion", champion_version or "none")
    result = ProposeResult(name, version, proposed, ALIAS if proposed else "", champion_version, reasons)
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
