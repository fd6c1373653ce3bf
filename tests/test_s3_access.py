"""The artifact bucket as the workflows use it: the IAM policy covers every S3 location the rendered templates read,
write or prune (and no more), and the lifecycle rules expire the per-run prefixes and caches, never a run's outputs."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest
import yaml

from tests.conftest import ROOT, make_bucket, s3_client
from tests.manifests import default_artifact_repository, rendered_template
from workflows import distill

POLICY = json.loads((ROOT / "infra/iam/distillery-workflows-policy.json").read_text())
LIFECYCLE = json.loads((ROOT / "infra/s3/distillery-artifacts-lifecycle.json").read_text())
TEMPLATES = sorted((ROOT / "infra/argo").glob("*.yaml"))


def allowed(action: str, arn: str) -> bool:
    """IAM's own matching for an Allow-only policy: `*` matches any characters, `/` included."""
    return any(
        st["Effect"] == "Allow" and action in st["Action"] and any(fnmatch.fnmatchcase(arn, r) for r in st["Resource"])
        for st in POLICY["Statement"]
    )


def concrete(key: str) -> str:
    return re.sub(r"\{\{[^}]*\}\}", "x", key).strip("/")


def step_locations() -> set[tuple[str, str]]:
    """(bucket, key) of every s3:// URI handed to a step: checkpoints, Ray's run prefix, the shared caches."""
    found = set()
    for path in TEMPLATES:
        for bucket, key in re.findall(r"s3://([a-z0-9.-]+)/([^'\"\s]+)", path.read_text()):
            found.add((bucket, concrete(key)))
    return found


def artifact_keys() -> set[str]:
    """Keys of the Argo artifacts that name their own key in the default artifact repository."""
    keys = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("s3"), dict) and "key" in node["s3"]:
                keys.add(concrete(node["s3"]["key"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in TEMPLATES:
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc)
    return keys


def test_the_templates_use_the_run_prefix_and_both_caches():
    keys = {key.split("/")[0] for _, key in step_locations()}
    assert keys == {"runs", "cache"} and len(step_locations()) >= 5
    assert artifact_keys() >= {"runs/x/dataset", "runs/x/adapter"}


def test_steps_may_read_write_and_prune_every_location_they_are_given():
    # Checkpoint stores and sealed caches delete superseded or torn folders, so DeleteObject too.
    for bucket, key in step_locations():
        assert allowed("s3:ListBucket", f"arn:aws:s3:::{bucket}"), bucket
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert allowed(action, f"arn:aws:s3:::{bucket}/{key}/some/object"), (action, bucket, key)


def test_argo_may_store_every_artifact_and_log():
    repo = default_artifact_repository()["s3"]
    keys = artifact_keys() | {concrete(repo["keyFormat"]) + "/main.log"}
    for key in keys:
        for action in ("s3:GetObject", "s3:PutObject"):
            assert allowed(action, f"arn:aws:s3:::{repo['bucket']}/{key}"), (action, key)


def test_nothing_beyond_the_two_buckets_and_datasets_are_read_only():
    assert not allowed("s3:GetObject", "arn:aws:s3:::someone-elses-bucket/x")
    assert not allowed("s3:PutObject", "arn:aws:s3:::distillery-dvc/files/md5/ab/cdef")
    assert not allowed("s3:DeleteObject", f"arn:aws:s3:::{distill.BUCKET}/distill/2026/11/wf/pod/main.log")
    assert allowed("s3:GetObject", "arn:aws:s3:::distillery-dvc/files/md5/ab/cdef")


def expiry_days(key: str) -> int | None:
    """Days after which the lifecycle rules delete an object at `key`, or None when nothing does."""
    days = [
        r["Expiration"]["Days"]
        for r in LIFECYCLE["Rules"]
        if r["Status"] == "Enabled" and "Expiration" in r and key.startswith(r["Filter"]["Prefix"])
    ]
    return min(days, default=None)


def test_lifecycle_rules_are_a_valid_s3_request():
    """Checked against botocore's model of S3's PutBucketLifecycleConfiguration, as `aws s3api` would send it."""
    import botocore.session
    from botocore.validate import validate_parameters

    shape = botocore.session.get_session().get_service_model("s3").operation_model("PutBucketLifecycleConfiguration")
    validate_parameters({"Bucket": distill.BUCKET, "LifecycleConfiguration": LIFECYCLE}, shape.input_shape)


def test_run_prefixes_and_caches_expire_and_outputs_are_kept():
    deadline = rendered_template()["spec"]["activeDeadlineSeconds"]
    for _, key in step_locations():
        days = expiry_days(key + "/object")
        assert days is not None, key
        assert days * 86400 > 2 * deadline, (key, days)  # never under a running workflow
    repo = default_artifact_repository()["s3"]
    assert expiry_days(concrete(repo["keyFormat"]) + "/adapter.tgz") is None  # the run's outputs and logs stay


@pytest.mark.integration
def test_lifecycle_rules_are_accepted_by_an_s3_server(s3_server: str):
    make_bucket(s3_server, distill.BUCKET)
    client = s3_client(s3_server)
    client.put_bucket_lifecycle_configuration(Bucket=distill.BUCKET, LifecycleConfiguration=LIFECYCLE)
    rules = client.get_bucket_lifecycle_configuration(Bucket=distill.BUCKET)["Rules"]
    assert {r["ID"]: r.get("Expiration") for r in rules} == {r["ID"]: r.get("Expiration") for r in LIFECYCLE["Rules"]}
