"""Serving by alias: the decoding a request gets and the settings refused; the serving set in infra/serving/ (the
HTTPRoute against Gateway API's CRD, the canary share as one number, the pods under `restricted` Pod Security, the
command line the pods run) (unit tier); against a real MLflow server and
S3, `python -m steps.serve` running llama.cpp's server on 127.0.0.1 for the challenger, answering as the registry's
pyfunc model answers, following the alias to a new version, and refusing a GGUF changed in the artifact store
(integration tier).

pytest tests/test_serve.py                     # unit tier
pytest -m integration tests/test_serve.py      # needs the MLflow and S3 servers from conftest, and llama.cpp
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from steps import register, serve
from steps.contract import serving_config
from steps.contract.prompting import messages
from steps.core.cli import build_parser, parse_config
from steps.core.io import sha256_file
from steps.serve import front
from tests.conftest import ROOT, free_port, s3_client, stop
from tests.manifests import serving_docs, serving_pods
from tests.pod_security import check
from tests.test_infra_crds import SCHEMAS, crd_validator, errors
from tests.test_networkpolicy import Endpoint, allowed
from tests.test_registry import DOCUMENT, pipeline_outputs, reg_config
from workflows import serving

integration = pytest.mark.integration
NAME = "served-by-alias"
# Line starts of llama.cpp's verbose output: model loading and the timings it prints after every request.
LLAMA_DEBUG = ("llama_model_loader:", "llama_perf_context_print:", "llama_context:", "load_tensors:")


def test_a_request_gets_the_served_decoding_where_it_sets_none():
    served = serving_config.SERVING
    body = front.checked_body(json.dumps({"messages": [], "max_tokens": 8, "stop": None}).encode(), served, False)
    assert json.loads(body) == {
        "messages": [],
        "max_tokens": 8,  # the request's own
        "temperature": served.temperature,
        "top_k": served.top_k,
        "seed": served.seed,
        **({"stop": list(served.stop)} if served.stop else {"stop": None}),
    }


@pytest.mark.parametrize(
    ("body", "allow_grammar", "expected"),
    [
        (b"not json", False, "not JSON"),
        (b"[1]", False, "JSON list"),
        (b'{"max_tokens": 100000}', False, "max_tokens 100000: use a whole number from 1 to"),
        (b'{"max_tokens": "64"}', False, "max_tokens '64'"),
        (b'{"max_tokens": true}', False, "max_tokens True"),
        (b'{"grammar": "root ::= \\"a\\""}', False, "grammar: not served here"),
        (b'{"response_format": {"type": "json_object"}}', False, "response_format: not served here"),
    ],
)
def test_a_completion_body_outside_the_served_bounds_is_refused_saying_why(body, allow_grammar, expected):
    with pytest.raises(front.Refused, match=re.escape(expected)) as refused:
        front.checked_body(body, serving_config.SERVING, allow_grammar)
    assert refused.value.status == 400


# The audit's crash: a schema pattern llama.cpp's grammar compiler segfaulted on, sent as tool calling (and legacy
# function calling); each refused here, naming the field, whatever --allow-grammar says.
CRASH_SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^([a-z]{0,3000})$"}}}
CRASH_BODIES = {
    "tools": {"tools": [{"type": "function", "function": {"name": "f", "parameters": CRASH_SCHEMA}}],
              "tool_choice": {"type": "function", "function": {"name": "f"}}},
    "functions": {"functions": [{"name": "f", "parameters": CRASH_SCHEMA}], "function_call": {"name": "f"}},
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CRASH_BODIES))
@pytest.mark.parametrize("allow_grammar", [False, True])
def test_tool_and_function_calling_are_refused_naming_the_field(kind: str, allow_grammar: bool):
    body = json.dumps({"messages": messages(DOCUMENT), **CRASH_BODIES[kind]}).encode()
    with pytest.raises(front.Refused) as refused:
        front.checked_body(body, serving_config.SERVING, allow_grammar)
    assert refused.value.status == 400
    assert str(refused.value).startswith(", ".join(CRASH_BODIES[kind])), str(refused.value)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {"messages": [], "logit_bias": {"1": 100}}, "'logit_bias'"),
        ("/v1/chat/completions", {"messages": [], "mirostat_mode": 2}, "'mirostat_mode'"),
        ("/v1/completions", {"prompt": "a", "messages": []}, "'messages'"),
    ],
)
def test_a_field_the_server_does_not_forward_is_refused_by_name(path: str, body: dict, field: str):
    with pytest.raises(front.Refused) as refused:
        front.checked_body(json.dumps(body).encode(), serving_config.SERVING, False, path)
    assert refused.value.status == 400 and field in str(refused.value) and path in str(refused.value)


def test_a_plain_completion_request_is_forwarded():
    body = front.checked_body(b'{"prompt": "a", "max_tokens": 4}', serving_config.SERVING, False, "/v1/completions")
    assert json.loads(body)["prompt"] == "a"


def test_grammar_passes_only_when_configured():
    body = b'{"grammar": "root ::= \\"a\\""}'
    assert json.loads(front.checked_body(body, serving_config.SERVING, True))["grammar"] == 'root ::= "a"'


def read(data: bytes, max_body: int = 1024, limit: int = 512):
    async def go():
        reader = asyncio.StreamReader(limit=limit)
        reader.feed_data(data)
        reader.feed_eof()
        return await front.read_request(reader, max_body)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", 413),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST /v1/completions HTTP/1.1\r\nX-Long: " + b"a" * 1000 + b"\r\n\r\n", 431),
        (b"GARBAGE\r\n\r\n", 400),
        # isdigit() holds for a superscript two, which int() refuses: the connection closed with no status (issue 37)
        ("POST /v1/completions HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\nab".encode("latin-1"), 400),
    ],
)
def test_a_request_is_refused_before_its_body_is_read_when_it_breaks_a_bound(data: bytes, status: int):
    with pytest.raises(front.Refused) as refused:
        read(data)
    assert refused.value.status == status


def test_a_request_within_the_bounds_is_read_whole():
    request = read(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nAuthorization: Bearer t\r\n\r\n{}")
    assert (request.method, request.path, request.body, request.headers["authorization"]) == (
        "POST", "/v1/completions", b"{}", "Bearer t")  # fmt: skip


@pytest.mark.parametrize("depth", [33, 50_000])
def test_deeply_nested_json_is_refused_with_a_status(depth: int):
    # 50,000-deep JSON raised RecursionError out of the parser: the connection closed with no status (issue 37).
    body = b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(front.Refused, match="nested") as refused:
        front.checked_body(body, serving_config.SERVING, False)
    assert refused.value.status == 400
    assert front.checked_body(b'{"messages": [{"role": "user", "content": "a"}]}', serving_config.SERVING, False)


def test_an_upstream_error_reaches_the_client_without_its_traceback_or_paths():
    crash = b'{"error": {"message": "Traceback (most recent call last):\\n  File \\"/opt/venv/lib/x.py\\""}}'
    told = front.upstream_error(500, crash)
    assert "Traceback" not in told and "/opt" not in told and "(500)" in told
    refusal = b'{"error": {"message": "model /work/models/7/m.gguf: context of 2048 exceeded\\nmore"}}'
    told = front.upstream_error(400, refusal)
    assert told == "the model server refused the request (400): model <path>: context of 2048 exceeded"
    assert front.upstream_error(422, b"not json") == "the model server refused the request (422)"


def raw(port: int, data: bytes) -> bytes:
    """What the server answers to `data` sent as is, until it closes the connection."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
    return got


def test_bad_requests_and_a_missing_token_file_get_a_status_not_a_closed_connection(tmp_path: Path):
    tokens = tmp_path / "clients"
    tokens.write_text("client-token\n")
    cfg = serve.ServeConfig(port=free_port(), token_file=str(tokens), read_seconds=2)
    served = front.Front(serve.Supervisor(cfg), cfg)
    served.start()
    try:
        auth = b"Authorization: Bearer client-token\r\n"
        superscript = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\nab".encode("latin-1")
        assert raw(cfg.port, superscript).startswith(b"HTTP/1.1 400 ")
        models = b"GET /v1/models HTTP/1.1\r\n" + auth + b"\r\n"
        assert raw(cfg.port, models).startswith(b"HTTP/1.1 503 ")  # nothing served yet: 503, token checked first
        tokens.unlink()  # the Secret unmounted under a running server
        answer = raw(cfg.port, models)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"cannot check tokens" in answer
        assert str(tmp_path).encode() not in answer
    finally:
        served.stop()


def test_tokens_come_from_the_file_and_follow_it_when_it_changes(tmp_path: Path):
    path = tmp_path / "clients"
    path.write_text("# the home app\nfirst\n\n")
    tokens = front.Tokens(str(path))
    assert tokens.holds("first") and not tokens.holds("second") and not tokens.holds("")
    path.write_text("second\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert tokens.holds("second") and not tokens.holds("first")
    assert not front.Tokens("").holds("first")


def test_a_server_listening_beyond_loopback_needs_a_token_file(tmp_path: Path):
    assert any("without --token-file" in p for p in serve.config_problems(serve.ServeConfig(host="0.0.0.0")))
    (tmp_path / "t").write_text("x\n")
    assert serve.config_problems(serve.ServeConfig(host="0.0.0.0", token_file=str(tmp_path / "t"))) == []
    with pytest.raises(serve.ServeError, match="no such file"):
        serve.run(serve.ServeConfig(tracking_uri="http://127.0.0.1:9", token_file=str(tmp_path / "no")),
                  threading.Event())  # fmt: skip


@pytest.mark.parametrize(("asked", "verbose"), [([], "false"), (["--llama-log", "true"], "true")])
def test_llama_cpps_debug_output_is_off_unless_asked(asked: list[str], verbose: str, tmp_path: Path):
    cfg = parse_config(serve.ServeConfig, asked, "serve")
    prepared = serve.Prepared(serve.Target("3", "champion"), tmp_path / "m.gguf", "0" * 64, serving_config.SERVING)
    argv = serve.backend_argv(prepared, cfg, 9999)
    assert argv[argv.index("--verbose") + 1] == verbose


def test_bad_settings_are_all_reported():
    bad = serve.ServeConfig(model_name="", alias="champion", fallback_alias="champion", port=0, poll_seconds=0)
    problems = serve.config_problems(bad)
    assert [p.split()[0] for p in problems] == ["--model-name", "--fallback-alias", "--port", "--poll-seconds"]


# --- the serving set: infra/serving/ -------------------------------------------------------------------------------

HTTPROUTE_CRD = SCHEMAS / "gateway-api-v1.6.1-gateway.networking.k8s.io_httproutes.yaml"


def route() -> dict:
    return next(d for d in serving_docs() if d["kind"] == "HTTPRoute")


def split(doc: dict) -> dict[str, int]:
    """Service name -> weight, in the rule that matches on no header (the canary split)."""
    rule = next(r for r in doc["spec"]["rules"] if not any("headers" in m for m in r["matches"]))
    return {b["name"]: b["weight"] for b in rule["backendRefs"]}


def test_the_httproute_passes_gateway_apis_crd_strictly_and_a_broken_one_does_not():
    validator = crd_validator(HTTPROUTE_CRD, "v1")
    assert errors(validator, route()) == []
    broken = route()
    broken["spec"]["rules"][-1]["backendRefs"][0]["weight"] = "90"  # a string where the CRD wants an integer
    broken["spec"]["rules"][-1]["backendRef"] = broken["spec"]["rules"][-1].pop("backendRefs")  # misspelled
    assert len(errors(validator, broken)) == 1  # the misspelling (the string left with the renamed list)
    broken = route()
    broken["spec"]["rules"][-1]["backendRefs"][1]["weight"] = -1
    assert errors(validator, broken)


def test_the_canary_share_is_one_number_and_the_two_weights_follow_it():
    assert split(route()) == {
        serving.name("champion"): 100 - serving.CANARY_PERCENT,
        serving.name("challenger"): serving.CANARY_PERCENT,
    }
    assert split(serving.httproute(25)) == {serving.name("champion"): 75, serving.name("challenger"): 25}
    assert errors(crd_validator(HTTPROUTE_CRD, "v1"), serving.httproute(100)) == []
    for bad in (-1, 101, 2.5):
        with pytest.raises(ValueError, match="canary percent"):
            serving.httproute(bad)  # type: ignore[arg-type]


def test_the_share_command_prints_the_route_for_kubectl(capsys: pytest.CaptureFixture):
    assert serving.main(["--canary-percent", "30"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (
        printed["metadata"]["name"] == route()["metadata"]["name"] and split(printed)[serving.name("challenger")] == 30
    )


def test_every_backend_is_a_rendered_service_on_its_port():
    services = {d["metadata"]["name"]: d for d in serving_docs() if d["kind"] == "Service"}
    for rule in route()["spec"]["rules"]:
        for backend in rule["backendRefs"]:
            ports = [p["port"] for p in services[backend["name"]]["spec"]["ports"]]
            assert backend["port"] in ports, backend


def test_a_side_can_be_pinned_by_the_header_the_server_answers_with():
    pinned = {r["matches"][0]["headers"][0]["value"]: r["backendRefs"] for r in route()["spec"]["rules"]
              if "headers" in r["matches"][0]}  # fmt: skip
    assert {a: [b["name"] for b in refs] for a, refs in pinned.items()} == {
        a: [serving.name(a)] for a in serving.ALIASES
    }
    assert serving.PIN_HEADER == "X-Distillery-Alias"  # the header steps/serve.py answers with


def test_the_serving_pods_pass_restricted_pod_security_and_fail_without_their_settings():
    pods = serving_pods()
    assert set(pods) == set(serving.ALIASES)
    assert {alias: check(pod) for alias, pod in pods.items()} == {alias: [] for alias in pods}
    broken = pods["champion"]
    del broken["spec"]["securityContext"]["runAsNonRoot"]
    broken["spec"]["containers"][0]["securityContext"].pop("runAsNonRoot")
    assert any("runAsNonRoot" in line for line in check(broken))


def test_only_the_gateways_namespace_reaches_the_serving_pods_on_the_serving_port():
    policies = [d for d in serving_docs() if d["kind"] == "NetworkPolicy"]
    pod = Endpoint(serving.NAMESPACE, serving_pods()["challenger"]["metadata"]["labels"])
    gateway = Endpoint(serving.GATEWAY[1], {"app": "envoy"})
    assert allowed(policies, gateway, pod, serving.PORT)
    assert not allowed(policies, gateway, pod, 9090)
    assert not allowed(
        policies, Endpoint(serving.NAMESPACE, {"app.kubernetes.io/component": "evaluate"}), pod, serving.PORT
    )
    assert allowed([], Endpoint("elsewhere", {}), pod, serving.PORT)  # without the policy, anyone would


@pytest.mark.parametrize("alias", serving.ALIASES)
def test_each_pod_runs_the_serve_command_on_its_alias(alias: str):
    (container,) = serving_pods()[alias]["spec"]["containers"]
    assert container["args"][:2] == ["-m", "steps.serve"]
    cfg = build_parser(serve.ServeConfig, "serve").parse_args(container["args"][2:])  # refuses an unknown flag
    assert (cfg.alias, cfg.fallback_alias) == (alias, serving.FALLBACK.get(alias, ""))
    assert serve.config_problems(serve.ServeConfig(**vars(cfg))) == []
    assert container["ports"][0]["containerPort"] == cfg.port
    assert container["readinessProbe"]["httpGet"]["path"] == serve.HEALTH_PATH
    assert cfg.work.startswith(next(m["mountPath"] for m in container["volumeMounts"]))  # the writable emptyDir
    assert str(cfg.threads) == container["resources"]["limits"]["cpu"]  # as many threads as CPUs, no throttling


# --- integration: the registry, the artifact store and llama.cpp's server, all real ---------------------------------


def register_version(root: Path, gguf: Path, uri: str, run_id: str) -> tuple[str, str]:
    """(version, logged model id) of a new registration of `gguf`."""
    outputs = pipeline_outputs(root / run_id, gguf)
    result = register.run(reg_config(outputs, root / run_id / "reg", uri, NAME, run_id))
    return result.model_version, result.model_id


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def chat(url: str, document: str) -> tuple[str, dict, dict]:
    """(the served version, the reply, its headers) for one chat request that sets no decoding."""
    body = json.dumps({"messages": messages(document)}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return reply.headers["X-Distillery-Version"], json.loads(reply.read()), dict(reply.headers)


def wait_for(server: tuple[str, Path, subprocess.Popen], check, what: str, timeout: float = 120) -> dict:
    """/healthz's body once `check(status, body)` holds; fails early, with the server's log, if the command exits."""
    url, log, proc = server
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            status, body = get(f"{url}/healthz")
            if check(status, body):
                return body
        time.sleep(0.3)
    raise AssertionError(f"{what} not seen (exit code {proc.poll()}):\n{log.read_text()[-3000:]}")


@pytest.fixture
def server(mlflow_server: str, tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen]]:
    """`python -m steps.serve --alias challenger`, polling twice a second; yields (its URL, its log, its process)."""
    port = free_port()
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "steps.serve", "--tracking-uri", mlflow_server, "--model-name", NAME,
            "--alias", "challenger", "--port", str(port), "--poll-seconds", "0.5", "--work", str(tmp_path / "work"),
            "--threads", "2", "--drain-seconds", "5"]  # fmt: skip
    with log.open("w") as f:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}", log, proc
    finally:
        stop(proc)


def tamper(s3_endpoint: str, model_id: str) -> str:
    """Flip one byte of the GGUF the logged model `model_id` carries, in the artifact store; its key."""
    s3 = s3_client(s3_endpoint)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="mlflow")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    (key,) = [k for k in keys if model_id in k and k.endswith(".gguf")]
    data = bytearray(s3.get_object(Bucket="mlflow", Key=key)["Body"].read())
    data[-1] ^= 0xFF
    s3.put_object(Bucket="mlflow", Key=key, Body=bytes(data))
    return key


@integration
def test_the_challenger_is_served_from_the_registry_follows_its_alias_and_a_changed_gguf_is_refused(
    tiny_gguf: Path, mlflow_server: str, s3_server: str, server: tuple[str, Path, subprocess.Popen], tmp_path: Path
):
    import mlflow
    from mlflow import MlflowClient

    url, log, _ = server
    client = MlflowClient(tracking_uri=mlflow_server)
    first, _ = register_version(tmp_path, tiny_gguf, mlflow_server, "wf-serve-1")
    client.set_registered_model_alias(NAME, "challenger", first)

    status = wait_for(server, lambda code, _: code == 200, "the first version served")
    assert (
        status["serving"]["version"] == first
        and status["serving"]["sha256"] == client.get_model_version(NAME, first).tags["gguf.sha256"]
    )
    version, reply, headers = chat(url, DOCUMENT)
    assert (version, headers["X-Distillery-Alias"]) == (first, "challenger")
    # The recorded decoding reached llama.cpp: greedy and capped, the answer the registry's pyfunc model gives.
    assert reply["usage"]["completion_tokens"] <= serving_config.SERVING.max_tokens
    mlflow.set_tracking_uri(mlflow_server)
    expected = mlflow.pyfunc.load_model(f"models:/{NAME}@challenger").predict([DOCUMENT])
    assert reply["choices"][0]["message"]["content"].strip() == expected[0]

    # The alias moves: the next version is started beside the first and takes the requests over.
    second, _ = register_version(tmp_path, tiny_gguf, mlflow_server, "wf-serve-2")
    client.set_registered_model_alias(NAME, "challenger", second)
    wait_for(
        server, lambda _, body: (body.get("serving") or {}).get("version") == second, "the swap to the new version"
    )
    assert chat(url, DOCUMENT)[0] == second

    # A version whose GGUF changed in the artifact store after registration is refused; the served one stays.
    third, model_id = register_version(tmp_path, tiny_gguf, mlflow_server, "wf-serve-3")
    tamper(s3_server, model_id)
    client.set_registered_model_alias(NAME, "challenger", third)
    status = wait_for(server, lambda _, body: "sha256" in body.get("last_error", ""), "the refusal")
    assert f"models:/{NAME}/{third}" in status["last_error"] and "the file changed" in status["last_error"]
    assert status["serving"]["version"] == second and chat(url, DOCUMENT)[0] == second
    assert not list((tmp_path / "work" / NAME / third).rglob("*.gguf"))  # nothing of it left to serve
    assert f"serving {NAME} version {second}" in log.read_text()
    # llama.cpp's debug output (model loading, per-request timings) stays out of the log unless --llama-log asks.
    assert not [line for line in log.read_text().splitlines() if line.startswith(LLAMA_DEBUG)]

    # Started on the changed version, the command refuses before serving anything.
    fresh = serve.ServeConfig(tracking_uri=mlflow_server, model_name=NAME, alias="challenger", port=free_port(),
                              work=str(tmp_path / "fresh"))  # fmt: skip
    with pytest.raises(serve.ServeError, match="the file changed after registration"):
        serve.run(fresh, threading.Event())
    assert not list((tmp_path / "fresh").rglob("*.gguf"))


# --- integration: the front before llama.cpp's real server, on loopback ----------------------------------------------


def call(port: int, method: str, path: str, body: bytes = b"", **headers: str) -> tuple[int, dict, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body or None, method=method,
                                     headers={"Content-Type": "application/json", **headers})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read()), dict(reply.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


@integration
def test_the_front_answers_only_who_it_should_with_what_was_measured(tiny_gguf: Path, tmp_path: Path):
    from benchmarks.serve_load import start_server

    supervisor, served, port = start_server(tiny_gguf, tmp_path, "client-token", read_seconds=2, threads=2)
    operator = (tmp_path / "operators").read_text().strip()
    chat_body = json.dumps({"messages": messages(DOCUMENT)}).encode()
    try:
        assert call(port, "GET", "/healthz")[0] == 200  # the kubelet's probe needs no token
        assert call(port, "POST", "/v1/chat/completions", chat_body)[0] == 401
        assert call(port, "POST", "/v1/chat/completions", chat_body, Authorization="Bearer wrong")[0] == 401
        status, reply, headers = call(port, "POST", "/v1/chat/completions", chat_body,
                                      Authorization="Bearer client-token")  # fmt: skip
        assert status == 200 and headers["X-Distillery-Version"] == "1"
        assert reply["usage"]["completion_tokens"] <= serving_config.SERVING.max_tokens
        # Only an operator pins a side; a client's pin is refused, not routed.
        pin = {"X-Distillery-Alias": "challenger"}
        auth = {"Authorization": "Bearer client-token"}
        assert call(port, "POST", "/v1/chat/completions", chat_body, **auth, **pin)[0] == 403
        assert (
            call(port, "POST", "/v1/chat/completions", chat_body, Authorization=f"Bearer {operator}", **pin)[0] == 200
        )
        too_long = json.dumps({"messages": messages(DOCUMENT), "max_tokens": 4096}).encode()
        assert call(port, "POST", "/v1/chat/completions", too_long, **auth)[0] == 400
        grammar = json.dumps({"messages": messages(DOCUMENT), "grammar": 'root ::= "a"'}).encode()
        assert call(port, "POST", "/v1/chat/completions", grammar, **auth)[0] == 400
        assert call(port, "POST", "/extras/tokenize", b'{"input": "a"}', **auth)[0] == 404
        # A rotated Secret: the old token stops working, the new one works, without a restart.
        (tmp_path / "clients").write_text("rotated-token-longer\n")
        assert call(port, "GET", "/v1/models", **auth)[0] == 401
        assert call(port, "GET", "/v1/models", Authorization="Bearer rotated-token-longer")[0] == 200
    finally:
        served.stop()
        supervisor.swap(None)


@integration
def test_a_crash_request_is_refused_and_a_dead_llama_cpp_is_noticed_and_started_again(tiny_gguf: Path, tmp_path: Path):
    import signal

    from benchmarks.serve_load import start_server

    supervisor, served, port = start_server(tiny_gguf, tmp_path, "client-token", read_seconds=2, threads=2)
    stop_watch = threading.Event()
    auth = {"Authorization": "Bearer client-token"}
    try:
        first = supervisor.backend.proc.pid
        for kind, fields in CRASH_BODIES.items():
            body = json.dumps({"messages": messages(DOCUMENT), **fields}).encode()
            status, reply, _ = call(port, "POST", "/v1/chat/completions", body, **auth)
            assert status == 400 and reply["error"].startswith(", ".join(fields)), (kind, reply)
        assert supervisor.backend.alive() and supervisor.backend.proc.pid == first  # never reached llama.cpp

        # What the crash did (SIGSEGV in the child): /healthz says so at once, and the watcher starts it again.
        os.killpg(first, signal.SIGSEGV)
        supervisor.backend.proc.wait(timeout=10)
        status, health, _ = call(port, "GET", "/healthz")
        assert status == 503 and health["serving"] is None and "exited with -11" in health["last_error"]
        assert call(port, "GET", "/v1/models", **auth)[0] == 503  # not 502 from a dead upstream
        threading.Thread(target=supervisor.watch, args=(stop_watch,), daemon=True).start()  # as serve.run starts it
        deadline = time.monotonic() + 120
        while call(port, "GET", "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "llama.cpp was not started again"
            time.sleep(0.2)
        status, health, _ = call(port, "GET", "/healthz")
        assert health["restarts"] == 1 and supervisor.backend.proc.pid != first
        chat_body = json.dumps({"messages": messages(DOCUMENT)}).encode()
        assert call(port, "POST", "/v1/chat/completions", chat_body, **auth)[0] == 200
    finally:
        stop_watch.set()
        served.stop()
        supervisor.swap(None)


@integration
def test_an_in_place_overwrite_of_the_served_file_changes_no_answer_and_is_not_restarted(
    tiny_gguf: Path, tmp_path: Path
):
    # The audit overwrote the work folder's GGUF in place: answers changed live (llama.cpp mapped it) and /healthz
    # still reported the checked hash. Now llama.cpp maps a sealed copy; the overwrite changes nothing served, and a
    # crash after it is not restarted on the changed bytes.
    import signal

    from benchmarks.serve_load import start_server

    work = tmp_path / "work.gguf"
    work.write_bytes(tiny_gguf.read_bytes())
    supervisor, served, port = start_server(work, tmp_path, "client-token", read_seconds=2, threads=2)
    served.cfg.served_log = str(tmp_path / "served.jsonl")
    auth = {"Authorization": "Bearer client-token"}
    body = json.dumps({"messages": messages(DOCUMENT), "max_tokens": 16}).encode()
    try:
        status, before, headers = call(port, "POST", "/v1/chat/completions", body, **auth)
        assert status == 200
        # serve issues the request's id and logs it with the version that answered (online-metrics --served-log).
        (logged,) = [json.loads(line) for line in (tmp_path / "served.jsonl").read_text().splitlines()]
        assert logged["request_id"] == headers[front.REQUEST_ID_HEADER] and logged["version"] == "1"
        pid = supervisor.backend.proc.pid
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "memfd:distillery-" in maps and str(work) not in maps
        size = work.stat().st_size
        with open(work, "r+b") as f:  # the weights' half of the file, rewritten in place (same inode)
            f.seek(size // 2)
            f.write(os.urandom(size - size // 2 - 64))
        status, after, _ = call(port, "POST", "/v1/chat/completions", body, **auth)
        assert status == 200
        assert after["choices"][0]["message"] == before["choices"][0]["message"]
        health = call(port, "GET", "/healthz")[1]
        assert health["serving"]["sha256"] == sha256_file(tiny_gguf) != sha256_file(work)

        os.killpg(pid, signal.SIGSEGV)
        supervisor.backend.proc.wait(timeout=10)
        with pytest.raises(serve.ServeError, match="changed after it was checked"):
            supervisor.revive()
        assert supervisor.backend is None and supervisor.restarts == 0
    finally:
        served.stop()
        supervisor.swap(None)


def test_a_gguf_changed_on_disk_is_not_started_again(tmp_path: Path):
    # The watcher hashes the file again before restarting a dead llama.cpp: bytes changed in the work folder (an
    # in-place overwrite) are refused and the backend dropped, so the next poll downloads and checks the version.
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"checked bytes")
    prepared = serve.Prepared(serve.Target("1", "champion"), gguf, "0" * 64, serving_config.SERVING)
    supervisor = serve.Supervisor(serve.ServeConfig())
    dead = serve.Backend.__new__(serve.Backend)  # a backend whose llama.cpp already exited
    dead.prepared, dead.proc, dead.in_flight = prepared, subprocess.Popen([sys.executable, "-c", "pass"]), 0
    dead.proc.wait()
    supervisor.backend = dead
    assert supervisor.status()["serving"] is None and supervisor.acquire() is None
    with pytest.raises(serve.ServeError, match="changed while served"):
        supervisor.revive()
    assert supervisor.backend is None and supervisor.restarts == 0


def test_llama_cpp_maps_a_sealed_copy_that_an_overwrite_of_the_checked_file_does_not_change(tmp_path: Path):
    # The audit: llama.cpp mapped the work folder's GGUF, so an in-place overwrite changed answers live while /healthz
    # reported the checked hash. It is given a copy hashed as it was written, which nothing can change.
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF checked bytes " * 4096)
    checked = sha256_file(gguf)
    with pytest.raises(serve.ServeError, match="changed after it was checked"):
        serve.Sealed(gguf, "0" * 64, "version 1")
    sealed = serve.Sealed(gguf, checked, "version 1")
    try:
        argv = serve.backend_argv(serve.Prepared(serve.Target("1", "champion"), gguf, checked, serving_config.SERVING),
                                  serve.ServeConfig(), 9, sealed.path)  # fmt: skip
        assert argv[argv.index("--model") + 1] == sealed.path != str(gguf)
        with open(gguf, "r+b") as work:  # in place: same inode, as the audit overwrote it
            work.write(b"PLANTED")
        assert sha256_file(gguf) != checked and sealed.sha256() == checked
        assert Path(sealed.path).read_bytes()[:7] == b"GGUF ch"
        with pytest.raises(PermissionError):  # sealed: not even this process may write it
            Path(sealed.path).write_bytes(b"x")
        assert sealed.sha256() == checked
    finally:
        sealed.close()


@integration
def test_under_hostile_load_every_well_formed_request_is_answered_in_budget_and_recorded(tiny_gguf: Path):
    from benchmarks.serve_load import run

    found = run(tiny_gguf, clients=200, well_formed=40, budget=60.0, read_seconds=3.0, threads=2)
    print(json.dumps(found, indent=2))  # the figures, in the test's output (-s)
    figures = found["figures"]
    assert found["well_formed_within_budget"] == 40 and found["outcomes_recorded"] == 40
    assert figures["well_formed"]["statuses"] == {"200": 40}
    assert figures["slow_loris"]["statuses"] == {"408": figures["slow_loris"]["n"]}
    assert figures["slow_loris"]["max_s"] < 3.0 + 2  # cut off at --read-seconds, not held
    assert figures["oversized"]["statuses"] == {"413": figures["oversized"]["n"]}
    assert figures["negative_length"]["statuses"] == {"400": figures["negative_length"]["n"]}
    assert figures["malformed"]["statuses"] == {"400": figures["malformed"]["n"]}
    assert figures["no_token"]["statuses"] == {"401": figures["no_token"]["n"]}
    assert figures["pinned"]["statuses"] == {"403": figures["pinned"]["n"]}
    assert found["answers_after"] == 200
