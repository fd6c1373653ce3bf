"""Write-once objects (steps/core/write_once.py) on a real S3-compatible server (moto on 127.0.0.1): a conditional
create succeeds once and a second write of the key is refused with AlreadyWritten, for a single PUT and for a
multipart upload (refused at its completion, its parts aborted), with bucket versioning on (infra/s3/); MLflow's
artifact store, with the write-once repository installed, refuses to log over an artifact that plain MLflow replaces.
The policy half (the bucket denies object creation without the header) is in tests/test_s3_access.py."""

from __future__ import annotations

import json
import os

import pytest

from steps.core import write_once
from steps.core.io import environment
from tests.conftest import ROOT, make_bucket, s3_client

VERSIONING = json.loads((ROOT / "infra/s3/bucket-versioning.json").read_text())

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(s3_server: str, request: pytest.FixtureRequest) -> str:
    name = "write-once-" + str(abs(hash(request.node.name)) % 10**8)
    make_bucket(s3_server, name)
    s3_client(s3_server).put_bucket_versioning(Bucket=name, VersioningConfiguration=VERSIONING)
    return name


def body(client, bucket: str, key: str) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_the_versioning_setting_is_a_valid_request_and_the_server_keeps_it(s3_server, bucket):
    import botocore.session
    from botocore.validate import validate_parameters

    shape = botocore.session.get_session().get_service_model("s3").operation_model("PutBucketVersioning")
    validate_parameters({"Bucket": bucket, "VersioningConfiguration": VERSIONING}, shape.input_shape)
    assert s3_client(s3_server).get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"


def test_a_second_write_is_refused_and_the_first_stays(s3_server, bucket, tmp_path):
    client = s3_client(s3_server)
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_bytes(b"decision: pass")
    second.write_bytes(b"decision: fail")
    digest = write_once.put_once(client, bucket, "artifacts/1/r/decision.json", first)
    with pytest.raises(write_once.AlreadyWritten, match=rf"s3://{bucket}/artifacts/1/r/decision.json already exists"):
        write_once.put_once(client, bucket, "artifacts/1/r/decision.json", second)
    assert body(client, bucket, "artifacts/1/r/decision.json") == b"decision: pass"
    head = client.head_object(Bucket=bucket, Key="artifacts/1/r/decision.json")
    assert head["Metadata"][write_once.SHA256_METADATA] == digest
    versions = client.list_object_versions(Bucket=bucket, Prefix="artifacts/1/r/")["Versions"]
    assert len(versions) == 1  # the refused write left no version behind


def test_a_multipart_write_is_refused_at_completion_and_its_parts_aborted(s3_server, bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(write_once, "MULTIPART_THRESHOLD", 1024)
    monkeypatch.setattr(write_once, "PART_SIZE", 5 * 1024 * 1024)  # S3's smallest part but the last
    client = s3_client(s3_server)
    big = tmp_path / "model.gguf"
    big.write_bytes(os.urandom(5 * 1024 * 1024 + 4096))  # two parts
    other = tmp_path / "other.gguf"
    other.write_bytes(b"x" * 4096)
    key = "artifacts/1/models/m-1/artifacts/model.gguf"
    write_once.put_once(client, bucket, key, big)
    assert body(client, bucket, key) == big.read_bytes()
    with pytest.raises(write_once.AlreadyWritten):
        write_once.put_once(client, bucket, key, other)
    assert body(client, bucket, key) == big.read_bytes()
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_an_unconditional_overwrite_on_a_versioned_bucket_keeps_the_first_version(s3_server, bucket):
    """What versioning buys where writes cannot be conditional (DVC's store): the replaced bytes stay readable."""
    client = s3_client(s3_server)
    key = "store/files/md5/ab/cdef"
    client.put_object(Bucket=bucket, Key=key, Body=b"original")
    client.put_object(Bucket=bucket, Key=key, Body=b"tampered")
    versions = client.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
    kept = {client.get_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])["Body"].read() for v in versions}
    assert kept == {b"original", b"tampered"}


def test_mlflow_logs_write_once_only_with_the_repository_installed(s3_server, aws_env, bucket, tmp_path):
    """Plain MLflow replaces an artifact logged twice; with write_once.install() the second upload is refused."""
    import mlflow
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry
    from mlflow.store.artifact.s3_artifact_repo import S3ArtifactRepository

    client = s3_client(s3_server)
    one, two = tmp_path / "one" / "decision.json", tmp_path / "two" / "decision.json"
    for path, text in ((one, "pass"), (two, "fail")):
        path.parent.mkdir()
        path.write_text(text)
    # plain MLflow first, whatever an earlier test of the session installed (register installs it process-wide)
    _artifact_repository_registry.register("s3", S3ArtifactRepository)
    with environment({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}):
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        experiment = mlflow.create_experiment("write-once", artifact_location=f"s3://{bucket}/artifacts/1")
        try:
            with mlflow.start_run(experiment_id=experiment) as run:
                mlflow.log_artifact(str(one), artifact_path="evaluation")
                mlflow.log_artifact(str(two), artifact_path="evaluation")  # plain MLflow: replaced
                key = f"artifacts/1/{run.info.run_id}/artifacts/evaluation/decision.json"
                assert body(client, bucket, key) == b"fail"
            write_once.install()
            with mlflow.start_run(experiment_id=experiment) as run:
                mlflow.log_artifact(str(one), artifact_path="evaluation")
                with pytest.raises(Exception) as refused:
                    mlflow.log_artifact(str(two), artifact_path="evaluation")
                assert "already exists and is write-once" in str(refused.value)
                key = f"artifacts/1/{run.info.run_id}/artifacts/evaluation/decision.json"
                assert body(client, bucket, key) == b"pass"
        finally:
            _artifact_repository_registry.register("s3", S3ArtifactRepository)
