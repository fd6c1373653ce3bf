"""Steps that Argo retries (workflows/pods.py: DEFAULT_RETRY, OnError) reach the same end when an attempt runs
again on the state the previous one left: the cheap ones, each run twice here. The others are shown elsewhere:
register (idempotent per run id: tests/test_registry.py, tests/test_integration.py), evaluate (same scores from a
second run: tests/test_evaluation_integration.py), train (resumes from its checkpoints: tests/test_train.py),
convert-gguf's base cache (tests/test_gguf_parity.py), check-triggers (tests/test_triggers.py). Not here: preflight
(two real runs take ~40 s on 2 busy cores; it only reads the base model and writes its report with `atomic_dir`).

    pytest tests/test_retry_safe.py
    pytest -m integration tests/test_retry_safe.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steps import propose, register
from steps.fetch_dataset import FetchConfig
from steps.fetch_dataset import run as fetch
from tests import test_fetch_dataset
from tests.test_registry import pipeline_outputs, reg_config

integration = pytest.mark.integration
# Fixtures of the modules whose steps are run again here; found by pytest as attributes of this module.
data_repo = test_fetch_dataset.data_repo


# What a repeated step may write differently: how long it took.
CLOCK = {"_outputs/wall-seconds"}


def _without_clock(path: Path) -> bytes:
    if path.name == "result.json":
        data = json.loads(path.read_text())
        data.pop("wall_seconds", None)
        return json.dumps(data, sort_keys=True).encode()
    return path.read_bytes()


def files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): _without_clock(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and str(p.relative_to(folder)) not in CLOCK
    }


def test_fetch_dataset_twice_into_the_same_out_writes_the_same_bytes(data_repo: Path, tmp_path: Path):
    cfg = FetchConfig(out=tmp_path / "dataset", dataset_repo=str(data_repo), dataset_rev="v1", dataset_path="data")
    first = fetch(cfg)
    written = files(tmp_path / "dataset")
    again = fetch(cfg)
    assert again == first
    assert files(tmp_path / "dataset") == written  # lineage.json and result.json included: no attempt id
    assert {"train.jsonl", "eval.jsonl", "adversarial.jsonl", "lineage.json", "result.json"} <= set(written)


@integration
def test_propose_twice_sets_the_same_alias_and_tags(tiny_gguf: Path, mlflow_server: str, tmp_path: Path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    outputs = pipeline_outputs(tmp_path, tiny_gguf, rouge=0.3)
    reg = register.run(reg_config(outputs, tmp_path / "reg", mlflow_server, "retry-propose", "wf-propose"))
    cfg = propose.ProposeConfig(registration=tmp_path / "reg", evaluation=outputs["evaluation"],
                                out=tmp_path / "prop", tracking_uri=mlflow_server)  # fmt: skip

    def state() -> tuple[dict, dict[str, str], dict]:
        aliases = client.get_registered_model("retry-propose").aliases
        tags = client.get_model_version("retry-propose", reg.model_version).tags
        return aliases, tags, json.loads(_without_clock(tmp_path / "prop/result.json"))

    first = propose.run(cfg)
    after_first = state()
    again = propose.run(cfg)
    assert again == first and first.proposed
    assert state() == after_first
    assert after_first[0] == {"challenger": reg.model_version}
    assert after_first[1]["proposal"] == "challenger" and after_first[1]["proposal.champion"] == "none"
