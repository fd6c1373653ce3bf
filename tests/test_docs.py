"""The docs site (mkdocs.yml, docs/, README.md as its front page): it builds with `mkdocs build --strict`, so a broken
link, a missing anchor or a page left out of the nav fails the suite, and the check fails on a page broken on purpose.

pytest tests/test_docs.py
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import steps
from steps import promote, push_adapter
from steps.core.cli import parse_config
from tests.conftest import ROOT

# "A few hundred lines at most": the front page says what it is, shows the two commands and what the run prints, and
# links the rest.
FRONT_PAGE_MAX_LINES = 300


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
            "--site-dir", str(site)]  # fmt: skip
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2 is not a build warning
    return subprocess.run(argv, cwd=root, capture_output=True, text=True, env=env, timeout=300)


def copy_site_sources(to: Path) -> Path:
    """mkdocs.yml, docs/, README.md and the hook, as a checkout holds them, in `to`."""
    to.mkdir()
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, to / name)
    shutil.copytree(ROOT / "docs", to / "docs")
    (to / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/mkdocs_hooks.py", to / "scripts/mkdocs_hooks.py")
    return to


def test_the_docs_build_strictly_with_the_readme_as_front_page(tmp_path: Path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    index = (tmp_path / "site/index.html").read_text()
    assert "The two commands" in index and 'href="local/"' in index  # README's docs/local.md, made a site link


@pytest.mark.parametrize(
    ("broken", "said"),
    [
        ("[a page that is not there](nowhere.md)", "nowhere.md"),
        ("[a section that is not there](gate.md#no-such-section)", "#no-such-section"),
        ("[the front page's links](docs/local.md)", "docs/local.md"),  # a README-style link inside docs/
    ],
)
def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path, broken: str, said: str):
    root = copy_site_sources(tmp_path / "checkout")
    page = root / "docs/serving.md"
    page.write_text(page.read_text() + f"\nSee {broken}.\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and said in done.stderr


def test_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path):
    root = copy_site_sources(tmp_path / "checkout")
    (root / "docs/orphan.md").write_text("# Orphan\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and "orphan.md" in done.stderr


def test_the_front_page_stays_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= FRONT_PAGE_MAX_LINES, f"README.md has {len(lines)} lines: move sections into docs/"


def documented(page: str, start: str) -> list[str]:
    """The arguments of the command in `page`'s code blocks that starts with `start` (continuation lines joined)."""
    lines = (ROOT / page).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    command = lines[first]
    while command.endswith("\\"):
        first += 1
        command = command[:-1] + " " + lines[first].strip()
    argv = shlex.split(command.split("  #")[0])
    return argv[argv.index("-m") + 2 :]


def test_the_documented_rollback_names_its_registry():
    argv = documented("docs/serving.md", "python -m steps.promote --action rollback")
    cfg = parse_config(promote.PromoteConfig, argv, "promote")
    assert cfg.action == "rollback" and cfg.tracking_uri  # without it (and no MLFLOW_TRACKING_URI) the command stops


def test_the_documented_push_adapter_command_names_what_is_missing_and_who_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
):
    argv = documented("docs/serving.md", "GITEA_TOKEN=… python -m steps.push_adapter")
    with contextlib.chdir(tmp_path):  # a checkout before its first run: no out/ folders
        assert push_adapter.main(argv) == 1
    said = capsys.readouterr().err
    assert "--adapter out/adapter: no adapter_config.json, adapter_model.safetensors; the train stage" in said
    assert "run train first" not in said


def test_the_steps_page_lists_every_step_once():
    """docs/steps.md says it lists every step: each of `steps.STEP_MODULES` has one row, named as its module."""
    page = (Path(__file__).resolve().parent.parent / "docs/steps.md").read_text()
    rows = [line.split("|")[1].strip().split()[0].strip("`") for line in page.splitlines() if line.startswith("| `")]
    assert sorted(rows) == sorted(name for group in steps.STEP_MODULES.values() for name in group)
