"""The base's half of the work, kept between runs: its conversion at the served quantisation and that file's parity
report, in a sealed folder (steps/core/sealed.py) keyed by what determines them (`base_cache_key`), reused or made
(`base_conversion`)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from steps.convert_gguf.config import ConvertConfig
from steps.convert_gguf.export import export
from steps.convert_gguf.streamed import streamed_model, write_converter_input
from steps.core.io import read_json, sha256_file, write_json
from steps.core.sealed import SealedFolders
from steps.gguf import parity

CACHE_FILE = "base.gguf"
CACHE_REPORT = "report.json"
# The version of the code that makes and checks a cached base conversion (steps/gguf/conversion.py,
# steps/gguf/parity.py, export.export, the streamed float32 model and the converter's input, streamed.py): part of the
# cache key. Bump it in the same change
# whenever that code would now make another GGUF or another parity report from the same base — other references,
# another figure or threshold inside the per-file report, another dtype — so that no run reuses an entry made the old
# way. Rewording a comment, a message or a line of parity.md needs no bump: the key is not the source's bytes.
# 2: references batched, greedy output read off the teacher-forced pass; 3: the converter reads the base's own files
# (not a float32 save of it) and the references come from the streamed model.
BASE_CONVERSION_VERSION = 3
# The base's files the conversion and its parity check read besides the weights: config, tokenizer, chat template.
BASE_META_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken")
# The weights as transformers finds them in a folder, in its order of preference: one file, or shards by an index.
BASE_WEIGHTS = (
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
)


def _weight_files(folder: Path) -> list[Path] | None:
    """The weight files transformers loads from `folder`, or None when any of them is not there."""
    for single, index in BASE_WEIGHTS:
        if (folder / index).is_file():
            shards = [folder / name for name in sorted(set(read_json(folder / index)["weight_map"].values()))]
            return shards if all(p.is_file() for p in shards) else None
        if (folder / single).is_file():
            return [folder / single]
    return None


def base_folder(cfg: ConvertConfig) -> Path:
    """The base's folder: itself, or the hub revision's snapshot holding every file the key covers."""
    folder = Path(cfg.base_model)
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download

    # Not local_files_only: what a pod has downloaded so far (the tokenizer, before the weights) is not the revision,
    # and a key of only those files is the same for a new revision with the same tokenizer. The weights are needed
    # anyway (the candidate merges into them); safetensors first, as transformers, so a repository that also ships
    # PyTorch .bin files is not downloaded twice.
    meta = [f"*{suffix}" for suffix in BASE_META_SUFFIXES]
    for weights in ("*.safetensors", "*.bin"):
        folder = Path(
            snapshot_download(
                cfg.base_model, revision=cfg.base_revision, allow_patterns=[*meta, weights], ignore_patterns=["*/*"]
            )
        )
        if _weight_files(folder) is not None:
            break
    return folder


def _converter_version(converter_dir: Path) -> str:
    """llama.cpp's converter: the release scripts/install_llama_cpp.sh took it from, else the digest of its sources."""
    if (converter_dir / "VERSION").is_file():
        return (converter_dir / "VERSION").read_text().strip()
    sources = sorted(p for p in converter_dir.rglob("*.py") if p.is_file())  # the script, conversion/, gguf-py/
    digest = hashlib.sha256()
    for path in sources:
        digest.update(f"{path.relative_to(converter_dir).as_posix()}\0{sha256_file(path)}\0".encode())
    return digest.hexdigest()


def base_cache_key(cfg: ConvertConfig) -> str | None:
    """The base conversion's cache key, or None when the base's files cannot all be read here (then no cache).

    It holds what determines the cached GGUF and its per-file parity report: the base's files (weights included, so
    a new revision is a new key and the same files under another name or revision are the same key), llama.cpp's
    runtime and converter versions, the served quantisation, the probes as they are asked (documents in the serving
    prompt, tokenizer probes, reference length, near-tie margin) and BASE_CONVERSION_VERSION. Not the thresholds: a
    cached report is judged again against each run's.
    """
    import llama_cpp

    try:
        folder = base_folder(cfg)
    except Exception as e:  # not a folder, and not a hub revision that can be read: no key, no cache
        print(f"convert-gguf: no base cache ({type(e).__name__}: cannot read the base's files)", file=sys.stderr)
        return None
    weights = _weight_files(folder)
    if weights is None:
        print(f"convert-gguf: no base cache ({folder} does not hold all of the base's weights)", file=sys.stderr)
        return None
    meta = [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in BASE_META_SUFFIXES]
    what = {
        "version": BASE_CONVERSION_VERSION,
        "files": {p.name: sha256_file(p) for p in [*meta, *weights]},
        "llama_cpp_python": llama_cpp.__version__,
        "converter": _converter_version(Path(cfg.converter_dir)),
        "quantization": cfg.quantization,
        "parity_tokens": cfg.parity_tokens,
        "tie_margin": parity.TIE_MARGIN,
        "probes": parity.probe_messages(),
        "tokenizer_probes": list(parity.TOKENIZER_PROBES),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def base_conversion(cfg: ConvertConfig, folder: Path, tokenizer: Any, work: Path, out: Path) -> dict[str, Any]:
    """The base at the served quantisation in `out` and its parity report: from the cache, or made (and cached)."""
    served = out / f"{cfg.model_name}-base-{cfg.quantization}.gguf"
    store = SealedFolders(cfg.base_cache, "convert-gguf") if cfg.base_cache else None
    key = base_cache_key(cfg) if store else None
    if store is not None and key is not None:
        with store.get(key) as cached:
            if cached is not None:
                shutil.copyfile(cached / CACHE_FILE, served)
                report = read_json(cached / CACHE_REPORT)
                report["paths"] = {cfg.quantization: str(served)}
                report["cache"] = {"key": key, "hit": True, "location": cfg.base_cache}
                print(f"convert-gguf: base conversion reused from {cfg.base_cache}/{key}", file=sys.stderr)
                return report
    print(f"convert-gguf: base: no cached conversion{' under ' + key if key else ''}; converting it and checking its"
          " parity (once per base)", file=sys.stderr, flush=True)  # fmt: skip
    base_refs = parity.hf_reference(streamed_model(folder), tokenizer, cfg.parity_tokens)
    hf_dir = write_converter_input(folder, {}, tokenizer, work / "base-hf")
    report = export("base", hf_dir, tokenizer, base_refs, [cfg.quantization], cfg, work, out)
    del base_refs
    if store is not None and key is not None:
        keep = {k: v for k, v in report.items() if k != "paths"}

        def fill(folder: Path) -> None:
            shutil.copyfile(served, folder / CACHE_FILE)
            write_json(folder / CACHE_REPORT, keep)

        store.put(key, fill)
    report["cache"] = {"key": key, "hit": False, "location": cfg.base_cache}
    return report
