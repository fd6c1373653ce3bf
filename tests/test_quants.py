"""The quantisation table (steps/gguf/quants.py) is llama.cpp's: each row's file type is the one llama-cpp-python
names for it, every type a ladder may hold has its parity thresholds, and the pipeline's defaults are types it offers.

    pytest tests/test_quants.py
"""

from __future__ import annotations

import pytest

from steps.gguf import quants


@pytest.mark.parametrize("quant", quants.TABLE, ids=lambda q: q.name)
def test_each_row_s_file_type_is_the_one_llama_cpp_names_for_it(quant: quants.Quant):
    import llama_cpp

    assert quant.ftype == getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant.name}")


def test_every_quantisation_a_ladder_may_hold_has_its_thresholds_and_f16_none():
    for name in quants.QUANTIZATIONS:
        q = quants.QUANTS[name]
        assert 0 < q.min_top1 <= 1 and q.max_kl > 0, name
    assert "F16" not in quants.QUANTIZATIONS


def test_a_k_quant_row_has_llama_cpp_s_super_block_and_others_do_not():
    for q in quants.TABLE:
        assert (q.block == 256) == q.k_quant, q.name


def test_the_defaults_are_offered_and_the_served_one_is_on_the_ladder():
    assert quants.SERVED in quants.LADDER and set(quants.LADDER) <= set(quants.QUANTIZATIONS)


@pytest.mark.parametrize("field", ["min_top1", "max_kl"])
def test_the_threshold_flags_default_to_the_table(field: str):
    from steps.core.cli import number_table

    table = {name: getattr(quants.QUANTS[name], field) for name in quants.QUANTIZATIONS}
    assert number_table(quants.thresholds(field), "--flag") == table
