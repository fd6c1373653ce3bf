"""kd-targets: the teacher's top-k log-probabilities for every summary token of the training split, the sidecar
train's logit-level distillation reads (steps/core/kd_sidecar.py).

    python -m steps.kd_targets --dataset out/dataset --kd-weight 0.5 --teacher-gguf teacher.gguf \
        --base-model .cache/models/SmolLM2-135M-Instruct --out out/kd-targets
    python -m steps.train --dataset out/dataset --out out/adapter \
        --kd-targets out/kd-targets --kd-weight 0.5 --kd-temperature 2

The pipeline runs it before train when `kd-weight` > 0 (`KD_ON`): on Argo a task skipped otherwise; locally (DVC runs
every stage) `--kd-weight 0` scores nothing and writes only `kd.json` saying so, which train, at weight 0, never reads.

Sequence-level distillation (training on the teacher's summaries, `--kd-weight 0`) stays the default. Logit-level
distillation needs the teacher to share the student's tokenizer: the teacher is scored on the student's own token ids,
so id i must mean the same piece to both (steps/gguf/tokenizer_identity.py decides it, naming both when they differ).

Scoring: the teacher's GGUF runs in process (llama-cpp-python's `Llama`, every position's logits) on each training
example exactly as `train` encodes it (steps/core/examples.py: the served prompt, the summary and end-of-turn token);
the top-k (`--kd-top-k`) log-probabilities of the teacher's next-token distribution at every summary position are kept.
llama.cpp's server gives `top_logprobs` in chat completions too, but keyed by token *text* (pieces that detokenise
alike collide, ids are lost) and only for the tokens it generated itself, not for a trimmed or reviewer-edited summary.

Writes `topk.npz` and `kd.json` into `--out` (their layout: steps/core/kd_sidecar.py) and `result.json`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.contract.threads import llama_threads, threads_problems
from steps.core import terms
from steps.core.base_model import base_model_problems
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, local_folder, sha256_file, write_json
from steps.core.kd_sidecar import META_FILE, TOPK_FILE, KDError
from steps.core.switches import KD_ON
from steps.gguf.tokenizer_identity import gguf_tokenizer_identity, require_same_tokenizer, tokenizer_identity


@dataclass
class KDConfig:
    out: Path = field(metadata={"help": "folder to write the sidecar (topk.npz, kd.json) into"})
    dataset: str = field(metadata={"help": "folder (or s3:// URI) written by fetch-dataset; its train split is scored"})
    kd_weight: float = field(
        default=1.0,
        metadata={"help": "train's --kd-weight; 0: KD is off, nothing is scored, kd.json says so (default: score)"},
    )
    teacher: str = field(
        default=SHARED.teacher,
        metadata={"help": "the teacher's entry in --teachers-file: listed, with terms that allow training on it"},
    )
    teachers_file: str = field(default=SHARED.teachers_file, metadata={"help": "the committed terms decisions"})
    teacher_gguf: str = field(
        default="",
        metadata={"help": "the teacher's GGUF (llama.cpp), sharing the student's tokenizer (empty: the entry's gguf)"},
    )
    base_model: str = field(default=SHARED.base_model, metadata={"help": "the student's base (for its tokenizer)"})
    base_revision: str = field(
        default=SHARED.base_revision, metadata={"help": "hub revision of the base (ignored for a folder)"}
    )
    kd_top_k: int = field(default=16, metadata={"help": "teacher log-probabilities kept per summary token"})
    max_seq_len: int = field(
        default=SHARED.max_seq_len, metadata={"help": "as train's --max-seq-len: examples are encoded alike"}
    )
    threads: int = field(
        default=SHARED.threads, metadata={"help": "llama.cpp threads (0: the CPUs this container may use)"}
    )


@dataclass
class KDResult:
    rows: int
    summary_tokens: int
    top_k: int
    teacher_sha256: str
    scored: bool = True  # False: --kd-weight 0, nothing scored


def config_problems(cfg: KDConfig) -> list[str]:
    """What is wrong with the settings (also run by check-parameters): the top-k and threads, and, when KD is on, the
    teacher's terms entry (listed, allowing training on its outputs, open weights: a mistyped teacher stops the run
    before any pod scores)."""
    problems = threads_problems(cfg.threads)
    if cfg.kd_top_k < 1:
        problems.append(f"--kd-top-k {cfg.kd_top_k}: keep at least 1 log-probability per token")
    if cfg.max_seq_len < 1:
        problems.append(f"--max-seq-len {cfg.max_seq_len}: needs at least 1")  # train's words: said once
    if not 0 <= cfg.kd_weight <= 1 or not KD_ON.holds(cfg.kd_weight):
        return problems  # off, or a weight train's own check refuses (settings_problems)
    try:
        entry = terms.allowed_entry(cfg.teachers_file, cfg.teacher)
    except terms.TermsError as e:
        return [*problems, f"--teacher {cfg.teacher}: {e}"]
    if entry["hosted"]:
        problems.append(
            f"--teacher {cfg.teacher}: {cfg.teachers_file} lists it as a hosted API; logit-level distillation "
            "scores the teacher's GGUF itself: use an open-weights entry, or -p kd-weight=0"
        )
    return problems


def _log_softmax(x: Any) -> Any:
    import numpy as np

    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def score(llm: Any, examples: list[dict[str, list[int]]], top_k: int) -> list[tuple[Any, Any, Any]]:
    """Per example, (label ids [T], teacher top-k ids [T, k], their log-probabilities [T, k]) from `llm`, a
    llama_cpp.Llama made with logits_all=True, fed the example's own token ids."""
    import numpy as np

    out = []
    for ex in examples:
        ids, labels = ex["input_ids"], ex["labels"]
        n_summary = sum(t != -100 for t in labels)
        llm.reset()
        llm.eval(ids)
        # Position p's logits predict token p + 1: the summary's T tokens are predicted from the T positions before.
        logits = np.asarray(llm.scores[len(ids) - n_summary - 1 : len(ids) - 1], dtype=np.float32)
        logprobs = _log_softmax(logits)
        top = np.argpartition(-logprobs, top_k - 1, axis=-1)[:, :top_k]
        top_lp = np.take_along_axis(logprobs, top, axis=-1)
        order = np.argsort(-top_lp, axis=-1)
        out.append(
            (
                np.asarray(labels[len(labels) - n_summary :], dtype=np.int32),
                np.take_along_axis(top, order, axis=-1).astype(np.int32),
                np.take_along_axis(top_lp, order, axis=-1).astype(np.float16),
            )
        )
    return out


def teacher_file(cfg: KDConfig) -> tuple[Path, dict]:
    """The teacher's GGUF and its teachers-file entry, under the same terms gate as the teacher step
    (terms.allowed_entry): listed, its outputs allowed to train other models, and weights we run ourselves (the
    top-k needs every position's logits). A --teacher-gguf beside an entry that names its GGUF must be that file."""
    entry = terms.allowed_entry(cfg.teachers_file, cfg.teacher)
    where = f"{cfg.teachers_file}: teachers.{cfg.teacher}"
    if entry["hosted"]:
        raise KDError(f"{where} is a hosted API: logit-level distillation runs the teacher's GGUF itself; use an "
                      "open-weights entry")  # fmt: skip
    listed = terms.resolve_gguf(entry["gguf"]) if entry.get("gguf") else None
    gguf = Path(cfg.teacher_gguf) if cfg.teacher_gguf else listed
    if gguf is None:
        raise KDError(f"{where} names no gguf: pass --teacher-gguf, or add the entry's gguf")
    if not gguf.is_file():
        raise KDError(f"--teacher-gguf {gguf}: no such file")
    if listed is not None and gguf != listed and sha256_file(gguf) != sha256_file(listed):
        raise KDError(f"--teacher-gguf {gguf} is not the GGUF {where} was reviewed for ({entry['gguf']}); "
                      "drop --teacher-gguf, or list this file under an entry of its own")  # fmt: skip
    return gguf, entry


@timed
def run(cfg: KDConfig) -> KDResult:
    if not KD_ON.holds(cfg.kd_weight):  # sequence-level only: say so, for train to read nothing
        result = KDResult(rows=0, summary_tokens=0, top_k=cfg.kd_top_k, teacher_sha256="", scored=False)
        with atomic_dir(cfg.out) as tmp:
            write_json(tmp / META_FILE, {"kd_weight": cfg.kd_weight, "scored": False})
            write_result(tmp, result)
        return result
    gguf, entry = teacher_file(cfg)  # the terms gate first, in the teacher step's words
    refuse(config_problems(cfg) + base_model_problems(cfg.base_model), "kd-targets", KDError)

    import numpy as np
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from steps.core.dataset import load_split
    from steps.core.examples import encode_rows

    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, revision=cfg.base_revision)
    student = tokenizer_identity(tokenizer)
    require_same_tokenizer(gguf_tokenizer_identity(gguf), str(gguf), student, cfg.base_model)
    with local_folder(cfg.dataset) as dataset:
        rows = load_split(dataset, "train")
    examples = encode_rows(tokenizer, rows, cfg.max_seq_len)
    n_ctx = max(len(e["input_ids"]) for e in examples)
    llm = Llama(
        model_path=str(gguf), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False,
        **llama_threads(cfg.threads),
    )  # fmt: skip
    try:
        scored = score(llm, examples, cfg.kd_top_k)
    finally:
        llm.close()
    lengths = [len(s[0]) for s in scored]
    teacher_sha = sha256_file(gguf)
    with atomic_dir(cfg.out) as tmp:
        np.savez_compressed(
            tmp / TOPK_FILE,
            row_ids=np.array([r["id"] for r in rows]),
            offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            labels=np.concatenate([s[0] for s in scored]),
            ids=np.concatenate([s[1] for s in scored]),
            logprobs=np.concatenate([s[2] for s in scored]),
        )
        write_json(
            tmp / META_FILE,
            {
                "teacher": {
                    "gguf": gguf.name,
                    "sha256": teacher_sha,
                    "tokenizer": gguf_tokenizer_identity(gguf),
                    "entry": cfg.teacher,
                    "terms": {k: entry[k] for k in ("provider", "model", "terms_url", "reviewed_by", "reviewed_on")},
                },
                "student": {"base_model": cfg.base_model, "tokenizer": student},
                "top_k": cfg.kd_top_k,
                "max_seq_len": cfg.max_seq_len,
                "rows": len(rows),
            },
        )
        result = KDResult(rows=len(rows), summary_tokens=sum(lengths), top_k=cfg.kd_top_k, teacher_sha256=teacher_sha)
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(KDConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (KDError, FileNotFoundError) as e:
        print(f"kd-targets: {e}", file=sys.stderr)
        return 1
    if not result.scored:
        print(f"kd-targets: --kd-weight {cfg.kd_weight}: KD is off, nothing scored; {cfg.out} says so")
        return 0
    print(f"teacher top-{result.top_k} for {result.summary_tokens} summary tokens of {result.rows} rows: {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
