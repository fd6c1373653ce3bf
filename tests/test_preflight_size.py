"""preflight's size check: the parameter count from the config alone (meta device), and the arm64 (Pi) gate."""

from __future__ import annotations

import pytest

from steps import preflight
from tests.conftest import BASE_MODEL


def llama_config(hidden: int, intermediate: int, layers: int, heads: int, vocab: int, tied: bool):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, vocab_size=vocab, tie_word_embeddings=tied,
    )  # fmt: skip


def test_count_matches_the_closed_form_of_a_llama():
    hidden, inter, layers, vocab = 64, 128, 2, 1000
    per_layer = 4 * hidden * hidden + 3 * hidden * inter + 2 * hidden  # attention, MLP, two RMSNorms
    expected = vocab * hidden + layers * per_layer + hidden  # embeddings (tied with the head), final norm
    assert preflight.count_parameters(llama_config(hidden, inter, layers, 4, vocab, tied=True)) == expected
    untied = preflight.count_parameters(llama_config(hidden, inter, layers, 4, vocab, tied=False))
    assert untied == expected + vocab * hidden


def test_a_7b_model_is_counted_without_allocating_it_and_is_too_big_for_the_pis():
    count = preflight.count_parameters(llama_config(4096, 11008, 32, 32, 32000, tied=False))  # Llama-2-7B's shape
    assert 6.7e9 < count < 6.8e9
    assert not preflight.fits_arm64(count)


@pytest.mark.parametrize(("billion", "fits"), [(0.135, True), (3.0, True), (3.2, False), (8.0, False)])
def test_the_arm64_gate_is_three_billion_parameters(billion: float, fits: bool):
    assert preflight.fits_arm64(int(billion * 1e9)) is fits


@pytest.mark.skipif(not (BASE_MODEL / "config.json").is_file(), reason=f"no base model at {BASE_MODEL}")
def test_the_default_base_model_fits_the_pis():
    from transformers import AutoConfig

    count = preflight.count_parameters(AutoConfig.from_pretrained(BASE_MODEL))
    assert 130e6 < count < 140e6 and preflight.fits_arm64(count)  # SmolLM2-135M
