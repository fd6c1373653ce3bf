"""What "the GGUF tokenizes like the base" means, shared by preflight (before converting) and convert-gguf (after):
the probe texts, and the comparison of llama.cpp's tokens with the Hugging Face tokenizer's on one of them.
"""

from __future__ import annotations

from typing import Any

# Texts where tokenizers tend to part ways: accents, CJK, emoji, runs of whitespace, digits, code.
TOKENIZER_PROBES = (
    "Plain English: the council met on Tuesday.",
    "Ünïcödé — naïve café, Zürich «quotes», 日本語のテキスト, emoji 🚀🔥",
    "tabs\tand  double  spaces\n\nnew lines   trailing   ",
    "Numbers: 3.14159, 1,234,567, -42, 2026-11-30, 0x1F, 10^9, €48.5m, 97%",
    "Code: def f(x):\n    return x ** 2  # square",
)


def same_tokens(llm: Any, tokenizer: Any, text: str) -> bool:
    """llama.cpp (`llama_cpp.Llama`) and the Hugging Face tokenizer give `text` the same ids, without BOS/EOS."""
    return (
        llm.tokenize(text.encode(), add_bos=False, special=True)
        == tokenizer(text, add_special_tokens=False)["input_ids"]
    )
