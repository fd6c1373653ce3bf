"""HF-vs-GGUF parity: is a GGUF file, run by llama.cpp, the same model as the HF model it came from?

On fixed probes in the serving chat template (plain, Unicode, whitespace, numbers, a long document): the HF model's
greedy continuations and next-token log-probabilities (`hf_reference`), then the GGUF's token ids, greedy output,
teacher-forced top-1 agreement, KL divergence and EOS rate against them (`compare`); `merge_check` compares the
adapter-attached model with the merged one. On the eval split's own documents, chat-templated as served
(`eval_parity`): teacher-forced top-1 agreement, KL and the rate of stopping right after the summary, per document,
with bootstrap intervals over documents (`intervals`). convert-gguf (steps/convert_gguf/verdict.py) judges these
figures against its thresholds; its base-conversion cache key holds the probes as asked here.

Cost (it runs on every conversion): HF's references are generated for all probes at once in padded batches of similar
lengths; llama.cpp evaluates each probe's prompt and HF's continuation in one teacher-forced pass — the GGUF's greedy
output is HF's continuation up to the first position where its own top-1 differs, so it only generates past such a
position — with logits kept only where they are compared, and one context reused across probes (the shared system
prompt stays in its KV cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steps.contract.prompting import messages
from steps.contract.threads import llama_threads
from steps.gguf.conversion import release_memory
from steps.gguf.settings import CONVERT_N_CTX, PARITY_EVAL_BATCH, parity_n_ctx
from steps.gguf.tokenizer_parity import TOKENIZER_PROBES, same_tokens

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
    """The probes as the models are asked them: each document in the serving prompt (steps/contract/prompting.py)."""
    return [messages(document) for document in PROBE_DOCUMENTS]


def _length_groups(lengths: list[int], waste: float = 1.25) -> list[list[int]]:
    """Indices grouped by similar length (sorted), so that padding a group to its longest adds at most `waste`-1."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = [[]]
    for i in order:
        group = groups[-1]
        if group and lengths[i] * (len(group) + 1) > waste * (sum(lengths[j] for j in group) + lengths[i]):
            groups.append(group := [])
        group.append(i)
    return groups


def hf_reference(model: Any, tokenizer: Any, n_tokens: int) -> list[dict[str, Any]]:
    """Greedy continuations and next-token log-probabilities of the HF model on the fixed probes.

    Probes of similar length are generated together, left-padded (one `generate` per group, not per probe); the
    logits of each generated position come with the generation (no second pass over the prompt)."""
    import torch

    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    chats = probe_messages()
    prompts = [tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) for chat in chats]
    prompt_ids = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    refs: list[dict[str, Any]] = [{} for _ in prompts]
    for group in _length_groups([len(ids) for ids in prompt_ids]):
        width = max(len(prompt_ids[i]) for i in group)
        inputs = torch.tensor([[pad] * (width - len(prompt_ids[i])) + prompt_ids[i] for i in group])
        mask = torch.tensor([[0] * (width - len(prompt_ids[i])) + [1] * len(prompt_ids[i]) for i in group])
        with torch.no_grad():
            generated = model.generate(
                inputs,
                attention_mask=mask,
                max_new_tokens=n_tokens,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=pad,
                return_dict_in_generate=True,
                output_logits=True,
            )
        for row, i in enumerate(group):
            continuation = generated.sequences[row, width:].tolist()
            if eos in continuation:  # a sequence that stopped early is padded after its EOS
                continuation = continuation[: continuation.index(eos) + 1]
            logits = torch.stack([step[row] for step in generated.logits[: len(continuation)]])
            refs[i] = {
                "prompt": prompts[i],
                "prompt_ids": prompt_ids[i],
                "continuation": continuation,
                "ended_with_eos": bool(continuation) and continuation[-1] == eos,
                "logits": logits.float().numpy(),
            }
    return refs


def hf_rows(model: Any, sequences: list[list[int]], firsts: list[int]) -> list[Any]:
    """Per sequence, the HF model's logits at positions `first`..end (row j predicts the token after position
    first+j): batched teacher-forced forwards of similar-length sequences, right-padded (causal attention: padding
    after a sequence never reaches it), with the output layer applied only to the rows asked for."""
    import torch

    decoder, head = model.get_decoder(), model.get_output_embeddings()
    rows: list[Any] = [None] * len(sequences)
    for group in _length_groups([len(s) for s in sequences]):
        for k in range(0, len(group), PARITY_EVAL_BATCH):
            chunk = group[k : k + PARITY_EVAL_BATCH]
            width = max(len(sequences[i]) for i in chunk)
            ids = torch.tensor([sequences[i] + [sequences[i][-1]] * (width - len(sequences[i])) for i in chunk])
            with torch.no_grad():
                hidden = decoder(input_ids=ids).last_hidden_state
                for row, i in enumerate(chunk):
                    rows[i] = head(hidden[row, firsts[i] : len(sequences[i])]).float().numpy()
    return rows


def _log_softmax(x: Any) -> Any:
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def merge_check(merged: Any, refs: list[dict[str, Any]]) -> float:
    """Largest |logit| difference between the adapter-attached model (refs) and the merged model on the probes."""
    import numpy as np

    rows = hf_rows(
        merged, [r["prompt_ids"] + r["continuation"] for r in refs], [len(r["prompt_ids"]) - 1 for r in refs]
    )
    return max(
        float(np.abs(got[: len(r["continuation"])] - r["logits"]).max()) for got, r in zip(rows, refs, strict=True)
    )


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


def open_gguf(gguf: Path, threads: int, n_ctx: int = CONVERT_N_CTX) -> Any:
    """llama.cpp on `gguf` as parity reads it: a context that can keep logits for every position."""
    from llama_cpp import Llama

    release_memory()
    return Llama(model_path=str(gguf), n_ctx=n_ctx, **llama_threads(threads), logits_all=True, verbose=False, seed=0)


def llama_rows(llm: Any, tokens: list[int], first: int) -> Any:
    """llama.cpp's logits at positions `first`..end of `tokens` (row j predicts the token after position first+j), in
    one teacher-forced pass. What the context already holds of `tokens[:first]` (the shared system prompt of the
    previous sequence) is kept in its KV cache, and logits are computed only for the rows asked for."""
    import numpy as np

    held = llm.input_ids[: min(llm.n_tokens, first)]
    keep = int(np.argmin(np.append(held == np.asarray(tokens[: len(held)]), False)))
    llm.n_tokens = keep  # eval drops the KV cache past n_tokens
    # llama-cpp-python 0.3.x reads its private `_logits_all` at each eval: off for the prefix whose logits nobody
    # reads (the output layer on every prompt position costs a fifth of the pass), on for the compared rows. Were the
    # attribute gone, logits_all=True (set when opened) still holds: slower, never wrong.
    if keep < first:
        llm._logits_all = False
        llm.eval(tokens[keep:first])
    llm._logits_all = True
    llm.eval(tokens[first:])
    return np.array(llm.scores[first : len(tokens)])


def compare(gguf: Path, refs: list[dict[str, Any]], eos_id: int, threads: int, tokenizer: Any) -> dict:
    """Compare a GGUF loaded by llama.cpp with the HF reference `refs` of the model whose `tokenizer` it carries:
    token ids (the probes' and TOKENIZER_PROBES'), greedy output, top-1 agreement, KL, EOS."""
    import numpy as np

    llm = open_gguf(gguf, threads)
    probes = []
    agree = total = 0
    kls: list[float] = []
    for ref in refs:
        ids = llm.tokenize(ref["prompt"].encode(), add_bos=False, special=True)
        prompt, cont = ref["prompt_ids"], ref["continuation"]
        # Teacher-forced over HF's continuation: the GGUF's logits at every position HF generated.
        log_q = _log_softmax(llama_rows(llm, prompt + cont, len(prompt) - 1)[: len(cont)])
        log_p = _log_softmax(ref["logits"])
        kls.extend((np.exp(log_p) * (log_p - log_q)).sum(axis=-1).tolist())
        top_q = log_q.argmax(axis=-1)
        matches = int((top_q == log_p.argmax(axis=-1)).sum())
        agree += matches
        total += len(cont)
        # The GGUF's greedy output is HF's continuation up to the first position where its own top-1 is another
        # token; only past that position does it need generating (from the cached prefix), as many tokens as HF's.
        parted = [i for i, token in enumerate(cont) if top_q[i] != token]
        greedy = list(cont)
        if parted:
            greedy = [*cont[: parted[0]], int(top_q[parted[0]])]
            if greedy[-1] != eos_id and len(greedy) < len(cont):
                for token in llm.generate(prompt + greedy, top_k=1, temp=0.0, reset=True):
                    greedy.append(token)
                    if token == eos_id or len(greedy) >= len(cont):
                        break
            llm.n_tokens = 0  # the next probe finds a prefix it knows nothing about past the prompt
        divergence = first_divergence(greedy, cont, ref["logits"])
        probes.append(
            {
                "tokens_equal": ids == prompt,
                "greedy_equal": divergence is None,
                "divergence": divergence,
                "top1_agreement": matches / max(len(cont), 1),
                "ended_with_eos": bool(greedy) and greedy[-1] == eos_id,
            }
        )
    raw_equal = all(same_tokens(llm, tokenizer, t) for t in TOKENIZER_PROBES)
    llm.close()  # the file's pages and the context go now, not whenever the collector finds the object
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


def eval_sequences(tokenizer: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The eval split's documents as served (steps/contract/prompting.py's messages in the model's chat template)
    followed by their reference summaries: what the teacher-forced scoring reads."""
    out = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(messages(row["document"]), add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        summary_ids = tokenizer(row["summary"].strip(), add_special_tokens=False)["input_ids"]
        out.append({"id": row["id"], "prompt": prompt, "prompt_ids": prompt_ids, "summary_ids": summary_ids})
    return out


def eval_parity(
    gguf: Path, model: Any, tokenizer: Any, rows: list[dict[str, Any]], eos_id: int, threads: int, progress: Any = None
) -> list[dict[str, Any]]:
    """Per eval document, teacher-forced over its reference summary and the position after it, HF (`model`) vs the
    GGUF: the positions compared, how many agree on the top-1 token, the summed KL(HF || GGUF), whether each model's
    top-1 after the summary is EOS (it would stop there), and whether llama.cpp tokenizes the prompt as HF does.

    One forward per document on each side, no generation: HF batched (`hf_rows`), llama.cpp in one context whose KV
    cache keeps the system prompt across documents."""
    import numpy as np

    sequences = eval_sequences(tokenizer, rows)
    full = [s["prompt_ids"] + s["summary_ids"] for s in sequences]
    firsts = [len(s["prompt_ids"]) - 1 for s in sequences]
    # A served document may be longer than the probes, up to the served context (what sizing.convert_memory sizes).
    limit = parity_n_ctx()
    too_long = [f"{s['id']} ({len(t)} tokens)" for s, t in zip(sequences, full, strict=True) if len(t) > limit]
    if too_long:
        raise ValueError(
            f"eval rows longer than the served context ({limit} tokens, prompt + summary) cannot be served: "
            + ", ".join(too_long)
            + "; shorten them in the dataset (steps.contract.prompting.MAX_DOCUMENT_CHARS bounds a document)"
        )
    llm = open_gguf(gguf, threads, max([CONVERT_N_CTX, *(len(t) for t in full)]))
    docs: list[dict[str, Any]] = []
    hf: list[Any] = []
    for k, (seq, tokens, first) in enumerate(zip(sequences, full, firsts, strict=True)):
        if k % PARITY_EVAL_BATCH == 0:  # HF's rows a batch at a time: a batch's logits are all that is held
            hf = hf_rows(model, full[k : k + PARITY_EVAL_BATCH], firsts[k : k + PARITY_EVAL_BATCH])
        log_p = _log_softmax(hf[k % PARITY_EVAL_BATCH])
        log_q = _log_softmax(llama_rows(llm, tokens, first))
        top_p, top_q = log_p.argmax(axis=-1), log_q.argmax(axis=-1)
        docs.append(
            {
                "id": seq["id"],
                "tokens_equal": llm.tokenize(seq["prompt"].encode(), add_bos=False, special=True) == seq["prompt_ids"],
                "positions": len(log_p),
                "agree": int((top_p == top_q).sum()),
                "kl_sum": float((np.exp(log_p) * (log_p - log_q)).sum()),
                "hf_eos": bool(top_p[-1] == eos_id),
                "gguf_eos": bool(top_q[-1] == eos_id),
            }
        )
        if progress is not None:
            progress(k + 1, len(sequences))
    llm.close()
    return docs


def intervals(docs: list[dict[str, Any]], confidence: float, resamples: int, seed: int = 0) -> dict[str, Any]:
    """Top-1 agreement, mean KL and the drop in stop rate (HF's minus the GGUF's) over `docs`, each with a two-sided
    `confidence` interval from a bootstrap over documents: documents are the unit sampled, and positions within one
    are correlated (a quantisation that hurts a document hurts many of its positions), so resampling positions would
    give intervals too narrow. Agreement and KL are ratios of sums (every position weighs the same, as in the point
    figure). The GGUF's stop rate also gets an exact Clopper-Pearson interval (documents are independent trials)."""
    import numpy as np
    from scipy.stats import beta

    n = np.array([d["positions"] for d in docs], dtype=float)
    agree = np.array([d["agree"] for d in docs], dtype=float)
    kl = np.array([d["kl_sum"] for d in docs], dtype=float)
    hf_eos = np.array([d["hf_eos"] for d in docs], dtype=float)
    gguf_eos = np.array([d["gguf_eos"] for d in docs], dtype=float)
    pick = np.random.default_rng(seed).integers(0, len(docs), size=(resamples, len(docs)))
    tail = (1 - confidence) / 2

    def figure(point: float, boot: Any) -> dict[str, float]:
        lo, hi = np.quantile(boot, [tail, 1 - tail])
        return {"point": float(point), "low": float(lo), "high": float(hi)}

    stops, total = int(gguf_eos.sum()), len(docs)
    return {
        "documents": total,
        "positions": int(n.sum()),
        "confidence": confidence,
        "resamples": resamples,
        "top1_agreement": figure(agree.sum() / n.sum(), agree[pick].sum(1) / n[pick].sum(1)),
        "mean_kl": figure(kl.sum() / n.sum(), kl[pick].sum(1) / n[pick].sum(1)),
        "eos_rate_drop": figure((hf_eos - gguf_eos).mean(), (hf_eos - gguf_eos)[pick].mean(1)),
        "hf_eos_rate": float(hf_eos.mean()),
        "eos_rate": {
            "point": stops / total,
            "low": float(beta.ppf(tail, stops, total - stops + 1)) if stops else 0.0,
            "high": float(beta.ppf(1 - tail, stops + 1, total - stops)) if stops < total else 1.0,
        },
    }
