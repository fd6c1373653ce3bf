"""convert-gguf's base cache is keyed on what determines the cached GGUF and its parity report: the base's files
(weights included) at its revision, llama.cpp's version, the conversion settings, the probes, and an explicit
version of the converting code — not on the bytes of source files, and not on whatever happens to be downloaded.

    pytest tests/test_base_cache_key.py
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from steps import convert_gguf
from steps.convert_gguf import base_cache
from steps.gguf import parity


def write_base(folder: Path, weights: bytes = b"weights-1", tokenizer: str = '{"model": "bpe"}') -> Path:
    """A base model's folder as the key sees it: config, tokenizer, chat template, weights, and a README."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (folder / "generation_config.json").write_text('{"eos_token_id": 2}')
    (folder / "tokenizer.json").write_text(tokenizer)
    (folder / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("# a base\n")
    return folder


@pytest.fixture
def converter(tmp_path: Path) -> Path:
    folder = tmp_path / "llama.cpp"
    (folder / "conversion").mkdir(parents=True)
    (folder / "VERSION").write_text("0.3.36\n")
    (folder / "convert_hf_to_gguf.py").write_text("# llama.cpp's converter\n")
    (folder / "conversion/llama.py").write_text("# a model class\n")
    return folder


@pytest.fixture
def cfg(tmp_path: Path, converter: Path) -> convert_gguf.ConvertConfig:
    return convert_gguf.ConvertConfig(
        adapter=Path("adapter"), dataset=Path("dataset"), out=Path("out"),
        base_model=str(write_base(tmp_path / "base")), converter_dir=str(converter),
    )  # fmt: skip


def key(cfg: convert_gguf.ConvertConfig, **changes) -> str | None:
    return convert_gguf.base_cache_key(convert_gguf.ConvertConfig(**{**vars(cfg), **changes}))


# --- the base's files -----------------------------------------------------------------------------------------------


def test_the_same_base_gives_the_same_key_wherever_it_lies(cfg, tmp_path: Path):
    first = key(cfg)
    assert first is not None and first == key(cfg)
    copy = shutil.copytree(cfg.base_model, tmp_path / "elsewhere")
    assert key(cfg, base_model=str(copy)) == first


def test_changed_weights_are_another_key(cfg, tmp_path: Path):
    other = write_base(tmp_path / "retrained", weights=b"weights-2")  # the same tokenizer, other weights
    assert key(cfg, base_model=str(other)) != key(cfg)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "chat_template.jinja", "generation_config.json"])
def test_each_file_the_conversion_reads_is_part_of_the_key(cfg, tmp_path: Path, name: str):
    other = Path(shutil.copytree(cfg.base_model, tmp_path / "other"))
    (other / name).write_text((other / name).read_text() + " ")
    assert key(cfg, base_model=str(other)) != key(cfg)


def test_a_readme_is_not_part_of_the_key(cfg, tmp_path: Path):
    other = Path(shutil.copytree(cfg.base_model, tmp_path / "other"))
    (other / "README.md").write_text("# reworded\n")
    assert key(cfg, base_model=str(other)) == key(cfg)


def test_a_base_without_its_weights_has_no_key(cfg, tmp_path: Path):
    other = Path(shutil.copytree(cfg.base_model, tmp_path / "other"))
    (other / "model.safetensors").unlink()
    assert key(cfg, base_model=str(other)) is None


def test_every_shard_of_a_sharded_base_is_part_of_the_key(cfg, tmp_path: Path):
    sharded = Path(shutil.copytree(cfg.base_model, tmp_path / "sharded"))
    (sharded / "model.safetensors").unlink()
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = {"weight_map": {"a.weight": shards[0], "b.weight": shards[1]}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    for shard in shards:
        (sharded / shard).write_bytes(shard.encode())
    first = key(cfg, base_model=str(sharded))
    assert first is not None
    (sharded / shards[1]).write_bytes(b"changed")
    assert key(cfg, base_model=str(sharded)) != first
    (sharded / shards[1]).unlink()  # not downloaded (yet): no key rather than a key without it
    assert key(cfg, base_model=str(sharded)) is None


# --- a hub id: the revision's files, not what happens to be downloaded ----------------------------------------------


class FakeHub:
    """The hub's snapshots as huggingface_hub's cache holds them: `snapshot_download` returns the revision's folder,
    downloading the files the patterns ask for (local_files_only=False) or returning what is there already."""

    def __init__(self, root: Path):
        self.root, self.remote = root, {}

    def publish(self, revision: str, base: Path) -> None:
        self.remote[revision] = base

    def download_tokenizer(self, revision: str) -> None:
        """What `AutoTokenizer.from_pretrained` leaves in the cache on a fresh pod: no weights yet."""
        local = self.root / revision
        local.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(self.remote[revision] / name, local / name)

    def snapshot_download(self, repo_id: str, *, revision: str, local_files_only: bool = False, **kw) -> str:
        from fnmatch import fnmatch

        local = self.root / revision
        if not local_files_only:
            local.mkdir(parents=True, exist_ok=True)
            for path in self.remote[revision].iterdir():
                allowed = any(fnmatch(path.name, p) for p in kw.get("allow_patterns") or ["*"])
                if allowed and not any(fnmatch(path.name, p) for p in kw.get("ignore_patterns") or []):
                    shutil.copy(path, local / path.name)
        if not local.is_dir():
            raise FileNotFoundError(f"{repo_id}@{revision} is not in the cache")
        return str(local)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    import huggingface_hub

    fake = FakeHub(tmp_path / "hf-cache")
    fake.publish("v1", write_base(tmp_path / "remote-v1", weights=b"weights-1"))
    fake.publish("v2", write_base(tmp_path / "remote-v2", weights=b"weights-2"))  # same tokenizer, new weights
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    return fake


def test_a_new_base_revision_with_the_same_tokenizer_is_another_key_on_a_fresh_pod(cfg, hub: FakeHub):
    on_hub = {"base_model": "org/base"}
    # Each run on a fresh pod: the tokenizer is already downloaded when the key is computed, the weights are not.
    hub.download_tokenizer("v1")
    v1 = key(cfg, **on_hub, base_revision="v1")
    hub.download_tokenizer("v2")
    v2 = key(cfg, **on_hub, base_revision="v2")
    assert v1 is not None and v2 is not None
    assert v1 != v2, "revision v2 would reuse the base GGUF converted from v1's weights"
    # A pod that has the whole revision already computes the same key: the key is the revision's, not the pod's.
    assert key(cfg, **on_hub, base_revision="v1") == v1


def test_a_hub_base_is_keyed_like_the_same_files_in_a_folder(cfg, hub: FakeHub):
    assert key(cfg, base_model="org/base", base_revision="v1") == key(cfg, base_model=str(hub.remote["v1"]))


def test_a_base_that_cannot_be_read_has_no_key(cfg, hub: FakeHub, capsys: pytest.CaptureFixture):
    assert key(cfg, base_model="org/base", base_revision="never-published") is None
    assert "no base cache" in capsys.readouterr().err


# --- llama.cpp, the settings and the code's version -----------------------------------------------------------------


def test_another_llama_cpp_is_another_key(cfg, converter: Path, monkeypatch: pytest.MonkeyPatch):
    import llama_cpp

    first = key(cfg)
    (converter / "VERSION").write_text("0.3.37\n")
    assert key(cfg) != first
    (converter / "VERSION").write_text("0.3.36\n")
    monkeypatch.setattr(llama_cpp, "__version__", "0.0.1")
    assert key(cfg) != first


def test_a_converter_without_a_version_file_is_keyed_by_all_its_sources(cfg, converter: Path):
    (converter / "VERSION").unlink()
    first = key(cfg)
    (converter / "conversion/llama.py").write_text("# a changed model class\n")
    assert key(cfg) != first


@pytest.mark.parametrize("change", [{"quantization": "Q4_K_M"}, {"parity_tokens": 16}], ids=lambda c: next(iter(c)))
def test_a_setting_that_changes_the_cached_file_or_report_is_another_key(cfg, change: dict):
    assert key(cfg, **change) != key(cfg)


@pytest.mark.parametrize(
    "change",
    [
        {"min_top1_agreement": "Q8_0=0.99,Q4_K_M=0.9"},  # the cached report is judged again against these
        {"max_mean_kl": "Q8_0=0.01,Q4_K_M=0.1"},
        {"max_eos_rate_drop": 0.0},
        {"threads": 1},
        {"run_id": "another-run"},
        {"adapter": Path("another-adapter")},
        {"quantizations": "Q8_0"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_setting_that_does_not_change_the_base_conversion_is_the_same_key(cfg, change: dict):
    assert key(cfg, **change) == key(cfg)


def test_the_probes_and_the_prompt_they_are_asked_in_are_part_of_the_key(cfg, monkeypatch: pytest.MonkeyPatch):
    first = key(cfg)
    with monkeypatch.context() as m:
        m.setattr(parity, "PROBE_DOCUMENTS", (*parity.PROBE_DOCUMENTS, "one more probe"))
        assert key(cfg) != first
    with monkeypatch.context() as m:
        m.setattr(parity, "TOKENIZER_PROBES", ("only one probe",))
        assert key(cfg) != first
    with monkeypatch.context() as m:  # a new serving prompt: the base's references are asked differently
        m.setattr(parity, "messages", lambda doc: [{"role": "user", "content": f"Summarise: {doc}"}])
        assert key(cfg) != first
    with monkeypatch.context() as m:
        m.setattr(parity, "TIE_MARGIN", parity.TIE_MARGIN / 2)
        assert key(cfg) != first
    assert key(cfg) == first


def test_bumping_the_conversion_code_version_is_another_key(cfg, monkeypatch: pytest.MonkeyPatch):
    first = key(cfg)
    monkeypatch.setattr(base_cache, "BASE_CONVERSION_VERSION", base_cache.BASE_CONVERSION_VERSION + 1)
    assert key(cfg) != first


def test_rewording_a_comment_or_a_message_keeps_the_key(cfg, tmp_path: Path):
    """The cache's code with a reworded comment and message, imported from another file, gives the same key (parity.md's
    lines are steps/gguf/report.py's, which the key does not read at all)."""
    source = Path(base_cache.__file__).read_text()
    reworded = source.replace("base conversion reused from", "base conversion taken from") + "\n# A reworded comment.\n"
    assert reworded.count("base conversion taken from") == 1, "the message moved: reword another line"
    assert "steps.gguf.report" not in source
    folder = tmp_path / "reworded"
    folder.mkdir()
    (folder / "base_cache.py").write_text(reworded)
    spec = importlib.util.spec_from_file_location("base_cache_reworded", folder / "base_cache.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        assert module.base_cache_key(cfg) == convert_gguf.base_cache_key(cfg)
    finally:
        del sys.modules[spec.name]
