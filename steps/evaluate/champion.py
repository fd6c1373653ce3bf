"""The champion, the third contender when the registry has one: its GGUF, downloaded from the registry alias (or a
file given by hand), and which version it is (decision.json records it; `propose` refuses when it has moved since).

A champion from the registry is judged only when every file of its version hashes to the manifest the version records
and its GGUF to its `gguf.sha256` tag (steps/core/chain.py): the bucket it is read from is writable by more roles
than the registry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.core import chain, registry, verdict
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


def check_judged_champion(cfg: EvaluateConfig, common: dict[str, Any], where: str) -> None:
    """Refuse (VerdictError) shards whose champion file is not the registry's: the version they name must hold, as its
    `gguf.sha256`, the sha256 they recorded for the champion they judged. The shards write that record themselves, and
    one key signs every shard; the candidate's is held to its bytes by register, the base's by the registry's pin."""
    version = common["champion"].get("version")
    if version is None:
        return
    judged = (common["files"].get("champion") or {}).get("sha256")
    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise verdict.VerdictError(
            f"{where}: the shards judged champion version {version} of {cfg.model_name}, but this gather has no "
            "--tracking-uri to check its file against the registry; give the one the shards were given"
        )
    from mlflow import MlflowClient

    label = f"models:/{cfg.model_name}/{version}"
    held = MlflowClient(tracking_uri=uri).get_model_version(cfg.model_name, version).tags.get(chain.SHA256_TAG)
    if not judged or judged != held:
        raise verdict.VerdictError(
            f"{where}: the shards judged as the champion a GGUF with sha256 {judged or 'none'}, but {label} holds "
            f"{chain.SHA256_TAG} {held or 'none'}: not the champion's file. Refusing them; run the shards again"
        )
