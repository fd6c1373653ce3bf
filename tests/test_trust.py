"""A private CA in the optional ConfigMap distillery-trust (steps/core/trust.py): the templates mount it read-only into
every pod that runs the steps' code; with it, a step's TLS clients trust servers its CA signed — git (the command line
and DVC's clone, as check-triggers and fetch-dataset open the dataset repository), boto3 (S3, MinIO), requests
(MLflow), httpx (the hub), pyarrow (Ray Train's checkpoints) — besides the public CAs; without it nothing changes.
The servers are real, on 127.0.0.1, with a certificate from a CA made in the test (tests/tls.py): git's http-backend
and moto's S3 server over TLS.

    pytest tests/test_trust.py                   # the file's rules, the templates' mounts
    pytest -m integration tests/test_trust.py    # the clients against the TLS servers
"""

from __future__ import annotations

import os
import ssl
import subprocess
import tempfile
from pathlib import Path

import pytest

from steps import serve
from steps.check_triggers import _dvc_fs, read_at
from steps.core import cli, trust
from steps.train.launchers import ray_storage
from tests.conftest import AWS_ENV, free_port, running_moto
from tests.manifests import rendered_rayjob, serving_pods
from tests.test_admission import main_of, step_pods
from tests.tls import PrivateCA, https_git, make_ca
from workflows import security

# Other ways a process is told its CAs, which a test's environment must not carry in either.
OTHER_CA_VARIABLES = ("SSL_CERT_DIR", "CURL_CA_BUNDLE")


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCA:
    return make_ca(tmp_path_factory.mktemp("ca"), "127.0.0.1")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CA variable set as the test starts (a pod that sets none), and whatever `install` sets undone after it."""
    for variable in (*trust.VARIABLES, *OTHER_CA_VARIABLES):
        monkeypatch.setenv(variable, "")  # recorded first, so the undo removes what the test sets
        monkeypatch.delenv(variable)


def certificate_count(bundle: Path) -> int:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=bundle)
    return len(context.get_ca_certs())


# --- the file ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [None, "", "\n  \n"], ids=["absent", "empty", "blank"])
def test_without_the_file_nothing_changes(tmp_path: Path, content: str | None, clean_env: None):
    source = tmp_path / trust.KEY
    if content is not None:
        source.write_text(content)
    assert trust.install(source, tmp_path / "scratch") is None
    assert not (tmp_path / "scratch").exists()
    assert [v for v in trust.VARIABLES if v in os.environ] == []


def test_the_bundle_is_the_default_stores_and_the_private_ca(tmp_path: Path, private_ca: PrivateCA, clean_env: None):
    bundle = trust.install(private_ca.ca, tmp_path / "scratch")
    assert bundle == tmp_path / "scratch" / trust.BUNDLE
    assert {v: os.environ[v] for v in trust.VARIABLES} == dict.fromkeys(trust.VARIABLES, str(bundle))
    text = bundle.read_text()
    assert private_ca.ca.read_text().strip() in text
    defaults = trust.default_files()
    assert defaults, "neither certifi's nor the system's store found"
    for store in defaults:  # what each library trusted before is still trusted: every certificate of each store
        assert certificate_count(bundle) >= certificate_count(store) + 1
        assert all(block in text for block in trust.certificates(store.read_text(), str(store)))


def test_a_variable_the_pod_already_sets_wins(
    tmp_path: Path, private_ca: PrivateCA, clean_env: None, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/team/bundle.pem")
    bundle = trust.install(private_ca.ca, tmp_path)
    assert os.environ["REQUESTS_CA_BUNDLE"] == "/etc/team/bundle.pem"
    assert {v: os.environ[v] for v in trust.VARIABLES if v != "REQUESTS_CA_BUNDLE"} == dict.fromkeys(
        set(trust.VARIABLES) - {"REQUESTS_CA_BUNDLE"}, str(bundle)
    )


def non_pem(ca: PrivateCA) -> dict[str, tuple[bytes, str]]:
    """name -> (what a ConfigMap's ca.crt could wrongly hold, a words of the problem the error must name)."""
    der = subprocess.run(["openssl", "x509", "-in", str(ca.ca), "-outform", "DER"], check=True, capture_output=True,
                         timeout=30).stdout  # fmt: skip
    pem, key = ca.ca.read_bytes(), ca.key.read_bytes()
    body = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
    return {
        "DER": (der, "no PEM block"),
        "the CA's key": (key, "block 1 is a PRIVATE KEY"),
        "the certificate and its key": (pem + key, "block 2 is a PRIVATE KEY"),
        "base64 of something else": (pem + body, "block 2 is not a certificate OpenSSL reads"),
        "a note": (b"ask the platform team for the CA\n", "no PEM block"),
    }


def test_a_file_that_is_not_pem_certificates_is_refused_naming_the_configmap_and_the_fix(
    tmp_path: Path, private_ca: PrivateCA, clean_env: None
):
    for name, (content, problem) in non_pem(private_ca).items():
        source = tmp_path / name / trust.KEY
        source.parent.mkdir()
        source.write_bytes(content)
        with pytest.raises(trust.TrustError) as refused:
            trust.install(source, tmp_path / name / "scratch")
        message = str(refused.value)
        assert problem in message, (name, message)
        assert f"ConfigMap {trust.CONFIGMAP}, key {trust.KEY}" in message and trust.CREATE in message, name
        assert not (tmp_path / name / "scratch").exists(), name
        assert [v for v in trust.VARIABLES if v in os.environ] == [], name


# --- where the steps call it ------------------------------------------------------------------------------------------


def test_every_step_trusts_its_pod_s_ca_as_it_starts_and_stops_on_a_bad_file(
    tmp_path: Path, private_ca: PrivateCA, clean_env: None, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(trust, "FILE", str(private_ca.ca))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the pod's $TMPDIR
    assert cli.timed(lambda cfg: os.environ.get("SSL_CERT_FILE"))(None) == str(tmp_path / trust.BUNDLE)

    bad = tmp_path / "bad.crt"
    bad.write_bytes(private_ca.key.read_bytes())
    monkeypatch.setattr(trust, "FILE", str(bad))
    ran = []

    def step(cfg: None) -> None:
        ran.append(cfg)

    with pytest.raises(trust.TrustError, match=trust.CONFIGMAP):
        cli.timed(step)(None)
    assert ran == [], "the step ran with a trust file it could not read"


def test_serve_stops_on_a_bad_trust_file_naming_it(
    tmp_path: Path, private_ca: PrivateCA, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
):
    bad = tmp_path / "bad.crt"
    bad.write_bytes(private_ca.key.read_bytes())
    monkeypatch.setattr(trust, "FILE", str(bad))
    assert serve.main([]) == 1
    assert f"ConfigMap {trust.CONFIGMAP}" in capsys.readouterr().err


# --- the templates ----------------------------------------------------------------------------------------------------


def test_every_pod_that_runs_the_steps_code_mounts_the_trust_configmap_read_only():
    """Every step pod Argo would create (not the resource templates' argoexec-only pods), the Ray head and workers and
    the serving pods: the optional ConfigMap's one key, read-only, where the steps read it."""
    volume, mount = security.trust_volume(), security.trust_mount()
    assert volume["configMap"] == {"name": trust.CONFIGMAP, "optional": True,
                                   "items": [{"key": trust.KEY, "path": trust.KEY}]}  # fmt: skip
    assert mount == {"name": volume["name"], "mountPath": trust.DIR, "readOnly": True}
    assert f"{mount['mountPath']}/{volume['configMap']['items'][0]['path']}" == trust.FILE

    steps = {name: pod["spec"] for name, pod in step_pods().items()
             if not main_of(pod)["image"].startswith("quay.io/argoproj/argoexec")}  # fmt: skip
    job = rendered_rayjob()["spec"]["rayClusterSpec"]
    ray = {"ray-head": job["headGroupSpec"]["template"]["spec"]} | {
        f"ray-{g['groupName']}": g["template"]["spec"] for g in job["workerGroupSpecs"]
    }
    serving = {f"serve-{alias}": pod["spec"] for alias, pod in serving_pods().items()}
    assert len(steps) > 20 and len(ray) >= 5 and len(serving) == 2
    missing = {}
    for name, spec in {**steps, **ray, **serving}.items():
        container = next(c for c in spec["containers"] if c["name"] in ("main", "ray-head", "ray-worker", "llama-cpp"))
        if volume not in spec.get("volumes", []) or mount not in container.get("volumeMounts", []):
            missing[name] = [v["name"] for v in spec.get("volumes", [])]
    assert missing == {}


# --- the clients, against real TLS servers ----------------------------------------------------------------------------


def cause_chain(error: BaseException) -> str:
    """Every message of `error` and the exceptions it came from."""
    seen = []
    while error is not None and len(seen) < 20:
        seen.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return " <- ".join(seen)


@pytest.fixture(scope="module")
def dataset_repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with one bare dataset repository, `data.git`, whose main holds `feedback.jsonl`."""
    work = tmp_path_factory.mktemp("git")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(work / "src")], check=True, timeout=30)
    (work / "src" / "feedback.jsonl").write_text('{"id": "1"}\n')
    for args in (["add", "feedback.jsonl"], [*ident, "commit", "-q", "-m", "feedback"]):
        subprocess.run(["git", *args], cwd=work / "src", check=True, timeout=30)
    subprocess.run(["git", "clone", "-q", "--bare", str(work / "src"), str(work / "repos" / "data.git")], check=True,
                   timeout=30)  # fmt: skip
    return work / "repos"


@pytest.mark.integration
def test_git_over_https_trusts_the_private_ca_only_once_installed(
    dataset_repos: Path, private_ca: PrivateCA, tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
):
    """git ls-remote (the command line publish and push-adapter use) and DVC's clone of the repository, as
    check-triggers opens it (fetch-dataset's is the same DVCFileSystem call)."""
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site"))
    with https_git(dataset_repos, "127.0.0.1", free_port(), private_ca) as base:
        url = f"{base}/data.git"

        def ls_remote() -> subprocess.CompletedProcess:  # the step's child: inherits its environment
            return subprocess.run(["git", "ls-remote", url, "main"], capture_output=True, text=True, timeout=60)

        def dvc_read() -> bytes:  # as check-triggers reads the feedback file (DVC clones on first use)
            fs = _dvc_fs(url, "main")
            fs.repo.scm.resolve_rev("main")
            return read_at(fs, "feedback.jsonl")

        refused = ls_remote()
        assert refused.returncode != 0 and "certificate" in refused.stderr, refused.stderr
        with pytest.raises(Exception) as failed:
            dvc_read()
        assert "CERTIFICATE_VERIFY_FAILED" in cause_chain(failed.value), cause_chain(failed.value)

        trust.install(private_ca.ca, tmp_path / "scratch")
        listed = ls_remote()
        assert listed.returncode == 0 and "refs/heads/main" in listed.stdout, listed.stderr
        assert dvc_read() == b'{"id": "1"}\n'


def https_clients(endpoint: str, bucket: str) -> dict[str, str]:
    """Each client's answer from the S3 server over TLS: "ok", or its error. boto3 (S3, as dvc-s3 and MLflow's
    artifacts reach it), requests (MLflow's REST client), httpx (huggingface_hub's), pyarrow (Ray Train's storage, as
    the train step builds it)."""
    import boto3
    import httpx2
    import requests
    from botocore.config import Config

    def boto() -> None:
        session = boto3.session.Session(**{k.lower(): v for k, v in AWS_ENV.items() if k != "AWS_DEFAULT_REGION"})
        client = session.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                config=Config(retries={"max_attempts": 1}))  # fmt: skip
        client.create_bucket(Bucket=bucket)

    def arrow() -> None:
        path, s3 = ray_storage(f"s3://{bucket}/checkpoints")
        s3.get_file_info(path)

    calls = {
        "boto3": boto,
        "requests": lambda: requests.get(f"{endpoint}/moto-api/", timeout=10).raise_for_status(),
        "httpx": lambda: httpx2.get(f"{endpoint}/moto-api/", timeout=10).raise_for_status(),
        "pyarrow": arrow,
    }
    answers = {}
    for name, call in calls.items():
        try:
            call()
            answers[name] = "ok"
        except Exception as e:
            answers[name] = cause_chain(e)
    return answers


@pytest.mark.integration
def test_s3_mlflow_and_hub_clients_trust_the_private_ca_only_once_installed(
    private_ca: PrivateCA, tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
):
    with running_moto("127.0.0.1", tmp_path / "moto.log", 30, private_ca) as endpoint:
        for variable, value in {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint}.items():  # the distillery-s3 Secret's
            monkeypatch.setenv(variable, value)
        before = https_clients(endpoint, "before")
        refused = {n: a for n, a in before.items() if "CERTIFICATE_VERIFY_FAILED" in a or "curlCode: 60" in a}
        assert refused == before, before  # each one refused the server for its certificate, not another reason

        trust.install(private_ca.ca, tmp_path / "scratch")
        assert https_clients(endpoint, "after") == dict.fromkeys(before, "ok")
