"""One default per setting: a pipeline parameter's value is its steps' own config default (`STEP`), unless the run
means another value; and the checkpoint fingerprint covers every training setting that changes the trajectory."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from steps import pipeline
from steps.train.checkpoints import RESUME_FIELDS
from steps.train.config import TrainConfig

ALL_PARAMS = {id(p): p for pl in pipeline.PIPELINES for p in pl.params}.values()


@pytest.mark.parametrize("p", ALL_PARAMS, ids=lambda p: p.name)
def test_no_parameter_restates_its_steps_default_as_a_literal(p: pipeline.Param):
    """A literal equal to the one default every step taking the parameter gives it is a second copy: say STEP."""
    defaults = pipeline.step_defaults(p.name)
    values = {pipeline.as_param(v) for v in defaults.values() if v is not dataclasses.MISSING}
    if len(values) != 1 or dataclasses.MISSING in defaults.values():
        return  # the steps disagree (or one has no default): the pipeline must say which
    step = yaml.safe_load(next(iter(values)))
    for column, given in (("local", p.local_value), ("cluster", p.cluster_value)):
        assert not isinstance(given, str) or yaml.safe_load(given) != step, (  # as values: "0.0" restates 0
            f"Param {p.name!r} {column} = {given!r} restates the default of {', '.join(defaults)}; write STEP"
        )


@pytest.mark.parametrize("p", ALL_PARAMS, ids=lambda p: p.name)
def test_every_step_parameter_resolves(p: pipeline.Param):
    assert isinstance(p.local, str) and (p.cluster is None or isinstance(p.cluster, str))


def test_a_step_parameter_whose_steps_disagree_is_refused_naming_them():
    with pytest.raises(ValueError, match="kd-weight: STEP takes the steps' own default, but they give"):
        pipeline.step_default("kd-weight")  # kd-targets scores by default, train trains without KD


# TrainConfig's fields that do not change what the run computes, each with why; every other field is in the
# checkpoint fingerprint (RESUME_FIELDS), so a new training setting fails here until it is put on one side.
NOT_TRAJECTORY = {
    "dataset": "a location: the examples themselves are fingerprinted",
    "out": "where the adapter goes",
    "train_backend": "where it runs; the same loop (a resume may move between launchers)",
    "micro_batch": "splits a global batch; gradients accumulate to the same step (tests/test_train.py)",
    "gradient_checkpointing": "recomputes activations, same gradients",
    "packing": "a batch layout; the loss per example is the same",
    "threads": "speed only",
    "log_every": "printing",
    "precision": "recorded on the result; a resume may change it on purpose (both are recorded)",
    "checkpoint_dir": "where checkpoints go",
    "checkpoint_every": "when checkpoints are written",
    "ray_address": "which cluster",
    "ray_workers": "how the global batch is shared; the same global batch",
    "ray_gpu": "which devices",
    "max_failures": "how often to retry",
    "run_id": "a name",
    "kd_targets": "a location: its content is checked against the examples (kd_sidecar.load_targets)",
}


def test_every_training_setting_is_fingerprinted_or_said_not_to_change_the_run():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(RESUME_FIELDS) | set(NOT_TRAJECTORY) == fields, (
        f"classify {sorted(fields - set(RESUME_FIELDS) - set(NOT_TRAJECTORY))} in RESUME_FIELDS "
        f"(steps/train/checkpoints.py) or NOT_TRAJECTORY here; stale: "
        f"{sorted((set(RESUME_FIELDS) | set(NOT_TRAJECTORY)) - fields)}"
    )
    assert not set(RESUME_FIELDS) & set(NOT_TRAJECTORY)
