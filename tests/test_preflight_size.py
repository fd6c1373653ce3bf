"""preflight's sizing: the parameter count from the config alone (meta device), its flags, and the plan it exports.

pytest tests/test_preflight_size.py                  # the fast tier
pytest -m integration tests/test_preflight_size.py   # + preflight refusing a base no node can train (converter)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steps import preflight, sizing
from steps.core.cli import PARAM_DIR, write_result
from steps.pipeline import STAGES
from tests.conftest import BASE_MODEL, ROOT


def llama_config(hidden: int, intermediate: int, layers: int, heads: int, vocab: int, tied: bool):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, vocab_size=vocab, tie_word_embeddings=tied,
    )  # fmt: skip


def test_count_matches_the_closed_form_of_a_llama():
    hidden, inter, layers, vocab = 64, 128, 2, 1000
    per_layer = 4 * hidden * hidden + 3 * hidden * inter + 2 * hidden  # attention, MLP, two RMSNorms
    expected = vocab * hidden + layers * per_layer + hidden  # embeddings (tied with the head), final norm
    assert sizing.count_parameters(llama_config(hidden, inter, layers, 4, vocab, tied=True)) == expected
    untied = sizing.count_parameters(llama_config(hidden, inter, layers, 4, vocab, tied=False))
    assert untied == expected + vocab * hidden


def test_a_7b_model_is_counted_without_allocating_it():
    count = sizing.count_parameters(llama_config(4096, 11008, 32, 32, 32000, tied=False))  # Llama-2-7B's shape
    assert 6.7e9 < count < 6.8e9


def _defaults(config_cls: type) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(config_cls)}


def test_the_sizing_flags_default_to_train_s_and_convert_gguf_s():
    from steps.convert_gguf import ConvertConfig
    from steps.train import TrainConfig

    mine, train, convert = _defaults(preflight.PreflightConfig), _defaults(TrainConfig), _defaults(ConvertConfig)
    for name in ("train_backend", "qlora", "max_seq_len", "batch_size", "lora_r", "epochs"):
        assert mine[name] == train[name], name
    assert mine["quantizations"] == convert["quantizations"]
    from steps.register import RegisterConfig

    assert mine["price_table"] == _defaults(RegisterConfig)["price_table"]  # the forecast prices as register does


def test_preflight_takes_every_parameter_the_pipeline_passes_it():
    [stage] = [s for s in STAGES if s.module == "steps.preflight"]
    flags = {f.name.replace("_", "-") for f in dataclasses.fields(preflight.PreflightConfig)}
    assert set(stage.params) <= flags


def test_help_is_instant_without_torch():
    code = "import sys, steps.preflight, steps.sizing; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(not (BASE_MODEL / "config.json").is_file(), reason=f"no base model at {BASE_MODEL}")
def test_every_export_of_the_pipeline_is_an_output_file(tmp_path: Path):
    """The result preflight writes gives Argo a file for each output the pipeline says it exports."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(BASE_MODEL)
    plan = sizing.plan(config, backend="ray", qlora=False, max_seq_len=256, batch_size=8, lora_r=16,
                       quantizations="Q8_0,Q4_K_M", base_model=str(BASE_MODEL))  # fmt: skip
    result = preflight.PreflightResult("LlamaForCausalLM", 0.135, True, sizing=plan.outputs())
    write_result(tmp_path, result.fields())
    [stage] = [s for s in STAGES if s.module == "steps.preflight"]
    written = {p.name for p in (tmp_path / PARAM_DIR).iterdir()}
    assert set(stage.exports) <= written
    for name in sizing.size_inputs("convert-gguf"):  # whole numbers: the templates build the patch around them
        assert (tmp_path / PARAM_DIR / sizing.size_output("convert-gguf", name)).read_text().isdigit(), name
    assert (tmp_path / PARAM_DIR / sizing.ray_workers_output("large")).read_text() == "4"  # SmolLM2-135M, 8 x 256


def big_base(tmp_path: Path) -> Path:
    """SmolLM2's tokenizer under Llama-3.1-70B's dimensions (its vocabulary kept): a config with no weights. (An 8B
    base fits the large Ray group in bf16 and convert-gguf within 32 GiB since issue #24.)"""
    folder = tmp_path / "big"
    folder.mkdir()
    for name in preflight.TOKENIZER_FILES:
        if (BASE_MODEL / name).is_file():
            shutil.copy(BASE_MODEL / name, folder / name)
    config = json.loads((BASE_MODEL / "config.json").read_text())
    config.update(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                  num_key_value_heads=8, head_dim=128, tie_word_embeddings=False)  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.integration
@pytest.mark.skipif(not (BASE_MODEL / "config.json").is_file(), reason=f"no base model at {BASE_MODEL}")
def test_preflight_refuses_a_ray_run_no_node_group_can_hold(tmp_path: Path):
    cfg = preflight.PreflightConfig(out=tmp_path / "pf", base_model=str(big_base(tmp_path)), train_backend="ray")
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.run(cfg)
    message = str(refused.value)
    assert "train-backend ray cannot hold" in message and "large: 31 GiB allocatable" in message  # the biggest group
    assert "convert-gguf cannot hold" in message  # listed with the other problems
    assert not (tmp_path / "pf").exists()


@pytest.mark.integration
@pytest.mark.skipif(not (BASE_MODEL / "config.json").is_file(), reason=f"no base model at {BASE_MODEL}")
def test_preflight_writes_the_plan_and_the_sizing_outputs(tmp_path: Path):
    cfg = preflight.PreflightConfig(out=tmp_path / "pf", base_model=str(BASE_MODEL), train_backend="gpu")
    result = preflight.run(cfg)
    report = json.loads((tmp_path / "pf/preflight.json").read_text())
    assert report["sizing"]["knobs"]["backend"] == "gpu" and report["sizing"]["gpu_card"]
    for name in sizing.preflight_exports():
        assert (tmp_path / "pf" / PARAM_DIR / name).read_text() == str(result.sizing[name])


@pytest.mark.integration
@pytest.mark.skipif(not (BASE_MODEL / "config.json").is_file(), reason=f"no base model at {BASE_MODEL}")
def test_preflight_forecasts_training_from_the_dataset_s_tokens(tmp_path: Path, capsys: pytest.CaptureFixture):
    """The committed train split, tokenised as train encodes it, over the cpu backend's rate: printed, written to
    preflight.json and exported; register reads it from there."""
    data = ROOT / "data/summaries"
    cfg = preflight.PreflightConfig(out=tmp_path / "pf", base_model=str(BASE_MODEL), dataset=str(data), epochs=2.0)
    result = preflight.run(cfg)
    forecast = json.loads((tmp_path / "pf/preflight.json").read_text())["forecast"]
    rows = len((data / "train.jsonl").read_text().splitlines())
    assert 2 * rows * 50 < forecast["tokens"] <= 2 * rows * cfg.max_seq_len  # every example, twice
    assert forecast["seconds"] == pytest.approx(forecast["tokens"] / forecast["tokens_per_second"], rel=1e-3)
    assert result.forecast_seconds == forecast["seconds"] and "training forecast" in result.forecast
    assert (tmp_path / "pf" / PARAM_DIR / "forecast-seconds").read_text() == str(forecast["seconds"])
