"""The pipeline's optional stages and the parameter that switches each on: one rule each, read by the pipeline
definition (steps/pipeline.py: a stage's `when`, rendered as its Argo task's `when`) and by the steps themselves (the
local run, where DVC runs every stage and the step does nothing but say so when its switch is off).

Here, not in steps/pipeline.py, so that a step reading its switch does not depend on the whole pipeline definition
(a local run reruns a stage when any module it imports changes: workflows/deps.py).
"""

from __future__ import annotations

from dataclasses import dataclass

WHEN_TESTS = ("positive", "set")


@dataclass(frozen=True)
class When:
    """A stage runs only when the pipeline parameter `param` passes `test`: `positive` (a number above 0) or `set`
    (not empty). `holds` is the rule; workflows/distill.py renders the same test as the Argo task's `when` (and
    tests/test_optional_tasks.py holds the two equal under Argo's own evaluator)."""

    param: str
    test: str

    def __post_init__(self) -> None:
        if self.test not in WHEN_TESTS:
            raise ValueError(f"When({self.param!r}, {self.test!r}): the test is one of {', '.join(WHEN_TESTS)}")

    def holds(self, value: object) -> bool:
        """Whether the stage runs for the parameter's `value` (its text, or the step's parsed flag)."""
        if self.test == "positive":
            return float(value) > 0  # type: ignore[arg-type]
        return str(value) != ""


KD_ON = When("kd-weight", "positive")  # logit-level distillation: the teacher's top-k is scored, train mixes it in
PUSH_ON = When("adapter-repo", "set")  # a repository to push the adapter and its model card to
