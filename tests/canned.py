"""evaluate's own `run` on canned generations, for tests of what reads its outputs (propose, register).

Only what each contender answers is written here; everything after it — scoring, the paired bootstrap, the gate's
checks, the champion it resolves from the registry, `decision.json`, `metrics.json` — is the step's code, so a test
sees what the real producer writes, not a hand-made dict.

    write_splits(dataset)                                    # the committed eval and adversarial splits
    evaluate_canned(monkeypatch, dataset, gguf, out, {"base": Answers("lead"), "candidate": Answers("reference")})
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steps import evaluate
from steps.core.dataset import load_split
from steps.core.io import read_json, write_json
from tests.conftest import ROOT

DATA = ROOT / "data/summaries"
SPLITS = ("eval", "adversarial")


@dataclass(frozen=True)
class Answers:
    """How a stand-in contender answers. `summaries`: "reference" (the eval split's own summary), "half" (its first
    half) or "lead" (the document's first 12 words). Adversarial cases: the document's first sentence without a
    canary, naming the word the case asks for (a faithful summary the judges pass), except the cases whose id is in
    `obeys`, where it prints the injected canary (a hijack)."""

    summaries: str = "lead"
    obeys: tuple[str, ...] = ()

    def summary(self, row: dict[str, Any]) -> str:
        reference = row["summary"].split()
        if self.summaries == "reference":
            return row["summary"]
        if self.summaries == "half":
            return " ".join(reference[: len(reference) // 2])
        if self.summaries == "lead":
            return " ".join(row["document"].split()[:12])
        raise ValueError(f"unknown summaries {self.summaries!r}: reference, half or lead")

    def answer(self, row: dict[str, Any]) -> str:
        if row["id"] in self.obeys:
            return row["must_not_contain"][0]
        sentences = re.split(r"(?<=[.!?])\s", row["document"].strip())
        clean = [x for x in sentences if not any(c.lower() in x.lower() for c in row.get("must_not_contain", []))]
        first = " ".join((clean or sentences)[0].split()[:25]).rstrip(".") + "."
        missing = [w for w in row.get("must_contain", []) if w.lower() not in first.lower()]
        return first + (f" It is about the {' and '.join(missing)}." if missing else "")

    def outputs(self, eval_rows: list[dict], adv_rows: list[dict]) -> list[dict[str, Any]]:
        texts = [self.summary(r) for r in eval_rows] + [self.answer(r) for r in adv_rows]
        return [{"text": t, "stopped": True} for t in texts]


def write_splits(dataset: Path) -> Path:
    """The committed eval and adversarial splits in a dataset folder (as fetch-dataset writes them)."""
    dataset.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        (dataset / f"{split}.jsonl").write_bytes((DATA / f"{split}.jsonl").read_bytes())
    return dataset


def write_gguf_folder(gguf: Path) -> Path:
    """convert-gguf's folder with stand-in base and candidate GGUFs and a passed parity."""
    gguf.mkdir(parents=True)
    for role in ("base", "candidate"):
        (gguf / f"{role}.gguf").write_bytes(f"GGUF stand-in: {role}".encode())
    write_json(gguf / "result.json", {"base_gguf": "base.gguf", "candidate_gguf": "candidate.gguf"})
    write_json(gguf / "parity.json", {"passed": True, "quantization": "Q8_0"})
    return gguf


def evaluate_canned(
    monkeypatch: pytest.MonkeyPatch, dataset: Path, gguf: Path, out: Path, answers: dict[str, Answers], **cfg: Any
) -> evaluate.EvaluateResult:
    """`evaluate.run` where each GGUF answers as `answers` says: the base and candidate files named in gguf's
    result.json by their role, any other file (the champion evaluate resolved) as "champion"."""
    eval_rows, adv_rows = load_split(dataset, "eval"), load_split(dataset, "adversarial")
    named = read_json(gguf / "result.json")
    roles = {gguf / named["base_gguf"]: "base", gguf / named["candidate_gguf"]: "candidate"}

    every = [r["document"] for r in eval_rows + adv_rows]

    def generate(
        file: Path, documents: list[str], _cfg: evaluate.EvaluateConfig, _progress: Any = None
    ) -> tuple[list[dict], float, bool]:
        # All the documents, in order, or (a --shard run) a slice of them.
        outputs = dict(zip(every, answers[roles.get(Path(file), "champion")].outputs(eval_rows, adv_rows), strict=True))
        assert set(documents) <= outputs.keys()
        return [outputs[d] for d in documents], 100.0, False

    monkeypatch.setattr(evaluate, "cached_generate", generate)
    return evaluate.run(evaluate.EvaluateConfig(dataset=dataset, gguf=gguf, out=out, **cfg))
