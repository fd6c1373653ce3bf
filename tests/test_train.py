"""Training: one loop, three launchers, checkpoints that survive SIGTERM, SIGKILL, torn writes and dead Ray workers.

Fast tests cover the batching, the checkpoint store and the config checks; the integration tier trains the tiny Llama
for real (in process, as a killed-and-restarted subprocess, and on a local Ray cluster with 2 workers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from steps import train
from steps.core.sealed import COMPLETE
from steps.train import DirCheckpoints, TrainConfig
from tests.conftest import ROOT, adapter_weights, assert_same_adapter, make_bucket

# --- fast ---------------------------------------------------------------------------------------------------------


def test_collate_left_pads_so_every_summary_ends_in_the_last_column():
    a = {"input_ids": [1, 2, 3, 4, 5], "labels": [-100, -100, -100, 4, 5]}
    b = {"input_ids": [7, 8, 9], "labels": [-100, 8, 9]}
    batch = train.collate([a, b], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [0, 0, 7, 8, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]
    assert batch["position_ids"][1, 2:].tolist() == [0, 1, 2]  # positions count from the first real token
    assert batch["keep"] == 2  # the widest summary: logits are needed for the last 2 columns only
    assert batch["labels"][:, : -batch["keep"]].eq(-100).all()


def test_batch_order_depends_on_seed_and_step_only():
    examples = [{"input_ids": [0] * (i % 7 + 1), "labels": [0]} for i in range(30)]
    cfg = TrainConfig(dataset="d", out="o", batch_size=4, seed=3)
    first = train.global_batches(examples, cfg)
    run = [next(first) for _ in range(20)]
    resumed = train.global_batches(examples, cfg)
    for _ in range(7):  # what a run resumed at step 7 skips
        next(resumed)
    assert [next(resumed) for _ in range(13)] == run[7:]
    other = train.global_batches(examples, TrainConfig(dataset="d", out="o", batch_size=4, seed=4))
    assert [next(other) for _ in range(20)] != run


def test_an_epoch_visits_every_example_once():
    examples = [{"input_ids": [0] * (i % 5 + 1), "labels": [0]} for i in range(32)]
    batches = train.global_batches(examples, TrainConfig(dataset="d", out="o", batch_size=8))
    assert sorted(i for _ in range(4) for i in next(batches)) == list(range(32))


def test_micro_batches_split_a_share_evenly_shortest_rows_together():
    from steps.train.data import micro_batches

    examples = [{"input_ids": [0] * n, "labels": [0]} for n in (9, 3, 7, 1, 5, 8, 2)]
    assert micro_batches([0, 1, 2, 3, 4, 5, 6], 3, examples) == [[3, 6, 1], [4, 2], [5, 0]]
    assert micro_batches([0, 1], 4, examples) == [[1], [0], [], []]  # a short share: empty calls last
    assert micro_batches([4, 2, 0], 1, examples) == [[4, 2, 0]]


def test_packing_fills_rows_first_fit_restarts_positions_and_keeps_logits_only_before_labels():
    from steps.train.data import pack

    a = {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]}
    b = {"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}
    c = {"input_ids": [8, 9, 10, 11, 12], "labels": [-100, -100, -100, -100, 12]}
    packed = pack([a, c, b], width=8, pad_id=0)
    assert packed["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 0], [8, 9, 10, 11, 12, 0, 0, 0]]
    assert packed["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 0], [0, 1, 2, 3, 4, 0, 1, 2]]
    assert packed["order"] == [0, 2, 1] and packed["tokens"] == 12
    assert packed["keep"].tolist() == [1, 2, 3, 4, 5]  # one before each label, shared by the rows
    assert packed["labels"].tolist() == [[3, 4, -100, 6, 7], [-100, -100, 12, -100, -100]]
    with pytest.raises(ValueError, match="does not fit a packed row of 4"):
        pack([c], width=4, pad_id=0)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"memory.max": str(6 * 2**30)}, 6.0),  # cgroup v2
        ({"memory.max": "max"}, 24.0),  # v2 without a limit: the machine
        ({"memory/memory.limit_in_bytes": str(3 * 2**30)}, 3.0),  # cgroup v1
        ({"memory/memory.limit_in_bytes": str(2**63 - 4096)}, 24.0),  # v1's "no limit"
        ({}, 24.0),
    ],
)
def test_the_memory_limit_is_the_cgroups_else_the_machines(tmp_path: Path, files: dict, expected: float):
    from steps.train.budget import memory_limit_gib

    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {24 * 2**20} kB\nMemFree:  1 kB\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    gib, source = memory_limit_gib(tmp_path, meminfo)
    assert gib == pytest.approx(expected)
    assert source.startswith("the container's limit") == (expected != 24.0)


def test_auto_loads_bf16_weights_where_float32_does_not_fit_and_a_pinned_fp32_is_refused_clearly(
    capsys: pytest.CaptureFixture,
):
    from steps import sizing
    from steps.sizing.seeds import shape
    from steps.train.budget import choose, knobs
    from steps.train.precision import Precision

    s = shape("Llama-3.2-3B")
    cfg = TrainConfig(dataset="d", out="o", batch_size=16, max_seq_len=512)
    one = sizing.Micro(1, True)
    fp32_need = sizing.memory.cpu_train_gib(s, knobs(cfg, "fp32"), one)
    bf16_need = sizing.memory.cpu_train_gib(s, knobs(cfg, "bf16"), one)
    budget = (fp32_need + bf16_need) / 2
    avx2 = Precision("fp32", "auto: no native bf16 on this CPU")
    precision, micro = choose(cfg, s, avx2, device="cpu", budget_gib=budget)
    assert precision.name == "bf16" and "float32 weights need" in precision.reason and micro.examples == 1
    assert "bf16 weights" in capsys.readouterr().out
    pinned = TrainConfig(dataset="d", out="o", batch_size=16, max_seq_len=512, precision="fp32")
    with pytest.raises(ValueError, match=r"even micro-batch 1 with gradient checkpointing needs .* GiB"):
        choose(pinned, s, Precision("fp32", "--precision fp32"), device="cpu", budget_gib=budget)
    forced = TrainConfig(dataset="d", out="o", batch_size=16, precision="fp32", micro_batch=1)
    assert choose(forced, s, Precision("fp32", "--precision fp32"), device="cpu", budget_gib=budget)[1].examples == 1
    assert "running it as pinned" in capsys.readouterr().err


def test_a_process_takes_the_largest_micro_batch_its_memory_holds_and_checkpoints_only_when_it_must():
    from steps import sizing
    from steps.sizing.seeds import shape
    from steps.train.budget import choose, knobs
    from steps.train.precision import Precision

    s = shape("Llama-3.2-1B")
    cfg = TrainConfig(dataset="d", out="o", batch_size=16, max_seq_len=128)
    bf16 = Precision("bf16", "test")
    k = knobs(cfg, "bf16")
    roomy = sizing.memory.cpu_train_gib(s, k, sizing.Micro(4, False))
    assert choose(cfg, s, bf16, device="cpu", budget_gib=roomy + 0.01)[1] == sizing.Micro(4, False)
    tight = sizing.memory.cpu_train_gib(s, k, sizing.Micro(1, False)) - 0.01
    assert choose(cfg, s, bf16, device="cpu", budget_gib=tight)[1].checkpointing
    # Ray: the pod's memory is shared by the workers on it
    two = sizing.memory.ray_pod_gib(s, k, 2, sizing.Micro(4, False))
    assert choose(cfg, s, bf16, device="ray", world_size=4, pod_workers=2, budget_gib=two + 0.01)[1].examples == 4


@pytest.fixture(scope="module")
def tokenizer(base_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(base_model_dir)


LONG_DOCUMENT = " ".join(f"Paragraph {i}: the depot on Mill Lane logged {i * 7} deliveries." for i in range(60))


def test_a_long_example_keeps_the_instructions_the_turn_end_and_the_whole_summary(tokenizer):
    from steps.core.examples import KEEP_TAIL, _parts

    prompt, answer = _parts(tokenizer, LONG_DOCUMENT, "Deliveries rose.")
    example = train.encode_example(tokenizer, LONG_DOCUMENT, "Deliveries rose.", 128)
    ids, labels = example["input_ids"], example["labels"]
    assert len(ids) == len(labels) == 128 < len(prompt) + len(answer)
    head = 128 - len(answer) - KEEP_TAIL
    assert ids[:head] == prompt[:head] and ids[head : -len(answer)] == prompt[-KEEP_TAIL:]
    assert ids[-len(answer) :] == labels[-len(answer) :] == answer and set(labels[: -len(answer)]) == {-100}
    rows = [{"id": "short", "document": "The bakery opens at 8.", "summary": "Opens at 8."},
            {"id": "long", "document": LONG_DOCUMENT, "summary": "Deliveries rose."}]  # fmt: skip
    whole = len(prompt) + len(answer)
    assert train.length_report(tokenizer, rows, 128) == {
        "examples": 2,
        "examples_cut": 1,
        "longest_example_tokens": whole,
    }
    assert train.length_report(tokenizer, rows, whole)["examples_cut"] == 0
    assert train.encode_rows(tokenizer, rows, whole)[1]["input_ids"] == prompt + answer


def test_loss_covers_only_the_summary_and_end_of_turn(tokenizer):
    ex = train.encode_example(tokenizer, "The ferry to Arlow is cancelled on Monday.", "Monday's Arlow ferry is off.",
                              512)  # fmt: skip
    kept = [t for t, label in zip(ex["input_ids"], ex["labels"], strict=True) if label != -100]
    assert tokenizer.decode(kept) == "Monday's Arlow ferry is off." + tokenizer.eos_token
    assert ex["labels"][: len(ex["labels"]) - len(kept)] == [-100] * (len(ex["labels"]) - len(kept))


def test_long_documents_are_cut_but_keep_the_answer(tokenizer):
    ex = train.encode_example(tokenizer, "word " * 2000, "Short answer.", 256)
    assert len(ex["input_ids"]) == 256
    kept = [t for t, lab in zip(ex["input_ids"], ex["labels"], strict=True) if lab != -100]
    assert tokenizer.decode(kept).startswith("Short answer.")


def test_a_summary_that_leaves_no_room_for_its_document_is_refused_naming_the_row(tokenizer):
    from steps.core.examples import _parts

    long_summary = " ".join(["The depot logged more deliveries than in any week before."] * 12)
    rows = [{"id": "fits", "document": "The bakery opens at 8.", "summary": "Opens at 8."},
            {"id": "row-7", "document": LONG_DOCUMENT, "summary": long_summary}]  # fmt: skip
    whole = sum(map(len, _parts(tokenizer, LONG_DOCUMENT, long_summary)))
    refused = rf"training row 'row-7' \(row 2 of the train split\).* raise --max-seq-len to {whole} "
    with pytest.raises(ValueError, match=refused):
        train.length_report(tokenizer, rows, 128)  # before any model is loaded
    with pytest.raises(ValueError, match=refused):
        train.encode_rows(tokenizer, rows, 128)  # and in every launcher


def _fill(payload: str):
    def fill(folder: Path) -> None:
        (folder / "state.json").write_text(payload)
        (folder / "adapter").mkdir()
        (folder / "adapter/weights.bin").write_bytes(payload.encode() * 100)

    return fill


def test_checkpoints_keep_the_newest_two_and_resume_from_the_latest(tmp_path: Path):
    store = DirCheckpoints(str(tmp_path / "ckpt"))
    with store.latest() as found:
        assert found is None
    for step in (2, 4, 6):
        store.save(step, _fill(f"step {step}"))
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-00000004", "step-00000006"]
    with store.latest() as found:
        assert found.name == "step-00000006" and (found / "state.json").read_text() == "step 6"


def test_a_torn_checkpoint_is_never_resumed_from(tmp_path: Path, capsys: pytest.CaptureFixture):
    store = DirCheckpoints(str(tmp_path / "ckpt"))
    store.save(4, _fill("step 4"))
    store.save(6, _fill("step 6"))
    # A writer killed mid-copy: the newest folder exists but was never sealed.
    (tmp_path / "ckpt/step-00000008/adapter").mkdir(parents=True)
    (tmp_path / "ckpt/step-00000008/state.json").write_text("step 8")
    # A sealed checkpoint whose weights were cut short afterwards (a full disk, a bad copy).
    weights = tmp_path / "ckpt/step-00000006/adapter/weights.bin"
    weights.write_bytes(weights.read_bytes()[:10])
    # A local writer killed before its rename leaves only a hidden temp folder (named with its pid, now gone).
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f"ckpt/.step-00000010.tmp-{dead.stdout.strip()}-abc").mkdir()
    with store.latest() as found:
        assert found.name == "step-00000004"
    assert not (tmp_path / f"ckpt/.step-00000010.tmp-{dead.stdout.strip()}-abc").exists()
    err = capsys.readouterr().err
    assert f"step-00000008: no {COMPLETE}" in err and "step-00000006: adapter/weights.bin is missing or differs" in err


def test_a_checkpoint_being_written_is_invisible(tmp_path: Path):
    store = DirCheckpoints(str(tmp_path / "ckpt"))
    seen = []

    def fill(folder: Path) -> None:
        (folder / "state.json").write_text("x")
        with store.latest() as found:  # what a second reader sees while this one is half-written
            seen.append(found)

    store.save(2, fill)
    assert seen == [None]
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000002"]


class _RunsCode:
    """Unpickled, it creates `marker`: what a planted checkpoint file could do instead (run any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


def _tiny_peft_model():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    return get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))


@pytest.mark.parametrize("planted", ["rng-0.pt", "optimizer.pt", "scheduler.pt"])
def test_resume_refuses_a_checkpoint_file_that_would_run_code_when_read(tmp_path: Path, planted: str):
    """Checkpoints lie on shared storage (S3): whoever can write there must not get code run by the next resume."""
    import shutil

    import torch

    from steps.core.sealed import SealedFolders

    examples = [{"input_ids": [1, 2, 3, 4 + i], "labels": [-100, -100, 3, 4 + i]} for i in range(4)]
    cfg = TrainConfig(dataset="d", out="o", batch_size=2, epochs=1, checkpoint_every=1, log_every=100)
    store = DirCheckpoints(str(tmp_path / "ckpt"))
    train.train_loop(_tiny_peft_model(), examples, cfg, 0, store)  # a real run's checkpoints
    marker = tmp_path / "code-ran"

    def plant(folder: Path) -> None:  # a sealed checkpoint, newer than the run's, with one file replaced
        with store.latest() as genuine:
            shutil.copytree(genuine, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(COMPLETE))
        torch.save({"state": _RunsCode(marker)}, folder / planted)

    SealedFolders(str(tmp_path / "ckpt"), "attacker").put("step-00000099", plant)
    with pytest.raises(ValueError, match=rf"{planted}: holds pickled Python objects .* it was not loaded") as err:
        train.train_loop(_tiny_peft_model(), examples, cfg, 0, store)
    assert "Unsupported global" in str(err.value) and "--checkpoint-dir" in str(err.value)
    assert not marker.exists(), "unpickling the planted file ran its code"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"qlora": True}, "--qlora needs --train-backend gpu"),
        ({"train_backend": "tpu"}, "'tpu' is not one of cpu, gpu, ray"),
        ({"train_backend": "ray", "ray_workers": 0}, "--ray-workers 0: needs at least 1"),
        ({"train_backend": "ray", "ray_address": "auto"}, "--threads: set the threads per Ray worker"),
        ({"checkpoint_every": -1}, "--checkpoint-every -1"),
        ({"precision": "fp16"}, "--precision 'fp16' is not one of auto, fp32, bf16"),
        ({"train_backend": "gpu", "precision": "fp32"}, "--precision fp32: the gpu launcher loads the base in bf16"),
        ({"train_backend": "gpu", "ray_gpu": True}, "--ray-gpu needs --train-backend ray"),
        ({"learning_rate": -1e-3}, r"--learning-rate -0.001: use a positive rate"),
        ({"learning_rate": float("nan")}, r"--learning-rate nan: use a positive rate"),
        ({"lora_r": 0}, r"--lora-r 0: needs at least 1"),
        ({"lora_alpha": 0}, r"--lora-alpha 0: use a positive scale"),
        ({"lora_dropout": 1.0}, r"--lora-dropout 1.0: a probability, use \[0, 1\)"),
        ({"warmup_ratio": -0.1}, r"--warmup-ratio -0.1: a share of the steps"),
        ({"epochs": 0}, r"--epochs 0: use more than 0 passes"),
        ({"log_every": 0}, r"--log-every 0: use at least 1 step"),
        ({"max_failures": -1}, r"--max-failures -1: use 0 \(no restart\) or more"),
        ({"micro_batch": -1}, r"--micro-batch -1: use 0"),
        ({"gradient_checkpointing": "always"}, r"--gradient-checkpointing 'always' is not one of auto, on, off"),
        ({"base_model": "no/such/folder"}, r"--base-model no/such/folder: no such folder \(/"),
    ],
)
def test_bad_settings_are_refused_before_any_work(tmp_path: Path, overrides: dict, message: str):
    cfg = TrainConfig(dataset=str(tmp_path / "missing"), out=str(tmp_path / "out"), **overrides)
    with pytest.raises(ValueError, match=message):
        train.run(cfg)
    assert not (tmp_path / "out").exists()


def test_gpu_backend_without_cuda_is_a_clear_error(tmp_path: Path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ValueError, match="CUDA is not available; use --train-backend cpu"):
        train.run(TrainConfig(dataset=str(tmp_path / "dataset"), out=str(tmp_path / "a"), train_backend="gpu"))
    assert not (tmp_path / "a").exists()


def test_ray_workers_are_all_cpu_with_gloo_or_all_gpu_with_nccl():
    from steps.train.launchers import scaling

    cpu = scaling(TrainConfig(dataset="d", out="o", train_backend="ray", ray_workers=3), threads=2)
    assert cpu == {"scaling": {"num_workers": 3, "use_gpu": False, "resources_per_worker": {"CPU": 2}},
                   "torch": {"backend": "gloo"}}  # fmt: skip
    gpu = scaling(TrainConfig(dataset="d", out="o", train_backend="ray", ray_workers=1, ray_gpu=True), threads=2)
    assert gpu == {"scaling": {"num_workers": 1, "use_gpu": True, "resources_per_worker": {"CPU": 2, "GPU": 1}},
                   "torch": {"backend": "nccl"}}  # fmt: skip


def test_a_pinned_micro_batch_that_does_not_fit_runs_its_smallest_way():
    """--micro-batch 1 with checkpointing left to auto, on a budget neither way fits: the way nearest to fitting
    (with checkpointing) runs, not the larger one."""
    from steps import sizing
    from steps.sizing.seeds import shape
    from steps.train.budget import choose, knobs
    from steps.train.precision import Precision

    s = shape("Llama-3.2-3B")
    cfg = TrainConfig(dataset="d", out="o", batch_size=16, max_seq_len=512, micro_batch=1)
    tiny = sizing.memory.cpu_train_gib(s, knobs(cfg, "bf16"), sizing.Micro(1, True)) - 0.5
    assert choose(cfg, s, Precision("bf16", "test"), device="cpu", budget_gib=tiny)[1] == sizing.Micro(1, True)


def test_a_ddp_group_agrees_on_its_weakest_worker_s_precision():
    """No float32 worker beside bf16 ones: one precision for every worker of a Ray run (precision.agree)."""
    from steps.train.precision import Precision, agree

    native, avx2 = Precision("bf16", "auto: native (amx_bf16)"), Precision("fp32", "auto: no native bf16 on this CPU")
    assert agree("auto", [(native, True), (native, True)]).name == "bf16"
    mixed = agree("auto", [(native, True), (avx2, True)])  # a node without bf16 would emulate it: float32 for all
    assert mixed.name == "fp32" and "worker(s) [1]" in mixed.reason
    tight = agree("auto", [(avx2, True), (native, False)])  # float32 does not fit worker 1's pod: bf16 for all
    assert tight.name == "bf16" and "do not fit worker(s) [1]" in tight.reason
    assert agree("fp32", [(native, False), (avx2, True)]).name == "fp32"  # pinned: as asked


def test_a_worker_tells_whether_float32_weights_fit_its_memory():
    from steps import sizing
    from steps.sizing.seeds import shape
    from steps.train.budget import fits

    s = shape("Llama-3.2-3B")
    cfg = TrainConfig(dataset="d", out="o", batch_size=16, max_seq_len=512)
    need = sizing.memory.ray_pod_gib(s, sizing.Knobs("ray", False, 512, 16, 16, (), "fp32"), 1, sizing.Micro(1, True))
    assert fits(cfg, s, "fp32", device="ray", world_size=3, budget_gib=need + 0.01)
    assert not fits(cfg, s, "fp32", device="ray", world_size=3, budget_gib=need - 0.01)
    assert fits(cfg, s, "bf16", device="ray", world_size=3, budget_gib=need - 0.01)


# --- integration: real training on the tiny Llama --------------------------------------------------------------

SMALL = ["--batch-size", "4", "--epochs", "2", "--threads", "2", "--lora-dropout", "0.1", "--log-every", "1"]
# bf16 autocast vs float32, 8 steps on the tiny Llama (test_bf16_autocast_…), measured on an AVX2 CPU (bf16 emulated
# by oneDNN): losses 8.2e-6 apart at worst (the tiny model's logits sit near zero, where bf16 rounding is small),
# learned LoRA B weights 3.4 % apart (relative L2). Margins: 12x on the loss, 3x on the weights, for other CPUs'
# kernels (AMX accumulates in another order) and AdamW turning near-zero gradients' rounding into full-size steps.
LOSS_RTOL = 1e-4
ADAPTER_RTOL = 0.10
PRECISIONS = ("fp32", "bf16")


@pytest.fixture(scope="module")
def dataset(fetched_dataset: Path) -> Path:
    return fetched_dataset  # the session's (conftest: DISTILLERY_TEST_DATASET names one made elsewhere)


def _cli(args: list[str], dataset: Path, model: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "steps.train", "--dataset", str(dataset), "--base-model", str(model),
            "--out", str(out), *args]  # fmt: skip


def _losses(adapter: Path) -> list[float]:
    return [float(line.split(",")[1]) for line in (adapter / "loss.csv").read_text().splitlines()[1:]]


@pytest.fixture(scope="module")
def uninterrupted(dataset: Path, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "adapter"
    subprocess.run(_cli(SMALL, dataset, tiny_model_dir, out), cwd=ROOT, check=True, capture_output=True)
    return out


def _interrupt(cmd: list[str], sig: int, after_step: int, log: Path) -> int:
    """Run `cmd`, send `sig` once it has printed step `after_step`, return its exit code."""
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while f"step {after_step}/" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    proc.send_signal(sig)
    return proc.wait(timeout=120)


@pytest.mark.integration
def test_sigterm_flushes_a_checkpoint_and_the_rerun_matches_an_uninterrupted_run(
    dataset: Path, tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path
):
    out = tmp_path / "adapter"
    cmd = _cli([*SMALL, "--checkpoint-every", "100"], dataset, tiny_model_dir, out)
    code = _interrupt(cmd, signal.SIGTERM, 9, tmp_path / "first.log")
    assert code == 143, (tmp_path / "first.log").read_text()[-2000:]
    assert not out.exists()
    # checkpoint-every is 100: the one checkpoint there is the flush the signal asked for
    saved = [p.name for p in (tmp_path / "adapter.checkpoints").iterdir()]
    assert len(saved) == 1 and int(saved[0].split("-")[1]) >= 9
    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"resuming at step {int(saved[0].split('-')[1])}/48" in rerun.stdout
    assert json.loads((out / "result.json").read_text())["resumed_from_step"] == int(saved[0].split("-")[1])
    assert_same_adapter(out, uninterrupted, atol=1e-6)
    assert _losses(out) == pytest.approx(_losses(uninterrupted), abs=1e-5)
    assert not (tmp_path / "adapter.checkpoints").exists()  # cleared once the adapter is out


@pytest.mark.integration
def test_train_says_how_many_documents_it_cut_and_refuses_a_split_that_cannot_fit(
    dataset: Path, tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path, tokenizer
):
    from steps.core.dataset import load_split

    rows = load_split(dataset, "train")
    whole = json.loads((uninterrupted / "result.json").read_text())
    assert whole["examples"] == len(rows) and whole["examples_cut"] == 0  # the committed split fits 512 tokens
    fit = train.length_report(tokenizer, rows, 200)
    assert 0 < fit["examples_cut"] < len(rows) and fit["longest_example_tokens"] == whole["longest_example_tokens"]
    out = tmp_path / "cut"
    done = subprocess.run(_cli(["--max-seq-len", "200", "--epochs", "0.05", "--batch-size", "4", "--threads", "2"],
                               dataset, tiny_model_dir, out), cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert {k: json.loads((out / "result.json").read_text())[k] for k in fit} == fit
    assert f"{fit['examples_cut']} of {len(rows)} training examples are longer than --max-seq-len 200" in done.stderr
    assert f"raise --max-seq-len to {fit['longest_example_tokens']}" in done.stderr
    refused = subprocess.run(_cli(["--max-seq-len", "40"], dataset, tiny_model_dir, tmp_path / "none"), cwd=ROOT,
                             capture_output=True, text=True)  # fmt: skip
    assert refused.returncode == 1 and "leave no room for the document in --max-seq-len 40" in refused.stderr
    assert "(row 1 of the train split)" in refused.stderr and not (tmp_path / "none").exists()


@pytest.mark.integration
def test_sigkill_resumes_from_the_last_periodic_checkpoint(
    dataset: Path, tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path
):
    out = tmp_path / "adapter"
    cmd = _cli([*SMALL, "--checkpoint-every", "5"], dataset, tiny_model_dir, out)
    assert _interrupt(cmd, signal.SIGKILL, 13, tmp_path / "first.log") == -signal.SIGKILL
    newest = max(int(p.name.split("-")[1]) for p in (tmp_path / "adapter.checkpoints").glob("step-*"))
    assert newest in (10, 15)  # killed after step 13: the checkpoint of step 10, or 15 if it ran on meanwhile
    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"resuming at step {newest}/48" in rerun.stdout
    assert_same_adapter(out, uninterrupted, atol=1e-6)


@pytest.mark.integration
def test_resuming_from_another_runs_checkpoint_is_refused(dataset: Path, tiny_model_dir: Path, tmp_path: Path):
    ckpt = tmp_path / "ckpt"
    cmd = _cli([*SMALL, "--checkpoint-every", "4", "--checkpoint-dir", str(ckpt)], dataset, tiny_model_dir,
               tmp_path / "a")  # fmt: skip
    assert _interrupt(cmd, signal.SIGTERM, 5, tmp_path / "first.log") == 143
    changed = [*cmd, "--learning-rate", "0.01"]
    rerun = subprocess.run(changed, cwd=ROOT, capture_output=True, text=True)
    assert rerun.returncode == 1
    assert "was written by a run with other settings or data" in rerun.stderr and "--checkpoint-dir" in rerun.stderr
    assert not (tmp_path / "a").exists()


@pytest.mark.integration
def test_checkpoints_and_outputs_on_s3(
    dataset: Path, tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path, s3_server: str, aws_env: dict
):
    import fsspec

    make_bucket(s3_server, "runs")
    fs = fsspec.filesystem("s3")
    fs.put(f"{dataset}/", "runs/uid-1/dataset/", recursive=True)
    cmd = _cli([*SMALL, "--checkpoint-every", "4", "--checkpoint-dir", "s3://runs/uid-1/checkpoints"],
               "s3://runs/uid-1/dataset", tiny_model_dir, "s3://runs/uid-1/adapter")  # fmt: skip
    env_cmd = ["env", *(f"{k}={v}" for k, v in aws_env.items()), *cmd]
    assert _interrupt(env_cmd, signal.SIGTERM, 10, tmp_path / "first.log") == 143
    assert fs.exists(f"runs/uid-1/checkpoints/step-00000010/{COMPLETE}") or fs.exists(
        f"runs/uid-1/checkpoints/step-00000011/{COMPLETE}"
    )
    subprocess.run(env_cmd, cwd=ROOT, capture_output=True, check=True)
    fs.invalidate_cache()
    local = tmp_path / "from-s3"
    fs.get("runs/uid-1/adapter/", f"{local}/", recursive=True)
    assert (local / "result.json").is_file() and (local / "_outputs/final-loss").is_file()
    assert_same_adapter(local, uninterrupted, atol=1e-6)
    # The run's checkpoints stay on S3: a pod lost after training but before Argo uploaded its output is retried and
    # resumes at the end, with the same adapter, instead of training again from step 0.
    assert fs.exists("runs/uid-1/checkpoints")
    fs.rm("runs/uid-1/adapter", recursive=True)
    retried = subprocess.run(env_cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    fs.invalidate_cache()
    again = tmp_path / "again"
    fs.get("runs/uid-1/adapter/", f"{again}/", recursive=True)
    assert_same_adapter(again, uninterrupted, atol=1e-6)
    total = json.loads((again / "result.json").read_text())["steps"]
    assert f"resuming at step {total}/{total}" in retried.stdout, retried.stdout[-2000:]


def _train_in_process(dataset: Path, model_dir: Path, store: Path, **settings: object) -> tuple[list[dict], dict]:
    """`train_loop` in this process (no subprocess start-up); returns its step log and the trained LoRA weights."""
    import torch

    from steps.core.dataset import load_split
    from steps.train.budget import base_shape, choose
    from steps.train.launchers import _model
    from steps.train.precision import detect

    cfg = TrainConfig(dataset=str(dataset), out=str(store / "out"), base_model=str(model_dir), **settings)
    torch.set_num_threads(cfg.threads)
    precision, micro = choose(cfg, base_shape(cfg), detect(cfg.precision, "cpu"), device="cpu")
    model, tokenizer = _model(cfg, torch.device("cpu"), precision.name, micro.checkpointing)
    examples = train.encode_rows(tokenizer, load_split(dataset, "train"), cfg.max_seq_len)
    log = train.train_loop(model, examples, cfg, train.pad_id_of(tokenizer), DirCheckpoints(str(store / "ckpt")),
                           micro=micro, precision=precision)  # fmt: skip
    return log, {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


@pytest.mark.integration
def test_any_split_of_a_batch_into_micro_batches_trains_the_same_adapter(
    dataset: Path, tiny_model_dir: Path, tmp_path: Path
):
    """1 x 16, 16 x 1 and 4 x 4: the same optimiser steps to float32 rounding (the loss is the global batch's summed
    token loss over its summary tokens, whatever the split; dropout off, since each call draws its own masks).
    Pinned to fp32: bf16 matmuls over different row counts round differently (an arithmetic property, not a fault)."""
    settings = {"batch_size": 16, "epochs": 2.0, "max_seq_len": 256, "threads": 2, "lora_dropout": 0.0,
                "checkpoint_every": 0, "log_every": 10**6, "precision": "fp32"}  # fmt: skip
    runs = {
        m: _train_in_process(dataset, tiny_model_dir, tmp_path / str(m), micro_batch=m, **settings) for m in (16, 1, 4)
    }
    (log, whole) = runs[16]
    assert len(log) >= 2
    for m in (1, 4):
        other_log, weights = runs[m]
        assert [r["loss"] for r in other_log] == pytest.approx([r["loss"] for r in log], rel=1e-5)
        assert [r["tokens"] for r in other_log] == [r["tokens"] for r in log]
        worst = max(float((weights[k] - whole[k]).abs().max()) for k in whole)
        assert worst <= 1e-5, f"micro-batch {m}: adapters differ by up to {worst:.2e}"


@pytest.mark.integration
def test_packed_rows_train_the_unpacked_adapter(dataset: Path, tiny_model_dir: Path, tmp_path: Path):
    """Several examples per row with attention kept inside each (the block-diagonal mask transformers builds from
    restarting positions; CPU SDPA here) train what one example per left-padded row does, to float32 rounding."""
    settings = {"batch_size": 8, "epochs": 1.0, "max_seq_len": 512, "threads": 2, "lora_dropout": 0.0,
                "checkpoint_every": 0, "log_every": 10**6, "precision": "fp32", "micro_batch": 8}  # fmt: skip
    runs = {p: _train_in_process(dataset, tiny_model_dir, tmp_path / str(p), packing=p, **settings)
            for p in (False, True)}  # fmt: skip
    (log, plain), (packed_log, packed) = runs[False], runs[True]
    assert [r["loss"] for r in packed_log] == pytest.approx([r["loss"] for r in log], rel=1e-5)
    assert [r["tokens"] for r in packed_log] == [r["tokens"] for r in log]
    assert max(float((packed[k] - plain[k]).abs().max()) for k in plain) <= 1e-5


DDP_RANK = """
import json, sys, torch
from torch.nn.parallel import DistributedDataParallel
from safetensors.torch import save_file
from steps import sizing, train
from steps.core.dataset import load_split
rank, port, micro, dataset, model_dir, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), *sys.argv[4:7]
torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
torch.set_num_threads(1)
cfg = train.TrainConfig(dataset=dataset, out=out, base_model=model_dir, batch_size=8, epochs=1.0, max_seq_len=256,
                        lora_dropout=0.0, precision="fp32", checkpoint_every=0, log_every=10**6)
model, tokenizer = train.build_model(cfg, torch.device("cpu"), "fp32")
examples = train.encode_rows(tokenizer, load_split(dataset, "train"), cfg.max_seq_len)
log = train.train_loop(DistributedDataParallel(model), examples, cfg, train.pad_id_of(tokenizer),
                       train.DirCheckpoints(out + f"/ckpt-{rank}"), rank=rank, world_size=2,
                       micro=sizing.Micro(micro, False))
if rank == 0:
    save_file({k: v.detach().contiguous() for k, v in model.named_parameters() if v.requires_grad}, out + "/lora.st")
    print("losses", json.dumps([r["loss"] for r in log]))
torch.distributed.destroy_process_group()
"""


@pytest.mark.integration
def test_ranks_with_different_micro_batches_neither_hang_nor_change_the_step(
    dataset: Path, tiny_model_dir: Path, tmp_path: Path
):
    """Two DDP ranks (Gloo) sized for different pods: rank 0 runs its 4 rows one at a time, rank 1 all 4 at once.
    They agree on the most calls any rank needs (rank 1 runs 3 empty ones), synchronise on the last call only, and
    train what one process does with the whole batch of 8."""
    from safetensors.torch import load_file

    from tests.conftest import free_port

    port = str(free_port())
    procs = [
        subprocess.Popen([sys.executable, "-c", DDP_RANK, str(rank), port, str(micro), str(dataset),
                          str(tiny_model_dir), str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for rank, micro in ((0, 1), (1, 4))
    ]  # fmt: skip
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    log, whole = _train_in_process(dataset, tiny_model_dir, tmp_path / "single", batch_size=8, epochs=1.0,
                                   max_seq_len=256, lora_dropout=0.0, precision="fp32", checkpoint_every=0,
                                   log_every=10**6, threads=2, micro_batch=8)  # fmt: skip
    losses = json.loads(outputs[0][0].split("losses", 1)[1])
    assert losses == pytest.approx([r["loss"] for r in log], rel=1e-5)
    ddp = load_file(tmp_path / "lora.st")
    worst = max(float((ddp[k] - whole[k]).abs().max()) for k in whole)
    assert worst <= 1e-5, f"adapters differ by up to {worst:.2e}"


@pytest.mark.integration
def test_gradient_checkpointing_trains_the_same_adapter(dataset: Path, tiny_model_dir: Path, tmp_path: Path):
    """Recomputing each layer in backward (dropout's RNG replayed) gives the steps of keeping the activations."""
    settings = {"batch_size": 8, "epochs": 1.0, "max_seq_len": 256, "threads": 2, "lora_dropout": 0.1,
                "checkpoint_every": 0, "log_every": 10**6, "precision": "fp32", "micro_batch": 4}  # fmt: skip
    log_off, off = _train_in_process(
        dataset, tiny_model_dir, tmp_path / "off", gradient_checkpointing="off", **settings
    )
    log_on, on = _train_in_process(dataset, tiny_model_dir, tmp_path / "on", gradient_checkpointing="on", **settings)
    assert [r["loss"] for r in log_on] == pytest.approx([r["loss"] for r in log_off], rel=1e-5)
    assert max(float((on[k] - off[k]).abs().max()) for k in off) <= 1e-5


@pytest.mark.integration
def test_bf16_autocast_trains_the_float32_runs_adapter_within_bf16_rounding(
    dataset: Path, tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path
):
    """`--precision bf16` (what `auto` picks on a CPU with AMX or AVX-512-BF16) against float32, same settings and
    seed. bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2 % per operation) while the loss and the
    optimiser stay float32, so the losses stay close; the learned LoRA weights (B, zero at init: all of it was
    learned) drift further, as AdamW turns each small gradient difference into a full-size update. The tolerances
    (LOSS_RTOL, ADAPTER_RTOL) are pinned from a measurement, with their margin beside them. Short sequences and 8
    steps: bf16 is emulated, slowly, on CPUs without it (this machine's), and the difference shows from the first
    step."""
    from steps.train.precision import detect

    # result.json records what `auto` chose (the reference run, float32 here, bf16 on an AMX machine)
    assert json.loads((uninterrupted / "result.json").read_text())["precision"] == detect("auto", "cpu").name
    settings = {"batch_size": 4, "epochs": 0.333, "max_seq_len": 128, "threads": 2, "lora_dropout": 0.1,
                "checkpoint_every": 0, "log_every": 10**6}  # fmt: skip
    runs = {p: _train_in_process(dataset, tiny_model_dir, tmp_path / p, precision=p, **settings) for p in PRECISIONS}
    (log32, w32), (log16, w16) = runs["fp32"], runs["bf16"]
    assert [r["precision"] for r in log16] == ["bf16"] * 8 and [r["precision"] for r in log32] == ["fp32"] * 8
    worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(log32, log16, strict=True))
    assert worst <= LOSS_RTOL, f"a step's loss differs by {worst:.3%}"
    learned = [k for k in w32 if "lora_B" in k]
    size = sum(float(w32[k].pow(2).sum()) for k in learned) ** 0.5
    drift = sum(float((w16[k] - w32[k]).pow(2).sum()) for k in learned) ** 0.5
    assert size > 0 and drift / size <= ADAPTER_RTOL, f"bf16's learned weights differ by {drift / size:.2%}"


# --- integration: Ray Train on a local cluster ---------------------------------------------------------------------


def _ray_cli(args: list[str], dataset: Path, model: Path, out: Path) -> list[str]:
    return _cli(["--train-backend", "ray", "--ray-workers", "2", "--threads", "1", *args], dataset, model, out)


@pytest.mark.integration
def test_two_ray_workers_compute_the_same_steps_as_one_process(dataset: Path, tiny_model_dir: Path, tmp_path: Path):
    """The same optimiser steps, to float32 rounding: DDP averages the two ranks' gradients of 4 rows each into the
    gradient of the 8-row batch. Pinned to fp32 because the property is arithmetic: under bf16 autocast (what `auto`
    picks on an AVX-512-BF16 or AMX CPU) a matmul over 4 rows rounds differently from one over 8, and the adapters
    drifted 3e-3 apart in 12 steps on a Zen 4 EPYC — bf16 noise, not a DDP fault."""
    same = [
        "--batch-size",
        "8",
        "--epochs",
        "1",
        "--lora-dropout",
        "0",
        "--checkpoint-every",
        "6",
        "--precision",
        "fp32",
    ]
    single, ray = tmp_path / "single", tmp_path / "ray"
    subprocess.run(_cli([*same, "--threads", "2", "--micro-batch", "8"], dataset, tiny_model_dir, single), cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    # A base model given relative to the step's folder, as the embedded run does: the workers run elsewhere.
    relative = Path(os.path.relpath(tiny_model_dir, ROOT))
    # Each Ray rank runs its 4 rows as 4 micro-batches of 1 (DDP synchronising on the last), the single process its 8
    # at once: the same steps.
    done = subprocess.run(_ray_cli([*same, "--micro-batch", "1"], dataset, relative, ray), cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 CPU workers x 1 threads" in json.loads((ray / "result.json").read_text())["device"]
    assert len(_losses(ray)) == len(_losses(single)) == 12
    assert _losses(ray) == pytest.approx(_losses(single), abs=1e-4)
    assert_same_adapter(ray, single, atol=1e-4)


def _ray_workers() -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline"]) if "RayTrainWorker" in " ".join(p.info["cmdline"] or [])]


@pytest.mark.integration
@pytest.mark.parametrize("max_failures", [2, 0], ids=["recovers", "fails-clearly"])
def test_a_dead_ray_worker(dataset: Path, tiny_model_dir: Path, tmp_path: Path, max_failures: int):
    out = tmp_path / "adapter"
    cmd = _ray_cli([*SMALL[:4], "--checkpoint-every", "4", "--log-every", "1", "--max-failures", str(max_failures)],
                   dataset, tiny_model_dir, out)  # fmt: skip
    log = tmp_path / "ray.log"
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    # Ray folds repeated log lines, so watch the storage path rather than the log. Ray Train's controller collects
    # each worker's report on its own clock (a poll every 2 s; a worker's queue holds one report, so its next
    # `report` waits for the previous one to be taken): the step-16 folder appearing proves that step 8 was taken
    # from every rank, so step 4 was registered a poll earlier. Killing at step 8 raced that poll on this fast tiny
    # model (CI saw the run restart from zero).
    while not list(tmp_path.glob("adapter.checkpoints/*/step-00000016")):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    victims = _ray_workers()
    assert len(victims) == 2
    os.kill(victims[-1], signal.SIGKILL)
    code = proc.wait(timeout=300)
    text = log.read_text()
    if max_failures:
        assert code == 0, text[-3000:]
        assert "resuming at step" in text
        resumed = json.loads((out / "result.json").read_text())["resumed_from_step"]
        # killed as the step-16 checkpoint was being written: Ray registers a checkpoint only once every rank's
        # report of it has been collected, so the restart resumes from 4 to 16, never from a torn one or from zero
        assert resumed in (4, 8, 12, 16) and len(_losses(out)) == 48
    else:
        assert code == 1, text[-3000:]
        assert "Ray training failed after 0 restart(s)" in text and "rerun the same command to resume" in text
        assert not out.exists()  # nothing for convert/register to pick up


# --- gpu: the EKS spot pool's launcher ----------------------------------------------------------------------------


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.parametrize("qlora", [False, True], ids=["bf16", "qlora-nf4"])
def test_gpu_launcher_trains_and_resumes(dataset: Path, tiny_model_dir: Path, tmp_path: Path, qlora: bool):
    if not _cuda():
        pytest.skip("needs CUDA")
    out = tmp_path / "adapter"
    cmd = _cli(["--train-backend", "gpu", "--qlora", str(qlora).lower(), *SMALL[:4], "--checkpoint-every", "100",
                "--log-every", "1"], dataset, tiny_model_dir, out)  # fmt: skip
    assert _interrupt(cmd, signal.SIGTERM, 9, tmp_path / "first.log") == 143
    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["resumed_from_step"] >= 9 and result["steps"] == 48 and "cpu" not in result["device"]
    assert result["peak_gpu_memory_gib"] > 0
    weights = adapter_weights(out)
    assert all(bool(w.isfinite().all()) for w in weights.values())
    assert any(float(w.abs().sum()) > 0 for k, w in weights.items() if "lora_B" in k)  # B starts at zero
