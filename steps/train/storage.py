"""Where the step reads and writes when a location is an s3:// URI: the dataset folder downloaded (`local_folder`),
the finished output uploaded with `result.json` last (`publish`); a local folder is used as it is."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from steps.core.cli import RESULT_FILE
from steps.core.io import atomic_dir, is_uri
from steps.core.sealed import upload


@contextmanager
def local_folder(location: str) -> Iterator[Path]:
    """`location` as a local folder: itself, or a download of the s3:// prefix into a temp folder."""
    if not is_uri(location):
        yield Path(location)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    if not fs.exists(root):
        raise FileNotFoundError(f"{location} does not exist: run fetch-dataset first, or fix the URI")
    with tempfile.TemporaryDirectory(prefix="dataset-") as tmp:
        fs.get(f"{root.rstrip('/')}/", f"{tmp}/", recursive=True)
        yield Path(tmp)


def publish(folder: Path, location: str) -> None:
    """Put a finished output folder at `location`: one rename locally; on S3 `result.json` goes last, so a folder
    holding it is complete."""
    if not is_uri(location):
        with atomic_dir(Path(location)) as out:
            shutil.copytree(folder, out, dirs_exist_ok=True)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    upload(fs, folder, root.rstrip("/"), last=RESULT_FILE)
