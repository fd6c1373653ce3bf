"""The gate's verdict cannot be forged by a role that writes the run's prefix (issue 37, the audit's attacks 1).

evaluate signs decision.json with a key only its deciding step holds; register and propose verify it with the public
half and refuse a decision that is not about the bytes and the version they act on (steps/core/verdict.py). Every
decision here is evaluate's own `run` (tests/canned.py: only the answers are canned), every registration register's
own `run`, every proposal propose's own `run`, against a real MLflow registry in a local SQLite store; the attacks
rewrite only what the shared steps role can write (the evaluation and registration folders, the GGUF folder).

    pytest tests/test_verdict.py
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from steps import propose, register
from steps.core import chain, verdict
from steps.core.io import environment, read_json, sha256_file, write_json
from tests.canned import Answers, evaluate_canned, write_splits
from tests.test_registry import pipeline_outputs, reg_config

BETTER = Answers("reference")
BASE = Answers("lead")
# The committed split is too small for the safety half to be conclusive; the decisions here record who accepts that,
# as tests/test_propose_decision.py does, so that a candidate can pass.
OVERRIDE = "tests/test_verdict.py: forgeries of a passing and a failing decision, on the too-small committed split"


def make_keys(folder: Path) -> tuple[str, str]:
    """(private key file, public key file): an Ed25519 pair in PEM, as `openssl genpkey -algorithm ed25519` makes."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    private, public = folder / "private-key", folder / "public-key"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip
    return str(private), str(public)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def uri(tmp_path: Path) -> Iterator[str]:
    with environment({"MLFLOW_DISABLE_TELEMETRY": "true"}):
        yield f"sqlite:///{tmp_path}/mlflow.db"


def evaluated(
    root: Path, monkeypatch: pytest.MonkeyPatch, candidate: Answers, signing_key: str, run_id: str,
    base: bytes = b"GGUF stand-in: the base model",
) -> dict[str, Path]:  # fmt: skip
    """The folders register reads, around stand-in GGUFs, the evaluation evaluate's own (signed with `signing_key`, in
    run `run_id`: the workflow uid the cluster gives evaluate, register and propose alike)."""
    gguf = root / "src" / "candidate.gguf"
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(f"GGUF stand-in: candidate {root.name}".encode())
    outputs = pipeline_outputs(root, gguf)
    write_splits(outputs["dataset"])
    (outputs["gguf"] / "base.gguf").write_bytes(base)
    write_json(outputs["gguf"] / "result.json", {"candidate_gguf": gguf.name, "base_gguf": "base.gguf"})
    shutil.rmtree(outputs["evaluation"])
    evaluate_canned(monkeypatch, outputs["dataset"], outputs["gguf"], outputs["evaluation"],
                    {"base": BASE, "candidate": candidate}, accept_inconclusive_safety=OVERRIDE,
                    signing_key=signing_key, run_id=run_id)  # fmt: skip
    return outputs


def decision_of(outputs: dict[str, Path]) -> dict:
    return read_json(outputs["evaluation"] / "decision.json")


def rewrite(outputs: dict[str, Path], **changes: object) -> None:
    """What a holder of the steps role does to decision.json in the run's prefix."""
    decision = decision_of(outputs)
    for path, value in changes.items():
        node = decision
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    write_json(outputs["evaluation"] / "decision.json", decision)


def registered(
    outputs: dict[str, Path], root: Path, uri: str, run_id: str, public_key: str, **cfg: object
) -> register.RegisterResult:
    artifacts = Path(uri.removeprefix("sqlite:///")).parent / "artifacts"  # beside the store, not in the repository
    return register.run(reg_config(outputs, root / "reg", uri, "verdict-model", run_id, verify_key=public_key,
                                   artifact_location=str(artifacts), **cfg))  # fmt: skip


def proposal(
    outputs: dict[str, Path], registration: Path, uri: str, public_key: str, run_id: str
) -> propose.ProposeResult:
    return propose.run(propose.ProposeConfig(registration=registration, evaluation=outputs["evaluation"],
                                             out=registration.parent / "prop", tracking_uri=uri,
                                             verify_key=public_key, run_id=run_id))  # fmt: skip


def aliases(uri: str) -> dict[str, str]:
    from mlflow import MlflowClient

    return {k: str(v) for k, v in MlflowClient(tracking_uri=uri).get_registered_model("verdict-model").aliases.items()}


# --- the signature itself ------------------------------------------------------------------------------------------


def test_a_signed_decision_verifies_and_any_changed_field_does_not(keys):
    private, public = keys
    decision = {"passed": False, "reasons": ["FAIL"], chain.JUDGED: {"candidate": {"sha256": "a" * 64}}, "x": 0.1}
    signed = verdict.sign(decision, private)
    verdict.verify(json.loads(json.dumps(signed)), public, "decision.json")  # as read back from the file
    for changed in ({"passed": True}, {chain.JUDGED: {"candidate": {"sha256": "b" * 64}}}, {"x": 0.10000001}):
        with pytest.raises(verdict.VerdictError, match="changed after evaluate signed it"):
            verdict.verify({**signed, **changed}, public, "decision.json")


def test_an_unsigned_decision_or_one_signed_by_another_key_is_refused(keys, tmp_path):
    _, public = keys
    decision = {"passed": True}
    with pytest.raises(verdict.VerdictError, match="carries no signature"):
        verdict.verify(decision, public, "decision.json")
    other, _ = make_keys(tmp_path / "other")
    with pytest.raises(verdict.VerdictError, match="signed by another key"):
        verdict.verify(verdict.sign(decision, other), public, "decision.json")


def test_a_missing_key_file_names_the_secret_and_how_to_make_it(tmp_path):
    with pytest.raises(verdict.VerdictError) as e:
        verdict.verify({"passed": True}, str(tmp_path / "absent"), "decision.json")
    assert verdict.PUBLIC_KEY_SECRET in str(e.value) and "openssl genpkey -algorithm ed25519" in str(e.value)
    with pytest.raises(verdict.VerdictError, match=verdict.PRIVATE_KEY_SECRET):
        verdict.sign({"passed": True}, str(tmp_path / "absent"))


def test_the_mounted_public_key_is_used_whatever_the_flag_says(keys, monkeypatch):
    # A podSpecPatch can append `--verify-key=` to register's arguments; the key mounted from the Secret still holds.
    private, public = keys
    monkeypatch.setattr(verdict, "DECISION", dataclasses.replace(verdict.DECISION, key_dir=str(Path(public).parent)))
    signed = verdict.sign({"passed": False}, private)
    assert verdict.checked(signed, "", "decision.json") == signed
    with pytest.raises(verdict.VerdictError, match="changed after evaluate signed it"):
        verdict.checked({**signed, "passed": True}, "", "decision.json")


def test_a_shard_cannot_be_given_the_signing_key(tmp_path):
    from steps.evaluate import EvaluateConfig, config_problems

    cfg = EvaluateConfig(dataset=tmp_path, gguf=tmp_path, out=tmp_path, shard="0/2", signing_key="/k")
    assert any("--signing-key" in p for p in config_problems(cfg))


# --- the audit's attacks, end to end on a local registry -----------------------------------------------------------


def test_a_swapped_gguf_with_a_rewritten_decision_is_not_registered(tmp_path, monkeypatch, uri, keys):
    # The base model's GGUF put under the candidate's name, the decision's `passed` and candidate sha256 rewritten to
    # match: before the signature, register registered it with eval.decision=pass and a manifest vouching for it.
    private, public = keys
    outputs = evaluated(tmp_path, monkeypatch, BASE, private, "wf-swap")  # no better than the base: FAIL
    genuine = decision_of(outputs)
    assert genuine["passed"] is False
    candidate = outputs["gguf"] / "candidate.gguf"
    shutil.copy(outputs["gguf"] / "base.gguf", candidate)
    rewrite(outputs, passed=True, **{f"{chain.JUDGED}.candidate.sha256": sha256_file(candidate)})

    with pytest.raises(verdict.VerdictError, match="changed after evaluate signed it"):
        registered(outputs, tmp_path, uri, "wf-swap", public)
    assert not (tmp_path / "reg").exists()
    # The swap alone, beside the decision as evaluate signed it: the bytes are not the ones the gate judged.
    write_json(outputs["evaluation"] / "decision.json", genuine)
    with pytest.raises(chain.ChainError, match="the file changed after evaluation"):
        registered(outputs, tmp_path, uri, "wf-swap", public)


def test_a_flipped_verdict_is_not_proposed(tmp_path, monkeypatch, uri, keys):
    # A candidate the gate failed, registered honestly (eval.decision=fail); then `passed` flipped in decision.json.
    private, public = keys
    outputs = evaluated(tmp_path, monkeypatch, BASE, private, "wf-flip")
    reg = registered(outputs, tmp_path, uri, "wf-flip", public)
    rewrite(outputs, passed=True)

    with pytest.raises(verdict.VerdictError, match="changed after evaluate signed it"):
        proposal(outputs, tmp_path / "reg", uri, public, "wf-flip")
    # Even a propose given no key (a local run) refuses it: the version's own eval.decision says fail.
    with pytest.raises(verdict.VerdictError, match=f"records {verdict.DECISION_TAG}=fail"):
        proposal(outputs, tmp_path / "reg", uri, "", "")
    assert "challenger" not in aliases(uri)
    assert reg.model_version == "1"


def test_a_registration_pointing_at_a_failed_version_is_not_proposed(tmp_path, monkeypatch, uri, keys):
    # Two runs: one whose candidate failed the gate, one whose candidate passed. The passing run's result.json is
    # rewritten to name the failed version, next to the passing run's genuine, signed decision.
    private, public = keys
    failed = evaluated(tmp_path / "failed", monkeypatch, BASE, private, "wf-failed")
    failed_reg = registered(failed, tmp_path / "failed", uri, "wf-failed", public)
    passed = evaluated(tmp_path / "passed", monkeypatch, BETTER, private, "wf-passed")
    assert decision_of(passed)["passed"] is True
    registered(passed, tmp_path / "passed", uri, "wf-passed", public)
    result = read_json(tmp_path / "passed/reg/result.json")
    write_json(tmp_path / "passed/reg/result.json", {**result, "model_version": failed_reg.model_version})

    with pytest.raises(verdict.VerdictError, match="the decision is not about this version"):
        proposal(passed, tmp_path / "passed/reg", uri, public, "wf-passed")
    assert "challenger" not in aliases(uri)


def test_a_decision_replayed_from_another_run_is_not_registered_or_proposed(tmp_path, monkeypatch, uri, keys):
    # An earlier run's decision is signed as well as this run's: copied into this run's prefix with the bytes it
    # judged, it verified, and register registered those bytes under this run's lineage; copied with that run's
    # result.json, propose put `challenger` on the earlier version (say, one an operator had taken the alias off). The
    # decision names the run it was made in (evaluate's --run-id, the workflow uid); register and propose hold it to
    # their own.
    from mlflow import MlflowClient

    private, public = keys
    earlier = evaluated(tmp_path / "earlier", monkeypatch, BETTER, private, "wf-earlier")
    assert decision_of(earlier)["passed"] is True and decision_of(earlier)[verdict.RUN] == "wf-earlier"
    first = registered(earlier, tmp_path / "earlier", uri, "wf-earlier", public)
    now = evaluated(tmp_path / "now", monkeypatch, BASE, private, "wf-now")  # this run's candidate fails the gate
    assert decision_of(now)["passed"] is False
    shutil.copy(earlier["evaluation"] / "decision.json", now["evaluation"] / "decision.json")
    shutil.copy(earlier["gguf"] / "candidate.gguf", now["gguf"] / "candidate.gguf")
    with pytest.raises(verdict.VerdictError, match="made in run wf-earlier, but this is run wf-now"):
        registered(now, tmp_path / "now", uri, "wf-now", public)
    client = MlflowClient(tracking_uri=uri)
    assert [str(v.version) for v in client.search_model_versions("name = 'verdict-model'")] == [first.model_version]

    # With the earlier run's result.json too (naming its version), at propose.
    shutil.copytree(tmp_path / "earlier/reg", tmp_path / "now/reg")
    with pytest.raises(verdict.VerdictError, match="made in run wf-earlier, but this is run wf-now"):
        proposal(now, tmp_path / "now/reg", uri, public, "wf-now")
    assert "challenger" not in aliases(uri)
    # A signed decision that names no run (an older evaluate's) is refused where a run is given; the earlier run's own
    # propose still proposes its version.
    no_run = {k: v for k, v in decision_of(earlier).items() if k not in (verdict.RUN, verdict.SIGNATURE)}
    write_json(now["evaluation"] / "decision.json", verdict.sign(no_run, private))
    with pytest.raises(verdict.VerdictError, match="made in no run"):
        proposal(now, tmp_path / "now/reg", uri, public, "wf-now")
    # And a step that verifies but was given no run to hold the decision to refuses it, whatever run it names.
    with pytest.raises(verdict.VerdictError, match="authenticated, but this step was given no --run-id"):
        proposal(earlier, tmp_path / "earlier/reg", uri, public, "")
    assert proposal(earlier, tmp_path / "earlier/reg", uri, public, "wf-earlier").proposed


def test_scores_rewritten_beside_a_signed_decision_are_not_recorded(tmp_path, monkeypatch, uri, keys):
    # register tags the version's scores from evaluate's result.json and logs metrics.json and the reports, all beside
    # the signed decision in the run's prefix: rewritten there, they went onto the version as evaluate's (check-triggers
    # takes the champion's eval.rougeL as its baseline). The decision records every file beside it (`outputs`).
    from mlflow import MlflowClient

    private, public = keys
    outputs = evaluated(tmp_path, monkeypatch, BETTER, private, "wf-scores")
    assert verdict.OUTPUTS in decision_of(outputs) and "result.json" in decision_of(outputs)[verdict.OUTPUTS]
    evaluation = outputs["evaluation"]
    honest = read_json(evaluation / "result.json")
    write_json(evaluation / "result.json", {**honest, "rouge_l_candidate": 0.99, "hijack_rate_candidate": 0.0})
    with pytest.raises(verdict.VerdictError, match=r"result\.json: sha256 .*changed after evaluate signed") as e:
        registered(outputs, tmp_path, uri, "wf-scores", public)
    assert f"{evaluation}: not the files evaluate wrote" in str(e.value)
    assert not (tmp_path / "reg").exists()
    write_json(evaluation / "result.json", honest)
    (evaluation / "notes.html").write_text("<script>planted beside the reports</script>")
    with pytest.raises(verdict.VerdictError, match=r"notes\.html: not in the recorded manifest \(added\)"):
        registered(outputs, tmp_path, uri, "wf-scores", public)
    (evaluation / "notes.html").unlink()
    reg = registered(outputs, tmp_path, uri, "wf-scores", public)
    tags = MlflowClient(tracking_uri=uri).get_model_version("verdict-model", reg.model_version).tags
    assert tags["eval.rougeL"] == str(honest["rouge_l_candidate"]) != "0.99"


def test_the_honest_run_is_registered_and_proposed(tmp_path, monkeypatch, uri, keys):
    from mlflow import MlflowClient

    private, public = keys
    outputs = evaluated(tmp_path, monkeypatch, BETTER, private, "wf-honest")
    reg = registered(outputs, tmp_path, uri, "wf-honest", public)
    tags = MlflowClient(tracking_uri=uri).get_model_version("verdict-model", reg.model_version).tags
    assert tags[verdict.DECISION_TAG] == verdict.PASS
    assert tags[chain.SHA256_TAG] == decision_of(outputs)[chain.JUDGED]["candidate"]["sha256"]
    assert proposal(outputs, tmp_path / "reg", uri, public, "wf-honest").proposed
    assert aliases(uri)["challenger"] == reg.model_version


def test_a_candidate_judged_against_another_base_gguf_is_not_registered(tmp_path, monkeypatch, uri, keys):
    # The audit (item 6): convert-gguf's folder and cache/base-gguf are the steps role's, so a weaker base GGUF put
    # there makes any candidate "beat the base". The registry pins the base's file per base model, revision and
    # quantization: the first version registered on it records the base evaluate judged (eval.base.sha256).
    from mlflow import MlflowClient

    private, public = keys
    first = evaluated(tmp_path / "first", monkeypatch, BETTER, private, "wf-first")
    registered(first, tmp_path / "first", uri, "wf-first", public)
    weak = evaluated(tmp_path / "weak", monkeypatch, BETTER, private, "wf-weak", base=b"GGUF stand-in: a weaker base")
    assert decision_of(weak)[chain.JUDGED]["base"]["sha256"] != decision_of(first)[chain.JUDGED]["base"]["sha256"]
    with pytest.raises(chain.ChainError, match="the base's file changed") as refused:
        registered(weak, tmp_path / "weak", uri, "wf-weak", public)
    assert "version 1 of verdict-model" in str(refused.value)
    client = MlflowClient(tracking_uri=uri)
    assert len(client.search_model_versions("name = 'verdict-model'")) == 1
    # Another revision of the base is another pin; a deliberate change passes when a person says so, recorded.
    other = registered(weak, tmp_path / "weak", uri, "wf-weak", public, base_revision="f" * 40)
    assert client.get_model_version("verdict-model", other.model_version).tags["base_model.revision"] == "f" * 40
    again = evaluated(tmp_path / "again", monkeypatch, BETTER, private, "wf-accepted",
                      base=b"GGUF stand-in: a weaker base")  # fmt: skip
    accepted = registered(again, tmp_path / "again", uri, "wf-accepted", public,
                          accept_new_base="test: llama.cpp's converter upgraded")  # fmt: skip
    tags = client.get_model_version("verdict-model", accepted.model_version).tags
    assert tags[register.BASE_ACCEPTED_TAG] == "test: llama.cpp's converter upgraded"


def cached_base(outputs: dict[str, Path], location: str) -> None:
    """convert-gguf's parity.json as it writes it when the base's conversion came from `location` (a cache hit)."""
    parity = read_json(outputs["gguf"] / "parity.json")
    write_json(outputs["gguf"] / "parity.json",
               {**parity, "base": {"cache": {"hit": True, "key": "k1", "location": location}}})  # fmt: skip


def test_the_first_pin_of_a_base_is_not_taken_from_the_shared_cache(tmp_path, monkeypatch, uri, keys):
    # The pin above trusts its first use: a weaker base GGUF put into cache/base-gguf (the steps role's, keyed by
    # public facts: the base's files, llama.cpp's version) before the first run on a base revision was pinned as the
    # base. The first pin must now come from a conversion made in its run, from the hub at base-revision.
    from mlflow import MlflowClient

    private, public = keys
    shared = "s3://distillery-artifacts/cache/base-gguf"
    first = evaluated(tmp_path / "first", monkeypatch, BETTER, private, "wf-first")
    cached_base(first, shared)
    with pytest.raises(chain.ChainError, match="took this run's from the shared cache s3://") as refused:
        registered(first, tmp_path / "first", uri, "wf-first", public)
    assert f"{shared}/k1" in str(refused.value) and "base_model.revision=" in str(refused.value)
    client = MlflowClient(tracking_uri=uri)
    assert client.search_model_versions("name = 'verdict-model'") == []
    # A cache of this machine's own (a local run's folder) is no other role's: the first pin may come from it.
    cached_base(first, str(tmp_path / ".cache/base-gguf"))
    pinned = registered(first, tmp_path / "first", uri, "wf-first", public)
    # Once pinned, the shared cache may serve the same base: the pin holds it to these bytes.
    later = evaluated(tmp_path / "later", monkeypatch, BETTER, private, "wf-later")
    cached_base(later, shared)
    assert registered(later, tmp_path / "later", uri, "wf-later", public).model_version != pinned.model_version
    # On another revision the first pin is again a first use; a person may accept the cached file, recorded.
    other = evaluated(tmp_path / "other", monkeypatch, BETTER, private, "wf-other")
    cached_base(other, shared)
    with pytest.raises(chain.ChainError, match="took this run's from the shared cache"):
        registered(other, tmp_path / "other", uri, "wf-other", public, base_revision="e" * 40)
    accepted = registered(other, tmp_path / "other", uri, "wf-other", public, base_revision="e" * 40,
                          accept_new_base="test: cache checked by hand")  # fmt: skip
    tags = client.get_model_version("verdict-model", accepted.model_version).tags
    assert tags[register.BASE_ACCEPTED_TAG] == "test: cache checked by hand"


def test_the_cluster_passes_the_keys_to_the_deciding_step_and_the_verifiers_only():
    # The templates, rendered: the gather signs, register and propose verify; no other step gets either key.
    import yaml

    from tests.conftest import ROOT

    rendered = yaml.safe_load((ROOT / "infra/argo/distill-workflowtemplate.yaml").read_text())
    flags: dict[str, list[str]] = {}
    for template in rendered["spec"]["templates"]:
        args = (template.get("container") or {}).get("args") or []
        for signer in verdict.SIGNERS:
            for flag, path in ((signer.sign_flag, signer.private_file), (signer.verify_flag, signer.public_file)):
                if flag in args:
                    assert args[args.index(flag) + 1] == path, template["name"]
                    flags.setdefault(flag, []).append(template["name"])
    assert flags == {"--signing-key": ["evaluate"], "--verify-key": ["register", "propose"],
                     "--shard-verify-key": ["evaluate"],
                     "--shard-signing-key": ["evaluate-shard-gpu", "evaluate-shard-cpu"]}  # fmt: skip


def test_a_new_base_is_accepted_on_the_cluster_by_the_submitter_s_parameter_only():
    # A deliberate conversion change, or a first pin from the shared cache, was register's flag alone: on the cluster
    # a run refused at register could not be let through but by deleting the cache entry or running register by hand
    # with its role and keys. It is a workflow parameter now (`argo submit … -p accept-new-base='<who>: <why>'`, or
    # `argo retry <workflow> -p …` for the refused run: same uid, so its signed decision still holds), passed to
    # register alone (check-parameters reads it to refuse a bad value first), never set by the retrain cron, and
    # recorded on the version (eval.base.accepted, above).
    import yaml

    from steps import check_parameters
    from tests.conftest import ROOT
    from tests.test_check_parameters import cluster_values
    from workflows import retrain

    rendered = yaml.safe_load((ROOT / "infra/argo/distill-workflowtemplate.yaml").read_text())
    (declared,) = [p for p in rendered["spec"]["arguments"]["parameters"] if p["name"] == "accept-new-base"]
    assert declared["value"] == ""  # empty: a changed base is refused
    given = {}
    for template in rendered["spec"]["templates"]:
        args = (template.get("container") or {}).get("args") or []
        if "--accept-new-base" in args:
            given[template["name"]] = args[args.index("--accept-new-base") + 1]
    assert given == {name: "{{inputs.parameters.accept-new-base}}" for name in ("check-parameters", "register")}
    assert "accept-new-base" not in (*retrain.FROM_CHECK, *retrain.FROM_CRON)
    assert "accept-new-base" not in (ROOT / "infra/argo/retrain-workflowtemplate.yaml").read_text()

    # What is recorded says who and why: a bare "true" (or a name with no reason) stops the run before it trains.
    for value in ("true", "ops@example.org:", ": a reason", "ops: one line\nand another", "x" * 500 + ": why"):
        found = check_parameters.problems(cluster_values(accept_new_base=value))
        assert len(found) == 1 and "--accept-new-base" in found[0] and "'<who>: <why>'" in found[0], (value, found)
    assert check_parameters.problems(cluster_values(accept_new_base="ops@example.org: llama.cpp b5100 converter")) == []
