"""steps/common.py: the pieces every step shares."""

from __future__ import annotations

import pytest

from steps.common import number_table


def test_a_number_table_reads_names_and_numbers():
    assert number_table(" cpu=0.20, gpu = 1.10 ,", "--price-table") == {"cpu": 0.2, "gpu": 1.1}


@pytest.mark.parametrize("text", ["cpu", "cpu=", "=1", "cpu=cheap", "cpu=1=2", "cpu=nan", "cpu=inf"])
def test_a_malformed_item_is_named_with_its_flag(text: str):
    with pytest.raises(ValueError) as e:
        number_table(text, "--price-table")
    assert str(e.value).startswith(f"--price-table {text!r}: {text!r} is not NAME=NUMBER")


def test_every_bad_item_is_named_at_once():
    with pytest.raises(ValueError) as e:
        number_table("Q8_0=x,Q4_K_M=0.7,Q4_K_M=0.8,F16", "--max-mean-kl")
    assert "'Q8_0=x' is not NAME=NUMBER" in str(e.value)
    assert "'Q4_K_M' is given twice" in str(e.value)
    assert "'F16' is not NAME=NUMBER" in str(e.value)
