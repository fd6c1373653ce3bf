"""Manifests that see everything (issue 37, the audit's attack 7, its last two parts): `chain.manifest` lists every
entry of a model folder and refuses symlinks and anything but regular files; register holds the artifact store to
every file it uploaded (MLflow's own included) and refuses extras; a reused download folder holding anything the
version does not record is not reused.

Each test runs the step's own code against a real MLflow registry in a local SQLite store with a local artifact folder;
the attacks write only where the shared steps role or a holder of the artifact bucket could.

    pytest tests/test_manifests.py
"""

from __future__ import annotations

import json
import os
import py_compile
from pathlib import Path

import pytest

from steps import register
from steps.core import chain
from tests import test_verdict
from tests.test_verdict import BETTER, evaluated, registered

# test_verdict's fixtures, one definition: its key pair and a SQLite registry in the test's folder.
keys = test_verdict.keys
uri = test_verdict.uri


def model_folder(root: Path) -> Path:
    (root / "code" / "steps").mkdir(parents=True)
    (root / "MLmodel").write_text("flavors: {}\n")
    (root / "code" / "steps" / "__init__.py").write_text("")
    return root


def sourceless_pyc(folder: Path, name: str) -> Path:
    """A compiled module with no source beside it: Python imports it from a folder on sys.path as it is."""
    source = folder / f"{name}.py"
    source.write_text("PLANTED = True\n")
    target = folder / f"{name}.pyc"
    py_compile.compile(str(source), cfile=str(target), doraise=True)
    source.unlink()
    return target


# --- chain.manifest: every entry, none followed -----------------------------------------------------------------------


def test_a_manifest_refuses_a_symlinked_file_or_folder_and_special_files(tmp_path: Path):
    folder = model_folder(tmp_path / "model")
    assert set(chain.manifest(folder)) == {"MLmodel", "code/steps/__init__.py"}
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "planted").mkdir(parents=True)
    (elsewhere / "planted" / "__init__.py").write_text("import os  # runs on import\n")

    # A symlinked folder under code/: importable, and `rglob` + `is_file` never listed what it holds.
    (folder / "code" / "planted").symlink_to(elsewhere / "planted", target_is_directory=True)
    with pytest.raises(chain.ChainError, match=r"code/planted is a symlink"):
        chain.manifest(folder)
    (folder / "code" / "planted").unlink()

    (folder / "code" / "steps" / "linked.py").symlink_to(elsewhere / "planted" / "__init__.py")
    with pytest.raises(chain.ChainError, match=r"code/steps/linked\.py is a symlink"):
        chain.manifest(folder)
    (folder / "code" / "steps" / "linked.py").unlink()

    os.mkfifo(folder / "code" / "pipe")
    with pytest.raises(chain.ChainError, match=r"code/pipe is not a regular file"):
        chain.manifest(folder)
    (folder / "code" / "pipe").unlink()

    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    with pytest.raises(chain.ChainError, match="a symlink"):
        chain.manifest(link)
    # A sourceless .pyc is a file like any other: listed, so compared.
    sourceless_pyc(folder / "code" / "steps", "evil")
    assert "code/steps/evil.pyc" in chain.manifest(folder)


# --- download_verified: a reused folder holds exactly what the version records ----------------------------------------


def local_version(tmp_path: Path, uri: str) -> tuple[object, str, dict[str, str]]:
    """A version whose source is a local model folder and whose manifest tag records it."""
    from mlflow import MlflowClient

    source = model_folder(tmp_path / "source")
    recorded = chain.manifest(source)
    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model("manifested")
    tags = {chain.MANIFEST_TAG: json.dumps(recorded)}
    version = client.create_model_version("manifested", str(source), tags=tags).version
    return client, str(version), recorded


@pytest.mark.parametrize("plant", ["symlinked folder", "sourceless pyc", "symlinked destination"])
def test_a_reused_download_holding_anything_unrecorded_is_downloaded_again(tmp_path: Path, uri: str, plant: str):
    client, version, recorded = local_version(tmp_path, uri)
    dest = tmp_path / "work" / "model"
    assert chain.download_verified(client, "manifested", version, dest) == dest
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "planted").mkdir(parents=True)
    (elsewhere / "planted" / "__init__.py").write_text("import os  # runs on import\n")
    if plant == "symlinked folder":
        (dest / "code" / "planted").symlink_to(elsewhere / "planted", target_is_directory=True)
    elif plant == "sourceless pyc":
        sourceless_pyc(dest / "code" / "steps", "planted")
    else:  # the whole destination replaced by a link to a folder holding the recorded files and more
        model_folder(elsewhere / "model")
        (elsewhere / "model" / "code" / "planted.py").write_text("import os\n")
        os.rename(dest, tmp_path / "work" / "moved")
        dest.symlink_to(elsewhere / "model", target_is_directory=True)

    assert chain.download_verified(client, "manifested", version, dest) == dest
    assert not dest.is_symlink() and chain.manifest(dest) == recorded  # the planted entry is gone, nothing else
    planted = [dest / "code" / "planted", dest / "code" / "steps" / "planted.pyc", dest / "code" / "planted.py"]
    assert not any(os.path.lexists(p) for p in planted)
    assert (elsewhere / "planted" / "__init__.py").is_file()  # removed as a link, never followed


# --- register: the store holds exactly what was uploaded --------------------------------------------------------------


def stored_folder(uri: str, model_id: str) -> Path:
    from mlflow import MlflowClient

    return Path(MlflowClient(tracking_uri=uri).get_logged_model(model_id).artifact_location.removeprefix("file://"))


PLANTS = {
    # A sourceless .pyc beside the contract's code: the loader would import it; the read-back compared only .py/.gguf.
    "sourceless pyc": lambda folder: sourceless_pyc(folder / "code" / "steps" / "contract", "planted"),
    # MLflow's own file, rewritten: the read-back never compared it.
    "MLmodel": lambda folder: (folder / "MLmodel").write_text((folder / "MLmodel").read_text() + "# planted\n"),
    "requirements": lambda folder: (folder / "requirements.txt").write_text("evil-package==6.6.6\n"),
}


@pytest.mark.parametrize("plant", PLANTS)
def test_register_refuses_a_store_that_differs_from_what_it_uploaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str, keys: tuple[str, str], plant: str
):
    from mlflow import MlflowClient

    private, public = keys
    run_id = f"wf-{plant.replace(' ', '-')}"
    outputs = evaluated(tmp_path, monkeypatch, BETTER, private, run_id)
    log_model = register._log_model

    def then_tampered(*args: object, **kwargs: object) -> object:
        """The upload, then a holder of the artifact bucket at work before register reads it back."""
        info = log_model(*args, **kwargs)
        PLANTS[plant](stored_folder(uri, info.model_id))
        return info

    monkeypatch.setattr(register, "_log_model", then_tampered)
    with pytest.raises(chain.ChainError, match="not what this step uploaded") as refused:
        registered(outputs, tmp_path, uri, run_id, public)
    shown = {"sourceless pyc": "code/steps/contract/planted.pyc", "MLmodel": "MLmodel: sha256",
             "requirements": "requirements.txt"}  # fmt: skip
    assert shown[plant] in str(refused.value)
    assert MlflowClient(tracking_uri=uri).search_model_versions("name = 'verdict-model'") == []


def test_register_records_every_file_it_uploaded_and_a_retry_checks_against_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str, keys: tuple[str, str]
):
    from mlflow import MlflowClient

    private, public = keys
    outputs = evaluated(tmp_path, monkeypatch, BETTER, private, "wf-retry")
    # The first attempt uploads everything and dies before the version exists; the bucket is then tampered with.
    monkeypatch.setattr(register, "uploaded_manifest", lambda *a, **k: (_ for _ in ()).throw(SystemExit("killed")))
    with pytest.raises(SystemExit):
        registered(outputs, tmp_path, uri, "wf-retry", public)
    monkeypatch.undo()
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("distillery").experiment_id])
    uploaded = json.loads(run.data.tags[register.UPLOADED_FILES_TAG])
    assert {"MLmodel", "requirements.txt", "summariser_model.py", "artifacts/candidate.gguf"} <= set(uploaded)
    folder = stored_folder(uri, run.data.tags[register.UPLOADED_TAG])
    assert chain.manifest(folder) == uploaded
    sourceless_pyc(folder / "code" / "steps", "planted")
    with pytest.raises(chain.ChainError, match=r"code/steps/planted\.pyc: not in the recorded manifest"):
        registered(outputs, tmp_path, uri, "wf-retry", public)
    (folder / "code" / "steps" / "planted.pyc").unlink()
    result = registered(outputs, tmp_path, uri, "wf-retry", public)
    tags = client.get_model_version("verdict-model", result.model_version).tags
    assert json.loads(tags[chain.MANIFEST_TAG]) == uploaded
