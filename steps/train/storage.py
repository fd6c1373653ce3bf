"""Where the step writes when its output is an s3:// URI: the finished output uploaded with `result.json` last
(`publish`); a local folder is filled in one rename. (Reading an s3:// folder is `steps.core.io.local_folder`.)"""

from __future__ import annotations

import shutil
from pathlib import Path

from steps.core.cli import RESULT_FILE
from steps.core.io import atomic_dir, is_uri
from steps.core.sealed import upload


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
