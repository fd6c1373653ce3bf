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
  float32, tensor by tensor, on the base's own weights, never into quantised weights, so a QLoRA adapter merges
  safely);
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
that merely looks fine on a few documents is refused. The thresholds are set in one place, steps/gguf/quants.py (per
quantisation) and steps/gguf/settings.py (PARITY_*), and recorded in parity.json and result.json.
Lineage (dataset, base model and revision, git sha, run id, quantisation, parity figures) goes into each candidate
file's GGUF metadata, under `general.*` where a standard key fits and `distillery.*` otherwise.

The base's half of the work (its references, conversion, served quantisation and parity) is the same in every run
on the same base: with `--base-cache` (a folder, by default `.cache/base-gguf`, or an s3:// prefix; on Argo the
artifact bucket) it is kept as a sealed folder (steps/core/sealed.py) keyed by the sha256 of the base's files (weights
included), llama.cpp's version, the quantisation, the probes and BASE_CONVERSION_VERSION (`base_cache_key`), and
reused: the file is the very bytes that passed parity when it was made (its digest is checked on every read), and its
report is judged again against this run's thresholds.

Memory: no model is ever held whole (`streamed`): the merge reads the base's safetensors a tensor at a time and
writes float16 shards for the converter; the HF side of parity (float32, as loading the model whole would compute it)
reads each module's weights from the files as it runs; llama.cpp holds one GGUF at a time, with nothing of the HF
side resident beside it but the references. steps/sizing/memory.py `convert_memory` counts these phases.

The package, by what each file holds: `config` (the flags, the result, the checks on the settings), `verdict` (the
thresholds and the judging), `streamed` (the base's weights tensor by tensor: the merge into the converter's input,
the streamed HF model), `export` (converter input -> GGUFs and their parity figures, the eval split's, the lineage),
`base_cache` (the key and the cached base conversion); the report's files and parity.md are steps/gguf/report.py's.
This file is the step (`run`, `main`), `__main__` its command line.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from steps.convert_gguf.base_cache import CACHE_FILE, base_cache_key, base_conversion, base_folder
from steps.convert_gguf.config import ConvertConfig, ConvertResult, config_problems, ladder, threads
from steps.convert_gguf.export import ParityError, eval_split_parity, export, lineage_metadata
from steps.convert_gguf.streamed import lora_deltas, streamed_model, write_converter_input
from steps.convert_gguf.verdict import judge, judge_eval, thresholds
from steps.core.cli import parse_config, timed, write_result
from steps.core.io import atomic_dir, write_json
from steps.gguf import parity
from steps.gguf.meta import set_metadata
from steps.gguf.report import markdown
from steps.gguf.settings import PARITY_CONFIDENCE

__all__ = [
    "CACHE_FILE", "ConvertConfig", "ConvertResult", "ParityError", "base_cache_key", "config_problems",
    "eval_split_parity", "judge", "judge_eval", "ladder", "lineage_metadata", "main", "run", "thresholds",
]  # fmt: skip


@timed
def run(cfg: ConvertConfig) -> ConvertResult:
    quants = ladder(cfg)
    limits = thresholds(cfg)
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    torch.set_num_threads(threads(cfg))
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    folder = base_folder(cfg)

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
        base_report = base_conversion(cfg, folder, tokenizer, work, out)
        lap("base: references, conversion, parity (or the cache)")

        # The HF side streams the base's weights module by module (steps/convert_gguf/streamed.py): the
        # adapter-attached model and the merged one are never held whole, nor together.
        attached = PeftModel.from_pretrained(streamed_model(folder), str(cfg.adapter)).eval()
        deltas = lora_deltas(attached)
        merged = streamed_model(folder, deltas)
        lap("candidate: base + adapter (streamed)")
        refs = parity.hf_reference(attached, tokenizer, cfg.parity_tokens)
        del attached
        lap("candidate: HF references (probes)")
        merge_diff = parity.merge_check(merged, refs)
        lap("candidate: merge check")
        if merge_diff > cfg.merge_tolerance:
            raise ParityError(
                f"merging the adapter changed the model: max |logit| difference {merge_diff:.2e} > "
                f"{cfg.merge_tolerance:.0e} (--merge-tolerance); check the adapter was trained on this base"
            )
        hf_dir = write_converter_input(folder, deltas, tokenizer, work / "candidate-hf")
        lap("candidate: merge into float16 shards")
        cand_report = export("candidate", hf_dir, tokenizer, refs, quants, cfg, work, out)
        del refs
        lap("candidate: convert, quantise, parity on the probes")
        served_eval = eval_split_parity(Path(cand_report["paths"][cfg.quantization]), merged, tokenizer, cfg)
        lap("candidate: eval-split parity of the served file")

        # The served file (candidate and base) must pass: it blocks the proposal. Another rung of the ladder that
        # fails is withheld — deleted, never shipped — and named, rather than blocking a good served file.
        reasons = [f"candidate {r}" for r in judge(cand_report["files"][cfg.quantization], cfg.quantization, limits)]
        reasons += [f"base {r}" for r in judge(base_report["files"][cfg.quantization], cfg.quantization, limits)]
        reasons += [f"candidate {r}" for r in judge_eval(served_eval, cfg.quantization, limits)]
        passed = not reasons
        withheld = {}
        for quant in quants:
            why = judge(cand_report["files"][quant], quant, limits)
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
            "thresholds": limits,
            "eval_split": served_eval,
            "candidate": cand_report,
            "base": base_report,
        }
        if not passed:
            parity_report["reason"] = "; ".join(reasons)
        lap("judge, metadata")
        parity_report["seconds"] = seconds
        write_json(out / "parity.json", parity_report)
        (out / "parity.md").write_text(markdown(parity_report))
        served = out / f"{cfg.model_name}-{cfg.quantization}.gguf"
        result = ConvertResult(
            candidate_gguf=served.name,
            base_gguf=f"{cfg.model_name}-base-{cfg.quantization}.gguf",
            quantization=cfg.quantization,
            parity_passed=passed,
            candidate_top1_agreement=round(cand_report["files"][cfg.quantization]["top1_agreement"], 4),
            candidate_size_bytes=served.stat().st_size,
            eval_parity={k: v for k, v in served_eval.items() if k != "docs"},
            parity_thresholds=limits,
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
