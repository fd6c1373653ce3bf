"""Online evaluation and promotion: the outcomes format and its errors, the interval (pinned to Newcombe's published
figures) and the promotion rule (unit tier); against a real MLflow server, synthetic outcomes on an injected clock:
aggregation that check-triggers reads and that a re-run does not repeat, promotion once, every refusal with its reason,
rollback, and two promote runs at once (integration tier).

pytest tests/test_promote.py                     # unit tier
pytest -m integration tests/test_promote.py      # needs the MLflow server from conftest
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from steps import check_triggers, online_metrics, promote
from steps.core import outcomes
from steps.core.gate_stats import newcombe_independent, wilson_interval
from steps.core.outcomes import OutcomesError, parse_outcomes
from steps.core.registry import CHALLENGER_SINCE as SINCE_TAG
from steps.promote import Online, PromoteConfig, decide

integration = pytest.mark.integration
T0 = dt.datetime(2026, 11, 2, 6, 0, tzinfo=dt.UTC)  # when the challenger was proposed


def record(**over: object) -> dict:
    row = {
        "request_id": "r1",
        "time": "2026-11-02T10:00:00Z",
        "model": "m",
        "version": "2",
        "latency_ms": 250,
        "outcome": "accepted",
    }
    return {**row, **over}


def jsonl(*rows: dict) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


# --- the outcomes format -------------------------------------------------------------------------------------------


def test_a_valid_file_parses_and_a_repeated_line_counts_once():
    rows = [record(), record(), record(request_id="r2", outcome="edited", edited_summary="Shorter.")]
    parsed = parse_outcomes(jsonl(*rows), "o.jsonl")
    assert [(r.request_id, r.outcome, r.edited_summary) for r in parsed] == [
        ("r1", "accepted", None),
        ("r2", "edited", "Shorter."),
    ]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (record(outcome="liked"), "o.jsonl:2: field 'outcome': 'liked' is not one of accepted, edited, rejected"),
        (record(outcome="edited"), "o.jsonl:2: field 'edited_summary': an 'edited' outcome needs the reader's text"),
        (record(edited_summary="x"), "o.jsonl:2: field 'edited_summary': only an 'edited' outcome carries one"),
        (record(time="2026-11-02T10:00:00"), "o.jsonl:2: field 'time': '2026-11-02T10:00:00' is not an RFC 3339"),
        (record(latency_ms=-1), "o.jsonl:2: field 'latency_ms': -1 is not a finite number ≥ 0"),
        (record(version="v2"), "o.jsonl:2: field 'version': 'v2' is not a registry version number"),
        (record(safety_incident="no"), "o.jsonl:2: field 'safety_incident': 'no' is not true or false"),
        (record(model_version="2"), "o.jsonl:2: field 'model_version': unknown"),
        ({k: v for k, v in record().items() if k != "model"}, "o.jsonl:2: field 'model': missing"),
        (record(request_id="r0", latency_ms=9), "o.jsonl:2: field 'request_id': 'r0' is also on line 1 with other"),
    ],
    ids=["outcome", "edit-missing", "edit-stray", "naive-time", "latency", "version", "incident", "unknown", "missing",
         "conflicting-id"],
)  # fmt: skip
def test_a_bad_record_is_refused_naming_its_file_line_and_field(row: dict, expected: str):
    with pytest.raises(OutcomesError) as e:
        parse_outcomes(jsonl(record(request_id="r0"), row), "o.jsonl")
    assert expected in str(e.value)


def test_every_bad_line_is_reported_at_once():
    blob = jsonl(record(outcome="?")) + b"{not json\n" + jsonl(record(request_id="r3", latency_ms="fast"))
    with pytest.raises(OutcomesError) as e:
        parse_outcomes(blob, "o.jsonl")
    assert "3 problem(s)" in str(e.value)
    assert all(f"o.jsonl:{n}:" in str(e.value) for n in (1, 2, 3))


def test_the_command_refuses_a_bad_file_before_touching_mlflow(tmp_path: Path, capsys: pytest.CaptureFixture):
    bad = tmp_path / "outcomes.jsonl"
    bad.write_bytes(jsonl(record(), record(request_id="r2", outcome="maybe")))
    argv = ["--outcomes", str(bad), "--out", str(tmp_path / "out"), "--tracking-uri", "http://127.0.0.1:9"]
    assert online_metrics.main(argv) == 1
    assert f"{bad}:2: field 'outcome': 'maybe'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_outcomes_count_only_for_requests_serve_answered_with_the_version_it_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture
):
    # The audit (item 8): clients write the outcomes file, so promotion and retraining trusted any line a client
    # wrote. With serve's log of what it answered, a line for an id serve never issued, or crediting another version,
    # stops the step before anything is written.
    served = tmp_path / "served.jsonl"
    served.write_bytes(outcomes.served_record("r1", "m", "2", "0" * 64) + b'{"request_id": "torn')
    lines = tmp_path / "outcomes.jsonl"
    argv = ["--outcomes", str(lines), "--out", str(tmp_path / "out"), "--model-name", "m", "--served-log", str(served),
            "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--now", "2026-11-02T18:00:00Z"]  # fmt: skip
    for forged, said in (
        (record(request_id="invented"), "'invented': serve answered no such request"),
        (record(version="3"), "'r1': says m version 3, but serve answered it with m version 2"),
    ):
        lines.write_bytes(jsonl(record(), forged) if forged["request_id"] != "r1" else jsonl(forged))
        assert online_metrics.main(argv) == 1
        err = capsys.readouterr().err
        assert said in err and "nothing was written" in err
        assert not (tmp_path / "out").exists()
    lines.write_bytes(jsonl(record()))
    assert online_metrics.main(argv) == 0
    assert json.loads((tmp_path / "out/result.json").read_text())["records"] == 1


def test_both_serving_sides_logs_are_read_and_must_agree(tmp_path: Path, capsys: pytest.CaptureFixture):
    # On the cluster each side (champion, challenger) keeps its own served log (infra/serving/): an outcome answered
    # by either counts; the same id answered differently by the two is refused, naming both files.
    champion, challenger = tmp_path / "served-champion.jsonl", tmp_path / "served-challenger.jsonl"
    champion.write_bytes(outcomes.served_record("r1", "m", "2", "0" * 64))
    challenger.write_bytes(outcomes.served_record("r2", "m", "3", "1" * 64))
    lines = tmp_path / "outcomes.jsonl"
    lines.write_bytes(jsonl(record(), record(request_id="r2", version="3")))
    argv = ["--outcomes", str(lines), "--out", str(tmp_path / "out"), "--model-name", "m",
            "--served-log", f"{champion},{challenger}",
            "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--now", "2026-11-02T18:00:00Z"]  # fmt: skip
    assert online_metrics.main(argv) == 0
    assert json.loads((tmp_path / "out/result.json").read_text())["records"] == 2
    challenger.write_bytes(outcomes.served_record("r1", "m", "3", "1" * 64))
    assert online_metrics.main([*argv[:2], "--out", str(tmp_path / "out2"), *argv[4:]]) == 1
    err = capsys.readouterr().err
    assert f"'r1' is ('m', '2') in {champion} but ('m', '3') in {challenger}" in err


def test_records_of_the_current_day_are_said_to_wait_not_dropped_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture
):
    today = tmp_path / "outcomes.jsonl"
    today.write_bytes(jsonl(record(), record(request_id="r2", time="2026-11-02T11:00:00Z")))
    argv = ["--outcomes", str(today), "--out", str(tmp_path / "out"), "--model-name", "m",
            "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--now", "2026-11-02T18:00:00Z"]  # fmt: skip
    assert online_metrics.main(argv) == 0
    said = capsys.readouterr().out
    assert "2 record(s) dated after 2026-11-01 wait until their UTC day is complete" in said and "--now" in said
    assert json.loads((tmp_path / "out/result.json").read_text())["waiting"] == 2


def test_only_complete_days_are_aggregated():
    day = outcomes.day_number(T0)
    rows = [
        record(request_id="a", time="2026-11-02T01:00:00Z", outcome="accepted", latency_ms=100),
        record(request_id="b", time="2026-11-02T23:59:59+00:00", outcome="rejected", latency_ms=300),
        record(request_id="c", time="2026-11-03T00:30:00+01:00", outcome="edited", edited_summary="x"),  # 2 Nov UTC
        record(request_id="d", time="2026-11-03T01:00:00Z"),  # the day of `now`: still filling
    ]
    days = outcomes.per_day(parse_outcomes(jsonl(*rows), "o"), before_day=day + 1)
    assert list(days["2"]) == [day]
    assert days["2"][day][outcomes.REQUESTS] == 3
    assert days["2"][day][outcomes.ACCEPTANCE] == pytest.approx(1 / 3)
    assert days["2"][day][outcomes.LATENCY_P95] == 300


# --- the interval and the rule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "published"),
    # Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10.
    [((56, 70, 48, 80), (0.0524, 0.3339)), ((9, 10, 3, 10), (0.1705, 0.8090)), ((5, 56, 0, 29), (-0.0381, 0.1926))],
)
def test_the_interval_matches_newcombes_published_figures(counts: tuple, published: tuple):
    assert newcombe_independent(*counts, confidence=0.95) == pytest.approx(published, abs=5e-5)


def test_the_wilson_interval_matches_the_published_figure():
    assert wilson_interval(81, 263, 1.959964) == pytest.approx((0.2553, 0.3662), abs=5e-5)  # Newcombe (1998b), Table I


def cfg(tmp_path: Path, **over: object) -> PromoteConfig:
    return PromoteConfig(out=tmp_path / "out", **{"min_samples": 300, **over})  # type: ignore[arg-type]


def test_a_challenger_held_long_enough_with_enough_equal_traffic_is_promoted(tmp_path: Path):
    ok, reasons, figures = decide(Online(1000, 850), Online(1000, 850), 7.5, cfg(tmp_path))
    assert ok, reasons
    assert figures["interval"][0] > -0.05


@pytest.mark.parametrize(
    ("challenger", "champion", "held", "why"),
    [
        (Online(1000, 850), Online(1000, 850), 6.9, "hold: 6.90 of 7 days"),
        (Online(299, 280), Online(1000, 850), 8.0, "samples: challenger has 299"),
        (Online(1000, 850), Online(120, 100), 8.0, "champion has 120"),
        (Online(400, 320), Online(400, 340), 8.0, "non-inferiority not shown"),  # 0.80 vs 0.85: lower bound < −0.05
        (Online(1000, 850, incidents=1), Online(1000, 850), 8.0, "safety: 1 safety incident(s)"),
    ],
    ids=["hold", "few-challenger", "few-champion", "interval", "incident"],
)
def test_each_condition_alone_holds_the_challenger_back(
    tmp_path: Path, challenger: Online, champion: Online, held: float, why: str
):
    ok, reasons, _ = decide(challenger, champion, held, cfg(tmp_path))
    assert not ok
    assert any(why in r for r in reasons), reasons


def test_a_point_estimate_inside_the_margin_is_not_enough_on_little_traffic(tmp_path: Path):
    # 0.84 vs 0.85 is well within 0.05, but on 300 requests each the interval reaches below −0.05.
    ok, reasons, figures = decide(Online(300, 252), Online(300, 255), 8.0, cfg(tmp_path))
    assert not ok and figures["difference"] > -0.05 and figures["interval"][0] < -0.05, reasons


def test_bad_settings_are_all_reported(tmp_path: Path):
    bad = cfg(tmp_path, action="demote", min_samples=0, margin=1.5, confidence=1.0, now="yesterday")
    problems = promote.config_problems(bad)
    assert [p.split()[0] for p in problems] == ["--action", "--min-samples", "--margin", "--confidence", "--now"]


# --- integration: a real MLflow server --------------------------------------------------------------------------------


def make_versions(uri: str, name: str, count: int = 2) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model(name)
    experiment = client.get_experiment_by_name("promote-tests") or None
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("promote-tests")
    versions = []
    for _ in range(count):
        run = client.create_run(experiment_id)
        v = client.create_model_version(name, f"{run.info.artifact_uri}/model", run.info.run_id)
        versions.append(str(v.version))
    return versions


def outcome_rows(
    name: str, version: str, days: int, per_day: int, accepted: int, incident_day: int | None = None
) -> list:
    """`per_day` requests a day from T0's day on, the first `accepted` of each accepted, the rest rejected."""
    rows = []
    for d in range(days):
        start = T0.replace(hour=0) + dt.timedelta(days=d)
        for i in range(per_day):
            row = record(
                request_id=f"{name}-{version}-{d}-{i}",
                time=(start + dt.timedelta(seconds=60 * i)).isoformat(),
                model=name,
                version=version,
                latency_ms=200 + i,
                outcome="accepted" if i < accepted else "rejected",
            )
            if incident_day == d and i == per_day - 1:
                row["safety_incident"] = True
            rows.append(row)
    return rows


def setup_model(
    uri: str, name: str, tmp_path: Path, challenger_rows: int, champion_rows: int, per_day: int = 60, **kw: int
) -> Path:
    """Champion 1, challenger 2 (since T0); 8 days of `per_day` outcomes for both, aggregated at T0 + 8 days."""
    from mlflow import MlflowClient

    champ, chal = make_versions(uri, name)
    client = MlflowClient(tracking_uri=uri)
    client.set_registered_model_alias(name, "champion", champ)
    client.set_registered_model_alias(name, "challenger", chal)
    client.set_model_version_tag(name, chal, SINCE_TAG, T0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    rows = outcome_rows(name, champ, 8, per_day, champion_rows)
    rows += outcome_rows(name, chal, 8, per_day, challenger_rows, **kw)
    path = tmp_path / "outcomes.jsonl"
    path.write_bytes(jsonl(*rows))
    aggregate(uri, name, path, tmp_path, T0 + dt.timedelta(days=8))
    return path


def aggregate(uri: str, name: str, path: Path, tmp_path: Path, now: dt.datetime) -> online_metrics.OnlineResult:
    return online_metrics.run(
        online_metrics.OnlineConfig(
            outcomes=path, out=tmp_path / "agg", tracking_uri=uri, model_name=name, now=now.isoformat()
        )
    )


def decide_at(uri: str, name: str, tmp_path: Path, days: float, **over: object) -> promote.PromoteResult:
    now = (T0 + dt.timedelta(days=days)).isoformat()
    c = cfg(tmp_path, tracking_uri=uri, model_name=name, now=now, **over)
    return promote.run(c)


def aliases(uri: str, name: str) -> dict[str, str]:
    from mlflow import MlflowClient

    return dict(MlflowClient(tracking_uri=uri).get_registered_model(name).aliases)


def tags(uri: str, name: str, version: str) -> dict[str, str]:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri).get_model_version(name, version).tags


@integration
def test_outcomes_become_one_point_a_day_that_check_triggers_reads_and_a_rerun_does_not_repeat(
    mlflow_server: str, tmp_path: Path
):
    from mlflow import MlflowClient

    path = setup_model(mlflow_server, "online-series", tmp_path, challenger_rows=51, champion_rows=54)
    client = MlflowClient(tracking_uri=mlflow_server)
    client.set_registered_model_alias("online-series", "champion", "2")  # check-triggers reads the champion's series
    champion = client.get_model_version("online-series", "2")
    series = check_triggers.online_series(client, champion, check_triggers.TriggersConfig(out=tmp_path).online_metric)
    assert series == [51 / 60] * 8
    again = aggregate(mlflow_server, "online-series", path, tmp_path, T0 + dt.timedelta(days=8))
    assert again.versions[0].days_written == [] and len(again.versions[0].days_already_written) == 8
    assert check_triggers.online_series(client, champion, outcomes.ACCEPTANCE) == [51 / 60] * 8
    assert champion.tags[outcomes.THROUGH_TAG] == "2026-11-09"
    # A record that arrives for a day already written is listed as late and not counted.
    late = record(request_id="late-1", time="2026-11-03T12:00:00Z", model="online-series", version="2")
    path.write_bytes(path.read_bytes() + jsonl(late))
    after = aggregate(mlflow_server, "online-series", path, tmp_path, T0 + dt.timedelta(days=8))
    assert next(v for v in after.versions if v.version == "2").late_days == ["2026-11-03"]
    assert check_triggers.online_series(client, champion, outcomes.ACCEPTANCE) == [51 / 60] * 8


@integration
def test_a_version_without_a_run_gets_an_online_run_recorded_in_its_tag(mlflow_server: str, tmp_path: Path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    client.create_registered_model("runless")
    client.create_model_version("runless", "s3://mlflow/elsewhere/model")
    path = tmp_path / "o.jsonl"
    path.write_bytes(jsonl(*outcome_rows("runless", "1", 2, 3, 2)))
    first = aggregate(mlflow_server, "runless", path, tmp_path, T0 + dt.timedelta(days=2))
    run_id = tags(mlflow_server, "runless", "1")[outcomes.ONLINE_RUN_TAG]
    assert first.versions[0].run_id == run_id and len(first.versions[0].days_written) == 2
    again = aggregate(mlflow_server, "runless", path, tmp_path, T0 + dt.timedelta(days=2))
    assert again.versions[0].run_id == run_id and again.versions[0].days_written == []


@integration
def test_a_challenger_that_held_up_for_a_week_is_promoted_once(mlflow_server: str, tmp_path: Path):
    name = "promote-once"
    setup_model(mlflow_server, name, tmp_path, challenger_rows=51, champion_rows=51)
    first = decide_at(mlflow_server, name, tmp_path, 8, min_samples=300, margin=0.1)
    assert (first.decision, first.changed) == ("promoted", True), first.reasons
    assert aliases(mlflow_server, name) == {"champion": "2", "previous-champion": "1"}
    figures = json.loads(tags(mlflow_server, name, "2")[promote.FIGURES_TAG])
    assert figures["challenger"]["requests"] == 480 and figures["champion"]["requests"] == 480
    assert json.loads(tags(mlflow_server, name, "1")[promote.DEFENDED_TAG + "2"])["decision"] == "promoted"
    second = decide_at(mlflow_server, name, tmp_path, 9, min_samples=300, margin=0.1)
    assert (second.decision, second.changed) == ("no-challenger", False)
    assert aliases(mlflow_server, name) == {"champion": "2", "previous-champion": "1"}


@integration
@pytest.mark.parametrize(
    ("case", "chal_rows", "days", "over", "incident", "why"),
    [
        ("few", 51, 8, {"min_samples": 500}, None, "samples: challenger has 480"),
        ("early", 51, 6.5, {}, None, "hold: 6.50 of 7 days"),
        ("interval", 46, 8, {"margin": 0.05}, None, "non-inferiority not shown"),
        ("incident", 51, 8, {}, 3, "safety: 1 safety incident(s)"),
    ],
)
def test_a_challenger_is_held_back_with_the_reason_tagged_on_both_versions(
    mlflow_server: str, tmp_path: Path, case: str, chal_rows: int, days: float, over: dict, incident: int | None,
    why: str,
):  # fmt: skip
    name = f"held-{case}"
    setup_model(mlflow_server, name, tmp_path, challenger_rows=chal_rows, champion_rows=51, incident_day=incident)
    result = decide_at(mlflow_server, name, tmp_path, days, **{"min_samples": 300, "margin": 0.1, **over})
    assert (result.decision, result.changed) == ("held", False)
    assert aliases(mlflow_server, name) == {"champion": "1", "challenger": "2"}
    assert why in tags(mlflow_server, name, "2")[promote.REASONS_TAG]
    defended = json.loads(tags(mlflow_server, name, "1")[promote.DEFENDED_TAG + "2"])
    assert defended["decision"] == "held" and any(why in r for r in defended["reasons"])


@integration
def test_rollback_restores_the_previous_champion_once(mlflow_server: str, tmp_path: Path):
    name = "roll-back"
    setup_model(mlflow_server, name, tmp_path, challenger_rows=51, champion_rows=51)
    assert decide_at(mlflow_server, name, tmp_path, 8, margin=0.1).changed
    back = decide_at(mlflow_server, name, tmp_path, 9, action="rollback", reason="cut mid-sentence")
    assert (back.decision, back.champion_version, back.previous_champion_version) == ("rolled-back", "1", "")
    # Nothing is left to roll back to: previous-champion goes, never naming the champion itself.
    assert aliases(mlflow_server, name) == {"champion": "1"}
    assert json.loads(tags(mlflow_server, name, "2")[promote.ROLLED_BACK_TAG])["reason"] == "cut mid-sentence"
    again = decide_at(mlflow_server, name, tmp_path, 9, action="rollback")
    assert (again.decision, again.changed, again.champion_version) == ("already-rolled-back", False, "1")
    assert aliases(mlflow_server, name) == {"champion": "1"}


@integration
def test_a_rollback_reading_between_another_rollbacks_writes_only_finishes_it(mlflow_server: str, tmp_path: Path):
    """`champion` already moved back, `previous-champion` not yet removed: the run removes it, changes nothing else."""
    from mlflow import MlflowClient

    name = "torn-rollback"
    old, _ = make_versions(mlflow_server, name)
    client = MlflowClient(tracking_uri=mlflow_server)
    for alias in ("previous-champion", "champion"):
        client.set_registered_model_alias(name, alias, old)
    result = decide_at(mlflow_server, name, tmp_path, 9, action="rollback")
    assert (result.decision, result.changed) == ("already-rolled-back", False)
    assert aliases(mlflow_server, name) == {"champion": old}


def promote_at_once(uri: str, name: str, tmp_path: Path, runs: int) -> list:
    """`runs` promote runs of `name`, released together by a barrier; their results (or the error each raised)."""
    barrier = threading.Barrier(runs)

    def one(i: int) -> object:
        barrier.wait()
        try:
            return decide_at(uri, name, tmp_path / str(i), 8, min_samples=80, margin=0.2)
        except Exception as e:  # returned to the test, which names it
            return e

    with ThreadPoolExecutor(runs) as pool:
        return list(pool.map(one, range(runs)))


@integration
def test_two_promote_runs_at_once_leave_one_champion_and_one_previous_champion(mlflow_server: str, tmp_path: Path):
    for round_ in range(2):
        name = f"race-{round_}"
        (tmp_path / name).mkdir()
        setup_model(mlflow_server, name, tmp_path / name, challenger_rows=10, champion_rows=10, per_day=10)
        results = promote_at_once(mlflow_server, name, tmp_path / name, runs=2)
        assert not [r for r in results if isinstance(r, Exception)], results
        assert aliases(mlflow_server, name) == {"champion": "2", "previous-champion": "1"}, round_
        assert {r.decision for r in results} <= {"promoted", "already-promoted", "no-challenger"}


@integration
def test_a_challenger_without_a_since_tag_starts_its_hold_at_the_first_run(mlflow_server: str, tmp_path: Path):
    from mlflow import MlflowClient

    name = "no-since"
    champ, chal = make_versions(mlflow_server, name)
    client = MlflowClient(tracking_uri=mlflow_server)
    client.set_registered_model_alias(name, "champion", champ)
    client.set_registered_model_alias(name, "challenger", chal)
    first = decide_at(mlflow_server, name, tmp_path, 20)
    assert first.decision == "held" and "hold: 0.00 of 7 days" in first.reasons[0]
    assert tags(mlflow_server, name, chal)[SINCE_TAG] == (T0 + dt.timedelta(days=20)).strftime("%Y-%m-%dT%H:%M:%SZ")


@integration
def test_a_run_that_reads_between_another_runs_alias_writes_only_finishes_it(mlflow_server: str, tmp_path: Path):
    """The interleaving a race can produce: `champion` already moved to the challenger, `challenger` not yet removed.
    A run reading this must not take the new champion for the old one (previous-champion would become 2)."""
    from mlflow import MlflowClient

    name = "torn"
    champ, chal = make_versions(mlflow_server, name)
    client = MlflowClient(tracking_uri=mlflow_server)
    for alias, version in (("previous-champion", champ), ("champion", chal), ("challenger", chal)):
        client.set_registered_model_alias(name, alias, version)
    result = decide_at(mlflow_server, name, tmp_path, 8)
    assert (result.decision, result.changed) == ("already-promoted", False)
    assert aliases(mlflow_server, name) == {"champion": chal, "previous-champion": champ}
