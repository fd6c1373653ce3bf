"""teacher: a teacher model's summaries for the documents nobody curated, through an OpenAI-compatible chat endpoint,
only where the teacher's terms allow training other models on its outputs.

    python -m steps.teacher --chunks out/chunks --curated out/curated --out out/summaries \
        --teacher smollm2-135m-instruct --teachers-file data/teachers.yaml     # the default: open weights, served here
    python -m steps.teacher … --teacher some-hosted-model --teacher-url https://api.example.com   # a hosted API

**The terms gate** (before any request): the teacher must be listed in the committed teachers file (`--teachers-file`,
data/teachers.yaml) with its terms decision — provider, model, terms URL, whether its outputs may train other models,
who reviewed that and when. An unlisted teacher, one listed as not allowing it, or a URL that is not where its entry
says the teacher lives (a hosted teacher at its `endpoint`; an open-weights one on this machine or in the cluster) is
refused with an error naming the file and the entry, and no request is sent.

The endpoint: `--teacher-url` (llama.cpp's server, vLLM, a hosted API; the key in the file `TEACHER_API_KEY_FILE` names
(the cluster's mounted Secret), else `TEACHER_API_KEY`, is sent as a bearer token), or, when empty, the teacher's GGUF
(`--teacher-gguf`, else the entry's `gguf`: a file, or `package:<module>/<file>` inside an installed package) served by
llama-cpp-python's server on 127.0.0.1 for the length of the step.

The prompt is the served one (`steps.contract.prompting.messages`) and decoding the served settings
(`steps.contract.serving_config.SERVING`: greedy, the answer cap). Every generated row records the teacher (name, model,
revision or the GGUF's sha256, provider), the prompt's sha256, the decoding settings, `finish_reason` and the date.
Answers are cached (`--cache`: a folder or an s3:// prefix) under a key of the document's sha256, the teacher and the
prompt: a rebuild with one new document sends one request.

Produces in `--out`: `summaries.jsonl` (`document_sha256`, `summary`, `finish_reason`, `teacher`, `prompt_sha256`,
`decoding`, `generated_at`), `teacher.json` (the entry and its terms decision) and `result.json` (requests sent,
cache hits, documents left to curation).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.contract.prompting import messages
from steps.contract.threads import llama_server_threads, threads_problems
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.curation import attach
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, is_uri, read_jsonl, sha256_file, write_json, write_jsonl
from steps.core.terms import TeacherError, TermsError, allowed_entry, resolve_gguf

SUMMARIES_FILE = "summaries.jsonl"
TEACHER_FILE = "teacher.json"
# Where an open-weights teacher we serve ourselves may answer from: this machine, or a Service in the cluster.
LOCAL_SUFFIXES = (".svc", ".svc.cluster.local", ".cluster.local")
REQUEST_TIMEOUT_S = 300
SERVER_START_TIMEOUT_S = 120
# Bumped when what a cached answer means changes (the request's shape, the fields read back).
CACHE_VERSION = 1


@dataclass
class TeacherConfig:
    out: Path = field(metadata={"help": "folder to write summaries.jsonl into"})
    chunks: Path = field(metadata={"help": "ingest's folder (documents.jsonl)"})
    curated: Path = field(
        metadata={"help": "feedback's folder (curated.jsonl): the chunks they attach to need no teacher"}
    )
    teacher: str = field(default=SHARED.teacher, metadata={"help": "the teacher's entry in --teachers-file"})
    teachers_file: str = field(
        default=SHARED.teachers_file, metadata={"help": "the committed terms decisions, one entry per teacher"}
    )
    teacher_url: str = field(
        default="",
        metadata={
            "help": "OpenAI-compatible base URL, with or without its /v1; empty: serve --teacher-gguf on 127.0.0.1"
        },
    )
    teacher_gguf: str = field(
        default="", metadata={"help": "GGUF to serve when --teacher-url is empty (else the entry's)"}
    )
    cache: str = field(default=".cache/teacher", metadata={"help": "answer cache: folder or s3:// prefix"})
    threads: int = field(
        default=SHARED.threads,
        metadata={"help": "llama.cpp threads for a local teacher; 0: the CPUs this container may use"},
    )


@dataclass
class TeacherResult:
    teacher: str
    teacher_model: str
    teacher_revision: str
    requests: int
    cached: int
    curated: int
    summaries: int


# --- the terms gate --------------------------------------------------------------------------------------------------


def _local_host(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(LOCAL_SUFFIXES) or "." not in host:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).is_private
    except ValueError:
        return False


def gate(cfg: TeacherConfig) -> dict:
    """The teacher's entry if its terms allow distillation and the URL is where it lives; else TermsError."""
    entry = allowed_entry(cfg.teachers_file, cfg.teacher)
    where = f"{cfg.teachers_file}: teachers.{cfg.teacher}"
    if entry["hosted"]:
        if not cfg.teacher_url or api_root(cfg.teacher_url) != api_root(str(entry["endpoint"])):
            raise TermsError(
                f"{where} is a hosted teacher reached at {entry['endpoint']}; --teacher-url {cfg.teacher_url!r} is not "
                "that endpoint; no request was sent"
            )
    elif cfg.teacher_url and not _local_host(cfg.teacher_url):
        raise TermsError(
            f"{where} is an open-weights teacher served by us, but --teacher-url {cfg.teacher_url} is a public host: "
            "a hosted API needs an entry of its own (hosted: true, its endpoint and terms); no request was sent"
        )
    return {"name": cfg.teacher, **entry}


# --- the endpoint ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def llama_server(gguf: Path, threads: int = 0, log: Path | None = None) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server for `gguf` on 127.0.0.1, with the served context; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--n_ctx", str(serving_config.SERVING.n_ctx), *llama_server_threads(threads)]
    sink = log.open("w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise TeacherError(f"llama.cpp server for {gguf} exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TeacherError(f"llama.cpp server for {gguf} not ready in {SERVER_START_TIMEOUT_S}s") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log:
            sink.close()  # type: ignore[union-attr]


def decoding() -> dict[str, Any]:
    """The request's decoding settings: the served ones (OpenAI's names; top_k is llama.cpp's and vLLM's)."""
    serving = serving_config.SERVING
    settings = {"temperature": serving.temperature, "max_tokens": serving.max_tokens, "seed": serving.seed}
    if serving.stop:
        settings["stop"] = list(serving.stop)
    return settings


def prompt_sha256() -> str:
    """The prompt's identity: the messages around an empty document (the document is keyed on its own)."""
    return hashlib.sha256(json.dumps(messages(""), sort_keys=True).encode()).hexdigest()


def api_root(url: str) -> str:
    """The OpenAI-compatible API root of a teacher URL written with or without its `/v1` (both forms are usual:
    `https://api.example.com` and `https://api.example.com/v1` name the same endpoint)."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


def api_key() -> str:
    """The teacher's API key: the file TEACHER_API_KEY_FILE names (the cluster mounts the Secret there, so no child
    process inherits the key), else TEACHER_API_KEY (a local run); '' when neither is set or the file is absent."""
    path = os.environ.get("TEACHER_API_KEY_FILE", "")
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return os.environ.get("TEACHER_API_KEY", "")


def complete(url: str, model: str, document: str) -> tuple[str, str]:
    """(summary, finish_reason) from the chat endpoint at `url`."""
    body = json.dumps({"model": model, "messages": messages(document), **decoding()}).encode()
    headers = {"Content-Type": "application/json"}
    key = api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{api_root(url)}/chat/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise TeacherError(f"teacher at {url} answered {e.code}: {e.read()[:300]!r}") from e
    except (OSError, json.JSONDecodeError) as e:
        raise TeacherError(f"teacher at {url}: {e}") from e
    try:
        choice = answer["choices"][0]
        return choice["message"]["content"] or "", choice.get("finish_reason") or "unknown"
    except (KeyError, IndexError, TypeError) as e:
        raise TeacherError(f"teacher at {url}: not a chat completion: {str(answer)[:300]}") from e


# --- the cache -------------------------------------------------------------------------------------------------------


class Cache:
    """Answers under `<location>/<key>.json`, in a folder or under an s3:// prefix."""

    def __init__(self, location: str) -> None:
        import fsspec

        self.fs, self.root = fsspec.core.url_to_fs(location) if is_uri(location) else (None, Path(location))

    def get(self, key: str) -> dict | None:
        try:
            if self.fs is None:
                return json.loads((self.root / f"{key}.json").read_text())
            return json.loads(self.fs.cat_file(f"{self.root}/{key}.json"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def put(self, key: str, value: dict) -> None:
        text = json.dumps(value, sort_keys=True)
        if self.fs is None:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".{key}.{os.getpid()}"
            tmp.write_text(text)
            tmp.replace(self.root / f"{key}.json")
        else:
            self.fs.pipe_file(f"{self.root}/{key}.json", text.encode())


def cache_key(document_sha256: str, teacher: dict, prompt: str) -> str:
    identity = {k: teacher[k] for k in ("name", "model", "revision")}
    blob = json.dumps([CACHE_VERSION, document_sha256, identity, prompt, decoding()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


# --- the step --------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _endpoint(cfg: TeacherConfig, entry: dict) -> Iterator[tuple[str, dict]]:
    """The URL to send to and the teacher's identity (with its revision, or the served GGUF's sha256)."""
    identity = {k: entry.get(k) for k in ("name", "provider", "model", "revision")}
    if cfg.teacher_url:
        identity["revision"] = str(entry.get("revision") or "unpinned")
        yield cfg.teacher_url, identity
        return
    spec = cfg.teacher_gguf or entry.get("gguf")
    if not spec:
        raise TeacherError(
            f"teacher {cfg.teacher}: no --teacher-url and no GGUF (--teacher-gguf, or `gguf:` in its entry)"
        )
    gguf = resolve_gguf(str(spec))
    identity["revision"] = f"sha256:{sha256_file(gguf)}"
    with llama_server(gguf, cfg.threads) as url:
        yield url, identity


def config_problems(cfg: TeacherConfig) -> list[str]:
    """Everything wrong with the settings alone, each named by its flag."""
    return threads_problems(cfg.threads)


@timed
def run(cfg: TeacherConfig) -> TeacherResult:
    refuse(config_problems(cfg), "teacher", TeacherError)
    entry = gate(cfg)  # before anything is sent, a server started or a document read
    documents = read_jsonl(cfg.chunks / "documents.jsonl")
    attached = attach(read_jsonl(cfg.curated / "curated.jsonl"), documents)
    if attached.problems:  # before any request: a reviewer's summary that attaches nowhere is fixed first
        raise TeacherError("the feedback's reviewed summaries do not attach:\n  " + "\n  ".join(attached.problems))
    todo = [d for d in documents if d["document_sha256"] not in attached.by_chunk]
    prompt = prompt_sha256()
    cache = Cache(cfg.cache)
    rows, requests, cached = [], 0, 0
    with contextlib.ExitStack() as stack:
        url, identity = None, None
        for doc in todo:
            if identity is None:
                url, identity = stack.enter_context(_endpoint(cfg, entry))
            key = cache_key(doc["document_sha256"], identity, prompt)
            hit = cache.get(key)
            if hit is None:
                summary, finish = complete(url, str(entry["model"]), doc["document"])
                requests += 1
                hit = {
                    "document_sha256": doc["document_sha256"],
                    "summary": summary.strip(),
                    "finish_reason": finish,
                    "teacher": identity,
                    "prompt_sha256": prompt,
                    "decoding": decoding(),
                    "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
                }
                cache.put(key, hit)
            else:
                cached += 1
            rows.append(hit)
    result = TeacherResult(
        teacher=cfg.teacher,
        teacher_model=str(entry["model"]),
        teacher_revision=(identity or {}).get("revision") or "",
        requests=requests,
        cached=cached,
        curated=len(documents) - len(todo),
        summaries=len(rows),
    )
    with atomic_dir(cfg.out) as tmp:
        write_jsonl(tmp / SUMMARIES_FILE, rows)
        write_json(tmp / TEACHER_FILE, {**entry, "revision": result.teacher_revision, "decision": "allowed"})
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(TeacherConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (TermsError, TeacherError) as e:
        print(f"teacher: {e}", file=sys.stderr)
        return 1
    print(f"{result.summaries} teacher summaries ({result.requests} requested, {result.cached} cached); "
          f"{result.curated} documents curated")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
