"""Sealed folders: named folders under a local folder or an s3:// prefix (fsspec) that are either complete or ignored.

A folder is written to a temp place and sealed with `COMPLETE.json` (every file's sha256) last: locally it then
appears in one rename; on S3 the seal is uploaded after every other file. A reader takes a folder only when it is
sealed and every file matches its digest, so a torn write (a killed pod, a spot reclaim) is never read back.
Training checkpoints (steps/train/checkpoints.py), convert-gguf's cache of base-model conversions and evaluate's cache
of generations are kept this way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steps.core.io import is_uri, read_json, sha256_file, write_json

COMPLETE = "COMPLETE.json"  # written last, with every file's digest: a folder without it (or not matching it) is torn


def seal(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    write_json(folder / COMPLETE, {str(p.relative_to(folder)): sha256_file(p) for p in files})


def torn(folder: Path) -> str | None:
    """Why `folder` is not complete, or None."""
    try:
        if not (folder / COMPLETE).is_file():
            return f"no {COMPLETE} (the writer stopped before finishing)"
        for name, digest in read_json(folder / COMPLETE).items():
            path = folder / name
            if not path.is_file() or sha256_file(path) != digest:
                return f"{name} is missing or differs from its recorded digest"
    except (OSError, ValueError) as e:  # replaced by another writer while being read
        return f"could not be read whole ({type(e).__name__}: {e})"
    return None


def upload(fs: Any, folder: Path, root: str, last: str) -> None:
    """Replace whatever is at `root` on `fs` with every file of `folder`, the file named `last` after all others: its
    presence means complete."""
    if fs.exists(root):
        fs.rm(root, recursive=True)
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
                problem = None
                if self.remote:
                    local = Path(tmp) / name
                    try:
                        if self.fs.exists(f"{path}/{COMPLETE}"):
                            self.fs.get(f"{path}/", f"{local}/", recursive=True)
                    except OSError as e:  # files removed by another writer between listing and download
                        problem = f"could not be read whole ({type(e).__name__}: {e})"
                problem = problem or torn(local)
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
        """Write folder `name`: `fill` writes its files into a temp folder, which is then sealed and published.

        A name stands for its content (a cache key, a training step), so when a complete `name` is already there —
        another writer of the same key finished first — it is kept and this one dropped; a torn one is replaced.
        Locally the replacement is a rename, so a reader sees the old folder or the new one, never a mix; on S3 the
        files are removed and uploaded one by one, and a reader that meets a mix finds it torn and skips it.
        """
        if not self.remote:
            Path(self.root).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-{os.getpid()}-", dir=None if self.remote else self.root))
        try:
            fill(tmp)
            seal(tmp)
            if not self.remote:
                self._publish(tmp, Path(self.root) / name)
                return
            with self.get(name) as existing:
                if existing is None:
                    upload(self.fs, tmp, f"{self.root}/{name}", last=COMPLETE)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _publish(self, tmp: Path, final: Path) -> None:
        """Rename `tmp` to `final`, first moving a torn `final` aside (renaming onto a non-empty folder fails)."""
        for _ in range(5):
            if final.exists():
                if torn(final) is None:
                    return  # another writer of this name got there first
                aside = final.with_name(f".{final.name}.tmp-{os.getpid()}-torn-{uuid.uuid4().hex[:8]}")
                with contextlib.suppress(FileNotFoundError):  # another writer moved it first
                    final.rename(aside)
                shutil.rmtree(aside, ignore_errors=True)
            try:
                tmp.rename(final)
                return
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        raise RuntimeError(f"{self.who}: could not publish {final}: other writers kept replacing it")

    def remove(self, path: str) -> None:
        self.fs.rm(path, recursive=True)

    def clear(self) -> None:
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
