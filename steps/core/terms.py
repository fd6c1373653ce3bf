"""The teachers file's terms decisions (data/teachers.yaml): which teacher may be distilled from, and its GGUF.

Shared by the teacher step (steps/teacher.py, summaries through an endpoint) and logit-level distillation
(steps/kd_targets.py, the teacher's top-k): one terms decision for both, in a module that is not a step.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# Every field a teachers-file entry must carry: the terms decision and who made it.
ENTRY_FIELDS = ("provider", "model", "terms_url", "outputs_may_train_models", "reviewed_by", "reviewed_on", "hosted")


class TeacherError(RuntimeError):
    """The teacher endpoint failed or answered something unusable."""


class TermsError(ValueError):
    """The terms gate refused the teacher; nothing was sent."""


def load_teachers(path: str) -> dict[str, dict]:
    """The teachers file's entries by name; raises TermsError naming every incomplete entry and field."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise TermsError(f"{path}: cannot read the teachers file ({e}); it records each teacher's terms") from e
    entries = (doc or {}).get("teachers") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise TermsError(f"{path}: expected a mapping `teachers: {{<name>: {{{', '.join(ENTRY_FIELDS)}}}}}`")
    problems = []
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            problems.append(f"{path}: teachers.{name}: expected a mapping of {', '.join(ENTRY_FIELDS)}")
            continue
        for key in ENTRY_FIELDS:
            if entry.get(key) in (None, ""):
                problems.append(f"{path}: teachers.{name}.{key} is missing; a teacher is usable only with it")
        for key in ("outputs_may_train_models", "hosted"):
            if key in entry and not isinstance(entry[key], bool):
                problems.append(f"{path}: teachers.{name}.{key} must be true or false, got {entry[key]!r}")
        if entry.get("hosted") is True and not entry.get("endpoint"):
            problems.append(f"{path}: teachers.{name}.endpoint is missing; a hosted teacher is reached only there")
    if problems:
        raise TermsError("\n".join(problems))
    return entries


def allowed_entry(teachers_file: str, name: str) -> dict:
    """The teachers file's entry `name` when it is listed and its terms allow training other models on its outputs;
    else TermsError. The one terms decision: the teacher step (gate) and logit-level distillation (kd-targets) ask."""
    entries = load_teachers(teachers_file)
    entry = entries.get(name)
    if entry is None:
        raise TermsError(
            f"teacher {name!r} is not listed in {teachers_file} (listed: {', '.join(entries) or 'none'}); "
            "have its terms reviewed and add an entry with whether its outputs may train other models; "
            "no request was sent"
        )
    if entry["outputs_may_train_models"] is not True:
        raise TermsError(
            f"{teachers_file}: teachers.{name}: the provider's terms ({entry['terms_url']}) do not allow training "
            f"other models on its outputs (reviewed by {entry['reviewed_by']} on {entry['reviewed_on']}); use a "
            "teacher whose terms allow it, e.g. an open-weights one; no request was sent"
        )
    return entry


def resolve_gguf(spec: str) -> Path:
    """A GGUF file, or `package:<module>/<file>` inside an installed package (the default teacher ships in one)."""
    if spec.startswith("package:"):
        import importlib.util

        module, _, name = spec.removeprefix("package:").partition("/")
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            raise TeacherError(f"teacher GGUF {spec}: package {module!r} is not installed")
        path = Path(next(iter(found.submodule_search_locations))) / name
    else:
        path = Path(spec)
    if not path.is_file():
        raise TeacherError(f"teacher GGUF {spec}: {path} does not exist")
    return path
