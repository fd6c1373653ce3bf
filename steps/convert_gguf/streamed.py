"""The base's weights read tensor by tensor from its safetensors files, never a whole model in memory: the merge
(`write_converter_input`: the base's tensors with the adapter merged in, as shards llama.cpp's converter reads) and
the HF side of parity (`streamed_model`: a transformers model whose modules read their float32 weights from the files
when they run and drop them after).

- Merge: per LoRA target, W + scale·B@A in float32 (peft's own `get_delta_weight`, so scaling, rsLoRA and
  fan-in-fan-out are peft's), then float16 — the F16 GGUF's type: the converter's own cast to f16 is then the
  identity, and the F16 file holds what converting a float32 save of the merged model gave. The other tensors are
  copied as stored. Output shards of at most MERGE_SHARD_BYTES (or one tensor), written as they fill: the merge holds
  one shard and one tensor's float32 terms.
- HF side: the model is built on the meta device (no storage), each parameter replaced by an empty placeholder, and
  each module that owns weights reads them (float32; with `deltas`, W + the adapter's delta: the merged model) in a
  forward pre-hook and gives them back in a forward hook. The logits are those of the model loaded whole in float32,
  the merged model's or, with peft attached over it, the adapter-attached one's; what is resident is one module's
  weights, the activations and the KV cache.
Each tensor is read by opening its file anew (`read_tensor`): safetensors maps the file, and the mapping's pages
count as the process's resident memory until it is closed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from steps.core.io import read_json
from steps.gguf.settings import MERGE_SHARD_BYTES

# The converter reads the weights besides these from the base's folder; the tokenizer is saved by the step.
CONFIG_FILES = ("config.json", "generation_config.json")
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it, for the base in `folder`."""
    from safetensors import safe_open

    if (folder / INDEX).is_file():
        return {name: folder / file for name, file in read_json(folder / INDEX)["weight_map"].items()}
    if (folder / SINGLE).is_file():
        with safe_open(folder / SINGLE, framework="pt") as f:
            return dict.fromkeys(f.keys(), folder / SINGLE)
    raise FileNotFoundError(
        f"{folder} holds no safetensors weights ({SINGLE} or {INDEX}): convert-gguf reads the base tensor by tensor "
        "from safetensors; save the base with transformers' save_pretrained (safetensors is its default)"
    )


def read_tensor(path: Path, name: str) -> Any:
    """One tensor as stored, its file opened for it alone (the mapping closes with it)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return f.get_tensor(name)


def lora_deltas(attached: Any) -> dict[str, Callable[[], Any]]:
    """The adapter's float32 delta per base tensor name ("model.layers.0.self_attn.q_proj.weight"), computed when
    called, from a peft model over the base (`attached`). Refuses, all at once, what a delta cannot express."""
    import torch
    from peft.tuners.lora import LoraLayer

    adapter = attached.active_adapter
    config = attached.peft_config[adapter]
    problems = []
    if getattr(config, "use_dora", False):
        problems.append("use_dora: a DoRA merge rescales each column by the merged weight's norm")
    if config.bias != "none":
        problems.append(f"bias={config.bias!r}: the adapter trains biases of its own")
    if config.modules_to_save:
        problems.append(f"modules_to_save={config.modules_to_save}: whole modules ride in the adapter")
    deltas: dict[str, Callable[[], Any]] = {}
    for name, module in attached.get_base_model().named_modules():
        if not isinstance(module, LoraLayer) or adapter not in module.lora_A:
            continue
        if not isinstance(module.get_base_layer(), torch.nn.Linear):
            problems.append(f"{name}: LoRA on a {type(module.get_base_layer()).__name__}, not a Linear layer")
            continue

        def delta(layer: Any = module) -> Any:
            with torch.no_grad():
                return layer.get_delta_weight(adapter).float()

        deltas[f"{name}.weight"] = delta
    if problems:
        raise ValueError(
            f"convert-gguf merges LoRA adapters on Linear layers only; this adapter has: {'; '.join(problems)}"
        )
    return deltas


def streamed_model(folder: Path, deltas: dict[str, Callable[[], Any]] | None = None) -> Any:
    """The causal LM in `folder` in float32 (with `deltas`: merged), its weights read per module as it runs."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    files = weight_files(folder)
    deltas = deltas or {}
    with init_empty_weights():  # parameters on the meta device; buffers (rotary frequencies) computed as usual
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32)
    model.tie_weights()  # as from_pretrained does: a tied head is the embeddings' tensor
    # Tied parameters (the head and the embeddings) are one tensor stored under one of their names.
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    stored = {name: next((n for n in group if n in files), None) for group in names.values() for name in group}
    missing = sorted(name for name, key in stored.items() if key is None)
    if missing:
        raise ValueError(f"{folder}: the weight files hold no tensor for {missing[:5]}: not this config's model")

    def load(key: str) -> Any:
        tensor = read_tensor(files[key], key).float()
        if key in deltas:
            tensor += deltas[key]()
        return torch.nn.Parameter(tensor, requires_grad=False)

    for module_name, module in model.named_modules():
        own = [n for n, p in module._parameters.items() if p is not None]
        if not own:
            continue
        keys = {n: stored[f"{module_name}.{n}" if module_name else n] for n in own}
        placeholder = torch.nn.Parameter(torch.empty(0), requires_grad=False)  # a CPU float32 tensor, no storage
        for n in own:
            module._parameters[n] = placeholder

        def fill(mod: Any, args: Any, keys: dict[str, str] = keys) -> None:
            for n, key in keys.items():
                mod._parameters[n] = load(key)

        def drop(mod: Any, args: Any, output: Any, keys: dict[str, str] = keys, empty: Any = placeholder) -> None:
            for n in keys:
                mod._parameters[n] = empty

        module.register_forward_pre_hook(fill)
        module.register_forward_hook(drop)
    return model.eval()


def write_converter_input(folder: Path, deltas: dict[str, Callable[[], Any]], tokenizer: Any, out: Path) -> Path:
    """The folder llama.cpp's converter reads: the base's config, `tokenizer`, and its weights — linked as they are
    when there is no adapter, else merged shard by shard (float16 targets, the rest as stored) with their index."""
    import torch

    files = weight_files(folder)
    out.mkdir(parents=True)
    for name in CONFIG_FILES:
        if (folder / name).is_file():
            shutil.copyfile(folder / name, out / name)
    tokenizer.save_pretrained(out)
    if not deltas:
        for path in [*sorted(set(files.values())), folder / INDEX]:
            if path.is_file():
                os.symlink(path.resolve(), out / path.name)
        return out
    unknown = sorted(set(deltas) - set(files))
    if unknown:
        raise ValueError(f"the adapter targets tensors the base in {folder} does not have: {unknown[:5]}")
    written: list[list[str]] = []  # each shard's tensor names, in order
    shard: dict[str, Any] = {}
    size = 0
    for name, path in sorted(files.items(), key=lambda item: (str(item[1]), item[0])):  # each file read in order
        tensor = read_tensor(path, name)
        if name in deltas:
            tensor = (tensor.float() + deltas[name]()).to(torch.float16)
        nbytes = tensor.numel() * tensor.element_size()
        if shard and size + nbytes > MERGE_SHARD_BYTES:
            written.append(_save(shard, out, len(written)))
            shard, size = {}, 0  # the written shard's tensors go
        shard[name] = tensor
        size += nbytes
        del tensor
    written.append(_save(shard, out, len(written)))
    weight_map = {}
    for i, names in enumerate(written, 1):  # named as transformers names shards (the converter globs model*)
        final = f"model-{i:05d}-of-{len(written):05d}.safetensors"
        (out / f"part-{i:05d}.safetensors").rename(out / final)
        weight_map.update(dict.fromkeys(names, final))
    (out / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    return out


def _save(shard: dict[str, Any], out: Path, done: int) -> list[str]:
    from safetensors.torch import save_file

    save_file(shard, out / f"part-{done + 1:05d}.safetensors", metadata={"format": "pt"})
    return list(shard)
