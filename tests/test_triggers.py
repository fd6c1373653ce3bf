"""check-triggers and the retrain CronWorkflow: the trigger rules and the rendered Argo objects (unit tier); each
trigger firing, holding and debounced against a real MLflow server and a real DVC repo with an S3 remote (integration).

pytest tests/test_triggers.py
pytest -m integration tests/test_triggers.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from steps import check_triggers
from steps.check_triggers import TriggerError, TriggersConfig
from steps.pipeline import PARAMS
from tests.conftest import ROOT, free_port, make_bucket, prune_closed_log_handlers
from tests.test_workflows import config_flags, strict_validator

integration = pytest.mark.integration
CRON_FILE = ROOT / "infra/argo/retrain-cronworkflow.yaml"
CRON_TEMPLATE_FILE = ROOT / "infra/argo/retrain-workflowtemplate.yaml"  # what the cron runs, by reference
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def cfg(tmp_path: Path, **kw: object) -> TriggersConfig:
    """Every trigger off unless turned on in `kw`."""
    base: dict = {"out": tmp_path / "out", "online_metric": "", "min_feedback_rows": 0, "base_revision": ""}
    return TriggersConfig(**{**base, **kw})


# --- the rules -----------------------------------------------------------------------------------------------------


def test_quality_baseline_is_the_first_points_and_current_the_last():
    assert check_triggers.quality_levels([0.4, 0.4, 0.3, 0.2], 2, 2, None) == pytest.approx((0.4, 0.25))
    assert check_triggers.quality_levels([0.4, 0.4, 0.3], 2, 2, None) is None  # too short to say
    assert check_triggers.quality_levels([0.3, 0.2], 0, 2, 0.5) == pytest.approx((0.5, 0.25))  # the eval tag
    assert check_triggers.quality_levels([0.3, 0.2], 0, 2, None) is None


def test_quality_fires_beyond_the_allowed_drop_once_per_champion(tmp_path: Path):
    c = cfg(tmp_path, online_metric="online.rougeL", baseline_points=2, recent_points=1, max_quality_drop=0.05)
    assert check_triggers.check_quality([0.4, 0.4, 0.3], c, None, None, "3").fired
    assert not check_triggers.check_quality([0.4, 0.4, 0.36], c, None, None, "3").fired
    debounced = check_triggers.check_quality([0.4, 0.4, 0.3], c, None, "online.rougeL", "3")
    assert not debounced.fired and "already fired a retrain for champion 3" in debounced.reason


def test_feedback_counts_distinct_new_rows():
    old = b'{"id": 1}\n{"id": 2}\n'
    new = b'{"id": 2}\n\n{"id": 1}\n{"id": 3}\n{"id": 3}\n{"id": 4}\n'
    assert len(check_triggers.feedback_rows(new) - check_triggers.feedback_rows(old)) == 2
    assert check_triggers.feedback_rows(None) == set()
    # The same rows written with other key order and spacing (a serving side that re-serialises its log) are not new.
    old = b'{"id": "f1", "action": "accepted", "summary": "Caf\xc3\xa9 opens."}\n'
    rewritten = b'{"summary":"Caf\\u00e9 opens.","action":"accepted","id":"f1"}\n'
    assert check_triggers.feedback_rows(rewritten) == check_triggers.feedback_rows(old)


def test_base_model_fires_on_a_new_revision_once(tmp_path: Path):
    tags = {"base_model": "org/base", "base_model.revision": "v1"}
    assert not check_triggers.check_base_model(tags, cfg(tmp_path, base_revision="v1"), None).fired
    fired = check_triggers.check_base_model(tags, cfg(tmp_path, base_revision="v2"), None)
    assert fired.fired and fired.key == "org/base@v2"
    assert not check_triggers.check_base_model(tags, cfg(tmp_path, base_revision="v2"), "org/base@v2").fired
    assert check_triggers.check_base_model(tags, cfg(tmp_path, base_model="org/other", base_revision="v1"), None).fired


def test_every_config_problem_is_reported_at_once(tmp_path: Path):
    bad = cfg(tmp_path, baseline_points=-1, recent_points=0, min_feedback_rows=-2, http_retries=11, run_id="a b")
    with pytest.raises(TriggerError) as e:
        check_triggers.run(bad)
    for flag in ("--baseline-points -1", "--recent-points 0", "--min-feedback-rows -2", "--http-retries 11",
                 "--run-id 'a b'"):  # fmt: skip
        assert flag in str(e.value)
    assert not (tmp_path / "out").exists()


def test_help_works_without_heavy_imports():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "steps.check_triggers", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--out" in proc.stdout and "--min-feedback-rows" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert not imported & {"mlflow", "dvc", "torch", "llama_cpp", "hera"}


# --- the CronWorkflow ------------------------------------------------------------------------------------------------


def cron() -> dict:
    return yaml.safe_load(CRON_FILE.read_text())


def templates() -> dict[str, dict]:
    return {t["name"]: t for t in yaml.safe_load(CRON_TEMPLATE_FILE.read_text())["spec"]["templates"]}


def filled_manifest(**values: str) -> dict:
    """The Workflow submit-retrain creates, with its inputs filled in as Argo would."""
    manifest = templates()["submit-retrain"]["resource"]["manifest"]
    defaults = {
        "triggers": "quality.feedback",
        "summary": "feedback: 60 new row(s)",
        "champion-version": "3",
        "dataset-repo": "https://example.org/data.git",
        "dataset-rev": "a" * 40,
        "base-model": "org/base",
        "base-revision": "v2",
        "model-name": "distillery-summariser",
        "tracking-uri": "http://mlflow:5000",
    }
    for name, value in {**defaults, **values}.items():
        manifest = manifest.replace("{{inputs.parameters." + name + "}}", value)
    assert "{{" not in manifest
    return yaml.safe_load(manifest)


def test_the_check_runs_on_a_schedule_never_overlapping():
    spec = cron()["spec"]
    assert spec["schedules"] == ["17 */6 * * *"] and spec["concurrencyPolicy"] == "Forbid"
    from workflows.retrain import build_cron

    assert build_cron(schedule="0 3 * * *").to_dict()["spec"]["schedules"] == ["0 3 * * *"]


def test_the_cron_only_references_its_workflow_template():
    """`templateReferencing: Strict` runs only referencing workflows (operator.go setExecWorkflow) and refuses one
    that sets any spec field outside util/merge.go's allow-list; the cron sets none."""
    template = yaml.safe_load(CRON_TEMPLATE_FILE.read_text())
    assert cron()["spec"]["workflowSpec"] == {"workflowTemplateRef": {"name": template["metadata"]["name"]}}
    assert template["kind"] == "WorkflowTemplate" and template["spec"]["entrypoint"] == "check-and-retrain"


def test_the_retrain_is_created_only_when_the_check_fires():
    dag = templates()["check-and-retrain"]["dag"]["tasks"]
    submit = next(t for t in dag if t["name"] == "submit-retrain")
    assert submit["when"] == "{{tasks.check-triggers.outputs.parameters.fire}} == true"
    assert submit["depends"] == "check-triggers.Succeeded"
    resource = templates()["submit-retrain"]["resource"]
    assert resource["action"] == "create" and resource["setOwnerReference"] is False


def test_every_attempt_of_the_check_runs_under_the_workflow_uid():
    from workflows.retrain import build

    specs = build().to_dict()["spec"]["templates"]
    check = next(t for t in specs if t["name"] == "check-triggers")
    args = check["container"]["args"]
    assert args[args.index("--run-id") + 1] == "{{workflow.uid}}"  # the same in every retry of one run
    assert check["retryStrategy"]["retryPolicy"] == "OnError"


def test_the_check_passes_only_flags_the_step_has_and_exports_what_argo_reads():
    check = templates()["check-triggers"]
    flags = {a[2:] for a in check["container"]["args"] if a.startswith("--")}
    assert flags <= config_flags(TriggersConfig)
    exported = {p["name"] for p in check["outputs"]["parameters"]}
    assert exported <= {f.replace("_", "-") for f in check_triggers.TriggersResult.__dataclass_fields__}


def test_the_created_workflow_passes_argos_schema_and_runs_one_at_a_time():
    workflow = filled_manifest()
    errors = [e.message for e in strict_validator("Workflow").iter_errors(workflow)]
    assert errors == []
    spec = workflow["spec"]
    assert spec["workflowTemplateRef"] == {"name": "distill"}
    # Only arguments beside the reference (Strict's allow-list); the mutex is distill's own.
    assert set(spec) == {"workflowTemplateRef", "arguments"}
    distill = yaml.safe_load((ROOT / "infra/argo/distill-workflowtemplate.yaml").read_text())
    assert distill["spec"]["synchronization"] == {"mutexes": [{"name": "distill"}]}
    args = {p["name"]: p["value"] for p in spec["arguments"]["parameters"]}
    assert set(args) <= {p.name for p in PARAMS}  # distill's own parameters only
    assert args["dataset-rev"] == "a" * 40
    assert workflow["metadata"]["labels"]["distillery/triggers"] == "quality.feedback"
    assert workflow["metadata"]["annotations"]["distillery/reasons"] == "feedback: 60 new row(s)"


def test_reasons_with_quotes_still_make_a_valid_manifest():
    messy = check_triggers._annotation_safe('base model: org/it\'s "new"@v2 \\ done\nnext')
    assert filled_manifest(summary=messy)["metadata"]["annotations"]["distillery/reasons"] == messy
    for triggers in ("quality", "quality.feedback.base-model", "none"):
        assert LABEL_VALUE.match(triggers)


def test_the_cron_workflow_is_installed_with_the_rest():
    kustomization = yaml.safe_load((ROOT / "infra/kustomization.yaml").read_text())
    assert {"argo/retrain-cronworkflow.yaml", "argo/retrain-workflowtemplate.yaml"} <= set(kustomization["resources"])


# --- integration: a real DVC repo (S3 remote on moto) and a real MLflow server ----------------------------------------


@dataclass
class DataRepo:
    path: Path
    v1: str  # 2 feedback rows
    v2: str  # 7 feedback rows: 5 new


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def feedback_lines(start: int, n: int) -> str:
    rows = [{"id": f"fb-{i}", "document": f"doc {i}", "rating": i % 5} for i in range(start, start + n)]
    return "".join(json.dumps(row) + "\n" for row in rows)


def commit_feedback(repo: Path, text: str, message: str) -> str:
    """Append feedback rows, track the file with DVC, commit, push the data to the S3 remote; returns the commit."""
    from dvc.repo import Repo

    feedback = repo / "data/summaries/feedback.jsonl"
    feedback.parent.mkdir(parents=True, exist_ok=True)
    with feedback.open("a") as f:
        f.write(text)
    with Repo(str(repo)) as dvc_repo:
        dvc_repo.add(str(feedback))
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", message)
        dvc_repo.push()
    # Only the remote keeps the older versions now: reads at a past commit must go through DVC to S3.
    shutil.rmtree(repo / ".dvc/cache", ignore_errors=True)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def dvc_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    env = {"DVC_NO_ANALYTICS": "1", "DVC_SITE_CACHE_DIR": str(tmp_path_factory.mktemp("dvc-site"))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def data_repo(tmp_path_factory: pytest.TempPathFactory, s3_server: str, aws_env: dict, dvc_env: None) -> DataRepo:
    from dvc.repo import Repo

    prune_closed_log_handlers()
    make_bucket(s3_server, "dvc-feedback")
    repo = tmp_path_factory.mktemp("feedback") / "data-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    with Repo.init(str(repo)) as dvc_repo, dvc_repo.config.edit() as conf:
        conf["remote"]["s3"] = {"url": "s3://dvc-feedback/store", "endpointurl": s3_server}
        conf["core"]["remote"] = "s3"
    v1 = commit_feedback(repo, feedback_lines(0, 2), "feedback v1")
    v2 = commit_feedback(repo, feedback_lines(2, 5), "feedback v2")
    return DataRepo(repo, v1, v2)


def make_champion(uri: str, name: str, repo: DataRepo, online: list[float] | None = None, **tags: str) -> str:
    """A registered model whose `champion` version was trained on feedback v1 and base model org/base@rev-a."""
    import time

    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("trigger-tests")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("trigger-tests")
    run = client.create_run(experiment_id, run_name=name)
    if online:
        now = int(time.time() * 1000)
        metrics = [Metric("online.rougeL", v, now + i, i) for i, v in enumerate(online)]
        client.log_batch(run.info.run_id, metrics=metrics)
    client.set_terminated(run.info.run_id)
    client.create_registered_model(name)
    all_tags = {"dataset.repo": str(repo.path), "dataset.commit": repo.v1, "base_model": "org/base",
                "base_model.revision": "rev-a", "eval.rougeL": "0.4", **tags}  # fmt: skip
    version = client.create_model_version(name, f"{run.info.artifact_uri}/model", run.info.run_id, tags=all_tags)
    client.set_registered_model_alias(name, "champion", version.version)
    return str(version.version)


def champion_tags(uri: str, name: str) -> dict[str, str]:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri).get_model_version_by_alias(name, "champion").tags


@integration
def test_no_champion_fires_nothing(mlflow_server: str, tmp_path: Path):
    result = check_triggers.run(cfg(tmp_path, tracking_uri=mlflow_server, model_name="never-registered",
                                    min_feedback_rows=1, base_revision="x", online_metric="online.rougeL"))  # fmt: skip
    assert not result.fire and result.triggers == "none"
    assert "no 'champion' version of never-registered yet" in result.reasons[0]
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=mlflow_server).create_registered_model("no-champion-yet")
    result = check_triggers.run(cfg(tmp_path, tracking_uri=mlflow_server, model_name="no-champion-yet",
                                    base_revision="x"))  # fmt: skip
    assert not result.fire and "no 'champion' version of no-champion-yet yet" in result.reasons[0]


@integration
def test_an_online_quality_drop_fires_once_per_champion(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "q-drop", data_repo, online=[0.40] * 5 + [0.30] * 3)
    c = cfg(tmp_path, tracking_uri=mlflow_server, model_name="q-drop", online_metric="online.rougeL")
    first = check_triggers.run(c)
    assert first.fire and first.triggers == "quality"
    assert "drop +0.1000" in first.summary and first.dataset_rev == data_repo.v2
    assert champion_tags(mlflow_server, "q-drop")["retrain.fired.quality"] == "online.rougeL"
    second = check_triggers.run(c)
    assert not second.fire and "already fired" in second.reasons[0]


@integration
def test_a_small_dip_or_a_short_series_does_not_fire(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "q-dip", data_repo, online=[0.40] * 5 + [0.38] * 3)
    c = cfg(tmp_path, tracking_uri=mlflow_server, model_name="q-dip", online_metric="online.rougeL")
    dip = check_triggers.run(c)
    assert not dip.fire and "holds" in dip.reasons[0]
    make_champion(mlflow_server, "q-short", data_repo, online=[0.1] * 6)
    short = check_triggers.run(cfg(tmp_path, tracking_uri=mlflow_server, model_name="q-short",
                                   online_metric="online.rougeL"))  # fmt: skip
    assert not short.fire and "6 point(s) of online.rougeL, needs 8" in short.reasons[0]


@integration
def test_the_monitor_may_log_on_its_own_run_against_the_eval_score(
    mlflow_server: str, data_repo: DataRepo, tmp_path: Path
):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    monitor = client.create_run(client.get_experiment_by_name("trigger-tests").experiment_id, run_name="monitor")
    for step, value in enumerate([0.31, 0.30, 0.29]):
        client.log_metric(monitor.info.run_id, "online.rougeL", value, step=step)
    make_champion(mlflow_server, "q-monitor", data_repo, **{"online.run_id": monitor.info.run_id})
    result = check_triggers.run(cfg(tmp_path, tracking_uri=mlflow_server, model_name="q-monitor",
                                    online_metric="online.rougeL", baseline_points=0))  # fmt: skip
    assert result.fire and "vs baseline 0.4000" in result.summary  # the champion's eval.rougeL tag


@integration
def test_enough_new_feedback_fires_and_fewer_does_not(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "fb-count", data_repo)
    c = cfg(tmp_path, tracking_uri=mlflow_server, model_name="fb-count", dataset_rev="main", min_feedback_rows=6)
    fewer = check_triggers.run(c)
    assert (
        not fewer.fire
        and f"5 new row(s) in data/summaries/feedback.jsonl since {data_repo.v1[:12]}" in (fewer.reasons[0])
    )
    enough = check_triggers.run(cfg(tmp_path, tracking_uri=mlflow_server, model_name="fb-count", dataset_rev="main",
                                    min_feedback_rows=5))  # fmt: skip
    assert enough.fire and enough.triggers == "feedback"
    assert (enough.dataset_repo, enough.dataset_rev) == (str(data_repo.path), data_repo.v2)


@integration
def test_feedback_counts_only_rows_since_the_retrain_it_caused(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    repo = DataRepo(tmp_path / "repo", data_repo.v1, data_repo.v2)
    shutil.copytree(data_repo.path, repo.path)
    make_champion(mlflow_server, "fb-debounce", repo)
    c = cfg(tmp_path, tracking_uri=mlflow_server, model_name="fb-debounce", dataset_rev="main", min_feedback_rows=5)
    assert check_triggers.run(c).fire
    assert champion_tags(mlflow_server, "fb-debounce")["retrain.fired.feedback"] == repo.v2
    again = check_triggers.run(c)
    assert not again.fire and "0 new row(s)" in again.reasons[0]
    v3 = commit_feedback(repo.path, feedback_lines(7, 5), "feedback v3")
    third = check_triggers.run(c)
    assert third.fire and "5 new row(s)" in third.summary and third.dataset_rev == v3  # not 10: v2's rows were used


@integration
def test_a_new_base_model_revision_fires_once(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "base-rev", data_repo)

    def check(revision: str):
        return check_triggers.run(cfg(tmp_path, tracking_uri=mlflow_server, model_name="base-rev",
                                      base_revision=revision))  # fmt: skip

    assert not check("rev-a").fire
    assert check("rev-b").fire
    assert not check("rev-b").fire
    assert check("rev-c").summary == "base model: org/base@rev-a → org/base@rev-c"


@integration
def test_the_command_line_writes_what_argo_reads(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "cli-model", data_repo)
    args = ["--out", str(tmp_path / "out"), "--tracking-uri", mlflow_server, "--model-name", "cli-model",
            "--online-metric", "", "--min-feedback-rows", "0", "--base-revision", "rev-b",
            "--record", "false"]  # fmt: skip
    assert check_triggers.main(args) == 0
    outputs = {p.name: p.read_text() for p in (tmp_path / "out/_outputs").iterdir()}
    assert outputs["fire"] == "true" and outputs["triggers"] == "base-model"
    assert outputs["dataset-rev"] == data_repo.v2 and outputs["dataset-repo"] == str(data_repo.path)
    assert outputs["champion-version"] and "rev-b" in outputs["summary"]
    assert "retrain.fired.base-model" not in champion_tags(mlflow_server, "cli-model")  # --record false: a dry run


# --- integration: retries. Every attempt of one run (one --run-id) decides the same; another run is debounced. ------


class PodLost(BaseException):
    """The pod vanishing mid-step: the attempt stops there (not an Exception, so nothing in the step catches it)."""


def attempt(tmp_path: Path, uri: str, model: str, run_id: str, folder: str, revision: str = "rev-b") -> dict[str, str]:
    """One attempt from the command line, as Argo runs it; returns the output parameters Argo reads."""
    from workflows.retrain import CHECK_OUTPUTS

    out = tmp_path / folder
    args = ["--out", str(out), "--tracking-uri", uri, "--model-name", model, "--online-metric", "online.rougeL",
            "--min-feedback-rows", "5", "--dataset-rev", "main", "--base-revision", revision,
            "--run-id", run_id]  # fmt: skip
    assert check_triggers.main(args) == 0
    return {name: (out / "_outputs" / name).read_text() for name in CHECK_OUTPUTS}


def retry_cfg(tmp_path: Path, uri: str, model: str, run_id: str, revision: str = "rev-b") -> TriggersConfig:
    return cfg(tmp_path, tracking_uri=uri, model_name=model, online_metric="online.rougeL", min_feedback_rows=5,
               dataset_rev="main", base_revision=revision, run_id=run_id)  # fmt: skip


def die_at_write(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The attempt's pod is lost as it starts its n-th registry write (1: before any)."""
    real, calls = check_triggers.registry.upsert, []

    def upsert(*args: object, **kw: object) -> None:
        calls.append(args)
        if len(calls) == n:
            raise PodLost(f"pod lost before registry write {n}")
        real(*args, **kw)

    monkeypatch.setattr(check_triggers.registry, "upsert", upsert)


@integration
def test_every_attempt_of_one_run_fires_with_the_same_outputs(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "retry-same", data_repo, online=[0.40] * 5 + [0.30] * 3)
    first = attempt(tmp_path, mlflow_server, "retry-same", "wf-uid-1", "attempt-1")
    tags = champion_tags(mlflow_server, "retry-same")
    second = attempt(tmp_path, mlflow_server, "retry-same", "wf-uid-1", "attempt-2")
    assert first["fire"] == "true" and first["triggers"] == "quality.feedback.base-model"
    assert second == first
    assert champion_tags(mlflow_server, "retry-same") == tags  # the repeat wrote nothing new


@integration
def test_another_run_is_debounced_by_the_tags_of_the_first(mlflow_server: str, data_repo: DataRepo, tmp_path: Path):
    make_champion(mlflow_server, "retry-other", data_repo, online=[0.40] * 5 + [0.30] * 3)
    assert attempt(tmp_path, mlflow_server, "retry-other", "wf-uid-1", "run-1")["fire"] == "true"
    other = check_triggers.run(retry_cfg(tmp_path, mlflow_server, "retry-other", "wf-uid-2"))
    assert not other.fire and other.triggers == "none"
    assert "already fired" in other.reasons[0] and "0 new row(s)" in other.reasons[1]


@integration
def test_a_retry_after_the_pod_died_past_its_tags_still_fires(
    mlflow_server: str, data_repo: DataRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    make_champion(mlflow_server, "retry-lost", data_repo, online=[0.40] * 5 + [0.30] * 3)
    c = retry_cfg(tmp_path, mlflow_server, "retry-lost", "wf-uid-1")

    def lost(*args: object) -> None:
        raise PodLost("pod lost after the tags, before the outputs")

    with monkeypatch.context() as m:
        m.setattr(check_triggers, "write_result", lost)
        with pytest.raises(PodLost):
            check_triggers.run(c)
    assert champion_tags(mlflow_server, "retry-lost")["retrain.fired.quality"] == "online.rougeL"  # tags written
    assert not (tmp_path / "out").exists()  # no outputs: Argo retries the step

    retry = check_triggers.run(c)
    assert retry.fire and retry.triggers == "quality.feedback.base-model" and retry.dataset_rev == data_repo.v2
    assert (tmp_path / "out/_outputs/fire").read_text() == "true"
    assert not check_triggers.run(retry_cfg(tmp_path, mlflow_server, "retry-lost", "wf-uid-2")).fire


@integration
def test_a_retry_after_the_pod_died_between_its_tags_finishes_them(
    mlflow_server: str, data_repo: DataRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    make_champion(mlflow_server, "retry-torn", data_repo, online=[0.40] * 5 + [0.30] * 3)
    c = retry_cfg(tmp_path, mlflow_server, "retry-torn", "wf-uid-1")
    with monkeypatch.context() as m:
        die_at_write(m, 4)  # the decision, quality's two tags; not feedback's or base-model's
        with pytest.raises(PodLost):
            check_triggers.run(c)
    torn = champion_tags(mlflow_server, "retry-torn")
    assert "retrain.fired.quality" in torn and "retrain.fired.base-model" not in torn

    retry = check_triggers.run(c)
    assert retry.fire and retry.triggers == "quality.feedback.base-model"
    tags = champion_tags(mlflow_server, "retry-torn")
    assert (tags["retrain.fired.feedback"], tags["retrain.fired.base-model"]) == (data_repo.v2, "org/base@rev-b")
    assert not check_triggers.run(retry_cfg(tmp_path, mlflow_server, "retry-torn", "wf-uid-2")).fire


@integration
def test_a_retry_leaves_the_tags_of_a_later_run_alone(
    mlflow_server: str, data_repo: DataRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    make_champion(mlflow_server, "retry-overtaken", data_repo)
    a = cfg(tmp_path, tracking_uri=mlflow_server, model_name="retry-overtaken", base_revision="rev-b", run_id="a")
    with monkeypatch.context() as m:
        die_at_write(m, 2)  # run a decided (rev-b) and died before its debounce tags
        with pytest.raises(PodLost):
            check_triggers.run(a)
    # A manual run beside it, already configured for rev-c, decides and tags before a's retry.
    later = cfg(tmp_path, tracking_uri=mlflow_server, model_name="retry-overtaken", base_revision="rev-c", run_id="b")
    assert check_triggers.run(later).fire
    assert check_triggers.run(a).summary == "base model: org/base@rev-a → org/base@rev-b"  # a repeats its decision
    assert champion_tags(mlflow_server, "retry-overtaken")["retrain.fired.base-model"] == "org/base@rev-c"


@integration
def test_unreachable_mlflow_is_a_clear_error(tmp_path: Path):
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TriggerError, match=f"MLflow at {dead} is unreachable"):
        check_triggers.run(cfg(tmp_path, tracking_uri=dead, http_retries=0, base_revision="x"))
    assert not (tmp_path / "out").exists()
