"""Sealed folders: named folders under a local folder or an s3:// prefix (fsspec) that are either complete or ignored.

A folder is written to a temp place and sealed with `COMPLETE.json` (every file's sha256) last: locally it then
appears in one rename; on S3 the seal is uploaded after every other file. A reader takes a folder only when it is
sealed and every file matches its digest, so a torn write (a killed pod, a spot reclaim) is never read back.
Training checkpoints (steps/train.py), convert-gguf's cache of base-model conversions and evaluate's cache of
generations are kept this way.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steps.common import is_uri, read_json, sha256_file, write_json

COMPLETE = "COMPLETE.json"  # written last, with every file's digest: a folder without it (or not matching it) is torn


def seal(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    write_json(folder / COMPLETE, {str(p.relative_to(folder)): sha256_file(p) for p in files})


def torn(folder: Path) -> str | None:
    """Why `folder` is not complete, or None."""
    if not (folder / COMPLETE).is_file():
        return f"no {COMPLETE} (the writer stopped before finishing)"
    for name, digest in read_json(folder / COMPLETE).items():
        path = folder / name
        if not path.is_file() or sha256_file(path) != digest:
            return f"{name} is missing or differs from its recorded digest"
    return None


def upload(fs: Any, folder: Path, root: str, last: str) -> None:
    """Every file of `folder` to `root` on `fs`, the file named `last` after all others: its presence means complete."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != last)
    for path in [*files, folder / last]:
        fs.put_file(str(path), f"{root}/{path.relative_to(folder)}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class SealedFolders:
    """Named sealed folders under `location` (a folder or an s3:// prefix). `who` prefixes the messages."""

    def __init__(self, location: str, who: str) -> None:
        import fsspec

        self.location = location.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.location)
        self.remote = is_uri(self.location) and not self.location.startswith("file://")
        self.who = who

    def names(self) -> list[tuple[str, str]]:
        """(name, path) of every folder under the root, sealed or not, by name."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if not name.startswith("."):
                found.append((name, entry.rstrip("/")))
        return sorted(found)

    def _clean_stale(self) -> None:
        """Temp folders of a writer killed mid-write: never a folder of the store, only litter."""
        if self.remote:
            return
        for stale in Path(self.root).glob(".*.tmp-*-*"):
            if not _alive(int(stale.name.split(".tmp-")[1].split("-")[0])):
                shutil.rmtree(stale, ignore_errors=True)

    @contextmanager
    def first_complete(self, candidates: list[tuple[str, str]]) -> Iterator[Path | None]:
        """The first of `candidates` ((name, path) as `names()` gives) that is complete, as a local folder."""
        self._clean_stale()
        with tempfile.TemporaryDirectory(prefix="sealed-") as tmp:
            found = None
            for name, path in candidates:
                local = Path(path)
                if self.remote:
                    local = Path(tmp) / name
                    if self.fs.exists(f"{path}/{COMPLETE}"):
                        self.fs.get(f"{path}/", f"{local}/", recursive=True)
                problem = torn(local)
                if problem is None:
                    found = local
                    break
                print(f"{self.who}: skipping {self.location}/{name}: {problem}", file=sys.stderr)
            yield found

    @contextmanager
    def get(self, name: str) -> Iterator[Path | None]:
        """The complete folder `name` as a local folder, or None (absent or torn)."""
        path = f"{self.root}/{name}"
        with self.first_complete([(name, path)] if self.fs.exists(path) else []) as found:
            yield found

    def put(self, name: str, fill: Callable[[Path], None]) -> None:
        """Write folder `name`: `fill` writes its files into a temp folder, which is then sealed and published."""
        if not self.remote:
            Path(self.root).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-{os.getpid()}-", dir=None if self.remote else self.root))
        try:
            fill(tmp)
            seal(tmp)
            if self.remote:
                if self.fs.exists(f"{self.root}/{name}"):
                    self.fs.rm(f"{self.root}/{name}", recursive=True)
                upload(self.fs, tmp, f"{self.root}/{name}", last=COMPLETE)
            else:
                final = Path(self.root) / name
                if final.exists():  # a rerun after a crash left this one behind
                    shutil.rmtree(final)
                tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove(self, path: str) -> None:
        self.fs.rm(path, recursive=True)

    def clear(self) -> None:
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
