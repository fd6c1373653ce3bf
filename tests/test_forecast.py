"""steps/sizing/forecast.py: training's wall time and cost before the run, from measured rates scaled by parameters
and threads; preflight's refusal past the deadline; register's forecast-beside-actual tags."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from steps import sizing
from steps.sizing.seeds import shape
from tests.test_sizing import SMALL, THREE_B, knobs, plan

PRICES = {"cpu": 0.20, "gpu": 1.10, "ray": 0.20}


def test_the_model_returns_the_measured_rates_on_the_base_and_cores_they_were_measured_on():
    small = shape(SMALL).parameters
    assert sizing.forecast.cpu_rate(small, "bf16", 2) == pytest.approx(231)  # Zen 4, 2 cores (TOOLCHAIN.md)
    assert sizing.forecast.cpu_rate(small, "fp32", 2) == pytest.approx(77)  # AVX2, 2 cores
    for base, rate in sizing.forecast.GPU_MEASURED.items():  # on the card they were measured on, as measured
        assert sizing.forecast.gpu_rate(shape(base).parameters, False, "NVIDIA H200") == pytest.approx(rate)


GPU_RESULTS = Path(__file__).resolve().parent.parent / sizing.forecast.GPU_MEASUREMENT


def test_the_gpu_rates_are_the_committed_measurement_at_the_a10g_plan_s_micro_batches():
    """GPU_MEASURED is run3-gpu/gpu.json's tokens_per_second, each row run at the way the A10G plan picks."""
    rows = json.loads(GPU_RESULTS.read_text())
    by_shape = {shape(name).parameters: name for name in sizing.forecast.GPU_MEASURED}
    measured = {by_shape[r["parameters"]]: round(r["tokens_per_second"], 1) for r in rows}
    assert measured == sizing.forecast.GPU_MEASURED
    for r in rows:
        base = by_shape[r["parameters"]]
        assert r["card"] == "NVIDIA A10G" and r["max_seq_len"] == 512 and r["batch_size"] == 16 and not r["oom"]
        assert r["micro"] == str(plan(base, knobs("gpu")).micro["train-gpu"])


def test_a_pool_card_s_rate_is_an_estimate_scaled_from_the_measured_card_never_its_figure():
    n = shape(THREE_B).parameters
    rows = {card: (rate, how) for card, rate, how in sizing.forecast.gpu_card_rates(n)}
    assert rows["NVIDIA H200"] == (pytest.approx(5371.5), "measured")
    # the smaller of the two datasheet ratios: A10G (no published tensor figure) and L4 by bandwidth, L40S too
    expected = {"NVIDIA A10G": 600 / 4800, "NVIDIA L4": min(121.0 / 989.4, 300 / 4800), "NVIDIA L40S": 864 / 4800}
    for card, ratio in expected.items():
        rate, how = rows[card]
        assert rate == pytest.approx(5371.5 * ratio) and rate < 5371.5 / 5
        assert how.startswith("estimated: NVIDIA H200's rate x") and "GB/s" in how
    qlora = {card: rate for card, rate, _ in sizing.forecast.gpu_card_rates(n, qlora=True)}
    assert qlora["NVIDIA A10G"] == pytest.approx(rows["NVIDIA A10G"][0] * 2365 / 2586)


def test_between_the_measured_bases_the_gpu_rate_is_interpolated_and_says_so():
    one, three = shape("Llama-3.2-1B").parameters, shape(THREE_B).parameters
    mid = int((one * three) ** 0.5)
    rate = sizing.forecast.gpu_rate(mid, False, "NVIDIA H200")
    flops = [sizing.forecast.GPU_MEASURED[b] * shape(b).parameters for b in ("Llama-3.2-1B", THREE_B)]
    assert rate * mid == pytest.approx(sum(flops) / 2)  # halfway in log(parameters)
    [(_, _, how)] = [r for r in sizing.forecast.gpu_card_rates(mid) if r[0] == "NVIDIA H200"]
    assert how.startswith("interpolated")


def test_a_gpu_forecast_takes_the_slowest_card_the_pod_may_land_on_and_labels_it_an_estimate():
    p = plan(THREE_B, knobs("gpu"))  # a 24 GB card holds it: A10G (g5) or L4 (g6), whichever Karpenter finds
    f = sizing.plan_forecast(p, 1_000_000, PRICES)
    l4 = sizing.forecast.gpu_rate(p.shape.parameters, False, "NVIDIA L4")
    assert f.tokens_per_second == pytest.approx(l4) and l4 < sizing.forecast.gpu_rate(p.shape.parameters, False,
                                                                                     "NVIDIA A10G")  # fmt: skip
    assert "NVIDIA L4" in f.how and "estimated" in f.how and sizing.forecast.GPU_MEASUREMENT in f.how


def test_tokens_per_second_scale_as_one_over_parameters_and_with_threads_and_workers():
    n = shape(THREE_B).parameters
    assert sizing.forecast.cpu_rate(n / 2, "fp32", 4) == pytest.approx(2 * sizing.forecast.cpu_rate(n, "fp32", 4))
    assert sizing.forecast.cpu_rate(n, "bf16", 8) == pytest.approx(2 * sizing.forecast.cpu_rate(n, "bf16", 4))
    assert sizing.forecast.ray_rate(n, "bf16", 4, 4, 16) == pytest.approx(4 * sizing.forecast.cpu_rate(n, "bf16", 4))
    # 16 examples over 3 workers: shares of 6, 5, 5; every step waits for the 6
    assert sizing.forecast.ray_rate(n, "bf16", 4, 3, 16) == pytest.approx(
        3 * sizing.forecast.cpu_rate(n, "bf16", 4) * (16 / 3) / 6
    )


def test_training_tokens_are_each_example_capped_at_max_seq_len_every_epoch():
    assert sizing.train_tokens([100, 600, 512], 512, 2.0) == 2 * (100 + 512 + 512)
    assert sizing.train_tokens([100, 101], 512, 0.5) == 101  # rounded up


def test_a_3b_ray_forecast_uses_every_default_worker_at_the_plan_s_threads_and_precision():
    p = plan(THREE_B, knobs("ray"))
    f = sizing.plan_forecast(p, 1_000_000, PRICES)
    workers = sum(g.group.default_replicas * g.workers_per_pod for g in p.ray)
    assert workers == 3 and p.ray_threads == 4 and p.ray_precision == "bf16"
    assert f.tokens_per_second == pytest.approx(sizing.forecast.ray_rate(p.shape.parameters, "bf16", 4, 3, 16))
    assert f.seconds == pytest.approx(1_000_000 / f.tokens_per_second)
    assert f.usd == pytest.approx(f.seconds / 3600 * PRICES["ray"])
    assert "3 workers" in f.how and "4 threads" in f.how and "bf16" in str(f)


def test_a_run_forecast_past_the_deadline_is_refused_with_what_would_fit():
    p = plan(THREE_B, knobs("ray"))
    rate = sizing.plan_forecast(p, 1, PRICES).tokens_per_second
    within = sizing.plan_forecast(p, int(rate * sizing.DEADLINE_S * 0.9), PRICES)
    assert sizing.check_forecast(p, within, PRICES) == []
    past = sizing.plan_forecast(p, int(rate * sizing.DEADLINE_S * 2), PRICES)
    [problem] = sizing.check_forecast(p, past, PRICES)
    assert THREE_B in problem and "8 h deadline" in problem and "16.0 h" in problem
    assert (
        "at most 50% of them" in problem and "train-backend gpu (forecast" in problem and "on an NVIDIA L4" in problem
    )
    assert "6 Ray workers or more" in problem  # twice the 3 default workers
    gpu = plan(THREE_B, knobs("gpu"))
    assert "train-backend gpu" not in " ".join(sizing.check_forecast(gpu, replace(past, seconds=1e9), PRICES))


def test_a_backend_without_a_price_is_named():
    p = plan(SMALL, knobs("ray"))
    f = sizing.plan_forecast(p, 1000, {"cpu": 0.2})
    assert f.usd == 0.0
    assert sizing.check_forecast(p, f, {"cpu": 0.2}) == ["--price-table has no price for ray: add ray=<$ per hour>"]


def test_a_plan_nothing_can_train_has_an_infinite_forecast_and_no_second_refusal():
    p = plan("Llama-3.1-8B", knobs("ray", precision="fp32"))  # check() refuses it: no group holds a worker
    f = sizing.plan_forecast(p, 1000, PRICES)
    assert math.isinf(f.seconds) and sizing.check_forecast(p, f, PRICES) == []


def test_register_tags_the_forecast_beside_the_real_training_time(tmp_path: Path):
    from steps import register

    (tmp_path / "preflight").mkdir()
    (tmp_path / "adapter").mkdir()
    record = sizing.plan_forecast(plan(SMALL, knobs("cpu")), 30_000, PRICES).record()
    (tmp_path / "preflight/preflight.json").write_text(json.dumps({"forecast": record}))
    # the loop took twice the forecast; the step, loading the base too, three times: the ratio is the loop's
    took = {"train_seconds": 2 * record["seconds"], "wall_seconds": 3 * record["seconds"]}
    (tmp_path / "adapter/result.json").write_text(json.dumps(took))
    cfg = register.RegisterConfig(dataset=tmp_path, adapter=tmp_path / "adapter", gguf=tmp_path, evaluation=tmp_path,
                                  out=tmp_path / "out", preflight=str(tmp_path / "preflight"))  # fmt: skip
    tags = register.forecast_tags(cfg)
    assert tags["train.forecast_seconds"] == f"{record['seconds']:.1f}"
    assert tags["train.actual_over_forecast"] == "2.000"
    assert tags["train.wall_seconds"] == f"{3 * record['seconds']:.1f}"
    assert register.forecast_tags(replace(cfg, preflight="")) == {}
    # a forecast recorded as 0.0 s (a few tokens): the times are tagged, no ratio (it divided by zero in the doc walk)
    (tmp_path / "preflight/preflight.json").write_text(json.dumps({"forecast": record | {"seconds": 0.0}}))
    tags = register.forecast_tags(cfg)
    assert "train.actual_over_forecast" not in tags and tags["train.forecast_seconds"] == "0.0"
