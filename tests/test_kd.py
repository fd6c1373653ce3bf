"""Logit-level distillation (the kd-targets stage, steps/kd_targets.py; train's KL term, steps/train/kd.py; the
sidecar, steps/core/kd_sidecar.py; steps/gguf/tokenizer_identity.py): the tokenizer identity that decides whether a
teacher may be used, and — integration — a tiny teacher converted to GGUF and scored by llama.cpp, whose top-k pulls a
tiny student towards it faster than cross-entropy alone does over the same steps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from steps import kd_targets
from steps.core import kd_sidecar
from steps.gguf import tokenizer_identity as identity
from steps.train import TrainConfig, config_problems, kd
from tests.conftest import ROOT

QWEN2_VOCAB = ROOT / ".cache/llama.cpp/models/ggml-vocab-qwen2.gguf"  # llama.cpp's own test vocabulary (Qwen2's)


def listed(tmp_path: Path, **entry: object) -> dict[str, str]:
    """KDConfig's teacher settings for a teachers file whose one entry, `test-teacher`, allows distillation (open
    weights, no gguf named) unless `entry` says otherwise."""
    fields = {"provider": "us", "model": "tiny", "terms_url": "https://example.org/terms", "outputs_may_train_models":
              True, "reviewed_by": "tests", "reviewed_on": "2026-12-01", "hosted": False, **entry}  # fmt: skip
    path = tmp_path / "teachers.yaml"
    path.write_text(json.dumps({"teachers": {"test-teacher": fields}}))
    return {"teacher": "test-teacher", "teachers_file": str(path)}


@pytest.mark.parametrize(
    "entry, teacher, message",
    [
        ({}, "someone-else", "is not listed in"),
        ({"outputs_may_train_models": False}, "test-teacher", "do not allow training other models"),
        ({"hosted": True, "endpoint": "https://api.example.com"}, "test-teacher", "is a hosted API"),
        ({"gguf": "OTHER"}, "test-teacher", "is not the GGUF"),
        ({}, "test-teacher", "names no gguf"),
    ],
)
def test_the_kd_teacher_passes_the_same_terms_gate_as_the_teacher_step(
    tmp_path: Path, entry: dict, teacher: str, message: str
):
    """Before any file is read or scored: the entry is listed, allows training on its outputs, runs here, and a
    --teacher-gguf beside an entry naming its GGUF is that very file."""
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF other")
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF mine")
    if entry.get("gguf") == "OTHER":
        entry = {**entry, "gguf": str(other)}
    settings = {**listed(tmp_path, **entry), "teacher": teacher}
    gguf = "" if message == "names no gguf" else str(mine)
    cfg = kd_targets.KDConfig(out=tmp_path / "targets", dataset=str(tmp_path / "unused"), teacher_gguf=gguf, **settings)
    with pytest.raises(ValueError, match=message):
        kd_targets.run(cfg)
    assert not (tmp_path / "targets").exists()


def test_the_default_kd_teacher_is_the_committed_open_weights_entry():
    gguf, entry = kd_targets.teacher_file(kd_targets.KDConfig(out=Path("unused"), dataset="unused"))
    assert entry["outputs_may_train_models"] is True and entry["hosted"] is False
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.is_file()


def test_kd_settings_are_checked_with_the_rest():
    cfg = TrainConfig(dataset="d", out="o", kd_weight=1.5, kd_temperature=0)
    problems = config_problems(cfg)
    assert any("--kd-weight 1.5" in p for p in problems), problems
    assert any("--kd-temperature 0" in p for p in problems), problems
    assert any("needs --kd-targets" in p for p in problems), problems
    assert not config_problems(TrainConfig(dataset="d", out="o"))  # sequence-level stays the default


def test_at_kd_weight_0_nothing_is_scored_and_train_at_a_weight_is_told_why(tmp_path: Path):
    """The local run's default: DVC runs kd-targets anyway, which reads nothing (no dataset, no teacher) and says KD
    was off; a train that wants targets from that folder is refused naming it."""
    out = tmp_path / "kd-targets"
    assert kd_targets.main(["--kd-weight", "0", "--dataset", str(tmp_path / "absent"), "--out", str(out)]) == 0
    assert json.loads((out / kd_sidecar.META_FILE).read_text()) == {"kd_weight": 0.0, "scored": False}
    assert json.loads((out / "result.json").read_text())["scored"] is False
    assert not (out / kd_sidecar.TOPK_FILE).exists()
    with pytest.raises(kd_sidecar.KDError, match=r"no topk.npz \(written with --kd-weight 0: KD was off\)"):
        kd_sidecar.load_targets(str(out), [{"id": "r1"}])


def test_a_teacher_with_another_tokenizer_is_refused_naming_both(tmp_path: Path, base_model_dir: Path):
    if not QWEN2_VOCAB.is_file():
        pytest.skip("scripts/install_llama_cpp.sh fetches llama.cpp's test vocabularies")
    cfg = kd_targets.KDConfig(out=tmp_path / "targets", dataset=str(tmp_path / "unused"), teacher_gguf=str(QWEN2_VOCAB),
                      base_model=str(base_model_dir), **listed(tmp_path))  # fmt: skip
    with pytest.raises(kd_sidecar.KDError) as e:
        kd_targets.run(cfg)
    message = str(e.value)
    assert str(QWEN2_VOCAB) in message and str(base_model_dir) in message
    assert "vocab" in message and "merges" in message
    assert not (tmp_path / "targets").exists()


def test_a_tokenizer_that_differs_only_in_its_merges_or_normaliser_is_another_tokenizer(base_model_dir: Path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    spec = json.loads(tokenizer.backend_tokenizer.to_str())

    def variant(change: dict) -> dict:
        backend = Tokenizer.from_str(json.dumps({**spec, **change}))
        return identity.tokenizer_identity(
            PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=tokenizer.eos_token)
        )

    student = identity.tokenizer_identity(tokenizer)
    identity.require_same_tokenizer(variant({}), "teacher", student, "student")
    fewer_merges = variant({"model": {**spec["model"], "merges": spec["model"]["merges"][:-1]}})
    with pytest.raises(kd_sidecar.KDError, match="differ in merges;"):
        identity.require_same_tokenizer(fewer_merges, "teacher", student, "student")
    with pytest.raises(kd_sidecar.KDError, match="differ in normalizer;"):
        identity.require_same_tokenizer(variant({"normalizer": {"type": "Lowercase"}}), "teacher", student, "student")


# --- integration: a tiny teacher through llama.cpp, a tiny student ---------------------------------------------------


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight committed training rows as fetch-dataset writes them (the loss, not the data, is under test)."""
    out = tmp_path_factory.mktemp("kd") / "dataset"
    out.mkdir()
    lines = (ROOT / "data/summaries/train.jsonl").read_text().splitlines()[:8]
    (out / "train.jsonl").write_text("\n".join(lines) + "\n")
    (out / "lineage.json").write_text('{"note": "eight rows of the committed train split"}\n')
    return out


@pytest.fixture(scope="module")
def teacher_gguf(tmp_path_factory: pytest.TempPathFactory, base_model_dir: Path) -> Path:
    """A tiny Llama with SmolLM2's tokenizer and a wider init (so its distributions are far from the student's),
    converted by llama.cpp's converter."""
    from steps.gguf.conversion import convert_hf_dir
    from tests.tiny import build_model

    work = tmp_path_factory.mktemp("kd-teacher")
    build_model(base_model_dir, work / "hf", seed=7, init_range=0.3, max_positions=1024)
    convert_hf_dir(ROOT / ".cache/llama.cpp", work / "hf", work / "teacher.gguf", outtype="f32")
    return work / "teacher.gguf"


def _kl_to_teacher(adapter: Path, base: Path, dataset: Path, targets: Path) -> float:
    """The trained student's mean per-token KL (T = 1) to the teacher's top-k on the training rows."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from steps.core.dataset import load_split
    from steps.train import collate, encode_rows, pad_id_of

    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = load_split(dataset, "train")
    examples = encode_rows(tokenizer, rows, 512)
    found = kd_sidecar.load_targets(str(targets), rows)["rows"]
    model = AutoModelForCausalLM.from_pretrained(base)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for ex, (_, ids, lps) in zip(examples, found, strict=True):
            batch = collate([ex], pad_id_of(tokenizer))
            keep, labels = batch.pop("keep"), batch.pop("labels")
            logits = model(**batch, logits_to_keep=keep + 1).logits[:, :-1]
            mask = labels[:, -keep:] != -100
            kl = kd.sparse_kl(logits[mask], torch.from_numpy(ids).long(), torch.from_numpy(lps.astype("float32")), 1.0)
            total, n = total + float(kl.sum()), n + len(ids)
    return total / n


@pytest.mark.integration
def test_kd_pulls_the_student_towards_the_teacher_faster_than_cross_entropy(
    tmp_path: Path, tiny_model_dir: Path, small_dataset: Path, teacher_gguf: Path
):
    from steps import train

    cfg = kd_targets.KDConfig(out=tmp_path / "targets", dataset=str(small_dataset), teacher_gguf=str(teacher_gguf),
                              base_model=str(tiny_model_dir), kd_top_k=8, threads=2, **listed(tmp_path))  # fmt: skip
    scored = kd_targets.run(cfg)
    assert scored.rows == 8 and scored.summary_tokens > 8 * 5
    common = {"dataset": str(small_dataset), "base_model": str(tiny_model_dir), "batch_size": 4, "epochs": 3,
              "threads": 2, "lora_dropout": 0.0, "log_every": 100, "checkpoint_every": 0}  # fmt: skip
    runs = {}
    for name, weight in (("ce", 0.0), ("kd", 0.5)):
        cfg = TrainConfig(out=str(tmp_path / name), kd_weight=weight, kd_targets=str(tmp_path / "targets"), **common)
        train.run(cfg)
        runs[name] = _kl_to_teacher(tmp_path / name, tiny_model_dir, small_dataset, tmp_path / "targets")
    before = _kl_to_teacher(None, tiny_model_dir, small_dataset, tmp_path / "targets")
    print(f"student KL to the teacher's top-k: before {before:.4f}, CE only {runs['ce']:.4f}, KD {runs['kd']:.4f}")
    assert runs["kd"] < before, (before, runs)
    assert runs["kd"] < runs["ce"] - 0.1 * (before - runs["kd"]), (before, runs)

    # The sidecar names the student tokenizer it was scored for: a student with another one is refused before training.
    other = tmp_path / "other-student"
    shutil.copytree(tiny_model_dir, other)
    tokenizer_json = other / "tokenizer.json"
    nfkc = tokenizer_json.read_text().replace('"normalizer": null', '"normalizer": {"type": "NFKC"}')
    tokenizer_json.write_text(nfkc)
    cfg = TrainConfig(out=str(tmp_path / "refused"), kd_weight=0.5, kd_targets=str(tmp_path / "targets"),
                      **{**common, "base_model": str(other)})  # fmt: skip
    with pytest.raises(kd_sidecar.KDError, match="differ in normalizer") as e:
        train.run(cfg)
    assert str(other) in str(e.value) and str(tiny_model_dir) in str(e.value)
    assert not (tmp_path / "refused").exists()
