"""Files and folders every step writes the same way: atomic output folders, JSON and JSONL, digests, the git commit,
environment variables set for a block, and an s3:// folder read as a local one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block; afterwards put back what was there (or nothing)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def is_uri(location: str) -> bool:
    """A URI (s3://…, file://…) rather than a local path."""
    return "://" in location


def is_shared_store(location: str) -> bool:
    """A store other roles write (an s3:// prefix), not a folder of this machine's own (a path, file://): what is kept
    there is only as trustworthy as its every writer (issue 37)."""
    return is_uri(location) and not location.startswith("file://")


@contextmanager
def local_folder(location: str) -> Iterator[Path]:
    """`location` as a local folder: itself, or a download of the s3:// prefix into a temp folder."""
    if not is_uri(location):
        yield Path(location)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    if not fs.exists(root):
        raise FileNotFoundError(f"{location} does not exist: run the stage that writes it first, or fix the URI")
    with tempfile.TemporaryDirectory(prefix="dataset-") as tmp:
        fs.get(f"{root.rstrip('/')}/", f"{tmp}/", recursive=True)
        yield Path(tmp)


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temp folder beside `final`; on success it replaces `final` in one rename, on error it is removed.

    Readers never see a half-written output folder, and a failed step leaves the previous one untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """One JSON object a line, UTF-8, keys sorted."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{path} is missing: run the step that produces it first") from e


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_sha(cwd: Path | None = None) -> str:
    """The code's git commit: GIT_SHA (set in images at build time) or `git rev-parse HEAD`, else 'unknown'."""
    if os.environ.get("GIT_SHA"):
        return os.environ["GIT_SHA"]
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip()
