"""benchmarks.cpu_rows' logic on synthetic rows and a made-up cgroup tree: the re-fit of the CPU constants, the check
on other rows, the split, what a stopped row reached, the cgroup row's verdict and where a cgroup can be made."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks import cpu_rows
from benchmarks.cpu_rows import Cgroup, Fit, Row
from tests.tiny import REAL_SHAPES

SMALL = cpu_rows.SMALL_BASES


def synthetic(runtime: float, factor: float, layers: float = 2.5, *, scale: float = 1.0, bases: dict = SMALL,
              seq: int = 128) -> list:  # fmt: skip
    """The grid's rows as rows.json holds them, each peak what the plan says with these constants (times `scale`);
    a row whose plan is its loading phase peaked at loading, as the real ones do."""
    rows = []
    with cpu_rows.constants(runtime, factor, layers):
        for base, config in bases.items():
            for precision in ("fp32", "bf16"):
                for ckpt in (False, True):
                    for micro in (1, 2):
                        r = {"base": base, "config": [config[0], config[1]], "precision": precision,
                             "checkpointing": ckpt, "micro": micro, "seq": seq, "steps": 2, "steps_done": 2,
                             "status": "ok", "cgroup_limit": "", "loaded_gib": 0.5}  # fmt: skip
                        plan = cpu_rows.row_plan(r)
                        r["peak_gib"] = plan["planned_gib"] * scale
                        if plan["planned_loading_gib"] >= plan["planned_training_gib"]:
                            r["loaded_gib"] = r["peak_gib"]
                        rows.append(r)
    return rows


def test_the_real_bases_are_the_real_shapes_of_tests_tiny():
    from steps.sizing.seeds import config

    for name, key in (("Llama-3.2-1B", "llama3.2-1b"), ("Llama-3.2-3B", "llama3.2-3b")):
        c = config(*cpu_rows.REAL_BASES[name][:1], **cpu_rows.REAL_BASES[name][1])
        dims = (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                c.num_key_value_heads, c.vocab_size, c.tie_word_embeddings)  # fmt: skip
        assert dims == REAL_SHAPES[key]


def test_the_refit_recovers_the_constants_the_peaks_were_made_with():
    fit_rows, _ = cpu_rows.split_rows(synthetic(0.3, 1.3, 3.0), "base=tiny-a")
    fit = cpu_rows.refit(fit_rows)
    assert fit.runtime_gib == pytest.approx(0.3, abs=0.011)
    assert fit.activation_factor == pytest.approx(1.3, abs=0.011)
    assert fit.checkpoint_layers == pytest.approx(3.0, abs=0.011)
    assert 1.0 <= fit.worst_fit_ratio < 1.01


def test_the_runtime_is_fitted_above_each_row_s_own_imports():
    """A machine whose imports take less than PROCESS_GIB, the allowance for every machine's: the peaks are lower by
    that much, and the runtime fitted is the same (the allowance's slack is not taken for runtime)."""
    from steps.sizing.memory import PROCESS_GIB

    rows = synthetic(0.3, 1.3)
    for r in rows:
        r["peak_gib"] -= 0.25
        r["loaded_gib"] -= 0.25
        r["imported_gib"] = PROCESS_GIB - 0.25
    fit = cpu_rows.refit(cpu_rows.split_rows(rows, "base=tiny-a")[0])
    assert fit.runtime_gib == pytest.approx(0.3, abs=0.011)


def test_the_plan_grows_per_example_at_least_as_the_fit_rows_peaks_do():
    """The 1B rows of 2026-12-04 in small: the checkpointing rows' peaks grow faster from micro-batch 1 to 2 than
    the plan's activations do; a larger runtime alone would cover both rows, and a larger micro-batch would go under."""
    rows = synthetic(0.3, 1.3, 1.0)
    for r, steeper in zip(rows, synthetic(0.3, 1.3, 2.0), strict=True):
        if r["checkpointing"] and r["micro"] == 2:
            r["peak_gib"] = steeper["peak_gib"]
    fit_rows, _ = cpu_rows.split_rows(rows, "base=tiny-a")
    fit = cpu_rows.refit(fit_rows)
    assert fit.checkpoint_layers > 1.0
    planned = [p * r["peak_gib"] for p, r in zip(cpu_rows.ratios(fit_rows, fit), fit_rows, strict=True)]
    decided = [cpu_rows.trained(r) for r in fit_rows]
    pairs = cpu_rows.slopes(fit_rows, decided)
    assert pairs
    for i, j in pairs:
        assert planned[j] - planned[i] >= fit_rows[j]["peak_gib"] - fit_rows[i]["peak_gib"] - 1e-6


def test_every_fit_row_is_planned_at_or_above_its_peak():
    rows = synthetic(0.5, 1.7)
    for i, r in enumerate(rows):  # noise: some ways above the plan, some below (both micro-batches of a way alike)
        r["peak_gib"] *= 1.0 + 0.03 * ((i // 2 % 5) - 2)
        r["loaded_gib"] = min(r["loaded_gib"], r["peak_gib"])
    fit_rows, _ = cpu_rows.split_rows(rows, "base=tiny-a")
    fit = cpu_rows.refit(fit_rows)
    assert min(cpu_rows.ratios(fit_rows, fit)) >= 1.0
    assert max(cpu_rows.ratios(fit_rows, fit)) == pytest.approx(fit.worst_fit_ratio)


def test_a_row_whose_loading_plan_covers_its_peak_does_not_raise_the_runtime():
    rows = synthetic(0.2, 1.5, bases=cpu_rows.REAL_BASES, seq=512)
    # Llama-3.2-3B fp32 with checkpointing: loading (float32 weights beside the mapped bf16 file) is its plan
    loading = next(r for r in rows if r["base"] == "Llama-3.2-3B" and r["precision"] == "fp32" and r["checkpointing"])
    plan = cpu_rows.row_plan(loading)
    assert plan["planned_loading_gib"] > plan["planned_training_gib"] + 1.0
    loading["peak_gib"] = loading["loaded_gib"] = plan["planned_loading_gib"] - 0.1  # loading's, above training's
    fit = cpu_rows.refit(rows)
    assert fit.runtime_gib == pytest.approx(0.2, abs=0.011)
    assert fit.activation_factor == pytest.approx(1.5, abs=0.011)


def test_check_rows_within_15_percent_above_their_peaks_pass():
    rows = synthetic(0.3, 1.3, bases=SMALL)
    for r in rows:
        if r["base"] == "tiny-b":
            r["peak_gib"] /= 1.05  # the check rows' peaks 5 % under what the fit's constants plan
    text, ok = cpu_rows.refit_report(rows, "base=tiny-a")
    assert ok, text
    assert "**out**" not in text


@pytest.mark.parametrize("scale", [1.2, 0.97], ids=["too-generous", "under-the-peak"])
def test_a_check_row_planned_under_its_peak_or_over_15_percent_above_it_fails(scale: float):
    rows = synthetic(0.3, 1.3)
    for r in rows:
        if r["base"] == "tiny-b":
            r["peak_gib"] /= scale
    text, ok = cpu_rows.refit_report(rows, "base=tiny-a")
    assert not ok
    assert text.count("**out**") == sum(r["base"] == "tiny-b" for r in rows)


def test_the_split_takes_complete_rows_outside_a_cgroup_and_needs_both_sides():
    rows = synthetic(0.3, 1.3)
    rows[0]["status"] = "failed"
    rows[1].update(status="stopped", steps_done=1)
    rows[2].update(status="stopped", steps_done=2)  # stopped after its last step: its peak is in
    rows.append({**rows[3], "cgroup_limit": "pod"})
    fit, check = cpu_rows.split_rows(rows, "base=tiny-a")
    assert rows[0] not in fit and rows[1] not in fit and rows[2] in fit and rows[-1] not in fit
    assert len(fit) == 6 and len(check) == 8
    fit, check = cpu_rows.split_rows(rows, "base=tiny-a,micro=1")
    assert all(r["micro"] == 1 and r["base"] == "tiny-a" for r in fit) and len(check) == 11
    with pytest.raises(ValueError, match="both sides"):
        cpu_rows.split_rows(rows, "precision=fp16")


def test_a_stopped_row_keeps_the_peak_and_step_times_it_reached(tmp_path: Path):
    events = [{"event": "imported", "t": 1.0, "hwm_gib": 0.5, "rss_gib": 0.5, "majflt": 0},
              {"event": "loaded", "t": 3.0, "hwm_gib": 2.0, "rss_gib": 1.9, "majflt": 10},
              {"event": "step", "t": 13.0, "hwm_gib": 3.5, "rss_gib": 3.0, "majflt": 12, "step": 1}]  # fmt: skip
    (tmp_path / "p").write_text("".join(json.dumps(e) + "\n" for e in events))
    got = cpu_rows.from_progress(tmp_path / "p")
    assert got["steps_done"] == 1 and got["peak_gib"] == 3.5 and got["loaded_gib"] == 2.0
    assert got["step_seconds"] == [10.0] and got["imported_gib"] == 0.5
    assert cpu_rows.from_progress(tmp_path / "missing") == {"steps_done": 0}


def _row(status: str = "ok", **result) -> Row:
    row = Row("b", ("Llama-3.2-1B", {}), "bf16", True, 1, 512, 4, 2, "planned", status)
    row.result.update(result)
    return row


def test_the_cgroup_rows_verdict():
    twin = _row(step_seconds=[10.0, 10.0])
    hit = {"limit_hits": 5}
    assert cpu_rows.verdict(_row("killed"), twin) == "killed"
    assert cpu_rows.verdict(_row(cgroup={"oom_kill": 1}, step_seconds=[10.0]), twin) == "killed"
    assert cpu_rows.verdict(_row(step_seconds=[11.0, 12.0], majflt=100, cgroup=hit), twin) == "fine"
    assert cpu_rows.verdict(_row(step_seconds=[16.0, 30.0], cgroup=hit), twin) == "thrashing"
    assert cpu_rows.verdict(_row(step_seconds=[10.0], majflt=10**6), twin) == "thrashing"
    assert cpu_rows.verdict(_row(step_seconds=[10.0], cgroup={"pgmajfault": 10**6}), twin) == "thrashing"
    assert cpu_rows.verdict(_row("stopped", step_seconds=[], train_elapsed=40.0, cgroup=hit), twin) == "thrashing"
    assert cpu_rows.verdict(_row("stopped", step_seconds=[], train_elapsed=5.0), twin) == "undecided (stopped)"
    assert cpu_rows.verdict(_row(step_seconds=[30.0], cgroup=hit), None) == "fine"  # nothing to compare with


def test_a_slow_cgroup_row_that_never_hit_its_limit_wanted_cpu_not_memory():
    twin = _row(step_seconds=[10.0, 10.0])
    assert cpu_rows.verdict(_row(step_seconds=[16.0, 30.0], cgroup={"limit_hits": 0}), twin) == "fine"


def test_a_cgroup_row_is_compared_with_a_row_beside_it_that_hit_no_limit():
    """Both cgroup rows start together, so they share the machine's load; the unlimited row ran at another time."""
    twin = _row(step_seconds=[10.0, 10.0])
    beside = _row(step_seconds=[30.0, 28.0], cgroup={"limit_hits": 0})
    limited = _row(step_seconds=[32.0, 28.0], cgroup={"limit_hits": 645})
    assert cpu_rows.verdict(limited, twin) == "thrashing"
    assert cpu_rows.verdict(limited, twin, [limited, beside]) == "fine"
    assert cpu_rows.verdict(_row(step_seconds=[50.0, 48.0], cgroup={"limit_hits": 9}), twin, [beside]) == "thrashing"


def test_the_2026_12_04_cgroup_rows_were_fine_at_both_limits():
    """The committed run: at the planned 8.10 GiB 645 limit hits and 10 major faults, at 9 GiB none, both 1.51-1.53x the
    unlimited row's steps (the old verdict said thrashing); the limited row's 1.02x those of the 9 GiB row beside it."""
    run = json.loads((cpu_rows.ROOT / "benchmarks/results/2026-12-04-xeon16-h200/run1-grid/rows.json").read_text())
    rows = {r["name"]: r for r in run["rows"]}

    def as_row(r: dict) -> Row:
        return Row(r["base"], tuple(r["config"]), r["precision"], r["checkpointing"], r["micro"], r["seq"],
                   r["threads"], r["steps"], r["cgroup_limit"], r["status"], r)  # fmt: skip

    twin = as_row(rows["Llama-3.2-3B bf16 ckpt micro 1"])
    limited = [as_row(rows[f"Llama-3.2-3B bf16 ckpt micro 1 [cgroup {limit}]"]) for limit in ("planned", "pod")]
    assert [r.result["verdict"] for r in limited] == ["thrashing", "thrashing"]  # as the run wrote it
    assert [cpu_rows.verdict(r, twin, limited) for r in limited] == ["fine", "fine"]
    assert [r.result["cgroup"]["limit_hits"] for r in limited] == [645, 0]


def _tree(tmp_path: Path, self_cgroup: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    root.mkdir()
    (tmp_path / "self").write_text(self_cgroup)
    return root, tmp_path / "self"


def test_a_v1_memory_hierarchy_gets_a_cgroup_below_this_process_s_own(tmp_path: Path):
    root, me = _tree(tmp_path, "4:memory:/process_api/abc\n1:cpu:/\n0::/\n")
    (root / "memory" / "process_api" / "abc").mkdir(parents=True)
    cg, why = cpu_rows.make_cgroup("x", root, me)
    assert cg == Cgroup(1, root / "memory/process_api/abc/x") and why == []
    cg.set_limit(2**30)
    assert (cg.path / "memory.limit_in_bytes").read_text() == str(2**30)
    (cg.path / "memory.max_usage_in_bytes").write_text(str(3 * 2**30))
    (cg.path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (cg.path / "memory.stat").write_text("total_rss 1073741824\ntotal_cache 0\ntotal_pgmajfault 7\n")
    got = cg.read()
    assert (got["peak_gib"], got["oom_kill"], got["pgmajfault"], got["anon_gib"]) == (3.0, 2, 7, 1.0)


def test_without_a_memory_controller_the_reason_names_what_is_missing(tmp_path: Path):
    root, me = _tree(tmp_path, "0::/job\n")
    cg, why = cpu_rows.make_cgroup("x", root, me)
    assert cg is None and "no memory controller" in why[0] and "cgroup.controllers" in why[0]


def test_v2_without_memory_delegated_says_why_for_its_own_cgroup_and_its_parent(tmp_path: Path):
    root, me = _tree(tmp_path, "0::/job/step\n")
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for place in (root / "job" / "step", root / "job"):
        place.mkdir(parents=True, exist_ok=True)
        (place / "cgroup.subtree_control").mkdir()  # unwritable as a file: enabling +memory fails
    cg, why = cpu_rows.make_cgroup("x", root, me)
    assert cg is None
    assert [w.split(":")[0] for w in why] == ["cgroup v2"] * 2
    assert "job/step/cgroup.subtree_control" in why[0] and "job/cgroup.subtree_control" in why[1]


def test_a_v2_cgroup_without_memory_max_is_refused_and_removed(tmp_path: Path):
    root, me = _tree(tmp_path, "0::/job\n")
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "job").mkdir()
    (root / "job" / "cgroup.subtree_control").write_text("memory\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    cg, why = cpu_rows.make_cgroup("x", root, me)
    assert cg is None and all("has no memory.max" in w for w in why) and not (root / "job" / "x").exists()


def test_the_fit_reports_today_s_constants_beside_the_refitted_ones():
    from steps.sizing import memory

    text, _ = cpu_rows.refit_report(synthetic(0.3, 1.3), "base=tiny-a")
    assert f"CPU_RUNTIME_GIB {memory.CPU_RUNTIME_GIB} -> 0.30" in text
    assert f"CPU_ACTIVATION_FACTOR {memory.CPU_ACTIVATION_FACTOR} -> 1.30" in text
    assert f"CPU_CHECKPOINT_LAYERS {memory.CPU_CHECKPOINT_LAYERS} -> 2.5" in text
    assert isinstance(cpu_rows.refit(cpu_rows.split_rows(synthetic(0.3, 1.3), "base=tiny-a")[0]), Fit)


def _schedule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seconds: float, **limits) -> tuple[list[Row], int]:
    """run_rows over six small rows of 2 threads whose processes sleep `seconds`; returns them and the most that ran
    at once."""
    active, most = set(), [0]

    def start(row: Row, bases: dict, work: Path, need: float) -> cpu_rows.Running:
        active.add(row.name)
        most[0] = max(most[0], len(active))
        proc = subprocess.Popen(["sleep", str(seconds)], start_new_session=True)
        return cpu_rows.Running(row, proc, 0.0, tmp_path / "p", tmp_path / "e", None, need)

    def finish(r: cpu_rows.Running, *, stopped: bool) -> None:
        if stopped:
            r.proc.kill()
        r.proc.wait()
        active.discard(r.row.name)
        r.row.status = "stopped" if stopped else "ok"

    monkeypatch.setattr(cpu_rows, "start", start)
    monkeypatch.setattr(cpu_rows, "finish", finish)
    rows = [Row("tiny-a", SMALL["tiny-a"], p, c, 1, 128, 2, 2) for p in ("fp32", "bf16") for c in (False, True)]
    rows += [Row("tiny-b", SMALL["tiny-b"], "fp32", False, m, 128, 2, 2) for m in (1, 2)]
    cpu_rows.run_rows(rows, {}, tmp_path, first=[], **{"deadline": time.monotonic() + 60, **limits})
    return rows, most[0]


def test_rows_run_as_many_at_a_time_as_the_cores_hold(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    rows, most = _schedule(monkeypatch, tmp_path, 0.2, cores=4, memory_gib=100.0)
    assert most == 2 and all(r.status == "ok" for r in rows)


def test_rows_wait_for_memory_their_plans_set_aside(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    need = cpu_rows.need_gib(Row("tiny-b", SMALL["tiny-b"], "fp32", False, 2, 128, 2, 2))
    rows, most = _schedule(monkeypatch, tmp_path, 0.2, cores=16, memory_gib=1.5 * need)
    assert most == 1 and all(r.status == "ok" for r in rows)


def test_rows_still_running_at_the_deadline_stop_and_the_rest_never_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    rows, _ = _schedule(monkeypatch, tmp_path, 30, cores=4, memory_gib=100.0, deadline=time.monotonic() + 1.5)
    assert sorted(r.status for r in rows) == ["not started"] * 4 + ["stopped"] * 2


def test_both_benchmarks_children_compile_and_share_one_reader_rows_and_train_call():
    """cpu_rows and memory_calibration each run train in a child; both take /proc's reader, the rows and the
    TrainConfig + train_loop call from benchmarks._train_child (one place, no copy in either script)."""
    from benchmarks import _train_child as train_child
    from benchmarks import memory_calibration

    for child in (cpu_rows.CHILD, memory_calibration.CHILD):
        compile(child, "child", "exec")
        assert "from benchmarks._train_child import status_gib, summary_rows, train_config, train_rows" in child
        assert "/proc/self/status" not in child and "train_loop(" not in child and "% (vocab" not in child
    rows = train_child.summary_rows(16, 3, 49005)
    assert len(rows) == 3 and all(len(r["input_ids"]) == 16 and max(r["input_ids"]) < 49005 for r in rows)
    assert rows[0]["labels"][:1] == [-100] and rows[0]["labels"][-1] == rows[0]["input_ids"][-1]
    assert 0 < train_child.status_gib("VmRSS") <= train_child.status_gib("VmHWM")
