"""The gate on real artifacts: a candidate identical to the base is not proposed, and the registry's champion
joins the comparison as a third contender. Tiny models, llama.cpp, a real MLflow server.

    pytest -m integration tests/test_evaluation_integration.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from steps import convert_gguf, evaluate, register
from steps.contract import serving_config
from tests.conftest import untrained_adapter

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, fetched_dataset: Path) -> dict[str, Path]:
    """A candidate whose training changed nothing: the adapter as the train step initialises it (its B matrices are
    zero, as a run at learning rate 0 leaves them; nothing is trained), merged and converted by the real convert step,
    so the candidate is the base model in a GGUF of its own. The served Q8_0 is the only rung these tests read."""
    root = tmp_path_factory.mktemp("unchanged")
    dataset, adapter, gguf = fetched_dataset, root / "adapter", root / "gguf"
    untrained_adapter(tiny_model_dir, dataset, adapter)
    convert_gguf.run(convert_gguf.ConvertConfig(adapter=adapter, dataset=dataset, out=gguf,
                                                base_model=str(tiny_model_dir), quantizations="Q8_0"))  # fmt: skip
    return {"dataset": dataset, "adapter": adapter, "gguf": gguf, "root": root}


@pytest.fixture(scope="module")
def two_way(unchanged: dict[str, Path]) -> dict:
    """evaluate's two-way run (base and candidate) on the unchanged candidate, with a generation cache: what the
    tests below read, run once (each run generates every answer of both contenders on llama.cpp)."""
    out, cache = unchanged["root"] / "evaluation", unchanged["root"] / "cache"
    cfg = evaluate.EvaluateConfig(dataset=unchanged["dataset"], gguf=unchanged["gguf"], out=out,
                                  generation_cache=str(cache))  # fmt: skip
    return {"result": evaluate.run(cfg), "out": out, "cache": cache, "cfg": cfg}


def test_a_candidate_identical_to_the_base_is_not_proposed(two_way: dict):
    out, result = two_way["out"], two_way["result"]
    decision = json.loads((out / "decision.json").read_text())
    rouge = next(c for c in decision["checks"] if c["check"] == "rougeL_vs_base")
    assert result.passed is False and rouge["passed"] is False
    assert rouge["gain"] == 0.0 and rouge["lower"] == 0.0  # same answers, example for example
    assert result.contenders == "base,candidate"


def test_the_champion_joins_as_a_third_contender(unchanged: dict[str, Path], two_way: dict, mlflow_server: str):
    from mlflow import MlflowClient

    cfg = register.RegisterConfig(
        dataset=unchanged["dataset"], adapter=unchanged["adapter"], gguf=unchanged["gguf"], evaluation=two_way["out"],
        out=unchanged["root"] / "reg", tracking_uri=mlflow_server, model_name="champion-test", run_id="wf-champ",
    )  # fmt: skip
    reg = register.run(cfg)
    # Promotion happens at home; here the test plays that part.
    MlflowClient(tracking_uri=mlflow_server).set_registered_model_alias("champion-test", "champion", reg.model_version)

    out = unchanged["root"] / "evaluation-three-way"
    result = evaluate.run(evaluate.EvaluateConfig(
        dataset=unchanged["dataset"], gguf=unchanged["gguf"], out=out, tracking_uri=mlflow_server,
        model_name="champion-test"))  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())["aggregate"]
    assert result.contenders == "base,champion,candidate"
    assert decision["champion"] == f"champion-test v{reg.model_version} (champion)"
    assert decision["champion_version"] == reg.model_version  # what propose checks is still the champion
    assert "rougeL_vs_champion" in [c["check"] for c in decision["checks"]]
    # The champion is this very candidate: identical answers, so no significant gain over it either.
    assert metrics["bootstrap"]["champion"]["mean_gain"] == 0.0
    assert "| metric | base | champion | candidate |" in (out / "report.md").read_text()
    assert not (out / "_champion").exists()


def test_generations_are_reused_only_for_the_same_file_documents_and_settings(
    two_way: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def run(out: str, tokens: int = serving_config.SERVING.max_tokens) -> dict:
        # The serving configuration, changed in its one place: the cache key follows it.
        monkeypatch.setattr(serving_config, "SERVING", dataclasses.replace(serving_config.SERVING, max_tokens=tokens))
        evaluate.run(dataclasses.replace(two_way["cfg"], out=tmp_path / out))
        return json.loads((tmp_path / out / "metrics.json").read_text())

    first = json.loads((two_way["out"] / "metrics.json").read_text())  # the fixture's run, which filled the cache
    second = run("second")
    assert first["aggregate"]["generations_from_cache"] == []
    assert second["aggregate"]["generations_from_cache"] == ["base", "candidate"]
    assert second["per_example"] == first["per_example"] and second["adversarial"] == first["adversarial"]
    lines = [
        (folder / "generations.jsonl").read_text().splitlines() for folder in (two_way["out"], tmp_path / "second")
    ]
    assert [json.loads(line) for line in lines[1]] == [json.loads(line) for line in lines[0]]
    assert run("longer", tokens=72)["aggregate"]["generations_from_cache"] == []  # other settings: generated afresh
    assert len(list(two_way["cache"].iterdir())) == 4  # 2 files x 2 settings
