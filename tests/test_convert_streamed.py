"""convert-gguf never holds a model whole (steps/convert_gguf/streamed.py): the streamed merge is peft's merge, the
streamed model computes the logits of the model loaded whole, and the converter's F16 file is the one a float32 save
of peft's merged model gave.

    pytest tests/test_convert_streamed.py                  # unit tier: a 2-layer Llama, seconds
    pytest -m integration tests/test_convert_streamed.py   # llama.cpp's converter on both inputs
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steps.convert_gguf import streamed
from tests.conftest import ROOT
from tests.tiny import build_model

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def base_and_adapter(tmp_path_factory: pytest.TempPathFactory, base_model_dir: Path) -> tuple[Path, Path]:
    """A 2-layer Llama (float32 safetensors, tied head) and a LoRA adapter on every projection with random B."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("streamed")
    base, adapter = root / "base", root / "adapter"
    build_model(base_model_dir, base, max_positions=1024)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=8, lora_alpha=16,
                                                                                 target_modules=TARGETS))  # fmt: skip
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    model.save_pretrained(adapter)
    return base, adapter


def loaded(base: Path, adapter: Path | None = None):
    """The model as convert-gguf loaded it before: whole, float32 (with peft attached over it)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    return (PeftModel.from_pretrained(model, str(adapter)) if adapter else model).eval()


def logits(model, tokenizer):
    import torch

    ids = torch.tensor([tokenizer("Ünïcödé and plain words, 3.14 and more", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        return model(ids).logits


def test_the_streamed_merge_equals_peft_merge_and_unload(base_and_adapter, tmp_path: Path):
    """Targets: exactly peft's float32 merge rounded once to float16 (the F16 file's type); the rest as stored."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    base, adapter = base_and_adapter
    attached = PeftModel.from_pretrained(streamed.streamed_model(base), str(adapter))
    deltas = streamed.lora_deltas(attached)
    assert len(deltas) == 2 * len(TARGETS)
    out = streamed.write_converter_input(base, deltas, AutoTokenizer.from_pretrained(base), tmp_path / "hf")
    index = json.loads((out / streamed.INDEX).read_text())["weight_map"]
    written = {}
    for shard in sorted(set(index.values())):
        written.update(load_file(out / shard))
    assert set(written) == set(index)
    expected = loaded(base, adapter).merge_and_unload().state_dict()
    stored = load_file(base / "model.safetensors")
    assert set(written) == set(stored)
    for name, tensor in written.items():
        if name in deltas:
            assert tensor.dtype == torch.float16, name
            assert torch.equal(tensor, expected[name].to(torch.float16)), name
            assert not torch.equal(tensor, stored[name].to(torch.float16)), f"{name}: the adapter was not merged"
        else:
            assert torch.equal(tensor, stored[name]), name


def test_the_streamed_model_computes_the_whole_models_logits(base_and_adapter):
    """Base, adapter attached, and merged (float32 W + delta): bit for bit what the model loaded whole computes."""
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    base, adapter = base_and_adapter
    tok = AutoTokenizer.from_pretrained(base)
    assert torch.equal(logits(streamed.streamed_model(base), tok), logits(loaded(base), tok))
    attached = PeftModel.from_pretrained(streamed.streamed_model(base), str(adapter)).eval()
    assert torch.equal(logits(attached, tok), logits(loaded(base, adapter), tok))
    merged = streamed.streamed_model(base, streamed.lora_deltas(attached))
    assert torch.equal(logits(merged, tok), logits(loaded(base, adapter).merge_and_unload(), tok))
    assert not torch.equal(logits(merged, tok), logits(loaded(base), tok))
    # Nothing stays resident: every parameter is an empty placeholder again after the forward.
    assert all(p.numel() == 0 for p in merged.parameters())


def test_the_merge_writes_shards_of_bounded_size(base_and_adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoTokenizer

    base, adapter = base_and_adapter

    deltas = streamed.lora_deltas(PeftModel.from_pretrained(streamed.streamed_model(base), str(adapter)))
    monkeypatch.setattr(streamed, "MERGE_SHARD_BYTES", 40_000)
    out = streamed.write_converter_input(base, deltas, AutoTokenizer.from_pretrained(base), tmp_path / "hf")
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) > 2 and not list(out.glob("part-*"))
    for shard in shards:
        with safe_open(shard, framework="pt") as f:
            sizes = [f.get_slice(k).get_shape() for k in f.keys()]  # noqa: SIM118 (safe_open is not iterable)
        nbytes = sum(2 * math.prod(s) for s in sizes)  # float16 targets, float32 rest: at least 2 bytes each
        assert len(sizes) == 1 or nbytes <= 40_000, shard.name


def test_without_an_adapter_the_base_files_are_linked_not_copied(base_and_adapter, tmp_path: Path):
    from transformers import AutoTokenizer

    base, _ = base_and_adapter
    out = streamed.write_converter_input(base, {}, AutoTokenizer.from_pretrained(base), tmp_path / "hf")
    assert (out / "model.safetensors").resolve() == (base / "model.safetensors").resolve()
    assert (out / "config.json").read_text() == (base / "config.json").read_text()


def test_an_adapter_the_merge_cannot_express_is_refused_with_every_reason(base_and_adapter):
    from peft import LoraConfig, get_peft_model

    base, _ = base_and_adapter
    model = get_peft_model(streamed.streamed_model(base), LoraConfig(r=4, target_modules=["q_proj"], bias="all",
                                                                     modules_to_save=["lm_head"]))  # fmt: skip
    with pytest.raises(ValueError) as e:
        streamed.lora_deltas(model)
    assert "bias='all'" in str(e.value) and "modules_to_save=" in str(e.value)


def test_a_base_without_safetensors_is_refused_with_the_fix(tmp_path: Path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="holds no safetensors weights"):
        streamed.weight_files(tmp_path)


@pytest.mark.integration
def test_the_f16_gguf_is_the_one_a_float32_save_of_the_merged_model_gave(base_and_adapter, tmp_path: Path):
    """llama.cpp's converter on the streamed merge and on save_pretrained of peft's float32 merge (what convert-gguf
    did before): every tensor of the two F16 files has the same bytes."""
    import gguf
    import numpy as np
    from peft import PeftModel
    from transformers import AutoTokenizer

    base, adapter = base_and_adapter
    tok = AutoTokenizer.from_pretrained(base)
    deltas = streamed.lora_deltas(PeftModel.from_pretrained(streamed.streamed_model(base), str(adapter)))
    inputs = {"streamed": streamed.write_converter_input(base, deltas, tok, tmp_path / "streamed")}
    inputs["saved"] = tmp_path / "saved"
    loaded(base, adapter).merge_and_unload().save_pretrained(inputs["saved"])
    tok.save_pretrained(inputs["saved"])
    converter = Path(os.environ.get("DISTILLERY_LLAMA_CPP", ROOT / ".cache/llama.cpp"))
    files = {}
    for name, folder in inputs.items():
        files[name] = tmp_path / f"{name}.gguf"
        command = [sys.executable, str(converter / "convert_hf_to_gguf.py"), str(folder), "--outfile",
                   str(files[name]), "--outtype", "f16"]  # fmt: skip
        assert subprocess.run(command, capture_output=True).returncode == 0, name
    tensors = {name: {t.name: t for t in gguf.GGUFReader(path).tensors} for name, path in files.items()}
    assert set(tensors["streamed"]) == set(tensors["saved"]) and tensors["saved"]
    for name, tensor in tensors["saved"].items():
        other = tensors["streamed"][name]
        assert tensor.tensor_type == other.tensor_type, name
        assert np.array_equal(np.asarray(tensor.data), np.asarray(other.data)), name
    shutil.rmtree(tmp_path / "saved")
