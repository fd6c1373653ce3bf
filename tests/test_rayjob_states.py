"""When `train-ray` ends: Argo's resource-step conditions against every state KubeRay can put the RayJob in.

Neither engine runs here, so their rules are ported from source and cited, and the port is itself checked against the
Go semantics:
(A pre-check: in tests/test_controlplane.py, integration tier, KubeRay's operator v1.5.0 and Argo's `argoexec
resource` v4.0.5 run the RayJob to SUCCEEDED, FAILED and STOPPED and end train-ray by the template's conditions; the
table below covers every pair, and KubeRay v1.7.0, which cannot be built here.)

- Argo, `workflow/executor/resource.go` (v3.7.18 and v4.1.2 read alike): `WaitResource` parses `successCondition` and
  `failureCondition` with k8s `labels.Parse` and polls; `matchConditions` fails the step as soon as ANY one failure
  requirement matches (checked first), succeeds when ALL success requirements match (`numMatched >= len`, so an empty
  success condition succeeds at once), and otherwise polls again. A requirement reads the object's JSON through
  `gjsonLabels` (`Has` = `gjson.Get(json, key).Exists()`, `Get` = `.String()`). The Argo docs said failure
  requirements were ANDed like the success ones; the code ORs them (argoproj/argo-workflows#11217).
- k8s.io/apimachinery `pkg/labels/selector.go`: `Parse` (lexer and parser, `NewRequirement`'s key and value checks) and
  `Requirement.Matches`: on a missing key `in`/`=`/`==` are false, `notin`/`!=` true, `!key` true, `key` false.
- KubeRay v1.7.0 (the CRD in tests/schemas; `rayjob_types.go` and `rayjob_controller.go` read the same at HEAD),
  `ray-operator/controllers/ray/rayjob_controller.go`: which (jobStatus, jobDeploymentStatus) pairs the controller can
  write, and which of them it never leaves. The table below classifies all 60 pairs of `AllJobStatuses` × the
  `JobDeploymentStatus` constants, each with the function that produces it (or why none does).

Also here: the RayJob's deadlines, clean-up and head placement (`workflows/rayjob.py`), read from the rendered template.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import NamedTuple

import pytest
import yaml

from tests.conftest import ROOT
from tests.manifests import rayjob_template, rendered_rayjob, rendered_template
from workflows import rayjob

RAYJOB_CRD = ROOT / "tests/schemas/kuberay-v1.7.0-ray.io_rayjobs.yaml"

# --- k8s labels.Parse and Requirement.Matches, ported (the subset without Gt/Lt) ------------------------------------

_SPECIAL = "=!(),><"  # isSpecialSymbol
_WHITESPACE = " \t\r\n"  # isWhitespace
_OPERATOR_TOKENS = {"=", "==", "!", "!=", "(", ")", ",", ">", "<"}  # string2token, less the keywords
_KEYWORDS = {"in", "notin"}
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # IsQualifiedName's name part, IsValidLabelValue
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class SelectorError(ValueError):
    """What labels.Parse returns as an error (Argo then fails the step with 'condition … failed to parse')."""


class Requirement(NamedTuple):
    key: str
    op: str  # in, notin, =, ==, !=, exists, !
    values: frozenset[str]


def _lex(text: str) -> list[tuple[str, str]]:
    """Lexer.Lex until the end: (kind, literal), kind one of 'id', a keyword, an operator token, or 'end'."""
    items, i = [], 0
    while True:
        while i < len(text) and text[i] in _WHITESPACE:
            i += 1
        if i == len(text):
            items.append(("end", ""))
            return items
        if text[i] in _SPECIAL:  # scanSpecialSymbol: the longest run of special symbols that is a token
            j, last = i, None
            while j < len(text) and text[j] in _SPECIAL:
                if text[i : j + 1] in _OPERATOR_TOKENS:
                    last = text[i : j + 1]
                elif last is not None:
                    break
                j += 1
            if last is None:
                raise SelectorError(f"error expected: keyword found '{text[i:j]}'")
            items.append((last, last))
            i += len(last)
        else:  # scanIDOrKeyword
            j = i
            while j < len(text) and text[j] not in _SPECIAL and text[j] not in _WHITESPACE:
                j += 1
            word = text[i:j]
            items.append((word if word in _KEYWORDS else "id", word))
            i = j


def _check_key(key: str) -> None:
    """validateLabelKey: validation.IsQualifiedName."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        raise SelectorError(f"invalid key prefix in {key!r}")
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        raise SelectorError(f"invalid key {key!r}")


def _check_value(value: str) -> None:
    """validateLabelValue: validation.IsValidLabelValue (the empty string is valid)."""
    if len(value) > 63 or (value and not _NAME.fullmatch(value)):
        raise SelectorError(f"invalid value {value!r}")


def parse_selector(text: str) -> list[Requirement]:
    """labels.Parse: requirements separated by commas, sorted by key (`parse`: sort.Sort(ByKey))."""
    items, pos = _lex(text), 0

    def peek(values_context: bool = True) -> tuple[str, str]:  # lookahead: in Values context keywords are identifiers
        kind, lit = items[pos]
        return ("id" if values_context and kind in _KEYWORDS else kind), lit

    def take(values_context: bool = True) -> tuple[str, str]:  # consume
        nonlocal pos
        pos += 1
        kind, lit = items[pos - 1]
        return ("id" if values_context and kind in _KEYWORDS else kind), lit

    def requirement() -> Requirement:  # parseRequirement
        kind, key = take()  # parseKeyAndInferOperator
        op = None
        if kind == "!":
            op = "!"
            kind, key = take()
        if kind != "id":
            raise SelectorError(f"found '{key}', expected: identifier")
        _check_key(key)
        if peek()[0] in ("end", ","):
            return Requirement(key, op or "exists", frozenset())
        if op == "!":
            raise SelectorError(f"found '{peek()[1]}', expected: ',' or 'end of string'")
        kind, lit = take(values_context=False)  # parseOperator
        if kind in (">", "<"):
            raise NotImplementedError("Gt/Lt requirements are not ported")
        if kind not in ("in", "notin", "=", "==", "!="):
            raise SelectorError(f"found '{lit}', expected: in, notin, =, ==, !=, >, <")
        op = kind
        values: set[str] = set()
        if op in ("in", "notin"):  # parseValues, parseIdentifiersList
            if take()[0] != "(":
                raise SelectorError("expected: '('")
            if peek()[0] == ")":
                take()
                values.add("")
            else:
                while True:
                    kind, lit = take()
                    if kind == "id":
                        values.add(lit)
                        if peek()[0] == ")":
                            take()
                            break
                        if peek()[0] != ",":
                            raise SelectorError(f"found '{peek()[1]}', expected: ',' or ')'")
                    elif kind == ",":
                        if not values:
                            values.add("")
                        if peek()[0] == ")":
                            values.add("")
                            take()
                            break
                        if peek()[0] == ",":
                            take()
                            values.add("")
                    else:
                        raise SelectorError(f"found '{lit}', expected: ',', or identifier")
        else:  # parseExactValue
            if peek()[0] in ("end", ","):
                values.add("")
            else:
                kind, lit = take()
                if kind != "id":
                    raise SelectorError(f"found '{lit}', expected: identifier")
                values.add(lit)
        for v in values:
            _check_value(v)
        return Requirement(key, op, frozenset(values))

    requirements = []
    while True:
        kind, lit = peek()
        if kind == "end":
            break
        if kind not in ("id", "!"):
            raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
        requirements.append(requirement())
        kind, lit = take()
        if kind == "end":
            break
        if kind != ",":
            raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
        if peek()[0] not in ("id", "!"):
            raise SelectorError(f"found '{peek()[1]}', expected: identifier after ','")
    return sorted(requirements, key=lambda r: r.key)


class Labels(NamedTuple):
    """labels.Labels: Has and Get."""

    has: Callable[[str], bool]
    get: Callable[[str], str]


def matches(requirement: Requirement, labels: Labels) -> bool:
    """Requirement.Matches."""
    key, op, values = requirement
    if op in ("in", "=", "=="):
        return labels.has(key) and labels.get(key) in values
    if op in ("notin", "!="):
        return not labels.has(key) or labels.get(key) not in values
    if op == "exists":
        return labels.has(key)
    assert op == "!", op
    return not labels.has(key)


def label_set(labels: dict[str, str]) -> Labels:
    """labels.Set: a plain map, as node labels are."""
    return Labels(has=lambda k: k in labels, get=lambda k: labels.get(k, ""))


# --- Argo's gjsonLabels and matchConditions, ported -------------------------------------------------------------------

_MISSING = object()


def _gjson(doc: object, path: str) -> object:
    """gjson.Get for plain paths: dot-separated keys (`\\.` escapes a dot), numbers index arrays. gjson's wildcards,
    queries, modifiers and pipes are not ported."""
    if any(c in path for c in "*?#@|[]{}"):
        raise NotImplementedError(f"gjson path syntax not ported: {path!r}")
    for part in (p.replace("\0", ".") for p in path.replace("\\.", "\0").split(".")):
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return _MISSING
    return doc


def _gjson_string(value: object) -> str:
    """gjson Result.String(): null → "", true/false, numbers as written, objects and arrays as raw JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def gjson_labels(doc: dict) -> Labels:
    """gjsonLabels: Has = Exists() (true for a JSON null too), Get = String()."""
    return Labels(
        has=lambda k: _gjson(doc, k) is not _MISSING,
        get=lambda k: "" if (v := _gjson(doc, k)) is _MISSING else _gjson_string(v),
    )


def match_conditions(doc: dict, success: str, failure: str) -> str:
    """WaitResource + matchConditions for one poll: 'failed', 'succeeded' or 'waiting' (Argo polls again)."""
    if not success and not failure:
        return "succeeded"  # WaitResource returns at once
    labels = gjson_labels(doc)
    if any(matches(r, labels) for r in parse_selector(failure)):
        return "failed"
    success_requirements = parse_selector(success)
    if sum(matches(r, labels) for r in success_requirements) >= len(success_requirements):
        return "succeeded"
    return "waiting"


# --- the port against the Go semantics --------------------------------------------------------------------------------

# From apimachinery's TestSelectorParse (those without Gt/Lt), plus the shapes our conditions use.
GOOD_SELECTORS = [
    "x=a,y=b,z=c",
    "",
    "x!=a,y=b",
    "x=",
    "x= ",
    "x=,z= ",
    "x= ,z= ",
    "!x",
    "x in (abc,def)",
    "x in (abc,)",
    "x in ()",
    "x notin (abc,def),bar,z in (),w",
    "this-is-a-dns.domain.com/key-with-dash in (so,what)",
    "status.jobStatus in (FAILED, STOPPED), status.jobDeploymentStatus in (Failed, ValidationFailed)",
    "status.jobStatus == SUCCEEDED, status.jobDeploymentStatus == Complete",
]
BAD_SELECTORS = [
    "x=a||y=b",  # TestSelectorParse
    "x==a==b",  # TestSelectorParse
    "!x=a",  # TestSelectorParse
    "x in abc",  # no parentheses
    "x in (a b)",  # a space is no separator
    "x == Failed Complete",
    "x=a,",  # nothing after the comma
    "x == has space",
    "x == (Failed)",
    "status.jobStatus == SUCCEEDED && status.jobDeploymentStatus == Complete",  # not expr-lang
    "Status/jobStatus == x",  # a key's prefix is a DNS subdomain: lower case
    "/jobStatus == x",  # and not empty
    "x = " + "a" * 64,  # a value has at most 63 characters
]


@pytest.mark.parametrize("text", GOOD_SELECTORS)
def test_port_parses_what_labels_parse_accepts(text: str):
    parse_selector(text)


@pytest.mark.parametrize("text", BAD_SELECTORS)
def test_port_rejects_what_labels_parse_rejects(text: str):
    with pytest.raises(SelectorError):
        parse_selector(text)


def test_port_parses_into_sorted_requirements():
    assert parse_selector("x notin (abc,def),bar,z in (),w") == [
        Requirement("bar", "exists", frozenset()),
        Requirement("w", "exists", frozenset()),
        Requirement("x", "notin", frozenset({"abc", "def"})),
        Requirement("z", "in", frozenset({""})),
    ]
    assert parse_selector("x in (abc,)") == [Requirement("x", "in", frozenset({"abc", ""}))]
    assert parse_selector("notin=in") == [Requirement("notin", "=", frozenset({"in"}))]  # keywords as key and value


# (selector, labels, matches): apimachinery's TestSelectorMatches and TestRequirementSelectorMatching (the selector
# matches when all its requirements do), then missing keys.
SELECTOR_CASES = [
    ("", {"x": "y"}, True),
    ("x=y", {"x": "y"}, True),
    ("x=y,z=w", {"x": "y", "z": "w"}, True),
    ("x!=y,z!=w", {"x": "z", "z": "a"}, True),
    ("notin=in", {"notin": "in"}, True),
    ("x", {"x": "z"}, True),
    ("!x", {"y": "z"}, True),
    ("x=z", {}, False),
    ("x=y", {"x": "z"}, False),
    ("x=y,z=w", {"x": "w", "z": "w"}, False),
    ("x!=y,z!=w", {"x": "z", "z": "w"}, False),
    ("x", {"y": "z"}, False),
    ("!x", {"x": "z"}, False),
    ("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False),
    ("x in (foo),y notin (alpha)", {"x": "foo", "y": "baz"}, True),
    ("x in (foo),y in (alpha)", {"x": "foo", "y": "baz"}, False),
    ("x notin (),y", {"y": ""}, True),
    ("!x,y", {"y": ""}, True),
    ("x notin (),!y", {"y": ""}, False),
    ("x in ()", {"y": "baz"}, False),
    # a missing key: only the negative operators match it
    ("k in (a)", {}, False),
    ("k == a", {}, False),
    ("k = a", {}, False),
    ("k notin (a)", {}, True),
    ("k != a", {}, True),
    ("!k", {}, True),
    ("k", {}, False),
    ("k in ()", {}, False),  # not even the empty value
]


@pytest.mark.parametrize(("selector", "labels", "expected"), SELECTOR_CASES)
def test_port_matches_like_requirement_matches(selector: str, labels: dict[str, str], expected: bool):
    requirements = parse_selector(selector)
    assert all(matches(r, label_set(labels)) for r in requirements) is expected
    # The same labels as top-level fields of a JSON object, read through gjsonLabels.
    assert all(matches(r, gjson_labels(labels)) for r in requirements) is expected


@pytest.mark.parametrize(
    ("value", "present", "string"),
    [
        ({"status": {"x": "Failed"}}, True, "Failed"),
        ({"status": {"x": ""}}, True, ""),
        ({"status": {"x": None}}, True, ""),  # gjson Exists(): a JSON null exists, its String() is ""
        ({"status": {"x": 3}}, True, "3"),
        ({"status": {"x": 2.5}}, True, "2.5"),
        ({"status": {"x": True}}, True, "true"),
        ({"status": {"x": {"a": 1}}}, True, '{"a":1}'),
        ({"status": {}}, False, ""),
        ({}, False, ""),
        ({"status": "Failed"}, False, ""),  # a path through a string
    ],
)
def test_port_reads_json_like_gjson(value: dict, present: bool, string: str):
    labels = gjson_labels(value)
    assert labels.has("status.x") is present and labels.get("status.x") == string


def test_port_matches_missing_and_null_json_fields_like_argo():
    missing, null = {"status": {}}, {"status": {"x": None}}
    for doc in (missing, {}):
        assert match_conditions(doc, "status.x == a", "status.x in (b)") == "waiting"
        assert match_conditions(doc, "status.x == a", "status.x notin (b)") == "failed"
        assert match_conditions(doc, "status.x == a", "status.x != b") == "failed"
        assert match_conditions(doc, "status.x == a", "!status.x") == "failed"
    assert match_conditions(null, "status.x == a", "status.x in ()") == "failed"  # "" is in ("")


def test_port_ors_failure_requirements_and_ands_success_requirements():
    doc = {"a": "x", "b": "z"}
    assert match_conditions(doc, "a == x, b == y", "c == 1") == "waiting"  # one of two success requirements
    assert match_conditions({"a": "x", "b": "y"}, "a == x, b == y", "c == 1") == "succeeded"
    assert match_conditions(doc, "a == q", "a == x, b == y") == "failed"  # one of two failure requirements
    assert match_conditions({"a": "x", "b": "y"}, "a == x, b == y", "a == x") == "failed"  # failure is checked first
    assert match_conditions(doc, "", "a == q") == "succeeded"  # no success requirement: numMatched 0 >= 0
    assert match_conditions(doc, "", "") == "succeeded"
    with pytest.raises(SelectorError):
        match_conditions(doc, "a == x", "a in x")


# --- every state of KubeRay's RayJob state machine --------------------------------------------------------------------

# rayjob_types.go: AllJobStatuses (JobStatusNew is "", which `omitempty` leaves out of the JSON: None here) and the
# JobDeploymentStatus constants (JobDeploymentStatusNew likewise "").
JOB_STATUSES = (None, "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED")
DEPLOYMENT_STATUSES = (
    None,
    "Initializing",
    "Running",
    "Complete",
    "Failed",
    "ValidationFailed",
    "Suspending",
    "Suspended",
    "Retrying",
    "Waiting",
)
NOT_NEW = [j for j in JOB_STATUSES if j is not None]

# (jobStatus, jobDeploymentStatus) → how the step must end, and where the controller (rayjob_controller.go@v1.7.0)
# produces it. Terminal: the controller never moves on from it (IsJobDeploymentTerminal: Complete, Failed, whose
# Reconcile case only cleans up; ValidationFailed, re-written by every Reconcile whose validateRayJob fails, and
# otherwise met by the switch's default branch, which only requeues), or the Ray job has ended (IsJobTerminal: "it
# is impossible for the Ray job to transition to any other", Reconcile case Running) and, backoffLimit being 0,
# will not run again.
TERMINAL: dict[tuple[str | None, str | None], tuple[str, str]] = {
    ("SUCCEEDED", "Complete"): ("succeeded", "Reconcile case Running: a terminal job status but FAILED → Complete"),
    ("STOPPED", "Complete"): ("failed", "Reconcile case Running (as above); checkTransitionGracePeriodAndUpdate…"),
    ("FAILED", "Failed"): ("failed", "Reconcile case Running: FAILED → Failed, AppFailed; also the grace period"),
    (None, "Failed"): (
        "failed",
        "case Initializing: checkPreRunningDeadlineAndUpdateStatusIfNeeded, checkActiveDeadlineAndUpdateStatusIfNeeded"
        " (the job status is still New); case Running before the first poll: checkJobStatusCheckTimeout…, a failed"
        " submitter (checkSubmitterAndUpdateStatusIfNeeded)",
    ),
    ("PENDING", "Failed"): ("failed", "case Running: checkActiveDeadline…, checkJobStatusCheckTimeout…, submitter"),
    ("RUNNING", "Failed"): ("failed", "case Running: checkActiveDeadline…, checkJobStatusCheckTimeout…, submitter"),
    ("SUCCEEDED", "Failed"): ("failed", "K8sJobMode/SidecarMode: the deadline or a failed submitter while Running"),
    ("STOPPED", "Failed"): ("failed", "K8sJobMode/SidecarMode: the deadline or a failed submitter while Running"),
    **{
        (j, "ValidationFailed"): ("failed", "Reconcile: validateRayJob before the switch, on every reconcile")
        for j in JOB_STATUSES
    },
    ("FAILED", "Running"): ("failed", "K8sJobMode/SidecarMode: the job ended, the submitter not yet (isJobTerminal)"),
    ("STOPPED", "Running"): ("failed", "K8sJobMode/SidecarMode: the job ended, the submitter not yet (isJobTerminal)"),
    ("FAILED", "Suspending"): ("failed", "updateStatusToSuspendingIfNeeded from the (FAILED, Running) above"),
    ("STOPPED", "Suspending"): ("failed", "updateStatusToSuspendingIfNeeded from the (STOPPED, Running) above"),
}
# Pairs the controller writes and later leaves: the step must keep polling.
WAITING: dict[tuple[str | None, str | None], str] = {
    (None, None): "a RayJob just created; Reconcile case Suspending/Retrying and case Suspended back to New",
    (None, "Initializing"): "initRayJobStatusIfNeed (the sole place that sets Initializing; job status New)",
    (None, "Running"): "case Initializing once the RayCluster is Ready; HTTPMode submits on the next reconcile",
    ("PENDING", "Running"): "case Running: the dashboard's job status, not terminal",
    ("RUNNING", "Running"): "case Running: the dashboard's job status, not terminal",
    ("SUCCEEDED", "Running"): "K8sJobMode/SidecarMode: waits for the submitter, and may still end Failed",
    **{
        (j, "Suspending"): "updateStatusToSuspendingIfNeeded (spec.suspend), from Initializing or Running"
        for j in (None, "PENDING", "RUNNING", "SUCCEEDED")
    },
    (None, "Suspended"): "case Suspending (job status reset to New); resumes when spec.suspend is false again",
    (None, "Waiting"): "InteractiveMode only (case Initializing); ValidateRayJobStatus rejects it otherwise",
}
# Pairs no code path writes, for the RayJob we render (backoffLimit 0).
UNREACHABLE: dict[tuple[str | None, str | None], str] = {
    **{
        (j, None): "every way back to New resets the job status to New (cases Suspending/Retrying, Suspended)"
        for j in NOT_NEW
    },
    **{(j, "Initializing"): "entered only from New, whose job status is New" for j in NOT_NEW},
    **{
        (j, "Complete"): "Complete needs a terminal job status other than FAILED (case Running, grace period)"
        for j in (None, "PENDING", "RUNNING", "FAILED")
    },
    **{(j, "Suspended"): "case Suspending resets the job status to New before Suspended" for j in NOT_NEW},
    **{
        (j, "Retrying"): "checkBackoffLimitAndUpdateStatusIfNeeded retries only while failed < backoffLimit + 1; ours "
        "is 0 (test_backoff_limit_is_zero)"
        for j in JOB_STATUSES
    },
    **{(j, "Waiting"): "entered only from Initializing, whose job status is New" for j in NOT_NEW},
}


def rayjob_object(job: str | None, deployment: str | None) -> dict:
    """The RayJob as Argo's executor reads it: status fields that are "" are left out (`omitempty`)."""
    status = {k: v for k, v in (("jobStatus", job), ("jobDeploymentStatus", deployment)) if v is not None}
    doc: dict = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "distill-x"}, "spec": {}}
    if status:
        doc["status"] = status
    return doc


def misjudged(success: str, failure: str, evaluate: Callable[[dict, str, str], str] = match_conditions) -> list[str]:
    """Every state the conditions get wrong: a terminal state that keeps the step waiting (or ends it the wrong way),
    a state KubeRay will leave that ends it."""
    wrong = []
    for (job, deployment), (outcome, _) in TERMINAL.items():
        got = evaluate(rayjob_object(job, deployment), success, failure)
        if got != outcome:
            wrong.append(f"({job}, {deployment}) is terminal, must end {outcome}, got {got}")
    for job, deployment in WAITING:
        got = evaluate(rayjob_object(job, deployment), success, failure)
        if got != "waiting":
            wrong.append(f"({job}, {deployment}) is not terminal, but the step {got}")
    return wrong


def test_the_state_table_classifies_every_pair_once():
    pairs = set(itertools.product(JOB_STATUSES, DEPLOYMENT_STATUSES))
    tables = [set(TERMINAL), set(WAITING), set(UNREACHABLE)]
    assert sum(len(t) for t in tables) == len(pairs) == 60
    assert set().union(*tables) == pairs


@pytest.mark.parametrize(("state", "expected"), [(s, e[0]) for s, e in TERMINAL.items()], ids=str)
def test_every_terminal_state_ends_the_step(state: tuple, expected: str):
    assert match_conditions(rayjob_object(*state), rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION) == expected


@pytest.mark.parametrize("state", list(WAITING), ids=str)
def test_every_other_state_keeps_the_step_waiting(state: tuple):
    assert match_conditions(rayjob_object(*state), rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION) == "waiting"


def test_only_a_succeeded_job_on_a_complete_deployment_succeeds():
    succeeded = [s for s, (outcome, _) in TERMINAL.items() if outcome == "succeeded"]
    assert succeeded == [("SUCCEEDED", "Complete")]
    assert misjudged(rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION) == []


def test_an_explicit_empty_job_status_reads_like_an_absent_one():
    doc = rayjob_object(None, "Failed")
    doc["status"]["jobStatus"] = ""
    assert match_conditions(doc, rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION) == "failed"
    doc = rayjob_object(None, "Initializing")
    doc["status"]["jobStatus"] = ""
    assert match_conditions(doc, rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION) == "waiting"


def _if_failure_were_anded(doc: dict, success: str, failure: str) -> str:
    """The reading Argo's docs gave before argoproj/argo-workflows#11217: failure requirements ANDed. Not Argo."""
    labels = gjson_labels(doc)
    if all(matches(r, labels) for r in parse_selector(failure)):
        return "failed"
    return "succeeded" if all(matches(r, labels) for r in parse_selector(success)) else "waiting"


# Conditions that look right and are not, each with a state it gets wrong: the check above must catch them all.
BROKEN = {
    "no ValidationFailed": (
        rayjob.SUCCESS_CONDITION,
        "status.jobStatus in (FAILED, STOPPED), status.jobDeploymentStatus in (Failed)",
        "(None, ValidationFailed) is terminal, must end failed, got waiting",
    ),
    "no STOPPED": (
        rayjob.SUCCESS_CONDITION,
        "status.jobStatus in (FAILED), status.jobDeploymentStatus in (Failed, ValidationFailed)",
        "(STOPPED, Complete) is terminal, must end failed, got waiting",
    ),
    "the job status only": (
        rayjob.SUCCESS_CONDITION,
        "status.jobStatus in (FAILED, STOPPED)",
        "(None, Failed) is terminal, must end failed, got waiting",  # preRunningDeadlineSeconds passed
    ),
    "the deployment status only": (
        rayjob.SUCCESS_CONDITION,
        "status.jobDeploymentStatus in (Failed, ValidationFailed)",
        "(STOPPED, Complete) is terminal, must end failed, got waiting",
    ),
    "success on the job status alone": (
        "status.jobStatus == SUCCEEDED",
        rayjob.FAILURE_CONDITION,
        "(SUCCEEDED, Running) is not terminal, but the step succeeded",
    ),
    "success on Complete alone": (
        "status.jobDeploymentStatus == Complete",
        "status.jobStatus in (FAILED), status.jobDeploymentStatus in (Failed, ValidationFailed)",
        "(STOPPED, Complete) is terminal, must end failed, got succeeded",
    ),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_conditions_are_caught(name: str):
    success, failure, wrong = BROKEN[name]
    assert wrong in misjudged(success, failure)


def test_our_failure_condition_needs_argos_or():
    # Were failure requirements ANDed, a job that ran past its deadline would keep the step waiting: the OR that
    # matchConditions implements is what this condition relies on.
    wrong = misjudged(rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION, evaluate=_if_failure_were_anded)
    assert "(RUNNING, Failed) is terminal, must end failed, got waiting" in wrong
    assert "(None, ValidationFailed) is terminal, must end failed, got waiting" in wrong


def test_backoff_limit_is_zero():
    # With retries KubeRay follows a failed attempt with Retrying and a new cluster, and the failure condition would
    # end the step on the failed attempt's FAILED job status.
    assert rendered_rayjob()["spec"]["backoffLimit"] == 0
    failed_attempt = rayjob_object("FAILED", "Retrying")
    assert match_conditions(failed_attempt, rayjob.SUCCESS_CONDITION, rayjob.FAILURE_CONDITION) == "failed"


def test_the_rendered_step_uses_these_conditions():
    resource = rayjob_template()["resource"]
    assert resource["successCondition"] == rayjob.SUCCESS_CONDITION
    assert resource["failureCondition"] == rayjob.FAILURE_CONDITION


# --- deadlines, clean-up, head placement ------------------------------------------------------------------------------


def test_cluster_start_has_a_deadline_short_of_the_run_s():
    spec = rendered_rayjob()["spec"]
    workflow_deadline = rendered_template()["spec"]["activeDeadlineSeconds"]
    assert 0 < spec["preRunningDeadlineSeconds"] < spec["activeDeadlineSeconds"] <= workflow_deadline
    # Time for a new node and a multi-GB image pull; a cluster that cannot start fails within the hour, not in 8.
    assert 20 * 60 <= spec["preRunningDeadlineSeconds"] <= 3600


def test_kuberay_1_7_knows_the_fields_we_rely_on():
    crd = yaml.load(RAYJOB_CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    spec = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    fields = spec["properties"]["spec"]["properties"]
    assert fields["preRunningDeadlineSeconds"]["minimum"] == 1  # added in KubeRay v1.6.0
    assert {"shutdownAfterJobFinishes", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"} <= set(
        fields
    )
    status = spec["properties"]["status"]["properties"]
    assert {"jobStatus", "jobDeploymentStatus"} <= set(status)


def test_the_cluster_goes_when_the_job_ends_and_the_rayjob_with_the_workflow():
    spec = rendered_rayjob()["spec"]
    # handleShutdownAfterJobFinishes deletes the RayCluster ttlSecondsAfterFinished after status.endTime.
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == 0
    # deletionRules exclude shutdownAfterJobFinishes (validateDeletionConfiguration) and miss STOPPED jobs.
    assert "deletionStrategy" not in spec
    resource = rayjob_template()["resource"]
    assert resource["action"] == "create" and resource["setOwnerReference"] is True


def node_affinity_admits(pod_template: dict, node_labels: dict[str, str]) -> bool:
    """k8s component-helpers nodeaffinity (`nodeSelectorRequirementsAsSelector`): a term's expressions become label
    requirements, all of which must match; terms are ORed."""
    required = pod_template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}

    def requirement(e: dict) -> Requirement:
        return Requirement(e["key"], operators[e["operator"]], frozenset(e.get("values", [])))

    node = label_set(node_labels)
    return any(
        all(matches(requirement(e), node) for e in term["matchExpressions"]) for term in required["nodeSelectorTerms"]
    )


NODES = {  # node labels as each kind of node carries them, and whether the head may run there
    "homelab x86": ({"kubernetes.io/arch": "amd64"}, True),
    "Karpenter on-demand": ({"kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "on-demand"}, True),
    "Karpenter spot": ({"kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "spot"}, False),
    "EKS managed, on-demand": ({"kubernetes.io/arch": "amd64", "eks.amazonaws.com/capacityType": "ON_DEMAND"}, True),
    "EKS managed, spot": ({"kubernetes.io/arch": "amd64", "eks.amazonaws.com/capacityType": "SPOT"}, False),
    "Raspberry Pi": ({"kubernetes.io/arch": "arm64"}, False),
}


@pytest.mark.parametrize("node", list(NODES))
def test_head_runs_off_spot_of_either_kind_and_off_the_pis(node: str):
    labels, admitted = NODES[node]
    head = rendered_rayjob()["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert node_affinity_admits(head, labels) is admitted


def test_spot_exclusions_in_separate_terms_would_admit_spot():
    # Terms are ORed: each exclusion in a term of its own admits the other kind of spot node.
    head = rendered_rayjob()["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    required = head["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = required["nodeSelectorTerms"]
    split = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [e]} for e in term["matchExpressions"]]}}}}}  # fmt: skip
    assert node_affinity_admits(split, NODES["EKS managed, spot"][0])


def test_karpenter_does_not_disrupt_the_ray_pods():
    cluster = rendered_rayjob()["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    for pod in pods:
        assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
