"""HF-vs-GGUF parity: is a GGUF file, run by llama.cpp, the same model as the HF model it came from?

On fixed probes in the serving chat template (plain, Unicode, whitespace, numbers, a long document): the HF model's
greedy continuations and next-token log-probabilities (`hf_reference`), then the GGUF's token ids, greedy output,
teacher-forced top-1 agreement, KL divergence and EOS rate against them (`compare`); `merge_check` compares the
adapter-attached model with the merged one. convert-gguf (steps/convert_gguf.py) judges these figures against its
thresholds; its base-conversion cache key holds the probes as asked here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steps.prompting import messages
from steps.sizing import CONVERT_N_CTX
from steps.tokenizer_parity import TOKENIZER_PROBES, same_tokens

LONG_DOCUMENT = " ".join(
    f"Section {i}: the Marlow water board recorded {i * 37 % 91} leaks in district {i} during week {i + 3}, "
    f"and crews repaired {i * 29 % 83} of them within two days."
    for i in range(1, 25)
)
PROBE_DOCUMENTS = (
    "The Harlow Street library will close for three weeks from 4 June while its roof is replaced; "
    "the mobile library will stop outside the school on Tuesdays and Fridays.",
    "Q3 revenue at Fenwick Tools rose 12% to €48.5 million (up from €43.3m), driven by cordless drills; "
    "margins fell 1.8 points after steel prices increased 7% in 2026-Q2. Guidance: 190–195m.",
    "Ünïcödé test — naïve café owners in Zürich said: «prices up 3½ %»; 日本語も少し。 Emoji: 🚲✅",
    "Whitespace:\ttabs\tbetween words,  double  spaces,\n\n\nblank lines,   and trailing spaces   \n  indented line",
    LONG_DOCUMENT,
)


def probe_messages() -> list[list[dict[str, str]]]:
    """The probes as the models are asked them: each document in the serving prompt (steps/prompting.py)."""
    return [messages(document) for document in PROBE_DOCUMENTS]


def hf_reference(model: Any, tokenizer: Any, n_tokens: int) -> list[dict[str, Any]]:
    """Greedy continuations and next-token log-probabilities of the HF model on the fixed probes."""
    import torch

    refs = []
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    for chat in probe_messages():
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        inputs = torch.tensor([prompt_ids])
        with torch.no_grad():
            # The logits of each generated position come with the generation (no second pass over the prompt).
            generated = model.generate(
                inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=n_tokens,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
                return_dict_in_generate=True,
                output_logits=True,
            )
            continuation = generated.sequences[0, len(prompt_ids) :].tolist()
            logits = torch.stack([step[0] for step in generated.logits])
        refs.append(
            {
                "prompt": prompt,
                "prompt_ids": prompt_ids,
                "continuation": continuation,
                "ended_with_eos": bool(continuation) and continuation[-1] == eos,
                "logits": logits.float().numpy(),
            }
        )
    return refs


def _log_softmax(x: Any) -> Any:
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def merge_check(merged: Any, refs: list[dict[str, Any]]) -> float:
    """Largest |logit| difference between the adapter-attached model (refs) and the merged model on the probes."""
    import numpy as np
    import torch

    worst = 0.0
    for ref in refs:
        ids = torch.tensor([ref["prompt_ids"] + ref["continuation"]])
        start = len(ref["prompt_ids"]) - 1
        with torch.no_grad():
            logits = merged(ids).logits[0, start : start + len(ref["continuation"])].float().numpy()
        worst = max(worst, float(np.abs(logits - ref["logits"]).max()))
    return worst


# Greedy decoding of the same model in two runtimes may part at a near-tie: HF's two best logits within this margin.
# Measured on SmolLM2-135M (F16 GGUF vs float32 HF): one probe of five parts at a 0.0005 margin, the rest are equal.
TIE_MARGIN = 0.05


def first_divergence(greedy: list[int], cont: list[int], logits: Any) -> dict[str, Any] | None:
    """Where llama.cpp's greedy output leaves HF's, and HF's own logit margin between the two tokens there."""
    for i, (a, b) in enumerate(zip(greedy, cont, strict=False)):
        if a != b:
            margin = float(logits[i][b] - logits[i][a])
            return {"index": i, "hf_token": b, "gguf_token": a, "hf_margin": margin, "near_tie": margin < TIE_MARGIN}
    if len(greedy) != len(cont):
        return {"index": min(len(greedy), len(cont)), "hf_margin": None, "near_tie": False}
    return None


def compare(gguf: Path, refs: list[dict[str, Any]], eos_id: int, threads: int, tokenizer: Any) -> dict:
    """Compare a GGUF loaded by llama.cpp with the HF reference `refs` of the model whose `tokenizer` it carries:
    token ids (the probes' and TOKENIZER_PROBES'), greedy output, top-1 agreement, KL, EOS."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=CONVERT_N_CTX, n_threads=threads, logits_all=True, verbose=False, seed=0)
    probes = []
    agree = total = 0
    kls: list[float] = []
    for ref in refs:
        ids = llm.tokenize(ref["prompt"].encode(), add_bos=False, special=True)
        greedy: list[int] = []
        for token in llm.generate(ref["prompt_ids"], top_k=1, temp=0.0, reset=True):
            greedy.append(token)
            if token == eos_id or len(greedy) >= len(ref["continuation"]):
                break
        cont = ref["continuation"]
        # Teacher-forced pass over HF's continuation: the prompt is still in the KV cache (and its last position's
        # logits in `scores`) from the generation above, so only the continuation is evaluated.
        llm.n_tokens = len(ref["prompt_ids"])
        llm.eval(cont)
        start = len(ref["prompt_ids"]) - 1
        log_q = _log_softmax(llm.scores[start : start + len(cont)])
        log_p = _log_softmax(ref["logits"])
        kls.extend((np.exp(log_p) * (log_p - log_q)).sum(axis=-1).tolist())
        matches = int((log_q.argmax(axis=-1) == log_p.argmax(axis=-1)).sum())
        agree += matches
        total += len(cont)
        divergence = first_divergence(greedy, cont, ref["logits"])
        probes.append(
            {
                "tokens_equal": ids == ref["prompt_ids"],
                "greedy_equal": divergence is None,
                "divergence": divergence,
                "top1_agreement": matches / max(len(cont), 1),
                "ended_with_eos": bool(greedy) and greedy[-1] == eos_id,
            }
        )
    raw_equal = all(same_tokens(llm, tokenizer, t) for t in TOKENIZER_PROBES)
    return {
        "file": gguf.name,
        "tokens_equal": raw_equal and all(p["tokens_equal"] for p in probes),
        "greedy_equal": all(p["greedy_equal"] for p in probes),
        # Equal, or parted only where HF itself was at a near-tie: the same model up to float rounding.
        "greedy_match": all(p["greedy_equal"] or p["divergence"]["near_tie"] for p in probes),
        "top1_agreement": agree / max(total, 1),
        "mean_kl": float(sum(kls) / max(len(kls), 1)),
        "eos_rate": sum(p["ended_with_eos"] for p in probes) / len(probes),
        "hf_eos_rate": sum(r["ended_with_eos"] for r in refs) / len(refs),
        "probes": probes,
    }
