"""Benchmark: convert-gguf's peak resident memory on a random-initialised base of a real shape, next to sizing's.

    python -m benchmarks.convert_memory --shape 3b --work /tmp/convert-memory
    python -m benchmarks.convert_memory --shape smollm2 --work /tmp/convert-memory-small --eval-docs 8

Heavy (the 3B writes ~25 GB and runs for tens of minutes on 2 cores): run it under `flock /tmp/distillery-heavy.lock`.

Builds once in `--work` (reused when there): a random-init Llama of `--shape` (tests/tiny.py's tokenizer convention:
SmolLM2's real tokenizer, whose pre-tokenizer llama.cpp's converter recognises; a config vocabulary larger than the
tokenizer's is the real shape's, and the converter pads the GGUF vocabulary with [PAD<i>] tokens to it), saved in
bf16 with save_pretrained; a LoRA adapter of train's defaults (r, alpha, targets) with non-zero random B; the
committed dataset's splits (fetch-dataset), its eval split cut to `--eval-docs` documents.

Then runs the real step (`steps.convert_gguf.main`, no base cache) in a child process that reads its own VmHWM from
/proc/self/status as it ends (the kernel's high-water mark of its resident set, file-backed pages of the GGUFs
llama.cpp maps included; not ru_maxrss). A sampler polls the child's process tree every SAMPLE_S seconds: the
converter subprocess's VmHWM, and the largest sum of the tree's VmRSS (what a pod's memory limit sees). The table
sets these beside sizing's prediction (steps/sizing/memory.py `convert_memory` with the process's fixed part and
the margin: what preflight asks for), and beside the same model at this run's eval-split geometry (the documents,
width and summary length it actually scored; sizing assumes the served context's worst case).
`--json` also writes the figures; `--table FILE` prints the table again from such a file with the current sizing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from steps.core.defaults import SHARED
from tests.tiny import REAL_SHAPES

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / SHARED.base_model
SHAPES = {  # hidden, intermediate, layers, attention heads, key/value heads, vocabulary, tied embeddings
    "tiny": (64, 128, 2, 4, 2, 0, True),  # tests/tiny.py: checks the benchmark itself runs
    "smollm2": (576, 1536, 30, 9, 3, 49152, True),  # SmolLM2-135M (the embedded run's base)
    "3b": REAL_SHAPES["llama3.2-3b"],
    "8b": REAL_SHAPES["llama3.1-8b"],
}
SAMPLE_S = 0.1
GIB = 2**30

BUILD = """
import sys, torch
from pathlib import Path
from benchmarks.convert_memory import build
build(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
"""

CHILD = """
import os, sys
from steps import convert_gguf
rc = convert_gguf.main(sys.argv[1:])
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
with open(os.environ["CONVERT_MEMORY_REPORT"], "w") as f:
    f.write(status["VmHWM"].split()[0])
sys.exit(rc)
"""


def build(shape: str, work: Path, eval_docs: int) -> None:
    """The base (bf16), the adapter and the dataset in `work`, each skipped when already there."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from steps import fetch_dataset
    from steps.core.io import read_jsonl, write_jsonl
    from steps.train.config import TrainConfig

    base, adapter, dataset = work / "base", work / "adapter", work / "dataset"
    if not (dataset / "eval.jsonl").is_file():
        fetch_dataset.run(fetch_dataset.FetchConfig(out=dataset, dataset_repo=str(ROOT), dataset_rev="HEAD"))
        write_jsonl(dataset / "eval.jsonl", read_jsonl(dataset / "eval.jsonl")[:eval_docs])
    if (adapter / "adapter_model.safetensors").is_file():
        return
    hidden, intermediate, layers, heads, kv_heads, vocab, tied = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    config = LlamaConfig(
        vocab_size=max(vocab, len(tokenizer)), hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=4096, tie_word_embeddings=tied, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    print(f"built {shape}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    print(f"saved the base to {base} ({time.perf_counter() - t0:.0f} s)", flush=True)
    train = TrainConfig(dataset=dataset, out=adapter)
    lora = LoraConfig(r=train.lora_r, lora_alpha=train.lora_alpha, task_type="CAUSAL_LM",
                      target_modules=[t.strip() for t in train.lora_targets.split(",") if t.strip()])  # fmt: skip
    peft_model = get_peft_model(model, lora)
    with torch.no_grad():  # a trained adapter's B is not zero: the merge must change every target
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.02)
    peft_model.save_pretrained(adapter)
    print(f"saved the adapter to {adapter} ({time.perf_counter() - t0:.0f} s)", flush=True)


def _status(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in lines) if k in ("VmRSS", "VmHWM")}


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return out


class Sampler(threading.Thread):
    """The child's process tree every SAMPLE_S: each process's last VmHWM (by command) and the largest tree RSS."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.done = pid, threading.Event()
        self.hwm: dict[str, int] = {}
        self.tree_peak = 0
        self.names: dict[int, str] = {}

    def name(self, pid: int) -> str:
        if pid not in self.names:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                return "?"
            self.names[pid] = "step" if pid == self.pid else Path(cmd[1].decode() if len(cmd) > 1 else "?").name
        return self.names[pid]

    def run(self) -> None:
        last_print = time.monotonic()
        while not self.done.wait(SAMPLE_S):
            total = 0
            for p in _tree(self.pid):
                st = _status(p)
                if st:
                    total += st["VmRSS"]
                    self.hwm[self.name(p)] = max(self.hwm.get(self.name(p), 0), st["VmHWM"])
            self.tree_peak = max(self.tree_peak, total)
            if time.monotonic() - last_print > 30:
                last_print = time.monotonic()
                print(f"[memory] tree RSS now {total / GIB:.2f} GiB, peak so far {self.tree_peak / GIB:.2f} GiB; "
                      + ", ".join(f"{k} VmHWM {v / GIB:.2f}" for k, v in self.hwm.items()), flush=True)  # fmt: skip


def eval_geometry(base: Path, dataset: Path) -> tuple[int, int, int]:
    """(documents in the largest HF batch, its padded width, the longest summary's rows) of this run's eval split,
    as parity.eval_parity batches it."""
    from transformers import AutoTokenizer

    from steps.core.dataset import load_split
    from steps.gguf import parity
    from steps.gguf.settings import PARITY_EVAL_BATCH

    seqs = parity.eval_sequences(AutoTokenizer.from_pretrained(base), load_split(dataset, "eval"))
    widths = [len(s["prompt_ids"]) + len(s["summary_ids"]) for s in seqs]
    tail = max(len(s["summary_ids"]) + 1 for s in seqs)
    return min(len(seqs), PARITY_EVAL_BATCH), max(widths), tail


def table(figures: dict[str, Any]) -> str:
    from transformers import AutoConfig

    from steps import sizing

    base = Path(figures["base"])
    s = sizing.shape_of(AutoConfig.from_pretrained(base))
    k = sizing.Knobs("gpu", False, 512, 16, figures["lora_r"], tuple(figures["quantizations"]))
    worst = sizing.total_gib(sizing.convert_memory(s, k), sizing.PROCESS_GIB)
    geometry = tuple(figures["eval_geometry"])
    terms = sizing.convert_memory(s, k, eval_batch=geometry, parity_tokens=figures["parity_tokens"])
    at_run = sizing.total_gib(terms, sizing.PROCESS_GIB)
    measured = max(figures["step_vmhwm"], figures["tree_peak_rss"]) / GIB
    rows = [
        ("measured: the step's VmHWM", figures["step_vmhwm"] / GIB),
        ("measured: llama.cpp's converter's VmHWM (sampled)", figures["converter_vmhwm"] / GIB),
        (f"measured: the tree's largest RSS sum (sampled every {SAMPLE_S} s)", figures["tree_peak_rss"] / GIB),
        ("predicted: sizing (preflight's request: eval at the served context, 48 parity tokens)", worst),
        (
            f"predicted: sizing at this run's eval batch {geometry} (documents, width, rows) and "
            f"{figures['parity_tokens']} parity tokens",
            at_run,
        ),
    ]
    lines = [f"convert-gguf, {figures['shape']} ({s.parameters / 1e9:.2f} B parameters, {figures['seconds']:.0f} s)",
             "", "| what | GiB |", "|---|---:|"]  # fmt: skip
    lines += [f"| {what} | {gib:.2f} |" for what, gib in rows]
    lines += ["", f"prediction at this run's geometry / measured peak: {at_run / measured:.3f} (target 1.00-1.15)",
              "terms (GiB, before the margin and the process's fixed part): "
              + ", ".join(f"{name} {value / GIB:.2f}" for name, value in terms.items())]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="3b")
    parser.add_argument("--work", type=Path, default=Path("/tmp/convert-memory"))
    parser.add_argument("--eval-docs", type=int, default=8, help="eval documents kept (8: one full HF batch)")
    parser.add_argument("--quantizations", default="Q8_0", help="the ladder (Q8_0 alone keeps the run short)")
    parser.add_argument("--parity-tokens", type=int, default=8, help="greedy tokens per probe (the step's: 48)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--table", type=Path, help="print the table from a --json file with the current sizing")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    work = args.work.resolve() / args.shape
    work.mkdir(parents=True, exist_ok=True)
    # The build runs in its own process: its memory (the whole model) is gone before the step starts.
    subprocess.run([sys.executable, "-c", BUILD, args.shape, str(work), str(args.eval_docs)], cwd=ROOT, check=True)
    out, report = work / "gguf", work / "vmhwm"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    command = [sys.executable, "-c", CHILD, "--adapter", str(work / "adapter"), "--dataset", str(work / "dataset"),
               "--out", str(out), "--base-model", str(work / "base"), "--base-cache", "",
               "--quantizations", args.quantizations, "--quantization", args.quantizations.split(",")[0],
               "--parity-tokens", str(args.parity_tokens), "--threads", str(args.threads)]  # fmt: skip
    t0 = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "CONVERT_MEMORY_REPORT": str(report)})
    sampler = Sampler(child.pid)
    sampler.start()
    rc = child.wait()
    sampler.done.set()
    sampler.join()
    if rc != 0:
        raise SystemExit(f"convert-gguf exited with {rc}")
    converter = [v for k, v in sampler.hwm.items() if k == "convert_hf_to_gguf.py"]
    figures = {
        "shape": args.shape,
        "base": str(work / "base"),
        "lora_r": json.loads((work / "adapter/adapter_config.json").read_text())["r"],
        "quantizations": args.quantizations.split(","),
        "parity_tokens": args.parity_tokens,
        "eval_geometry": list(eval_geometry(work / "base", work / "dataset")),
        "seconds": time.perf_counter() - t0,
        "step_vmhwm": int(report.read_text()) * 1024,
        "converter_vmhwm": max(converter, default=0),
        "tree_peak_rss": sampler.tree_peak,
        "sampled_vmhwm": sampler.hwm,
        "step_seconds": json.loads((out / "parity.json").read_text())["seconds"],
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    print(table(figures))


if __name__ == "__main__":
    main()
