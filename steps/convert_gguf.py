"""convert-gguf: merge the LoRA adapter, convert with llama.cpp's own converter, quantise a ladder, and prove every
GGUF is the same model as its HF source; write the lineage into the files themselves.

    python -m steps.convert_gguf --adapter out/adapter --dataset out/dataset \
        --base-model .cache/models/SmolLM2-135M-Instruct --out out/gguf

Produces in `--out`, named as llama.cpp names files: `<model-name>-F16.gguf` and one `<model-name>-<QUANT>.gguf` per
quantisation of the ladder (default Q8_0 and Q4_K_M); `<model-name>-base-<QUANT>.gguf`, the base converted the same
way at the served quantisation so evaluation compares like with like; `parity.json`, `parity.md`, `result.json`.

Conversion and quantisation are llama.cpp's own tools (steps/gguf/conversion.py); the HF-vs-GGUF comparison is
steps/gguf/parity.py; this step runs them, judges the figures against its thresholds and writes the report. Checks,
on fixed chat-templated probes (plain, Unicode, whitespace, numbers, a long document):
- merge: logits with the adapter attached and after merging agree within `--merge-tolerance` (the merge happens in
  float32 on a full-precision reload of the base, never into quantised weights, so a QLoRA adapter merges safely);
- tokenizer: llama.cpp's token ids equal HF's on every probe;
- F16: greedy continuation equals HF's token for token, or parts from it only where HF's own two best logits are
  within gguf_parity.TIE_MARGIN (float rounding, not a different model). Failing this means the conversion is wrong:
  the step stops;
- each quantisation: teacher-forced top-1 agreement, mean KL divergence of next-token distributions and the rate at
  which generation ends with EOS, against thresholds. The served file under them fails parity, which blocks the
  proposal; another rung of the ladder under them is withheld (deleted, named in the report), never shipped.
And on the distribution that is served — every document of the eval split, chat-templated as served, teacher-forced
over its reference summary — the served candidate file's top-1 agreement, mean KL and drop in stop rate (top-1 EOS
right after the summary) against HF, with bootstrap intervals over documents: it passes only when the interval's far
end is within the same thresholds (the lower bound of agreement, the upper bounds of KL and of the drop), so a file
that merely looks fine on a few documents is refused. The thresholds are set in one place, steps/sizing.py
(PARITY_*), and recorded in parity.json and result.json.
Lineage (dataset, base model and revision, git sha, run id, quantisation, parity figures) goes into each candidate
file's GGUF metadata, under `general.*` where a standard key fits and `distillery.*` otherwise.

The base's half of the work (its references, conversion, served quantisation and parity) is the same in every run
on the same base: with `--base-cache` (a folder, by default `.cache/base-gguf`, or an s3:// prefix; on Argo the
artifact bucket) it is kept as a sealed folder (steps/core/sealed.py) keyed by the sha256 of the base's files (weights
included), llama.cpp's version, the quantisation, the probes and BASE_CONVERSION_VERSION (`base_cache_key`), and
reused: the file is the very bytes that
passed parity when it was made (its digest is checked on every read), and its report is judged again against this
run's thresholds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.contract.threads import cpu_threads, threads_problems
from steps.core.cli import flag, number_table, parse_config, timed, write_result
from steps.core.dataset import load_split
from steps.core.io import atomic_dir, git_sha, read_json, sha256_file, write_json
from steps.core.sealed import SealedFolders
from steps.gguf import parity
from steps.gguf.conversion import convert_hf_dir, quantize
from steps.gguf.meta import set_metadata
from steps.gguf.quants import LADDER, QUANTIZATIONS, SERVED
from steps.gguf.quants import thresholds as default_thresholds
from steps.gguf.settings import PARITY_CONFIDENCE, PARITY_MAX_EOS_DROP, PARITY_RESAMPLES, PARITY_TOKENS

# What the steps after this one read of its folder besides the served GGUFs (named in result.json): on the cluster
# they download only these and the served files, not F16 and the rest of the ladder (workflows/distill.py).
REPORT_FILES = ("result.json", "parity.json", "parity.md")


class ParityError(RuntimeError):
    """The conversion itself is wrong (F16 differs from HF, or the merge changed the model)."""


@dataclass
class ConvertConfig:
    adapter: Path = field(metadata={"help": "folder written by the train step (a PEFT LoRA adapter)"})
    dataset: Path = field(metadata={"help": "folder written by fetch-dataset (its lineage goes into the GGUF)"})
    out: Path = field(metadata={"help": "folder to write the GGUF files and the parity report into"})
    base_model: str = field(
        default=".cache/models/SmolLM2-135M-Instruct", metadata={"help": "HF model id or local folder of the base"}
    )
    base_revision: str = field(default="main", metadata={"help": "hub revision of the base (ignored for a folder)"})
    model_name: str = field(default="distillery-summariser", metadata={"help": "name in the GGUF files and metadata"})
    quantization: str = field(default=SERVED, metadata={"help": "the quantisation that is evaluated and served"})
    quantizations: str = field(
        default=",".join(LADDER),
        metadata={"help": f"comma-separated ladder besides F16, from {', '.join(QUANTIZATIONS)}"},
    )
    min_top1_agreement: str = field(
        default=default_thresholds("min_top1"),
        metadata={"help": "per quantisation, least teacher-forced top-1 agreement with HF"},
    )
    max_mean_kl: str = field(
        default=default_thresholds("max_kl"),
        metadata={"help": "per quantisation, largest mean KL(HF || GGUF) of next-token distributions"},
    )
    max_eos_rate_drop: float = field(
        default=PARITY_MAX_EOS_DROP,
        metadata={"help": "how much less often than HF a quantised file may end with EOS (probes; eval split's bound)"},
    )
    merge_tolerance: float = field(
        default=1e-3, metadata={"help": "largest |logit| difference between adapter-attached and merged models"}
    )
    parity_tokens: int = field(default=PARITY_TOKENS, metadata={"help": "greedy tokens generated per parity probe"})
    run_id: str = field(default="", metadata={"help": "the Argo workflow uid, recorded in the GGUF metadata"})
    converter_dir: str = field(
        default=os.environ.get("DISTILLERY_LLAMA_CPP", ".cache/llama.cpp"),
        metadata={"help": "folder holding llama.cpp's convert_hf_to_gguf.py (scripts/install_llama_cpp.sh)"},
    )
    threads: int = field(
        default=0, metadata={"help": "CPU threads for llama.cpp and torch (0: the CPUs this container may use)"}
    )
    base_cache: str = field(
        default_factory=lambda: os.environ.get("DISTILLERY_BASE_CACHE", ".cache/base-gguf"),
        metadata={
            "help": "folder or s3:// prefix where the base's conversion and parity report are kept between runs "
            "(keyed by the base's files, llama.cpp's version, the settings and the conversion code's version); "
            "empty: convert it every run"
        },
    )


@dataclass
class ConvertResult:
    candidate_gguf: str
    base_gguf: str
    quantization: str
    parity_passed: bool
    candidate_top1_agreement: float
    candidate_size_bytes: int
    # The served candidate file on the eval split's documents: each figure's point and interval, and the thresholds
    # every parity figure was judged by.
    eval_parity: dict[str, Any]
    parity_thresholds: dict[str, Any]


def config_problems(cfg: ConvertConfig) -> list[str]:
    """Everything wrong with the quantisation settings, at once (also run by check-parameters)."""
    quants = [q.strip() for q in cfg.quantizations.split(",") if q.strip()]
    problems = [
        f"--quantizations: {q!r} is not one of {', '.join(QUANTIZATIONS)}" for q in quants if q not in QUANTIZATIONS
    ]
    if cfg.quantization not in quants:
        problems.append(f"--quantization {cfg.quantization!r} must be one of --quantizations ({cfg.quantizations})")
    problems += threads_problems(cfg.threads)
    for name in ("min_top1_agreement", "max_mean_kl"):
        try:
            thresholds = number_table(getattr(cfg, name), flag(name))
        except ValueError as e:
            problems.append(str(e))
            continue
        problems += [f"{flag(name)} has no threshold for {q}" for q in quants if q not in thresholds]
    return problems


def ladder(cfg: ConvertConfig) -> list[str]:
    """The quantisations to produce; every problem with the config is reported at once."""
    problems = config_problems(cfg)
    if problems:
        raise ValueError("; ".join(problems))
    return [q.strip() for q in cfg.quantizations.split(",") if q.strip()]


def _threads(cfg: ConvertConfig) -> int:
    return cpu_threads(cfg.threads)


def judge(report: dict[str, Any], quant: str, cfg: ConvertConfig) -> list[str]:
    """Why a quantised file fails parity (empty: it passes)."""
    top1 = number_table(cfg.min_top1_agreement, "--min-top1-agreement")[quant]
    kl = number_table(cfg.max_mean_kl, "--max-mean-kl")[quant]
    why = []
    if not report["tokens_equal"]:
        why.append(f"{report['file']}: llama.cpp token ids differ from HF's")
    if report["top1_agreement"] < top1:
        why.append(f"{report['file']}: top-1 agreement {report['top1_agreement']:.3f} < {top1}")
    if report["mean_kl"] > kl:
        why.append(f"{report['file']}: mean KL {report['mean_kl']:.4f} > {kl}")
    if report["eos_rate"] < report["hf_eos_rate"] - cfg.max_eos_rate_drop:
        why.append(
            f"{report['file']}: ends with EOS on {report['eos_rate']:.0%} of probes vs HF {report['hf_eos_rate']:.0%}"
            f" (allowed drop {cfg.max_eos_rate_drop:.0%}): it may not stop"
        )
    return why


def judge_eval(summary: dict[str, Any], quant: str, cfg: ConvertConfig, bound: bool = True) -> list[str]:
    """Why the served file fails parity on the eval split (empty: it passes). With `bound`, each figure is judged at
    its interval's far end — agreement's lower bound, KL's and the stop-rate drop's upper bounds — so passing means
    shown within the thresholds; without it, at the point figures (how a point gate would decide)."""
    end = ("low", "high") if bound else ("point", "point")
    what = f"{summary['confidence']:.0%} bound" if bound else "point figure"
    top1 = number_table(cfg.min_top1_agreement, "--min-top1-agreement")[quant]
    kl = number_table(cfg.max_mean_kl, "--max-mean-kl")[quant]
    where = f"{summary['file']} on the eval split ({summary['documents']} documents)"
    why = []
    if not summary["tokens_equal"]:
        why.append(f"{where}: llama.cpp token ids differ from HF's on {summary['tokens_differ']}")
    if summary["top1_agreement"][end[0]] < top1:
        why.append(f"{where}: top-1 agreement {what} {summary['top1_agreement'][end[0]]:.3f} < {top1}")
    if summary["mean_kl"][end[1]] > kl:
        why.append(f"{where}: mean KL {what} {summary['mean_kl'][end[1]]:.4f} > {kl}")
    if summary["eos_rate_drop"][end[1]] > cfg.max_eos_rate_drop:
        why.append(
            f"{where}: stops after the summary less often than HF by {summary['eos_rate_drop'][end[1]]:.0%} ({what};"
            f" allowed {cfg.max_eos_rate_drop:.0%}): it may not stop"
        )
    return why


def thresholds(cfg: ConvertConfig) -> dict[str, Any]:
    """The thresholds parity was judged by, as recorded in parity.json and result.json."""
    return {
        "min_top1_agreement": number_table(cfg.min_top1_agreement, "--min-top1-agreement"),
        "max_mean_kl": number_table(cfg.max_mean_kl, "--max-mean-kl"),
        "max_eos_rate_drop": cfg.max_eos_rate_drop,
        "eval_split": {"judged_at": "interval bound", "confidence": PARITY_CONFIDENCE, "resamples": PARITY_RESAMPLES},
    }


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

    docs = parity.eval_parity(gguf, model, tokenizer, rows, eos_id, _threads(cfg), progress)
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


CACHE_FILE = "base.gguf"
CACHE_REPORT = "report.json"
# The version of the code that makes and checks a cached base conversion (steps/gguf/conversion.py,
# steps/gguf/parity.py, _export, the float32 load in run): part of the cache key. Bump it in the same change
# whenever that code would now make another GGUF or another parity report from the same base — other references,
# another figure or threshold inside the per-file report, another dtype — so that no run reuses an entry made the old
# way. Rewording a comment, a message or a line of parity.md needs no bump: the key is not the source's bytes.
BASE_CONVERSION_VERSION = 2  # 2: references batched, greedy output read off the teacher-forced pass
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


def _base_folder(cfg: ConvertConfig) -> Path:
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
        folder = _base_folder(cfg)
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


def _base_conversion(cfg: ConvertConfig, load_base: Any, tokenizer: Any, work: Path, out: Path) -> dict[str, Any]:
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
    base = load_base().eval()
    base_refs = parity.hf_reference(base, tokenizer, cfg.parity_tokens)
    report = _export("base", base, tokenizer, base_refs, [cfg.quantization], cfg, work, out)
    del base, base_refs
    if store is not None and key is not None:
        keep = {k: v for k, v in report.items() if k != "paths"}

        def fill(folder: Path) -> None:
            shutil.copyfile(served, folder / CACHE_FILE)
            write_json(folder / CACHE_REPORT, keep)

        store.put(key, fill)
    report["cache"] = {"key": key, "hit": False, "location": cfg.base_cache}
    return report


def _markdown(parity: dict[str, Any]) -> str:
    lines = [
        f"# GGUF parity: {'PASS' if parity['passed'] else 'FAIL'}",
        "",
        *[f"- {r}" for r in parity["reasons"]],
        *[f"- withheld (not shipped) {q}: {'; '.join(w)}" for q, w in parity["withheld"].items()],
        "",
        f"Merge: max |logit| difference adapter-attached vs merged = {parity['merge_max_abs_logit_diff']:.2e}.",
        "",
        "| file | size MB | tokens equal | greedy equal | greedy up to near-ties | top-1 | mean KL | EOS rate (HF) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for who in ("candidate", "base"):
        for quant, r in parity[who]["files"].items():
            size = f"{parity[who]['size_bytes'][quant] / 1e6:.1f}" if quant in parity[who]["size_bytes"] else "withheld"
            lines.append(
                f"| {r['file']} | {size} | {r['tokens_equal']} | {r['greedy_equal']} | {r['greedy_match']} "
                f"| {r['top1_agreement']:.3f} "
                f"| {r['mean_kl']:.4f} | {r['eos_rate']:.0%} ({r['hf_eos_rate']:.0%}) |"
            )
    ev = parity["eval_split"]
    ci = f"{ev['confidence']:.0%} interval over documents"

    def fig(name: str, fmt: str) -> str:
        return f"{ev[name]['point']:{fmt}} [{ev[name]['low']:{fmt}}, {ev[name]['high']:{fmt}}]"

    lines += [
        "",
        f"Served file on the eval split ({ev['documents']} documents, {ev['positions']} teacher-forced positions; "
        f"point [{ci}], judged at the bound):",
        "",
        "| file | tokens equal | top-1 | mean KL | stop-rate drop vs HF | stop rate (HF) |",
        "|---|---|---|---|---|---|",
        f"| {ev['file']} | {ev['tokens_equal']} | {fig('top1_agreement', '.3f')} | {fig('mean_kl', '.4f')} "
        f"| {fig('eos_rate_drop', '.0%')} | {fig('eos_rate', '.0%')} ({ev['hf_eos_rate']:.0%}) |",
    ]
    return "\n".join(lines) + "\n"


def _export(label: str, model: Any, tokenizer: Any, refs: list, quants: list[str], cfg: ConvertConfig, work: Path,
            out: Path) -> dict[str, Any]:  # fmt: skip
    """HF model → F16 GGUF → quantised GGUFs, each checked against `refs`. Returns the per-file reports."""
    hf_dir = work / f"{label}-hf"
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    stem = cfg.model_name if label == "candidate" else f"{cfg.model_name}-base"
    # The candidate's F16 is part of the ladder; the base's only serves its parity check.
    f16 = (out if label == "candidate" else work) / f"{stem}-F16.gguf"
    t0 = time.perf_counter()
    convert_hf_dir(Path(cfg.converter_dir), hf_dir, f16)
    files = {"F16": f16}
    for quant in quants:
        files[quant] = out / f"{stem}-{quant}.gguf"
        quantize(f16, files[quant], quant, _threads(cfg))
    convert_s = time.perf_counter() - t0
    eos_id = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    reports = {}
    for quant, path in files.items():
        t1 = time.perf_counter()
        reports[quant] = parity.compare(path, refs, eos_id, _threads(cfg), tokenizer)
        reports[quant]["seconds"] = round(time.perf_counter() - t1, 2)
        n = sum(len(r["prompt_ids"]) + len(r["continuation"]) for r in refs)
        print(f"convert-gguf: parity {path.name}: {len(refs)} probes, {n} tokens "
              f"({n / (time.perf_counter() - t1):.0f} tokens/s)", file=sys.stderr, flush=True)  # fmt: skip
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
        "paths": {q: str(p) for q, p in files.items()},
        "size_bytes": {q: p.stat().st_size for q, p in files.items()},
        "convert_and_quantise_seconds": round(convert_s, 2),
    }


@timed
def run(cfg: ConvertConfig) -> ConvertResult:
    quants = ladder(cfg)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(_threads(cfg))
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)

    def load_base() -> Any:
        # Merging always happens in float32 on a full-precision reload of the base, never into quantised weights.
        return AutoModelForCausalLM.from_pretrained(cfg.base_model, revision=cfg.base_revision, dtype=torch.float32)

    # Where the step's time goes, recorded in parity.json (benchmarks/convert_overhead.py prints it as its profile).
    seconds: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        seconds[name] = round(now - clock[0], 2)
        clock[0] = now
        print(f"convert-gguf: {name}: {seconds[name]:.1f} s", file=sys.stderr, flush=True)

    with atomic_dir(cfg.out) as out, tempfile.TemporaryDirectory(prefix="convert-", dir=out.parent) as work_str:
        work = Path(work_str)
        base_report = _base_conversion(cfg, load_base, tokenizer, work, out)
        lap("base: load, references, conversion, parity (or the cache)")

        attached = PeftModel.from_pretrained(load_base(), str(cfg.adapter)).eval()
        lap("candidate: load base + adapter")
        refs = parity.hf_reference(attached, tokenizer, cfg.parity_tokens)
        lap("candidate: HF references (probes)")
        merged = attached.merge_and_unload().eval()
        merge_diff = parity.merge_check(merged, refs)
        lap("candidate: merge + merge check")
        if merge_diff > cfg.merge_tolerance:
            raise ParityError(
                f"merging the adapter changed the model: max |logit| difference {merge_diff:.2e} > "
                f"{cfg.merge_tolerance:.0e} (--merge-tolerance); check the adapter was trained on this base"
            )
        cand_report = _export("candidate", merged, tokenizer, refs, quants, cfg, work, out)
        lap("candidate: save, convert, quantise, parity on the probes")
        served_eval = eval_split_parity(Path(cand_report["paths"][cfg.quantization]), merged, tokenizer, cfg)
        lap("candidate: eval-split parity of the served file")

        # The served file (candidate and base) must pass: it blocks the proposal. Another rung of the ladder that
        # fails is withheld — deleted, never shipped — and named, rather than blocking a good served file.
        reasons = [f"candidate {r}" for r in judge(cand_report["files"][cfg.quantization], cfg.quantization, cfg)]
        reasons += [f"base {r}" for r in judge(base_report["files"][cfg.quantization], cfg.quantization, cfg)]
        reasons += [f"candidate {r}" for r in judge_eval(served_eval, cfg.quantization, cfg)]
        passed = not reasons
        withheld = {}
        for quant in quants:
            why = judge(cand_report["files"][quant], quant, cfg)
            if why and quant != cfg.quantization:
                withheld[quant] = why
                Path(cand_report["paths"][quant]).unlink()
        if passed:
            reasons = [
                f"F16 greedy output equals HF's (up to near-ties); served {cfg.quantization} within thresholds, on the"
                f" eval split at the {PARITY_CONFIDENCE:.0%} interval's bound"
            ]
        shipped = ["F16", *(q for q in quants if q not in withheld)]
        for quant in shipped:
            set_metadata(Path(cand_report["paths"][quant]), lineage_metadata(cfg, quant, cand_report["files"][quant]))
        for report in (cand_report, base_report):  # withheld files are gone; a cached base keeps its F16's size
            report["size_bytes"] = {
                **{q: n for q, n in report["size_bytes"].items() if q not in report["paths"]},
                **{q: Path(p).stat().st_size for q, p in report.pop("paths").items() if Path(p).exists()},
            }
        parity_report = {
            "passed": passed,
            "reasons": reasons,
            "quantization": cfg.quantization,
            "ladder": shipped,
            "withheld": withheld,
            "merge_max_abs_logit_diff": merge_diff,
            "thresholds": thresholds(cfg),
            "eval_split": served_eval,
            "candidate": cand_report,
            "base": base_report,
        }
        if not passed:
            parity_report["reason"] = "; ".join(reasons)
        lap("judge, metadata")
        parity_report["seconds"] = seconds
        write_json(out / "parity.json", parity_report)
        (out / "parity.md").write_text(_markdown(parity_report))
        served = out / f"{cfg.model_name}-{cfg.quantization}.gguf"
        result = ConvertResult(
            candidate_gguf=served.name,
            base_gguf=f"{cfg.model_name}-base-{cfg.quantization}.gguf",
            quantization=cfg.quantization,
            parity_passed=passed,
            candidate_top1_agreement=round(cand_report["files"][cfg.quantization]["top1_agreement"], 4),
            candidate_size_bytes=served.stat().st_size,
            eval_parity={k: v for k, v in served_eval.items() if k != "docs"},
            parity_thresholds=thresholds(cfg),
        )
        write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ConvertConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ParityError, FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"convert-gguf: {e}", file=sys.stderr)
        return 1
    print(
        f"{result.candidate_gguf}: {result.candidate_size_bytes / 1e6:.1f} MB, parity "
        f"{'passed' if result.parity_passed else 'FAILED'} (top-1 agreement {result.candidate_top1_agreement:.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
