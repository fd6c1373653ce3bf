"""How every step that talks to MLflow reaches it: which tracking server, with which per-request limits, and which
failures mean "not reachable" rather than "refused".

Shared by check-triggers, evaluate, register and propose. mlflow is imported inside the functions, so importing this
module stays light.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

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
    another host: the token or password would cross the network in clear text.
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
    return uri


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
        default="", metadata={"help": "MLflow tracking URI (empty: the MLFLOW_TRACKING_URI environment variable)"}
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
        problems = self.http_problems()
        if problems:
            raise error(f"invalid {step} config:\n  " + "\n  ".join(problems))
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
