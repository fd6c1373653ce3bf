"""Training speed levers, by their logic: the compute precision chosen from what the CPU runs natively, and the MFU a
`gpu` run reports. (That bf16 autocast trains the same adapter as float32 is tests/test_train.py's, integration.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from steps.train import gpu, precision

# The flags lines of three real CPUs' /proc/cpuinfo, cut to the features that matter here.
ZEN1 = "fpu sse sse2 avx avx2 fma f16c bmi2 sha_ni"  # AMD EPYC 7001: AVX2 only (this project's CI-sized machine)
SAPPHIRE_RAPIDS = "avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"
ZEN4 = "avx2 avx512f avx512bw avx512_vnni avx512_bf16"


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    block = f"processor\t: {{n}}\nvendor_id\t: X\nflags\t\t: {flags}\nbogomips\t: 4000\n\n"
    path.write_text(block.format(n=0) + block.format(n=1))
    return path


@pytest.mark.parametrize(
    ("flags", "capability", "chosen"),
    [
        (ZEN1, "AVX2", "fp32"),
        (SAPPHIRE_RAPIDS, "AVX512", "bf16"),
        (ZEN4, "AVX512", "bf16"),
        ("avx2 avx512f", "AVX512", "fp32"),  # AVX-512 without its BF16 extension: bf16 would be emulated
        ("", "AMX", "bf16"),  # flags unreadable (no /proc) but torch dispatches to AMX kernels
    ],
)
def test_auto_takes_bf16_only_where_the_cpu_runs_it_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str, capability: str, chosen: str
):
    monkeypatch.delenv(precision.AUTO_ENV, raising=False)  # the suite may be forcing a path: this test is the CPU's
    found = precision.cpu_flags(_cpuinfo(tmp_path, flags)) if flags else set()
    chosen_here = precision.choose("auto", "cpu", found, capability)
    assert chosen_here.name == chosen and chosen_here.autocast == (chosen == "bf16")
    assert chosen_here.reason.startswith("auto: ")


def test_a_forced_precision_wins_and_cuda_is_always_bf16():
    assert precision.choose("fp32", "cpu", set(SAPPHIRE_RAPIDS.split()), "AMX").name == "fp32"
    assert precision.choose("bf16", "cpu", set(ZEN1.split()), "AVX2").name == "bf16"
    assert precision.choose("auto", "cuda", set(), "AVX2").name == "bf16"
    with pytest.raises(ValueError, match="--precision 'fp16' is not one of auto, fp32, bf16"):
        precision.choose("fp16", "cpu", set(), "AVX2")


@pytest.mark.parametrize("forced", ["fp32", "bf16"])
def test_the_environment_forces_what_auto_picks_whatever_the_cpu(monkeypatch: pytest.MonkeyPatch, forced: str):
    monkeypatch.setenv(precision.AUTO_ENV, forced)
    for flags, capability in ((ZEN1, "AVX2"), (SAPPHIRE_RAPIDS, "AMX")):
        chosen = precision.choose("auto", "cpu", set(flags.split()), capability)
        assert (chosen.name, chosen.reason) == (forced, f"auto: $DISTILLERY_AUTO_PRECISION={forced}")
    assert precision.choose("fp32", "cpu", set(ZEN4.split()), "AVX512").name == "fp32"  # an explicit flag still wins
    assert precision.choose("auto", "cuda", set(), "AVX2").name == "bf16"  # the GPU path is bf16 whatever


def test_a_bad_forced_precision_is_named_before_training(monkeypatch: pytest.MonkeyPatch):
    from steps.train.config import TrainConfig, config_problems

    monkeypatch.setenv(precision.AUTO_ENV, "fp16")
    expected = "$DISTILLERY_AUTO_PRECISION='fp16': use fp32 or bf16, or unset it to let the CPU decide"
    assert expected in config_problems(TrainConfig(dataset="d", out="o"))
    assert expected not in config_problems(TrainConfig(dataset="d", out="o", precision="fp32"))
    with pytest.raises(ValueError, match="use fp32 or bf16"):
        precision.choose("auto", "cpu", set(), "AVX2")


def test_cpu_flags_without_proc_cpuinfo_is_empty(tmp_path: Path):
    assert precision.cpu_flags(tmp_path / "absent") == set()
    assert precision.cpu_flags(_cpuinfo(tmp_path, ZEN4)) == set(ZEN4.split())


def test_mfu_counts_4n_flops_per_token_against_the_cards_dense_bf16_peak():
    # issue #16's figure: 5,314 tokens/s for a 1.2B Llama on an H200 is about 2.6 % of 989 TFLOP/s
    assert gpu.mfu(5314, 1_200_000_000, "NVIDIA H200") == pytest.approx(4 * 1.2e9 * 5314 / 989.4e12)
    assert 0.025 < gpu.mfu(5314, 1_200_000_000, "NVIDIA H200") < 0.027
    assert gpu.peak_tflops("NVIDIA H100 PCIe") == 756.0 and gpu.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert gpu.mfu(5314, 1_200_000_000, "Tesla T4") == 0.0  # not in the table: no guess


def test_base_parameters_skip_lora_and_count_4bit_weights_unpacked():
    import torch

    class QuantState:  # what bitsandbytes hangs on a Params4bit: the weight's shape before packing
        shape = torch.Size([64, 32])

    model = torch.nn.Module()
    model.base = torch.nn.Linear(32, 16, bias=False)  # 512
    model.lora_A = torch.nn.Linear(32, 4, bias=False)  # LoRA: not the base
    packed = torch.nn.Parameter(torch.zeros(1024, 1, dtype=torch.uint8), requires_grad=False)  # 2048 4-bit values
    packed.quant_state = QuantState()
    model.register_parameter("packed", packed)
    assert gpu.base_parameters(model) == 512 + 64 * 32
