"""The hash chain from the gate's verdict to what is served: every link names the bytes the previous one vouched for.

| link | what it records or refuses | here |
|---|---|---|
| evaluate | decision.json `files`: the sha256 of each GGUF it judged (base, champion, candidate) | `judged_record` |
| evaluate | judges a champion only if its GGUF hashes to the version's `gguf.sha256` | `model_gguf` |
| register | refuses a candidate that does not hash to decision.json's | `check_judged` |
| register | records `model.manifest`: every file of the logged model (GGUF, MLmodel, code) | `manifest` |
| serve, loader, champion | refuse a version whose files differ from it (or are added) | `download_verified` |
| register | records `adapter.manifest`: every file of the adapter folder it logs | `manifest` |
| push-adapter | refuses to push an adapter file that differs from it (or is missing, or added) | `manifest_problems` |

The registry (MLflow's database, reached through its server) is the root of trust: the artifact bucket is writable by
more roles than the registry, so nothing read from the bucket is believed without a hash recorded in the registry or in
the decision that vouched for it. `load_model` is the pyfunc route that checks before MLflow runs the model's code
(the code cannot check itself: a changed copy would change the check).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from steps.core.io import sha256_file

SHA256_TAG = "gguf.sha256"  # the registered GGUF's sha256, on the model version
MANIFEST_TAG = "model.manifest"  # JSON {path in the logged model: sha256} of every file, on the model version
ADAPTER_MANIFEST_TAG = "adapter.manifest"  # JSON {path in train's folder: sha256} of the adapter register logged
JUDGED = "files"  # decision.json: {role: {"file": name, "sha256": hex}} for every GGUF evaluate judged


class ChainError(ValueError):
    """A link of the chain does not hold: the bytes differ from what the previous link recorded."""


def judged_record(files: dict[str, Path]) -> dict[str, dict[str, str]]:
    """decision.json's record of the files judged: each role's file name and sha256."""
    return {role: {"file": Path(path).name, "sha256": sha256_file(path)} for role, path in files.items()}


def check_judged(decision: dict[str, Any], role: str, file: Path, sha256: str, where: str) -> None:
    """Refuse `file` (hashing to `sha256`) unless it is the file decision.json says was judged as `role`."""
    judged = (decision.get(JUDGED) or {}).get(role) or {}
    if not judged.get("sha256"):
        raise ChainError(
            f"{where}/decision.json records no sha256 for the {role} it judged ({JUDGED}.{role}.sha256; written by "
            "an older evaluate): run evaluate again, so that what is registered is what the gate judged"
        )
    if judged["sha256"] != sha256:
        raise ChainError(
            f"{file} has sha256 {sha256}, but the gate judged a {role} with sha256 {judged['sha256']} "
            f"({where}/decision.json): the file changed after evaluation. Refusing it; run the pipeline again from "
            "convert-gguf"
        )


def manifest(folder: Path) -> dict[str, str]:
    """Every file under `folder` (its path relative to it, '/'-separated) with its sha256.

    Every entry is looked at, none followed: a symlink (to a file or a folder) or anything but a regular file or a
    folder (a FIFO, a socket, a device) is a ChainError naming it. A model's folder holds only files it was given, so
    such an entry was planted, and what it points at would be loaded unchecked (a symlinked folder under `code/` is
    importable code that no hash names; `Path.rglob` and `is_file` skipped it silently).
    """
    root = Path(folder)
    if root.is_symlink() or not root.is_dir():
        raise ChainError(f"{root}: {'a symlink' if root.is_symlink() else 'not a folder'}; a model folder is a real "
                         "folder of regular files. Refusing it")  # fmt: skip
    found: dict[str, str] = {}
    for top, dirs, files in os.walk(root, onerror=_raise, followlinks=False):
        for name in sorted([*dirs, *files]):
            path = Path(top) / name
            mode = path.lstat().st_mode
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                raise ChainError(f"{root}: {rel} is a symlink (to {os.readlink(path)}); a model folder holds only "
                                 "regular files. Refusing it")  # fmt: skip
            if stat.S_ISREG(mode):
                found[rel] = sha256_file(path)
            elif not stat.S_ISDIR(mode):
                raise ChainError(f"{root}: {rel} is not a regular file (mode {stat.filemode(mode)}); a model folder "
                                 "holds only regular files. Refusing it")  # fmt: skip
    return dict(sorted(found.items()))


def _raise(error: OSError) -> None:
    raise ChainError(f"{error.filename}: cannot be listed ({error.strerror}); refusing the folder") from error


def manifest_problems(recorded: dict[str, str], found: dict[str, str]) -> list[str]:
    """How `found` differs from `recorded`: files changed, missing and added (each a line naming the file)."""
    problems = [f"{p}: sha256 {found[p]}, recorded {recorded[p]}" for p in recorded if p in found and
                found[p] != recorded[p]]  # fmt: skip
    problems += [f"{p}: missing" for p in recorded if p not in found]
    problems += [f"{p}: not in the recorded manifest (added)" for p in found if p not in recorded]
    return problems


def recorded_manifest(tags: dict[str, str], label: str, tag: str = MANIFEST_TAG) -> dict[str, str]:
    """The manifest a model version records under `tag` (its model's files; `ADAPTER_MANIFEST_TAG`: its adapter's);
    ChainError when it records none (registered by an older register)."""
    if not tags.get(tag):
        raise ChainError(
            f"{label} has no {tag} tag, so its files cannot be checked: register it again with "
            "steps.register, which records it; refusing it"
        )
    try:
        recorded = json.loads(tags[tag])
    except ValueError as e:
        raise ChainError(f"{label}: its {tag} tag is not JSON ({e}); refusing it") from e
    pairs = recorded.items() if isinstance(recorded, dict) else [(None, None)]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in pairs):
        raise ChainError(f"{label}: its {tag} tag is not a JSON object of path: sha256; refusing it")
    return recorded


def reusable(dest: Path, recorded: dict[str, str], label: str) -> bool:
    """Whether `dest` (an earlier download) holds exactly the recorded files, and nothing else: no extra file (a
    planted `.pyc`, `sitecustomize.py`), no symlink, nothing but regular files. Said on stderr when it is not."""
    if not (dest.exists() or dest.is_symlink()):
        return False
    try:
        problems = manifest_problems(recorded, manifest(dest))
    except ChainError as e:
        problems = [str(e)]
    if problems:
        print(f"{label}: not reusing {dest} (" + "; ".join(problems)[:500] + "): downloading it again",
              file=sys.stderr)  # fmt: skip
    return not problems


def remove(path: Path) -> None:
    """Remove `path` without following a symlink: a symlink is unlinked, never what it points at."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def download_verified(client: Any, name: str, version: str, dest: Path, server: str = "") -> Path:
    """The model version's files in `dest`, every one hashing to the version's recorded manifest.

    Reuses `dest` when it already holds exactly those bytes. Raises ChainError, leaving nothing in `dest`, when a file
    changed, is missing or was added in the artifact store since registration. `server`: the tracking URI (resolves
    the `mlflow-artifacts:` URIs of a server that proxies its artifact store).
    """
    import mlflow.artifacts

    label = f"models:/{name}/{version}"
    recorded = recorded_manifest(client.get_model_version(name, version).tags, label)
    dest = Path(dest)
    if reusable(dest, recorded, label):
        return dest
    remove(dest)
    partial = dest.with_name(dest.name + ".partial")
    remove(partial)
    uri = client.get_model_version_download_uri(name, version)
    got = Path(
        mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(partial), tracking_uri=server or None)
    )
    problems = manifest_problems(recorded, manifest(got))
    if problems:
        remove(partial)
        raise ChainError(
            f"{label}: the sha256 of its files in the artifact store is not what was registered ({MANIFEST_TAG}): "
            "the file changed after registration:\n  " + "\n  ".join(problems) + "\nRefusing it; register the "
            "model again from its pipeline run, or move the alias back"
        )
    got.rename(dest)
    remove(partial)
    return dest


def model_gguf(folder: Path, tags: dict[str, str], label: str) -> Path:
    """The one GGUF of a verified model folder, checked against the version's `gguf.sha256` tag."""
    files = sorted(Path(folder).rglob("*.gguf"))
    if len(files) != 1:
        raise ChainError(f"{label} holds {len(files)} .gguf files ({[f.name for f in files]}); a registered model "
                         "holds exactly one")  # fmt: skip
    expected = tags.get(SHA256_TAG, "")
    actual = sha256_file(files[0])
    if actual != expected:
        raise ChainError(
            f"{label}: its GGUF {files[0].name} has sha256 {actual}, but the version records "
            f"{expected or 'none'} ({SHA256_TAG}): the file changed after registration. Refusing it"
        )
    return files[0]


def resolve_version(client: Any, model_uri: str) -> tuple[str, str]:
    """(name, version) of `models:/<name>/<version>` or `models:/<name>@<alias>`."""
    ref = model_uri.removeprefix("models:/")
    if ref == model_uri or not ref:
        raise ChainError(f"{model_uri!r}: use models:/<name>/<version> or models:/<name>@<alias>")
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return name, str(client.get_model_version_by_alias(name, alias).version)
    name, _, version = ref.rpartition("/")
    return name, version


def load_model(model_uri: str, dest: Path, tracking_uri: str = "", model_config: dict | None = None) -> Any:
    """`mlflow.pyfunc.load_model`, after checking every file of the version (its code included) against its manifest.

    from steps.core.chain import load_model
    model = load_model("models:/distillery-summariser@champion", Path("/tmp/model"))
    """
    import mlflow.pyfunc
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri or None)
    name, version = resolve_version(client, model_uri)
    folder = download_verified(client, name, version, Path(dest), tracking_uri)
    # Import the checked sources as they are: no bytecode written beside them (a `.pyc` is not in the manifest, so the
    # folder would no longer be what was checked, and the next load would download it again).
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return mlflow.pyfunc.load_model(str(folder), model_config=model_config)
    finally:
        sys.dont_write_bytecode = writes
