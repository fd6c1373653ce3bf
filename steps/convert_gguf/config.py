"""convert-gguf's flags (`ConvertConfig`), its result, and the checks on its settings (also run by check-parameters)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.contract.threads import cpu_threads, threads_problems
from steps.core.base_model import base_model_problems
from steps.core.cli import flag, number_table, refuse
from steps.core.defaults import SHARED
from steps.core.registry import MODEL_NAME
from steps.gguf.quants import LADDER, QUANTIZATIONS, SERVED
from steps.gguf.quants import thresholds as default_thresholds
from steps.gguf.settings import PARITY_MAX_EOS_DROP, PARITY_TOKENS


@dataclass
class ConvertConfig:
    adapter: Path = field(metadata={"help": "folder written by the train step (a PEFT LoRA adapter)"})
    dataset: Path = field(metadata={"help": "folder written by fetch-dataset (its lineage goes into the GGUF)"})
    out: Path = field(metadata={"help": "folder to write the GGUF files and the parity report into"})
    base_model: str = field(default=SHARED.base_model, metadata={"help": "HF model id or local folder of the base"})
    base_revision: str = field(
        default=SHARED.base_revision, metadata={"help": "hub revision of the base (ignored for a folder)"}
    )
    model_name: str = field(default=MODEL_NAME, metadata={"help": "name in the GGUF files and metadata"})
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
        default=SHARED.threads,
        metadata={"help": "CPU threads for llama.cpp and torch (0: the CPUs this container may use)"},
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
    if not 0 <= cfg.max_eos_rate_drop < 1:
        problems.append(f"--max-eos-rate-drop {cfg.max_eos_rate_drop}: a difference of rates, use [0, 1) (e.g. 0.1)")
    if not cfg.merge_tolerance > 0:
        problems.append(f"--merge-tolerance {cfg.merge_tolerance}: a largest |logit| difference, use more than 0")
    if cfg.parity_tokens < 1:
        problems.append(f"--parity-tokens {cfg.parity_tokens}: use at least 1 greedy token per probe")
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
    refuse(config_problems(cfg) + base_model_problems(cfg.base_model), "convert-gguf")
    return [q.strip() for q in cfg.quantizations.split(",") if q.strip()]


def threads(cfg: ConvertConfig) -> int:
    """The CPU threads llama.cpp and torch use: `--threads`, or the CPUs this container may use."""
    return cpu_threads(cfg.threads)
