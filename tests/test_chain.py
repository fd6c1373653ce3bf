"""The hash chain from the gate's verdict to what is served (steps/core/chain.py): the record and its checks (unit
tier) and, against the real S3 server and MLflow server from conftest, each link tampered with and refused
(integration tier): a GGUF swapped in the bucket between evaluate and register; a version's GGUF, MLmodel or code
changed (or a file added) in the artifact store between register and serve; a code file of the pyfunc model edited
before it is loaded; the champion's GGUF changed before evaluate judges it.

pytest tests/test_chain.py                     # unit tier
pytest -m integration tests/test_chain.py      # the S3 and MLflow servers from conftest, a tiny GGUF
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from steps import register, serve
from steps.core import chain
from steps.core.io import sha256_file, write_json
from tests.canned import Answers, evaluate_canned, write_splits
from tests.conftest import free_port, make_bucket, s3_client
from tests.test_registry import pipeline_outputs, reg_config

integration = pytest.mark.integration
NAME = "chain-model"
ANSWERS = {"base": Answers("lead"), "candidate": Answers("reference"), "champion": Answers("half")}


# --- unit: the records and their comparison -------------------------------------------------------------------------


def test_a_manifest_names_every_changed_missing_and_added_file(tmp_path: Path):
    (tmp_path / "code").mkdir()
    (tmp_path / "MLmodel").write_text("a")
    (tmp_path / "code" / "model.py").write_text("b")
    recorded = chain.manifest(tmp_path)
    assert set(recorded) == {"MLmodel", "code/model.py"}
    assert chain.manifest_problems(recorded, chain.manifest(tmp_path)) == []
    (tmp_path / "code" / "model.py").write_text("c")
    (tmp_path / "code" / "sitecustomize.py").write_text("d")
    (tmp_path / "MLmodel").unlink()
    problems = chain.manifest_problems(recorded, chain.manifest(tmp_path))
    assert [p.split(":")[0] for p in problems] == ["code/model.py", "MLmodel", "code/sitecustomize.py"]
    assert "missing" in problems[1] and "added" in problems[2]


def test_register_refuses_a_file_the_decision_does_not_record(tmp_path: Path):
    gguf = tmp_path / "candidate.gguf"
    gguf.write_bytes(b"judged")
    decision = {chain.JUDGED: chain.judged_record({"candidate": gguf})}
    chain.check_judged(decision, "candidate", gguf, sha256_file(gguf), "eval")  # the judged bytes pass
    with pytest.raises(chain.ChainError, match="changed after evaluation"):
        chain.check_judged(decision, "candidate", gguf, "0" * 64, "eval")
    with pytest.raises(chain.ChainError, match="records no sha256 for the candidate"):
        chain.check_judged({}, "candidate", gguf, sha256_file(gguf), "eval")


def test_a_models_gguf_must_hash_to_its_version_tag(tmp_path: Path):
    (tmp_path / "artifacts").mkdir()
    gguf = tmp_path / "artifacts" / "m.gguf"
    gguf.write_bytes(b"registered")
    assert chain.model_gguf(tmp_path, {chain.SHA256_TAG: sha256_file(gguf)}, "m") == gguf
    with pytest.raises(chain.ChainError, match="changed after registration"):
        chain.model_gguf(tmp_path, {chain.SHA256_TAG: "0" * 64}, "m")
    (tmp_path / "artifacts" / "other.gguf").write_bytes(b"x")
    with pytest.raises(chain.ChainError, match=r"2 \.gguf files"):
        chain.model_gguf(tmp_path, {chain.SHA256_TAG: sha256_file(gguf)}, "m")


@pytest.mark.parametrize("manifest", ["{not json", '["a.gguf"]', '{"a.gguf": 1}'])
def test_a_manifest_tag_that_is_no_manifest_is_refused_and_serve_keeps_running(tmp_path: Path, manifest: str):
    # The audit: a non-JSON model.manifest on the alias's new version killed the whole server (a JSONDecodeError is
    # no ServeError); refused as a ChainError, it is a ServeError and the running version stays.
    from mlflow import MlflowClient

    with pytest.raises(chain.ChainError, match=chain.MANIFEST_TAG):
        chain.recorded_manifest({chain.MANIFEST_TAG: manifest}, "m")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model("bad-manifest")
    tags = {chain.SHA256_TAG: "0" * 64, chain.MANIFEST_TAG: manifest}
    version = client.create_model_version("bad-manifest", str(tmp_path / "nowhere"), tags=tags).version
    cfg = serve.ServeConfig(tracking_uri=uri, model_name="bad-manifest", work=str(tmp_path / "work"))
    with pytest.raises(serve.ServeError, match=chain.MANIFEST_TAG):
        serve.prepare(client, cfg, serve.Target(str(version), "champion"))


# --- integration: each link tampered with, in the real artifact store ------------------------------------------------


def upload(endpoint: str, bucket: str, prefix: str, folder: Path) -> None:
    s3 = s3_client(endpoint)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")


def download(endpoint: str, bucket: str, prefix: str, dest: Path) -> Path:
    """What a step's pod gets for an input artifact: the objects under `prefix`, as files in `dest`."""
    s3 = s3_client(endpoint)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            target = dest / obj["Key"].removeprefix(f"{prefix}/")
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(target))
    return dest


def edit_stored(endpoint: str, model_id: str, path: str, edit: Callable[[bytes], bytes]) -> str:
    """Rewrite one file of the logged model `model_id` in MLflow's artifact bucket (as any holder of the bucket role
    could); `path` relative to the model. Returns its key."""
    s3 = s3_client(endpoint)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="mlflow")
    keys = [o["Key"] for page in pages for o in page.get("Contents", []) if model_id in o["Key"]]
    root = next(k for k in keys if k.endswith("/MLmodel")).removesuffix("MLmodel")
    key = root + path
    old = s3.get_object(Bucket="mlflow", Key=key)["Body"].read() if key in keys else b""
    s3.put_object(Bucket="mlflow", Key=key, Body=edit(old))
    return key


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def evaluated(root: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch, **cfg: object) -> dict[str, Path]:
    """The folders register reads, with a decision from evaluate's own run (canned generations)."""
    outputs = pipeline_outputs(root, gguf)
    write_splits(outputs["dataset"])
    shutil.copy(gguf, outputs["gguf"] / "base.gguf")
    write_json(outputs["gguf"] / "result.json", {"candidate_gguf": gguf.name, "base_gguf": "base.gguf"})
    evaluate_canned(monkeypatch, outputs["dataset"], outputs["gguf"], outputs["evaluation"], ANSWERS, **cfg)
    return outputs


def registered(
    root: Path, gguf: Path, uri: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> register.RegisterResult:
    outputs = evaluated(root / run_id, gguf, monkeypatch)
    return register.run(reg_config(outputs, root / run_id / "reg", uri, NAME, run_id))


@integration
def test_a_gguf_swapped_in_the_bucket_between_evaluate_and_register_is_refused(
    tiny_gguf: Path, mlflow_server: str, s3_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from mlflow import MlflowClient

    # convert-gguf's output in the run bucket; evaluate judges what its pod downloaded.
    make_bucket(s3_server, "runs-chain")
    outputs = evaluated(tmp_path / "made", tiny_gguf, monkeypatch)
    upload(s3_server, "runs-chain", "wf-swap/gguf", outputs["gguf"])
    judged = download(s3_server, "runs-chain", "wf-swap/gguf", tmp_path / "evaluate-pod" / "gguf")
    evaluate_canned(monkeypatch, outputs["dataset"], judged, outputs["evaluation"], ANSWERS)
    decision = json.loads((outputs["evaluation"] / "decision.json").read_text())
    assert decision[chain.JUDGED]["candidate"]["sha256"] == sha256_file(tiny_gguf)
    assert set(decision[chain.JUDGED]) == {"base", "candidate"}

    # Between the two steps, a holder of the bucket role swaps the candidate.
    edited = flip_last_byte(tiny_gguf.read_bytes())
    s3_client(s3_server).put_object(Bucket="runs-chain", Key=f"wf-swap/gguf/{tiny_gguf.name}", Body=edited)
    swapped = download(s3_server, "runs-chain", "wf-swap/gguf", tmp_path / "register-pod" / "gguf")
    cfg = reg_config({**outputs, "gguf": swapped}, tmp_path / "reg", mlflow_server, NAME + "-swap", "wf-swap")
    with pytest.raises(chain.ChainError, match="changed after evaluation"):
        register.run(cfg)
    assert MlflowClient(tracking_uri=mlflow_server).search_model_versions(f"name = '{NAME}-swap'") == []
    flags = ("dataset", "adapter", "gguf", "evaluation", "out", "tracking_uri", "model_name", "run_id")
    assert register.main([f"--{k.replace('_', '-')}={getattr(cfg, k)}" for k in flags]) == 1

    # The bytes evaluate judged register, and the version records them and its rivals.
    result = register.run(dict_replace(cfg, gguf=judged))
    tags = MlflowClient(tracking_uri=mlflow_server).get_model_version(cfg.model_name, result.model_version).tags
    assert tags[chain.SHA256_TAG] == decision[chain.JUDGED]["candidate"]["sha256"]
    assert tags["eval.base.sha256"] == decision[chain.JUDGED]["base"]["sha256"]
    files = json.loads(tags[chain.MANIFEST_TAG])
    assert files[f"artifacts/{tiny_gguf.name}"] == tags[chain.SHA256_TAG]
    assert {"MLmodel", "summariser_model.py", "code/steps/contract/model.py"} <= set(files)


def dict_replace(cfg: register.RegisterConfig, **changes: object) -> register.RegisterConfig:
    import dataclasses

    return dataclasses.replace(cfg, **changes)


# Each file a holder of the bucket role could change after registration, and how.
TAMPERS = {
    "gguf": (lambda name: f"artifacts/{name}", flip_last_byte),
    "MLmodel": (lambda name: "MLmodel", lambda b: b.replace(b"max_tokens: 64", b"max_tokens: 4096")),
    "code": (lambda name: "code/steps/contract/serving_config.py", lambda b: b + b"\nimport os  # planted\n"),
    "added": (lambda name: "code/steps/contract/sitecustomize.py", lambda b: b"import os  # planted\n"),
}


@integration
@pytest.mark.parametrize("what", TAMPERS)
def test_serve_refuses_a_version_changed_in_the_artifact_store_after_registration(
    what: str, tiny_gguf: Path, mlflow_server: str, s3_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    result = registered(tmp_path, tiny_gguf, mlflow_server, f"wf-serve-{what}", monkeypatch)
    cfg = serve.ServeConfig(tracking_uri=mlflow_server, model_name=NAME, alias="challenger", port=free_port(),
                            work=str(tmp_path / "work"))  # fmt: skip
    target = serve.Target(result.model_version, "challenger")
    assert serve.prepare(client, cfg, target).sha256 == sha256_file(tiny_gguf)  # untouched: served
    shutil.rmtree(tmp_path / "work")

    path, edit = TAMPERS[what]
    edit_stored(s3_server, result.model_id, path(tiny_gguf.name), edit)
    with pytest.raises(serve.ServeError, match="changed after registration") as refused:
        serve.prepare(client, cfg, target)
    assert path(tiny_gguf.name) in str(refused.value)
    assert not list((tmp_path / "work").rglob("*.gguf"))  # nothing of it left to serve


@integration
def test_the_pyfunc_loader_refuses_an_edited_code_file(
    tiny_gguf: Path, mlflow_server: str, s3_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import mlflow

    from tests.test_registry import DOCUMENT

    result = registered(tmp_path, tiny_gguf, mlflow_server, "wf-loader", monkeypatch)
    uri = f"models:/{NAME}/{result.model_version}"
    model = chain.load_model(uri, tmp_path / "checked", mlflow_server)
    (summary,) = model.predict([DOCUMENT])
    assert isinstance(summary, str)

    key = edit_stored(s3_server, result.model_id, "code/steps/contract/model.py",
                      lambda b: b + b"\nimport os  # anything here runs in the loading process\n")  # fmt: skip
    with pytest.raises(chain.ChainError, match=r"code/steps/contract/model\.py") as refused:
        chain.load_model(uri, tmp_path / "again", mlflow_server)
    assert "changed after registration" in str(refused.value) and not (tmp_path / "again").exists()
    # MLflow's own loader runs the edited file: the check is what stands between the bucket and the loading process.
    mlflow.set_tracking_uri(mlflow_server)
    plain = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "plain"))
    assert b"anything here runs" in (Path(plain) / "code/steps/contract/model.py").read_bytes(), key


@integration
def test_evaluate_refuses_a_champion_whose_gguf_changed_after_registration(
    tiny_gguf: Path, mlflow_server: str, s3_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from mlflow import MlflowClient

    champion = registered(tmp_path, tiny_gguf, mlflow_server, "wf-champion", monkeypatch)
    MlflowClient(tracking_uri=mlflow_server).set_registered_model_alias(NAME, "champion", champion.model_version)
    cfg = {"tracking_uri": mlflow_server, "model_name": NAME}
    outputs = evaluated(tmp_path / "next", tiny_gguf, monkeypatch, **cfg)  # untouched: judged as the third contender
    decision = json.loads((outputs["evaluation"] / "decision.json").read_text())
    assert decision["champion_version"] == champion.model_version
    assert decision[chain.JUDGED]["champion"]["sha256"] == sha256_file(tiny_gguf)

    edit_stored(s3_server, champion.model_id, f"artifacts/{tiny_gguf.name}", flip_last_byte)
    with pytest.raises(chain.ChainError, match="changed after registration"):
        evaluated(tmp_path / "after", tiny_gguf, monkeypatch, **cfg)
    assert not (tmp_path / "after" / "evaluation" / "generations.jsonl").exists()  # no verdict about other bytes
