"""The settings several steps take, each default written once (`SHARED`): a step's config field reads its default
from here and keeps its own help (what the setting does in that step); the pipeline's parameters read them back from
the configs (`steps.pipeline.STEP`). tests/test_defaults.py holds every config field of these names to it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shared:
    # The base model the embedded run trains, converts, registers and tokenises with: the folder
    # scripts/prepare_base_model.py fills (the cluster's hub id is the pipeline's cluster value).
    base_model: str = ".cache/models/SmolLM2-135M-Instruct"
    base_revision: str = "main"  # a folder has no revisions; a hub id is read at its main branch unless told otherwise
    threads: int = 0  # 0: the CPUs the container may use (steps/contract/threads.py)
    seed: int = 0
    # The registered model the pipeline trains, proposes, promotes and serves (steps/core/registry.py MODEL_NAME).
    model_name: str = "distillery-summariser"


SHARED = Shared()
