"""What is measured is what is served, from one definition (steps/contract/serving_config.py): change it once and
evaluate's
generation, register's record and check, and the served pyfunc model all follow. llama.cpp is a recording stand-in
here; tests/test_registry.py loads the real model from a real registry.

    pytest tests/test_serving_config.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from steps import evaluate, register
from steps.contract import serving_config
from steps.evaluate import cache, generation, llama_internals

CHANGED = serving_config.ServingConfig(max_tokens=7, n_ctx=512, stop=("###",))


class RecordingLlama:
    """Stands in for llama_cpp.Llama: records how it was made and asked, answers "A summary."."""

    made: ClassVar[list[dict[str, Any]]] = []
    asked: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, **kwargs: Any) -> None:
        RecordingLlama.made.append(kwargs)

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        RecordingLlama.asked.append(kwargs)
        return {"choices": [{"message": {"content": "A summary."}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 3}}  # fmt: skip

    def n_ctx(self) -> int:
        return RecordingLlama.made[-1]["n_ctx"]


@pytest.fixture
def llama(monkeypatch: pytest.MonkeyPatch) -> type[RecordingLlama]:
    import llama_cpp

    RecordingLlama.made, RecordingLlama.asked = [], []
    monkeypatch.setattr(llama_cpp, "Llama", RecordingLlama)
    return RecordingLlama


@pytest.fixture
def changed(monkeypatch: pytest.MonkeyPatch) -> serving_config.ServingConfig:
    """The one definition, changed once."""
    assert CHANGED != serving_config.SERVING
    monkeypatch.setattr(serving_config, "SERVING", CHANGED)
    return CHANGED


def served_settings(made: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    return {"n_ctx": made["n_ctx"], "max_tokens": asked["max_tokens"], "stop": asked["stop"],
            "temperature": asked["temperature"], "top_k": asked["top_k"]}  # fmt: skip


EXPECTED = {"n_ctx": 512, "max_tokens": 7, "stop": ["###"], "temperature": 0.0, "top_k": 1}


def test_evaluate_generates_with_the_serving_configuration(llama, changed, tmp_path: Path):
    cfg = evaluate.EvaluateConfig(dataset=tmp_path, gguf=tmp_path, out=tmp_path, threads=1)
    outputs, _ = generation.generate_sequential(tmp_path / "model.gguf", ["The ferry to Arlow is cancelled."], cfg)
    assert outputs == [{"text": "A summary.", "stopped": True, "tokens": 3}]
    assert served_settings(llama.made[0], llama.asked[0]) == EXPECTED
    # The batched path's requests are what create_chat_completion is asked, on a model loaded the same way.
    llm = generation.open_llama(tmp_path / "model.gguf", cfg)
    llama_internals.chat_request(llm, "The ferry to Arlow is cancelled.")
    assert served_settings(llama.made[1], llama.asked[1]) == EXPECTED


def test_only_a_greedy_request_is_decoded_in_batches():
    """generate_all batches what llama-cpp-python would sample greedily from raw logits; anything else (a sampled
    configuration, penalties, a bias) goes one document at a time through create_chat_completion itself."""
    served = {"prompt": [1, 2], "temperature": 0.0, "repeat_penalty": 1.0, "presence_penalty": 0.0,
              "frequency_penalty": 0.0, "logprobs": None, "stream": False, "grammar": None, "logits_processor": None,
              "logit_bias": None}  # fmt: skip
    assert llama_internals.is_greedy(served)
    for change in ({"temperature": 0.7}, {"repeat_penalty": 1.1}, {"logit_bias": {5: 1.0}}, {"prompt": "text"}, {}):
        assert not llama_internals.is_greedy({**served, **change} if change else {})


def test_the_served_model_loads_with_it_by_default_and_with_what_register_logged(llama, changed):
    from steps.contract.model import N_THREADS, SummariserModel, model_config

    logged = model_config()  # what register logs as the pyfunc's model_config
    assert {k: v for k, v in logged.items() if k != N_THREADS} == CHANGED.record()
    for config in (None, logged):
        model = SummariserModel()
        model.load_context(SimpleNamespace(model_config=config, artifacts={"gguf": "model.gguf"}))
        assert model.predict(None, ["The ferry to Arlow is cancelled."]) == ["A summary."]
        assert served_settings(llama.made[-1], llama.asked[-1]) == EXPECTED
    model.predict(None, ["x"], params={"max_tokens": 3})  # the signature's one per-call override
    assert llama.asked[-1]["max_tokens"] == 3


def test_a_logged_configuration_wins_over_the_loading_code(llama, monkeypatch):
    from steps.contract.model import SummariserModel, model_config

    monkeypatch.setattr(serving_config, "SERVING", CHANGED)
    logged = model_config()
    monkeypatch.setattr(serving_config, "SERVING", serving_config.ServingConfig())  # the serving box's code
    model = SummariserModel()
    model.load_context(SimpleNamespace(model_config=json.loads(json.dumps(logged)), artifacts={"gguf": "m.gguf"}))
    assert model.serving == CHANGED


def test_register_records_it_and_refuses_an_evaluation_measured_otherwise(changed, tmp_path: Path):
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    cfg = register.RegisterConfig(dataset=tmp_path, adapter=tmp_path, gguf=tmp_path, evaluation=evaluation,
                                  out=tmp_path / "out")  # fmt: skip
    no_champion = evaluate.Champion(None, None, "none")
    decision = evaluate.decision_record(True, [], no_champion, {"quantization": "Q8_0"})
    register.check_measured_serving(cfg, decision)  # measured with the changed one: accepted
    assert serving_config.SERVING.tags()["serving.max_tokens"] == "7"  # register tags the version with these
    assert serving_config.SERVING.tags()["serving.n_ctx"] == "512"

    default = dataclasses.replace(CHANGED, max_tokens=64, n_ctx=2048, stop=())
    with pytest.raises(ValueError, match=r"measured with serving configuration .* but this code serves"):
        register.check_measured_serving(cfg, {**decision, "serving": default.record()})
    with pytest.raises(ValueError, match=r"does not record the serving configuration"):
        register.check_measured_serving(cfg, {k: v for k, v in decision.items() if k != "serving"})


def test_the_generation_cache_key_follows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF stand-in: only its digest is read")
    cfg = evaluate.EvaluateConfig(dataset=tmp_path, gguf=tmp_path, out=tmp_path, threads=2)
    before = cache.generation_key(gguf, ["a document"], cfg)
    monkeypatch.setattr(serving_config, "SERVING", CHANGED)
    assert cache.generation_key(gguf, ["a document"], cfg) != before


def test_a_record_round_trips_through_json():
    record = json.loads(json.dumps(CHANGED.record()))
    assert serving_config.ServingConfig.from_record(record) == CHANGED


def test_a_batched_decode_step_never_holds_more_than_the_batch():
    """Prompts being fed fill the batch up to n_batch *less* the generating sequences' tokens: before, two prompts
    could fill it and a third slot's token went one past llama.cpp's batch (`NULL pointer access` in evaluate, on a
    dataset published from the sample documents: docs/dataset.md's walk in tests/test_doc_commands.py)."""
    seq = llama_internals._Sequence
    running = {0: seq(0, list(range(300)), 8, [], None), 1: seq(1, list(range(300)), 8, [], None),
               2: seq(2, [1, 2], 8, [], None, fed=2, completion=[5], pending=5)}  # fmt: skip
    items = llama_internals.step_items(running, n_batch=16)
    assert len(items) == 16 and [i[2] for i in items] == [0] * 15 + [2]  # slot 0's prompt, then slot 2's token
    assert running[0].fed == 15 and running[1].fed == 0 and running[2].logits_at == 15
    assert items[-1] == (5, 2, 2, True)  # the token, at its position after prompt + completion so far
    items = llama_internals.step_items(running, n_batch=16)  # a step later: the rest of the room again
    assert len(items) == 16 and running[0].fed == 30
