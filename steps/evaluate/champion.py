"""The champion, the third contender when the registry has one: its GGUF, downloaded from the registry alias (or a
file given by hand), and which version it is (decision.json records it; `propose` refuses when it has moved since).

A champion from the registry is judged only when every file of its version hashes to the manifest the version records
and its GGUF to its `gguf.sha256` tag (steps/core/chain.py): the bucket it is read from is writable by more roles
than the registry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from steps.core import chain, registry
from steps.core.mlflow_client import tracking_uri
from steps.core.registry import CHAMPION
from steps.evaluate.config import EvaluateConfig


@dataclass(frozen=True)
class Champion:
    """The third contender, if any: its GGUF, the registry version it is (None: no champion, or a file given by hand)
    and a line for the report."""

    file: Path | None
    version: str | None
    note: str


def resolve_champion(cfg: EvaluateConfig, dest: Path) -> Champion:
    """The champion's GGUF, downloaded from the registry alias; no file (and why) when there is none."""
    if cfg.champion_gguf:
        return Champion(Path(cfg.champion_gguf), None, f"given: {cfg.champion_gguf}")
    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        return Champion(None, None, "no tracking URI: two-way comparison")
    from mlflow import MlflowClient

    version = registry.champion_version(MlflowClient(tracking_uri=uri), cfg.model_name)
    if version is None:
        return Champion(None, None, f"{cfg.model_name} has no '{CHAMPION}' yet: two-way comparison")
    label = f"champion models:/{cfg.model_name}/{version.version}"
    local = chain.download_verified(MlflowClient(tracking_uri=uri), cfg.model_name, str(version.version), dest, uri)
    file = chain.model_gguf(local, version.tags, label)
    return Champion(file, str(version.version), f"{cfg.model_name} v{version.version} ({CHAMPION})")
