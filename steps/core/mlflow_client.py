"""How every step that talks to MLflow reaches it: which tracking server, with which per-request limits, and which
failures mean "not reachable" rather than "refused".

Shared by check-triggers, evaluate, register and propose. mlflow is imported inside the functions, so importing this
module stays light.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from steps.core.cli import refuse
from steps.core.defaults import SHARED
from steps.core.io import environment

MISSING_TRACKING_URI = "no MLflow tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI"
# MLflow's own per-request limits (mlflow.environment_variables); a step's --http-* fields set them for that step.
MLFLOW_HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": (0, 10),
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": (0, 120),
    "MLFLOW_HTTP_REQUEST_TIMEOUT": (1, 3600),
}


# The variables MLflow's client sends as credentials (a bearer token, or basic auth), set from the optional
# distillery-mlflow Secret (workflows/security.py).
CREDENTIAL_VARIABLES = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
# Set to 1 only where the network itself encrypts (a service mesh with mTLS) to send credentials over plain http.
ALLOW_HTTP_CREDENTIALS = "DISTILLERY_ALLOW_HTTP_CREDENTIALS"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def tracking_uri(given: str) -> str:
    """The tracking server: `given` (--tracking-uri) when set, else MLFLOW_TRACKING_URI, else "" (the caller decides
    whether none is an error, MISSING_TRACKING_URI, or a run without a registry).

    Raises ValueError, before anything is sent, when MLflow credentials are set and the server is plain http on
    another host: the token or password would cross the network in clear text. A local SQLite store that was copied
    or moved is re-anchored first (`anchor_local_store`), so nothing is read from or written to its old folder.
    """
    uri = given or os.environ.get("MLFLOW_TRACKING_URI", "")
    parts = urlsplit(uri)
    credentials = [name for name in CREDENTIAL_VARIABLES if os.environ.get(name)]
    if (
        credentials
        and parts.scheme == "http"
        and parts.hostname not in LOOPBACK_HOSTS
        and os.environ.get(ALLOW_HTTP_CREDENTIALS) != "1"
    ):
        raise ValueError(
            f"MLflow credentials ({', '.join(credentials)}) would be sent in clear text to {uri}: use an https "
            f"tracking URI (--tracking-uri / MLFLOW_TRACKING_URI), or set {ALLOW_HTTP_CREDENTIALS}=1 only if the "
            "network itself encrypts (a service mesh with mTLS)"
        )
    anchor_local_store(uri)
    return uri


# Where MLflow's SQL store records an artifact location: (table, column). The registry's versions point at their
# logged model's files (storage_location); source is `models:/<id>` in MLflow 3 but a path for older versions.
ARTIFACT_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "storage_location"),
    ("model_versions", "source"),
)


def local_store_folder(uri: str) -> Path | None:
    """The folder holding a local SQLite store's database (`sqlite:///relative/or/absolute.db`), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///")).resolve().parent


def anchor_local_store(uri: str) -> list[tuple[str, str]]:
    """Re-anchor a local SQLite store whose folder was copied or moved; returns the (old, new) folders rewritten.

    MLflow records every artifact location as an absolute path (it resolves a relative one when it records it), so a
    copy of `.cache/mlflow` still names the original folder: its versions' files are read from there and new runs
    write there, silently. The embedded run keeps its artifacts inside the store's folder (`artifact-location`
    `.cache/mlflow/artifacts` beside `mlflow.db`), which makes the folder self-contained: a recorded location outside
    the folder whose tail (`artifacts/...`) exists inside it is the copy's leftover from where it was made, and every
    location under that old folder is rewritten to the same place under this one, in one transaction, before MLflow
    opens the store. Locations elsewhere (an s3:// root, a folder the copy does not hold) are left alone.
    """
    import sqlite3

    folder = local_store_folder(uri)
    if folder is None or not (folder / Path(uri).name).is_file():
        return []
    with contextlib.closing(sqlite3.connect(folder / Path(uri).name, timeout=30)) as db:
        tables = {row[0] for row in db.execute("select name from sqlite_master where type = 'table'")}
        if "experiments" not in tables:
            return []
        moves: dict[str, str] = {}
        for (location,) in db.execute("select artifact_location from experiments"):
            old = _old_folder(str(location or ""), folder)
            if old is not None:
                moves[old] = str(folder)
        if not moves:
            return []
        with db:  # one transaction: all locations move, or none
            for old, new in moves.items():
                for table, column in ARTIFACT_COLUMNS:
                    if table not in tables:
                        continue
                    for prefix in (old, f"file://{old}"):
                        db.execute(
                            f"update {table} set {column} = ? || substr({column}, ?) "
                            f"where {column} = ? or {column} like ? escape '\\'",
                            (prefix.replace(old, new, 1), len(prefix) + 1, prefix, _like_prefix(prefix + "/")),
                        )
    return sorted(moves.items())


def _old_folder(location: str, folder: Path) -> str | None:
    """The folder a store at `folder` was copied from, if `location` (a recorded artifact location) says so."""
    if location.startswith("file://"):
        location = urlsplit(location).path
    if not location.startswith("/"):
        return None
    path = Path(location)
    if path == folder or folder in path.parents:
        return None
    for parent in path.parents:
        tail = path.relative_to(parent)
        if parent == Path("/"):
            return None
        if (folder / tail).exists():
            return str(parent)
    return None


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern matching what starts with `prefix` (its % and _ taken literally)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def http_settings(retries: int, backoff: int, timeout: int) -> dict[str, str]:
    """MLflow's per-request retry settings as environment variables (set them with `common.environment`)."""
    values = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": retries,
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": backoff,
        "MLFLOW_HTTP_REQUEST_TIMEOUT": timeout,
    }
    return {k: str(v) for k, v in values.items()}


def http_problems(retries: int, backoff: int, timeout: int) -> list[str]:
    """The --http-* flags outside MLflow's own limits."""
    problems = []
    for flag, value, (low, high) in (
        ("--http-retries", retries, MLFLOW_HTTP_LIMITS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]),
        ("--http-backoff", backoff, MLFLOW_HTTP_LIMITS["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"]),
        ("--http-timeout", timeout, MLFLOW_HTTP_LIMITS["MLFLOW_HTTP_REQUEST_TIMEOUT"]),
    ):
        if not low <= value <= high:
            problems.append(f"{flag} {value} is outside MLflow's limits; use {low}..{high}")
    return problems


@dataclass(kw_only=True)
class MlflowSettings:
    """The MLflow flags every step that talks to the registry takes: where it is, and how hard to retry one request
    (MLflow's own defaults retry a dead server for minutes). A step's config inherits them."""

    tracking_uri: str = field(
        default=SHARED.tracking_uri,
        metadata={"help": "MLflow tracking URI (empty: the MLFLOW_TRACKING_URI environment variable)"},
    )
    http_retries: int = field(
        default=2, metadata={"help": "retries of one MLflow HTTP request (MLFLOW_HTTP_REQUEST_MAX_RETRIES, 0-10)"}
    )
    http_backoff: int = field(
        default=1,
        metadata={"help": "backoff factor in seconds between those retries (MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR)"},
    )
    http_timeout: int = field(
        default=60, metadata={"help": "seconds one MLflow HTTP request may take (MLFLOW_HTTP_REQUEST_TIMEOUT)"}
    )

    def http_env(self) -> dict[str, str]:
        """The retry settings as MLflow's environment variables (set them with `common.environment`)."""
        return http_settings(self.http_retries, self.http_backoff, self.http_timeout)

    def http_problems(self) -> list[str]:
        return http_problems(self.http_retries, self.http_backoff, self.http_timeout)

    @contextmanager
    def http_retries_set(self, error: type[Exception], step: str) -> Iterator[None]:
        """Refuse out-of-range --http-* flags (raising `error`), then run the block with them set for MLflow."""
        refuse(self.http_problems(), step, error)
        with environment(self.http_env()):
            yield


def is_transient(error: BaseException) -> bool:
    """True when `error` (or what caused it) means the registry or its artifact store could not be reached.

    MLflow wraps connection errors in a plain MlflowException ("API request to … failed with exception …") whose
    context is the requests/urllib3 error, so the whole chain is inspected. Refusals (bad name, permissions) are not
    transient: retrying them cannot help.
    """
    import requests
    from mlflow.exceptions import MlflowException

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, requests.exceptions.ConnectionError | requests.exceptions.Timeout | ConnectionError):
            return True
        if isinstance(current, requests.exceptions.ChunkedEncodingError | requests.exceptions.RetryError):
            return True
        if isinstance(current, MlflowException):
            if current.error_code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
                return True
            if current.get_http_status_code() in (502, 503, 504):
                return True
            if str(current.message).startswith("API request to ") and "failed with" in str(current.message):
                return True
        current = current.__cause__ or current.__context__
    return False
