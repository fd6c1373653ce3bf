"""register: an MLflow model version carrying the served GGUF and the adapter, with scores and lineage as tags.

    python -m steps.register --dataset out/dataset --adapter out/train --gguf out/gguf --evaluation out/evaluate \
        --tracking-uri sqlite:///.cache/mlflow/mlflow.db --model-name distillery-summariser --out out/register

Logs one MLflow run (params, metrics, the GGUF under `model/`, the adapter under `adapter/`, reports under
`evaluation/`), and only after every upload succeeded creates the model version, so a version never points at
missing files. Idempotent: a retry with the same `--run-id` (the Argo workflow uid; locally derived from the GGUF's
hash) finds and returns the version it already made. Works against any tracking URI.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.common import atomic_dir, git_sha, parse_config, read_json, sha256_file, write_result

RUN_ID_TAG = "distillery.run_id"


@dataclass
class RegisterConfig:
    dataset: Path = field(metadata={"help": "folder written by fetch-dataset (for lineage.json)"})
    adapter: Path = field(metadata={"help": "folder written by train (the LoRA adapter)"})
    gguf: Path = field(metadata={"help": "folder written by convert-gguf"})
    evaluation: Path = field(metadata={"help": "folder written by evaluate"})
    out: Path = field(metadata={"help": "folder to write registration.json into"})
    model_name: str = field(default="distillery-summariser", metadata={"help": "registered model name in MLflow"})
    tracking_uri: str = field(
        default="", metadata={"help": "MLflow tracking URI (empty: the MLFLOW_TRACKING_URI environment variable)"}
    )
    experiment: str = field(default="distillery", metadata={"help": "MLflow experiment for the run"})
    artifact_location: str = field(
        default="", metadata={"help": "artifact root for a new experiment (empty: the server's default)"}
    )
    run_id: str = field(
        default="", metadata={"help": "idempotency key: the Argo workflow uid (empty: derived from the GGUF hash)"}
    )
    base_model: str = field(
        default=".cache/models/SmolLM2-135M-Instruct", metadata={"help": "HF model id or folder of the base"}
    )
    base_revision: str = field(default="main", metadata={"help": "hub revision of the base"})
    train_backend: str = field(default="cpu", metadata={"help": "where the adapter was trained (cpu, gpu)"})


@dataclass
class RegisterResult:
    model_name: str
    model_version: str
    run_id: str
    mlflow_run_id: str
    reused: bool


def _tracking_uri(cfg: RegisterConfig) -> str:
    uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise ValueError("no MLflow tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI")
    return uri


def lineage_tags(cfg: RegisterConfig, run_id: str, gguf_file: Path) -> dict[str, str]:
    data = read_json(Path(cfg.dataset) / "lineage.json")
    decision = read_json(Path(cfg.evaluation) / "decision.json")
    result = read_json(Path(cfg.evaluation) / "result.json")
    train = read_json(Path(cfg.adapter) / "result.json")
    return {
        RUN_ID_TAG: run_id,
        "dataset.repo": data["dataset_repo"],
        "dataset.rev": data["dataset_rev"],
        "dataset.commit": data["dataset_commit"],
        "dataset.path": data["dataset_path"],
        "dataset.hash": data["dataset_hash"],
        "base_model": cfg.base_model,
        "base_model.revision": cfg.base_revision,
        "git_sha": git_sha(),
        "train.backend": cfg.train_backend,
        "train.device": train["device"],
        "gguf.file": gguf_file.name,
        "gguf.sha256": sha256_file(gguf_file),
        "quantization": decision["quantization"],
        "eval.decision": "pass" if decision["passed"] else "fail",
        "eval.rougeL": str(result["rouge_l_candidate"]),
        "eval.rougeL_base": str(result["rouge_l_base"]),
        "eval.hijack_rate": str(result["hijack_rate_candidate"]),
    }


def run(cfg: RegisterConfig) -> RegisterResult:
    import mlflow
    from mlflow import MlflowClient

    uri = _tracking_uri(cfg)
    gguf_result = read_json(Path(cfg.gguf) / "result.json")
    gguf_file = Path(cfg.gguf) / gguf_result["candidate_gguf"]
    run_id = cfg.run_id or f"local-{sha256_file(gguf_file)[:16]}"
    tags = lineage_tags(cfg, run_id, gguf_file)

    mlflow.set_tracking_uri(uri)
    client = MlflowClient(tracking_uri=uri)
    try:
        client.get_registered_model(cfg.model_name)
    except mlflow.exceptions.MlflowException:
        client.create_registered_model(cfg.model_name, description="LoRA-distilled summariser, GGUF for llama.cpp")

    existing = client.search_model_versions(f"name = '{cfg.model_name}' and tags.`{RUN_ID_TAG}` = '{run_id}'")
    if existing:
        version = max(existing, key=lambda v: int(v.version))
        result = RegisterResult(cfg.model_name, str(version.version), run_id, version.run_id or "", True)
    else:
        experiment = client.get_experiment_by_name(cfg.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment
            else client.create_experiment(cfg.experiment, artifact_location=cfg.artifact_location or None)
        )
        metrics = read_json(Path(cfg.evaluation) / "metrics.json")["aggregate"]
        train_summary = read_json(Path(cfg.adapter) / "training_summary.json")
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_id, tags=tags) as active:
            mlflow.log_params(
                {f"train.{k}": v for k, v in train_summary["config"].items() if k not in ("dataset", "out")}
            )
            for who in (w for w in ("base", "champion", "candidate") if w in metrics):
                numbers = {k: v for k, v in metrics[who].items() if isinstance(v, int | float)}
                mlflow.log_metrics({f"{who}.{k}": float(v) for k, v in numbers.items()})
            for rival, boot in metrics["bootstrap"].items():
                mlflow.log_metrics({f"bootstrap.{rival}.{k}": float(v) for k, v in boot.items()})
            mlflow.log_artifact(str(gguf_file), artifact_path="model")
            mlflow.log_artifacts(str(cfg.adapter), artifact_path="adapter")
            mlflow.log_artifacts(str(cfg.evaluation), artifact_path="evaluation")
            mlflow.log_artifact(str(Path(cfg.gguf) / "parity.json"), artifact_path="evaluation")
            mlflow.log_artifact(str(Path(cfg.dataset) / "lineage.json"), artifact_path="lineage")
            source = f"{active.info.artifact_uri}/model"
            mlflow_run_id = active.info.run_id
        # Every upload finished: only now does a version appear, pointing at files that exist.
        version = client.create_model_version(
            cfg.model_name,
            source=source,
            run_id=mlflow_run_id,
            tags=tags,
            description=f"candidate from {run_id}; decision {tags['eval.decision']}",
        )
        result = RegisterResult(cfg.model_name, str(version.version), run_id, mlflow_run_id, False)

    with atomic_dir(cfg.out) as out:
        write_result(out, result)
    return result


def registered(register_dir: Path) -> dict[str, Any]:
    return read_json(Path(register_dir) / "result.json")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(RegisterConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"register: {e}", file=sys.stderr)
        return 1
    verb = "found existing" if result.reused else "registered"
    print(f"{verb} {result.model_name} version {result.model_version} (run {result.run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
