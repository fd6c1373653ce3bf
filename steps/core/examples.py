"""One training example as tokens: the served prompt (the serving contract's chat messages) with the document, then
the summary and the end-of-turn token, the loss on the summary only. Shared because two stages must encode alike:
`train` trains on these ids, and `kd-targets` scores the teacher on exactly them (its top-k lines up with train's
labels only if both encode every row the same way)."""

from __future__ import annotations

from typing import Any

from steps.contract.prompting import messages

# What a cut example keeps after its cut document: the document's last tokens and the chat template's end of turn.
KEEP_TAIL = 16


def _parts(tokenizer: Any, document: str, summary: str) -> tuple[list[int], list[int]]:
    """(prompt ids: the served prompt, document included; answer ids: the summary and the end-of-turn token)."""
    prompt = tokenizer.apply_chat_template(messages(document), add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(summary.strip() + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    return prompt_ids, answer_ids


def encode_example(tokenizer: Any, document: str, summary: str, max_seq_len: int) -> dict[str, list[int]]:
    """Token ids and labels for one example: prompt tokens are masked out (-100), the summary and end-of-turn kept.

    An example longer than `max_seq_len` has its document cut from the middle (the instructions' head and the turn's
    end kept; `length_report` counts these); one whose summary leaves no room for any of its document is refused."""
    prompt_ids, answer_ids = _parts(tokenizer, document, summary)
    overflow = len(prompt_ids) + len(answer_ids) - max_seq_len
    if overflow > 0:
        frame = len(_parts(tokenizer, "", summary)[0])  # the prompt around an empty document
        if frame + len(answer_ids) >= max_seq_len:
            raise ValueError(
                f"its summary ({len(answer_ids)} tokens with the end of turn) and the prompt around the document "
                f"({frame} tokens) leave no room for the document in --max-seq-len {max_seq_len}; raise --max-seq-len "
                f"to {len(prompt_ids) + len(answer_ids)} (the whole example), or shorten the summary"
            )
        keep_tail = min(KEEP_TAIL, len(prompt_ids) - overflow)
        prompt_ids = prompt_ids[: len(prompt_ids) - keep_tail - overflow] + prompt_ids[len(prompt_ids) - keep_tail :]
    return {"input_ids": prompt_ids + answer_ids, "labels": [-100] * len(prompt_ids) + answer_ids}


def _per_row(rows: list[dict], make: Any, indices: list[int] | None = None) -> list[Any]:
    """`make(row)` for the rows at `indices` (every row by default), in order; a row it refuses is named."""
    made = []
    for i in range(len(rows)) if indices is None else indices:
        try:
            made.append(make(rows[i]))
        except ValueError as e:
            raise ValueError(f"training row {rows[i].get('id', i)!r} (row {i + 1} of the train split): {e}") from None
    return made


def encode_rows(tokenizer: Any, rows: list[dict], max_seq_len: int) -> list[dict[str, list[int]]]:
    """The training split's rows as `encode_example`s, in order; a row that cannot be encoded is named."""
    return _per_row(rows, lambda row: encode_example(tokenizer, row["document"], row["summary"], max_seq_len))


def length_report(tokenizer: Any, rows: list[dict], max_seq_len: int) -> dict[str, int]:
    """How the training split fits `max_seq_len`: examples, how many have their document cut, and the longest
    example's tokens (the --max-seq-len that keeps every document whole). Refuses, naming it, a row that cannot fit
    at all, before any model is loaded."""
    lengths = [sum(map(len, _parts(tokenizer, row["document"], row["summary"]))) for row in rows]
    cut = [i for i, n in enumerate(lengths) if n > max_seq_len]
    _per_row(rows, lambda row: encode_example(tokenizer, row["document"], row["summary"], max_seq_len), cut)
    return {"examples": len(rows), "examples_cut": len(cut), "longest_example_tokens": max(lengths, default=0)}
