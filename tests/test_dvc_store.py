"""fetch-dataset reads what the dataset revision recorded, or nothing: an object overwritten in the DVC store (S3)
after the revision was published is refused, naming the file and both md5s (issue #27, item 2). Against the real S3
server from conftest.

pytest -m integration tests/test_dvc_store.py
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from steps import fetch_dataset
from steps.core.dataset import DatasetError
from tests.conftest import ROOT, make_bucket, s3_client
from tests.test_fetch_dataset import dvc_repo_on_s3

integration = pytest.mark.integration


@integration
def test_an_object_overwritten_in_the_dvc_store_is_refused(s3_server: str, aws_env: dict, tmp_path: Path):
    make_bucket(s3_server, "dvc-store-once")
    repo = dvc_repo_on_s3(s3_server, "dvc-store-once", tmp_path / "data-repo")
    cfg = fetch_dataset.FetchConfig(out=tmp_path / "out", dataset_repo=str(repo), dataset_rev="data-v1")
    assert fetch_dataset.run(cfg).train_rows > 0  # as published: read

    # A holder of the write grant on the store replaces train.jsonl's object with rows of its own (still valid).
    original = (ROOT / "data/summaries/train.jsonl").read_bytes()
    md5 = hashlib.md5(original).hexdigest()
    key = f"store/files/md5/{md5[:2]}/{md5[2:]}"
    s3 = s3_client(s3_server)
    s3.head_object(Bucket="dvc-store-once", Key=key)  # the object the revision names is where DVC keeps it
    planted = original.replace(b"library", b"lieberry", 1)
    assert planted != original
    s3.put_object(Bucket="dvc-store-once", Key=key, Body=planted)
    shutil.rmtree(repo / ".dvc/cache", ignore_errors=True)
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    with pytest.raises(DatasetError, match=r"train\.jsonl: read bytes have md5") as refused:
        fetch_dataset.run(cfg)
    assert md5 in str(refused.value) and "overwritten" in str(refused.value)
    assert not (tmp_path / "out").exists()
