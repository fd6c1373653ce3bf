"""What several steps ask of the MLflow model registry.

Plain functions over an `MlflowClient`; mlflow is imported inside them, so importing this module stays light.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from steps.core.defaults import SHARED

# The registered model the pipeline trains, proposes, promotes and serves: every step's --model-name default.
MODEL_NAME = SHARED.model_name
CHALLENGER = "challenger"  # set by steps/propose.py when evaluate's gate passed
CHALLENGER_SINCE = "challenger.since"  # version tag: when it became challenger (promote's hold counts from it)
CHAMPION = "champion"  # set by steps/promote.py after the online comparison (or by hand, for the first model)
# A version's tag: the run register made it in (the Argo workflow uid; locally `local_run_id`), register's idempotency
# key, and how push-adapter finds the version its run registered without believing the run's result.json.
RUN_ID_TAG = "distillery.run_id"


def local_run_id(gguf_sha256: str) -> str:
    """The run id of a local run (no workflow uid): derived from the candidate GGUF's sha256, so a rerun on the same
    candidate is the same run."""
    return f"local-{gguf_sha256[:16]}"


def versions_of_run(client: Any, name: str, run_id: str) -> list[Any]:
    """The versions of `name` registered in run `run_id`, lowest first (two racing attempts may both have made one;
    the lowest is the run's)."""
    found = client.search_model_versions(f"name = '{name}' and tags.`{RUN_ID_TAG}` = '{run_id}'")
    return sorted(found, key=lambda v: int(v.version))


def champion_version(client: Any, name: str) -> Any | None:
    """The version holding the `champion` alias, or None (no such alias, or no such registered model yet).

    Read from the registered model's aliases: asking for a missing alias directly answers INVALID_PARAMETER_VALUE,
    which cannot be told apart from a real error.
    """
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    version = model.aliases.get(CHAMPION)
    return client.get_model_version(name, version) if version else None


def upsert(write: Callable[..., Any], *args: Any, attempts: int = 4) -> None:
    """Run one registry write that sets a value (an alias, a tag), riding out a concurrent first write of the same key.

    MLflow's SQL store sets aliases and tags with a read-then-insert (`session.merge`): when two requests both find
    no row, both insert, and the later one fails on the table's unique key. The server reports every database error
    as BAD_REQUEST (`sqlalchemy` errors in its managed session), validation errors have their own codes. Measured on
    MLflow 3.17.2 + SQLite, four writers at once on a fresh key: 11 of 30 rounds lost an alias write, 5 of 30 a
    version-tag write. After such a failure the row exists, so writing again updates it; this writes again, at most
    `attempts` times in all, with a short random pause, and re-raises anything else (and the last failure).
    """
    from mlflow.exceptions import MlflowException

    for attempt in range(1, attempts + 1):
        try:
            write(*args)
            return
        except MlflowException as e:
            if e.error_code != "BAD_REQUEST" or attempt == attempts:
                raise
            time.sleep(random.uniform(0.05, 0.25) * attempt)
