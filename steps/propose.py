"""propose: set the `challenger` alias on the registered version iff evaluate's gate passed against today's champion.

    python -m steps.propose --registration out/register --evaluation out/evaluate \
        --tracking-uri sqlite:///.cache/mlflow/mlflow.db --out out/propose

Whether the candidate beats the base and the champion is decided in one place, evaluate's `gate` (the paired bootstrap
for ROUGE-L and the Holm-corrected paired exact tests with margins of its safety gate); this step only acts on that
decision (`decision.json`), and only when it is evaluate's own (signed: `--verify-key`, steps/core/verdict.py) and about
this version (the candidate it judged hashes to the version's `gguf.sha256`, and the version's `eval.decision`, which
register recorded from the verified decision, agrees) and from this run (`--run-id`, the workflow uid: another run's
decision and result.json replayed into the run's prefix are refused). It proposes when the gate passed and the champion
the gate compared against (`champion_version`, null when there was none) is still the registry's `champion`. When the
champion has moved since the evaluation (promoted, replaced or removed), or the evaluation ran without the registry's
champion, the decision is about another rival: not proposed, and the reasons say "re-evaluate".

When it proposes, it tags the version `challenger.since` (UTC, RFC 3339): promote's hold counts from it. A retry that
finds the alias already on this version keeps the first time.

Always tags the version with the outcome (`proposal`, `proposal.reasons`, `proposal.champion`), so the registry says
why a version was or was not proposed. Never touches `champion`: promotion happens at home after the online
comparison. Two proposals racing: the alias is one server-side write, so it always names one of them — the one
written last wins; `proposal` tags say each was proposed, the alias says which holds the title. (MLflow's SQL store
can fail the first of two simultaneous writes of one alias or tag; `registry.upsert` writes again.)
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.core import registry
from steps.core import verdict as verdicts
from steps.core.cli import parse_config, timed, write_result
from steps.core.io import atomic_dir, read_json
from steps.core.mlflow_client import MISSING_TRACKING_URI, MlflowSettings, tracking_uri
from steps.core.registry import CHALLENGER, CHAMPION
from steps.core.registry import CHALLENGER_SINCE as SINCE_TAG

ALIAS = CHALLENGER


@dataclass
class ProposeConfig(MlflowSettings):
    registration: Path = field(metadata={"help": "folder written by register"})
    evaluation: Path = field(metadata={"help": "folder written by evaluate (decision.json)"})
    out: Path = field(metadata={"help": "folder to write the outcome into"})
    verify_key: str = field(
        default="",
        metadata={
            "help": "Ed25519 public key (PEM) evaluate's decision.json must be signed with (steps/core/verdict.py; on "
            "the cluster the Secret distillery-verdict-public); empty: unauthenticated, for a local run"
        },
    )
    run_id: str = field(
        default="",
        metadata={
            "help": "the run this proposal belongs to (on Argo the workflow uid): a decision made in another run is "
            "refused (one replayed into the run's prefix with its result.json); empty: a local run"
        },
    )


@dataclass
class ProposeResult:
    model_name: str
    model_version: str
    proposed: bool
    alias: str
    champion_version: str
    reasons: list[str]


def _rival(version: str | None) -> str:
    return f"champion {version}" if version is not None else f"no '{CHAMPION}'"


def verdict(decision: dict[str, Any], version: str, champion_version: str | None) -> tuple[bool, list[str]]:
    """Whether to propose `version` on evaluate's `decision` (decision.json) while the registry's champion is
    `champion_version` (None: none); the reasons: the decision's, and what this step added."""
    reasons = list(decision["reasons"])
    if "champion_version" not in decision:
        reasons.append("decision.json does not say which champion it was decided against (older evaluate); re-evaluate")
        return False, reasons
    evaluated = decision["champion_version"]
    if champion_version is not None and champion_version == version:
        reasons.append(f"version {version} is already the '{CHAMPION}'")
        return False, reasons
    if evaluated != champion_version:
        reasons.append(
            f"the evaluation compared against {_rival(evaluated)} ({decision['champion']}), but the registry has "
            f"{_rival(champion_version)} now; re-evaluate against it"
        )
        return False, reasons
    if decision["passed"]:
        reasons.append(
            f"beats champion {champion_version} (evaluate's gate, side by side)"
            if champion_version is not None
            else f"no '{CHAMPION}' yet: the gate against the base decides"
        )
    return bool(decision["passed"]), reasons


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@timed
def run(cfg: ProposeConfig) -> ProposeResult:
    with cfg.http_retries_set(ValueError, "propose"):
        return _propose(cfg)


def _propose(cfg: ProposeConfig) -> ProposeResult:
    from mlflow import MlflowClient

    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise ValueError(MISSING_TRACKING_URI)
    reg = read_json(Path(cfg.registration) / "result.json")
    where = f"{cfg.evaluation}/decision.json"
    decision = verdicts.checked(read_json(Path(where)), cfg.verify_key, where)
    verdicts.check_run(decision, cfg.run_id, where, required=bool(verdicts.verify_key_in_use(cfg.verify_key)))
    client = MlflowClient(tracking_uri=uri)
    name, version = reg["model_name"], str(reg["model_version"])
    # Both files lie in a prefix other roles write: the version register's result.json names is believed only when
    # the registry itself says it holds the bytes the signed decision judged, with that decision's outcome.
    tags = client.get_model_version(name, version).tags
    verdicts.check_version(decision, tags, f"models:/{name}/{version}", where)
    champion = registry.champion_version(client, name)
    champion_version = str(champion.version) if champion else None
    proposed, reasons = verdict(decision, version, champion_version)
    if proposed:
        already = str(client.get_registered_model(name).aliases.get(ALIAS)) == version
        if not (already and SINCE_TAG in client.get_model_version(name, version).tags):
            registry.upsert(client.set_model_version_tag, name, version, SINCE_TAG, utc_now())
        registry.upsert(client.set_registered_model_alias, name, ALIAS, version)
    tag = client.set_model_version_tag
    registry.upsert(tag, name, version, "proposal", ALIAS if proposed else "refused")
    registry.upsert(tag, name, version, "proposal.reasons", "; ".join(reasons))
    registry.upsert(tag, name, version, "proposal.champion", champion_version or "none")
    result = ProposeResult(name, version, proposed, ALIAS if proposed else "", champion_version or "", reasons)
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
