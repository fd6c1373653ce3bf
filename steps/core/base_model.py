"""What `--base-model` names: a local folder when one is there, else a model hub id. Every step that loads the base
(preflight, ingest, train, train's KD scorer, convert-gguf) and the dataset build's preamble ask `base_model_problems`
before anything loads, so a folder that is not there is said as such, naming the setting, instead of the hub client's
"Repo id must be in the form 'repo_name' or 'namespace/repo_name'" traceback (transformers hands a path that is not a
folder to the hub as a repo id).
"""

from __future__ import annotations

from pathlib import Path

# The embedded run's base: scripts/setup.sh writes it (scripts/prepare_base_model.py), every step's default.
PREPARE = "python scripts/prepare_base_model.py --out {path}"


def hub_id(value: str) -> bool:
    """Whether the hub would take `value` as a repo id ('name' or 'namespace/name'), by the hub client's own rule."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def folder_problem(value: str, cwd: Path | None = None) -> str | None:
    """What is wrong with a base model setting, without loading anything, or None: a folder that is not there (or
    holds no config.json), a file given for a folder. A relative path is taken from `cwd` (default: where this
    process runs). A value the hub would take as a repo id is left to the hub, unless its first part is a folder here
    (`models/smol` with a `models/` folder: a folder that is missing, not a hub id)."""
    given = Path(value).expanduser()
    path = given if cwd is None or given.is_absolute() else cwd / given
    fix = (
        "give the folder the base model was saved into (config.json, tokenizer, weights), or a hub id (org/name); "
        f"for the embedded run's base: {PREPARE.format(path=value)}"
    )
    if path.is_dir() and (path / "config.json").is_file():
        return None
    if path.is_dir():
        return f"{path.resolve()} holds no config.json: not a model; {fix}"
    if path.exists():
        return f"{path.resolve()} is a file, not a model's folder; {fix}"
    if hub_id(value) and not (len(given.parts) > 1 and path.parent.is_dir()):
        return None
    return f"no such folder ({path.resolve()}); {fix}"


def base_model_problems(value: str) -> list[str]:
    """`folder_problem` as a step's config problem, naming its flag."""
    problem = folder_problem(value)
    return [f"--base-model {value}: {problem}"] if problem else []
