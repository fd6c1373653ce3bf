"""register: an MLflow model version serving the GGUF (a pyfunc model), with the adapter, scores and lineage.

    python -m steps.register --dataset out/dataset --adapter out/train --gguf out/gguf --evaluation out/evaluate \
        --tracking-uri sqlite:///.cache/mlflow/mlflow.db --model-name distillery-summariser --out out/register

Logs one MLflow run (params, metrics, the adapter under `adapter/`, reports under `evaluation/`, `lineage/`) and, in
it, a pyfunc model (`steps.contract.model.SummariserModel`) whose one artifact is the GGUF, with the prompt and decoding
settings as its config and metadata. Only after every upload succeeded does it create the model version (source
`models:/<model id>`, the uploaded model), so a version never points at missing files. The version carries lineage,
scores, the dataset's data card (`dataset.card.*`, from fetch-dataset's `card.json`, which is logged under
`lineage/` too, when the dataset revision has one) and the prompt and serving configuration (`serving.*`) as tags.
The serving configuration is the one definition in `steps.contract.serving_config`; the step refuses an evaluation
that was measured with another one (its `decision.json` records it), so what was measured is what is served.

Write-once: files logged straight to S3 (`s3://` artifact URIs) are created with `If-None-Match: *`
(steps/core/write_once.py): nothing already in MLflow's artifact store is ever replaced, and the bucket refuses any
write there without the header. Each attempt logs into a new MLflow run, so a retry never writes an existing key.

The hash chain (steps/core/chain.py): the step refuses a decision evaluate did not sign (`--verify-key`, the public half
of the key only evaluate's deciding step holds: steps/core/verdict.py) and a candidate GGUF whose sha256 is not the one
that decision records for the candidate it judged (`files.candidate.sha256`), so what is registered is what the gate
judged, and the version's `eval.decision` is the signed verdict's; a signed decision made in another run (its `run`,
evaluate's `--run-id`, is not this step's: one replayed into the run's prefix) is refused too, and so is an evaluation
folder whose files (the scores tagged, the metrics and reports logged) are not the ones the decision records. The base
the gate judged is pinned: a candidate judged against another base GGUF than earlier versions on the same base model,
revision and quantization is refused (`check_base_pin`; `--accept-new-base` for a deliberate conversion change, recorded
on the version), and the first pin on a base is never a file convert-gguf took from the shared cache
(`check_first_base`). After the upload it reads the logged model back from the artifact store, checks that every file is
the one it uploaded (the GGUF, the code and MLflow's own files, as hashed in the folder MLflow uploaded from) and that
nothing was added (a planted `.pyc`, a symlink), and records every file's sha256 on the version (`model.manifest`):
serve, the pyfunc loader (`steps.core.chain.load_model`) and evaluate's champion refuse a version whose files no longer
hash to it. The adapter folder it logs is recorded the same way (`adapter.manifest`): push-adapter pushes no adapter
file that differs from it.

Idempotent: a retry with the same `--run-id` (the Argo workflow uid; locally derived from the GGUF's hash) returns
the version it already made, or, when an earlier attempt uploaded everything but died before creating the version,
makes the version from that upload. Two attempts racing on one run id end with one version (the lower number).

MLflow unreachable: each HTTP request is retried `--http-retries` times with backoff (MLflow's own
MLFLOW_HTTP_REQUEST_* settings, set from this config), then the whole registration is retried up to `--attempts`
times, waiting `--retry-wait` seconds, doubling; then the step exits 1 naming the tracking URI. Writes
`result.json` (+ `_outputs/model-version`) in `--out`.
"""

# One module, though long: one job (log the candidate, register its version, once per run id), read top to bottom;
# the serving code it copies is steps/contract/, the registry calls it shares steps/core/.

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.core import chain, verdict, write_once
from steps.core.card import CARD_FILE, card_tags
from steps.core.cli import number_table, parse_config, refuse, timed, write_result
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, environment, git_sha, is_shared_store, read_json, sha256_file
from steps.core.mlflow_client import (
    MISSING_TRACKING_URI,
    MlflowSettings,
    is_transient,
    tracking_uri,
)
from steps.core.registry import MODEL_NAME, RUN_ID_TAG, local_run_id, versions_of_run

# On the run, set before UPLOADED_TAG: JSON {path: sha256} of every file of the logged model as this step uploaded it
# (`recording_uploads`), so a later attempt that makes the version from this upload checks the store against it too.
UPLOADED_FILES_TAG = "distillery.model_files"
# Set on the run once every upload (the pyfunc model included) has finished: its value is the logged model's id.
UPLOADED_TAG = "distillery.model_id"
MODEL_ARTIFACT = "summariser"


@dataclass
class RegisterConfig(MlflowSettings):
    dataset: Path = field(metadata={"help": "folder written by fetch-dataset (for lineage.json)"})
    adapter: Path = field(metadata={"help": "folder written by train (the LoRA adapter)"})
    gguf: Path = field(metadata={"help": "folder written by convert-gguf"})
    evaluation: Path = field(metadata={"help": "folder written by evaluate"})
    out: Path = field(metadata={"help": "folder to write registration.json into"})
    preflight: str = field(
        default="",
        metadata={"help": "folder written by preflight: its training forecast is tagged beside the real wall time"},
    )
    model_name: str = field(default=MODEL_NAME, metadata={"help": "registered model name in MLflow"})
    experiment: str = field(default="distillery", metadata={"help": "MLflow experiment for the run"})
    artifact_location: str = field(
        default="", metadata={"help": "artifact root for a new experiment (empty: the server's default)"}
    )
    run_id: str = field(
        default="", metadata={"help": "idempotency key: the Argo workflow uid (empty: derived from the GGUF hash)"}
    )
    base_model: str = field(default=SHARED.base_model, metadata={"help": "HF model id or folder of the base"})
    base_revision: str = field(default=SHARED.base_revision, metadata={"help": "hub revision of the base"})
    train_backend: str = field(
        default=SHARED.train_backend, metadata={"help": "where the adapter was trained (cpu, gpu, ray)"}
    )
    price_table: str = field(
        default=SHARED.price_table,
        metadata={
            "help": "price per hour for the cost estimate: cpu (a CPU node), gpu (a spot GPU node, e.g. g5.xlarge "
            "spot) and ray (the whole Ray cluster the RayJob starts: set it to your pool's; the default is one CPU "
            "node, as in the embedded run); train runs on the train backend's, every other step on a cpu node"
        },
    )
    verify_key: str = field(
        default="",
        metadata={
            "help": "Ed25519 public key (PEM) evaluate's decision.json must be signed with (steps/core/verdict.py; on "
            "the cluster the Secret distillery-verdict-public); empty: unauthenticated, for a local run"
        },
    )
    accept_new_base: str = field(
        default="",
        metadata={
            "help": "'<who>: <why>' to register although the base GGUF the gate judged differs from the one earlier "
            "versions on the same base model, revision and quantization were judged against (a deliberate converter "
            "or conversion change); recorded on the version as eval.base.accepted. Empty: refuse"
        },
    )
    attempts: int = field(
        default=4, metadata={"help": "whole-registration attempts while MLflow is unreachable (each is idempotent)"}
    )
    retry_wait: float = field(
        default=5.0, metadata={"help": "seconds to wait before the second attempt; doubles after each failed one"}
    )


@dataclass
class RegisterResult:
    model_name: str
    model_version: str
    run_id: str
    mlflow_run_id: str
    model_id: str
    reused: bool


class RegistryUnavailable(RuntimeError):
    """MLflow could not be reached (or kept failing) for every attempt."""


# `--accept-new-base`: a person's name (or address) and a reason, on one line: what the version records as the decision.
ACCEPTED_BY = re.compile(r"[^:\n]*\S[^:\n]*:\s*\S.*")
ACCEPTED_MAX = 500


def accept_new_base_problems(value: str) -> list[str]:
    """What is wrong with an `--accept-new-base` value (empty is fine: nothing is accepted)."""
    if not value or (ACCEPTED_BY.fullmatch(value) and len(value) <= ACCEPTED_MAX):
        return []
    return [
        f"--accept-new-base {value[:80]!r}: say who accepts the new base GGUF and why, '<who>: <why>' on one line of "
        f"at most {ACCEPTED_MAX} characters (e.g. 'ops@example.org: llama.cpp b5100 converter'); it is recorded on "
        "the version as eval.base.accepted. Leave it empty to refuse a changed base"
    ]


def config_problems(cfg: RegisterConfig) -> list[str]:
    problems = cfg.http_problems()
    problems += accept_new_base_problems(cfg.accept_new_base)
    if cfg.attempts < 1:
        problems.append(f"--attempts {cfg.attempts}: use at least 1")
    if cfg.retry_wait < 0:
        problems.append(f"--retry-wait {cfg.retry_wait}: use 0 or more seconds")
    return problems


# The upstream steps whose folders register reads, each with the wall time it recorded in its result.json.
COSTED_INPUTS = ("dataset", "adapter", "gguf", "evaluation")


def cost_estimate(cfg: RegisterConfig) -> dict[str, Any]:
    """Each upstream step's wall time × its node's hourly price, summed: what this candidate cost to make."""
    prices = number_table(cfg.price_table, "--price-table")
    missing = {"cpu", cfg.train_backend} - set(prices)
    if missing:
        raise ValueError(f"--price-table {cfg.price_table!r} has no price for {', '.join(sorted(missing))}")
    breakdown: dict[str, dict[str, float]] = {}
    for name in COSTED_INPUTS:
        seconds = read_json(Path(getattr(cfg, name)) / "result.json").get("wall_seconds")
        if seconds is None:  # a step whose `run` is not `common.timed` yet, called from Python
            continue
        node = cfg.train_backend if name == "adapter" else "cpu"
        breakdown[name] = {"seconds": seconds, "usd": round(seconds / 3600 * prices[node], 6)}
    return {"usd": round(sum(b["usd"] for b in breakdown.values()), 6), "steps": breakdown, "prices": prices}


def forecast_tags(cfg: RegisterConfig) -> dict[str, str]:
    """Preflight's training forecast beside what training really took, and their ratio: each run checks the
    forecast's model (steps/sizing/forecast.py). The ratio compares like with like: the training loop's seconds
    (train's `train_seconds`), since the forecast leaves out loading the base, checkpoints and pod start; the step's
    whole wall time is tagged beside it. None when preflight had no forecast (no dataset, or an older one)."""
    if not cfg.preflight:
        return {}
    forecast = read_json(Path(cfg.preflight) / "preflight.json").get("forecast")
    trained = read_json(Path(cfg.adapter) / "result.json")
    loop = trained.get("train_seconds")
    if not forecast or not loop:
        return {}
    wall = trained.get("wall_seconds")
    tags = {
        "train.forecast_seconds": f"{forecast['seconds']:.1f}",
        "train.forecast_usd": f"{forecast['usd']:.6f}",
        "train.loop_seconds": f"{loop:.1f}",
        **({"train.wall_seconds": f"{wall:.1f}"} if wall else {}),
    }
    if forecast["seconds"] > 0:  # a forecast under 0.05 s is recorded as 0.0: no ratio to state
        tags["train.actual_over_forecast"] = f"{loop / forecast['seconds']:.3f}"
    return tags


def lineage_tags(
    cfg: RegisterConfig, run_id: str, gguf_file: Path, gguf_sha256: str = "", decision: dict[str, Any] | None = None
) -> dict[str, str]:
    """The version's tags: lineage, scores, cost, the data card and the sha256 of every file the gate judged.
    `gguf_sha256`: the candidate's, when the caller hashed it already; `decision`: the one the caller verified (read
    once, so the file cannot change between the check and its use)."""
    data = read_json(Path(cfg.dataset) / "lineage.json")
    decision = decision if decision is not None else read_json(Path(cfg.evaluation) / "decision.json")
    result = read_json(Path(cfg.evaluation) / "result.json")
    train = read_json(Path(cfg.adapter) / "result.json")
    cost = cost_estimate(cfg)
    card = Path(cfg.dataset) / CARD_FILE
    return {
        **(card_tags(read_json(card)) if card.is_file() else {}),
        "cost.estimate_usd": f"{cost['usd']:.6f}",
        "cost.breakdown": json.dumps(cost["steps"], sort_keys=True),
        **forecast_tags(cfg),
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
        chain.SHA256_TAG: gguf_sha256 or sha256_file(gguf_file),
        # The rivals the verdict was reached against, byte for byte (the candidate's is gguf.sha256).
        **{
            f"eval.{role}.sha256": j["sha256"]
            for role, j in (decision.get(chain.JUDGED) or {}).items()
            if role != "candidate"
        },
        "quantization": decision["quantization"],
        **({BASE_ACCEPTED_TAG: cfg.accept_new_base} if cfg.accept_new_base else {}),
        verdict.DECISION_TAG: verdict.PASS if decision["passed"] is True else verdict.FAIL,
        "eval.rougeL": str(result["rouge_l_candidate"]),
        "eval.rougeL_base": str(result["rouge_l_base"]),
        "eval.hijack_rate": str(result["hijack_rate_candidate"]),
    }


# What fixes the base's GGUF: the same base model at the same revision, converted at the same quantization, is the
# same file in every run (convert-gguf's conversion is deterministic and cached by these), so its sha256 is pinned by
# the first version registered on it.
BASE_PIN_TAGS = ("base_model", "base_model.revision", "quantization")
BASE_SHA256_TAG = "eval.base.sha256"
BASE_ACCEPTED_TAG = "eval.base.accepted"


def check_base_pin(client: Any, cfg: RegisterConfig, tags: dict[str, str]) -> None:
    """Refuse a candidate judged against another base GGUF than every earlier version of the model on the same base
    model, revision and quantization was (their `eval.base.sha256`, recorded by register from signed decisions).

    The base's GGUF reaches evaluate through convert-gguf's folder and its shared cache (`cache/base-gguf`), both
    written by the steps role: a weaker file put there would make any candidate beat "the base". The registry (the
    root of trust) remembers which file the base was; `--accept-new-base '<who>: <why>'` lets a deliberate change
    through, recorded on the version."""
    judged = tags.get(BASE_SHA256_TAG)
    if not judged:
        print(f"register: {cfg.evaluation}/decision.json records no base it judged; the base pin is not checked")
        return
    pin = {k: tags[k] for k in BASE_PIN_TAGS}
    versions = sorted(client.search_model_versions(f"name = '{cfg.model_name}'"), key=lambda v: int(v.version))
    pinned = [v for v in versions if v.tags.get(BASE_SHA256_TAG) and all(v.tags.get(k) == pin[k] for k in pin)]
    if not pinned:
        check_first_base(cfg, pin)
    for v in pinned:
        earlier = v.tags[BASE_SHA256_TAG]
        if earlier == judged:
            continue
        _accept_or_refuse(
            cfg,
            f"base GGUF {judged} differs from version {v.version}'s {earlier} on {pin}",
            f"the gate judged the candidate against a base GGUF with sha256 {judged}, but version {v.version} of "
            f"{cfg.model_name}, on the same base ({', '.join(f'{k}={x}' for k, x in pin.items())}), was judged "
            f"against {earlier}: the base's file changed (its cache or convert-gguf's folder are written by the "
            "steps role). Refusing it: clear cache/base-gguf and run the pipeline again from convert-gguf; if the "
            "conversion changed on purpose (a new llama.cpp converter), pass --accept-new-base '<who>: <why>'",
        )
        return


def _accept_or_refuse(cfg: RegisterConfig, change: str, refusal: str) -> None:
    """A change of the pinned base: let through, said, when a person accepted it (`--accept-new-base`), else refused."""
    if not cfg.accept_new_base:
        raise chain.ChainError(refusal)
    print(f"register: {change}; accepted: {cfg.accept_new_base}")


def check_first_base(cfg: RegisterConfig, pin: dict[str, str]) -> None:
    """The first version on a base model, revision and quantization pins the base's GGUF: refuse to pin one that
    convert-gguf took from a shared cache (its parity.json's `base.cache`), where any step of any earlier run may have
    put a weaker file under the key long before. Converted in this run, it is the hub's files at `base-revision`,
    checked against them (convert-gguf's parity); later runs may reuse the cache, as the pin then holds it.
    `--accept-new-base '<who>: <why>'` pins it anyway, recorded on the version."""
    cache = (read_json(Path(cfg.gguf) / "parity.json").get("base") or {}).get("cache") or {}
    if not (cache.get("hit") and is_shared_store(str(cache.get("location") or ""))):
        return
    where = f"{cache['location']}/{cache.get('key')}"
    on = ", ".join(f"{k}={x}" for k, x in pin.items())
    _accept_or_refuse(
        cfg,
        f"the first base GGUF on {on} came from the shared cache {where}",
        f"no earlier version of {cfg.model_name} pins the base GGUF on {on}, and convert-gguf took this run's from "
        f"the shared cache {where}, which every step's role may write: the first pin must be a conversion made in "
        "its run from the hub at base-revision. Refusing it: delete that cache entry and run the pipeline again from "
        "convert-gguf, or pass --accept-new-base '<who>: <why>'",
    )


def check_measured_serving(cfg: RegisterConfig, decision: dict[str, Any]) -> None:
    """Refuse an evaluation measured with another serving configuration than the one this code logs and tags."""
    served = serving_config.SERVING
    if "serving" not in decision:
        raise ValueError(
            f"{cfg.evaluation}/decision.json does not record the serving configuration it was measured with (written "
            "by an older evaluate): run evaluate again"
        )
    if decision["serving"] != served.record():
        raise ValueError(
            f"{cfg.evaluation} was measured with serving configuration {decision['serving']}, but this code serves "
            f"{served.record()} (steps/contract/serving_config.py): run evaluate again with this code, so that what is "
            "served is what was measured"
        )


def _requirement(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{dist}=={version(dist)}"
    except PackageNotFoundError:  # the serving image pins it; this environment just doesn't have it
        return dist


# The model MLflow loads, as code (MLflow's "models from code": no pickle); the serving contract travels in the model's
# code/ as it is: `steps/__init__.py` and every file of `steps/contract/`, which imports nothing else of `steps`
# (tests/test_layout.py holds that), so the copy is whole by construction.
MODEL_CODE = """\
import mlflow

from steps.contract.model import SummariserModel

mlflow.models.set_model(SummariserModel())
"""


def _serving_code(work: Path) -> tuple[Path, list[str]]:
    """The model's code file, and the serving contract (`steps.contract`) as a package MLflow puts on sys.path."""
    import steps
    import steps.contract

    package = work / "steps"
    (package / "contract").mkdir(parents=True)
    shutil.copyfile(steps.__file__, package / "__init__.py")
    for source in Path(steps.contract.__file__).parent.glob("*.py"):
        shutil.copyfile(source, package / "contract" / source.name)
    model_file = work / "summariser_model.py"
    model_file.write_text(MODEL_CODE)
    return model_file, [str(package)]


@contextmanager
def recording_uploads(into: dict[str, dict[str, str]]) -> Iterator[None]:
    """While active, every folder MLflow uploads as a logged model's files (`MlflowClient.log_model_artifacts`, which
    `log_model` calls once with the whole model it built) is recorded in `into`: model id -> its manifest, taken from
    the local folder just before the upload. What this step uploaded is then known file by file, MLflow's own files
    (MLmodel, requirements, environment) included, so the read-back can hold the store to all of it."""
    from mlflow import MlflowClient

    upload = MlflowClient.log_model_artifacts

    def recorded(self: Any, model_id: str, local_dir: str) -> Any:
        into[model_id] = chain.manifest(Path(local_dir))
        return upload(self, model_id, local_dir)

    MlflowClient.log_model_artifacts = recorded  # type: ignore[method-assign]
    try:
        yield
    finally:
        MlflowClient.log_model_artifacts = upload  # type: ignore[method-assign]


def uploaded_manifest(
    uri: str, model_id: str, uploaded: dict[str, str], gguf_file: Path, gguf_sha256: str
) -> dict[str, str]:
    """Every file of the logged model as the artifact store holds it, with its sha256, after checking that it is
    exactly `uploaded` (the manifest of what this step uploaded: every file, MLflow's own included; nothing added,
    nothing missing, no symlink) and that what was uploaded holds this step's GGUF and code (ChainError naming each
    file that is not)."""
    import mlflow.artifacts
    from mlflow import MlflowClient

    with tempfile.TemporaryDirectory(prefix="register-check-") as work:
        model_file, (package,) = _serving_code(Path(work) / "code")
        expected = {f"artifacts/{gguf_file.name}": gguf_sha256, model_file.name: sha256_file(model_file)}
        expected |= {f"code/steps/{k}": v for k, v in chain.manifest(Path(package)).items()}
        # From the artifact store itself, as serve reads a version (a models:/ download adds files of its own).
        location = MlflowClient(tracking_uri=uri).get_logged_model(model_id).artifact_location
        stored = Path(mlflow.artifacts.download_artifacts(artifact_uri=location, dst_path=str(Path(work) / "stored"),
                                                          tracking_uri=uri))  # fmt: skip
        found = chain.manifest(stored)
    ours = {p: h for p, h in uploaded.items() if p in expected}
    problems = [f"uploaded {p}" for p in chain.manifest_problems(expected, ours)]
    problems += chain.manifest_problems(uploaded, found)
    if problems:
        raise chain.ChainError(
            f"the logged model {model_id} in the artifact store is not what this step uploaded:\n  "
            + "\n  ".join(problems)
            + "\nSomething else writes to the artifact store: find it, then run register again"
        )
    return found


def _log_model(cfg: RegisterConfig, gguf_file: Path, tags: dict[str, str]) -> Any:
    """Log the GGUF as a pyfunc model in the active run; returns MLflow's ModelInfo."""
    import mlflow
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

    from steps.contract.model import model_config
    from steps.contract.serving_config import GGUF_ARTIFACT

    serving = serving_config.SERVING
    signature = ModelSignature(
        # One unnamed string column: a list of str and a DataFrame with a `document` column both pass.
        inputs=Schema([ColSpec("string")]),
        outputs=Schema([ColSpec("string")]),
        params=ParamSchema([ParamSpec("max_tokens", "long", serving.max_tokens)]),
    )
    with tempfile.TemporaryDirectory(prefix="register-code-") as work:
        model_file, code_paths = _serving_code(Path(work))
        return mlflow.pyfunc.log_model(
            name=MODEL_ARTIFACT,
            python_model=model_file,
            artifacts={GGUF_ARTIFACT: str(gguf_file)},
            code_paths=code_paths,
            # Given, not inferred: inference would load the GGUF in a subprocess just to watch its imports.
            pip_requirements=[_requirement("mlflow"), _requirement("llama-cpp-python"), "pandas"],
            signature=signature,
            model_config=model_config(),
            metadata={"decoding": serving.tags(), "lineage": {k: tags[k] for k in sorted(tags)}},
        )


def _ensure_registered_model(client: Any, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        try:
            client.create_registered_model(name, description="LoRA-distilled summariser, GGUF for llama.cpp")
        except MlflowException as race:  # another registration created it between our two calls
            if race.error_code != "RESOURCE_ALREADY_EXISTS":
                raise


def _uploaded_run(client: Any, experiment_id: str, run_id: str) -> Any | None:
    """A finished run of an earlier attempt for this run id whose uploads all completed, if any."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time ASC"],
    )
    return next((r for r in runs if r.data.tags.get(UPLOADED_TAG) and r.data.tags.get(UPLOADED_FILES_TAG)), None)


def _experiment_id(client: Any, cfg: RegisterConfig) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(cfg.experiment)
    if experiment:
        return experiment.experiment_id
    try:
        return client.create_experiment(cfg.experiment, artifact_location=cfg.artifact_location or None)
    except MlflowException as race:
        if race.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(cfg.experiment).experiment_id


def _upload(
    cfg: RegisterConfig, experiment_id: str, run_id: str, gguf_file: Path, tags: dict[str, str]
) -> tuple[str, str, dict[str, str]]:
    """One run with params, metrics, the pyfunc model and the reports; returns (mlflow run id, model id, the manifest
    of the model's files as uploaded)."""
    import mlflow

    metrics = read_json(Path(cfg.evaluation) / "metrics.json")["aggregate"]
    train_summary = read_json(Path(cfg.adapter) / "training_summary.json")
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_id, tags=tags) as active:
        mlflow.log_params({f"train.{k}": v for k, v in train_summary["config"].items() if k not in ("dataset", "out")})
        for who in ("base", "candidate", "champion"):
            if who in metrics:
                mlflow.log_metrics({f"{who}.{k}": float(v) for k, v in metrics[who].items() if _is_number(v)})
        for rival, boot in metrics["bootstrap"].items():
            mlflow.log_metrics({f"bootstrap.{rival}.{k}": float(v) for k, v in boot.items() if _is_number(v)})
        mlflow.log_artifact(str(Path(cfg.gguf) / "parity.md"), artifact_path="evaluation")
        uploads: dict[str, dict[str, str]] = {}
        with recording_uploads(uploads):
            info = _log_model(cfg, gguf_file, tags)
        if info.model_id not in uploads:
            raise chain.ChainError(
                f"MLflow logged model {info.model_id} without uploading its files through "
                "MlflowClient.log_model_artifacts (another MLflow?): cannot tell what was uploaded"
            )
        mlflow.set_tag(UPLOADED_FILES_TAG, json.dumps(uploads[info.model_id], sort_keys=True))
        mlflow.log_artifacts(str(cfg.adapter), artifact_path="adapter")
        mlflow.log_artifacts(str(cfg.evaluation), artifact_path="evaluation")
        mlflow.log_artifact(str(Path(cfg.gguf) / "parity.json"), artifact_path="evaluation")
        mlflow.log_artifact(str(Path(cfg.dataset) / "lineage.json"), artifact_path="lineage")
        if (Path(cfg.dataset) / CARD_FILE).is_file():
            mlflow.log_artifact(str(Path(cfg.dataset) / CARD_FILE), artifact_path="lineage")
        # Last: marks this run as complete, so a later attempt may make the version from it instead of re-uploading.
        mlflow.set_tag(UPLOADED_TAG, info.model_id)
        return active.info.run_id, info.model_id, uploads[info.model_id]


def _model_id(version: Any) -> str:
    """The logged model a version was made from (its source is `models:/<model id>`)."""
    return version.model_id or str(version.source).removeprefix("models:/")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def register_once(
    cfg: RegisterConfig, uri: str, run_id: str, tags: dict[str, str], gguf_file: Path, adapter_files: dict[str, str]
) -> RegisterResult:
    """One attempt. Safe to repeat: every outcome of an interrupted attempt is found and reused by the next.
    `adapter_files`: the manifest of train's folder, which the run logs under `adapter/` and the version records."""
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(uri)
    # Every file this step logs straight to S3 (the model version's, the gate's decision) is created write-once; the
    # MLflow bucket's policy refuses any other write there (steps/core/write_once.py).
    write_once.install()
    client = MlflowClient(tracking_uri=uri)
    _ensure_registered_model(client, cfg.model_name)
    existing = versions_of_run(client, cfg.model_name, run_id)
    if existing:
        v = existing[0]
        return RegisterResult(cfg.model_name, str(v.version), run_id, v.run_id or "", _model_id(v), True)
    check_base_pin(client, cfg, tags)

    experiment_id = _experiment_id(client, cfg)
    earlier = _uploaded_run(client, experiment_id, run_id)
    if earlier:
        mlflow_run_id, model_id = earlier.info.run_id, earlier.data.tags[UPLOADED_TAG]
        uploaded = json.loads(earlier.data.tags[UPLOADED_FILES_TAG])
    else:
        mlflow_run_id, model_id, uploaded = _upload(cfg, experiment_id, run_id, gguf_file, tags)
    # What serve and the pyfunc loader will hold every file to, read back from the store and checked first.
    files = uploaded_manifest(uri, model_id, uploaded, gguf_file, tags[chain.SHA256_TAG])
    # Every upload finished: only now does a version appear, pointing at the uploaded model.
    version = client.create_model_version(
        cfg.model_name,
        source=f"models:/{model_id}",
        run_id=mlflow_run_id,
        tags={
            **tags,
            **serving_config.SERVING.tags(),
            chain.MANIFEST_TAG: json.dumps(files, sort_keys=True),
            chain.ADAPTER_MANIFEST_TAG: json.dumps(adapter_files, sort_keys=True),
        },
        description=f"candidate from {run_id}; decision {tags['eval.decision']}",
        model_id=model_id,
    )
    # Two attempts racing on one run id (a pod thought dead that was not) both get here: the lower version stays,
    # the other attempt deletes its own, so the run id keeps exactly one version.
    winner = versions_of_run(client, cfg.model_name, run_id)[0]
    if int(winner.version) != int(version.version):
        client.delete_model_version(cfg.model_name, version.version)
        return RegisterResult(cfg.model_name, str(winner.version), run_id, winner.run_id or "", _model_id(winner), True)
    return RegisterResult(cfg.model_name, str(version.version), run_id, mlflow_run_id, model_id, False)


@timed
def run(cfg: RegisterConfig) -> RegisterResult:
    refuse(config_problems(cfg), "register")
    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise ValueError(MISSING_TRACKING_URI)
    # Read once, verified, then used for every check and tag: the file lies in a prefix other roles write.
    where = f"{cfg.evaluation}/decision.json"
    decision = verdict.checked(read_json(Path(where)), cfg.verify_key, where)
    authenticated = bool(verdict.verify_key_in_use(cfg.verify_key))
    verdict.check_run(decision, cfg.run_id, where, required=authenticated)
    # The scores tagged and the reports logged below are read from beside it: only as evaluate wrote them.
    verdict.check_outputs(decision, Path(cfg.evaluation), where, required=authenticated)
    check_measured_serving(cfg, decision)
    gguf_result = read_json(Path(cfg.gguf) / "result.json")
    gguf_file = Path(cfg.gguf) / gguf_result["candidate_gguf"]
    gguf_sha256 = sha256_file(gguf_file)
    chain.check_judged(decision, "candidate", gguf_file, gguf_sha256, str(cfg.evaluation))
    run_id = cfg.run_id or local_run_id(gguf_sha256)
    tags = lineage_tags(cfg, run_id, gguf_file, gguf_sha256, decision)
    # The adapter as this step logs it: push-adapter pushes train's folder from the run's prefix, and only these bytes.
    adapter_files = chain.manifest(Path(cfg.adapter))

    wait = cfg.retry_wait
    with environment(cfg.http_env()):
        for attempt in range(1, cfg.attempts + 1):
            try:
                result = register_once(cfg, uri, run_id, tags, gguf_file, adapter_files)
                break
            except Exception as e:
                if not is_transient(e):
                    raise
                if attempt == cfg.attempts:
                    raise RegistryUnavailable(
                        f"MLflow at {uri} is unreachable: {cfg.attempts} attempt(s) failed, the last with: "
                        f"{str(e).splitlines()[0][:300]}. Check that the tracking server (and its artifact store) is "
                        "up and that --tracking-uri is right, then rerun this step: it is idempotent and reuses "
                        "whatever an earlier attempt registered. Raise --attempts/--retry-wait to ride out longer "
                        "outages."
                    ) from e
                print(f"register: attempt {attempt}/{cfg.attempts} failed ({type(e).__name__}); retrying in {wait:g}s")
                time.sleep(wait)
                wait *= 2

    with atomic_dir(cfg.out) as out:
        write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(RegisterConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ValueError, FileNotFoundError, RegistryUnavailable) as e:
        print(f"register: {e}", file=sys.stderr)
        return 1
    verb = "found existing" if result.reused else "registered"
    print(f"{verb} {result.model_name} version {result.model_version} (run {result.run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
