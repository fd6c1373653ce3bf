"""promote: move `champion` to the `challenger` once it has held up online; or roll the last promotion back.

    python -m steps.promote --tracking-uri http://mlflow:5000 --model-name distillery-summariser --out out/promote
    python -m steps.promote --action rollback --reason "summaries cut mid-sentence" --out out/rollback

The online counterpart of evaluate's gate: the challenger (set by propose) becomes champion only when all hold:

- hold: at least `--hold-days` (7) since it became challenger — its `challenger.since` tag, which propose writes
  (a challenger set by hand without one gets it from the first promote run that sees it: the hold starts there);
- samples: at least `--min-samples` online requests of the challenger, and as many of the champion since the
  challenger's hold began (the same days, the same traffic mix: the canary split);
- quality: its acceptance rate (accepted / requests, the `online.accepted` and `online.requests` series that
  steps/online_metrics.py writes) is non-inferior to the champion's over those days: the lower bound of the two-sided
  `--confidence` (95%) Newcombe hybrid-score interval (Newcombe 1998, method 10: from each rate's Wilson interval) of
  challenger minus champion is above −`--margin` (0.05: five points of acceptance). An interval, not a point
  estimate: a challenger measured on too little traffic has a wide interval and waits. (With about 80% acceptance
  and the default margin, an equal challenger needs some 1000 requests per version to pass most of the time.)
- safety: no `online.safety_incidents` recorded for the challenger, ever.

With no champion yet the quality comparison is skipped (nothing is served to compare with): hold, samples and safety
decide the first promotion.

Every decision, either way, is tagged with its figures: on the challenger `promotion.decision` (`promoted` or
`held`), `promotion.reasons`, `promotion.figures` (JSON) and `promotion.at`; on the champion the same as one JSON
tag, `promotion.defended.<challenger version>`. A promotion then moves `previous-champion` to the champion, `champion`
to the challenger and removes `challenger`, in that order, each write one server-side alias write (`registry.upsert`).
A second run finds no challenger: a no-op. Two runs at once both read champion A and challenger B and write the same
aliases; one that reads between the writes sees either the same pair (and writes the same) or champion == challenger
(and only removes `challenger`): never `previous-champion` = B. So the end state is one champion B and one
previous-champion A whatever the interleaving.

Rollback: `champion` back to `previous-champion`, the demoted version tagged `promotion.rolled_back` and the restored
one `promotion.restored` (JSON: when, from which version, why), then `previous-champion` removed: no version is left
to roll back to (the demoted one is not a candidate, and the one before the restored champion is not recorded), so
`champion` and `previous-champion` never name the same version. A second rollback finds the champion restored and no
`previous-champion` and does nothing; a run that reads between another's writes (`champion` already back, the alias
not yet removed) only removes it. The demoted version holds no alias, so it is not promoted again unless proposed
again.

`--now` (RFC 3339) replaces the clock, for tests and for re-deciding a past day. Writes `result.json` and `_outputs/`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from steps.core import outcomes as om
from steps.core import registry
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.gate_stats import newcombe_independent
from steps.core.io import atomic_dir, environment
from steps.core.mlflow_client import MISSING_TRACKING_URI, MlflowSettings, tracking_uri
from steps.core.registry import CHALLENGER, CHAMPION, MODEL_NAME
from steps.core.registry import CHALLENGER_SINCE as SINCE_TAG

PREVIOUS = "previous-champion"
DECISION_TAG = "promotion.decision"
REASONS_TAG = "promotion.reasons"
FIGURES_TAG = "promotion.figures"
AT_TAG = "promotion.at"
DEFENDED_TAG = "promotion.defended."  # + challenger version, on the champion
ROLLED_BACK_TAG = "promotion.rolled_back"
RESTORED_TAG = "promotion.restored"
ACTIONS = ("promote", "rollback")


class PromoteError(ValueError):
    """Bad configuration, or a registry state this step cannot act on; the message says what to do."""


@dataclass
class Online:
    """A version's online counts over some days."""

    requests: int = 0
    accepted: int = 0
    incidents: int = 0
    days: int = 0

    @property
    def rate(self) -> float | None:
        return self.accepted / self.requests if self.requests else None


@dataclass
class PromoteConfig(MlflowSettings):
    out: Path = field(metadata={"help": "folder to write result.json and the Argo output parameters into"})
    action: str = field(default="promote", metadata={"help": "promote (decide on the challenger) or rollback"})
    model_name: str = field(default=MODEL_NAME, metadata={"help": "registered model name in MLflow"})
    hold_days: float = field(default=7.0, metadata={"help": "days a challenger must have been challenger"})
    min_samples: int = field(
        default=300, metadata={"help": "online requests needed of the challenger, and of the champion in that time"}
    )
    margin: float = field(
        default=0.05,
        metadata={"help": "non-inferiority margin: acceptance may be at most this much lower (absolute, 0-1)"},
    )
    confidence: float = field(
        default=0.95, metadata={"help": "two-sided level of the interval on the acceptance difference"}
    )
    reason: str = field(default="", metadata={"help": "rollback: why (recorded on both versions)"})
    now: str = field(default="", metadata={"help": "the current time, RFC 3339 (empty: the clock)"})


@dataclass
class PromoteResult:
    model_name: str
    action: str
    changed: bool  # did this run move `champion`
    decision: str  # promoted, held, no-challenger, already-promoted, rolled-back, already-rolled-back
    champion_version: str  # after this run
    challenger_version: str
    previous_champion_version: str
    reasons: list[str]
    figures: dict[str, Any]


def config_problems(cfg: PromoteConfig) -> list[str]:
    problems = cfg.http_problems()
    if cfg.action not in ACTIONS:
        problems.append(f"--action {cfg.action!r}: use one of {', '.join(ACTIONS)}")
    if not cfg.hold_days >= 0:
        problems.append(f"--hold-days {cfg.hold_days}: use 0 or more days")
    if cfg.min_samples < 1:
        problems.append(f"--min-samples {cfg.min_samples}: use at least 1")
    if not 0 <= cfg.margin < 1:
        problems.append(f"--margin {cfg.margin}: use an acceptance-rate difference in [0, 1)")
    if not 0.5 <= cfg.confidence < 1:
        problems.append(f"--confidence {cfg.confidence}: use a level in [0.5, 1), e.g. 0.95")
    if cfg.now:
        try:
            om.parse_time(cfg.now)
        except ValueError:
            problems.append(f"--now {cfg.now!r}: not an RFC 3339 time with a zone (2026-12-08T06:00:00Z)")
    return problems


def decide(
    challenger: Online, champion: Online | None, held_days: float, cfg: PromoteConfig
) -> tuple[bool, list[str], dict[str, Any]]:
    """Whether to promote on these figures; every reason (met or not); the figures themselves."""
    ok, reasons = True, []
    figures: dict[str, Any] = {
        "held_days": round(held_days, 3),
        "hold_days": cfg.hold_days,
        "min_samples": cfg.min_samples,
        "margin": cfg.margin,
        "confidence": cfg.confidence,
        "challenger": asdict(challenger) | {"rate": challenger.rate},
        "champion": None if champion is None else asdict(champion) | {"rate": champion.rate},
    }
    if held_days < cfg.hold_days:
        ok = False
        reasons.append(f"hold: {held_days:.2f} of {cfg.hold_days:g} days as challenger")
    else:
        reasons.append(f"hold: {held_days:.2f} days as challenger (≥ {cfg.hold_days:g})")
    short = [
        f"{who} has {o.requests}" for who, o in (("challenger", challenger), ("champion", champion)) if o is not None
    ]
    if challenger.requests < cfg.min_samples or (champion is not None and champion.requests < cfg.min_samples):
        ok = False
        reasons.append(f"samples: {', '.join(short)} online request(s) in the hold; each needs {cfg.min_samples}")
    else:
        reasons.append(f"samples: {', '.join(short)} online request(s) in the hold (≥ {cfg.min_samples})")
    if challenger.incidents:
        ok = False
        reasons.append(f"safety: {challenger.incidents} safety incident(s) recorded for the challenger")
    else:
        reasons.append("safety: no incident recorded for the challenger")
    if champion is None:
        reasons.append(f"quality: no '{CHAMPION}' to compare with")
    elif challenger.requests and champion.requests:
        low, high = newcombe_independent(
            challenger.accepted, challenger.requests, champion.accepted, champion.requests, cfg.confidence
        )
        figures["difference"] = challenger.rate - champion.rate  # type: ignore[operator]
        figures["interval"] = [low, high]
        text = (
            f"acceptance {challenger.rate:.3f} vs champion {champion.rate:.3f}: difference "
            f"{figures['difference']:+.3f}, {cfg.confidence:.0%} interval [{low:+.3f}, {high:+.3f}]"
        )
        if low > -cfg.margin:
            reasons.append(f"quality: {text} lies above −{cfg.margin:g}: non-inferior")
        else:
            ok = False
            reasons.append(f"quality: {text} reaches −{cfg.margin:g}: non-inferiority not shown")
    else:
        ok = False
        reasons.append("quality: no online requests to compare")
    return ok, reasons, figures


# --- reading and writing MLflow ------------------------------------------------------------------------------------


def online_counts(client: Any, version: Any, from_day: int) -> Online:
    """A version's counts over the days from `from_day` on (its online series; none: zeros)."""
    run_id = om.online_run_id(version)
    if run_id is None:
        return Online()
    requests = om.series(client, run_id, om.REQUESTS)
    accepted = om.series(client, run_id, om.ACCEPTED)
    incidents = om.series(client, run_id, om.INCIDENTS)
    days = [d for d in requests if d >= from_day]
    return Online(
        requests=int(sum(requests[d] for d in days)),
        accepted=int(sum(accepted.get(d, 0) for d in days)),
        incidents=int(sum(incidents[d] for d in incidents if d >= from_day)),
        days=len(days),
    )


def _aliases(client: Any, name: str) -> dict[str, str]:
    from mlflow.exceptions import MlflowException

    try:
        return {k: str(v) for k, v in client.get_registered_model(name).aliases.items()}
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise PromoteError(f"no registered model {name!r}: check --model-name") from e
        raise


def _tag(client: Any, name: str, version: str, key: str, value: str) -> None:
    registry.upsert(client.set_model_version_tag, name, version, key, value)


def _remove_alias(client: Any, name: str, alias: str, version: str) -> None:
    """Remove `alias` if it still names `version` (propose may have set a newer challenger meanwhile, a promotion a
    newer previous-champion)."""
    from mlflow.exceptions import MlflowException

    if _aliases(client, name).get(alias) != version:
        return
    try:
        client.delete_registered_model_alias(name, alias)
    except MlflowException as e:  # another run removed it first
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise


def _stamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def promote(client: Any, cfg: PromoteConfig, now: dt.datetime) -> PromoteResult:
    name = cfg.model_name
    aliases = _aliases(client, name)
    champ, chal = aliases.get(CHAMPION), aliases.get(CHALLENGER)

    def result(changed: bool, decision: str, reasons: list[str], figures: dict | None = None) -> PromoteResult:
        after = _aliases(client, name)
        return PromoteResult(
            name, "promote", changed, decision, after.get(CHAMPION, ""), chal or "", after.get(PREVIOUS, ""),
            reasons, figures or {},
        )  # fmt: skip

    if chal is None:
        return result(False, "no-challenger", [f"no '{CHALLENGER}' version of {name}: nothing to decide"])
    if chal == champ:  # an earlier run promoted it and stopped before removing `challenger`
        _remove_alias(client, name, CHALLENGER, chal)
        return result(False, "already-promoted", [f"version {chal} is already the '{CHAMPION}'"])

    version = client.get_model_version(name, chal)
    since_text = version.tags.get(SINCE_TAG)
    if since_text is None:
        since_text = _stamp(now)
        _tag(client, name, chal, SINCE_TAG, since_text)
    try:
        since = om.parse_time(since_text)
    except ValueError as e:
        raise PromoteError(
            f"version {chal}'s {SINCE_TAG} tag {since_text!r} is not an RFC 3339 time: set it to when it became "
            f"'{CHALLENGER}' (e.g. 2026-12-01T06:00:00Z)"
        ) from e
    held = (now - since).total_seconds() / 86_400
    from_day = om.day_number(since)
    challenger = online_counts(client, version, from_day)
    challenger.incidents = online_counts(client, version, -(10**6)).incidents  # ever, not only in the hold
    champion_version = client.get_model_version(name, champ) if champ else None
    champion = online_counts(client, champion_version, from_day) if champion_version else None
    ok, reasons, figures = decide(challenger, champion, held, cfg)
    figures |= {"challenger_version": chal, "champion_version": champ, "since": since_text, "at": _stamp(now)}
    decision = "promoted" if ok else "held"

    # The record first: a run that dies after it is repeated by the next (the aliases say what happened).
    record = json.dumps({"decision": decision, "reasons": reasons, "figures": figures}, sort_keys=True)
    for key, value in (
        (DECISION_TAG, decision),
        (REASONS_TAG, "; ".join(reasons)),
        (FIGURES_TAG, json.dumps(figures, sort_keys=True)),
        (AT_TAG, _stamp(now)),
    ):
        _tag(client, name, chal, key, value)
    if champ:
        _tag(client, name, champ, DEFENDED_TAG + chal, record)
    if not ok:
        return result(False, decision, reasons, figures)
    if champ:
        registry.upsert(client.set_registered_model_alias, name, PREVIOUS, champ)
    registry.upsert(client.set_registered_model_alias, name, CHAMPION, chal)
    _remove_alias(client, name, CHALLENGER, chal)
    return result(True, decision, reasons, figures)


def rollback(client: Any, cfg: PromoteConfig, now: dt.datetime) -> PromoteResult:
    name = cfg.model_name
    aliases = _aliases(client, name)
    champ, prev = aliases.get(CHAMPION), aliases.get(PREVIOUS)

    def result(changed: bool, decision: str, reasons: list[str]) -> PromoteResult:
        after = _aliases(client, name)
        return PromoteResult(
            name, "rollback", changed, decision, after.get(CHAMPION, ""), after.get(CHALLENGER, ""),
            after.get(PREVIOUS, ""), reasons, {},
        )  # fmt: skip

    if prev is None:
        if champ and RESTORED_TAG in client.get_model_version(name, champ).tags:
            return result(False, "already-rolled-back", [f"'{CHAMPION}' is version {champ}, restored by a rollback"])
        raise PromoteError(
            f"{name} has no '{PREVIOUS}': nothing to roll back to (set `{CHAMPION}` by hand: "
            f"MlflowClient().set_registered_model_alias({name!r}, {CHAMPION!r}, '<version>'))"
        )
    if prev == champ:  # another rollback moved `champion` and has not removed `previous-champion` yet
        _remove_alias(client, name, PREVIOUS, prev)
        return result(False, "already-rolled-back", [f"'{CHAMPION}' is already version {prev}, the '{PREVIOUS}'"])
    record = {"at": _stamp(now), "from": champ, "to": prev, "reason": cfg.reason}
    if champ:
        _tag(client, name, champ, ROLLED_BACK_TAG, json.dumps(record, sort_keys=True))
    _tag(client, name, prev, RESTORED_TAG, json.dumps(record, sort_keys=True))
    registry.upsert(client.set_registered_model_alias, name, CHAMPION, prev)
    _remove_alias(client, name, PREVIOUS, prev)
    why = f": {cfg.reason}" if cfg.reason else ""
    return result(True, "rolled-back", [f"'{CHAMPION}' moved back from version {champ} to {prev}{why}"])


@timed
def run(cfg: PromoteConfig) -> PromoteResult:
    refuse(config_problems(cfg), "promote", PromoteError)
    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise PromoteError(MISSING_TRACKING_URI)
    from mlflow import MlflowClient

    now = om.parse_time(cfg.now) if cfg.now else dt.datetime.now(dt.UTC)
    client = MlflowClient(tracking_uri=uri)
    with environment(cfg.http_env()):
        result = (promote if cfg.action == "promote" else rollback)(client, cfg, now)
    with atomic_dir(cfg.out) as out:
        write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(PromoteConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except PromoteError as e:
        print(f"promote: {e}", file=sys.stderr)
        return 1
    print(f"{result.model_name}: {result.decision} (champion {result.champion_version or 'none'})")
    for reason in result.reasons:
        print(f"  - {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
