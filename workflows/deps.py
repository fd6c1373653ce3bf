"""What a stage's code is: the project modules its module imports, directly or through others, read statically.

    python -m workflows.deps steps.register      # prints the files, one a line

`workflows/render.py` writes them as the stage's code dependencies in dvc.yaml, so a change to any module a stage
really runs (a shared helper, the serving settings, the parity probes) reruns it under `dvc repro`, and a change to
one it does not run leaves it alone. The modules are parsed, never imported: rendering stays instant and has no side
effects. Every `import` counts, at any depth — module level, inside functions (the steps keep heavy and
rarely-needed imports there), under `if TYPE_CHECKING:` — and the packages a module lives in count too (Python runs
their `__init__.py` first); a stage that is a package (`python -m steps.train`) runs its `__main__.py` as well. A
project module is one whose file lies in this repository: a top-level package (a folder with `__init__.py`) or a
top-level `.py` file; everything else (the standard library, installed packages) is not followed. Imports by computed
name (`importlib.import_module(name)`) cannot be seen here; tests/test_render_deps.py checks that what Python really
imports is within what this finds.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The project file of module `name` (`a.b` -> a/b.py or a/b/__init__.py), or None when it is not ours."""
    parts = name.split(".")
    top = root / parts[0]
    if not ((top / "__init__.py").is_file() or top.with_suffix(".py").is_file()):
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _with_packages(name: str) -> list[str]:
    """`a.b.c` -> a, a.b, a.b.c: importing a module first runs the packages it lives in."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def direct_imports(name: str, root: Path = ROOT) -> frozenset[str]:
    """The project modules that module `name`'s own source imports, anywhere in it (with their packages)."""
    path = module_file(name, root)
    if path is None:
        raise ValueError(f"{name} is not a module of this project (no {name.replace('.', '/')}.py under {root})")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..a import b
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base:
                wanted.add(base)
            # `from pkg import name`: name may be a submodule (then it is imported) or just an attribute of pkg.
            wanted.update(f"{base}.{alias.name}".lstrip(".") for alias in node.names if alias.name != "*")
    found = set()
    for module in wanted:
        for part in _with_packages(module):
            if module_file(part, root) is not None:
                found.add(part)
    found.discard(name)
    return frozenset(found)


def entry_modules(name: str, root: Path = ROOT) -> list[str]:
    """What `python -m name` runs: the module with its packages, and for a package its `__main__` too."""
    main = f"{name}.__main__"
    path = module_file(name, root)
    runs_main = path is not None and path.name == "__init__.py" and module_file(main, root) is not None
    return _with_packages(name) + ([main] if runs_main else [])


def closure(name: str, root: Path = ROOT) -> list[str]:
    """What `python -m name` runs (`entry_modules`) and every project module that imports, transitively; sorted."""
    seen: set[str] = set()
    todo = entry_modules(name, root)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(direct_imports(module, root))
    return sorted(seen)


def code_files(name: str, root: Path = ROOT) -> list[str]:
    """The files of `closure(name)`, relative to `root`, as POSIX paths, sorted: a stage's code dependencies."""
    return sorted(module_file(m, root).relative_to(root).as_posix() for m in closure(name, root))


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["--help"]:
        if arg in ("-h", "--help"):
            print(__doc__)
            break
        print("\n".join(code_files(arg)))
