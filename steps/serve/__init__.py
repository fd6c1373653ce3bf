"""serve: llama.cpp's server for `models:/<name>@<alias>`, following the alias as it moves.

    python -m steps.serve --tracking-uri http://mlflow:5000 --model-name distillery-summariser --alias champion \
        --host 0.0.0.0 --port 8080
    python -m steps.serve ... --alias challenger --fallback-alias champion     # the canary side

What it serves is what the registry says, checked:

- the version: the one holding `--alias` (or, while no version holds it, `--fallback-alias`: after a promotion
  removes `challenger`, the canary side serves the champion instead of failing its share of the traffic; with
  neither, the version already served stays, and before any was found every request gets 503);
- the files: the version's whole logged model (the GGUF its `MLmodel` names, the MLmodel, the code), downloaded from
  MLflow's artifact store, each file compared with the manifest the version records (`model.manifest`) and the GGUF
  with its `gguf.sha256` tag (steps/register.py, steps/core/chain.py). On a mismatch nothing of it is served: at start
  the command exits 1 naming each changed file and the two hashes, later the running version stays;
- the settings: the serving configuration the version was logged with (its `MLmodel`'s `model_config`,
  `steps.contract.serving_config.ServingConfig.from_record`): the context size and seed start llama.cpp's server
  (`ServingConfig.model_kwargs`), the decoding (`completion_kwargs`: greedy, the token cap, the stop strings) fills
  every chat or completion request that does not set it. What evaluate measured is what is answered.

It listens on `--host:--port` and forwards to llama-cpp-python's OpenAI-compatible server (`python -m
llama_cpp.server`) on a loopback port of its own. Every `--poll-seconds` it reads the alias again; when it names
another version, that version is downloaded, checked and started beside the running one, and only once it answers
are new requests sent to it (one pointer swap under a lock); the old server finishes what it was answering (up to
`--drain-seconds`) and stops. No request sees a half-started model.

Endpoints (steps/serve/front.py, which says who may ask what and every bound): `POST /v1/chat/completions`,
`POST /v1/completions`, `GET /v1/models`, each answer carrying `X-Distillery-Model`, `X-Distillery-Version` and
`X-Distillery-Alias` and `X-Distillery-Request-Id` (record the id and version in the outcomes file:
steps/core/outcomes.py; with `--served-log` each answered completion's id, version and answer hash is appended there,
and online-metrics counts outcomes only for those ids); `GET /healthz`: 200 with what
is served (JSON), 503 while nothing is (readiness), and while its llama.cpp server is dead: a watcher notices within
half a second and starts it again on a new copy of the same file, hashed again (`Supervisor.revive`).

llama.cpp never maps the work folder's file: each llama.cpp server gets a private copy made while hashing it (a
sealed memfd on Linux: `Sealed`), so the bytes checked are the bytes served, and an in-place overwrite of the work
folder's GGUF changes no answer. The copy costs the model's size in memory while its server runs. With `--token-file`
every other request needs a bearer token, and only `--operator-token-file`'s may pin a side. Writes nothing but the
downloaded models under `--work`.
"""

# The package: this file resolves and prepares a version, runs llama.cpp's server and swaps it when the alias moves;
# front.py is the HTTP side (authentication, request bounds, forwarding).
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.contract.threads import llama_server_threads, threads_problems
from steps.core import chain, trust
from steps.core.cli import parse_config, refuse
from steps.core.defaults import SHARED
from steps.core.io import environment, sha256_file
from steps.core.mlflow_client import MISSING_TRACKING_URI, MlflowSettings, is_transient, tracking_uri
from steps.core.registry import MODEL_NAME
from steps.serve.front import HEALTH_PATH, Front

__all__ = ["HEALTH_PATH", "ServeConfig", "ServeError", "config_problems", "main", "prepare", "run"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class ServeError(ValueError):
    """A version this command will not serve (or bad settings); the message says why and what to do."""


@dataclass
class ServeConfig(MlflowSettings):
    model_name: str = field(default=MODEL_NAME, metadata={"help": "registered model name in MLflow"})
    alias: str = field(default="champion", metadata={"help": "the alias to serve (champion, challenger)"})
    fallback_alias: str = field(
        default="",
        metadata={"help": "served while no version holds --alias (e.g. champion for the challenger); empty: none"},
    )
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on (0.0.0.0 in a pod)"})
    port: int = field(default=8080, metadata={"help": "port to listen on"})
    work: str = field(
        default="",
        metadata={"help": "folder for downloaded GGUFs (empty: $XDG_CACHE_HOME/distillery/serve or ~/.cache/...)"},
    )
    poll_seconds: float = field(default=60.0, metadata={"help": "how often to read the alias again"})
    threads: int = field(
        default=SHARED.threads, metadata={"help": "llama.cpp threads (0: the CPUs this container may use)"}
    )
    start_timeout: float = field(default=300.0, metadata={"help": "seconds a llama.cpp server may take to answer"})
    drain_seconds: float = field(
        default=30.0, metadata={"help": "after a swap, how long the old server may finish its requests"}
    )
    request_timeout: float = field(default=600.0, metadata={"help": "seconds one forwarded request may take"})
    llama_log: bool = field(
        default=False,
        metadata={
            "help": "pass llama.cpp's own output (model loading, per-request timings, the access log of its server) "
            "to stderr; off: only its errors"
        },
    )
    token_file: str = field(
        default="",
        metadata={"help": "file of client bearer tokens, one a line (a mounted Secret); required unless --host is "
                  "loopback"},
    )  # fmt: skip
    operator_token_file: str = field(
        default="",
        metadata={"help": "file of operator bearer tokens: only operators may pin a side (X-Distillery-Alias)"},
    )
    allow_grammar: bool = field(default=False, metadata={"help": "accept requests' grammar and response_format"})
    served_log: str = field(
        default="",
        metadata={
            "help": "file to append a line to per answered completion (request id, time, model, version, the answer's "
            "sha256); online-metrics --served-log counts outcomes only for ids recorded there. Empty: none"
        },
    )
    max_body_bytes: int = field(
        # A document of at most steps.contract.prompting.MAX_DOCUMENT_CHARS (6000) characters, JSON-escaped, fits.
        default=256 * 1024,
        metadata={"help": "largest request body read, in bytes (413 above)"},
    )
    max_header_bytes: int = field(default=16 * 1024, metadata={"help": "largest request line + headers (431 above)"})
    max_concurrency: int = field(default=8, metadata={"help": "requests forwarded to llama.cpp at once"})
    max_connections: int = field(default=1000, metadata={"help": "connections open at once (503 above)"})
    read_seconds: float = field(
        default=10.0,
        metadata={"help": "time for a request to arrive whole, and for a client to read each answer write"},
    )
    queue_seconds: float = field(default=60.0, metadata={"help": "longest wait for a forwarding slot (503 after)"})


def config_problems(cfg: ServeConfig) -> list[str]:
    problems = cfg.http_problems()
    if not cfg.model_name:
        problems.append("--model-name is empty: name the registered model to serve")
    if not cfg.alias:
        problems.append("--alias is empty: use champion or challenger")
    if cfg.fallback_alias == cfg.alias:
        problems.append(f"--fallback-alias {cfg.fallback_alias!r} is --alias itself: use another alias or none")
    if not 0 < cfg.port < 65536:
        problems.append(f"--port {cfg.port}: use 1..65535")
    if cfg.host not in LOOPBACK and not cfg.token_file:
        problems.append(f"--host {cfg.host} without --token-file: anyone who reaches the port would be answered; "
                        "give a file of bearer tokens (a mounted Secret), or listen on 127.0.0.1")  # fmt: skip
    for name in ("max_body_bytes", "max_header_bytes", "max_concurrency", "max_connections"):
        if getattr(cfg, name) < 1:
            problems.append(f"--{name.replace('_', '-')} {getattr(cfg, name)}: use at least 1")
    for name in ("poll_seconds", "start_timeout", "drain_seconds", "request_timeout", "read_seconds", "queue_seconds"):
        if not getattr(cfg, name) > 0:
            problems.append(f"--{name.replace('_', '-')} {getattr(cfg, name)}: use a positive number of seconds")
    return problems + threads_problems(cfg.threads)


def work_dir(cfg: ServeConfig) -> Path:
    if cfg.work:
        return Path(cfg.work)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "distillery" / "serve"


# --- what to serve: the registry's answer, checked -------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A version to serve, and which alias named it."""

    version: str
    alias: str


@dataclass(frozen=True)
class Prepared:
    """A version's GGUF on local disk, checked, with the serving configuration it was logged with."""

    target: Target
    gguf: Path
    sha256: str
    serving: serving_config.ServingConfig


def resolve(client: Any, cfg: ServeConfig) -> Target | None:
    """The version `--alias` names (else `--fallback-alias`), or None when neither names one (or no such model).

    Read from the registered model's aliases (see steps.core.registry.champion_version for why not by alias directly).
    """
    from mlflow.exceptions import MlflowException

    try:
        aliases = client.get_registered_model(cfg.model_name).aliases
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    for alias in (cfg.alias, cfg.fallback_alias):
        if alias and alias in aliases:
            return Target(str(aliases[alias]), alias)
    return None


def prepare(client: Any, cfg: ServeConfig, target: Target) -> Prepared:
    """Download the version (or reuse an earlier download) and check every file of it against the manifest the
    version records, and its GGUF against its `gguf.sha256` (steps/core/chain.py).

    Raises ServeError, leaving no file behind to serve, when the version lacks what serving needs or the bytes differ.
    """
    import yaml
    from mlflow.pyfunc import MODEL_CONFIG  # where the pyfunc flavor keeps the model_config it was logged with

    label = f"models:/{cfg.model_name}/{target.version} (@{target.alias})"
    version = client.get_model_version(cfg.model_name, target.version)
    expected = version.tags.get(chain.SHA256_TAG, "")
    if not expected:
        raise ServeError(
            f"{label} has no {chain.SHA256_TAG} tag, so its GGUF cannot be checked: register it with steps.register, "
            "which records it; refusing to serve it"
        )
    folder = work_dir(cfg) / cfg.model_name / target.version
    folder.mkdir(parents=True, exist_ok=True)
    try:
        model = chain.download_verified(
            client, cfg.model_name, target.version, folder / "model", tracking_uri(cfg.tracking_uri)
        )
        gguf = chain.model_gguf(model, version.tags, label)
    except chain.ChainError as e:
        raise ServeError(str(e)) from e
    mlmodel = yaml.safe_load((model / "MLmodel").read_text())
    pyfunc = (mlmodel.get("flavors") or {}).get("python_function") or {}
    artifact = ((pyfunc.get("artifacts") or {}).get(serving_config.GGUF_ARTIFACT) or {}).get("path")
    record = pyfunc.get(MODEL_CONFIG)
    if not artifact or not isinstance(record, dict) or (model / artifact).resolve() != gguf.resolve():
        raise ServeError(
            f"{label}: its MLmodel lacks the python_function flavor's artifacts.{serving_config.GGUF_ARTIFACT} (naming "
            f"its one GGUF) or {MODEL_CONFIG} (not a model steps.register logged); refusing to serve it"
        )
    try:
        serving = serving_config.ServingConfig.from_record(
            {k: v for k, v in record.items() if k in serving_config.ServingConfig.__dataclass_fields__}
        )
    except (TypeError, KeyError) as e:
        raise ServeError(f"{label}: its {MODEL_CONFIG} {record} is not a serving configuration ({e})") from e
    return Prepared(target, gguf, expected, serving)


# --- llama.cpp's server, and the front that swaps between them --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sealed:
    """A private, read-only copy of a checked GGUF for llama.cpp to map: the bytes hashed are the bytes served.

    llama.cpp maps its model file, so the file it is given must not change under it: an in-place overwrite of the
    work folder's GGUF changed answers live while `/healthz` reported the checked hash (issue 37). The copy is made
    from the work folder's file and hashed as it is written, so it holds exactly the bytes that hash to the version's
    `gguf.sha256` (ServeError when they do not: the file changed since it was checked). On Linux it is a sealed memfd
    (`memfd_create` + `F_SEAL_WRITE|F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL`): no process, this one included, can
    change it, and it lives only as long as the processes holding it; llama.cpp's server inherits it and opens
    `/proc/self/fd/<n>`. Elsewhere it is a file of mode 0400 in a fresh private folder. It costs the model's size in
    memory (a memfd is shared memory) for as long as its llama.cpp server runs.
    """

    def __init__(self, gguf: Path, sha256: str, label: str) -> None:
        self.fd = -1
        self._folder: str | None = None
        digest = hashlib.sha256()
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create(f"distillery-{gguf.name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            out = os.fdopen(os.dup(self.fd), "wb")
        else:
            self._folder = tempfile.mkdtemp(prefix="distillery-serve-")
            out = open(Path(self._folder) / gguf.name, "xb")  # noqa: SIM115 - closed below, before the checks
        try:
            with open(gguf, "rb") as source, out:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != sha256:
                raise ServeError(
                    f"{label}: its GGUF on local disk ({gguf}) now has sha256 {digest.hexdigest()}, not the checked "
                    f"{sha256}: it changed after it was checked. Not serving it; downloading it again"
                )
            if self.fd >= 0:
                seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
                fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals)
            else:
                os.chmod(self.path, 0o400)
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> str:
        """What llama.cpp's server opens (in the server's own process, which inherits `fd`)."""
        return f"/proc/self/fd/{self.fd}" if self.fd >= 0 else str(next(Path(str(self._folder)).iterdir()))

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.fd,) if self.fd >= 0 else ()

    def sha256(self) -> str:
        """The copy's sha256, read again (from this process's descriptor, not a path anyone could swap)."""
        digest = hashlib.sha256()
        if self.fd >= 0:
            with os.fdopen(os.dup(self.fd), "rb") as copy:
                copy.seek(0)
                while chunk := copy.read(1 << 20):
                    digest.update(chunk)
            return digest.hexdigest()
        return sha256_file(Path(self.path))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def backend_argv(prepared: Prepared, cfg: ServeConfig, port: int, model: str = "") -> list[str]:
    """The command line of llama-cpp-python's server for one version: its file (`model`: the sealed copy's path; by
    default the checked file), the version's own settings, and llama.cpp's debug output only when --llama-log asks."""
    model = model or str(prepared.gguf)
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--model_alias", f"{cfg.model_name}/{prepared.target.version}"]
    argv += [*llama_server_threads(cfg.threads), "--verbose", str(cfg.llama_log).lower()]
    for key, value in prepared.serving.model_kwargs().items():
        argv += [f"--{key}", str(value)]
    return argv


class Backend:
    """One llama-cpp-python server for one prepared version, on a loopback port; counts the requests it is answering."""

    def __init__(self, prepared: Prepared, cfg: ServeConfig) -> None:
        self.prepared = prepared
        self.port = _free_port()
        self.in_flight = 0
        self._lock = threading.Lock()
        label = f"version {prepared.target.version}"
        # Hashed as it is copied: started again after a crash, a backend copies and hashes the file again.
        self.sealed = Sealed(prepared.gguf, prepared.sha256, label)
        # llama.cpp's server logs ~100 lines a request when verbose (its default); its uvicorn access log goes to
        # stdout, its errors to stderr.
        try:
            self.proc = subprocess.Popen(
                backend_argv(prepared, cfg, self.port, self.sealed.path),
                stdout=sys.stderr if cfg.llama_log else subprocess.DEVNULL,
                stderr=sys.stderr,
                start_new_session=True,
                pass_fds=self.sealed.pass_fds,
            )
        except BaseException:
            self.sealed.close()
            raise
        # The child holds its own descriptor now; the copy lives as long as the child does (or this one's, closed on
        # stop).
        deadline = time.monotonic() + cfg.start_timeout
        while True:
            if self.proc.poll() is not None:
                self.sealed.close()
                raise RuntimeError(f"llama.cpp server for {prepared.gguf} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"llama.cpp server for {prepared.gguf} not ready in {cfg.start_timeout}s"
                    ) from None
                time.sleep(0.2)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def stop(self, drain: float = 0.0) -> None:
        deadline = time.monotonic() + drain
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if getattr(self, "sealed", None) is not None:
            self.sealed.close()


class Supervisor:
    """Which backend answers now, and the swap to the next one."""

    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.backend: Backend | None = None
        self.last_error = ""
        self.refused: dict[str, str] = {}  # version -> why: a registered version's files never change, so ask once
        self.restarts = 0  # llama.cpp servers started again after theirs died
        self._lock = threading.Lock()
        self._revive_lock = threading.Lock()

    def acquire(self) -> Backend | None:
        """The backend to forward to, counted in; None while none serves (none found yet, or its llama.cpp died and is
        being started again)."""
        with self._lock:
            if self.backend is None or not self.backend.alive():
                return None
            self.backend.enter()
            return self.backend

    def swap(self, new: Backend | None) -> None:
        with self._lock:
            old, self.backend = self.backend, new
        if old is not None:
            old.stop(self.cfg.drain_seconds)

    def status(self) -> dict[str, Any]:
        """/healthz's body: what is served, its llama.cpp server alive (a dead one serves nothing: `serving` is null,
        so the probe answers 503 until it is started again)."""
        backend = self.backend
        found: dict[str, Any] = {"model": self.cfg.model_name, "alias": self.cfg.alias, "serving": None,
                                 "restarts": self.restarts}  # fmt: skip
        if backend is not None and backend.alive():
            p = backend.prepared
            found["serving"] = {"version": p.target.version, "alias": p.target.alias, "sha256": p.sha256,
                                "gguf": p.gguf.name, "settings": p.serving.record()}  # fmt: skip
        elif backend is not None:
            found["last_error"] = (f"llama.cpp server for version {backend.prepared.target.version} exited with "
                                   f"{backend.proc.returncode}; starting it again")  # fmt: skip
        if self.last_error and "last_error" not in found:
            found["last_error"] = self.last_error
        return found

    def revive(self) -> bool:
        """Start llama.cpp again when the served one died (a client's request can crash it), on a new sealed copy of
        the checked file, hashed again as it is copied (`Sealed`): what it maps must be the bytes that were checked.
        True if it was started again.

        A file that no longer hashes to the version's is not served (ServeError): the backend is dropped, so the next
        poll downloads and checks the version again. When the alias moved while this was starting, the new version
        stays and this one is stopped.
        """
        with self._revive_lock:
            dead = self.backend
            if dead is None or dead.alive():
                return False
            prepared = dead.prepared
            print(f"serve: llama.cpp server for version {prepared.target.version} exited with "
                  f"{dead.proc.returncode}; starting it again", file=sys.stderr, flush=True)  # fmt: skip
            try:
                new: Backend | None = Backend(prepared, self.cfg)
            except ServeError as e:
                with self._lock:
                    if self.backend is dead:
                        self.backend = None
                dead.stop()
                raise ServeError(f"{e} (changed while served; not restarting it)") from e
            with self._lock:
                if self.backend is dead:
                    self.backend, new = new, None
            if new is not None:  # the alias moved meanwhile: the version it names now stays
                new.stop()
            dead.stop()
            self.restarts += 1
            return True

    def watch(self, stop: threading.Event, every: float = 0.5) -> None:
        """Until `stop`: notice a dead llama.cpp server within `every` seconds and start it again (`revive`), instead
        of at the next poll of the alias."""
        while not stop.wait(every):
            try:
                self.revive()
            except (ServeError, RuntimeError) as e:
                self.last_error = str(e).splitlines()[0][:500]
                print(f"serve: {e}", file=sys.stderr, flush=True)

    def follow(self, client: Any) -> bool:
        """Read the alias; start and swap to the version it names when that is not the one served. True if swapped.

        Raises what resolving or preparing raised; the backend that was serving keeps serving.
        """
        target = resolve(client, self.cfg)
        current = self.backend.prepared.target if self.backend else None
        if target is None or (current is not None and current.version == target.version):
            if target is not None and current != target:  # same version, now named by the other alias
                self.backend.prepared = dataclasses.replace(self.backend.prepared, target=target)  # type: ignore[union-attr]
            self.revive()  # llama.cpp died (and `watch` has not started it yet): start it again
            return False
        if target.version in self.refused:
            raise ServeError(self.refused[target.version])
        try:
            prepared = prepare(client, self.cfg, target)
        except ServeError as e:
            self.refused[target.version] = str(e)
            raise
        self.swap(Backend(prepared, self.cfg))
        print(f"serve: serving {self.cfg.model_name} version {target.version} (@{target.alias}, sha256 "
              f"{prepared.sha256[:12]}…)", file=sys.stderr, flush=True)  # fmt: skip
        return True


def run(cfg: ServeConfig, stop: threading.Event) -> None:
    """Serve until `stop` is set. Raises ServeError when the first version found is refused."""
    with environment(cfg.http_env()):  # MLflow's retry settings, for every registry call while serving
        _serve(cfg, stop)


def _serve(cfg: ServeConfig, stop: threading.Event) -> None:
    from mlflow import MlflowClient

    problems = config_problems(cfg)
    for name in ("token_file", "operator_token_file"):  # here, not in config_problems: the pod's files, not the flags
        if getattr(cfg, name) and not Path(getattr(cfg, name)).is_file():
            problems.append(f"--{name.replace('_', '-')} {getattr(cfg, name)}: no such file (mount the Secret there)")
    refuse(problems, "serve", ServeError)
    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise ServeError(MISSING_TRACKING_URI)
    client = MlflowClient(tracking_uri=uri)
    supervisor = Supervisor(cfg)
    front = Front(supervisor, cfg)
    front.start()
    threading.Thread(target=supervisor.watch, args=(stop,), name="watch", daemon=True).start()
    print(f"serve: listening on {cfg.host}:{cfg.port} for models:/{cfg.model_name}@{cfg.alias}", file=sys.stderr)
    try:
        while not stop.is_set():
            try:
                supervisor.follow(client)
                supervisor.last_error = ""
            except Exception as e:
                first = supervisor.backend is None
                if isinstance(e, ServeError) and first:
                    raise  # nothing served yet: a refused version at start is an error, not a wait
                if not (isinstance(e, ServeError | RuntimeError) or is_transient(e)):
                    raise
                supervisor.last_error = str(e).splitlines()[0][:500]
                print(f"serve: {e}", file=sys.stderr, flush=True)
            stop.wait(cfg.poll_seconds)
    finally:
        front.stop()
        supervisor.swap(None)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ServeConfig, argv, __doc__.splitlines()[0])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        trust.install()  # the pod's private CA, if any, for MLflow and S3 (serve is no `timed` step)
        run(cfg, stop)
    except (ServeError, trust.TrustError) as e:
        print(f"serve: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
