"""The home server under hostile load, on loopback: does it keep answering well-formed requests?

    python -m benchmarks.serve_load --gguf path/to/model.gguf [--clients 200 --well-formed 40 --budget-seconds 30]

Starts serve's real front (steps/serve/front.py) with bearer tokens, in front of llama.cpp's real server for the GGUF,
then opens `--clients` connections at once: `--well-formed` of them are summarisation requests with a client token,
each recording an outcome line as the home application does (steps/core/outcomes.py); the rest, in equal parts,
are slow-loris clients (headers, then a byte a second), oversized bodies (a Content-Length of 10 GB, and -1),
malformed JSON, requests without a token, and clients pinning a side with `X-Distillery-Alias` without an operator
token. Prints the figures (per kind: how many, answered with which status, latency p50/p95/max) and whether every
well-formed request was answered 200 within the budget and every outcome line was recorded and parses.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

DOCUMENT = "The Harlow Street library closes for three weeks from 4 June while its roof is replaced."
KINDS = ("slow_loris", "oversized", "negative_length", "malformed", "no_token", "pinned")


def _exchange(
    port: int, data: bytes, timeout: float, drip: bytes = b"", drip_every: float = 1.0
) -> tuple[int, dict[str, str], bytes]:
    """Send `data` (then `drip` a byte per `drip_every` seconds until the server answers); (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.settimeout(drip_every if drip else timeout)
        deadline = time.monotonic() + timeout
        received = b""
        for byte in drip:
            try:
                received = s.recv(65536)
                break
            except TimeoutError:
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    break
            if time.monotonic() > deadline:
                break
        s.settimeout(timeout)
        try:
            while chunk := s.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
    lines = head.decode("latin-1").split("\r\n")[1:]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def _request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if "Content-Length" not in headers:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def client(kind: str, port: int, token: str, timeout: float) -> dict[str, Any]:
    """One client of `kind`; what it saw, and for a well-formed one the outcome line it records."""
    from steps.contract.prompting import messages

    auth = {"Authorization": f"Bearer {token}"}
    chat = json.dumps({"messages": messages(DOCUMENT)}).encode()
    start = time.perf_counter()
    drip = b""
    if kind == "well_formed":
        data = _request("/v1/chat/completions", chat, auth)
    elif kind == "slow_loris":
        data, drip = _request("/v1/chat/completions", b"", {**auth, "Content-Length": str(len(chat))}), chat
    elif kind == "oversized":
        data = _request("/v1/chat/completions", b"x" * 4096, {**auth, "Content-Length": str(10 * 1024**3)})
    elif kind == "negative_length":
        data = _request("/v1/chat/completions", b"{}", {**auth, "Content-Length": "-1"})
    elif kind == "malformed":
        data = _request("/v1/chat/completions", b'{"messages": [', auth)
    elif kind == "no_token":
        data = _request("/v1/chat/completions", chat, {})
    elif kind == "pinned":
        data = _request("/v1/chat/completions", chat, {**auth, "X-Distillery-Alias": "challenger"})
    else:
        raise ValueError(f"unknown kind {kind!r}")
    try:
        status, headers, body = _exchange(port, data, timeout, drip)
    except OSError as e:
        status, headers, body = 0, {}, str(e).encode()
    seen = {"kind": kind, "status": status, "seconds": time.perf_counter() - start}
    if kind == "well_formed" and status == 200:
        json.loads(body)["choices"][0]["message"]["content"]  # an answer, not an error page
        # As the home application records it: the version from the answer's headers (steps/core/outcomes.py).
        seen["outcome"] = {
            "request_id": uuid.uuid4().hex, "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "model": headers["x-distillery-model"], "version": headers["x-distillery-version"],
            "latency_ms": round(seen["seconds"] * 1000, 1), "outcome": "accepted",
        }  # fmt: skip
    return seen


def load(port: int, token: str, clients: int, well_formed: int, timeout: float) -> list[dict[str, Any]]:
    """Every client at once (one thread each, started together); what each saw."""
    kinds = ["well_formed"] * well_formed + [KINDS[i % len(KINDS)] for i in range(clients - well_formed)]
    kinds = kinds[::2] + kinds[1::2]  # interleaved, so the well-formed ones arrive among the rest
    with ThreadPoolExecutor(max_workers=clients) as pool:
        return list(pool.map(lambda k: client(k, port, token, timeout), kinds))


def figures(seen: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for kind in ("well_formed", *KINDS):
        mine = [s for s in seen if s["kind"] == kind]
        if not mine:
            continue
        times = sorted(s["seconds"] for s in mine)
        statuses: dict[str, int] = {}
        for s in mine:
            statuses[str(s["status"])] = statuses.get(str(s["status"]), 0) + 1
        p95 = times[int(0.95 * (len(times) - 1))]
        found[kind] = {"n": len(mine), "statuses": statuses, "p50_s": round(statistics.median(times), 3),
                       "p95_s": round(p95, 3), "max_s": round(times[-1], 3)}  # fmt: skip
    return found


def outcome_lines(seen: list[dict[str, Any]], into: Path) -> int:
    """Write the outcome lines the well-formed clients recorded; parse them as online_metrics does; how many."""
    from steps.core.outcomes import parse_outcomes

    into.write_text("".join(json.dumps(s["outcome"]) + "\n" for s in seen if "outcome" in s))
    return len(parse_outcomes(into.read_bytes(), str(into)))


def start_server(gguf: Path, work: Path, token: str, read_seconds: float, threads: int) -> tuple[Any, Any, int]:
    """serve's front and a llama.cpp backend for `gguf` on loopback; (supervisor, front, port)."""
    from steps.contract import serving_config
    from steps.core.io import sha256_file
    from steps.serve import Backend, Prepared, ServeConfig, Supervisor, Target
    from steps.serve.front import Front

    (work / "clients").write_text(token + "\n")
    (work / "operators").write_text(uuid.uuid4().hex + "\n")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    cfg = ServeConfig(model_name="load", alias="champion", port=port, threads=threads, read_seconds=read_seconds,
                      token_file=str(work / "clients"), operator_token_file=str(work / "operators"))  # fmt: skip
    supervisor = Supervisor(cfg)
    prepared = Prepared(Target("1", "champion"), gguf, sha256_file(gguf), serving_config.SERVING)
    supervisor.swap(Backend(prepared, cfg))
    front = Front(supervisor, cfg)
    front.start()
    return supervisor, front, port


def run(gguf: Path, clients: int, well_formed: int, budget: float, read_seconds: float, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        token = uuid.uuid4().hex
        supervisor, front, port = start_server(Path(gguf), Path(tmp), token, read_seconds, threads)
        try:
            threading.excepthook = lambda args: None  # a client's own socket errors are counted, not printed
            start = time.perf_counter()
            seen = load(port, token, clients, well_formed, timeout=budget + read_seconds + 30)
            wall = time.perf_counter() - start
            recorded = outcome_lines(seen, Path(tmp) / "outcomes.jsonl")
            # Still answering after the storm.
            after = client("well_formed", port, token, budget)
        finally:
            front.stop()
            supervisor.swap(None)
    ok = [s for s in seen if s["kind"] == "well_formed"]
    return {
        "clients": clients, "well_formed": well_formed, "wall_s": round(wall, 2), "budget_s": budget,
        "figures": figures(seen), "outcomes_recorded": recorded,
        "well_formed_within_budget": sum(s["status"] == 200 and s["seconds"] <= budget for s in ok),
        "answers_after": after["status"], "front_counts": dict(sorted(front.counts.items())),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True, help="the GGUF llama.cpp serves")
    parser.add_argument("--clients", type=int, default=200, help="connections opened at once")
    parser.add_argument("--well-formed", type=int, default=40, help="how many of them are well-formed requests")
    parser.add_argument("--budget-seconds", type=float, default=30.0, help="latency budget of a well-formed request")
    parser.add_argument("--read-seconds", type=float, default=3.0, help="the server's --read-seconds")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    a = parser.parse_args(argv)
    found = run(Path(a.gguf), a.clients, a.well_formed, a.budget_seconds, a.read_seconds, a.threads)
    print(json.dumps(found, indent=2))
    good = found["well_formed_within_budget"] == a.well_formed == found["outcomes_recorded"]
    print(f"{'PASS' if good else 'FAIL'}: {found['well_formed_within_budget']}/{a.well_formed} well-formed requests "
          f"answered within {a.budget_seconds:g}s, {found['outcomes_recorded']} outcome lines recorded")  # fmt: skip
    return 0 if good and found["answers_after"] == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
