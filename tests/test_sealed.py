"""Sealed folders (steps/core/sealed.py): complete or ignored, locally and on S3, with writers and readers at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from steps.core.sealed import COMPLETE, SealedFolders, torn
from tests.conftest import make_bucket


def writer(label: str, size: int = 2000):
    """A fill that writes two files carrying the writer's label: a folder mixing two writers shows it."""

    def fill(folder: Path) -> None:
        (folder / "sub").mkdir()
        (folder / "a.txt").write_text(label * size)
        (folder / "sub" / "b.json").write_text(json.dumps({"by": label}))

    return fill


def read_back(store: SealedFolders, name: str) -> str | None:
    """The label of the writer whose folder `get` returned (asserting it is one writer's whole), or None."""
    with store.get(name) as found:
        if found is None:
            return None
        label = json.loads((found / "sub" / "b.json").read_text())["by"]
        assert (found / "a.txt").read_text() == label * 2000, "a folder mixing two writers was read"
        return label


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SealedFolders:
    if request.param == "local":
        return SealedFolders(str(tmp_path / "store"), "test")
    s3 = request.getfixturevalue("s3_server")
    request.getfixturevalue("aws_env")
    bucket = f"sealed-{abs(hash(str(tmp_path))) % 10**8}"
    make_bucket(s3, bucket)
    return SealedFolders(f"s3://{bucket}/store", "test")


def test_what_is_put_is_got_back_whole(store: SealedFolders):
    assert read_back(store, "k1") is None
    store.put("k1", writer("x"))
    assert read_back(store, "k1") == "x"
    assert [name for name, _ in store.names()] == ["k1"]  # no temp folder left beside it


def test_a_complete_folder_is_kept_when_its_name_is_written_again(store: SealedFolders):
    store.put("k1", writer("first"))
    store.put("k1", writer("second"))
    assert read_back(store, "k1") == "first"


def test_torn_folders_are_skipped_and_replaced(store: SealedFolders, tmp_path: Path):
    store.put("k1", writer("old"))
    store.put("k2", writer("old"))
    store.put("k3", writer("old"))
    # k1 loses its seal, k2 a file, k3 gets a changed byte: each is what a killed or clashing writer leaves.
    store.fs.rm(f"{store.root}/k1/{COMPLETE}")
    store.fs.rm(f"{store.root}/k2/sub/b.json")
    changed = tmp_path / "a.txt"
    changed.write_text("old" * 1999 + "ole")
    store.fs.put_file(str(changed), f"{store.root}/k3/a.txt")
    for name in ("k1", "k2", "k3"):
        assert read_back(store, name) is None
        store.put(name, writer("new"))
        assert read_back(store, name) == "new"


def test_torn_names_why(tmp_path: Path):
    (tmp_path / "f").mkdir()
    assert "no COMPLETE.json" in torn(tmp_path / "f")
    (tmp_path / "f" / COMPLETE).write_text("{not json")
    assert "could not be read whole" in torn(tmp_path / "f")


def test_writers_and_readers_at_once_never_see_a_mix(store: SealedFolders):
    """Four writers put the same names with different content while a reader reads them: no writer fails, every
    read is one writer's whole folder or nothing, and every name ends complete."""
    names = [f"k{i}" for i in range(6)]
    errors: list[str] = []
    done = threading.Event()

    def write(label: str) -> None:
        try:
            for name in names:
                store.put(name, writer(label))
        except Exception as e:
            errors.append(f"writer {label}: {type(e).__name__}: {e}")

    def read() -> None:
        try:
            while not done.is_set():
                for name in names:
                    read_back(store, name)
        except Exception as e:
            errors.append(f"reader: {type(e).__name__}: {e}")

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(label,)) for label in "abcd"]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert not errors, errors
    for name in names:
        if read_back(store, name) is None:  # on S3 a clash can leave a mix: the next writer replaces it
            store.put(name, writer("e"))
        assert read_back(store, name) in set("abcde")
