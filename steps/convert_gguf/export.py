"""The export: an HF model (the base, or the candidate with its adapter merged) saved, converted to F16 by llama.cpp,
quantised, and each file compared with the HF model on the probes (`export`); the served file on the eval split's
documents (`eval_split_parity`); the lineage written into each shipped file (`lineage_metadata`)."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from steps.convert_gguf.config import ConvertConfig, threads
from steps.core.dataset import load_split
from steps.core.io import git_sha, read_json, sha256_file
from steps.gguf import parity
from steps.gguf.conversion import convert_hf_dir, quantize
from steps.gguf.settings import PARITY_CONFIDENCE, PARITY_RESAMPLES


class ParityError(RuntimeError):
    """The conversion itself is wrong (F16 differs from HF, or the merge changed the model)."""


def eval_split_parity(gguf: Path, model: Any, tokenizer: Any, cfg: ConvertConfig) -> dict[str, Any]:
    """The served file against the HF model it came from on every eval document: per-document figures, their
    intervals, and a progress line per few documents ending with the rate."""
    rows = load_split(Path(cfg.dataset), "eval")
    eos_id = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done % 8 == 0 or done == total:
            rate = done / (time.perf_counter() - t0)
            print(f"convert-gguf: eval-split parity {gguf.name}: {done}/{total} documents ({rate:.1f}/s)",
                  file=sys.stderr, flush=True)  # fmt: skip

    docs = parity.eval_parity(gguf, model, tokenizer, rows, eos_id, threads(cfg), progress)
    summary = parity.intervals(docs, PARITY_CONFIDENCE, PARITY_RESAMPLES)
    differ = [d["id"] for d in docs if not d["tokens_equal"]]
    return {"file": gguf.name, **summary, "tokens_equal": not differ, "tokens_differ": differ[:5],
            "seconds": round(time.perf_counter() - t0, 2), "docs": docs}  # fmt: skip


def lineage_metadata(cfg: ConvertConfig, quant: str, report: dict[str, Any]) -> dict[str, str | float | bool]:
    data = read_json(Path(cfg.dataset) / "lineage.json")
    return {
        "general.name": cfg.model_name,
        "general.description": "LoRA-distilled summariser built by distillery",
        "general.quantized_by": "distillery",
        "general.source.url": cfg.base_model,
        "distillery.base_model": cfg.base_model,
        "distillery.base_model.revision": cfg.base_revision,
        "distillery.dataset.repo": data["dataset_repo"],
        "distillery.dataset.rev": data["dataset_rev"],
        "distillery.dataset.commit": data["dataset_commit"],
        "distillery.dataset.hash": data["dataset_hash"],
        "distillery.git_sha": git_sha(),
        "distillery.run_id": cfg.run_id or "local",
        "distillery.adapter.sha256": sha256_file(Path(cfg.adapter) / "adapter_model.safetensors"),
        "distillery.quantization": quant,
        "distillery.parity.top1_agreement": float(report["top1_agreement"]),
        "distillery.parity.mean_kl": float(report["mean_kl"]),
        "distillery.parity.greedy_equal": bool(report["greedy_equal"]),
    }


def export(label: str, hf_dir: Path, tokenizer: Any, refs: list, quants: list[str], cfg: ConvertConfig, work: Path,
            out: Path) -> dict[str, Any]:  # fmt: skip
    """The converter's input folder (streamed.write_converter_input) → F16 GGUF → quantised GGUFs, each checked
    against `refs`, one file loaded by llama.cpp at a time. Returns the per-file reports."""
    stem = cfg.model_name if label == "candidate" else f"{cfg.model_name}-base"
    # The candidate's F16 is part of the ladder; the base's only serves its parity check.
    f16 = (out if label == "candidate" else work) / f"{stem}-F16.gguf"
    t0 = time.perf_counter()
    convert_hf_dir(Path(cfg.converter_dir), hf_dir, f16)
    shutil.rmtree(hf_dir)  # its disk, before the quantised files are written
    files = {"F16": f16}
    for quant in quants:
        files[quant] = out / f"{stem}-{quant}.gguf"
        quantize(f16, files[quant], quant, threads(cfg))
    convert_s = time.perf_counter() - t0
    eos_id = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    reports = {}
    for quant, path in files.items():
        t1 = time.perf_counter()
        reports[quant] = parity.compare(path, refs, eos_id, threads(cfg), tokenizer)
        reports[quant]["seconds"] = round(time.perf_counter() - t1, 2)
        n = sum(len(r["prompt_ids"]) + len(r["continuation"]) for r in refs)
        print(f"convert-gguf: parity {path.name}: {len(refs)} probes, {n} tokens "
              f"({n / (time.perf_counter() - t1):.0f} tokens/s)", file=sys.stderr, flush=True)  # fmt: skip
    sizes = {q: p.stat().st_size for q, p in files.items()}
    if label != "candidate":
        f16.unlink()  # the base's F16 only served its own check: its disk, before the candidate's files
    f16_report = reports["F16"]
    if not (f16_report["tokens_equal"] and f16_report["greedy_match"]):
        parted = [p["divergence"] for p in f16_report["probes"] if p["divergence"] and not p["divergence"]["near_tie"]]
        raise ParityError(
            f"{label}: the F16 GGUF does not reproduce the HF model (tokens equal: {f16_report['tokens_equal']}, "
            f"greedy output parts from HF away from any near-tie: {parted[:2]}); the conversion is wrong — check "
            "that the converter "
            "version matches llama-cpp-python and that the tokenizer is one llama.cpp recognises"
        )
    return {
        "files": reports,
        "paths": {q: str(p) for q, p in files.items() if p.exists()},
        "size_bytes": sizes,
        "convert_and_quantise_seconds": round(convert_s, 2),
    }
