"""preflight: before any training, check that the base model can become a working GGUF (seconds, no weights).

    python -m steps.preflight --base-model .cache/models/SmolLM2-135M-Instruct --out out/preflight

Reads only the base model's config and tokenizer files and runs llama.cpp's own converter in `--vocab-only` mode on
them. Refuses, with the fix for each problem, a base whose
- architecture llama.cpp's converter does not support (it says so on the vocabulary alone);
- tokenizer the converter does not recognise (an unknown BPE pre-tokenizer fails late and silently elsewhere), or
  that llama.cpp then tokenizes differently from Hugging Face on the probe texts;
- chat template is missing or does not render the pipeline's prompt;
- BOS/EOS tokens are unset, or whose EOS is not the token that closes the assistant's turn (a fine-tuned model then
  never stops in llama.cpp).
It also counts the base model's parameters (the model built from its config on PyTorch's `meta` device: shapes only,
no memory, no weights) and says whether the model is small enough for the arm64 Raspberry Pi Ray workers (at most
`ARM64_MAX_BILLION` billion parameters, seed ADR 0058); the Ray backend gives the Pi worker group 0 replicas otherwise.
Produces `preflight.json` in `--out`, and the output parameters `architecture`, `parameters-billion`, `arm64-ok`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.common import atomic_dir, parse_config, write_json, write_result
from steps.prompting import messages

# Files a converter needs besides the weights.
TOKENIZER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)
TOKENIZER_PROBES = (
    "Plain English: the council met on Tuesday.",
    "Ünïcödé — naïve café, Zürich «quotes», 日本語のテキスト, emoji 🚀🔥",
    "tabs\tand  double  spaces\n\nnew lines   trailing   ",
    "Numbers: 3.14159, 1,234,567, -42, 2026-11-30, 0x1F, 10^9, €48.5m, 97%",
    "Code: def f(x):\n    return x ** 2  # square",
)
ARM64_MAX_BILLION = 3.0  # the largest base model the Raspberry Pi Ray workers take part in training (ADR 0058)


class PreflightError(ValueError):
    """Every reason the base model cannot become a working GGUF, one per line."""


@dataclass
class PreflightConfig:
    out: Path = field(metadata={"help": "folder to write preflight.json into"})
    base_model: str = field(
        default=".cache/models/SmolLM2-135M-Instruct", metadata={"help": "HF model id or local folder of the base"}
    )
    base_revision: str = field(default="main", metadata={"help": "hub revision of the base (ignored for a folder)"})
    converter_dir: str = field(
        default=os.environ.get("DISTILLERY_LLAMA_CPP", ".cache/llama.cpp"),
        metadata={"help": "folder holding llama.cpp's convert_hf_to_gguf.py (scripts/install_llama_cpp.sh)"},
    )


@dataclass
class PreflightResult:
    architecture: str
    parameters_billion: float  # the base model's parameter count, in billions (3 decimals)
    arm64_ok: bool  # small enough for the arm64 Raspberry Pi Ray workers
    passed: bool


def count_parameters(config: Any) -> int:
    """The parameter count of the causal LM `config` describes, without allocating it.

    On the `meta` device every tensor has a shape but no storage, so even a 70B model is built in seconds and a few MB.
    Tied weights count once (`parameters()` yields a shared tensor once), as in the real model.
    """
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def fits_arm64(parameters: int) -> bool:
    """Whether a base model of `parameters` parameters may train on the arm64 Raspberry Pi Ray workers."""
    return parameters <= ARM64_MAX_BILLION * 1e9


def _local_files(cfg: PreflightConfig, dest: Path) -> Path:
    """Copy (folder) or download (hub id) the base's config and tokenizer files, never its weights."""
    src = Path(cfg.base_model)
    if src.is_dir():
        dest.mkdir(parents=True)
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy(src / name, dest / name)
        return dest
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            cfg.base_model, revision=cfg.base_revision, allow_patterns=list(TOKENIZER_FILES), local_dir=dest
        )
    )


def check(cfg: PreflightConfig) -> tuple[list[str], dict[str, Any]]:
    """Run every check; returns (problems, facts). No problem → the base can be trained and converted."""
    from transformers import AutoConfig, AutoTokenizer

    converter = Path(cfg.converter_dir)
    if not (converter / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(
            f"{converter}/convert_hf_to_gguf.py not found: run scripts/install_llama_cpp.sh or set --converter-dir"
        )
    problems: list[str] = []
    facts: dict[str, Any] = {"base_model": cfg.base_model, "base_revision": cfg.base_revision}
    with tempfile.TemporaryDirectory(prefix="preflight-") as tmp_str:
        tmp = Path(tmp_str)
        files = _local_files(cfg, tmp / "model")
        config = AutoConfig.from_pretrained(files)
        tokenizer = AutoTokenizer.from_pretrained(files)
        arch = (config.architectures or ["<none>"])[0]
        facts["architecture"] = arch
        try:
            facts["parameters"] = count_parameters(config)
        except (ValueError, KeyError) as e:  # transformers' "Unrecognized configuration class …"
            problems.append(f"transformers cannot build a causal LM from this config ({e}); training would fail")
        # Special tokens and the chat template.
        # No BOS is fine (Qwen2's tokenizers have none): what matters is that llama.cpp adds the same special tokens
        # around a prompt as Hugging Face does, checked on the converted vocabulary below. No EOS is not.
        if tokenizer.eos_token is None:
            problems.append(
                "tokenizer has no eos_token; set it in tokenizer_config.json to the token that ends the assistant's "
                "turn, or the model will not stop in llama.cpp"
            )
        template_ok = False
        if not tokenizer.chat_template:
            problems.append("tokenizer has no chat template; add chat_template.jinja (the prompt is a chat)")
        else:
            try:
                prompt = tokenizer.apply_chat_template(messages("probe"), add_generation_prompt=True, tokenize=False)
                template_ok = "probe" in prompt and messages("x")[0]["content"] in prompt
                if not template_ok:
                    problems.append("the chat template drops the system or user message; fix the template")
            except Exception as e:  # jinja raises many types for a broken template
                problems.append(f"the chat template does not render the pipeline's prompt ({e}); fix the template")
        if template_ok and tokenizer.eos_token:
            turn = tokenizer.apply_chat_template(
                [*messages("probe"), {"role": "assistant", "content": "ANSWER"}], tokenize=False
            )
            closes = turn.split("ANSWER", 1)[-1]
            facts["assistant_turn_end"] = closes
            if not closes.lstrip(" ").startswith(tokenizer.eos_token):
                problems.append(
                    f"EOS {tokenizer.eos_token!r} is not what closes the assistant's turn ({closes[:20]!r}); "
                    "set eos_token to the end-of-turn token, or the fine-tuned model will not stop in llama.cpp"
                )

        # llama.cpp's converter on the vocabulary alone: refuses unknown pre-tokenizers in seconds.
        vocab = tmp / "vocab.gguf"
        proc = subprocess.run(
            [
                sys.executable,
                str(converter / "convert_hf_to_gguf.py"),
                str(files),
                "--vocab-only",
                "--outfile",
                str(vocab),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 and f"{arch} is not supported" in proc.stderr + proc.stdout:
            problems.append(
                f"architecture {arch} is not supported by llama.cpp's converter in {converter}; pick a base model "
                "of a supported family (convert_hf_to_gguf.py --print-supported-models lists them)"
            )
        elif proc.returncode != 0:
            tail = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln or "WARNING" in ln][-3:]
            problems.append(
                "llama.cpp's converter refuses the tokenizer: "
                + (" | ".join(tail) or proc.stderr[-500:])
                + "; use a base whose tokenizer llama.cpp recognises (or add its pre-tokenizer hash upstream)"
            )
        else:
            from llama_cpp import Llama

            llm = Llama(model_path=str(vocab), vocab_only=True, verbose=False)
            mismatched = []
            for text in TOKENIZER_PROBES:
                hf = tokenizer(text, add_special_tokens=False)["input_ids"]
                if llm.tokenize(text.encode(), add_bos=False, special=True) != hf:
                    mismatched.append(text[:30])
            facts["tokenizer_probes"] = len(TOKENIZER_PROBES)
            hf_special = tokenizer("probe")["input_ids"]
            cpp_special = llm.tokenize(b"probe", add_bos=True, special=True)
            if hf_special != cpp_special:
                problems.append(
                    f"llama.cpp adds other special tokens around a prompt than Hugging Face ({cpp_special} vs "
                    f"{hf_special} for 'probe'); make bos_token and add_bos_token/add_eos_token in "
                    "tokenizer_config.json say what the model was trained with"
                )
            if mismatched:
                problems.append(
                    f"llama.cpp tokenizes {len(mismatched)} probe text(s) differently from Hugging Face "
                    f"(e.g. {mismatched[0]!r}); the GGUF would not be the same model"
                )
    return problems, facts


def run(cfg: PreflightConfig) -> PreflightResult:
    problems, facts = check(cfg)
    if problems:
        raise PreflightError(
            f"base model {cfg.base_model} ({facts.get('architecture', '?')}) fails preflight:\n  "
            + "\n  ".join(problems)
        )
    result = PreflightResult(
        architecture=facts["architecture"],
        parameters_billion=round(facts["parameters"] / 1e9, 3),
        arm64_ok=fits_arm64(facts["parameters"]),
        passed=True,
    )
    with atomic_dir(cfg.out) as out:
        write_json(out / "preflight.json", {**facts, "passed": True})
        write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(PreflightConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (PreflightError, FileNotFoundError) as e:
        print(f"preflight: {e}", file=sys.stderr)
        return 1
    print(
        f"preflight passed: {result.architecture} ({result.parameters_billion}B parameters), tokenizer and chat "
        f"template ready for llama.cpp; {'fits' if result.arm64_ok else 'too big for'} the arm64 Ray workers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
