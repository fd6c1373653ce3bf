"""The workflows' IAM policy covers every S3 location the rendered templates read, write or prune, and no more."""

from __future__ import annotations

import fnmatch
import json
import re

import yaml

from tests.conftest import ROOT
from workflows import distill

POLICY = json.loads((ROOT / "infra/iam/distillery-workflows-policy.json").read_text())
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
    config_map = yaml.safe_load((ROOT / "infra/artifact-repository.yaml").read_text())
    default = config_map["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    repo = yaml.safe_load(config_map["data"][default])["s3"]
    keys = artifact_keys() | {concrete(repo["keyFormat"]) + "/main.log"}
    for key in keys:
        for action in ("s3:GetObject", "s3:PutObject"):
            assert allowed(action, f"arn:aws:s3:::{repo['bucket']}/{key}"), (action, key)


def test_nothing_beyond_the_two_buckets_and_datasets_are_read_only():
    assert not allowed("s3:GetObject", "arn:aws:s3:::someone-elses-bucket/x")
    assert not allowed("s3:PutObject", "arn:aws:s3:::distillery-dvc/files/md5/ab/cdef")
    assert not allowed("s3:DeleteObject", f"arn:aws:s3:::{distill.BUCKET}/distill/2026/11/wf/pod/main.log")
    assert allowed("s3:GetObject", "arn:aws:s3:::distillery-dvc/files/md5/ab/cdef")
