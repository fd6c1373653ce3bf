"""steps/sizing/ on the seed's base models, built from their configs without weights: counts, fits, refusals,
calibration against what was measured.

    pytest tests/test_sizing.py                  # the fast tier
    pytest -m integration tests/test_sizing.py   # + the CPU calibration (trains a tiny model 2 steps)
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from steps import sizing
from steps.sizing import RAY_NODE_GROUPS, Knobs, Shape, memory
from steps.sizing.cluster import CPU_NODE, GPU_CARDS
from steps.sizing.seeds import SEED_BASES, config, largest_pi_base, shape
from tests.conftest import BASE_MODEL, ROOT

SMALL, THREE_B, BIG = "SmolLM2-135M", "Llama-3.2-3B", "Llama-3.1-8B"
# The cluster's defaults (steps/pipeline.py) and a shorter, smaller run.
SETTINGS = {"cluster": (16, 512), "short": (8, 256)}


def knobs(backend: str = "gpu", *, qlora: bool = False, setting: str = "cluster", **changes) -> Knobs:
    batch, seq = SETTINGS[setting]
    return replace(Knobs(backend, qlora, seq, batch, 16, ("Q8_0", "Q4_K_M")), **changes)


def plan(name: str, k: Knobs) -> sizing.Plan:
    return sizing.planning.plan_for(shape(name), k, name)


def requests(p: sizing.Plan, step: str) -> dict[str, str]:
    patch = json.loads(p.pod_patch(step))
    return patch["containers"][0]["resources"]["requests"]


def gib(text: str) -> int:
    assert re.fullmatch(r"[1-9]\d*Gi", text), text
    return int(text[:-2])


# --- The base's shape -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SEED_BASES))
def test_parameter_count_is_within_2_percent_of_the_published_size(name: str):
    assert shape(name).parameters == pytest.approx(SEED_BASES[name][2], rel=0.02)


def test_the_shape_is_read_from_each_config_class():
    qwen, phi = shape("Qwen2.5-3B"), shape("Phi-3.5-mini")
    assert (qwen.head_dim, qwen.kv_heads, qwen.tied) == (128, 2, True)  # Qwen2's config derives head_dim
    assert (phi.head_dim, phi.kv_heads, phi.tied) == (96, 32, False)
    assert qwen.checkpoint_bytes == 2  # bf16 safetensors on the hub


def test_lora_parameters_are_rank_times_in_plus_out_of_every_projection():
    s = shape(SMALL)
    h, i, kv = 576, 1536, 3 * 64
    per_layer = 16 * ((h + h) * 2 + (h + kv) * 2 + (h + i) * 3)  # q, o; k, v; gate, up, down
    assert s.lora_parameters(16) == 30 * per_layer


def test_the_activation_formula_matches_what_autograd_saves():
    """layer_activation_bytes against the bytes autograd actually keeps for backward, counted with
    saved_tensors_hooks over a real forward of train's loss on a small Llama with LoRA and left padding (CPU)."""
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from steps import train

    dims = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=train.TrainConfig.lora_targets.split(","))
    model = get_peft_model(LlamaForCausalLM(LlamaConfig(**dims)), lora)
    model.train()
    batch_size, seq, tail = 4, 96, 8
    rows = [list(range(5, 5 + seq - 10 * (j % 2))) for j in range(batch_size)]  # two rows shorter: padding
    examples = [{"input_ids": r, "labels": [-100] * (len(r) - tail) + r[-tail:]} for r in rows]
    batch = train.collate(examples, 0)
    keep = batch.pop("keep")
    labels = batch.pop("labels")[:, -keep:]
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(**batch, logits_to_keep=keep + 1).logits[:, :-1]
        F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = sum(n for ptr, n in saved.items() if ptr not in weights)
    s = sizing.shape_of(LlamaConfig(**dims))
    tokens = batch_size * seq
    mask = memory._mask_bytes(batch_size, seq, 4)
    logits_kept = 2 * batch_size * (keep + 1) * s.vocab * 4  # the logits and log_softmax's output
    per_token_layer = (kept - mask - logits_kept) / tokens / s.layers
    assert per_token_layer == pytest.approx(sizing.memory.layer_activation_bytes(s, 16, width=4, mask=4), rel=0.1)


# --- Every pod fits its node, or the run is refused -----------------------------------------------------------


def fits(p: sizing.Plan) -> bool:
    """Whether the nodes can hold what this run uses: its backend's training pods, convert-gguf and evaluate."""
    k = p.knobs
    cpu_steps = ["convert-gguf", "evaluate"] + (["train-cpu"] if k.backend == "cpu" else [])
    ok = all(gib(requests(p, step)["memory"]) <= CPU_NODE.memory_gib for step in cpu_steps)
    if k.backend == "gpu":
        ok = ok and p.gpu_card is not None
    if k.backend == "ray":
        ok = ok and any(g.workers_per_pod for g in p.ray)
    return ok


CASES = [
    (name, backend, qlora, setting)
    for name in SEED_BASES
    for backend, qlora in (("cpu", False), ("gpu", False), ("gpu", True), ("ray", False))
    for setting in SETTINGS
]


@pytest.mark.parametrize(("name", "backend", "qlora", "setting"), CASES)
def test_a_run_is_refused_exactly_when_one_of_its_pods_fits_no_node(name: str, backend: str, qlora: bool, setting: str):
    p = plan(name, knobs(backend, qlora=qlora, setting=setting))
    assert bool(sizing.check(p)) == (not fits(p)), sizing.check(p)


@pytest.mark.parametrize(("name", "backend", "qlora", "setting"), CASES)
def test_every_pod_of_an_accepted_run_fits_its_node_group(name: str, backend: str, qlora: bool, setting: str):
    p = plan(name, knobs(backend, qlora=qlora, setting=setting))
    if sizing.check(p):
        return  # refused: the test above checks that it should be
    for step in ("train-cpu", "convert-gguf", "evaluate"):
        if step != "train-cpu" or backend == "cpu":
            assert gib(requests(p, step)["memory"]) <= CPU_NODE.memory_gib
    if backend == "gpu":
        affinity = json.loads(p.pod_patch("train-gpu"))["affinity"]["nodeAffinity"]
        [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
        assert term["key"] == "karpenter.k8s.aws/instance-gpu-memory" and term["operator"] == "Gt"
        assert p.gpu_card.memory_mib > int(term["values"][0]) >= p.steps["train-gpu"].gpu_memory_gib * 1024 - 1
        assert p.steps["train-gpu"].disk_gib <= sizing.cluster.GPU_NODE_EPHEMERAL_GIB
    for g in p.ray:
        assert gib(g.memory) <= g.group.memory_gib
        assert 0 <= g.cpus == g.workers_per_pod * p.ray_threads <= g.group.cpus


def test_pod_patches_request_what_they_limit_in_whole_gibibytes():
    p = plan(THREE_B, knobs("gpu", qlora=True))
    for step in sizing.POD_PATCH_STEPS:
        patch = json.loads(p.pod_patch(step))
        [container] = patch["containers"]
        resources = container["resources"]
        assert container["name"] == "main" and resources["requests"] == resources["limits"]
        assert gib(resources["requests"]["memory"]) >= p.steps[step].memory_gib
        assert gib(resources["requests"]["ephemeral-storage"]) >= p.steps[step].disk_gib
        assert ("affinity" in patch) == (step == "train-gpu")


def test_with_the_run_s_threads_set_the_cpu_steps_request_that_many_cpus():
    """`threads` set (a cluster whose CPU nodes are smaller than the templates' CPU requests): the steps that compute
    with it request exactly those CPUs in their podSpecPatch; the others, and a run without it, request none there."""
    p = plan(SMALL, knobs("cpu"))
    threaded = replace(p, threads=2)
    for step in sizing.POD_PATCH_STEPS:
        assert "cpu" not in requests(p, step)
        assert requests(threaded, step).get("cpu") == ("2" if step in sizing.exports.THREADED_STEPS else None), step
        limits = json.loads(threaded.pod_patch(step))["containers"][0]["resources"]["limits"]
        assert "cpu" not in limits  # no CPU limit: a step is never throttled below what it asked for


def test_the_plan_exports_every_contract_output():
    outputs = plan(SMALL, knobs()).outputs()
    assert set(outputs) == set(sizing.preflight_exports())
    assert all(isinstance(v, int) for k, v in outputs.items() if k.endswith("-workers-per-pod"))


def test_whole_gibibytes_round_up_to_at_least_one():
    assert [sizing.cluster.whole_gib(g) for g in (2.0, 2.01, 0.2)] == [2, 3, 1]


# --- Ray's node groups ------------------------------------------------------------------------------------------


def test_ray_groups_hold_as_many_workers_as_their_cpus_when_memory_allows():
    p = plan(SMALL, knobs("ray", setting="short"))  # at the cluster's defaults the Pi's 3 GiB binds (below)
    per_pod = {g.group.name: g.workers_per_pod for g in p.ray}
    assert per_pod == {g.name: g.cpus // p.ray_threads for g in RAY_NODE_GROUPS}, per_pod


def test_fewer_workers_per_pod_when_memory_binds_and_more_workers_before_larger_micro_batches():
    p = plan(THREE_B, knobs("ray", precision="bf16"))
    for g in p.ray:
        k = replace(p.knobs, precision=g.precision)
        budget = g.group.memory_gib
        if g.workers_per_pod < g.group.cpus // g.threads:  # memory binds: no way fits one more worker
            for way in sizing.micro_options(k, sizing.memory.ray_share(k, g.workers_per_pod + 1)):
                assert (
                    sizing.cluster.whole_gib(sizing.memory.ray_pod_gib(p.shape, k, g.workers_per_pod + 1, way)) > budget
                )
        if g.workers_per_pod:  # at the chosen worker count, the first way of the ordered options that fits is taken
            options = sizing.micro_options(k, sizing.memory.ray_share(k, g.workers_per_pod))
            need = [
                sizing.cluster.whole_gib(sizing.memory.ray_pod_gib(p.shape, k, g.workers_per_pod, m)) for m in options
            ]
            assert g.micro == next(m for m, n in zip(options, need, strict=True) if n <= budget)
    assert any(g.workers_per_pod < g.group.cpus for g in p.ray)  # a 3B base: memory binds somewhere


def test_micro_options_prefer_no_checkpointing_then_the_largest_micro_batch_and_honour_pins():
    k = knobs("cpu", max_seq_len=128, batch_size=16)
    cap = sizing.CPU_MICRO_TOKENS // 128
    assert [(m.examples, m.checkpointing) for m in sizing.micro_options(k, 16)] == [
        *[(n, False) for n in range(cap, 0, -1)],
        *[(n, True) for n in range(cap, 0, -1)],
    ]
    # GPUs: the whole share first, then only sizes train runs (16 at 15 would run as 8 + 8)
    assert [m.examples for m in sizing.micro_options(k, 16, gpu=True)] == [16, 8, 6, 4, 3, 2, 1] * 2
    assert sizing.micro_options(replace(k, micro_batch=3, gradient_checkpointing="on"), 16) == [sizing.Micro(3, True)]
    assert sizing.micro_options(replace(k, micro_batch=32), 5) == [sizing.Micro(5, False), sizing.Micro(5, True)]
    pinned = replace(k, micro_batch=12, gradient_checkpointing="off")
    assert sizing.micro_options(pinned, 16) == [sizing.Micro(8, False)]  # 16 at 12 runs as 8 + 8


@pytest.mark.parametrize("share", [1, 5, 12, 16, 27])
def test_every_micro_batch_planned_is_the_largest_train_runs_for_it(share: int):
    from steps.train.data import micro_batches

    examples = [{"input_ids": [0] * (i + 1)} for i in range(share)]
    k = knobs("gpu", batch_size=share)
    for m in sizing.micro_options(k, share, gpu=True):
        calls = math.ceil(share / m.examples)  # steps/train/loop.py's calls for a micro-batch
        assert max(len(part) for part in micro_batches(list(range(share)), calls, examples)) == m.examples


def test_gradient_checkpointing_is_chosen_only_where_one_example_does_not_fit_without_it():
    s = shape(THREE_B)
    k = knobs("ray", precision="fp32")
    keep_all = sizing.ray_worker_gib(s, k, sizing.Micro(1, False))
    recompute = sizing.ray_worker_gib(s, k, sizing.Micro(1, True))
    assert recompute < keep_all
    budget = (keep_all + recompute) / 2
    assert sizing.fit_micro(sizing.micro_options(k, 16), lambda m: sizing.ray_worker_gib(s, k, m), budget) == (
        sizing.Micro(1, True)
    )
    assert sizing.fit_micro(sizing.micro_options(k, 16), lambda m: sizing.ray_worker_gib(s, k, m), keep_all) == (
        sizing.Micro(1, False)
    )


@pytest.mark.parametrize("name", ["Llama-3.2-3B", "Qwen2.5-3B", "Phi-3.5-mini"])
def test_a_3b_base_at_the_template_defaults_runs_on_the_large_and_medium_groups_and_the_gpu_pool(name: str):
    """The issue's target: the cluster's defaults (batch 16 x 512, precision auto) put a 3B base on the large and
    medium Ray groups and on the GPU pool in bf16, without QLoRA."""
    ray = plan(name, knobs("ray"))
    per_pod = {g.group.name: g.workers_per_pod for g in ray.ray}
    assert per_pod["large"] >= 1 and per_pod["medium"] >= 1, per_pod
    assert not sizing.check(ray)
    gpu = plan(name, knobs("gpu"))
    assert gpu.gpu_card is not None and not sizing.check(gpu), sizing.check(gpu)


def test_an_8b_base_at_the_template_defaults_trains_on_the_gpu_pool_without_qlora():
    p = plan(BIG, knobs("gpu"))
    assert p.gpu_card is not None
    assert not [q for q in sizing.check(p) if q.startswith("train-backend")]


def test_a_ray_run_has_one_precision_the_weakest_deciding_pod_s():
    """One DDP group, one precision: `auto` is float32 only where every group a run has by default holds a float32
    worker, else bf16 on every worker (no float32 worker beside bf16 ones)."""
    for name in SEED_BASES:
        p = plan(name, knobs("ray"))
        assert {g.precision for g in p.ray} == {p.ray_precision}, name
    one = plan("Llama-3.2-1B", knobs("ray"))
    assert one.ray_precision == "fp32"  # float32 fits the large and the medium pods: an AVX2 node at full speed
    three = {g.group.name: g for g in plan(THREE_B, knobs("ray")).ray}
    # 16 GiB cannot load float32 weights beside the mapped bf16 checkpoint (sizing.memory.load_mapped_bytes): the medium
    # pod's weakness makes the whole run bf16, the large group's workers included
    assert three["large"].precision == three["medium"].precision == "bf16"
    assert three["medium"].workers_per_pod == 1 and three["large"].workers_per_pod >= 2
    eight = plan(BIG, knobs("ray"))
    large = next(g for g in eight.ray if g.group.name == "large")
    assert large.precision == "bf16" and large.workers_per_pod == 1  # 8B float32 weights alone are 30 GiB
    assert sizing.ray_group_plan(eight.shape, replace(eight.knobs, precision="fp32"), large.group).workers_per_pod == 0
    pinned = plan(THREE_B, knobs("ray", precision="fp32"))
    assert {g.precision for g in pinned.ray} == {"fp32"}  # pinned: as asked (the medium group then holds none)


@pytest.mark.parametrize("name", list(SEED_BASES))
def test_every_cpu_a_ray_pod_requests_computes_at_one_thread_count(name: str):
    p = plan(name, knobs("ray"))
    assert {g.threads for g in p.ray} == {p.ray_threads} and p.outputs()["ray-threads"] == p.ray_threads
    for g in p.ray:
        assert g.cpus == g.workers_per_pod * p.ray_threads <= g.group.cpus
        assert p.outputs()[sizing.ray_cpus_output(g.group.name)] == str(g.cpus)


def test_the_thread_count_keeps_the_most_of_the_default_groups_cpus_busy():
    """The 3B run the issue measured: 8 of the 12 CPUs idle at 2 threads per worker. Now 4 threads each: two bf16
    workers per large pod, one per medium pod, every CPU of both computing at the same pace."""
    p = plan(THREE_B, knobs("ray"))
    per_pod = {g.group.name: (g.workers_per_pod, g.cpus) for g in p.ray}
    assert p.ray_threads == 4 and per_pod["large"] == (2, 8) and per_pod["medium"] == (1, 4), per_pod
    default = [g for g in RAY_NODE_GROUPS if g.default_replicas]
    k = replace(p.knobs, precision=p.ray_precision)
    for threads in range(1, min(g.cpus for g in default) + 1):  # no other count keeps more of them busy
        busy = sum(sizing.planning.ray_group_at(p.shape, k, g, threads).cpus for g in default)
        assert busy <= sum(g.cpus for g in p.ray if g.group.default_replicas)
    small = plan(SMALL, knobs("ray", setting="short"))  # memory never binds: 2 threads keeps the opt-in Pi's worker
    assert small.ray_threads == 2 and all(g.cpus == g.group.cpus for g in small.ray)


@pytest.mark.parametrize("name", [n for n in SEED_BASES if SEED_BASES[n][2] >= 1e9])
def test_the_pis_get_no_workers_for_a_3b_or_larger_base(name: str):
    for setting in SETTINGS:
        pi = next(g for g in plan(name, knobs("ray", setting=setting)).ray if g.group.arch == "arm64")
        assert pi.workers_per_pod == 0 and pi.pod_memory_gib > 3


def test_the_pis_take_the_largest_base_that_fits_in_3_gib():
    """A Pi (arm64: no native bf16, so float32 unless only bf16 fits) needs gradient checkpointing for any seed base;
    with checkpointing's cost measured (CPU_CHECKPOINT_LAYERS), SmolLM2-135M's float32 worker at the cluster's
    defaults needs 3.06 GiB, so the Pi takes none of the seed list there, and SmolLM2-135M at batch 8 x 256."""
    assert largest_pi_base(knobs("ray")) == ""
    pi = next(g for g in plan(SMALL, knobs("ray")).ray if g.group.name == "pi")
    assert pi.workers_per_pod == 0 and 3 < pi.pod_memory_gib < 3.1
    assert largest_pi_base(knobs("ray", setting="short")) == SMALL
    pi = next(g for g in plan(SMALL, knobs("ray", setting="short")).ray if g.group.name == "pi")
    assert pi.workers_per_pod == 1 and gib(pi.memory) <= 3
    bigger = plan("SmolLM2-360M", knobs("ray", setting="short"))
    pi = next(g for g in bigger.ray if g.group.name == "pi")
    # the run is float32 (the default groups hold float32 workers), so the Pi's worker would be too
    assert bigger.ray_precision == "fp32" and pi.workers_per_pod == 0 and pi.pod_memory_gib > 3


def test_a_group_the_plan_leaves_out_is_named_with_what_would_fit_it():
    """The Pi decision: the Pis stay the 4 GB models the repository declares (3 GiB allocatable; no inventory names
    others), and at the cluster's defaults the plan leaves the group out and preflight says so: the group, the worker's
    need, that ray-pi-workers is overridden, and the settings that fit (the longest max-seq-len among them)."""
    p = plan(SMALL, knobs("ray"))
    [note] = [n for n in sizing.ray_notes(p) if n.startswith("the pi group")]
    assert "3 GiB allocatable" in note and "3.1 GiB pod" in note and "no replicas whatever ray-pi-workers asks" in note
    seq = int(re.search(r"a max-seq-len of at most (\d+)", note)[1])
    assert 256 < seq < 512
    assert next(g for g in plan(SMALL, knobs("ray", max_seq_len=seq)).ray if g.group.name == "pi").workers_per_pod
    assert not next(
        g for g in plan(SMALL, knobs("ray", max_seq_len=seq + 1)).ray if g.group.name == "pi"
    ).workers_per_pod
    assert "precision bf16" in note and "raise its ram_gib in sizing.cluster.RAY_NODE_GROUPS" in note
    from steps.pipeline import ray_replicas_param

    assert ray_replicas_param("pi") in note  # the parameter the workflow overrides, by its name
    # a group that holds workers is not named; the other backends have no Ray groups to leave out
    assert not [n for n in sizing.ray_notes(p) if n.startswith(("the large", "the medium", "the small"))]
    assert sizing.ray_notes(plan(SMALL, knobs("cpu"))) == []
    # no setting of this run fits a 3B worker into a Pi: only its memory could
    [note] = [n for n in sizing.ray_notes(plan(THREE_B, knobs("ray"))) if n.startswith("the pi group")]
    assert "use " not in note and "to train on it, if its nodes have more memory than the 4 GiB declared" in note


@pytest.mark.slow
def test_the_sizes_script_runs_where_pytest_is_not_installed():
    """README's set-up has no pytest: `python scripts/sizes.py` must not import the tests."""
    code = "import sys, runpy; sys.modules['pytest'] = None; sys.argv = ['sizes.py']; " \
           "runpy.run_path('scripts/sizes.py', run_name='__main__')"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"| {THREE_B} |" in done.stdout and "x 4 threads, bf16 |" in done.stdout


# --- A small base does not reserve a big base's pods --------------------------------------------------------------


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_135m_run_requests_a_small_fraction_of_a_3b_run(setting: str):
    small, big = plan(SMALL, knobs(setting=setting)), plan(THREE_B, knobs(setting=setting))
    for step in ("train-cpu", "convert-gguf", "evaluate"):
        for resource in ("memory", "ephemeral-storage"):
            ratio = gib(requests(small, step)[resource]) / gib(requests(big, step)[resource])
            assert ratio <= 0.35, (step, resource, ratio)  # a third at most: the fixed parts (process, scratch)
    # train-gpu's host memory is mostly the CUDA process's; what grows with the base is the card and the disk (the
    # card's need compared at one micro-batch: each takes the largest micro-batch its card holds).
    one = sizing.Micro(1, False)
    assert sizing.memory.gpu_card_gib(small.shape, small.knobs, one) <= 0.3 * sizing.memory.gpu_card_gib(
        big.shape, big.knobs, one
    )
    assert small.steps["train-gpu"].disk_gib <= 0.3 * big.steps["train-gpu"].disk_gib


# --- Refusals say what to do --------------------------------------------------------------------------------------


def test_an_8b_float32_ray_run_is_refused_naming_the_base_the_need_the_node_and_the_fixes():
    p = plan(BIG, knobs("ray", precision="fp32"))
    [problem] = [q for q in sizing.check(p) if q.startswith("train-backend ray")]
    large = next(g for g in p.ray if g.group.name == "large")
    assert BIG in problem and f"{large.pod_memory_gib:.1f} GiB" in problem
    assert "large: 31 GiB allocatable" in problem  # the biggest group there was
    assert "precision bf16" in problem  # bf16 weights fit; or the GPU pool, quoting the plan of the card it gets:
    gpu = plan(BIG, knobs("gpu"))
    assert gpu.gpu_card.name == "NVIDIA A10G"
    quoted = f"train-backend gpu in bf16 ({gpu.steps['train-gpu'].gpu_memory_gib:.1f} GiB of an NVIDIA A10G, "
    assert quoted in problem and "42.7" not in problem  # not the L40S's micro-batch-16 plan
    assert not [q for q in sizing.check(plan(BIG, knobs("ray", precision="bf16"))) if q.startswith("train-backend")]


def seventy_b() -> Shape:
    """Llama-3.1-70B's dimensions: no node of either pool holds its weights."""
    big = config(BIG, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64)
    return sizing.shape_of(big)


@pytest.mark.parametrize("backend", ["cpu", "ray", "gpu"])
def test_a_refusal_with_no_setting_that_fits_says_so_in_a_sentence(backend: str):
    p = sizing.plan_for(seventy_b(), knobs(backend, precision="bf16"), "Llama-3.1-70B")
    [problem] = [q for q in sizing.check(p) if q.startswith(f"train-backend {backend}")]
    assert "use no" not in problem and "max-seq-len fits" not in problem, problem  # the garbled clause, gone
    assert "pick a smaller base model" in problem, problem
    assert not re.search(r"; use ?(\(|$| or)", problem), problem  # no empty "use"


def test_a_relaxation_that_fits_only_with_another_is_offered_with_it():
    """8B float32 at micro-batch 8 with checkpointing on: neither bf16 nor micro-batch 0 alone fits the large node,
    both together do (the old refusal said no setting held it and its weights alone did not fit)."""
    k = knobs("cpu", precision="fp32", micro_batch=8, gradient_checkpointing="on", max_seq_len=4096)
    [problem] = [q for q in sizing.check(plan(BIG, k)) if q.startswith("train-backend cpu")]
    assert "precision bf16 (a bf16 base: half the weights; slow where the CPU lacks AMX or AVX-512-BF16) together " \
           "with micro-batch 0" in problem  # fmt: skip
    assert "weights alone" not in problem
    assert not [q for q in sizing.check(plan(BIG, replace(k, precision="bf16", micro_batch=0)))
                if q.startswith("train-backend")]  # fmt: skip


# Clauses that mark a garbled sentence: two verbs colliding, the old dangling fits-clause, an empty "use", a doubled
# word, an article the number does not take, text left unformatted.
GARBLED = {
    "verbs collide": r"\b(needs|has|is|fits|holds|use|does|do)\s+(needs|has|is|fits|holds|use|does)\b",
    "a term list runs into a verb": r"(GiB|context) (needs|has|is)\b",
    "the old clause": r"use no\b|max-seq-len fits|weights alone do not$",
    "empty use": r"\buse ?(\(|$|;|,| or\b)",
    "doubled word": r"\b([a-z]+) \1\b",
    "a before a vowel sound": r"\ba (8|1[18]\b|1[18]\.)",
    "an before a consonant": r"\ban (?!8|1[18]|NVIDIA|[aeiou])",
    "unformatted": r"[{}]|\bNone\b|\bnan\b|\binf\b",
    "punctuation": r" [,;:.)]|\( |[,;]{2}|\.\.|  ",
}
FIXES = ("use ", "pick ", "add ", "enlarge ", "give ", "raise ")


def garbled(message: str) -> list[str]:
    """What is wrong with `message` as an English sentence that names a fix."""
    found = [name for name, pattern in GARBLED.items() if re.search(pattern, message)]
    depth = 0
    for c in message:
        depth += {"(": 1, ")": -1}.get(c, 0)
        found += ["a parenthesis closes unopened"] if depth < 0 else []
    found += ["a parenthesis left open"] if depth else []
    found += [] if any(f in message.split(";", 1)[-1] for f in FIXES) else ["names no fix"]
    return found


def test_the_garbled_check_catches_the_old_messages():
    old = [
        "train-backend gpu cannot hold X: bf16 on the card, micro-batch 8: weights 0.3 GiB + CUDA context needs a "
        "291.8 GiB card and the biggest is smaller; use qlora true",
        "train-backend cpu cannot hold X: training needs 47 GiB and the node has less; use no shorter max-seq-len "
        "fits: the weights alone do not",
        "train-backend ray cannot hold X: one worker needs a 8.9 GiB pod; use ",
    ]
    assert all(garbled(m) for m in old), [garbled(m) for m in old]


REFUSAL_GRID = list(itertools.product(
    [*SEED_BASES, "Llama-3.1-70B"], [("cpu", False), ("ray", False), ("gpu", False), ("gpu", True)],
    [512, 32768], ["auto", "fp32"], [0, 8], ["auto", "off"],
))  # fmt: skip


@pytest.mark.slow
def test_every_refusal_and_note_sizing_prints_reads_as_a_sentence_naming_its_fix():
    """Every message check(), check_forecast() and ray_notes() give over a grid of bases, backends and budgets
    (max-seq-len, precision, micro-batch, checkpointing; a token count past the deadline; a price table without the
    backend)."""
    bad, seen = {}, 0
    for name, (backend, qlora), seq, precision, micro, ckpt in REFUSAL_GRID:
        s = seventy_b() if name == "Llama-3.1-70B" else shape(name)
        k = knobs(backend, qlora=qlora, max_seq_len=seq, precision=precision, micro_batch=micro,
                  gradient_checkpointing=ckpt)  # fmt: skip
        p = sizing.plan_for(s, k, name)
        f = sizing.plan_forecast(p, 10**10, {"gpu": 1.0})
        for message in [*sizing.check(p), *sizing.check_forecast(p, f, {"gpu": 1.0}), *sizing.ray_notes(p)]:
            seen += 1
            if garbled(message):
                bad[message] = garbled(message)
    assert seen > 500 and not bad, list(bad.items())[:3]


def test_a_gpu_refusal_gives_a_max_seq_len_that_fits():
    k = knobs("gpu", max_seq_len=8192, gradient_checkpointing="off")
    p = plan(BIG, k)
    [problem] = [q for q in sizing.check(p) if q.startswith("train-backend gpu")]
    assert "gradient-checkpointing auto" in problem
    seq = int(re.search(r"max-seq-len of at most (\d+)", problem)[1])
    assert 0 < seq < 8192
    assert (
        not sizing.check(plan(BIG, replace(k, max_seq_len=seq)))
        or "convert-gguf" in sizing.check(plan(BIG, replace(k, max_seq_len=seq)))[0]
    )
    assert [q for q in sizing.check(plan(BIG, replace(k, max_seq_len=seq + 1))) if q.startswith("train-backend")]


def test_an_8b_base_converts_within_32_gib_whatever_the_backend():
    """convert-gguf holds no model whole (steps/convert_gguf/streamed.py): its peak is llama.cpp checking the F16 GGUF
    (15 GiB for an 8B), which the large group's 32 GiB nodes hold."""
    for backend, qlora in (("gpu", True), ("ray", False)):
        p = plan(BIG, knobs(backend, qlora=qlora))
        assert p.steps["convert-gguf"].memory_gib <= 32
        assert not [q for q in sizing.check(p) if q.startswith("convert-gguf")]
        assert sizing.memory.gguf_bytes(p.shape, "F16") <= max(sizing.convert_memory(p.shape, p.knobs).values())


def test_values_the_steps_refuse_are_left_to_them():
    """A mistyped backend or quantisation is train's and convert-gguf's to name (their config_problems): the plan
    sizes what it knows and does not report it a second time."""
    p = plan(SMALL, knobs("tpu", quantizations=("Q8_0", "Q3_X")))
    assert sizing.check(p) == [] and set(p.outputs()) == set(sizing.preflight_exports())


# --- The cluster's rules, read from its files ---------------------------------------------------------------------


def test_the_gpu_cards_are_the_nodepools_families():
    nodepool = yaml.safe_load((ROOT / "infra/karpenter/nodepool-gpu-spot.yaml").read_text())
    requirements = {r["key"]: r for r in nodepool["spec"]["template"]["spec"]["requirements"]}
    families = requirements["karpenter.k8s.aws/instance-family"]
    assert families["operator"] == "In" and set(families["values"]) == {c.family for c in GPU_CARDS}
    assert sizing.cluster.GPU_MEMORY_LABEL not in requirements  # the pool does not cap card memory itself


def test_the_gpu_node_disk_is_the_node_classes_root_volume_less_image_and_eviction_margin():
    nodeclass = yaml.safe_load((ROOT / "infra/karpenter/ec2nodeclass-gpu.yaml").read_text())
    [root] = [d for d in nodeclass["spec"]["blockDeviceMappings"] if d.get("rootVolume")]
    volume = int(root["ebs"]["volumeSize"].removesuffix("Gi"))
    assert 0.9 * volume - 10 >= sizing.cluster.GPU_NODE_EPHEMERAL_GIB


def test_convert_ggufs_llama_cpp_context_is_the_one_sized_here():
    """gguf_parity opens its one Llama through open_gguf, whose context defaults to settings.CONVERT_N_CTX (the name,
    not a copy of the number); the eval split's documents may take up to settings.parity_n_ctx(), which convert_memory
    sizes; its references are of every probe document."""
    import inspect

    tree = ast.parse((ROOT / "steps/gguf/parity.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Llama"]
    assert len(calls) == 1
    from steps.contract import serving_config
    from steps.gguf import parity, settings

    assert inspect.signature(parity.open_gguf).parameters["n_ctx"].default is settings.CONVERT_N_CTX
    assert settings.parity_n_ctx() == max(settings.CONVERT_N_CTX, serving_config.SERVING.n_ctx)
    assert len(parity.PROBE_DOCUMENTS) == sizing.memory.PARITY_PROBES
    s, k = shape(THREE_B), knobs()
    [sized] = [v for name, v in sizing.convert_memory(s, k).items() if name.startswith("largest phase")]
    kv_cache_per_position = s.layers * 2 * s.kv * 2
    assert sized >= sizing.memory.gguf_bytes(s, "F16") + settings.CONVERT_N_CTX * kv_cache_per_position
    assert sized >= sizing.memory.gguf_bytes(s, "Q8_0") + settings.parity_n_ctx() * kv_cache_per_position


def test_an_eval_row_longer_than_the_served_context_is_refused_before_llama_cpp_opens(tmp_path):
    from types import SimpleNamespace

    from steps.gguf import parity, settings

    class Tokenizer:  # a token per character: the row's length is its text's
        def apply_chat_template(self, messages, **kwargs):
            return "".join(m["content"] for m in messages)

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) % 100 for c in text]}

    rows = [{"id": "long-1", "document": "x" * (settings.parity_n_ctx() + 10), "summary": "s"}]
    with pytest.raises(ValueError, match="long-1"):
        parity.eval_parity(tmp_path / "missing.gguf", SimpleNamespace(), Tokenizer(), rows, 0, 1)


def test_evaluate_is_sized_for_the_served_context(monkeypatch: pytest.MonkeyPatch):
    from steps.contract import serving_config

    s, k = shape(THREE_B), knobs()
    before = sizing.memory.evaluate_memory(s, k)["llama.cpp context"]
    served = serving_config.SERVING
    monkeypatch.setattr(serving_config, "SERVING", replace(served, n_ctx=2 * served.n_ctx))
    kv_cache = served.n_ctx * s.layers * 2 * s.kv * 2  # f16 keys and values of every layer
    assert sizing.memory.evaluate_memory(s, k)["llama.cpp context"] > before + kv_cache


def test_a_k_quant_is_known_by_the_quantisation_table_not_by_its_name(monkeypatch: pytest.MonkeyPatch):
    """Rows that are no multiple of 256 do not fit a K-quant's super-blocks: such a shape is sized at Q8_0 for every
    K-quant or IQ row of steps/gguf/quants.py, whatever its name (Q4_K_S and IQ4_XS end in neither _K nor _K_M), and
    at the row's own bits on a shape that fits."""
    from steps.gguf import quants

    for name, bits in (("Q4_K_S", 4.58), ("IQ4_XS", 4.25)):  # types llama.cpp has, added to the table for this test
        monkeypatch.setitem(quants.QUANTS, name, quants.Quant(name, ftype=0, bits=bits, block=256, k_quant=True))
    odd, fits = shape(SMALL), shape(THREE_B)  # hidden 576 (not a multiple of 256); 3072 and 8192 (multiples)
    k_quants = [q.name for q in quants.QUANTS.values() if q.k_quant]
    assert {"Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "IQ4_XS"} <= set(k_quants)
    for name in k_quants:
        assert sizing.memory.gguf_bytes(odd, name) == sizing.memory.gguf_bytes(odd, "Q8_0"), name
        assert sizing.memory.gguf_bytes(fits, name) < sizing.memory.gguf_bytes(fits, "Q8_0"), name
    assert sizing.memory.gguf_bytes(odd, "F16") > sizing.memory.gguf_bytes(odd, "Q8_0")  # not K-quants: their own bits


def test_convert_disk_covers_two_float32_checkpoints_and_argos_copies_of_the_gguf_folder():
    p = plan(THREE_B, knobs())
    s, k = p.shape, p.knobs
    folder = sum(sizing.disk.gguf_folder_bytes(s, k).values())
    assert p.steps["convert-gguf"].disk_gib * 2**30 >= 2 * 4 * s.parameters + folder
    assert p.steps["convert-gguf"].disk_gib * 2**30 >= (1 + sizing.disk.ARGO_OUTPUT_COPIES) * folder


# --- Calibration --------------------------------------------------------------------------------------------------

# README.md: benchmarks/gpu_train.py on one H200, random-init Llamas of tests/tiny.SHAPES with SmolLM2's tokenizer
# (vocabulary 49152, untied), batch 8, the committed training split: torch.cuda.max_memory_allocated in GiB.
README_PEAKS = {("1b", False): 7.95, ("3b", False): 16.5, ("1b", True): 2.26, ("3b", True): 4.16}
# That split's batches as train_loop builds them (batch 8, 2 epochs, SmolLM2's tokenizer): the widest is 264 tokens,
# the longest summary tail 49 (test_the_benchmark_batch_geometry_is_the_committed_splits recomputes them).
BENCH_WIDTH, BENCH_TAIL = 264, 49


def bench_shape(size: str) -> Shape:
    from tests.tiny import SHAPES

    h, i, layers, heads, kv_heads = SHAPES[size]
    dims = dict(hidden_size=h, intermediate_size=i, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, tie_word_embeddings=False)  # fmt: skip
    return sizing.shape_of(config(SMALL, **dims))


def gpu_allocated_gib(s: Shape, k: Knobs, micro: sizing.Micro) -> float:
    """What torch.cuda.max_memory_allocated would report (train's peak_gpu_memory_gib): the modelled terms alone."""
    return sum(sizing.train_memory(s, k, micro, device="qlora" if k.qlora else "gpu").values()) / sizing.GIB


@pytest.mark.parametrize(("size", "qlora"), list(README_PEAKS))
def test_the_gpu_plan_is_above_the_measured_peak_and_not_absurdly(size: str, qlora: bool):
    measured = README_PEAKS[(size, qlora)]
    k = knobs("gpu", qlora=qlora, batch_size=8, max_seq_len=512)
    planned = gpu_allocated_gib(bench_shape(size), k, sizing.Micro(8, qlora))
    assert measured < planned <= 2 * measured


@pytest.mark.parametrize(("size", "qlora"), list(README_PEAKS))
def test_the_gpu_model_at_the_benchmarks_batches_is_within_5_percent_of_the_measured_peak(size: str, qlora: bool):
    s = bench_shape(size)
    terms = sizing.train_memory(
        s, knobs("gpu", qlora=qlora, batch_size=8, max_seq_len=BENCH_WIDTH), sizing.Micro(8, qlora),
        device="qlora" if qlora else "gpu",
    )  # fmt: skip
    terms["logits"] = 8 * BENCH_TAIL * s.vocab * sizing.memory.LOGIT_BYTES
    assert sum(terms.values()) / 2**30 == pytest.approx(README_PEAKS[(size, qlora)], rel=0.05)


# `python -m benchmarks.gpu_train --plan-card "NVIDIA A10G,NVIDIA L40S" --batch-size 16` on one H200 (2026-12-04;
# driver 580.159, torch 2.11+cu130): random-init Llamas of the seeds' whole shapes (128k vocabularies), max-seq-len
# 512 with left-padded micro-batches that wide, train pinned to the plan's way for each card and its allocator held to
# the card less the context. The card's peak (context + the allocator's reserved peak) in GiB, and the way it ran.
GPU_CARD_PEAKS = {
    ("Llama-3.2-1B", "g5"): (sizing.Micro(8, False), 15.08),
    ("Llama-3.2-1B", "g6e"): (sizing.Micro(16, False), 25.08),
    ("Llama-3.2-3B", "g5"): (sizing.Micro(4, False), 18.47),
    ("Llama-3.2-3B", "g6e"): (sizing.Micro(8, False), 30.33),
    ("Llama-3.1-8B", "g5"): (sizing.Micro(4, True), 18.83),
    ("Llama-3.1-8B", "g6e"): (sizing.Micro(4, False), 34.95),
}


@pytest.mark.parametrize(("base", "family"), list(GPU_CARD_PEAKS))
def test_the_gpu_plan_picks_the_way_measured_on_a_card_and_holds_its_peak(base: str, family: str):
    """No constant was fitted on these rows (the context was read apart from the totals; the terms are counted):
    each plan is above the measured card peak, by at most a quarter, and still picks the way that was measured."""
    micro, peak = GPU_CARD_PEAKS[(base, family)]
    card = next(c for c in GPU_CARDS if c.family == family)
    s, k = shape(base), knobs("gpu")
    assert sizing.planning.gpu_micro(s, k, card) == micro
    assert peak < memory.gpu_card_gib(s, k, micro) <= 1.25 * peak


# `python -m benchmarks.cpu_rows` on a lent 16-core Xeon (AMX, 126 GiB, torch 2.11+cu130; 2026-12-04), the files in
# CPU_RESULTS: train-cpu processes on random-init Llama-3.2-1B and -3B (their whole shapes, saved as bf16 safetensors),
# rows of 512 tokens with a 128-token summary tail, 2 optimiser steps, 4 threads each. The process's VmHWM in GiB by
# (precision, gradient checkpointing, micro-batch). float32 with checkpointing peaks at loading (float32 weights
# beside the mapped bf16 checkpoint), before training adds anything.
CPU_RESULTS = ROOT / "benchmarks/results/2026-12-04-xeon16-h200"
# Llama-3.2-1B (run2-1b/rows.json): CPU_RUNTIME_GIB, CPU_ACTIVATION_FACTOR and CPU_CHECKPOINT_LAYERS were fitted on
# these (`python -m benchmarks.cpu_rows --refit`, which takes run1-grid's one complete 1B row too, the same peak).
CPU_FIT_ROWS = {
    ("fp32", False, 1): 8.59,
    ("fp32", False, 2): 11.45,
    ("fp32", True, 1): 7.70,
    ("fp32", True, 2): 7.70,
    ("bf16", False, 1): 5.82,
    ("bf16", False, 2): 8.30,
    ("bf16", True, 1): 4.08,
    ("bf16", True, 2): 4.94,
}
# Llama-3.2-3B (run1-grid/rows.json; bf16 without checkpointing at micro-batch 1, which did not start its first step
# within run1's time limit, from run4-3b-bf16/rows.json, run alone): nothing was fitted on these.
CPU_CHECK_ROWS = {
    ("fp32", False, 1): 19.45,
    ("fp32", False, 2): 25.54,
    ("fp32", True, 1): 18.75,
    ("fp32", True, 2): 18.75,
    ("bf16", False, 1): 11.96,
    ("bf16", False, 2): 16.54,
    ("bf16", True, 1): 8.32,
    ("bf16", True, 2): 9.36,
}
CPU_ROWS = {
    "Llama-3.2-1B": (("run2-1b",), CPU_FIT_ROWS),
    "Llama-3.2-3B": (("run1-grid", "run4-3b-bf16"), CPU_CHECK_ROWS),
}
CPU_RUNS = ("run1-grid", "run2-1b", "run4-3b-bf16")


def cpu_row_plan(base: str, precision: str, checkpointing: bool, micro: int) -> float:
    k = knobs("cpu", precision=precision, max_seq_len=512)
    return memory.cpu_train_gib(shape(base), k, sizing.Micro(micro, checkpointing))


@pytest.mark.parametrize("row", list(CPU_CHECK_ROWS))
def test_every_cpu_check_row_is_planned_within_15_percent_above_its_measured_peak(row: tuple[str, bool, int]):
    peak = CPU_CHECK_ROWS[row]
    assert 1.0 <= cpu_row_plan("Llama-3.2-3B", *row) / peak <= 1.15


@pytest.mark.parametrize("row", list(CPU_FIT_ROWS))
def test_every_cpu_fit_row_is_planned_at_or_above_its_measured_peak(row: tuple[str, bool, int]):
    assert cpu_row_plan("Llama-3.2-1B", *row) >= CPU_FIT_ROWS[row]


def test_the_cpu_rows_here_are_the_committed_results():
    for base, (runs, peaks) in CPU_ROWS.items():
        rows = [r for run in runs for r in json.loads((CPU_RESULTS / run / "rows.json").read_text())["rows"]]
        ran = [r for r in rows if r["base"] == base and not r["cgroup_limit"] and r["status"] == "ok"]
        done = {(r["precision"], r["checkpointing"], r["micro"]): round(r["peak_gib"], 2) for r in ran}
        assert all(r["steps_done"] == r["steps"] for r in ran)
        assert done == peaks, base


def test_the_cpu_constants_are_the_refit_on_the_fit_rows():
    """One place for the constants, and the command that made them: `--refit` on the committed files."""
    from benchmarks import cpu_rows

    rows = [r for run in CPU_RUNS for r in json.loads((CPU_RESULTS / run / "rows.json").read_text())["rows"]]
    fit_rows, check_rows = cpu_rows.split_rows(rows, "base=Llama-3.2-1B")
    assert {r["base"] for r in check_rows} == {"Llama-3.2-3B"}
    fit = cpu_rows.refit(fit_rows)
    assert (fit.runtime_gib, fit.activation_factor, fit.checkpoint_layers) == (
        memory.CPU_RUNTIME_GIB,
        memory.CPU_ACTIVATION_FACTOR,
        memory.CPU_CHECKPOINT_LAYERS,
    )


# benchmarks/convert_memory.py on this machine (2 shared cores, 2026-12-02): convert-gguf's peak — the larger of the
# step's VmHWM and its process tree's RSS sum sampled every 0.1 s — in GiB, with the run's eval batch (documents,
# padded width, rows per document) and --parity-tokens: random-init Llama 3.2 3B, bf16, SmolLM2's tokenizer.
CONVERT_PEAKS = {"3b": ((8, 243, 50), 8, 7.35)}


@pytest.mark.parametrize("size", list(CONVERT_PEAKS))
def test_the_convert_model_at_the_benchmarks_geometry_is_within_15_percent_above_the_measured_peak(size: str):
    from transformers import LlamaConfig

    from benchmarks.convert_memory import SHAPES

    h, i, layers, heads, kv_heads, vocab, tied = SHAPES[size]
    s = sizing.shape_of(LlamaConfig(hidden_size=h, intermediate_size=i, num_hidden_layers=layers,
                                    num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                                    tie_word_embeddings=tied, dtype="bfloat16"))  # fmt: skip
    geometry, tokens, measured = CONVERT_PEAKS[size]
    terms = sizing.convert_memory(s, knobs(quantizations=("Q8_0",)), eval_batch=geometry, parity_tokens=tokens)
    assert measured <= sizing.total_gib(terms, sizing.PROCESS_GIB) <= 1.15 * measured


def test_the_convert_plan_is_above_the_measured_peak_and_not_absurdly():
    """README.md: benchmarks/convert_overhead.py measured convert-gguf's peak RSS on SmolLM2-135M (no base cache,
    the default ladder) at 1.84 GB."""
    planned = plan(SMALL, knobs()).steps["convert-gguf"].memory_gib
    assert 1.84 < planned <= 2 * 1.84


@pytest.mark.skipif(not (BASE_MODEL / "tokenizer.json").is_file(), reason=f"no tokenizer at {BASE_MODEL}")
def test_the_benchmark_batch_geometry_is_the_committed_splits():
    from transformers import AutoTokenizer

    from steps import train
    from steps.core.dataset import load_split

    tokenizer = AutoTokenizer.from_pretrained(BASE_MODEL)
    examples = train.encode_rows(tokenizer, load_split(ROOT / "data/summaries", "train"), 512)
    cfg = train.TrainConfig(dataset=".", out=".", batch_size=8, epochs=2.0)
    batches = train.global_batches(examples, cfg)
    steps, _ = train.schedule(len(examples), cfg)
    widths, tails = [], []
    for _ in range(steps):
        rows = [examples[i] for i in next(batches)]
        widths.append(max(len(r["input_ids"]) for r in rows))
        tails.append(max(sum(t != -100 for t in r["labels"]) for r in rows))
    assert (max(widths), max(tails)) == (BENCH_WIDTH, BENCH_TAIL)


CPU_CALIBRATION = """
import json, sys, tempfile
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig
from steps import sizing, train
from tests.tiny import SHAPES
# What the imports alone hold (torch's CUDA build maps more than its CPU build): the plan's PROCESS_GIB part.
imported_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
batch, seq, tail = (int(a) for a in sys.argv[1:4])
precision = sys.argv[4]
h, i, layers, heads, kv = (int(a) for a in sys.argv[5:10]) if len(sys.argv) > 5 else SHAPES["tiny"]
torch.manual_seed(0)
config = LlamaConfig(hidden_size=h, intermediate_size=i, num_hidden_layers=layers, num_attention_heads=heads,
                     num_key_value_heads=kv, vocab_size=49152, tie_word_embeddings=True)
lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=train.TrainConfig.lora_targets.split(","))
# Built in the dtype build_model loads (bf16 where the run computes bf16): a float32 model cast afterwards would leave
# its float32 init in the heap's high-water mark.
base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
model = get_peft_model(base, lora)
rows = [[5 + (j * 7 + t) % 49000 for t in range(seq)] for j in range(2 * batch)]
examples = [{"input_ids": r, "labels": [-100] * (seq - tail) + r[-tail:]} for r in rows]
with tempfile.TemporaryDirectory() as tmp:
    cfg = train.TrainConfig(dataset=tmp, out=tmp, batch_size=batch, max_seq_len=seq, checkpoint_every=0, log_every=99,
                            precision=precision)
    log = train.train_loop(model, examples, cfg, 0, train.DirCheckpoints(tmp + "/checkpoints"),
                           micro=sizing.Micro(batch, False))
# VmHWM, this process image's own high-water mark: ru_maxrss survives exec on Linux, so a child spawned by a pytest
# that holds GBs would report the parent's peak (seen in CI: 5.3 GiB for a 1.2 GiB run).
hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"steps": len(log), "peak_gib": hwm_kib / 2**20, "imported_gib": imported_kib / 2**20}))
"""


@pytest.mark.integration
def test_the_cpu_plan_is_above_a_measured_two_step_run_within_1_5x():
    """tests/tiny's Llama (vocabulary 49152) trained 2 steps by train_loop on CPU, every row at max-seq-len with a
    summary tail of TAIL_TOKENS (the plan's worst case): peak RSS vs plan(). Measured here: 1.23 GiB vs 1.64 (1.33x)."""
    batch, seq = 8, 256
    measured = _calibrate(batch, seq, "fp32")
    from tests.tiny import SHAPES

    h, i, layers, heads, kv_heads = SHAPES["tiny"]
    tiny = sizing.shape_of(config(SMALL, hidden_size=h, intermediate_size=i, num_hidden_layers=layers,
                                  num_attention_heads=heads, num_key_value_heads=kv_heads))  # fmt: skip
    planned = sizing.memory.cpu_train_gib(
        tiny, knobs("cpu", batch_size=batch, max_seq_len=seq, precision="fp32"), sizing.Micro(batch, False)
    )
    assert measured["peak_gib"] < planned <= 1.5 * measured["peak_gib"]


def _calibrate(
    batch: int, seq: int, precision: str, dims: tuple[int, ...] = (), tail: int = sizing.TAIL_TOKENS
) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CPU_CALIBRATION, str(batch), str(seq), str(tail), precision,
         *map(str, dims)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "2"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["steps"] == 2
    return measured


# Two layers of Llama-3.2-3B's shape (hidden 3072, intermediate 8192, 24 heads, 8 KV heads; vocabulary 49152), one
# example of THREE_B_TOKENS tokens, half of them summary: weights that dwarf the activations. Few tokens because bf16
# backward on a CPU without native bf16 runs torch's reference GEMM (cpublas_gemm_impl): 64 tokens took over 300 s on
# this 2-core AVX2 machine and in CI; what is measured here is memory, which the weights decide.
THREE_B_LAYERS = (3072, 8192, 2, 24, 8)
THREE_B_TOKENS = 8


@pytest.fixture(scope="module")
def three_b_layer_runs() -> dict[str, dict]:
    """train_loop on THREE_B_LAYERS, 2 steps, in fp32 and in bf16 (about a minute together)."""
    return {p: _calibrate(1, THREE_B_TOKENS, p, THREE_B_LAYERS, tail=THREE_B_TOKENS // 2) for p in ("fp32", "bf16")}


def _three_b_layers(precision: str) -> tuple[sizing.Shape, sizing.Knobs]:
    h, i, layers, heads, kv_heads = THREE_B_LAYERS
    layer = sizing.shape_of(config(SMALL, hidden_size=h, intermediate_size=i, num_hidden_layers=layers,
                                   num_attention_heads=heads, num_key_value_heads=kv_heads))  # fmt: skip
    return layer, knobs("cpu", batch_size=1, max_seq_len=THREE_B_TOKENS, precision=precision)


@pytest.mark.integration
def test_a_bf16_run_holds_half_the_weights_of_a_float32_run(three_b_layer_runs: dict[str, dict]):
    """Where the run computes bf16 the frozen base is loaded in bf16 (steps/train/model.py): on THREE_B_LAYERS the
    bf16 run's peak is below the float32 run's by most of the 2 bytes per weight saved (autocast casts nothing, so
    no per-step bf16 copies either; activations are narrower too)."""
    fp32, bf16 = (three_b_layer_runs[p]["peak_gib"] for p in ("fp32", "bf16"))
    layer, _ = _three_b_layers("bf16")
    saved = 2 * layer.parameters / 2**30
    assert bf16 < fp32 - 0.8 * saved, (fp32, bf16, saved)


@pytest.mark.integration
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_cpu_plan_bounds_a_run_of_three_b_layers(three_b_layer_runs: dict[str, dict], precision: str):
    """The modelled terms bound what the run added to the imported libraries (the plan's PROCESS_GIB part differs by
    torch build: 0.73 GiB imported with PyPI's CUDA build here, 0.44 with the CPU build the images install)."""
    run = three_b_layer_runs[precision]
    layer, k = _three_b_layers(precision)
    assert (
        run["peak_gib"] - run["imported_gib"]
        < sizing.memory.cpu_train_gib(layer, k, sizing.Micro(1, False)) - sizing.PROCESS_GIB
    )


# --- Bytes moved ----------------------------------------------------------------------------------------------------


def test_transfer_bytes_count_the_hub_per_loading_pod_and_the_whole_gguf_folder_once():
    gpu = sizing.transfer.transfer_bytes(plan(THREE_B, knobs("gpu")), optimiser_steps=18)
    ray = sizing.transfer.transfer_bytes(plan(THREE_B, knobs("ray")), optimiser_steps=18, ray_pods=3)
    hub = sizing.disk.hub_download_bytes(shape(THREE_B))
    assert gpu["train"]["hub"] == hub and ray["train"]["hub"] == 3 * hub
    folder = sum(sizing.disk.gguf_folder_bytes(shape(THREE_B), knobs()).values())
    served = sizing.disk.gguf_folder_bytes(shape(THREE_B), knobs())["base served"]
    assert gpu["convert-gguf"]["up"] == pytest.approx(folder + served)  # a base-cache miss also uploads the base file
    cached = sizing.transfer.transfer_bytes(plan(THREE_B, knobs("gpu")), optimiser_steps=18, base_cached=True)
    assert cached["convert-gguf"]["up"] == pytest.approx(folder)
    assert gpu["evaluate"]["down"] < folder  # the served files only, not F16 and the ladder


def test_checkpoints_are_counted_every_n_steps_and_at_the_end():
    p = plan(THREE_B, knobs("gpu"))
    one = sizing.disk.checkpoint_bytes(p.shape, p.knobs)
    adapter = sizing.disk.adapter_bytes(p.shape, p.knobs)
    for steps, expected in ((18, 2), (20, 2), (21, 3), (5, 1)):
        assert sizing.transfer.transfer_bytes(p, optimiser_steps=steps)["train"]["up"] == pytest.approx(
            expected * one + adapter
        )
    assert sizing.transfer_table(p, optimiser_steps=18).splitlines()[-1].startswith("| total |")


def test_cpu_training_holds_bf16_weights_where_it_computes_bf16_and_the_gpu_always():
    s = shape(THREE_B)
    one = sizing.Micro(1, False)
    for device in ("cpu", "ray"):
        terms = {p: sizing.train_memory(s, knobs("cpu", precision=p), one, device=device) for p in ("fp32", "bf16")}
        assert terms["fp32"]["weights"] == 4 * s.parameters and terms["bf16"]["weights"] == 2 * s.parameters
        assert "bf16 copies" not in terms["bf16"]  # a bf16 base: autocast has nothing to cast
        with pytest.raises(ValueError, match="not resolved"):
            sizing.train_memory(s, knobs("cpu", precision="auto"), one, device=device)
    gpu = {p: sizing.train_memory(s, knobs("gpu", precision=p), one, device="gpu") for p in sizing.PRECISIONS}
    assert gpu["auto"] == gpu["fp32"] == gpu["bf16"]  # the GPU loads the base in bf16 whatever --precision says


def test_a_cpu_refusal_offers_bf16_where_only_the_float32_weights_do_not_fit():
    p = plan(BIG, knobs("cpu", precision="fp32"))
    (problem,) = [q for q in sizing.check(p) if q.startswith("train-backend cpu")]
    assert "float32 weights" in problem and "precision bf16" in problem
    assert not [q for q in sizing.check(plan(BIG, knobs("cpu"))) if q.startswith("train-backend cpu")]  # auto: bf16
