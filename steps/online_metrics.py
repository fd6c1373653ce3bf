"""online-metrics: turn the serving side's per-request outcomes into per-version, per-day online metrics in MLflow.

    python -m steps.online_metrics --outcomes /var/lib/distillery/outcomes.jsonl \
        --tracking-uri http://mlflow:5000 --model-name distillery-summariser --out out/online-metrics

The outcomes file's format: steps/core/outcomes.py.

What is written: for every version in the file, one point per complete UTC day (days before `--now`'s day; today's
is still filling) of each metric in `METRICS`, step = the day's number since 1970-01-01, on the run named by the
version's `online.run_id` tag, else the version's own run (the series steps/check_triggers.py reads, found the same
way; a version with neither gets an `online-<model>-v<version>` run, recorded in its `online.run_id` tag). A day that
already has its point is never written again, so a re-run (or an overlap of files) adds nothing: the series holds one
point per day. Records that arrive for a day already written are not counted; the result lists such days. Also tags
the version `online.through` (the last day written).
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.core import registry
from steps.core.cli import parse_config, timed, write_result
from steps.core.io import atomic_dir
from steps.core.mlflow_client import MISSING_TRACKING_URI, MlflowSettings, tracking_uri
from steps.core.outcomes import (
    DAY_MS,
    METRICS,
    ONLINE_EXPERIMENT,
    ONLINE_RUN_TAG,
    REQUESTS,
    THROUGH_TAG,
    OutcomesError,
    day_number,
    day_text,
    online_run_id,
    parse_outcomes,
    parse_served,
    parse_time,
    per_day,
    series,
    unserved,
)


@dataclass
class OnlineConfig(MlflowSettings):
    outcomes: Path = field(metadata={"help": "the serving side's outcomes file (JSONL, one record per request)"})
    out: Path = field(metadata={"help": "folder to write result.json into"})
    model_name: str = field(
        default=registry.MODEL_NAME,
        metadata={"help": "registered model whose versions' outcomes are aggregated (other models' lines are skipped)"},
    )
    now: str = field(
        default="",
        metadata={"help": "the current time, RFC 3339 (empty: the clock); days before its UTC day are complete"},
    )
    served_log: str = field(
        default="",
        metadata={
            "help": "serve's log of the requests it answered (serve --served-log), or comma-separated logs (one per "
            "serving side: the cluster's champion and challenger each keep their own): an outcome is counted only "
            "for a request id serve issued, with the version that answered it; any other line stops the step. "
            "Empty: outcome lines are taken as the clients wrote them (said on stdout)"
        },
    )


@dataclass
class VersionSummary:
    version: str
    run_id: str
    days_written: list[str]
    days_already_written: list[str]
    late_days: list[str]  # days already written whose count in the file now differs (late records: not counted)


@dataclass
class OnlineResult:
    model_name: str
    records: int
    through: str  # the last complete day considered
    versions: list[VersionSummary]
    waiting: int = 0  # records of --now's day or later: counted once their day is complete


def now_from(text: str) -> dt.datetime:
    if not text:
        return dt.datetime.now(dt.UTC)
    try:
        return parse_time(text)
    except ValueError as e:
        raise OutcomesError(f"--now {text!r}: not an RFC 3339 time with a zone (2026-12-08T06:00:00Z)") from e


@timed
def run(cfg: OnlineConfig) -> OnlineResult:
    with cfg.http_retries_set(OutcomesError, "online-metrics"):
        return _run(cfg)


def read_served_logs(files: list[str]) -> dict[str, tuple[str, str]]:
    """request id -> (model, version) across serve's logs (one per serving side); an id two logs answer differently is
    an OutcomesError naming both files."""
    served: dict[str, tuple[str, str]] = {}
    origin: dict[str, str] = {}
    for name in files:
        try:
            got = parse_served(Path(name).read_bytes(), name)
        except FileNotFoundError as e:
            raise OutcomesError(f"--served-log {name}: no such file (serve's --served-log)") from e
        for request_id, answered in got.items():
            if served.get(request_id, answered) != answered:
                raise OutcomesError(
                    f"--served-log: request_id {request_id!r} is {served[request_id]} in {origin[request_id]} but "
                    f"{answered} in {name}; serve issues each id once"
                )
            served[request_id], origin[request_id] = answered, name
    return served


def _run(cfg: OnlineConfig) -> OnlineResult:
    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise OutcomesError(MISSING_TRACKING_URI)
    now = now_from(cfg.now)
    try:
        blob = Path(cfg.outcomes).read_bytes()
    except FileNotFoundError as e:
        raise OutcomesError(f"{cfg.outcomes}: no such outcomes file; check --outcomes") from e
    records = [r for r in parse_outcomes(blob, str(cfg.outcomes)) if r.model == cfg.model_name]
    if cfg.served_log:
        served = read_served_logs([f for f in cfg.served_log.split(",") if f])
        problems = unserved(records, served, cfg.served_log)
        if problems:
            raise OutcomesError(
                f"{cfg.outcomes}: {len(problems)} outcome line(s) for requests serve did not answer as they say; "
                "nothing was written:\n  " + "\n  ".join(problems[:20]) + ("\n  …" if len(problems) > 20 else "")
            )
    else:
        print(f"online-metrics: {cfg.outcomes} not checked against serve's log (no --served-log): outcome lines are "
              "taken as the clients wrote them")  # fmt: skip
    today = day_number(now)
    days = per_day(records, today)

    from mlflow import MlflowClient
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=uri)
    versions = {}
    missing = []
    for v in sorted(days, key=int):
        try:
            versions[v] = client.get_model_version(cfg.model_name, v)
        except MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            missing.append(v)
    if missing:
        raise OutcomesError(
            f"{cfg.outcomes}: version(s) {', '.join(missing)} of {cfg.model_name} are not in the registry at {uri}: "
            "check the serving side's `version` field and --model-name; nothing was written"
        )
    summaries = []
    for v, by_day in days.items():
        run_id = online_run_id(versions[v]) or _new_online_run(client, cfg.model_name, v)
        existing = {metric: series(client, run_id, metric) for metric in METRICS}
        new = [
            Metric(metric, float(value), d * DAY_MS + DAY_MS - 1, d)
            for d, values in by_day.items()
            for metric, value in values.items()
            if d not in existing[metric]
        ]
        for start in range(0, len(new), 500):  # log_batch takes at most 1000 metrics a request
            client.log_batch(run_id, metrics=new[start : start + 500])
        written = sorted({m.step for m in new})
        late = [d for d, values in by_day.items() if existing[REQUESTS].get(d, values[REQUESTS]) != values[REQUESTS]]
        if by_day:
            registry.upsert(client.set_model_version_tag, cfg.model_name, v, THROUGH_TAG, day_text(max(by_day)))
        summaries.append(
            VersionSummary(
                version=v,
                run_id=run_id,
                days_written=[day_text(d) for d in written],
                days_already_written=[day_text(d) for d in by_day if d not in written],
                late_days=[day_text(d) for d in late],
            )
        )
    waiting = sum(day_number(r.time) >= today for r in records)
    result = OnlineResult(cfg.model_name, len(records), day_text(today - 1), summaries, waiting)
    with atomic_dir(cfg.out) as out:
        write_result(out, result)
    return result


def _new_online_run(client: Any, name: str, version: str) -> str:
    """A run for a version registered without one; recorded in its `online.run_id` tag."""
    experiment = client.get_experiment_by_name(ONLINE_EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(ONLINE_EXPERIMENT)
    run = client.create_run(experiment_id, run_name=f"online-{name}-v{version}")
    registry.upsert(client.set_model_version_tag, name, version, ONLINE_RUN_TAG, run.info.run_id)
    return run.info.run_id


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(OnlineConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except OutcomesError as e:
        print(f"online-metrics: {e}", file=sys.stderr)
        return 1
    print(f"{result.records} record(s) of {result.model_name}, complete days through {result.through}")
    for s in result.versions:
        print(f"  version {s.version}: wrote {len(s.days_written)} day(s), {len(s.days_already_written)} already there")
        if s.late_days:
            print(f"    late records not counted for {', '.join(s.late_days)} (already written)")
    if result.waiting:
        print(f"  {result.waiting} record(s) dated after {result.through} wait until their UTC day is complete: "
              "run again after midnight UTC (a trial: --now a day later)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
