"""Each step is `python -m steps.<name>` with `--help`, stays light to import, and writes outputs atomically."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from steps.core.cli import refuse
from steps.core.io import atomic_dir
from steps.pipeline import BUILD_STAGES, STAGES
from tests.conftest import ROOT

HEAVY = ("torch", "transformers", "peft", "llama_cpp", "mlflow", "dvc", "hera", "ray")


@pytest.mark.parametrize("module", [s.module for s in (*STAGES, *BUILD_STAGES)])
def test_help_works_without_heavy_imports(module: str):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--out" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY)


def test_steps_never_import_hera():
    for path in (ROOT / "steps").rglob("*.py"):  # packages too (steps/train/)
        imports = [line for line in path.read_text().splitlines() if line.startswith(("import ", "from "))]
        assert not [line for line in imports if "hera" in line], path


def test_atomic_dir_leaves_nothing_behind_on_error(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "keep.txt").write_text("previous result")
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in final.iterdir()] == ["keep.txt"]


def test_atomic_dir_replaces_the_previous_output(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with atomic_dir(final) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_help_names_the_command_a_user_types():
    # Python 3.11's argparse says `__main__.py` for a package step (steps/train/) unless told the program's name.
    for module in ("steps.train", "steps.evaluate"):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: python -m {module} "), proc.stdout[:80]


def _config_refusals_outside_refuse(source: str) -> list[str]:
    """String literals that start a config refusal's message ("invalid <step> config…", "…settings") themselves."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.match(r"invalid [\w-]+ (config|settings)\b", node.value)
    ]


def test_a_step_refuses_its_config_only_through_cli_refuse():
    """One way to refuse a config (`steps.core.cli.refuse`: every problem, one a line, under the step's name), not a
    message of each step's own making."""
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted((ROOT / "steps").rglob("*.py"))
        if path != ROOT / "steps/core/cli.py" and (hits := _config_refusals_outside_refuse(path.read_text()))
    }
    assert found == {}


def test_the_refusal_check_finds_a_message_of_a_steps_own_making():
    own = 'raise TeacherError("invalid teacher config:\\n  " + "\\n  ".join(problems))'
    assert _config_refusals_outside_refuse(own) == ["invalid teacher config:\n  "]
    assert _config_refusals_outside_refuse('refuse(config_problems(cfg), "teacher", TeacherError)') == []


def test_refuse_raises_every_problem_under_the_steps_name_in_its_own_error():
    class StepError(ValueError):
        pass

    refuse([], "step", StepError)  # nothing wrong: nothing raised
    with pytest.raises(StepError) as e:
        refuse(["--a 0: use 1", "--b x: a number"], "step", StepError)
    assert str(e.value) == "invalid step config:\n  --a 0: use 1\n  --b x: a number"


def _pod_files(tmp_path, limit_bytes: int | str) -> tuple:
    """A container's view, as the kubelet and runc make it: a cgroup with a memory limit, the machine's meminfo, and
    the termination-message file the kubelet mounts (empty)."""
    cgroup, meminfo, log = tmp_path / "cgroup", tmp_path / "meminfo", tmp_path / "termination-log"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max").write_text(f"{limit_bytes}\n")
    meminfo.write_text("MemTotal:       65536000 kB\n")
    log.write_text("")
    return cgroup, meminfo, log


def test_a_step_leaves_its_memory_limit_as_the_pods_termination_message(tmp_path):
    """On a cluster an OOMKilled step cannot say anything; Argo appends the container's termination message to the
    node's message, so the limit it was killed at shows in `argo get` (tests/test_node.py sees it on the node)."""
    from steps.core import pod

    cgroup, meminfo, log = _pod_files(tmp_path, 3 * 2**30)
    pod.announce_limits("train", log, cgroup, meminfo)
    assert log.read_text() == "train ran with a memory limit of 3.00 GiB"
    unlimited = _pod_files(tmp_path / "unlimited", "max")
    pod.announce_limits("train", unlimited[2], *unlimited[:2])
    assert unlimited[2].read_text() == "", "no limit: nothing to name"


def test_the_termination_message_is_never_created_off_a_cluster(tmp_path):
    from steps.core import pod

    absent = tmp_path / "termination-log"
    assert not pod.termination_message("x", absent) and not absent.exists()
    long = tmp_path / "long"
    long.write_text("")
    assert pod.termination_message("word " * 1000, long)
    assert len(long.read_text()) == pod.TERMINATION_CHARS and "\n" not in long.read_text()


def test_a_timed_run_that_raises_puts_its_error_in_the_termination_message(tmp_path, monkeypatch):
    from steps.core import cli, pod

    cgroup, meminfo, log = _pod_files(tmp_path, 2**30)
    monkeypatch.setattr(pod, "TERMINATION_LOG", log)
    monkeypatch.setattr(pod, "CGROUP", cgroup)
    monkeypatch.setattr(pod, "MEMINFO", meminfo)

    def run(cfg: int) -> int:
        assert log.read_text() == f"{__name__.removeprefix('steps.')} ran with a memory limit of 1.00 GiB"
        if cfg:
            raise ValueError("--epochs 0: use 1 or more")
        return cfg

    assert cli.timed(run)(0) == 0
    with pytest.raises(ValueError):
        cli.timed(run)(1)
    assert log.read_text().endswith("ValueError: --epochs 0: use 1 or more"), log.read_text()
