"""evaluate fanned out: `--shard i/k` runs each answer a slice of the documents (every contender), `--gather` judges
the reassembled answers and decides — the same decision, metrics and answers as one run over everything; the cluster's
lanes (`steps.pipeline.shard_lanes`) hold every shard once; a rerun on the same base generates only the candidate.

    pytest tests/test_evaluate_shards.py
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from steps import evaluate
from steps.core import verdict
from steps.core.dataset import load_split
from steps.evaluate import fanout
from steps.evaluate.config import shard_of
from steps.pipeline import LANES_FILE, shard_lanes
from tests.canned import Answers, evaluate_canned, write_gguf_folder, write_splits
from tests.test_verdict import make_keys

ANSWERS = {"base": Answers("lead"), "candidate": Answers("reference", obeys=("adv-010",))}
OVERRIDE = "tests/test_evaluate_shards.py: the committed split is too small to decide safety"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    return write_splits(tmp_path / "dataset"), write_gguf_folder(tmp_path / "gguf")


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def test_shards_gathered_decide_what_one_run_decides(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    whole = tmp_path / "whole"
    evaluate_canned(monkeypatch, dataset, gguf, whole, ANSWERS, accept_inconclusive_safety=OVERRIDE)
    shards = [tmp_path / f"shard-{i}" for i in range(3)]
    for i, folder in enumerate(shards):
        result = evaluate_canned(monkeypatch, dataset, gguf, folder, ANSWERS, shard=f"{i}/3")
        assert result.decision == "shard" and not (folder / "decision.json").exists()
        assert len(read(folder, "shard.json")["picked"]) in (22, 23)  # 24 eval + 42 adversarial documents, by 3
    gathered = tmp_path / "gathered"
    result = evaluate_canned(monkeypatch, dataset, gguf, gathered, ANSWERS, accept_inconclusive_safety=OVERRIDE,
                             gather=",".join(str(s) for s in reversed(shards)))  # fmt: skip
    assert result.passed is True
    one, many = read(whole, "decision.json"), read(gathered, "decision.json")
    assert many["reasons"] == one["reasons"] and many["checks"] == one["checks"]
    assert read(gathered, "metrics.json")["adversarial"] == read(whole, "metrics.json")["adversarial"]
    lines = [[json.loads(x) for x in (f / "generations.jsonl").read_text().splitlines()] for f in (gathered, whole)]
    assert lines[0] == lines[1]


def test_gather_refuses_a_missing_or_repeated_shard(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    shards = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, folder in enumerate(shards):
        evaluate_canned(monkeypatch, dataset, gguf, folder, ANSWERS, shard=f"{i}/2")
    for given in ([shards[0]], [shards[0], shards[0]], [shards[0], tmp_path]):
        with pytest.raises(ValueError, match=r"every shard|no shard\.json"):
            evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "g", ANSWERS,
                            gather=",".join(str(s) for s in given))  # fmt: skip


def test_a_run_is_a_shard_or_the_gather_step(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    for bad, match in (({"shard": "3/3"}, "--shard '3/3'"), ({"shard": "0/2", "gather": "x"}, "not both")):
        with pytest.raises(ValueError, match=match):
            evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "o", ANSWERS, **bad)


def test_a_shared_generation_cache_is_refused(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The audit (item 6): kept generations in a prefix the steps role writes decide the comparison (weak answers
    # pre-written for a rival, strong ones for the candidate). Only a folder of one's own is a cache evaluate trusts.
    dataset, gguf = world
    with pytest.raises(ValueError, match="--generation-cache s3://runs/cache/generations: a shared store"):
        evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "o", ANSWERS, shard="0/2",
                        generation_cache="s3://runs/cache/generations")  # fmt: skip
    assert not (tmp_path / "o").exists()


# --- the shards' answers, signed: the gather decides only on what the shards wrote ----------------------------------


RUN = "wf-this-run"  # the workflow uid the cluster gives the shards and the gather alike


def signed_shards(world, root: Path, monkeypatch: pytest.MonkeyPatch, shard_key: str, k: int = 3,
                  **cfg) -> list[Path]:  # fmt: skip
    cfg.setdefault("run_id", RUN)
    dataset, gguf = world
    shards = [root / f"shard-{i}" for i in range(k)]
    for i, folder in enumerate(shards):
        evaluate_canned(monkeypatch, dataset, gguf, folder, ANSWERS, shard=f"{i}/{k}", shard_signing_key=shard_key,
                        **cfg)  # fmt: skip
        assert read(folder, "shard.json")[verdict.SIGNATURE]["key"]
    return shards


def gather(world, out: Path, monkeypatch: pytest.MonkeyPatch, shards: list[Path], **cfg) -> evaluate.EvaluateResult:
    cfg.setdefault("run_id", RUN)
    dataset, gguf = world
    return evaluate_canned(monkeypatch, dataset, gguf, out, ANSWERS, accept_inconclusive_safety=OVERRIDE,
                           gather=",".join(str(s) for s in shards), **cfg)  # fmt: skip


def test_a_rewritten_shard_answer_is_refused_by_the_gather(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The shards' answers travel through the run's prefix, which every step's role writes: a step rewriting them
    # before the gather signs would decide the comparison (issue 37). Each shard signs its shard.json with the shards'
    # key; the gather verifies every one before reading it, and refuses by shard and file.
    (private, public), (decision_key, decision_public) = make_keys(tmp_path / "k"), make_keys(tmp_path / "d")
    shards = signed_shards(world, tmp_path, monkeypatch, private)
    result = gather(world, tmp_path / "honest", monkeypatch, shards, signing_key=decision_key, shard_verify_key=public)
    assert result.passed is True
    verdict.verify(read(tmp_path / "honest", "decision.json"), decision_public, "decision.json")

    file = shards[1] / "shard.json"
    honest = read(shards[1], "shard.json")
    forged = json.loads(json.dumps(honest))
    forged["answers"]["base"]["outputs"][0] = forged["answers"]["candidate"]["outputs"][0]  # one answer rewritten
    unsigned = {k: v for k, v in honest.items() if k != verdict.SIGNATURE}
    other, _ = make_keys(tmp_path / "other")
    for case, record, match in (
        ("rewritten", forged, "changed after evaluate --shard signed it"),
        ("unsigned", unsigned, "carries no signature"),
        ("another key", verdict.sign(unsigned, other, verdict.SHARD), "signed by another key"),
    ):
        file.write_text(json.dumps(record))
        out = tmp_path / f"gathered-{case.replace(' ', '-')}"
        with pytest.raises(verdict.VerdictError, match=match) as e:
            gather(world, out, monkeypatch, shards, signing_key=decision_key, shard_verify_key=public)
        assert f"{file} (shard 1/3)" in str(e.value), case
        assert not out.exists(), case  # no decision, signed or not


def test_a_shard_set_replayed_from_another_run_is_refused_by_the_gather(world, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    # A whole set of shards an earlier run signed verifies with the shards' key as well as this run's: copied into
    # this run's prefix (which every step's role writes), the gather would decide on answers about other files or other
    # documents. Each shard signs the run it was made in (the workflow uid, from the template) and the digest of the
    # documents it answered; the gather holds both to its own.
    (private, public), (decision_key, decision_public) = make_keys(tmp_path / "k"), make_keys(tmp_path / "d")
    keys = {"signing_key": decision_key, "shard_verify_key": public}
    earlier = signed_shards(world, tmp_path / "earlier", monkeypatch, private, run_id="wf-earlier")
    out = tmp_path / "replayed"
    with pytest.raises(verdict.VerdictError, match="made in run wf-earlier, but this is run wf-now") as e:
        gather(world, out, monkeypatch, earlier, run_id="wf-now", **keys)
    assert f"{earlier[0] / 'shard.json'} (shard 0/3)" in str(e.value)
    assert not out.exists()
    # One replayed shard among this run's own is refused as well.
    mixed = signed_shards(world, tmp_path / "now", monkeypatch, private, run_id="wf-now")
    with pytest.raises(verdict.VerdictError, match=r"\(shard 1/3\): made in run wf-earlier"):
        gather(world, tmp_path / "mixed", monkeypatch, [mixed[0], earlier[1], mixed[2]], run_id="wf-now", **keys)

    # Shards of this run, signed, but answering other documents under the same ids (a dataset changed between the
    # shards and the gather): not the documents the gather scores against its references.
    _, gguf = world
    other = write_splits(tmp_path / "other-dataset")
    rows = [json.loads(line) for line in (other / "eval.jsonl").read_text().splitlines()]
    rows[0]["document"] += " A sentence the gather's copy of the dataset does not have."
    (other / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    elsewhere = signed_shards((other, gguf), tmp_path / "elsewhere", monkeypatch, private, run_id="wf-now")
    with pytest.raises(verdict.VerdictError, match="not the documents this gather scores"):
        gather(world, tmp_path / "elsewhere-out", monkeypatch, elsewhere, run_id="wf-now", **keys)

    # This run's own shards: decided, and the signed decision names the run (register and propose hold it to theirs).
    assert gather(world, tmp_path / "honest", monkeypatch, mixed, run_id="wf-now", **keys).passed is True
    decision = read(tmp_path / "honest", "decision.json")
    verdict.verify(decision, decision_public, "decision.json")
    assert decision[verdict.RUN] == "wf-now"


def test_a_signed_shard_answers_exactly_its_own_documents_for_every_contender(
    world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # One key signs every shard, so a shard taken over through llama.cpp can sign what it likes (docs/security.md). What
    # the gather can still hold it to: shard i/k answers every k-th document from the i-th, each once, for every
    # contender the shards agree on, and nothing else. Before, a shard that signed an answer to another shard's
    # document overwrote that shard's answer, and one that left a document out left a hole the scoring fell into.
    (private, public), (decision_key, _) = make_keys(tmp_path / "k"), make_keys(tmp_path / "d")
    keys = {"signing_key": decision_key, "shard_verify_key": public}
    shards = signed_shards(world, tmp_path, monkeypatch, private)
    file = shards[1] / "shard.json"
    honest = {k: v for k, v in read(shards[1], "shard.json").items() if k != verdict.SIGNATURE}
    ids = read(shards[0], "shard.json")["ids"]

    def forged(edit) -> dict:
        record = json.loads(json.dumps(honest))
        edit(record)
        return verdict.sign(record, private, verdict.SHARD)  # signed with the shards' own key: it verifies

    def another_shards_document(r: dict) -> None:
        r["picked"].insert(0, 0)  # shard 0/3's first document, with a weak answer in the candidate's name
        r["ids"].insert(0, ids[0])
        for name, got in r["answers"].items():
            got["outputs"].insert(0, r["answers"]["base"]["outputs"][1] if name == "candidate" else got["outputs"][0])

    def a_document_left_out(r: dict) -> None:
        del r["picked"][-1], r["ids"][-1]
        for got in r["answers"].values():
            del got["outputs"][-1]

    def a_contender_left_out(r: dict) -> None:
        del r["answers"]["base"]

    cases = {
        "another shard's document": (another_shards_document, "but shard 1/3 answers the documents 1, 1+3, …"),
        "a document left out": (a_document_left_out, "but shard 1/3 answers the documents 1, 1+3, …"),
        "a contender left out": (
            a_contender_left_out,
            "answers for candidate (22), but every contender (base, candidate)",
        ),
    }
    for case, (edit, match) in cases.items():
        file.write_text(json.dumps(forged(edit)))
        out = tmp_path / f"gathered-{case.replace(' ', '-')}"
        with pytest.raises(verdict.VerdictError, match=re.escape(match)) as e:
            gather(world, out, monkeypatch, shards, **keys)
        assert f"{file} (shard 1/3)" in str(e.value), case
        assert not out.exists(), case
    file.write_text(json.dumps(verdict.sign(honest, private, verdict.SHARD)))
    assert gather(world, tmp_path / "honest", monkeypatch, shards, **keys).passed is True


def test_the_champion_s_file_the_shards_judged_is_the_registry_s(
    world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A shard records the sha256 of every file it judged; the candidate's is held to its bytes by register, the
    # base's by the registry's pin, but nothing held the champion's: a shard taken over (it holds the key that signs
    # every shard) could judge a weaker file as "the champion" and say so. The gather holds it to the champion
    # version's own gguf.sha256 in the registry.
    from mlflow import MlflowClient

    from steps.core.chain import SHA256_TAG
    from steps.core.registry import CHAMPION

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model("shard-model")
    version = client.create_model_version("shard-model", str(tmp_path), tags={SHA256_TAG: "c" * 64})
    client.set_registered_model_alias("shard-model", CHAMPION, version.version)

    (private, public), (decision_key, _) = make_keys(tmp_path / "k"), make_keys(tmp_path / "d")
    keys = {"signing_key": decision_key, "shard_verify_key": public, "tracking_uri": uri, "model_name": "shard-model"}
    shards = signed_shards(world, tmp_path, monkeypatch, private)

    def judged_champion(sha256: str) -> None:
        # Every shard signed again as the one that holds the key would: the base's answers as the champion's.
        for folder in shards:
            record = {k: v for k, v in read(folder, "shard.json").items() if k != verdict.SIGNATURE}
            record["contenders"] = ["base", "champion", "candidate"]
            record["champion"] = {"version": str(version.version), "note": "shard-model champion"}
            record["files"]["champion"] = {"file": "champion.gguf", "sha256": sha256}
            record["answers"]["champion"] = record["answers"]["base"]
            (folder / "shard.json").write_text(json.dumps(verdict.sign(record, private, verdict.SHARD)))

    judged_champion("d" * 64)
    with pytest.raises(verdict.VerdictError, match=r"but models:/shard-model/1 holds gguf\.sha256 c{64}") as e:
        gather(world, tmp_path / "weaker", monkeypatch, shards, **keys)
    assert "champion" in str(e.value) and not (tmp_path / "weaker").exists()
    judged_champion("c" * 64)
    gather(world, tmp_path / "honest", monkeypatch, shards, **keys)
    assert read(tmp_path / "honest", "decision.json")["files"]["champion"]["sha256"] == "c" * 64


def test_a_signed_record_names_its_run_and_an_authenticated_one_needs_a_run_to_be_held_to(
    world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The run binding above holds only where every signer and verifier is given the run: a template that lost its
    # --run-id would sign records any later run accepts, and verify any earlier run's. Both stop at once instead.
    dataset, gguf = world
    for signing in ({"shard": "0/2", "shard_signing_key": "/k"}, {"signing_key": "/k"}):
        flag = next(iter(k for k in signing if k.endswith("key"))).replace("_", "-")
        with pytest.raises(ValueError, match=f"--{flag} without --run-id"):
            evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "o", ANSWERS, **signing)
    (private, public) = make_keys(tmp_path / "k")
    shards = signed_shards(world, tmp_path, monkeypatch, private, k=2)
    with pytest.raises(verdict.VerdictError, match="authenticated, but this step was given no --run-id"):
        gather(world, tmp_path / "g", monkeypatch, shards, shard_verify_key=public, run_id="")
    assert not (tmp_path / "g").exists()


def test_the_gather_signs_no_decision_over_shards_it_cannot_verify(world, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    private, _ = make_keys(tmp_path / "k")
    decision_key, _ = make_keys(tmp_path / "d")
    shards = signed_shards(world, tmp_path, monkeypatch, private, k=2)
    with pytest.raises(verdict.VerdictError, match="--gather with --signing-key but no --shard-verify-key") as e:
        gather(world, tmp_path / "g", monkeypatch, shards, signing_key=decision_key)
    assert "distillery-shard-public" in str(e.value) and "openssl genpkey" in str(e.value)
    # A patched argument that empties --shard-verify-key: the public key mounted from the Secret still holds.
    monkeypatch.setattr(verdict, "SHARD", dataclasses.replace(verdict.SHARD, key_dir=str(tmp_path / "k")))
    assert gather(world, tmp_path / "g", monkeypatch, shards, signing_key=decision_key).passed is True
    forged = read(shards[0], "shard.json")
    forged["answers"]["candidate"]["outputs"][0]["text"] = "rewritten"
    (shards[0] / "shard.json").write_text(json.dumps(forged))
    with pytest.raises(verdict.VerdictError, match="changed after"):
        gather(world, tmp_path / "g2", monkeypatch, shards, signing_key=decision_key)


def test_the_shard_keys_belong_to_the_shards_and_the_gather(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    dataset, gguf = world
    cases = (({"shard_signing_key": "/k"}, "--shard-signing-key without --shard"),
             ({"shard": "0/2", "shard_verify_key": "/k"}, "--shard-verify-key without --gather"))  # fmt: skip
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "o", ANSWERS, **bad)
    with pytest.raises(verdict.VerdictError, match="distillery-shard-key"):  # a missing key stops the shard at once
        evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "o", ANSWERS, shard="0/2", run_id=RUN,
                        shard_signing_key=str(tmp_path / "absent"))  # fmt: skip


# --- the cluster's fan-out: lanes, the gather's one folder, the base generated once ----------------------------------


def test_the_lanes_hold_every_shard_once_and_at_most_parallelism_run_at_once():
    lanes = shard_lanes(8, 3)
    assert len(lanes) == 3
    specs = [item["shard"] for lane in lanes for item in lane]
    assert sorted(specs, key=lambda s: int(s.split("/")[0])) == [f"{i}/8" for i in range(8)]
    assert all(shard_of(item["shard"]) == (int(item["index"]), 8) for lane in lanes for item in lane)
    assert [len(lane) for lane in lanes] == [3, 3, 2]
    assert shard_lanes(1, 1) == [[{"shard": "0/1", "index": "0"}]]
    with pytest.raises(ValueError, match="at most one lane per shard"):
        shard_lanes(2, 3)


def test_the_fanout_step_writes_the_lanes_or_names_the_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture):
    assert fanout.main(["--shards", "4", "--parallelism", "2", "--out", str(tmp_path / "f")]) == 0
    assert json.loads((tmp_path / "f" / LANES_FILE).read_text()) == shard_lanes(4, 2)
    assert fanout.main(["--shards", "65", "--parallelism", "2", "--out", str(tmp_path / "g")]) == 1
    assert "--evaluate-shards '65': a whole number of shards from 1 to 64" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_gather_takes_one_folder_holding_every_shard(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """As the cluster's gather gets them: the run's shard prefix downloaded into one folder, a subfolder a shard."""
    dataset, gguf = world
    shards = tmp_path / "evaluation-shards"
    for i in range(3):
        evaluate_canned(monkeypatch, dataset, gguf, shards / str(i), ANSWERS, shard=f"{i}/3")
    whole, gathered = tmp_path / "whole", tmp_path / "gathered"
    evaluate_canned(monkeypatch, dataset, gguf, whole, ANSWERS, accept_inconclusive_safety=OVERRIDE)
    evaluate_canned(monkeypatch, dataset, gguf, gathered, ANSWERS, accept_inconclusive_safety=OVERRIDE,
                    gather=str(shards))  # fmt: skip
    assert read(gathered, "decision.json")["checks"] == read(whole, "decision.json")["checks"]
    (shards / "1" / "shard.json").unlink()  # a shard that never came back
    with pytest.raises(ValueError, match="every shard 0/k"):
        evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "g", ANSWERS, gather=str(shards))


def test_a_second_sharded_run_generates_only_the_candidate(world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The generation cache (steps/evaluate/cache.py, a sealed folder per key) on its real code, with a stand-in for
    llama.cpp's generation: the next run on the same base, with a new candidate and the same shards, answers with the
    candidate only; every shard's base answers come from the cache."""
    from steps.evaluate import cache

    dataset, gguf = world
    eval_rows, adv_rows = load_split(dataset, "eval"), load_split(dataset, "adversarial")
    by_document = dict(zip([r["document"] for r in eval_rows + adv_rows],
                           Answers("reference").outputs(eval_rows, adv_rows), strict=True))  # fmt: skip
    generated: list[tuple[str, int]] = []

    def generate_all(file: Path, documents: list[str], _cfg, _progress=None) -> tuple[list[dict], float]:
        generated.append((Path(file).name, len(documents)))
        return [{**by_document[d], "tokens": 10} for d in documents], 50.0

    monkeypatch.setattr(cache, "generate_all", generate_all)
    store = str(tmp_path / "generations")

    def sharded_run(name: str) -> dict:
        for i in range(2):
            evaluate.run(evaluate.EvaluateConfig(dataset=dataset, gguf=gguf, out=tmp_path / name / str(i),
                                                 shard=f"{i}/2", generation_cache=store))  # fmt: skip
        out = tmp_path / f"{name}-decision"
        evaluate.run(evaluate.EvaluateConfig(dataset=dataset, gguf=gguf, out=out, gather=str(tmp_path / name),
                                             accept_inconclusive_safety=OVERRIDE))  # fmt: skip
        return read(out, "metrics.json")["aggregate"]

    first = sharded_run("first")
    assert sorted(generated) == [("base.gguf", 33), ("base.gguf", 33), ("candidate.gguf", 33), ("candidate.gguf", 33)]
    assert first["generations_from_cache"] == []
    generated.clear()
    (gguf / "candidate.gguf").write_bytes(b"GGUF stand-in: the next candidate")  # the next run's, on the same base
    second = sharded_run("second")
    assert generated == [("candidate.gguf", 33), ("candidate.gguf", 33)]  # the base: not generated again
    assert second["generations_from_cache"] == ["base"]
    assert second["base"] == first["base"]


def test_the_local_run_says_its_safety_verdict_is_inconclusive(world, tmp_path, monkeypatch, capsys):
    """The committed split (3-6 cases a family) cannot show non-inferiority: the step says so, with the power."""
    dataset, gguf = world
    evaluate_canned(monkeypatch, dataset, gguf, tmp_path / "warmup", ANSWERS)  # installs the canned answers
    assert evaluate.main(["--dataset", str(dataset), "--gguf", str(gguf), "--out", str(tmp_path / "o")]) == 0
    printed = capsys.readouterr().out
    assert "safety: INCONCLUSIVE" in printed
    assert re.search(r"safety INCONCLUSIVE: .* power for an equally safe candidate \d+%-\d+%", printed), printed
    assert "does not propose" in printed


def test_generations_on_a_gpu_are_kept_apart_by_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from steps.evaluate import cache

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF stand-in: only its digest is read")
    cfg = evaluate.EvaluateConfig(dataset=tmp_path, gguf=tmp_path, out=tmp_path, threads=2)
    on_cpu = cache.generation_key(gguf, ["a document"], cfg)
    gpu = dataclasses.replace(cfg, gpu_layers=-1)
    monkeypatch.setattr(cache, "gpu_devices", lambda: "NVIDIA L4, 580.65")
    on_l4 = cache.generation_key(gguf, ["a document"], gpu)
    monkeypatch.setattr(cache, "gpu_devices", lambda: "NVIDIA A10G, 580.65")
    assert len({on_cpu, on_l4, cache.generation_key(gguf, ["a document"], gpu)}) == 3


def test_gpu_layers_on_a_cpu_build_are_refused_not_ignored(tmp_path: Path):
    import llama_cpp

    from steps.evaluate.generation import open_llama

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama.cpp has a GPU backend")
    cfg = evaluate.EvaluateConfig(dataset=tmp_path, gguf=tmp_path, out=tmp_path, gpu_layers=-1)
    with pytest.raises(ValueError, match=r"--gpu-layers -1: this llama\.cpp has no GPU backend"):
        open_llama(tmp_path / "model.gguf", cfg)
