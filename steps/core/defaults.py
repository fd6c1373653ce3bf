"""Defaults that several steps' configs share, each written once: the base model the embedded run trains, converts,
registers and tokenises with (the folder scripts/prepare_base_model.py fills), and its revision. The pipeline's
parameters read them back from the configs (`steps.pipeline.STEP`)."""

from __future__ import annotations

BASE_MODEL = ".cache/models/SmolLM2-135M-Instruct"
BASE_REVISION = "main"  # a folder has no revisions; a hub id is read at its main branch unless told otherwise
