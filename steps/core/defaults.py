"""The settings more than one step takes, each default written once (`SHARED`): a step's config field of that name
reads its default from here and keeps its own help (what the setting does in that step); the pipeline's parameters
read them back from the configs (`steps.pipeline.STEP`). tests/test_defaults.py holds every config field of these
names to it, and refuses a default that two stages write as a literal."""

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
    # Training, as train runs it and preflight sizes and forecasts it.
    train_backend: str = "cpu"  # the embedded run's; the cluster's is the pipeline's cluster value
    lora_r: int = 16
    epochs: float = 1.0
    batch_size: int = 8
    micro_batch: int = 0  # 0: the largest the process's memory holds (steps/sizing/)
    gradient_checkpointing: str = "auto"  # only where one example per micro-batch does not fit otherwise
    max_seq_len: int = 512  # kd-targets encodes the examples as train does
    qlora: bool = False
    precision: str = "auto"  # CPU training: bf16 where the CPU computes it natively (steps/train/precision.py)
    # Price per node hour: preflight's forecast prices the run as register does.
    price_table: str = "cpu=0.20,gpu=1.10,ray=0.20"
    # The teacher (kd-targets scores with the one the teacher stage summarises with) and its terms decisions.
    teacher: str = "smollm2-135m-instruct"
    teachers_file: str = "data/teachers.yaml"
    dataset_path: str = "data/summaries"  # the dataset's folder in its repository: publish writes, fetch-dataset reads
    tracking_uri: str = ""  # empty: the MLFLOW_TRACKING_URI environment variable (steps/core/mlflow_client.py)


SHARED = Shared()
