"""`dvc repro` reruns exactly the stages whose code changed: each stage's code dependencies in dvc.yaml are its
module's whole import closure within the project (workflows/deps.py), no more and no less.

    pytest tests/test_render_deps.py                   # the closure, dvc.yaml against it, Python's own imports
    pytest -m integration tests/test_render_deps.py    # + DVC's own view, and real `dvc status`, in a copy
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from steps.pipeline import BUILD_STAGES, STAGES, Stage
from tests.conftest import ROOT
from workflows.deps import closure, code_files, module_file


def code_deps_problems(
    stages: dict[str, dict], root: Path = ROOT, pipeline: tuple[Stage, ...] = STAGES
) -> dict[str, dict[str, list[str]]]:
    """Per dvc.yaml stage, the project modules its import closure holds that its deps lack, and code deps it lists
    that it does not import (those rerun it for nothing)."""
    problems = {}
    for stage in pipeline:
        deps = set(stages[stage.name]["deps"])
        code = set(code_files(stage.module, root))
        listed_code = {d for d in deps if d.endswith(".py")}
        found = {"missing": sorted(code - deps), "not imported": sorted(listed_code - code)}
        if found["missing"] or found["not imported"]:
            problems[stage.name] = found
    return problems


def committed_stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


# --- the closure ----------------------------------------------------------------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_closure_follows_imports_at_any_depth_and_of_every_form(tmp_path: Path):
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "attribute_only = 1\n",
            "pkg/stage.py": """
                import json
                import pkg.top_level
                from pkg import attribute_only
                from . import sibling

                def run():
                    from pkg.in_function import x
                    from pkg import in_function_from
                    import pkg.in_function_import as alias

                class Step:
                    def method(self):
                        try:
                            from .in_method import y
                        except ImportError:
                            pass

                if False:
                    from pkg.sub import deep
            """,
            "pkg/top_level.py": "import os\n",
            "pkg/sibling.py": "from .transitive import z\n",
            "pkg/transitive.py": "z = 1\n",
            "pkg/in_function.py": "x = 1\n",
            "pkg/in_function_from.py": "",
            "pkg/in_function_import.py": "",
            "pkg/in_method.py": "y = 1\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/deep.py": "from ..transitive import z\nfrom ...outside import nothing  # beyond the project\n",
            "pkg/not_imported.py": "",
        },
    )
    assert closure("pkg.stage", tmp_path) == [
        "pkg",
        "pkg.in_function",
        "pkg.in_function_from",
        "pkg.in_function_import",
        "pkg.in_method",
        "pkg.sibling",
        "pkg.stage",
        "pkg.sub",
        "pkg.sub.deep",
        "pkg.top_level",
        "pkg.transitive",
    ]
    files = code_files("pkg.stage", tmp_path)
    assert "pkg/__init__.py" in files and "pkg/sub/__init__.py" in files and "pkg/not_imported.py" not in files


def test_a_package_run_with_python_m_brings_its_main_and_what_that_imports(tmp_path: Path):
    """`python -m pkg.stage` runs pkg/stage/__init__.py and then pkg/stage/__main__.py: both are the stage's code."""
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/stage/__init__.py": "from pkg.stage.loop import train\n",
            "pkg/stage/__main__.py": "import sys\nfrom pkg.stage import cli\n",
            "pkg/stage/loop.py": "train = 1\n",
            "pkg/stage/cli.py": "from pkg import helper\n",
            "pkg/helper.py": "",
        },
    )
    assert closure("pkg.stage", tmp_path) == [
        "pkg", "pkg.helper", "pkg.stage", "pkg.stage.__main__", "pkg.stage.cli", "pkg.stage.loop",
    ]  # fmt: skip
    assert closure("pkg.stage.loop", tmp_path) == ["pkg", "pkg.stage", "pkg.stage.loop"]  # a plain module: no __main__


def test_every_file_of_the_train_package_is_the_train_stages_code():
    files = set(code_files("steps.train"))
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "steps/train").glob("*.py")}
    assert "steps/train/__main__.py" in package and "steps/train/checkpoints.py" in package
    assert package <= files
    assert package <= set(committed_stages()["train"]["deps"]), "run `python -m workflows.render`"


def test_modules_outside_the_project_are_not_followed(tmp_path: Path):
    write_package(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import yaml\nfrom steps.core import io\n"})
    assert module_file("yaml", tmp_path) is None
    assert closure("pkg.a", tmp_path) == ["pkg", "pkg.a"]  # `steps` is not a package under tmp_path


def test_the_stages_import_what_issue_11_found():
    files = {s.name: set(code_files(s.module)) for s in STAGES}
    # As found, then with what steps shared moved out of the steps (dataset, tokenizer_parity, mlflow_client).
    assert {"steps/core/sealed.py", "steps/core/dataset.py"} <= files["train"]
    assert {"steps/gguf/meta.py", "steps/gguf/tokenizer_parity.py", "steps/core/sealed.py"} <= files["convert-gguf"]
    assert {
        "steps/core/registry.py",
        "steps/core/sealed.py",
        "steps/core/dataset.py",
        "steps/core/mlflow_client.py",
    } <= files["evaluate"]
    assert {"steps/contract/model.py", "steps/core/mlflow_client.py"} <= files[
        "register"
    ]  # imported inside functions too
    assert {"steps/core/registry.py", "steps/core/mlflow_client.py"} <= files["propose"]


# --- dvc.yaml against the closure -----------------------------------------------------------------------------------


def test_every_stage_depends_on_exactly_the_project_modules_it_imports():
    assert code_deps_problems(committed_stages()) == {}, "run `python -m workflows.render`"
    build = yaml.safe_load((ROOT / "build-dataset/dvc.yaml").read_text())["stages"]
    assert code_deps_problems(build, pipeline=BUILD_STAGES) == {}, "run `python -m workflows.render`"
    build["teacher"]["deps"].remove("steps/contract/serving_config.py")
    assert code_deps_problems(build, pipeline=BUILD_STAGES) == {
        "teacher": {"missing": ["steps/contract/serving_config.py"], "not imported": []}
    }


def test_the_check_fails_when_a_module_a_stage_imports_is_missing():
    stages = committed_stages()
    stages["register"]["deps"] = [d for d in stages["register"]["deps"] if d != "steps/contract/model.py"]
    assert code_deps_problems(stages) == {"register": {"missing": ["steps/contract/model.py"], "not imported": []}}
    # The deps as they were before issue 11: the stage's module, common.py and prompting.py.
    old = committed_stages()
    for stage in STAGES:
        deps = old[stage.name]["deps"]
        code = [stage.module.replace(".", "/") + ".py", "steps/core/cli.py", "steps/contract/prompting.py"]
        old[stage.name]["deps"] = code + [d for d in deps if not d.endswith(".py")]
    assert set(code_deps_problems(old)) == {s.name for s in STAGES}


# --- what Python really imports -------------------------------------------------------------------------------------

# In a fresh interpreter: import the stage's module and every module its static closure names (so the targets of the
# imports inside functions run too), then list the project modules Python has loaded.
LOADED = """
import importlib, json, sys
from pathlib import Path

root = Path(sys.argv[1]).resolve()
for name in sys.argv[2:]:
    importlib.import_module(name)
ours = set()
for name, module in list(sys.modules.items()):
    file = getattr(module, "__file__", None)
    if file and Path(file).resolve().is_relative_to(root) and not Path(file).resolve().is_relative_to(root / ".venv"):
        ours.add(name)
print(json.dumps(sorted(ours)))
"""


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_python_imports_nothing_of_the_project_outside_the_static_closure(stage):
    static = closure(stage.module)
    proc = subprocess.run(
        [sys.executable, "-c", LOADED, str(ROOT), *static], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(proc.stdout)
    assert sorted(set(loaded) - set(static)) == [], f"{stage.module} imports project modules deps.py cannot see"
    assert sorted(set(static) - set(loaded)) == []  # every module the AST found is real and importable


# --- dvc itself -----------------------------------------------------------------------------------------------------

# What the copy needs besides the tracked files: the working tree minus environments, caches and outputs.
NOT_COPIED = (".git", ".venv", ".cache", "out", "mlruns", "dvc.lock", "__pycache__", "*.egg-info", ".*_cache")


# Both DVC pipelines in the repository (dvc.yaml, params.yaml, their stages, how `dvc status` names a stage when run
# from the root): distill's at the root, build-dataset's in its folder (its stages run from the root: wdir ..).
DVC_PIPELINES = (
    ("dvc.yaml", "params.yaml", STAGES, ""),
    ("build-dataset/dvc.yaml", "build-dataset/params.yaml", BUILD_STAGES, "build-dataset/dvc.yaml:"),
)


def dvc_repo_copy(dst: Path) -> Path:
    """The repo's working tree copied to `dst` as a DVC project (no git) whose dvc.lock files record every stage of
    both pipelines as run: placeholder outputs and inputs, committed with `dvc commit --force` (nothing is run)."""
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(*NOT_COPIED))
    (dst / ".dvc/config").write_text("[core]\n    analytics = false\n    no_scm = true\n")
    for dvc_file, params_file, _, _ in DVC_PIPELINES:
        params = yaml.safe_load((dst / params_file).read_text())
        for stage in yaml.safe_load((dst / dvc_file).read_text())["stages"].values():
            for path in [d for d in stage["deps"] if not d.endswith(".py")] + [next(iter(o)) for o in stage["outs"]]:
                if path.startswith("${"):  # a parameter's value
                    path = str(params[path[2:-1]])
                if (dst / path).is_file():  # a committed input file (a feedback file, the teachers' terms)
                    continue
                (dst / path).mkdir(parents=True, exist_ok=True)
                if not any((dst / path).iterdir()):
                    (dst / path / "placeholder").write_text("x\n")
    subprocess.run(["dvc", "commit", "--force", "--quiet"], cwd=dst, check=True, capture_output=True, text=True)
    return dst


@pytest.mark.integration
def test_dvc_status_reports_exactly_the_stages_whose_code_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from dvc.repo import Repo

    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site"))
    repo = dvc_repo_copy(tmp_path / "repo")
    monkeypatch.chdir(repo)  # DVC names a stage by its dvc.yaml's path relative to the working directory

    def changed_stages() -> set[str]:
        with Repo(str(repo)) as r:
            status = r.status()
        return {name for name, entries in status.items() if any("changed deps" in e for e in entries)}

    assert changed_stages() == set(), "the copy's dvc.lock should record every stage as up to date"
    modules = sorted(p.relative_to(repo).as_posix() for p in (repo / "steps").rglob("*.py"))
    assert "steps/contract/model.py" in modules and "steps/check_triggers.py" in modules  # in one closure; in none
    assert "steps/train/loop.py" in modules and "steps/train/__main__.py" in modules  # a stage that is a package

    code = {prefix + s.name: set(code_files(s.module, repo)) for _, _, stages, prefix in DVC_PIPELINES for s in stages}

    def importers(module: str) -> set[str]:
        return {name for name, files in code.items() if module in files}

    # Every module against the stages DVC itself says depend on it: the dependencies as DVC resolved them from both
    # dvc.yaml files (parameters substituted, a folder covering what lies under it) — DVC reruns a stage exactly when
    # one of those changed. One index read instead of a `dvc status` per module (~2.4 s each, 60 modules).
    with Repo(str(repo)) as r:
        resolved = {
            stage.addressing: {Path(dep.fs_path).resolve().relative_to(repo.resolve()).as_posix() for dep in stage.deps}
            for stage in r.index.stages
        }

    def dvc_dependents(module: str) -> set[str]:
        return {name for name, deps in resolved.items() if any(module == d or module.startswith(d + "/") for d in deps)}

    wrong = {m: (sorted(importers(m)), sorted(dvc_dependents(m))) for m in modules if importers(m) != dvc_dependents(m)}
    assert not wrong, "editing a module would rerun other stages than those importing it:\n" + "\n".join(
        f"{module}: importers {imp}, dvc reruns {rerun}" for module, (imp, rerun) in wrong.items()
    )

    # And `dvc status` itself, after real edits, agrees with that reading of its index: a module in one closure, one
    # in none, a file of a package stage, one of build-dataset's, then every module at once.
    build_module = next(
        m for m in modules if importers(m) and all(s.startswith("build-dataset/") for s in importers(m))
    )
    samples = ["steps/contract/model.py", "steps/check_triggers.py", "steps/train/__main__.py", build_module]
    for group in [[m] for m in samples] + [modules]:
        originals = {m: (repo / m).read_bytes() for m in group}
        for m, data in originals.items():
            (repo / m).write_bytes(data + b"\n# a comment: the file's bytes changed\n")
        try:
            reported = changed_stages()
        finally:
            for m, data in originals.items():
                (repo / m).write_bytes(data)
        expected = set().union(*(importers(m) for m in group))
        assert reported == expected, f"editing {group if len(group) < 5 else 'every module'}: dvc reruns {reported}"
    assert changed_stages() == set()
