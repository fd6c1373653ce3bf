"""Logit-level distillation, an option of `train`: the teacher's top-k log-probabilities for every summary token, kept
in a sidecar, and the KL term `train_loop` adds to its loss.

    python -m steps.train.kd --dataset out/dataset --kd-weight 0.5 --teacher-gguf teacher.gguf \
        --base-model .cache/models/SmolLM2-135M-Instruct --out out/kd-targets
    python -m steps.train --dataset out/dataset --out out/adapter \
        --kd-targets out/kd-targets --kd-weight 0.5 --kd-temperature 2

The pipeline's `kd-targets` stage (steps/pipeline.py) runs it before train when `kd-weight` > 0 (`pipeline.KD_ON`): on
Argo a task skipped otherwise; locally (DVC runs every stage) `--kd-weight 0` scores nothing and writes only `kd.json`
saying so, which train, at weight 0, never reads.

Sequence-level distillation (training on the teacher's summaries, `--kd-weight 0`) stays the default. Logit-level
distillation needs the teacher to share the student's tokenizer: the teacher is scored on the student's own token ids,
so id i must mean the same piece to both. `tokenizer_identity` digests a tokenizer's vocabulary (every piece by id),
its merges, its end-of-sequence id and model type, and (Hugging Face tokenizers) its normaliser and pre-tokenizer; a
GGUF carries the first four (llama.cpp keeps no normaliser, only a pre-tokenizer name), and since the teacher is fed
the student's ids, never its own tokenisation of text, those are what the two must share. A teacher that differs in
any is refused, naming both.

Scoring: the teacher's GGUF runs in process (llama-cpp-python's `Llama`, every position's logits) on each training
example exactly as `train` encodes it (`data.encode_example`: the served prompt, the summary and end-of-turn token);
the top-k (`--top-k`) log-probabilities of the teacher's next-token distribution at every summary position are kept.
llama.cpp's server gives `top_logprobs` in chat completions too, but keyed by token *text* (pieces that detokenise
alike collide, ids are lost) and only for the tokens it generated itself, not for a trimmed or reviewer-edited summary.

The sidecar (`--out`): `topk.npz` (compressed: `row_ids`; `offsets` into the flat arrays; per summary token the
student's label id (int32), the teacher's top-k ids (int32) and log-probabilities (float16)) and `kd.json` (teacher
GGUF and sha256, the student's tokenizer identity, k, the rows it covers).

The loss (`KDLoss`, called where `train_loop` computes its cross-entropy): per summary token, the KL divergence from
the teacher's top-k distribution at temperature T (renormalised over its k ids) to the student's at T, gathered at
those ids, times T² (Hinton et al.), mixed as (1 - w)·CE + w·KL. It lines up with the batch by label position: the
summary tokens of the batch in layout order must be exactly the sidecar's label ids of its examples in order, which
is checked each step (a layout that reorders or drops summary tokens, e.g. a packer that does, is refused with that
message rather than trained on misaligned targets).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.contract.threads import llama_threads
from steps.core.base_model import base_model_problems
from steps.core.cli import parse_config, timed, write_result
from steps.core.io import atomic_dir, sha256_file, write_json
from steps.core.switches import KD_ON

TOPK_FILE = "topk.npz"
META_FILE = "kd.json"
# What a GGUF records of its tokenizer, and so what a GGUF teacher and a Hugging Face student are compared on.
SHARED_FIELDS = ("type", "vocab", "merges", "eos")
GGUF_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id")
# tokenizer.json's model type by llama.cpp's name for it
GGUF_TYPES = {"gpt2": "BPE", "llama": "Unigram-SPM", "bert": "WordPiece"}


class KDError(ValueError):
    """Logit-level distillation cannot run as asked (tokenizers differ, targets missing or misaligned)."""


# --- settings (TrainConfig's kd_* fields) ----------------------------------------------------------------------------


def settings_problems(weight: float, temperature: float, targets: str) -> list[str]:
    """What is wrong with `--kd-weight`, `--kd-temperature` and `--kd-targets` alone."""
    problems = []
    if not 0 <= weight <= 1:
        problems.append(f"--kd-weight {weight}: use a share between 0 (cross-entropy only, the default) and 1")
    if temperature <= 0:
        problems.append(f"--kd-temperature {temperature}: use a positive temperature (1 keeps the distributions)")
    if weight > 0 and not targets:
        problems.append(
            "--kd-weight > 0 needs --kd-targets: the teacher's top-k log-probabilities (python -m steps.train.kd)"
        )
    return problems


# --- tokenizer identity ----------------------------------------------------------------------------------------------


def _digest(values: Any) -> str:
    return hashlib.sha256(json.dumps(values, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _merge_text(merge: Any) -> str:
    return merge if isinstance(merge, str) else " ".join(merge)  # tokenizer.json writes "a b" or ["a", "b"]


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """A Hugging Face (fast) tokenizer's identity: vocabulary by id, merges, eos id, model type, normaliser and
    pre-tokenizer, each as a digest, with the vocabulary's size."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    size = len(tokenizer)
    return {
        "type": spec["model"]["type"],
        "size": size,
        "vocab": _digest(tokenizer.convert_ids_to_tokens(list(range(size)))),
        "merges": _digest([_merge_text(m) for m in spec["model"].get("merges", [])]),
        "eos": tokenizer.eos_token_id,
        "normalizer": _digest(spec.get("normalizer")),
        "pre_tokenizer": _digest(spec.get("pre_tokenizer")),
    }


def gguf_tokenizer_identity(path: Path) -> dict[str, Any]:
    """A GGUF's tokenizer identity, on the fields it records (SHARED_FIELDS)."""
    from steps.gguf.meta import read_metadata

    meta = read_metadata(path, GGUF_KEYS)
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise KDError(f"{path}: the GGUF has no tokenizer.ggml.tokens; cannot compare its tokenizer with the student's")
    model = str(meta.get("tokenizer.ggml.model"))
    return {
        "type": GGUF_TYPES.get(model, model),
        "size": len(tokens),
        "vocab": _digest(tokens),
        "merges": _digest(list(meta.get("tokenizer.ggml.merges") or [])),
        "eos": meta.get("tokenizer.ggml.eos_token_id"),
    }


def require_same_tokenizer(teacher: dict, teacher_name: str, student: dict, student_name: str) -> None:
    """KDError naming both and what differs, unless the two identities agree on every field both record."""
    differ = [k for k in teacher.keys() & student.keys() if k != "size" and teacher[k] != student[k]]
    if differ:
        raise KDError(
            f"logit-level distillation needs the teacher and the student to share a tokenizer, but teacher "
            f"{teacher_name} ({teacher['type']}, {teacher['size']} tokens) and student {student_name} "
            f"({student['type']}, {student['size']} tokens) differ in {', '.join(sorted(differ))}; train on the "
            "teacher's summaries instead (--kd-weight 0, sequence-level distillation) or pick a teacher of the "
            "student's family"
        )


# --- scoring: the sidecar --------------------------------------------------------------------------------------------


@dataclass
class KDConfig:
    out: Path = field(metadata={"help": "folder to write the sidecar (topk.npz, kd.json) into"})
    dataset: str = field(metadata={"help": "folder (or s3:// URI) written by fetch-dataset; its train split is scored"})
    kd_weight: float = field(
        default=1.0,
        metadata={"help": "train's --kd-weight; 0: KD is off, nothing is scored, kd.json says so (default: score)"},
    )
    teacher: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "the teacher's entry in --teachers-file: listed, with terms that allow training on it"},
    )
    teachers_file: str = field(default="data/teachers.yaml", metadata={"help": "the committed terms decisions"})
    teacher_gguf: str = field(
        default="",
        metadata={"help": "the teacher's GGUF (llama.cpp), sharing the student's tokenizer (empty: the entry's gguf)"},
    )
    base_model: str = field(
        default=".cache/models/SmolLM2-135M-Instruct", metadata={"help": "the student's base (for its tokenizer)"}
    )
    base_revision: str = field(default="main", metadata={"help": "hub revision of the base (ignored for a folder)"})
    kd_top_k: int = field(default=16, metadata={"help": "teacher log-probabilities kept per summary token"})
    max_seq_len: int = field(default=512, metadata={"help": "as train's --max-seq-len: examples are encoded alike"})
    threads: int = field(default=0, metadata={"help": "llama.cpp threads (0: the CPUs this container may use)"})


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
    from steps.contract.threads import threads_problems
    from steps.core.terms import TermsError, allowed_entry

    problems = threads_problems(cfg.threads)
    if cfg.kd_top_k < 1:
        problems.append(f"--kd-top-k {cfg.kd_top_k}: keep at least 1 log-probability per token")
    if cfg.max_seq_len < 1:
        problems.append(f"--max-seq-len {cfg.max_seq_len}: needs at least 1")  # train's words: said once
    if not 0 <= cfg.kd_weight <= 1 or not KD_ON.holds(cfg.kd_weight):
        return problems  # off, or a weight train's own check refuses (settings_problems)
    try:
        entry = allowed_entry(cfg.teachers_file, cfg.teacher)
    except TermsError as e:
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
    from steps.core import terms

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
    if problems := config_problems(cfg) + base_model_problems(cfg.base_model):
        raise KDError("invalid kd config:\n  " + "\n  ".join(problems))

    import numpy as np
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from steps.core.dataset import load_split
    from steps.train.data import encode_rows
    from steps.train.storage import local_folder

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


# --- training: the targets and the loss ------------------------------------------------------------------------------


def load_targets(location: str, rows: list[dict]) -> dict[str, Any]:
    """The sidecar at `location` (a folder or s3:// URI) for `rows`, per row in their order: {"meta", "rows": [(label
    ids, top-k ids, log-probabilities)]}; KDError when it lacks a row."""
    import numpy as np

    from steps.core.io import read_json
    from steps.train.storage import local_folder

    with local_folder(location) as folder:
        if not (folder / TOPK_FILE).is_file():
            off = (folder / META_FILE).is_file() and read_json(folder / META_FILE).get("scored") is False
            why = " (written with --kd-weight 0: KD was off)" if off else ""
            raise KDError(
                f"--kd-targets {location}: no {TOPK_FILE}{why}; score it with python -m steps.train.kd --kd-weight "
                "<the same weight as train's>"
            )
        meta = read_json(folder / META_FILE)
        with np.load(folder / TOPK_FILE) as data:
            arrays = {k: data[k] for k in data.files}
    where = {str(r): i for i, r in enumerate(arrays["row_ids"])}
    missing = [r["id"] for r in rows if r["id"] not in where]
    if missing:
        raise KDError(
            f"--kd-targets {location} has no teacher log-probabilities for {len(missing)} training row(s) "
            f"(first: {', '.join(missing[:3])}); score this dataset: python -m steps.train.kd --dataset …"
        )
    off = arrays["offsets"]
    per_row = []
    for r in rows:
        a, b = off[where[r["id"]]], off[where[r["id"]] + 1]
        per_row.append((arrays["labels"][a:b], arrays["ids"][a:b], arrays["logprobs"][a:b]))
    return {"meta": meta, "rows": per_row}


def sparse_kl(student_logits: Any, teacher_ids: Any, teacher_logprobs: Any, temperature: float) -> Any:
    """Per token, KL(teacher ‖ student) over the teacher's top-k ids at `temperature`: the teacher's k log-probs
    renormalised, the student's full-vocabulary log-softmax gathered at those ids. Shapes [N, V], [N, k], [N, k]."""
    import torch

    student = torch.log_softmax(student_logits.float() / temperature, dim=-1).gather(-1, teacher_ids)
    teacher = torch.log_softmax(teacher_logprobs.float() / temperature, dim=-1)
    return (teacher.exp() * (teacher - student)).sum(-1)


class KDLoss:
    """(1 - w)·CE + w·T²·KL for one batch, where `train_loop` computes its loss; per-example targets by index."""

    def __init__(self, weight: float, temperature: float, targets: list[tuple[Any, Any, Any]]) -> None:
        self.weight, self.temperature, self.targets = weight, temperature, targets

    def __call__(self, ce_sum: Any, logits: Any, labels: Any, indices: list[int]) -> Any:
        """`ce_sum`: the batch's summed token cross-entropy; `logits` [B, P, V] and `labels` [B, P] as the loss saw
        them (-100 where no label); `indices`: the batch's examples in layout order."""
        import numpy as np
        import torch

        mask = labels != -100
        want = np.concatenate([self.targets[i][0] for i in indices])
        got = labels[mask]
        if got.numel() != len(want) or not torch.equal(got.cpu(), torch.from_numpy(want).long()):
            raise KDError(
                f"the teacher's targets do not line up with the batch's summary tokens ({got.numel()} in the batch, "
                f"{len(want)} in the sidecar for examples {indices[:4]}…): the batch layout reorders or cuts summary "
                "tokens (packing?) or the sidecar was scored with other settings; train with --kd-weight 0 there"
            )
        ids = torch.from_numpy(np.concatenate([self.targets[i][1] for i in indices])).long().to(logits.device)
        lps = torch.from_numpy(np.concatenate([self.targets[i][2] for i in indices]).astype(np.float32))
        kl = sparse_kl(logits[mask], ids, lps.to(logits.device), self.temperature).sum()
        return (1 - self.weight) * ce_sum + self.weight * self.temperature**2 * kl


def loss_hook(cfg: Any, tokenizer: Any, examples: list[dict], targets: dict | None) -> KDLoss | None:
    """The KD term for `train_loop` (None when --kd-weight is 0), after checking that the sidecar was scored for this
    student's tokenizer and these examples."""
    if not KD_ON.holds(cfg.kd_weight):
        return None
    if targets is None:
        raise KDError("--kd-weight > 0 but no --kd-targets were loaded")
    scored = targets["meta"]["student"]
    require_same_tokenizer(
        scored["tokenizer"],
        f"{cfg.kd_targets} (scored for {scored['base_model']}'s tokenizer)",
        tokenizer_identity(tokenizer),
        cfg.base_model,
    )
    for i, (ex, (labels, _, _)) in enumerate(zip(examples, targets["rows"], strict=True)):
        tail = ex["labels"][len(ex["labels"]) - len(labels) :]
        if tail != labels.tolist() or sum(t != -100 for t in ex["labels"]) != len(labels):
            raise KDError(
                f"--kd-targets {cfg.kd_targets}: training example {i} encodes its summary differently from when it "
                f"was scored (--max-seq-len {cfg.max_seq_len} vs {targets['meta']['max_seq_len']}?); score again"
            )
    return KDLoss(cfg.kd_weight, cfg.kd_temperature, targets["rows"])


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(KDConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (KDError, FileNotFoundError) as e:
        print(f"kd: {e}", file=sys.stderr)
        return 1
    if not result.scored:
        print(f"kd: --kd-weight {cfg.kd_weight}: KD is off, nothing scored; {cfg.out} says so")
        return 0
    print(f"teacher top-{result.top_k} for {result.summary_tokens} summary tokens of {result.rows} rows: {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
