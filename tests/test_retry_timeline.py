"""Argo's retry rules against the GPU train step: a spot reclaim at any time before the workflow's deadline gets a retry
that is allowed to run to the end, and a failure of the step's own making is not retried on a GPU.

The expression is evaluated by Argo's own code (tests/engines.py: the harness); the timing is ported from
argoproj/argo-workflows v4.1.2 (same logic in v3.7.18) `workflow/controller/operator.go`:
`processNodeRetries` (workflow deadline, backoff.maxDuration measured from the FIRST attempt's start, the backoff
wait, the retry policy, the limit, `retryStrategy.expression`) and `buildRetryStrategyLocalScope` (`lastRetry.exitCode`
is a string, "-1" when the attempt has no exit code; `lastRetry.status` is the node phase). A retry gets
`executionDeadline = maxDurationDeadline`: the executor kills its main container at that time.

A pre-check of the timings no test run can wait for (hours of deadline and backoff): Argo's own controller retries a
reclaimed train-gpu (exit 137) and does not retry a code error (exit 1) in tests/test_controlplane.py.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pytest

from tests.engines import ask
from tests.manifests import rendered_template, templates

HOUR = 3600.0


def seconds(duration: str) -> float:
    """Argo's ParseStringToDuration for the forms used here: plain seconds or Go durations like 30s, 30m, 2h."""
    if re.fullmatch(r"\d+", duration):
        return float(duration)
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", duration):
        total += float(number) * {"h": 3600, "m": 60, "s": 1}[unit]
    assert total > 0, duration
    return total


@functools.cache  # one harness process per distinct question: the timelines ask the same ones many times
def expression_holds(expression: str, status: str, exit_code: str, message: str = "") -> bool:
    """Argo's own evaluation (the harness: operator.go processNodeRetries, argoexpr.EvalBool with env.GetFuncMap over
    buildRetryStrategyLocalScope's variables, expr-lang at the version Argo requires); an expression expr-lang
    refuses fails the test with its message, as it would put the node in Error at run time."""
    node = {"exitCode": exit_code, "phase": status, "message": message}
    answer = ask({"op": "retry", "expression": expression, "node": node})
    assert "error" not in answer, f"expr-lang refuses {expression!r}: {answer['error']}"
    return answer["value"]


@dataclass
class Attempt:
    started: float
    finished: float
    phase: str  # Failed or Error
    exit_code: str
    message: str = ""  # the node's message as Argo's controller wrote it (inferFailedReason)


def next_attempt(strategy: dict, attempts: list[Attempt], deadline: float) -> tuple[float, float | None] | str:
    """processNodeRetries after the last attempt failed, as time passes: when the next attempt starts and the
    execution deadline it gets (None: none), or why there is none."""
    last = attempts[-1]
    if last.finished > deadline:
        return "retry exceeded workflow deadline"
    backoff = strategy.get("backoff") or {}
    max_deadline = None
    if backoff.get("maxDuration"):
        max_deadline = attempts[0].started + seconds(backoff["maxDuration"])
        if last.finished > max_deadline:
            return "Max duration limit exceeded"
    wait = seconds(backoff["duration"]) * float(backoff.get("factor", 1)) ** (len(attempts) - 1) if backoff else 0.0
    start = last.finished + wait
    if max_deadline is not None and start > max_deadline:
        return "Backoff would exceed max duration limit"
    policy = strategy.get("retryPolicy", "OnFailure")
    retry_failed = policy in ("Always", "OnFailure")
    retry_error = policy in ("Always", "OnError")
    if (last.phase == "Failed" and not retry_failed) or (last.phase == "Error" and not retry_error):
        return "Node not set to be retried"
    if len(attempts) > int(strategy["limit"]):
        return "No more retries left"
    expression = strategy.get("expression")
    if expression and not expression_holds(expression, last.phase, last.exit_code, last.message):
        return "retryStrategy.expression evaluated to false"
    if start > deadline:
        return "retry exceeded workflow deadline"
    return start, max_deadline


def gpu_strategy() -> dict:
    return templates()["train-gpu"]["retryStrategy"]


def workflow_deadline() -> float:
    return float(rendered_template()["spec"]["activeDeadlineSeconds"])


RECLAIMS = [  # (phase, exit code) of an attempt lost to a spot reclaim
    ("Error", "-1"),  # the node went: pod deleted
    ("Failed", "143"),  # the two-minute notice: the train step flushed a checkpoint and exited on SIGTERM
    ("Failed", "137"),  # killed at the end of the node's shutdown grace period
    ("Failed", "-1"),  # no exit code recorded
]


@pytest.mark.parametrize("reclaim_at_h", [0.1, 0.49, 0.51, 1.0, 3.0, 6.0, 7.9])
@pytest.mark.parametrize(("phase", "exit_code"), RECLAIMS)
def test_a_reclaim_at_any_time_before_the_deadline_gets_a_retry_that_may_run_to_the_end(
    reclaim_at_h: float, phase: str, exit_code: str
):
    startup = 300.0  # node start-up and image pull count: the attempt "started" when its pod did
    attempts = [Attempt(started=startup, finished=reclaim_at_h * HOUR, phase=phase, exit_code=exit_code)]
    got = next_attempt(gpu_strategy(), attempts, workflow_deadline())
    assert not isinstance(got, str), f"reclaimed at {reclaim_at_h} h: {got}"
    start, execution_deadline = got
    assert start < workflow_deadline()
    assert execution_deadline is None or execution_deadline >= workflow_deadline(), "the retry would be killed early"


def test_repeated_reclaims_are_retried_up_to_the_limit():
    strategy, deadline = gpu_strategy(), workflow_deadline()
    attempts = [Attempt(0.0, 1.0 * HOUR, "Error", "-1")]
    while not isinstance(got := next_attempt(strategy, attempts, deadline), str):
        attempts.append(Attempt(got[0], got[0] + HOUR, "Error", "-1"))
    assert len(attempts) == int(strategy["limit"]) + 1 >= 4, got
    assert got == "No more retries left"


@pytest.mark.parametrize("exit_code", ["1", "2"])
def test_a_failure_of_the_steps_own_making_is_not_retried_on_a_gpu(exit_code: str):
    attempts = [Attempt(0.0, 600.0, "Failed", exit_code)]
    assert next_attempt(gpu_strategy(), attempts, workflow_deadline()) == "retryStrategy.expression evaluated to false"


def test_an_oom_killed_attempt_is_not_retried_on_a_gpu():
    """The same pod at the same memory limit would be killed again, five times over an hour of backoff: an OOM is the
    plan's error, not the spot market's. Argo writes the main container's reason into the node's message
    (operator.go inferFailedReason: `main: OOMKilled (exit code 137): <termination message>`); a 137 without it (a
    node's shutdown) is still a reclaim."""
    oom = "main: OOMKilled (exit code 137): train ran with a memory limit of 22.00 GiB"
    attempts = [Attempt(0.0, 600.0, "Failed", "137", oom)]
    assert next_attempt(gpu_strategy(), attempts, workflow_deadline()) == "retryStrategy.expression evaluated to false"
    shutdown = [Attempt(0.0, 600.0, "Failed", "137", "main: Error (exit code 137): train ran with a memory limit")]
    assert not isinstance(next_attempt(gpu_strategy(), shutdown, workflow_deadline()), str)


def test_the_old_strategy_is_caught_a_reclaim_after_30_minutes_got_no_retry():
    old = {"limit": "3", "retryPolicy": "Always", "backoff": {"duration": "30s", "factor": "2", "maxDuration": "30m"}}
    late = [Attempt(started=300.0, finished=0.6 * HOUR, phase="Error", exit_code="-1")]
    assert next_attempt(old, late, workflow_deadline()) == "Max duration limit exceeded"
    early = [Attempt(started=300.0, finished=0.2 * HOUR, phase="Error", exit_code="-1")]
    _start, execution_deadline = next_attempt(old, early, workflow_deadline())
    assert execution_deadline == 300.0 + 1800.0  # and the retry would be killed at the 30-minute mark


def test_argo_refuses_a_retry_expression_written_with_a_tuple():
    """Issue #26 (3): `('1', '2')` is a Python tuple, not an expr-lang array; the old eval port accepted it."""
    answer = ask({"op": "retry", "expression": "lastRetry.exitCode not in ('1', '2')", "node": {"exitCode": "1"}})
    assert "unexpected token" in answer.get("error", ""), answer


def test_the_expression_reads_argos_variables():
    assert expression_holds("lastRetry.exitCode not in ['1', '2']", "Failed", "143")
    assert not expression_holds("lastRetry.exitCode not in ['1', '2']", "Failed", "1")
    assert expression_holds("lastRetry.status == 'Error' || lastRetry.exitCode == '9'", "Error", "-1")
    assert not expression_holds("!(lastRetry.status == 'Error')", "Error", "-1")
