"""MLflow credentials never cross the network in clear text: every step resolves its tracking server through
`mlflow_client.tracking_uri`, which refuses a token or password bound for plain http on another host before anything
is sent (#13: credentials by reference, over HTTPS)."""

from __future__ import annotations

import pytest

from steps import check_triggers, propose
from steps.core import mlflow_client

REMOTE_HTTP = "http://mlflow.mlflow.svc.cluster.local:5000"


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch):
    for name in (*mlflow_client.CREDENTIAL_VARIABLES, mlflow_client.ALLOW_HTTP_CREDENTIALS, "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("variable", mlflow_client.CREDENTIAL_VARIABLES)
def test_credentials_for_plain_http_on_another_host_are_refused(monkeypatch, variable):
    monkeypatch.setenv(variable, "s3cr3t-value")
    with pytest.raises(ValueError) as e:
        mlflow_client.tracking_uri(REMOTE_HTTP)
    assert variable in str(e.value) and REMOTE_HTTP in str(e.value) and "https" in str(e.value)
    assert "s3cr3t-value" not in str(e.value)
    # the same server named by the environment variable instead of the flag
    monkeypatch.setenv("MLFLOW_TRACKING_URI", REMOTE_HTTP)
    with pytest.raises(ValueError):
        mlflow_client.tracking_uri("")


@pytest.mark.parametrize(
    "uri",
    ["https://mlflow.example.org", "http://127.0.0.1:5000", "http://localhost:5000", "http://[::1]:5000", ""],
)
def test_https_loopback_or_no_server_are_accepted_with_credentials(monkeypatch, uri):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "s3cr3t-value")
    assert mlflow_client.tracking_uri(uri) == uri


def test_plain_http_without_credentials_or_with_the_explicit_opt_out_is_accepted(monkeypatch):
    assert mlflow_client.tracking_uri(REMOTE_HTTP) == REMOTE_HTTP
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cr3t-value")
    monkeypatch.setenv(mlflow_client.ALLOW_HTTP_CREDENTIALS, "1")
    assert mlflow_client.tracking_uri(REMOTE_HTTP) == REMOTE_HTTP


def test_steps_end_with_the_clear_error_not_a_traceback(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "s3cr3t-value")
    registration, evaluation = tmp_path / "registration", tmp_path / "evaluation"
    registration.mkdir()
    evaluation.mkdir()
    argv = ["--registration", str(registration), "--evaluation", str(evaluation), "--out", str(tmp_path / "out")]
    assert propose.main([*argv, "--tracking-uri", REMOTE_HTTP]) == 1
    assert "clear text" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    # check-triggers reports its own error type (its main prints TriggerErrors and exits 1)
    with pytest.raises(check_triggers.TriggerError, match="clear text"):
        check_triggers.run(check_triggers.TriggersConfig(out=tmp_path / "t", tracking_uri=REMOTE_HTTP))


def test_every_step_that_talks_to_the_registry_takes_the_same_mlflow_settings():
    """One definition of --tracking-uri and the --http-* retry flags: MLflow's own defaults retry a dead server for
    minutes, so a step that declared its own tracking URI without them would hang a cron for that long."""
    import dataclasses
    import importlib
    import pkgutil

    import steps
    from steps.core.mlflow_client import MlflowSettings

    talking = {}
    for info in pkgutil.iter_modules(steps.__path__):
        module = importlib.import_module(f"steps.{info.name}")
        for obj in vars(module).values():
            home = getattr(obj, "__module__", "")
            ours = home == module.__name__ or home.startswith(f"{module.__name__}.")  # a stage package's own module
            ours = ours and dataclasses.is_dataclass(obj) and isinstance(obj, type)
            if ours and "tracking_uri" in {f.name for f in dataclasses.fields(obj)}:
                talking[obj.__name__] = issubclass(obj, MlflowSettings)
    # evaluate's is optional (no registry: no champion), with a help text of its own.
    talking.pop("EvaluateConfig")
    assert {"RegisterConfig", "ProposeConfig", "PromoteConfig", "OnlineConfig", "TriggersConfig"} <= set(talking)
    assert [name for name, ok in talking.items() if not ok] == []


def test_a_retry_setting_outside_mlflow_s_limits_is_refused_before_any_request(tmp_path):
    from steps.promote import PromoteConfig, PromoteError, run

    with pytest.raises(PromoteError, match="--http-retries 11"):
        run(PromoteConfig(out=tmp_path / "out", tracking_uri="http://127.0.0.1:9", http_retries=11))
