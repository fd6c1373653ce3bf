"""steps/core/cli.py and steps/contract/threads.py: the command line and the thread count every step shares."""

from __future__ import annotations

import argparse

import pytest

from steps.core.cli import number_table


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


# --- cpu_threads: how many threads a step computes with when --threads is 0 -------------------------------------------


def _cgroup(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def test_an_explicit_thread_count_wins(tmp_path, monkeypatch):
    from steps.contract.threads import CPUS_ENV, cpu_threads

    monkeypatch.setenv(CPUS_ENV, "1")
    assert cpu_threads(7, _cgroup(tmp_path, {"cpu.max": "100000 100000\n"})) == 7


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "max 100000\n"}, None),  # cgroup v2, no limit
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # cgroup v1, no limit
        ({"cpu,cpuacct/cpu.cfs_quota_us": "100000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 1),
        ({}, None),  # no cgroup files at all
    ],
)
def test_the_cgroup_quota_caps_the_threads(tmp_path, monkeypatch, files, quota):
    from steps.contract.threads import CPUS_ENV, cpu_threads

    monkeypatch.delenv(CPUS_ENV, raising=False)
    expected = _cores() if quota is None else min(quota, _cores())
    assert cpu_threads(0, _cgroup(tmp_path, files)) == expected


def test_the_pods_cpu_request_caps_the_threads(tmp_path, monkeypatch):
    """A pod without a CPU limit sees every core of its node: the request the Argo templates pass decides."""
    from steps.contract.threads import CPUS_ENV, cpu_threads

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)))  # a 64-core node
    monkeypatch.setenv(CPUS_ENV, "4")
    assert cpu_threads(0, tmp_path) == 4
    monkeypatch.setenv(CPUS_ENV, "0")  # the container asked for no CPU: the node's cores
    assert cpu_threads(0, tmp_path) == 64
    monkeypatch.delenv(CPUS_ENV)
    assert cpu_threads(0, _cgroup(tmp_path, {"cpu.max": "800000 100000"})) == 8


@pytest.mark.parametrize("text", ["four", "1.5", "-2"])
def test_a_malformed_cpu_request_is_named(tmp_path, monkeypatch, text):
    from steps.contract.threads import CPUS_ENV, cpu_threads

    monkeypatch.setenv(CPUS_ENV, text)
    with pytest.raises(ValueError, match=rf"\$DISTILLERY_CPUS='{text}': expected a whole number"):
        cpu_threads(0, tmp_path)


def test_llama_cpp_prefills_with_the_same_threads_it_generates_with(monkeypatch):
    """llama-cpp-python's own default for prompt batches is multiprocessing.cpu_count(): the node's cores."""
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings

    from steps.contract.threads import CPUS_ENV, llama_server_threads, llama_threads

    monkeypatch.setenv(CPUS_ENV, "1")
    assert llama_threads(0) == {"n_threads": 1, "n_threads_batch": 1}
    assert llama_threads(3) == {"n_threads": 3, "n_threads_batch": 3}
    # the server's flags, read by llama_cpp.server's own parser
    parser = argparse.ArgumentParser()
    add_args_from_model(parser, ModelSettings)
    args = parser.parse_args(["--model", "m.gguf", *llama_server_threads(3)])
    settings = parse_model_from_args(ModelSettings, args)
    assert (settings.n_threads, settings.n_threads_batch) == (3, 3)


@pytest.mark.integration
def test_every_llama_the_steps_open_prefills_with_their_threads(tiny_gguf, monkeypatch):
    from steps import evaluate
    from steps.contract.threads import CPUS_ENV
    from steps.evaluate.generation import open_llama
    from steps.gguf import parity

    monkeypatch.setenv(CPUS_ENV, "1")  # what a 1-CPU pod is told, on a machine with more cores
    for llm in (
        open_llama(tiny_gguf, evaluate.EvaluateConfig(dataset="d", gguf="g", out="o")),
        parity.open_gguf(tiny_gguf, 1, 256),
    ):
        try:
            assert (llm.context_params.n_threads, llm.context_params.n_threads_batch) == (1, 1)
        finally:
            llm.close()
