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
It also sizes the run from the config alone (`steps/sizing/`): the parameters counted on PyTorch's `meta` device
(shapes only, no memory, no weights), and from them, the training backend, QLoRA, `--max-seq-len`, `--batch-size`,
`--lora-r` and the quantisation ladder, what each heavy step needs (memory, ephemeral storage, GPU memory) and how many
training workers each Ray node group's pods hold; a group that cannot hold one (the Raspberry Pis' 3 GiB, for every
seed base at the cluster's defaults) gets no replicas, and preflight prints which and what would fit it. It refuses,
with the same list, a run whose chosen backend, conversion or evaluation no node of the cluster can hold, saying what
would.
Before the run starts it forecasts training's wall time and cost (`steps/sizing/forecast.py`): the train split of
`--dataset` tokenised with the base's tokenizer (each example capped at `--max-seq-len`), times `--epochs`, over the
throughput the plan gives the chosen backend (the Ray pool at its default replicas, every worker's threads and
precision), priced by `--price-table`; and refuses a run whose training alone is forecast past the workflow's deadline,
naming what would fit. Register later records this forecast beside the real wall time.
Produces `preflight.json` in `--out` (the facts, the whole plan and the forecast), and the output parameters
`architecture`, `parameters-billion`, `forecast-seconds` and `sizing.preflight_exports()`: each heavy step's
podSpecPatch and each Ray group's workers per pod, CPUs and pod memory, and every Ray worker's threads.
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

from steps import sizing
from steps.contract.prompting import messages
from steps.contract.threads import cpu_threads
from steps.core.base_model import base_model_problems
from steps.core.cli import number_table, parse_config, refuse, timed, write_result
from steps.core.dataset import load_split
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, write_json
from steps.gguf.quants import LADDER
from steps.gguf.tokenizer_parity import TOKENIZER_PROBES, same_tokens

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


class PreflightError(ValueError):
    """Every reason the base model cannot become a working GGUF, one per line."""


@dataclass
class PreflightConfig:
    out: Path = field(metadata={"help": "folder to write preflight.json into"})
    base_model: str = field(default=SHARED.base_model, metadata={"help": "HF model id or local folder of the base"})
    base_revision: str = field(
        default=SHARED.base_revision, metadata={"help": "hub revision of the base (ignored for a folder)"}
    )
    converter_dir: str = field(
        default=os.environ.get("DISTILLERY_LLAMA_CPP", ".cache/llama.cpp"),
        metadata={"help": "folder holding llama.cpp's convert_hf_to_gguf.py (scripts/install_llama_cpp.sh)"},
    )
    # The run's settings that size it, with train's and convert-gguf's defaults: SHARED's (steps/core/defaults.py; a
    # stage imports no other stage), the ladder's steps/gguf/quants.py's.
    train_backend: str = field(
        default=SHARED.train_backend, metadata={"help": "where train runs: cpu, gpu or ray (sizes its pods)"}
    )
    qlora: bool = field(default=SHARED.qlora, metadata={"help": "gpu only: train on a 4-bit NF4 base (sizes the GPU)"})
    max_seq_len: int = field(
        default=SHARED.max_seq_len, metadata={"help": "longest tokenised training example (sizes activations)"}
    )
    batch_size: int = field(
        default=SHARED.batch_size, metadata={"help": "examples per optimiser step (bounds the micro-batch)"}
    )
    micro_batch: int = field(
        default=SHARED.micro_batch,
        metadata={"help": "train's examples per forward/backward (0: the largest each pod holds)"},
    )
    gradient_checkpointing: str = field(
        default=SHARED.gradient_checkpointing,
        metadata={"help": "train's gradient checkpointing: auto, on or off (sizes activations)"},
    )
    lora_r: int = field(
        default=SHARED.lora_r, metadata={"help": "LoRA rank (sizes the adapter and its optimiser state)"}
    )
    quantizations: str = field(
        default=",".join(LADDER), metadata={"help": "convert-gguf's quantisation ladder (sizes the GGUF files)"}
    )
    precision: str = field(
        default=SHARED.precision,
        metadata={
            "help": "train's CPU precision: auto, fp32 or bf16 (auto is sized as float32 weights where they fit, "
            "bf16 where only bf16 fits)"
        },
    )
    dataset: str = field(
        default="", metadata={"help": "folder written by fetch-dataset: its train split's tokens give the forecast"}
    )
    epochs: float = field(
        default=SHARED.epochs, metadata={"help": "train's passes over the training split (the forecast)"}
    )
    price_table: str = field(
        default=SHARED.price_table,
        metadata={"help": "price per node hour (cpu, gpu, the whole ray cluster), as register prices the run"},
    )
    threads: int = field(
        default=SHARED.threads,
        metadata={
            "help": "the run's CPU threads of train, convert-gguf and evaluate (0: not set); when set, their pods "
            "request that many CPUs (the podSpecPatch) and the forecast trains with them"
        },
    )


@dataclass
class PreflightResult:
    architecture: str
    parameters_billion: float  # the base model's parameter count, in billions (3 decimals)
    passed: bool
    forecast_seconds: float = 0.0  # training's forecast wall time (0: no dataset to count)
    forecast: str = ""  # the forecast in words (printed, not an output parameter)
    sizing: dict[str, str | int] = field(default_factory=dict)  # every sizing.preflight_exports() output, by name
    notes: list[str] = field(default_factory=list)  # what the plan leaves out and why (printed, not an output)

    def fields(self) -> dict[str, Any]:
        """result.json's fields; write_result makes each an output parameter ('_' -> '-')."""
        sized = {name.replace("-", "_"): value for name, value in self.sizing.items()}
        return {"architecture": self.architecture, "parameters_billion": self.parameters_billion, "passed": self.passed,
                "forecast_seconds": self.forecast_seconds, **sized}  # fmt: skip


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


def train_tokens(tokenizer: Any, dataset: Path, max_seq_len: int, epochs: float) -> int:
    """The tokens training computes on `dataset`'s train split: each example as train encodes it (the served chat
    prompt with its document, the summary and the end of turn), capped at max-seq-len, every epoch."""
    lengths = []
    for row in load_split(dataset, "train"):
        prompt = tokenizer.apply_chat_template(messages(row["document"]), add_generation_prompt=True, tokenize=False)
        text = prompt + row["summary"].strip() + tokenizer.eos_token
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return sizing.train_tokens(lengths, max_seq_len, epochs)


def config_problems(cfg: PreflightConfig) -> list[str]:
    """Everything wrong with the settings alone (also run by check-parameters): the sizing settings' ranges, which
    are train's own (`sizing.knob_problems`), the price table."""
    problems = sizing.knob_problems(cfg)
    try:
        number_table(cfg.price_table, "--price-table")
    except ValueError as e:
        problems.append(str(e))
    return problems


def check(cfg: PreflightConfig) -> tuple[list[str], dict[str, Any]]:
    """Run every check on a config `run` accepted; returns (problems, facts). No problem → the base can be trained
    and converted."""
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
            facts["parameters"] = sizing.count_parameters(config)
        except (ValueError, KeyError) as e:  # transformers' "Unrecognized configuration class …"
            problems.append(f"transformers cannot build a causal LM from this config ({e}); training would fail")
        else:
            try:
                plan = sizing.plan(
                    config,
                    backend=cfg.train_backend,
                    qlora=cfg.qlora,
                    max_seq_len=cfg.max_seq_len,
                    batch_size=cfg.batch_size,
                    lora_r=cfg.lora_r,
                    quantizations=cfg.quantizations,
                    precision=cfg.precision,
                    micro_batch=cfg.micro_batch,
                    gradient_checkpointing=cfg.gradient_checkpointing,
                    parameters=facts["parameters"],
                    base_model=cfg.base_model,
                    threads=cfg.threads,
                )
            except AttributeError as e:  # not a Llama-style decoder config (hidden_size, intermediate_size, ...)
                problems.append(
                    f"the config is not a Llama-style decoder's ({e}): steps/sizing/ cannot size it and train's "
                    "LoRA targets (q_proj ... down_proj) would not match; pick a Llama, Qwen2, Mistral or Phi-3 base"
                )
            else:
                facts["sizing"] = {**plan.summary(), "outputs": plan.outputs(), "notes": sizing.ray_notes(plan)}
                problems += sizing.check(plan)
                if cfg.dataset:
                    tokens = train_tokens(tokenizer, Path(cfg.dataset), cfg.max_seq_len, cfg.epochs)
                    prices = number_table(cfg.price_table, "--price-table")
                    # the run's threads; else train-cpu's pod CPUs, or the threads train would compute with here
                    # where fewer (the embedded run trains here: its affinity, cgroup quota and $DISTILLERY_CPUS, as
                    # train counts them)
                    threads = cfg.threads or min(sizing.TRAIN_CPU_CPUS, cpu_threads())
                    forecast = sizing.plan_forecast(plan, tokens, prices, cpu_threads=threads)
                    facts["forecast"] = {**forecast.record(), "text": str(forecast)}
                    problems += sizing.check_forecast(plan, forecast, prices)
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
            mismatched = [text[:30] for text in TOKENIZER_PROBES if not same_tokens(llm, tokenizer, text)]
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


@timed
def run(cfg: PreflightConfig) -> PreflightResult:
    refuse(config_problems(cfg) + base_model_problems(cfg.base_model), "preflight", PreflightError)
    problems, facts = check(cfg)
    if problems:
        raise PreflightError(
            f"base model {cfg.base_model} ({facts.get('architecture', '?')}) fails preflight:\n  "
            + "\n  ".join(problems)
        )
    result = PreflightResult(
        architecture=facts["architecture"],
        parameters_billion=round(facts["parameters"] / 1e9, 3),
        passed=True,
        forecast_seconds=facts.get("forecast", {}).get("seconds", 0.0),
        forecast=facts.get("forecast", {}).get("text", ""),
        sizing=facts["sizing"]["outputs"],
        notes=facts["sizing"]["notes"],
    )
    with atomic_dir(cfg.out) as out:
        write_json(out / "preflight.json", {**facts, "passed": True})
        write_result(out, result.fields())
    return result


def _sizing_line(cfg: PreflightConfig, result: PreflightResult) -> str:
    step = f"train-{cfg.train_backend}"
    if cfg.train_backend == "ray":
        per_pod = ", ".join(
            f"{g.name} {result.sizing[sizing.ray_workers_output(g.name)]}" for g in sizing.RAY_NODE_GROUPS
        )
        return f"Ray training workers per pod: {per_pod}"
    number = {n: result.sizing.get(sizing.size_output(step, n)) for n in sizing.size_inputs(step)}
    if None in number.values():  # a backend train will refuse by name
        return f"no pod sized for train-backend {cfg.train_backend!r}"
    line = f"{step} requests {number[sizing.MEMORY_INPUT]}Gi memory, {number[sizing.DISK_INPUT]}Gi disk"
    if sizing.GPU_OVER_INPUT in number:
        line += f", a GPU of more than {number[sizing.GPU_OVER_INPUT]} MiB"
    return line


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(PreflightConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (PreflightError, FileNotFoundError) as e:
        print(f"preflight: {e}", file=sys.stderr)
        return 1
    print(
        f"preflight passed: {result.architecture} ({result.parameters_billion}B parameters), tokenizer and chat "
        f"template ready for llama.cpp; {_sizing_line(cfg, result)}"
    )
    for note in result.notes:
        print(f"preflight: {note}")
    if result.forecast:
        print(f"preflight: {result.forecast}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
