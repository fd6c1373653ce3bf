"""Whether two tokenizers give every token id the same meaning: a Hugging Face tokenizer's identity (vocabulary by id,
merges, end-of-sequence id, model type, normaliser, pre-tokenizer, each a digest) and a GGUF's, on the fields a GGUF
records. Logit-level distillation needs it twice: `kd-targets` before it scores a teacher GGUF on the student's ids,
and `train` before it mixes in targets scored for some tokenizer.

A GGUF carries the first four (llama.cpp keeps no normaliser, only a pre-tokenizer name); since the teacher is fed the
student's ids, never its own tokenisation of text, those are what the two must share. A teacher that differs in any
is refused, naming both.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from steps.core.kd_sidecar import KDError
from steps.gguf.meta import read_metadata

# What a GGUF records of its tokenizer, and so what a GGUF teacher and a Hugging Face student are compared on.
SHARED_FIELDS = ("type", "vocab", "merges", "eos")
GGUF_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id")
# tokenizer.json's model type by llama.cpp's name for it
GGUF_TYPES = {"gpt2": "BPE", "llama": "Unigram-SPM", "bert": "WordPiece"}


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
