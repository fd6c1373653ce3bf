"""serve's HTTP front: who may ask, what they may ask, and how much of the box they may hold.

One asyncio loop holds every connection (a slow client costs a coroutine, not a thread); at most `--max-concurrency`
requests are forwarded to llama.cpp at once and a request waits at most `--queue-seconds` for a slot (then 503).
Bounds, each answered with its own status and a line saying which bound and how to stay inside it:

- the request line and headers must fit `--max-header-bytes` (431) and, with the body, arrive within
  `--read-seconds` of the connection opening (408: a slow-loris client is cut off there);
- a body needs a `Content-Length` of at most `--max-body-bytes` (411 without one, 413 over it: nothing is read);
- writes to a client that does not read time out after `--read-seconds`; a forwarded request after
  `--request-timeout`; at most `--max-connections` are open (beyond: 503 and closed);
- one request per connection (`Connection: close`): nothing idles between requests.

Who: with `--token-file` (a mounted Secret, one token per line, re-read when it changes) every request but
`GET /healthz` needs `Authorization: Bearer <token>` (401). `--operator-token-file` names operators: only they may
pin a side with `X-Distillery-Alias` (403 for anyone else: the route's weights choose, not the client). Without a
token file the server only listens on loopback (`config_problems`).

What: `POST /v1/chat/completions`, `POST /v1/completions` and `GET /v1/models` (404 for the rest of llama.cpp's
server); a completion body must be a JSON object of the fields `ALLOWED_FIELDS` names for its route (any other: 400
naming it), `max_tokens` at most the served configuration's (400), tool and function calling (`tools`, `tool_choice`,
`functions`, `function_call`: client schemas llama.cpp compiles into grammars, one of which crashed it) always
refused, `grammar` and `response_format` refused unless `--allow-grammar`; unset decoding settings get the served
ones. A request that finds llama.cpp's server dead gets 503 while the supervisor starts it again.

Every client error gets a status and a line of ours, never a traceback or a path of this box: a `Content-Length` that
is not ASCII digits and JSON nested deeper than `MAX_DEPTH` get 400, a token file that cannot be read 503 (the reason
goes to stderr), an error llama.cpp's server answers reaches the client as its status (5xx as 502) with at most the
first line of its message, paths removed (`upstream_error`), and a fault of this server is a 500 whose traceback goes to
stderr only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import re
import sys
import threading
import traceback
import uuid
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.core.outcomes import served_record

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
ROUTES = {("POST", p) for p in COMPLETION_PATHS} | {("GET", "/v1/models")}
HEALTH_PATH = "/healthz"
PIN_HEADER = "x-distillery-alias"
# On every forwarded answer: the id serve issued for it, which an outcome line must carry (steps/core/outcomes.py).
REQUEST_ID_HEADER = "X-Distillery-Request-Id"
# Request fields that constrain the output's form; llama.cpp compiles a grammar per request (CPU a client controls).
GRAMMAR_FIELDS = ("grammar", "response_format")
# Fields whose JSON schemas llama-cpp-python compiles into a grammar and applies (tool and function calling): never
# forwarded, --allow-grammar or not. One schema `pattern` (`^([a-z]{0,3000})$`) made the llama.cpp child segfault,
# 3 times of 3 (issue 37): a client must not be able to take the model down.
SCHEMA_FIELDS = ("tools", "tool_choice", "functions", "function_call")
# Everything else llama.cpp may see, per route: the text, and the decoding knobs of the OpenAI API it implements (the
# served decoding fills the ones left unset: `with_decoding`). A field not named here is refused, not passed on.
DECODING_FIELDS = ("model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stream", "seed",
                   "presence_penalty", "frequency_penalty", "repeat_penalty", "user")  # fmt: skip
ALLOWED_FIELDS = {
    "/v1/chat/completions": ("messages", *DECODING_FIELDS),
    "/v1/completions": ("prompt", *DECODING_FIELDS),
}
# Per-hop headers (RFC 9110 7.6.1) a proxy does not forward.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           408: "Request Timeout", 411: "Length Required", 413: "Content Too Large", 422: "Unprocessable Content",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable"}  # fmt: skip


class Refused(Exception):
    """A request answered here with `status`, never forwarded."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Tokens:
    """Bearer tokens from a file (a mounted Secret: one token per line, blank lines and #-comments ignored), read
    again when the file changes, so a rotated Secret takes effect without a restart."""

    def __init__(self, path: str) -> None:
        self.path = Path(path) if path else None
        self._seen: tuple[float, int] | None = None
        self._tokens: list[bytes] = []

    def _current(self) -> list[bytes]:
        if self.path is None:
            return []
        stat = self.path.stat()
        if self._seen != (stat.st_mtime, stat.st_size):
            lines = self.path.read_text().splitlines()
            self._tokens = [t.strip().encode() for t in lines if t.strip() and not t.lstrip().startswith("#")]
            self._seen = (stat.st_mtime, stat.st_size)
        return self._tokens

    def holds(self, presented: str) -> bool:
        """Whether `presented` is one of the tokens (compared in constant time, every token compared)."""
        found = False
        for token in self._current():
            found |= hmac.compare_digest(token, presented.encode())
        return found


def with_decoding(request: dict[str, Any], serving: serving_config.ServingConfig) -> dict[str, Any]:
    """A completion request with the served decoding settings wherever it leaves them unset."""
    found = dict(request)
    for key, value in serving.completion_kwargs().items():
        if value is not None and found.get(key) is None:
            found[key] = value
    return found


# How deep a request's JSON may nest: a chat request is an object of a list of objects of strings (depth 4); a
# 50,000-deep one made the parser raise RecursionError, which closed the connection with no status (issue 37).
MAX_DEPTH = 32


def _depth(value: Any) -> int:
    """How deep `value` nests (a scalar: 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            todo += [(child, level + 1) for child in (node.values() if isinstance(node, dict) else node)]
    return deepest


def checked_body(
    body: bytes, serving: serving_config.ServingConfig, allow_grammar: bool, path: str = COMPLETION_PATHS[0]
) -> bytes:
    """A completion request's body for `path` as forwarded: a JSON object of the allowed fields within the served
    bounds, the served decoding filled in. Raises Refused(400) naming the field that is wrong and what is allowed."""
    try:
        request = json.loads(body or b"null")
    except RecursionError:
        raise Refused(400, "the body's JSON is nested too deeply: send a flat JSON object") from None
    except ValueError as e:
        raise Refused(400, f"the body is not JSON ({e}): send a JSON object") from e
    if _depth(request) > MAX_DEPTH:
        raise Refused(400, f"the body's JSON is nested more than {MAX_DEPTH} deep: send a flat JSON object")
    if not isinstance(request, dict):
        raise Refused(400, f"the body is a JSON {type(request).__name__}: send a JSON object")
    cap = serving.max_tokens
    asked = request.get("max_tokens")
    if asked is not None and (isinstance(asked, bool) or not isinstance(asked, int) or not 1 <= asked <= cap):
        raise Refused(400, f"max_tokens {asked!r}: use a whole number from 1 to {cap} (the served configuration's)")
    schemas = [f for f in SCHEMA_FIELDS if f in request]
    if schemas:
        raise Refused(400, f"{', '.join(schemas)}: tool and function calling are not served here (a client's schema "
                           "would be compiled into a grammar); send the document only")  # fmt: skip
    if not allow_grammar:
        asked_for = [f for f in GRAMMAR_FIELDS if request.get(f) is not None]
        if asked_for:
            raise Refused(400, f"{', '.join(asked_for)}: not served here (the server runs without --allow-grammar)")
    allowed = ALLOWED_FIELDS[path] + (GRAMMAR_FIELDS if allow_grammar else ())
    unknown = sorted(f for f in request if f not in allowed)
    if unknown:
        shown = ", ".join(repr(f[:40]) for f in unknown[:5])
        raise Refused(400, f"field(s) {shown}: not forwarded by this server; {path} takes {', '.join(allowed)}")
    return json.dumps(with_decoding(request, serving)).encode()


# A local path (two or more /-separated parts) or a Windows one, as upstream messages and tracebacks name them.
LOCAL_PATH = re.compile(r"(?:[A-Za-z]:\\|/)[\w.@+-]+(?:[/\\][\w.@+-]+)+")


def upstream_error(status: int, body: bytes) -> str:
    """What a client is told of an error llama.cpp's server answered: for a refusal of the request (4xx) the first
    line of its message with local paths removed, at most 200 characters; for its own failure (5xx) nothing of it."""
    if status >= 500:
        return f"the model server failed on this request ({status}); it is logged, retry or report it"
    try:
        found = json.loads(body or b"{}")
        message = found.get("error", {}).get("message") if isinstance(found.get("error"), dict) else found.get("detail")
    except (ValueError, AttributeError, RecursionError):
        message = None
    line = str(message or "").strip().splitlines()[0] if str(message or "").strip() else ""
    line = LOCAL_PATH.sub("<path>", line)[:200]
    return f"the model server refused the request ({status})" + (f": {line}" if line else "")


class Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body


async def read_request(reader: asyncio.StreamReader, max_body: int) -> Request:
    """One HTTP/1.1 request: its head (the reader's limit bounds it) and a Content-Length body of at most `max_body`."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as e:
        raise Refused(431, "the request line and headers are too long") from e
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refused(400, "not an HTTP/1.x request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if not sep or not key or (key in headers and key in ("content-length", "authorization", PIN_HEADER)):
            raise Refused(400, f"malformed or repeated header line {line[:80]!r}")
        headers[key] = value.strip()
    if "transfer-encoding" in headers:
        raise Refused(411, "chunked bodies are not accepted: send the body with a Content-Length")
    length = headers.get("content-length", "0")
    if not (length.isascii() and length.isdigit()):  # str.isdigit() holds for '²' too, which int() refuses
        raise Refused(400 if length else 411, f"Content-Length {length!r}: send the body's size in bytes")
    if int(length) > max_body:
        raise Refused(413, f"the body is {length} bytes; the most this server reads is {max_body}")
    body = await reader.readexactly(int(length)) if int(length) else b""
    return Request(parts[0], parts[1], headers, body)


def response(status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> bytes:
    body = json.dumps(payload).encode()
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(body)}", "Connection: close", *[f"{k}: {v}" for k, v in (extra or {}).items()]]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Front:
    """The listening side of serve: runs its own event loop in a thread; `start` returns once it listens."""

    def __init__(self, supervisor: Any, cfg: Any) -> None:
        self.supervisor = supervisor
        self.cfg = cfg
        self.clients = Tokens(cfg.token_file)
        self.operators = Tokens(cfg.operator_token_file)
        self.open = 0
        self.counts: dict[int, int] = {}  # status -> requests answered with it (the load test reads them)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="front", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._slots: asyncio.Semaphore | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result()

    async def _listen(self) -> None:
        self._slots = asyncio.Semaphore(self.cfg.max_concurrency)
        self._server = await asyncio.start_server(self._connection, self.cfg.host, self.cfg.port,
                                                  limit=self.cfg.max_header_bytes, backlog=1024)  # fmt: skip

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _log_served(self, request_id: str, version: str, answer_sha256: str) -> None:
        """Append (id, time, model, version, answer's sha256) to --served-log: online-metrics counts an outcome only
        for an id recorded here (steps/core/outcomes.py)."""
        line = served_record(request_id, self.cfg.model_name, version, answer_sha256)
        fd = os.open(self.cfg.served_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)  # one write of one line: appends from concurrent answers do not interleave
        finally:
            os.close(fd)

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), self.cfg.read_seconds)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        status = 0
        try:
            if self.open > self.cfg.max_connections:
                status = 503
                await self._send(writer, response(503, {"error": "too many connections: retry shortly"}))
                return
            try:
                request = await asyncio.wait_for(read_request(reader, self.cfg.max_body_bytes), self.cfg.read_seconds)
                status = await self._answer(request, writer)
            except Refused as e:
                status = e.status
                extra = {"WWW-Authenticate": 'Bearer realm="distillery"'} if e.status == 401 else None
                await self._send(writer, response(e.status, {"error": str(e)}, extra))
            except TimeoutError:
                status = 408
                await self._send(writer, response(408, {"error": f"the request did not arrive within "
                                                                 f"{self.cfg.read_seconds:g}s"}))  # fmt: skip
            except (OSError, asyncio.IncompleteReadError):
                raise
            except Exception:  # a fault of this server: a status, never the traceback, which goes to the log only
                status = 500
                traceback.print_exc(file=sys.stderr)
                await self._send(writer, response(500, {"error": "internal error; it is logged, retry or report it"}))
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or stopped reading: nothing to answer
        finally:
            self.open -= 1
            self.counts[status] = self.counts.get(status, 0) + 1
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1)

    def _role(self, request: Request) -> str:
        """'operator', 'client', or 'anonymous' (no token file: loopback only); Refused(401) for a wrong token."""
        if self.clients.path is None and self.operators.path is None:
            return "anonymous"
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token:
            try:
                if self.operators.holds(token):
                    return "operator"
                if self.clients.holds(token):
                    return "client"
            except OSError as e:  # a Secret being remounted, or removed: the operator's to fix, the client's to retry
                print(f"serve: cannot read a token file ({e}); answering 503", file=sys.stderr, flush=True)
                raise Refused(503, "the server cannot check tokens right now; retry shortly") from None
        raise Refused(401, "send Authorization: Bearer <token> with a token this server was given")

    async def _answer(self, request: Request, writer: asyncio.StreamWriter) -> int:
        path = request.path.split("?")[0]
        if request.method == "GET" and path == HEALTH_PATH:
            status = self.supervisor.status()
            code = 200 if status["serving"] else 503
            await self._send(writer, response(code, status))
            return code
        role = self._role(request)
        if (request.method, path) not in ROUTES:
            raise Refused(404, f"{request.method} {path}: this server answers {sorted(p for _, p in ROUTES)}")
        if PIN_HEADER in request.headers and role != "operator":
            raise Refused(403, "X-Distillery-Alias pins a side and only operators may: the route's weights choose")
        backend = self.supervisor.acquire()
        if backend is None:
            cfg = self.cfg
            if self.supervisor.backend is not None:  # found, but its llama.cpp server died: the watcher restarts it
                raise Refused(503, f"{cfg.model_name}@{cfg.alias} is restarting; retry in a few seconds")
            raise Refused(503, f"no version of {cfg.model_name} holds @{cfg.alias} yet")
        try:
            body = request.body
            if request.method == "POST":
                body = checked_body(body, backend.prepared.serving, self.cfg.allow_grammar, path)
            assert self._slots is not None
            try:
                await asyncio.wait_for(self._slots.acquire(), self.cfg.queue_seconds)
            except TimeoutError:
                raise Refused(503, f"busy: no slot within {self.cfg.queue_seconds:g}s; retry shortly") from None
            try:
                return await asyncio.wait_for(self._forward(request, path, body, backend, writer),
                                              self.cfg.request_timeout)  # fmt: skip
            finally:
                self._slots.release()
        finally:
            backend.leave()

    async def _forward(
        self, request: Request, path: str, body: bytes, backend: Any, writer: asyncio.StreamWriter
    ) -> int:
        """Send the checked request to llama.cpp's server and pipe its answer back with the served version's headers.
        Only the body and its type are forwarded: the client's token never reaches llama.cpp."""
        prepared = backend.prepared
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", backend.port, limit=1 << 16)
        except OSError as e:
            raise Refused(502, f"llama.cpp server: {e}") from e
        try:
            head = [f"{request.method} {path} HTTP/1.1", f"Host: 127.0.0.1:{backend.port}", "Connection: close",
                    "Content-Type: application/json", f"Content-Length: {len(body)}"]  # fmt: skip
            up_writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await up_writer.drain()
            try:
                reply = (await up_reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                raise Refused(502, f"llama.cpp server answered no HTTP head ({type(e).__name__})") from e
            try:
                status = int(reply[0].split(" ")[1])
            except (IndexError, ValueError):
                raise Refused(502, "llama.cpp server answered no HTTP status line") from None
            if status >= 400:  # its body may hold a traceback or this box's paths: the client gets a line of ours
                detail = b""
                while len(detail) < 1 << 16 and (chunk := await up_reader.read(1 << 16)):
                    detail += chunk
                raise Refused(502 if status >= 500 else status, upstream_error(status, detail))
            kept = [line for line in reply[1:] if line and line.split(":")[0].strip().lower() not in HOP_BY_HOP]
            request_id = uuid.uuid4().hex
            ours = [f"X-Distillery-Model: {self.cfg.model_name}", f"X-Distillery-Version: {prepared.target.version}",
                    f"X-Distillery-Alias: {prepared.target.alias}", f"{REQUEST_ID_HEADER}: {request_id}",
                    "Connection: close"]  # fmt: skip
            chunked = any(line.lower().startswith("transfer-encoding:") and "chunked" in line.lower() for line in reply)
            if chunked:  # passed through as sent; the client sees the same framing
                ours.append("Transfer-Encoding: chunked")
            await self._send(writer, ("\r\n".join([reply[0], *kept, *ours]) + "\r\n\r\n").encode())
            answer = hashlib.sha256()
            # The last chunk is held back until the record is written: a client that has the whole answer can name
            # its id in an outcome at once (seen: a client read served.jsonl before the line was appended).
            held = b""
            while chunk := await up_reader.read(65536):
                answer.update(chunk)
                if held:
                    await self._send(writer, held)
                held = chunk
            if request.method == "POST" and self.cfg.served_log:  # answered whole: an outcome may now name this id
                self._log_served(request_id, prepared.target.version, answer.hexdigest())
            if held:
                await self._send(writer, held)
            return status
        finally:
            up_writer.close()
