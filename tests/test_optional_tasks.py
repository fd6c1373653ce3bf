"""The distill template's two optional tasks, as rendered: `kd-targets` before train when `kd-weight` > 0, read by every
train backend, and `push-adapter` after propose when `adapter-repo` is set, its token a mounted Secret file; their
`when`s decided by Argo's own evaluator exactly as `When.holds` (steps/core/switches.py) decides the local run.

pytest tests/test_optional_tasks.py     # the engine test needs scripts/engines.sh's harness (scripts/test.sh builds it)
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from steps.core.switches import KD_ON, PUSH_ON
from steps.pipeline import STAGES
from tests.conftest import ROOT
from tests.engines import harness
from tests.manifests import WORKFLOW_UID, rendered_rayjob, rendered_template, templates
from workflows import security
from workflows.distill import BUCKET, when_expression
from workflows.pods import IN_DIR

TRAIN_TASKS = ("train-gpu", "train-cpu", "train-ray")


def tasks() -> dict[str, dict]:
    return {t["name"]: t for t in templates()["pipeline"]["dag"]["tasks"]}


def test_each_optional_stage_has_its_parameter_and_its_when():
    found = {s.name: s.when for s in STAGES if s.when}
    assert found == {"kd-targets": KD_ON, "push-adapter": PUSH_ON}
    for stage in STAGES:
        if stage.when:
            assert stage.when.param in stage.params, stage.name  # the step sees it: the local run's switch
            assert tasks()[stage.name]["when"] == when_expression(stage.when)
    assert all("when" not in t for n, t in tasks().items() if n not in found and n not in TRAIN_TASKS)


def test_kd_targets_runs_after_fetch_dataset_and_every_train_task_waits_for_it_to_succeed_or_be_skipped():
    dag = tasks()
    assert dag["kd-targets"]["depends"] == "fetch-dataset.Succeeded"
    for name in TRAIN_TASKS:
        assert "(kd-targets.Succeeded || kd-targets.Skipped)" in dag[name]["depends"], name
        assert "fetch-dataset.Succeeded" in dag[name]["depends"] and "preflight.Succeeded" in dag[name]["depends"]


def test_the_targets_land_at_the_runs_key_and_the_train_pods_read_them_from_there_optionally():
    key = "runs/{{workflow.uid}}/kd-targets"
    [out] = templates()["kd-targets"]["outputs"]["artifacts"]
    assert out["s3"] == {"key": key} and out["archive"] == {"none": {}}
    for name in ("train-gpu", "train-cpu"):
        template = templates()[name]
        art = next(a for a in template["inputs"]["artifacts"] if a["name"] == "kd-targets")
        assert art == {"name": "kd-targets", "optional": True, "path": f"{IN_DIR}/kd-targets", "s3": {"key": key}}
        args = template["container"]["args"]
        assert args[args.index("--kd-targets") + 1] == f"{IN_DIR}/kd-targets", name
        for flag in ("--kd-weight", "--kd-temperature"):
            assert args[args.index(flag) + 1] == f"{{{{inputs.parameters.{flag[2:]}}}}}", (name, flag)
        # no argument artifact from a task that may be skipped: the key is read whichever way kd-targets ended
        arguments = tasks()[name].get("arguments", {}).get("artifacts", [])
        assert "kd-targets" not in {a["name"] for a in arguments}, name


def test_the_rayjob_driver_reads_the_targets_from_the_runs_key_in_s3():
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    flags = dict(zip(words[3::2], words[4::2], strict=True))
    assert flags["--kd-targets"] == f"s3://{BUCKET}/runs/{WORKFLOW_UID}/kd-targets"
    assert flags["--dataset"] == f"s3://{BUCKET}/runs/{WORKFLOW_UID}/dataset"  # the same way as the dataset
    passed = {p["name"]: p["value"] for p in tasks()["train-ray"]["arguments"]["parameters"]}
    assert passed["kd-weight"] == "{{workflow.parameters.kd-weight}}"
    assert passed["kd-temperature"] == "{{workflow.parameters.kd-temperature}}"


def test_push_adapter_runs_after_propose_reading_the_runs_outputs():
    dag = tasks()
    depends = dag["push-adapter"]["depends"]
    for upstream in ("propose", "register", "evaluate", "convert-gguf", "fetch-dataset"):
        assert f"{upstream}.Succeeded" in depends, upstream
    assert "(train-gpu.Succeeded || train-cpu.Succeeded || train-ray.Succeeded)" in depends
    passed = {a["name"]: a["from"] for a in dag["push-adapter"]["arguments"]["artifacts"]}
    assert passed == {
        "registration": "{{tasks.register.outputs.artifacts.registration}}",
        "evaluation": "{{tasks.evaluate.outputs.artifacts.evaluation}}",
        "dataset": "{{tasks.fetch-dataset.outputs.artifacts.dataset}}",
    }
    inputs = {a["name"]: a for a in templates()["push-adapter"]["inputs"]["artifacts"]}
    assert inputs["adapter"]["s3"] == {"key": "runs/{{workflow.uid}}/adapter"}
    # of the GGUF folder only the reports (parity.json): no model file is downloaded to push an adapter
    assert all(not a["path"].endswith(".gguf") for a in inputs.values())
    assert any(a["path"] == f"{IN_DIR}/gguf/parity.json" for a in inputs.values())


def test_push_adapters_token_is_the_optional_gitea_secret_mounted_as_a_file_under_the_steps_account():
    doc = rendered_template()
    template = templates()["push-adapter"]
    args = template["container"]["args"]
    assert args[args.index("--token-file") + 1] == security.GITEA_TOKEN_FILE
    [volume] = [v for v in template["volumes"] if "secret" in v and v["secret"]["secretName"] == security.GITEA_SECRET]
    assert volume["secret"] == {"secretName": security.GITEA_SECRET, "optional": True,
                                "items": [{"key": "token", "path": "token"}]}  # fmt: skip
    mount = next(m for m in template["container"]["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": security.GITEA_DIR, "readOnly": True}
    env = template["container"]["env"]
    assert not [e for e in env if "GITEA" in e["name"]], "the token is a file, never an environment variable"
    # the steps' account (no API token in the container), as every step; nothing of its own
    assert "serviceAccountName" not in template and doc["spec"]["serviceAccountName"] == security.STEPS
    # the Secret reaches no other template
    others = [t["name"] for t in doc["spec"]["templates"] if security.GITEA_SECRET in json.dumps(t)]
    assert others == ["push-adapter"]


def test_the_local_run_has_both_stages_in_the_same_places():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    names = list(stages)
    assert names.index("fetch-dataset") < names.index("kd-targets") < names.index("train")
    assert names[-1] == "push-adapter"
    assert "out/kd-targets" in stages["train"]["deps"] and "--kd-targets out/kd-targets" in stages["train"]["cmd"]
    assert "out/proposal" in stages["push-adapter"]["deps"]  # after propose, as on Argo
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["kd-weight"] == 0 and params["adapter-repo"] == ""  # both off by default: each step says so


# --- Argo's own evaluator: the `when` decides as When.holds does ----------------------------------------------------

VALUES = {
    "kd-weight": ["0", "0.0", "0.000", "0.5", "1", "1.0", "1e-3", "0.01"],
    "adapter-repo": ["", "https://gitea.home/ml/a.git", "https://gitea.home/it's/a.git", "x"],
}


@pytest.mark.parametrize("stage", [s for s in STAGES if s.when], ids=lambda s: s.name)
def test_argo_skips_an_optional_task_exactly_when_the_local_step_does_nothing(stage):
    when = stage.when
    values = VALUES[when.param]
    text = tasks()[stage.name]["when"]
    filled = harness(
        [{"op": "replace", "text": json.dumps(text), "vars": {f"workflow.parameters.{when.param}": v}} for v in values]
    )
    assert all("error" not in f for f in filled), filled
    answers = harness([{"op": "when", "text": json.loads(f["value"])} for f in filled])
    argo = {v: a.get("value", a.get("error")) for v, a in zip(values, answers, strict=True)}
    assert argo == {v: when.holds(v) for v in values}
    assert set(argo.values()) == {True, False}  # both ways, or the table proves nothing


def test_a_when_that_read_the_value_raw_would_break_on_a_quote():
    """Why the value never enters the expression's text: spliced into a quoted string, a `'` in it ends the string."""
    raw = "'{{workflow.parameters.adapter-repo}}' != ''"
    [filled] = harness(
        [{"op": "replace", "text": json.dumps(raw), "vars": {"workflow.parameters.adapter-repo": "https://g/it's"}}]
    )
    answer = harness([{"op": "when", "text": json.loads(filled["value"])}])[0]
    assert "error" in answer, answer
    assert re.fullmatch(r"\{\{=.*\}\}", when_expression(PUSH_ON))
