"""The read-only MLflow user is read-only on a real server (issue 37 item 5): `mlflow server --app-name basic-auth`
set up as docs/security.md says ("Identities, secrets and the network": the server's default permission READ, the
editor `distillery-mlflow` creating the experiment and the registered model, so it owns them; the reader
`distillery-mlflow-read` granted nothing). Everything the reader's steps (evaluate, push-adapter, serve) could do to
the gate's result is tried with the reader's credentials: each write is refused with 403 and changes nothing; its
reads work. The same write by a user granted EDIT goes through, so the refusals are the permission's, not the test's.

    pytest -m integration tests/test_mlflow_permissions.py

Needs MLflow's auth app (`mlflow[auth]`: Flask-WTF, in the dev extra); without it the test fails naming the install.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from steps.core.registry import MODEL_NAME
from steps.register import RegisterConfig
from tests.conftest import console_script, free_port, stop, wait_http

pytestmark = pytest.mark.integration

ADMIN = ("admin", "admin-password-for-tests")
EDITOR = ("distillery-editor", "editor-password-for-tests")  # behind the Secret distillery-mlflow
READER = ("distillery-reader", "reader-password-for-tests")  # behind the Secret distillery-mlflow-read
GRANTED = ("granted-editor", "granted-password-for-tests")  # a user given EDIT on the model: the control
MODEL, EXPERIMENT = MODEL_NAME, RegisterConfig.experiment  # register's defaults


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server --app-name basic-auth` on 127.0.0.1: SQLite stores, artifacts proxied to a local folder (as the
    cluster proxies them to S3), MLflow's default permission READ."""
    try:
        import flask_wtf  # noqa: F401  (mlflow's auth app refuses to start without it)
    except ImportError:
        pytest.fail("MLflow's auth app needs Flask-WTF: pip install 'mlflow[auth]' (the dev extra has it)")
    work = tmp_path_factory.mktemp("mlflow-auth")
    ini = work / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{work}/auth.db\n"
        f"admin_username = {ADMIN[0]}\nadmin_password = {ADMIN[1]}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port, log = free_port(), work / "server.log"
    env = {
        **os.environ,
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "a-key-for-the-tests-csrf",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    exe = console_script("mlflow")
    with log.open("w") as f:
        proc = subprocess.Popen(
            [
                exe, "server", "--app-name", "basic-auth", "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--backend-store-uri", f"sqlite:///{work}/mlflow.db",
                "--artifacts-destination", str(work / "artifacts"),
            ],
            stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", proc, 180, log)
        for user, password in (EDITOR, READER, GRANTED):
            created = requests.post(
                f"{url}/api/2.0/mlflow/users/create", json={"username": user, "password": password}, auth=ADMIN
            )
            assert created.status_code == 200, created.text
        yield url
    finally:
        stop(proc)


def client(url: str, user: tuple[str, str]) -> Any:
    """An MlflowClient sending `user`'s basic-auth credentials (what the Secret's username/password keys set)."""
    from mlflow import MlflowClient

    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = user
    return MlflowClient(url)


def refused(attempt: Callable[[], object]) -> str:
    """'403' when the server refused the attempt with 403, else what happened."""
    from mlflow.exceptions import MlflowException

    try:
        attempt()
    except MlflowException as e:
        return "403" if "403" in str(e) else f"other error: {e}"
    except requests.HTTPError as e:
        return str(e.response.status_code)
    return "allowed"


def test_the_read_only_user_cannot_touch_the_gates_result(auth_server: str, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "")
    url = auth_server
    # The editor does what register does: a run with the GGUF, a version with its hash, the champion alias.
    editor = client(url, EDITOR)
    experiment = editor.create_experiment(EXPERIMENT)
    run = editor.create_run(experiment).info.run_id
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"the judged weights")
    editor.log_artifact(run, str(gguf), "model")
    editor.create_registered_model(MODEL)
    version = editor.create_model_version(MODEL, f"runs:/{run}/model", run).version
    editor.set_model_version_tag(MODEL, version, "gguf.sha256", "a" * 64)
    editor.set_registered_model_alias(MODEL, "champion", version)

    reader = client(url, READER)
    assert reader.get_model_version_by_alias(MODEL, "champion").version == version  # serve's and evaluate's reads
    assert reader.get_model_version(MODEL, version).tags["gguf.sha256"] == "a" * 64
    assert Path(reader.download_artifacts(run, "model/model.gguf", str(tmp_path / "down"))).read_bytes() == (
        b"the judged weights"
    )
    proxied = f"{url}/api/2.0/mlflow-artifacts/artifacts/{experiment}/{run}/artifacts/model/model.gguf"
    attempts: dict[str, Callable[[], object]] = {
        "move the champion alias": lambda: reader.set_registered_model_alias(MODEL, "champion", version),
        "delete the champion alias": lambda: reader.delete_registered_model_alias(MODEL, "champion"),
        "rewrite gguf.sha256": lambda: reader.set_model_version_tag(MODEL, version, "gguf.sha256", "b" * 64),
        "rewrite model.manifest": lambda: reader.set_model_version_tag(MODEL, version, "model.manifest", "{}"),
        "tag the model": lambda: reader.set_registered_model_tag(MODEL, "x", "y"),
        "register a version": lambda: reader.create_model_version(MODEL, f"runs:/{run}/model", run),
        "delete the version": lambda: reader.delete_model_version(MODEL, version),
        "rename the model": lambda: reader.rename_registered_model(MODEL, "elsewhere"),
        "start a run in the experiment": lambda: reader.create_run(experiment),
        "tag the run": lambda: reader.set_tag(run, "x", "y"),
        "upload to the run": lambda: reader.log_artifact(run, str(gguf), "more"),
        "overwrite the GGUF through the proxy": lambda: requests.put(
            proxied, data=b"other weights", auth=READER
        ).raise_for_status(),
        "delete the GGUF through the proxy": lambda: requests.delete(proxied, auth=READER).raise_for_status(),
    }
    outcomes = {name: refused(attempt) for name, attempt in attempts.items()}
    assert outcomes == dict.fromkeys(attempts, "403")

    editor = client(url, EDITOR)
    after = editor.get_model_version(MODEL, version)
    assert after.tags == {"gguf.sha256": "a" * 64} and after.aliases == ["champion"]
    assert [v.version for v in editor.search_model_versions(f"name='{MODEL}'")] == [version]
    again = Path(editor.download_artifacts(run, "model/model.gguf", str(tmp_path / "again")))
    assert again.read_bytes() == b"the judged weights"

    # The control: the same write by a user granted EDIT on the model goes through.
    grant = requests.post(
        f"{url}/api/3.0/mlflow/users/permissions/grant",
        json={"username": GRANTED[0], "resource_type": "registered_model", "resource_id": MODEL, "permission": "EDIT"},
        auth=ADMIN,
    )
    assert grant.status_code == 200, grant.text
    granted = client(url, GRANTED)
    assert refused(lambda: granted.set_model_version_tag(MODEL, version, "probe", "1")) == "allowed"

    # What READ does not stop: any user may create a registered model of a new name (and owns it). Hence the editor
    # creates the project's model before any reader credential exists (docs/security.md).
    assert refused(lambda: reader.create_registered_model("another-name")) == "allowed"
