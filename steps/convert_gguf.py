"""convert-gguf: merge the LoRA adapter, convert base and candidate to GGUF with llama.cpp's converter, quantise, and
prove each GGUF is the same model as its HF source.

    python -m steps.convert_gguf --adapter out/train --base-model .cache/models/SmolLM2-135M-Instruct --out out/gguf

Produces in `--out`: `candidate-<QUANT>.gguf` (the artifact that will be served), `base-<QUANT>.gguf` (the base,
converted the same way, so evaluation compares like with like), `parity.json` and `result.json`.

Parity, on fixed chat-templated probes, for each file: llama.cpp's token ids equal HF's; greedy continuation of the
F16 file equals HF's token for token; for the quantised file, greedy equality, teacher-forced top-1 agreement and
mean KL divergence of next-token distributions against HF. The F16 check failing means the conversion is wrong and
stops the step; a quantised file under the agreement threshold is recorded as failed parity, which blocks proposal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.common import atomic_dir, parse_config, read_json, write_json, write_result
from steps.prompting import messages

# llama.cpp's file types (enum llama_ftype) for the quantisations this step offers.
QUANT_FTYPES = {"Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}
PROBE_DOCUMENTS = (
    "The Harlow Street library will close for three weeks from 4 June while its roof is replaced; "
    "the mobile library will stop outside the school on Tuesdays and Fridays.",
    "Q3 revenue at Fenwick Tools rose 12% to €48.5 million, driven by cordless drills, but margins fell "
    "after steel prices increased. The firm kept its full-year guidance.",
    "Ünïcödé test — naïve café owners in Zürich said: «prices up 3½ %»; tabs\tand  double  spaces stay.",
)


class ParityError(RuntimeError):
    """The F16 GGUF does not reproduce the HF model: the conversion itself is wrong."""


@dataclass
class ConvertConfig:
    adapter: Path = field(metadata={"help": "folder written by the train step (a PEFT LoRA adapter)"})
    out: Path = field(metadata={"help": "folder to write the GGUF files and parity.json into"})
    base_model: str = field(
        default=".cache/models/SmolLM2-135M-Instruct", metadata={"help": "HF model id or local folder of the base"}
    )
    base_revision: str = field(default="main", metadata={"help": "hub revision of the base (ignored for a folder)"})
    quantization: str = field(
        default="Q8_0", metadata={"help": f"llama.cpp quantisation to serve, one of {', '.join(QUANT_FTYPES)}"}
    )
    parity_tokens: int = field(default=24, metadata={"help": "greedy tokens generated per parity probe"})
    min_top1_agreement: float = field(
        default=0.9, metadata={"help": "least teacher-forced top-1 agreement of the quantised file with HF"}
    )
    converter_dir: str = field(
        default=os.environ.get("DISTILLERY_LLAMA_CPP", ".cache/llama.cpp"),
        metadata={"help": "folder holding llama.cpp's convert_hf_to_gguf.py (scripts/install_llama_cpp.sh)"},
    )
    threads: int = field(default=0, metadata={"help": "CPU threads for llama.cpp and torch (0: all cores)"})


@dataclass
class ConvertResult:
    candidate_gguf: str
    base_gguf: str
    quantization: str
    parity_passed: bool
    candidate_top1_agreement: float
    candidate_size_bytes: int


def _threads(cfg: ConvertConfig) -> int:
    return cfg.threads or os.cpu_count() or 1


def convert_hf_dir(converter_dir: Path, hf_dir: Path, outfile: Path, outtype: str = "f16") -> None:
    script = converter_dir / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"{script} not found: llama.cpp's converter is fetched at install time; "
            "run scripts/install_llama_cpp.sh or set --converter-dir / DISTILLERY_LLAMA_CPP"
        )
    proc = subprocess.run(
        [sys.executable, str(script), str(hf_dir), "--outfile", str(outfile), "--outtype", outtype],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp's converter failed on {hf_dir}:\n{proc.stderr[-4000:]}")


@contextmanager
def _native_output_to(log: Path) -> Iterator[None]:
    """Send what C code prints (llama.cpp logs a line per tensor) to `log` instead of the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def quantize(src: Path, dst: Path, quantization: str, threads: int) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_FTYPES[quantization]
    params.nthread = threads
    log = dst.with_suffix(".quantize.log")
    with _native_output_to(log):
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    text = log.read_text(errors="replace")
    log.unlink()
    if rc != 0 or not dst.is_file():
        raise RuntimeError(f"llama.cpp could not quantise {src} to {quantization} (return code {rc}):\n{text[-3000:]}")


def hf_reference(model: Any, tokenizer: Any, n_tokens: int) -> list[dict[str, Any]]:
    """Greedy continuations and next-token log-probabilities of the HF model on the fixed probes."""
    import torch

    refs = []
    for document in PROBE_DOCUMENTS:
        prompt = tokenizer.apply_chat_template(messages(document), add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        inputs = torch.tensor([prompt_ids])
        with torch.no_grad():
            generated = model.generate(
                inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=n_tokens, do_sample=False
            )
            continuation = generated[0, len(prompt_ids) :].tolist()
            logits = model(generated).logits[0, len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(continuation)]
        refs.append(
            {
                "prompt": prompt,
                "prompt_ids": prompt_ids,
                "continuation": continuation,
                "logprobs": torch.log_softmax(logits.float(), dim=-1).numpy(),
            }
        )
    return refs


def gguf_parity(gguf: Path, refs: list[dict[str, Any]], eos_id: int, threads: int) -> dict[str, Any]:
    """Compare a GGUF loaded by llama.cpp with the HF reference: tokens, greedy output, top-1 agreement, KL."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=1024, n_threads=threads, logits_all=True, verbose=False, seed=0)
    probes = []
    agree = total = 0
    kls: list[float] = []
    for ref in refs:
        ids = llm.tokenize(ref["prompt"].encode(), add_bos=False, special=True)
        greedy: list[int] = []
        for token in llm.generate(ref["prompt_ids"], top_k=1, temp=0.0, reset=True):
            if len(greedy) >= len(ref["continuation"]):
                break
            greedy.append(token)
            if token == eos_id:
                break
        cont = ref["continuation"]
        llm.reset()
        llm.eval(ref["prompt_ids"] + cont)
        start = len(ref["prompt_ids"]) - 1
        scores = np.asarray(llm.scores[start : start + len(cont)], dtype=np.float64)
        log_q = scores - scores.max(axis=-1, keepdims=True)
        log_q -= np.log(np.exp(log_q).sum(axis=-1, keepdims=True))
        log_p = ref["logprobs"].astype(np.float64)
        kls.extend((np.exp(log_p) * (log_p - log_q)).sum(axis=-1).tolist())
        matches = int((scores.argmax(axis=-1) == log_p.argmax(axis=-1)).sum())
        agree += matches
        total += len(cont)
        probes.append(
            {
                "tokens_equal": ids == ref["prompt_ids"],
                "greedy_equal": greedy == cont,
                "top1_agreement": matches / max(len(cont), 1),
            }
        )
    return {
        "file": gguf.name,
        "tokens_equal": all(p["tokens_equal"] for p in probes),
        "greedy_equal": all(p["greedy_equal"] for p in probes),
        "top1_agreement": agree / max(total, 1),
        "mean_kl": float(sum(kls) / max(len(kls), 1)),
        "probes": probes,
    }


def _export(
    label: str, model: Any, tokenizer: Any, cfg: ConvertConfig, work: Path, out: Path
) -> tuple[Path, dict[str, Any]]:
    """HF model → F16 GGUF → quantised GGUF, with parity of both against the HF model. Returns (file, report)."""
    hf_dir = work / f"{label}-hf"
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    f16 = work / f"{label}-F16.gguf"
    quant = out / f"{label}-{cfg.quantization}.gguf"
    t0 = time.perf_counter()
    convert_hf_dir(Path(cfg.converter_dir), hf_dir, f16)
    quantize(f16, quant, cfg.quantization, _threads(cfg))
    convert_s = time.perf_counter() - t0
    refs = hf_reference(model, tokenizer, cfg.parity_tokens)
    eos_id = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    f16_report = gguf_parity(f16, refs, eos_id, _threads(cfg))
    if not (f16_report["tokens_equal"] and f16_report["greedy_equal"]):
        raise ParityError(
            f"{label}: the F16 GGUF does not reproduce the HF model (tokens equal: {f16_report['tokens_equal']}, "
            f"greedy equal: {f16_report['greedy_equal']}); the conversion is wrong — check that the converter "
            "version matches llama-cpp-python and that the tokenizer is one llama.cpp recognises"
        )
    quant_report = gguf_parity(quant, refs, eos_id, _threads(cfg))
    report = {
        "f16": f16_report,
        cfg.quantization: quant_report,
        "size_bytes": {"F16": f16.stat().st_size, cfg.quantization: quant.stat().st_size},
        "convert_and_quantise_seconds": round(convert_s, 2),
    }
    return quant, report


def run(cfg: ConvertConfig) -> ConvertResult:
    if cfg.quantization not in QUANT_FTYPES:
        raise ValueError(f"--quantization {cfg.quantization!r} is not one of {', '.join(QUANT_FTYPES)}")
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(_threads(cfg))
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)

    def load_base() -> Any:
        # Merging always happens in float32 on a full-precision reload of the base, never into quantised weights.
        return AutoModelForCausalLM.from_pretrained(cfg.base_model, revision=cfg.base_revision, dtype=torch.float32)

    with atomic_dir(cfg.out) as out, tempfile.TemporaryDirectory(prefix="convert-", dir=out.parent) as work_str:
        work = Path(work_str)
        base = load_base().eval()
        base_gguf, base_report = _export("base", base, tokenizer, cfg, work, out)
        del base
        candidate = PeftModel.from_pretrained(load_base(), str(cfg.adapter)).merge_and_unload().eval()
        cand_gguf, cand_report = _export("candidate", candidate, tokenizer, cfg, work, out)

        quant_ok = all(
            r[cfg.quantization]["tokens_equal"] and r[cfg.quantization]["top1_agreement"] >= cfg.min_top1_agreement
            for r in (base_report, cand_report)
        )
        parity = {
            "passed": quant_ok,
            "quantization": cfg.quantization,
            "min_top1_agreement": cfg.min_top1_agreement,
            "base": base_report,
            "candidate": cand_report,
        }
        if not quant_ok:
            parity["reason"] = (
                f"{cfg.quantization} top-1 agreement below {cfg.min_top1_agreement} or tokenizer mismatch"
            )
        write_json(out / "parity.json", parity)
        result = ConvertResult(
            candidate_gguf=cand_gguf.name,
            base_gguf=base_gguf.name,
            quantization=cfg.quantization,
            parity_passed=quant_ok,
            candidate_top1_agreement=round(cand_report[cfg.quantization]["top1_agreement"], 4),
            candidate_size_bytes=cand_gguf.stat().st_size,
        )
        write_result(out, result)
    return result


def load_parity(gguf_dir: Path) -> dict[str, Any]:
    return read_json(Path(gguf_dir) / "parity.json")


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
