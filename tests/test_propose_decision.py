"""One rule, in one place: evaluate decides whether the candidate beats the base and the champion; propose acts on that
decision, and refuses when the registry's champion is no longer the one the decision was about.

Every decision here is written by evaluate's own `run` (tests/canned.py: only the generations are canned) against a
real MLflow registry in a local SQLite file, and read by propose's own `run`.

    pytest tests/test_propose_decision.py
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from steps import propose, register
from steps.core import chain, registry, verdict
from steps.core.cli import write_result
from steps.core.io import environment, sha256_file, write_json
from tests.canned import Answers, evaluate_canned, write_splits

NAME = "summariser"
BETTER = Answers("reference")  # the eval split's own summaries
WORSE = Answers("half")
BASE = Answers("lead")


@pytest.fixture(scope="module")
def registry_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("registry")
    with environment({"MLFLOW_DISABLE_TELEMETRY": "true"}):
        yield f"sqlite:///{work}/mlflow.db"


def add_version(uri: str, name: str, gguf: Path) -> str:
    """A registered version whose artifacts hold `gguf` (what evaluate downloads for the champion)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("versions")
    experiment_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment("versions", artifact_location=str(Path(uri.removeprefix("sqlite:///")).parent))
    )
    run = client.create_run(experiment_id)
    client.log_artifact(run.info.run_id, str(gguf), "model")
    client.set_terminated(run.info.run_id)
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name)
    # The hashes steps.register records, which evaluate holds a champion's files to (steps/core/chain.py).
    tags = {chain.SHA256_TAG: sha256_file(gguf), chain.MANIFEST_TAG: json.dumps({gguf.name: sha256_file(gguf)})}
    source = f"{run.info.artifact_uri}/model"
    return str(client.create_model_version(name, source, run_id=run.info.run_id, tags=tags).version)


def set_champion(uri: str, name: str, version: str) -> None:
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=uri).set_registered_model_alias(name, "champion", version)


@pytest.fixture
def world(tmp_path: Path, registry_uri: str, request: pytest.FixtureRequest) -> dict:
    """A dataset folder, convert-gguf's folder (stand-in GGUFs), and a registered model of its own with two earlier
    versions (each holding a GGUF a champion can be downloaded from) and the candidate's version."""
    dataset = write_splits(tmp_path / "dataset")
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    for role in ("base", "candidate", "v1", "v2"):
        (gguf / f"{role}.gguf").write_bytes(f"GGUF stand-in: {role}".encode())
    write_json(gguf / "result.json", {"base_gguf": "base.gguf", "candidate_gguf": "candidate.gguf"})
    write_json(gguf / "parity.json", {"passed": True, "quantization": "Q8_0"})
    name = f"{NAME}-{request.node.name}"[:60]
    earlier = [add_version(registry_uri, name, gguf / f"{v}.gguf") for v in ("v1", "v2")]
    candidate = add_version(registry_uri, name, gguf / "candidate.gguf")
    registration = tmp_path / "registration"
    registration.mkdir()
    write_result(registration, register.RegisterResult(name, candidate, "wf", "run", "model", False))
    return {"dataset": dataset, "gguf": gguf, "name": name, "earlier": earlier, "candidate": candidate,
            "registration": registration, "root": tmp_path}  # fmt: skip


# The committed adversarial split has 3-6 cases a family: too few for the gate to show any candidate safe, so its
# safety verdict is INCONCLUSIVE and proposes only under a recorded override. These tests are about what propose does
# with a decision, so they record one (test_an_inconclusive_safety_verdict_is_not_proposed_without_an_override: none).
OVERRIDE = "tests/test_propose_decision.py: propose's handling of a decision, on the too-small committed split"


def decide(world: dict, monkeypatch: pytest.MonkeyPatch, uri: str, answers: dict[str, Answers], **cfg) -> dict:
    """evaluate → decision.json, the champion resolved from the registry by evaluate itself."""
    cfg.setdefault("accept_inconclusive_safety", OVERRIDE)
    out = world["root"] / "evaluation"
    evaluate_canned(monkeypatch, world["dataset"], world["gguf"], out, answers, tracking_uri=uri,
                    model_name=world["name"], **cfg)  # fmt: skip
    return json.loads((out / "decision.json").read_text())


def proposal(world: dict, uri: str) -> propose.ProposeResult:
    """propose's run on the evaluation, the candidate's version tagged with its outcome first, as register tags it
    from the (verified) decision: propose refuses a version whose `eval.decision` disagrees (steps/core/verdict.py)."""
    from mlflow import MlflowClient

    root = world["root"]
    passed = json.loads((root / "evaluation/decision.json").read_text())["passed"] is True
    MlflowClient(tracking_uri=uri).set_model_version_tag(world["name"], world["candidate"], verdict.DECISION_TAG,
                                                         verdict.PASS if passed else verdict.FAIL)  # fmt: skip
    cfg = propose.ProposeConfig(registration=world["registration"], evaluation=root / "evaluation",
                                out=root / "proposal", tracking_uri=uri)  # fmt: skip
    return propose.run(cfg)


def aliases_and_tags(world: dict, uri: str) -> tuple[dict, dict]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    aliases = {k: str(v) for k, v in client.get_registered_model(world["name"]).aliases.items()}
    return aliases, client.get_model_version(world["name"], world["candidate"]).tags


def test_evaluate_records_the_champion_version_it_compared_against(world, monkeypatch, registry_uri):
    set_champion(registry_uri, world["name"], world["earlier"][0])
    decision = decide(world, monkeypatch, registry_uri, {"base": BASE, "champion": WORSE, "candidate": BETTER})
    assert decision["champion_version"] == world["earlier"][0]
    assert "rougeL_vs_champion" in [c["check"] for c in decision["checks"]]


def test_an_inconclusive_safety_verdict_is_not_proposed_without_an_override(world, monkeypatch, registry_uri):
    decision = decide(world, monkeypatch, registry_uri, {"base": BASE, "candidate": BETTER},
                      accept_inconclusive_safety="")  # fmt: skip
    assert decision["passed"] is False and decision["safety"]["verdict"] == "inconclusive"
    assert decision["safety"]["power"][1] < 0.8 and decision["safety"]["override"] == ""
    assert any(r.startswith("FAIL safety INCONCLUSIVE") for r in decision["reasons"])
    result = proposal(world, registry_uri)
    assert result.proposed is False and "challenger" not in aliases_and_tags(world, registry_uri)[0]


def test_propose_follows_the_gate_where_one_more_hijack_is_within_chance(world, monkeypatch, registry_uri):
    # The candidate obeys one prompt-leak injection the champion resists: 5 of 6 cases pass, one hijack vs none. Six
    # cases cannot show safety either way (INCONCLUSIVE); one loss in six is under the 20-point margin, so the
    # recorded override may accept it — the old point-rate gate refused it with its tolerance 0.
    set_champion(registry_uri, world["name"], world["earlier"][0])
    leaky = Answers("reference", obeys=("adv-010",))
    decision = decide(world, monkeypatch, registry_uri, {"base": BASE, "champion": WORSE, "candidate": leaky})
    family = next(c for c in decision["checks"] if c["check"] == "adversarial_prompt_leak")
    versus = {c["rival"]: c for c in family["comparisons"]}
    assert versus["champion"]["worse_cases"] == 1 and versus["champion"]["outcome"] == "inconclusive"
    assert family["passed"] and not versus["champion"]["harm_seen"]
    assert decision["passed"] is True
    assert decision["safety"] | {"power": None} == {"verdict": "inconclusive", "override": OVERRIDE, "power": None,
                                                    "min_power": 0.8}  # fmt: skip
    assert set(decision["operating_characteristics"]) == {"base", "champion"}

    result = proposal(world, registry_uri)
    aliases, tags = aliases_and_tags(world, registry_uri)
    assert result.proposed is True and aliases["challenger"] == world["candidate"]
    assert tags["proposal"] == "challenger" and f"beats champion {world['earlier'][0]}" in tags["proposal.reasons"]
    assert aliases["champion"] == world["earlier"][0]  # never touched
    # When it became challenger (promote's hold counts from it); a retry a day later keeps the first time.
    since = tags[registry.CHALLENGER_SINCE]
    assert time.strptime(since, "%Y-%m-%dT%H:%M:%SZ")
    monkeypatch.setattr(propose, "utc_now", lambda: "2099-01-01T00:00:00Z")
    proposal(world, registry_uri)
    assert aliases_and_tags(world, registry_uri)[1][registry.CHALLENGER_SINCE] == since


def test_propose_refuses_what_the_gate_refused_against_the_champion(world, monkeypatch, registry_uri):
    set_champion(registry_uri, world["name"], world["earlier"][0])
    decision = decide(world, monkeypatch, registry_uri, {"base": BASE, "champion": BETTER, "candidate": WORSE})
    assert decision["passed"] is False
    assert [c["check"] for c in decision["checks"] if not c["passed"]] == ["rougeL_vs_champion"]

    result = proposal(world, registry_uri)
    aliases, tags = aliases_and_tags(world, registry_uri)
    assert result.proposed is False and "challenger" not in aliases
    assert tags["proposal"] == "refused" and "FAIL ROUGE-L" in tags["proposal.reasons"]


def test_propose_refuses_when_the_champion_moved_after_the_evaluation(world, monkeypatch, registry_uri):
    first, second = world["earlier"]
    set_champion(registry_uri, world["name"], first)
    decision = decide(world, monkeypatch, registry_uri, {"base": BASE, "champion": WORSE, "candidate": BETTER})
    assert decision["passed"] is True and decision["champion_version"] == first
    set_champion(registry_uri, world["name"], second)  # promoted at home while this run was between steps

    result = proposal(world, registry_uri)
    aliases, tags = aliases_and_tags(world, registry_uri)
    assert result.proposed is False and "challenger" not in aliases
    assert (result.champion_version, tags["proposal"], tags["proposal.champion"]) == (second, "refused", second)
    assert f"compared against champion {first}" in result.reasons[-1] and "re-evaluate" in result.reasons[-1]


def test_propose_refuses_an_evaluation_made_without_the_registrys_champion(world, monkeypatch, registry_uri):
    # Evaluated two-way (no tracking URI), but the registry has a champion: the decision says nothing about it.
    out = world["root"] / "evaluation"
    evaluate_canned(monkeypatch, world["dataset"], world["gguf"], out, {"base": BASE, "candidate": BETTER})
    assert json.loads((out / "decision.json").read_text())["champion_version"] is None
    set_champion(registry_uri, world["name"], world["earlier"][0])

    result = proposal(world, registry_uri)
    assert result.proposed is False and "no 'champion'" in result.reasons[-1] and "re-evaluate" in result.reasons[-1]


def test_with_no_champion_the_gate_against_the_base_decides(world, monkeypatch, registry_uri):
    decision = decide(world, monkeypatch, registry_uri, {"base": BASE, "candidate": BETTER})
    assert decision["champion_version"] is None and decision["passed"] is True
    assert proposal(world, registry_uri).proposed is True


def test_evaluate_decides_with_the_champion_it_was_given_as_a_file(world, monkeypatch, registry_uri):
    # --champion-gguf: a file, not a registry version; with no champion in the registry the decision stands.
    out = world["root"] / "evaluation"
    evaluate_canned(monkeypatch, world["dataset"], world["gguf"], out,
                    {"base": BASE, "champion": BETTER, "candidate": WORSE},
                    champion_gguf=str(world["gguf"] / "v1.gguf"))  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    assert decision["champion_version"] is None and decision["champion"].startswith("given: ")
    assert decision["passed"] is False and proposal(world, registry_uri).proposed is False
