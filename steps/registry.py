"""What several steps ask of the MLflow model registry.

Plain functions over an `MlflowClient`; mlflow is imported inside them, so importing this module stays light.
"""

from __future__ import annotations

from typing import Any

CHAMPION = "champion"  # set at home after the online comparison; this repo only ever reads it


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
