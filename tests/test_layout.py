"""The layout in steps/__init__.py is the layout on disk, and the allowed imports between its groups hold.

Every module of steps/ belongs to exactly one group: a step (`STEP_MODULES`) or a shared package (`MAY_IMPORT`). A
step imports shared packages only, never another step; a shared package imports only the groups `MAY_IMPORT` gives
it (the serving contract nothing at all, since register copies it whole into the registered model); `workflows/`
imports `steps.pipeline`, the shared packages and the stages' `*Config` types, never a stage's internals.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import steps

ROOT = Path(__file__).resolve().parent.parent
STEPS = ROOT / "steps"
STAGE_NAMES = {name for group in steps.STEP_MODULES.values() for name in group}
SHARED = set(steps.MAY_IMPORT)


def group_of(path: Path) -> str | None:
    """The group a file of steps/ belongs to: its stage or shared package (None for steps/__init__.py)."""
    parts = path.relative_to(STEPS).with_suffix("").parts
    return None if parts == ("__init__",) else parts[0]


def imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, the steps group imported, the names taken) for every import of steps.* in `path`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            names = tuple(alias.name for alias in node.names)
            if parts == ["steps"]:
                found += [(node.lineno, name, ()) for name in names]
            elif parts[0] == "steps":
                found.append((node.lineno, parts[1], names if len(parts) == 2 else ()))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "<relative>", ()))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1], ()) for a in node.names if a.name.startswith("steps.")]
    return found


def problems(path: Path, group: str) -> list[str]:
    allowed = set(steps.MAY_IMPORT[group]) if group in SHARED else SHARED
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [
        f"{where}:{line} imports steps.{imported}: {group} may import {sorted(allowed) or 'nothing of steps'}"
        for line, imported, _ in imports(path)
        if imported not in allowed | {group} or imported == "<relative>"
    ]


STEP_FILES = sorted(p for p in STEPS.rglob("*.py") if group_of(p) is not None)


def test_every_group_is_on_disk_and_every_module_in_a_group():
    on_disk = {group_of(p) for p in STEP_FILES}
    assert on_disk == STAGE_NAMES | SHARED, "add the module to steps.STEP_MODULES or steps.MAY_IMPORT"
    assert not STAGE_NAMES & SHARED


@pytest.mark.parametrize("path", STEP_FILES, ids=lambda p: p.relative_to(STEPS).as_posix())
def test_a_module_imports_only_what_its_group_may(path: Path):
    assert problems(path, group_of(path)) == []


def test_a_stage_has_a_command_line():
    for name in STAGE_NAMES:
        package = STEPS / name
        main = (package / "__main__.py") if package.is_dir() else STEPS / f"{name}.py"
        assert main.is_file(), f"python -m steps.{name} needs {main.relative_to(ROOT)}"


def test_the_rule_refuses_what_it_should(tmp_path: Path):
    """A stage importing another stage, the contract importing core, a relative import: each is named."""
    cases = {
        "train": "from steps import evaluate\n",
        "contract": "from steps.core.io import write_json\n",
        "gguf": "from steps.sizing import plan\nfrom . import meta\n",
    }
    for group, source in cases.items():
        probe = tmp_path / group / "probe.py"
        probe.parent.mkdir()
        probe.write_text(source)
        assert len(problems(probe, group)) == source.count("\n"), f"{group}: {source!r} passed the rule"


def module_file(name: str) -> Path | None:
    """The file of module `name` (steps.x.y): x/y.py or x/y/__init__.py; None when it is no module of steps/."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def import_graph(files: list[Path]) -> dict[Path, set[Path]]:
    """Each file's imports of steps/ modules at any depth, as files (`from steps.core import io` imports
    steps/core/io.py; `from steps.sizing import Micro`, steps/sizing/__init__.py). An import inside a function is an
    edge too: deferring it hides a circle from Python, not from the reader."""
    graph: dict[Path, set[Path]] = {}
    for path in files:
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "steps":
                for alias in node.names:
                    edges.add(module_file(f"{node.module}.{alias.name}") or module_file(node.module))
            elif isinstance(node, ast.Import):
                edges |= {module_file(a.name) for a in node.names if a.name.startswith("steps.")}
        graph[path] = {e for e in edges if e is not None and e != path}
    return graph


def circles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """The import circles of `graph`: every strongly connected set of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    found: list[list[Path]] = []

    def visit(node: Path) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            ring = []
            while (top := stack.pop()) != node:
                ring.append(top)
            if ring:
                found.append(sorted([node, *ring]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_steps_imports_itself_in_a_circle():
    """A circle (train's config -> kd -> data -> config once, its last step deferred into a function) makes import
    order matter and two modules one; the layout has none."""
    found = circles(import_graph(sorted(STEPS.rglob("*.py"))))
    assert found == [], [[p.relative_to(ROOT).as_posix() for p in ring] for ring in found]


def test_the_circle_check_finds_a_circle(tmp_path: Path):
    a, b, c = (tmp_path / f"{n}.py" for n in "abc")
    graph = {a: {b}, b: {c}, c: {a}, tmp_path / "d.py": {a}}
    assert circles(graph) == [sorted([a, b, c])]


WORKFLOW_FILES = sorted((ROOT / "workflows").glob("*.py"))


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_workflows_import_the_pipeline_shared_packages_and_config_types_only(path: Path):
    bad = []
    for line, imported, names in imports(path):
        if imported in SHARED:
            continue
        if imported in STAGE_NAMES and names and all(n.endswith("Config") for n in names):
            continue
        bad.append(f"{path.relative_to(ROOT)}:{line} imports steps.{imported} {list(names) or ''}")
    assert bad == [], "workflows/ reads a stage's *Config type only; what a template needs lives in a shared package"


def _names_taken_from_sizing(path: Path) -> set[str]:
    """The names `path` takes from steps.sizing itself: `from steps.sizing import X` and `sizing.X` (in code, or in a
    comment or docstring that points a reader there, or a child script's text)."""
    text = path.read_text()
    found = set(re.findall(r"\bsizing\.(\w+)", text))
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "steps.sizing" and node.level == 0:
            found |= {alias.name for alias in node.names}
    return found


def test_sizing_re_exports_only_what_code_outside_it_reads():
    """steps/sizing/__init__.py hands on the names the stages, workflows/, benchmarks/ and scripts/ read as
    `sizing.X`; the rest (and what only tests read) stays in its module, so the list does not grow past its users."""
    from steps import sizing

    users = [
        p
        for folder in ("steps", "workflows", "benchmarks", "scripts")
        for p in (ROOT / folder).rglob("*.py")
        if not p.is_relative_to(STEPS / "sizing")
    ]
    read = set().union(*(_names_taken_from_sizing(p) for p in users))
    assert sorted(set(sizing.__all__) - read) == [], "re-exported but read by no code outside steps/sizing"
