"""push-adapter: the adapter and its model card into a git repository over HTTP(S), against git's own `git
http-backend` behind a small WSGI server on 127.0.0.1 that demands basic auth (as Gitea does for a push), and the
version's lineage from a real MLflow server (integration tier); the URL rules (unit tier).

pytest tests/test_push_adapter.py                     # unit tier
pytest -m integration tests/test_push_adapter.py      # needs the MLflow server from conftest, and git
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from steps import push_adapter, register
from steps.core.io import environment, sha256_file
from tests.test_registry import pipeline_outputs, reg_config

integration = pytest.mark.integration
TOKEN = "gt-7f3a9c1e5b2d4086"  # a stand-in for a Gitea access token


RUN = "wf-push"  # the workflow uid register and push-adapter are given alike


def cfg(tmp_path: Path, url: str, **over: object) -> push_adapter.PushConfig:
    folders = {k: tmp_path / k for k in ("registration", "adapter", "evaluation", "gguf", "dataset")}
    over.setdefault("run_id", RUN)
    return push_adapter.PushConfig(adapter_repo=url, out=tmp_path / "out", **folders, **over)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://gitea.home/ml/a.git", "plain http would send the token in clear text"),
        ("https://me:secret@gitea.home/ml/a.git", "--adapter-repo carries credentials"),
        ("ssh://git@gitea.home/ml/a.git", "use https://"),
    ],
)
def test_a_url_that_would_leak_the_token_or_is_not_https_is_refused(tmp_path: Path, url: str, expected: str):
    assert any(expected in p for p in push_adapter.config_problems(cfg(tmp_path, url)))
    assert push_adapter.config_problems(cfg(tmp_path, "http://127.0.0.1:3000/ml/a.git")) == []  # loopback: tests


def test_the_documented_local_command_names_every_missing_folder_with_the_stage_that_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
):
    doc = push_adapter.__doc__.split("GITEA_TOKEN=… python -m steps.push_adapter ", 1)[1].split("\n\n", 1)[0]
    argv = shlex.split(doc.replace("\\\n", " "))
    with contextlib.chdir(tmp_path):  # a checkout with no run yet: none of the out/ folders exist
        assert push_adapter.main(argv) == 1
    said = capsys.readouterr().err
    for output, stage in (("registration", "register"), ("adapter", "train"), ("evaluation", "evaluate"),
                          ("gguf", "convert-gguf"), ("dataset", "fetch-dataset")):  # fmt: skip
        assert f"--{output} out/{output}: no " in said and f"the {stage} stage writes this folder" in said
    assert "run train first" not in said


def test_the_token_reaches_git_only_through_its_environment_scoped_to_the_repository():
    env = push_adapter.auth_env("https://gitea.home/ml/a.git", TOKEN)
    assert env["GIT_CONFIG_KEY_0"] == "http.https://gitea.home/ml/a.git.extraHeader"
    header = env["GIT_CONFIG_VALUE_0"].removeprefix("Authorization: Basic ")
    assert base64.b64decode(header).decode() == f"distillery:{TOKEN}"
    assert env["GIT_TERMINAL_PROMPT"] == "0"


def test_without_a_repository_nothing_is_read_or_pushed_and_the_result_says_so(tmp_path: Path):
    """The local run's default (adapter-repo empty; DVC runs every stage): no input is needed, nothing is checked."""
    result = push_adapter.run(cfg(tmp_path, "", token_file=str(tmp_path / "absent")))
    assert (result.pushed, result.commit, result.path) == (False, "", "")
    assert json.loads((tmp_path / "out/result.json").read_text())["pushed"] is False
    assert push_adapter.config_problems(cfg(tmp_path, "")) == []


def test_the_token_file_is_read_before_the_environment_and_a_missing_one_names_the_secret(tmp_path: Path):
    (tmp_path / "token").write_text(TOKEN + "\n")
    with environment({push_adapter.TOKEN_ENV: "from-the-environment"}):
        assert push_adapter.read_token(str(tmp_path / "token")) == TOKEN  # the mounted Secret, its newline dropped
        assert push_adapter.read_token("") == "from-the-environment"  # the local run
        with pytest.raises(push_adapter.PushError, match="create the Secret distillery-gitea with key token"):
            push_adapter.read_token(str(tmp_path / "absent"))


# --- integration: git's http-backend on loopback, a real MLflow server ----------------------------------------------


class GitServer:
    """`git http-backend` (CGI) behind wsgiref on 127.0.0.1: basic auth required, every request line recorded."""

    def __init__(self, root: Path, user: str, token: str) -> None:
        self.root = root
        self.expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        self.requests: list[str] = []
        backend = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
        self.backend = str(Path(backend) / "git-http-backend")

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args: object) -> None:
                return

        self.httpd = make_server("127.0.0.1", 0, self.app, handler_class=Quiet)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def app(self, environ: dict, start_response) -> list[bytes]:
        self.requests.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}?{environ.get('QUERY_STRING', '')}")
        if environ.get("HTTP_AUTHORIZATION") != self.expected:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="gitea"')])
            return [b"unauthorized\n"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        cgi = {
            "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1", "REMOTE_USER": "distillery",
            "PATH_INFO": environ["PATH_INFO"], "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "QUERY_STRING": environ.get("QUERY_STRING", ""), "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)), "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", ""), "PATH": os.environ["PATH"],
        }  # fmt: skip
        done = subprocess.run([self.backend], input=body, env=cgi, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        headers = [tuple(h.split(": ", 1)) for h in head.decode().split("\r\n") if h]
        status = next((v for k, v in headers if k == "Status"), "200 OK")
        start_response(status, [(k, v) for k, v in headers if k != "Status"])
        return [payload]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    root = tmp_path / "repos"
    subprocess.run(["git", "init", "--quiet", "--bare", str(root / "ml/adapters.git")], check=True)
    server = GitServer(root, "distillery", TOKEN)
    try:
        yield server
    finally:
        server.stop()


def inputs(tmp_path: Path, uri: str, name: str = "pushed-adapter") -> None:
    """register's output for a real version (a stand-in GGUF: nothing loads it here), from a train output folder
    holding an adapter, and each folder push-adapter reads where the run left it."""
    gguf = tmp_path / "candidate-Q8_0.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    outputs = pipeline_outputs(tmp_path / "p", gguf)
    (outputs["adapter"] / "adapter_config.json").write_text(json.dumps({"r": 16, "peft_type": "LORA"}))
    (outputs["adapter"] / "adapter_model.safetensors").write_bytes(b"\x08\x00" + b"w" * 64)
    register.run(reg_config(outputs, tmp_path / "registration", uri, name, RUN))
    for name in ("adapter", "evaluation", "gguf", "dataset"):
        os.symlink(outputs[name], tmp_path / name)


def git_spy(folder: Path) -> Path:
    """A `git` first on PATH that records each command line, and the repository's .git/config as it stands, before
    running the real git; the record's path."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    record = folder / "git-calls.log"
    folder.mkdir(parents=True, exist_ok=True)
    spy = folder / "git"
    spy.write_text(f'#!/bin/sh\necho "argv: $*" >> {record}\n[ -f .git/config ] && cat .git/config >> {record}\n'
                   f'exec {real} "$@"\n')  # fmt: skip
    spy.chmod(0o755)
    return record


def commits(bare: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(bare), "rev-list", "main"], capture_output=True, text=True).stdout.split()


@integration
def test_the_adapter_and_its_card_are_pushed_once_with_the_token_only_in_a_header(
    mlflow_server: str, git_server: GitServer, tmp_path: Path, capfd: pytest.CaptureFixture
):
    inputs(tmp_path, mlflow_server)
    url = f"{git_server.url}/ml/adapters.git"
    bare = git_server.root / "ml/adapters.git"
    record = git_spy(tmp_path / "spy")
    with environment({push_adapter.TOKEN_ENV: TOKEN, "PATH": f"{tmp_path / 'spy'}:{os.environ['PATH']}"}):
        first = push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
        second = push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    assert (first.pushed, second.pushed) == (True, False)
    assert commits(bare) == [first.commit] == [second.commit]  # the same version twice: one commit

    files = subprocess.run(["git", "-C", str(bare), "ls-tree", "-r", "--name-only", "main"], capture_output=True,
                           text=True).stdout.split()  # fmt: skip
    assert files == [f"{first.path}/{n}" for n in ("README.md", "adapter_config.json", "adapter_model.safetensors")]
    card = subprocess.run(["git", "-C", str(bare), "show", f"main:{first.path}/README.md"], capture_output=True,
                          text=True).stdout  # fmt: skip
    assert "`models:/pushed-adapter/1`" in card and "| ROUGE-L | 0.3 |" in card  # registry version, scores
    assert "- passed: True" in card  # parity
    assert "`data/summaries/card.md` in https://example.org/data.git at commit `cccc" in card  # the data card
    assert '"gguf.sha256":' in card and '"dataset.hash": "h1"' in card  # lineage as MLflow recorded it

    # The token went as a header: never in a URL the server saw, a git command line or .git/config, or a printed line.
    calls = record.read_text()
    assert " push --quiet origin HEAD:refs/heads/main" in calls and TOKEN not in calls
    assert base64.b64encode(f"distillery:{TOKEN}".encode()).decode() not in calls
    assert git_server.requests and not [r for r in git_server.requests if TOKEN in r]
    assert any(r.startswith("POST /ml/adapters.git/git-receive-pack") for r in git_server.requests)
    out, err = capfd.readouterr()
    assert TOKEN not in out + err
    assert TOKEN not in (bare / "config").read_text()


@integration
def test_a_refused_token_fails_clearly_and_pushes_nothing(mlflow_server: str, git_server: GitServer, tmp_path: Path):
    inputs(tmp_path, mlflow_server)
    (tmp_path / "token").write_text("wrong-token\n")  # as the cluster gives it: the mounted Secret's file
    with pytest.raises(push_adapter.PushError) as e:
        url = f"{git_server.url}/ml/adapters.git"
        push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server, token_file=str(tmp_path / "token")))
    assert "git ls-remote" in str(e.value) and "the server refused the credentials" in str(e.value)
    assert "wrong-token" not in str(e.value)
    assert commits(git_server.root / "ml/adapters.git") == []


@integration
def test_a_card_whose_scores_or_decision_differ_from_the_registry_is_not_pushed(
    mlflow_server: str, git_server: GitServer, tmp_path: Path
):
    # The card's decision and scores come from evaluate's files in the run's prefix, which every step's role writes:
    # rewritten after register, they went to the adapters' repository as the version's (issue 37). The registry's
    # tags are what register recorded from the verified decision.
    inputs(tmp_path, mlflow_server)
    url = f"{git_server.url}/ml/adapters.git"
    evaluation = tmp_path / "p/evaluation"
    honest = {name: json.loads((evaluation / name).read_text()) for name in ("result.json", "decision.json")}
    # (The decision's outcome is held to the version's eval.decision before the card is made: verdict.check_version.)
    forgeries = {
        "eval.rougeL": ("result.json", {**honest["result.json"], "rouge_l_candidate": 0.99}, "eval.rougeL: folder"),
        "eval.decision": ("decision.json", {**honest["decision.json"], "passed": False}, "eval.decision=pass, but"),
    }
    for tag, (name, forged, said) in forgeries.items():
        (evaluation / name).write_text(json.dumps(forged))
        with environment({push_adapter.TOKEN_ENV: TOKEN}), pytest.raises((push_adapter.PushError, ValueError)) as e:
            push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
        assert said in str(e.value) and "models:/pushed-adapter/1" in str(e.value), tag
        assert commits(git_server.root / "ml/adapters.git") == [], tag
        (evaluation / name).write_text(json.dumps(honest[name]))
    with environment({push_adapter.TOKEN_ENV: TOKEN}):
        assert push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server)).pushed


@integration
def test_a_result_json_naming_a_version_that_failed_the_gate_is_not_pushed(
    mlflow_server: str, git_server: GitServer, tmp_path: Path
):
    # register's result.json lies in the run's prefix, which every step's role writes. Pointed at an earlier version
    # that failed the gate, with that run's evaluation folder beside it (so the card agrees with that version's tags),
    # push-adapter pushed this run's adapter under the failed version's name and card. The version is the one the
    # registry says this run registered (tag distillery.run_id = the workflow uid, which no step's output reaches).
    name = "forged-push"
    failed_gguf = tmp_path / "failed/candidate-Q8_0.gguf"
    failed_gguf.parent.mkdir()
    failed_gguf.write_bytes(b"GGUF" + b"failed" * 200)
    failed = pipeline_outputs(tmp_path / "failed/p", failed_gguf, passed=False, rouge=0.21)
    earlier = register.run(reg_config(failed, tmp_path / "failed/registration", mlflow_server, name, "wf-earlier"))
    inputs(tmp_path, mlflow_server, name)
    honest = json.loads((tmp_path / "registration/result.json").read_text())
    assert (earlier.model_version, honest["model_version"]) == ("1", "2")
    url = f"{git_server.url}/ml/adapters.git"

    (tmp_path / "registration/result.json").write_text(json.dumps({**honest, "model_version": earlier.model_version}))
    os.unlink(tmp_path / "evaluation")
    os.symlink(failed["evaluation"], tmp_path / "evaluation")
    with environment({push_adapter.TOKEN_ENV: TOKEN}), pytest.raises(push_adapter.PushError) as e:
        push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    assert "names version 1 of forged-push, but the version the registry says run wf-push registered is 2" in str(
        e.value
    )
    assert commits(git_server.root / "ml/adapters.git") == []

    # result.json put back, the failed run's decision still beside it: not about the version this run registered.
    (tmp_path / "registration/result.json").write_text(json.dumps(honest))
    with environment({push_adapter.TOKEN_ENV: TOKEN}), pytest.raises(ValueError, match="not about this version"):
        push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    assert commits(git_server.root / "ml/adapters.git") == []

    os.unlink(tmp_path / "evaluation")
    os.symlink(tmp_path / "p/evaluation", tmp_path / "evaluation")
    with environment({push_adapter.TOKEN_ENV: TOKEN}):
        pushed = push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    assert pushed.pushed and pushed.path == "forged-push/v2"


@integration
def test_an_adapter_file_changed_after_register_is_not_pushed(
    mlflow_server: str, git_server: GitServer, tmp_path: Path
):
    # train's folder lies in the run's prefix, which every step's role writes: rewritten after register, its bytes
    # went to the adapters' repository under the version's name and card. register records the sha256 of every file
    # it logs from that folder on the version (adapter.manifest); push-adapter pushes only those bytes.
    inputs(tmp_path, mlflow_server)
    url = f"{git_server.url}/ml/adapters.git"
    weights = tmp_path / "adapter/adapter_model.safetensors"
    honest = weights.read_bytes()
    recorded = sha256_file(weights)
    weights.write_bytes(honest[:-1] + b"x")  # one byte of the LoRA weights
    with environment({push_adapter.TOKEN_ENV: TOKEN}), pytest.raises(push_adapter.PushError) as e:
        push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    said = str(e.value)
    assert f"adapter_model.safetensors: sha256 {sha256_file(weights)}, recorded {recorded}" in said
    assert "models:/pushed-adapter/1 (adapter.manifest)" in said
    assert commits(git_server.root / "ml/adapters.git") == []
    assert git_server.requests == []  # refused before the repository was asked anything

    weights.write_bytes(honest)
    (tmp_path / "adapter/chat_template.jinja").write_text("{{ messages }}")  # a file train did not write
    with environment({push_adapter.TOKEN_ENV: TOKEN}), pytest.raises(push_adapter.PushError) as e:
        push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    assert "chat_template.jinja: not in the recorded manifest (added)" in str(e.value)
    assert commits(git_server.root / "ml/adapters.git") == []

    (tmp_path / "adapter/chat_template.jinja").unlink()
    with environment({push_adapter.TOKEN_ENV: TOKEN}):
        pushed = push_adapter.run(cfg(tmp_path, url, tracking_uri=mlflow_server))
    assert pushed.pushed
    stored = subprocess.run(["git", "-C", str(git_server.root / "ml/adapters.git"), "show",
                             f"main:{pushed.path}/adapter_model.safetensors"], capture_output=True).stdout  # fmt: skip
    assert stored == honest
