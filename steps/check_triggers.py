"""check-triggers: should the summariser be retrained? Checks the champion against three triggers, says which fired.

    python -m steps.check_triggers --tracking-uri http://mlflow:5000 --model-name distillery-summariser \
        --dataset-rev main --base-revision main --run-id "$(uuidgen)" --out out/triggers

Everything is measured against the version holding the `champion` alias (the model being served):

- quality: steps/core/outcomes.py logs `--online-metric` (by default `online.acceptance`, the daily share of
  summaries accepted as served) for the champion, one point a day, on the run named by the version's `online.run_id`
  tag, or else on the version's own run (the registration run). Baseline: the mean of the
  series' first `--baseline-points` points (the first days in production: online documents differ from the eval set,
  so offline scores are not a fair baseline), or, with `--baseline-points 0`, the version's `eval.rougeL` tag.
  Current: the mean of the last `--recent-points` points. Fires when baseline − current > `--max-quality-drop`.
- feedback: rows of `--feedback-file` (JSONL, read through DVC, so DVC-tracked files come from the remote) present at
  `--dataset-rev` but not at the champion's `dataset.commit`. Fires at `--min-feedback-rows` or more.
- base model: `--base-revision` (and `--base-model` when given) differs from the champion's `base_model.revision`
  (`base_model`) tag. Compared as text: pin revisions to commits or tags, a branch name never changes.

Debounce: when a trigger fires, the step tags the champion version `retrain.fired.<trigger>` (with a `.reason`) and
that trigger does not fire again for it: quality once per champion; feedback counts rows only since the commit it
last fired at; base model once per configured revision. A new champion starts clean. `--record false` is a dry run.
The tags are written before the CronWorkflow creates the retrain (a failure to write them stops it): if creating the
retrain then fails, that cron run fails visibly; `argo retry` it (same run id: it repeats the decision and creates the
retrain) or delete the champion's `retrain.fired.<trigger>` tag to re-arm the trigger for the next run.

Retries: every attempt of one run (`--run-id`, on Argo the workflow uid) reaches the same decision. Before its debounce
tags, a firing run writes its whole decision (this result, and each debounce tag's value before and after) as one tag,
`retrain.decision.<run-id>`, on the champion. An attempt that finds its run's decision there (an earlier attempt died
after deciding, e.g. its pod was lost before Argo read the outputs) does not decide again — its own tags would
debounce it and the retrain would be swallowed: it finishes the debounce tags the earlier attempt did not write (a tag
that another run has since moved is left alone) and returns the recorded result, outputs included. Without the
decision tag no debounce tag of the run was written, so deciding afresh starts from what the first attempt saw.
Another run id debounces as usual. Overlapping runs (a manual `argo submit --from cronwf/...` beside a scheduled one:
`concurrencyPolicy: Forbid` holds back only the scheduler) can both fire before either has tagged, giving two retrains
run one after the other under the retrain mutex; one run's tags never cancel another run's recorded decision.

No champion (or no registered model): nothing fires. The first model is trained by submitting the distill template
by hand; without a champion there is no served quality, no dataset or base model to compare with, and a retrain
every tick would only queue challengers nobody promoted.

Writes `result.json` and, for Argo, `_outputs/{fire,triggers,summary,dataset-repo,dataset-rev,champion-version}`:
`dataset-rev` is the commit `--dataset-rev` resolved to, so the retrain trains on exactly the data checked here.
"""

# One module, though long: the three triggers, what they read and the debounce record that keeps a retry's decision
# make one decision, read top to bottom; the triggers themselves are plain functions a test calls directly.

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steps.core import outcomes, registry
from steps.core.card import feedback_rows
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.io import atomic_dir, environment
from steps.core.mlflow_client import (
    MISSING_TRACKING_URI,
    MlflowSettings,
    is_transient,
    tracking_uri,
)
from steps.core.registry import CHAMPION, MODEL_NAME

FIRED_TAG = "retrain.fired."  # + trigger name; the value is the trigger's debounce key
DECISION_TAG = "retrain.decision."  # + run id; the value is that run's decision, JSON (see the module docstring)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # a Kubernetes uid fits; so does an MLflow tag-key suffix
ONLINE_RUN_TAG = outcomes.ONLINE_RUN_TAG


@dataclass
class TriggersConfig(MlflowSettings):
    out: Path = field(metadata={"help": "folder to write result.json and the Argo output parameters into"})
    model_name: str = field(default=MODEL_NAME, metadata={"help": "registered model name in MLflow"})
    online_metric: str = field(
        default=outcomes.ACCEPTANCE,
        metadata={"help": "online quality metric logged for the champion (empty: the quality trigger is off)"},
    )
    baseline_points: int = field(
        default=5,
        metadata={"help": "baseline = mean of the series' first N points (0: the champion's eval.rougeL tag)"},
    )
    recent_points: int = field(default=3, metadata={"help": "current quality = mean of the series' last N points"})
    max_quality_drop: float = field(
        default=0.05, metadata={"help": "fire when baseline minus current quality exceeds this (absolute)"}
    )
    dataset_repo: str = field(
        default="", metadata={"help": "git repo holding the dataset (empty: the champion's dataset.repo tag)"}
    )
    dataset_rev: str = field(
        default="HEAD", metadata={"help": "rev with the newest data (branch or tag); the retrain gets its commit"}
    )
    feedback_file: str = field(
        default="data/summaries/feedback.jsonl", metadata={"help": "JSONL feedback file in the dataset repo"}
    )
    min_feedback_rows: int = field(
        default=50, metadata={"help": "fire at this many new feedback rows (0: the feedback trigger is off)"}
    )
    base_model: str = field(
        default="", metadata={"help": "base model the next retrain would use (empty: compare the revision only)"}
    )
    base_revision: str = field(
        default="",
        metadata={"help": "base model revision the next retrain would use (empty: the base-model trigger is off)"},
    )
    record: bool = field(
        default=True,
        metadata={"help": "tag the champion with fired triggers so they do not fire again (false: a dry run)"},
    )
    run_id: str = field(
        default="",
        metadata={
            "help": "id shared by every attempt of one check run (on Argo: the workflow uid); an attempt that finds "
            "its run's recorded decision repeats it instead of being debounced by its own tags (empty: a fresh id)"
        },
    )


@dataclass
class TriggersResult:
    fire: bool
    triggers: str  # fired trigger names joined by '.', or 'none': usable as a Kubernetes label value
    summary: str  # the fired triggers' reasons, '; '-joined (an annotation)
    reasons: list[str]  # one line per trigger, fired or not
    dataset_repo: str
    dataset_rev: str
    champion_version: str
    run_id: str  # the run that made this decision


@dataclass
class Check:
    trigger: str
    fired: bool
    reason: str
    key: str = ""  # what `retrain.fired.<trigger>` records when it fires


class TriggerError(ValueError):
    """A trigger could not be evaluated (bad config, missing tags, unreachable data)."""


def config_problems(cfg: TriggersConfig) -> list[str]:
    problems = []
    if cfg.baseline_points < 0:
        problems.append(f"--baseline-points {cfg.baseline_points}: use 0 (the eval.rougeL tag) or more points")
    if cfg.recent_points < 1:
        problems.append(f"--recent-points {cfg.recent_points}: use at least 1")
    if cfg.max_quality_drop < 0:
        problems.append(f"--max-quality-drop {cfg.max_quality_drop}: use 0 or more")
    if cfg.min_feedback_rows < 0:
        problems.append(f"--min-feedback-rows {cfg.min_feedback_rows}: use 0 (off) or more rows")
    if cfg.run_id and not RUN_ID.fullmatch(cfg.run_id):
        problems.append(
            f"--run-id {cfg.run_id!r}: use up to 100 letters, digits, '_', '.' or '-', starting with a letter or digit "
            "(on Argo: {{workflow.uid}})"
        )
    return problems + cfg.http_problems()


# --- the three triggers, as plain functions ----------------------------------------------------------------------


def quality_levels(
    values: list[float], baseline_points: int, recent_points: int, eval_baseline: float | None
) -> tuple[float, float] | None:
    """(baseline, current) of an online series in step order, or None while it is too short to say."""
    if baseline_points == 0:
        if eval_baseline is None or len(values) < recent_points:
            return None
        baseline = eval_baseline
    else:
        if len(values) < baseline_points + recent_points:
            return None
        baseline = sum(values[:baseline_points]) / baseline_points
    recent = values[-recent_points:]
    return baseline, sum(recent) / len(recent)


def check_quality(
    values: list[float], cfg: TriggersConfig, eval_baseline: float | None, already: str | None, version: str
) -> Check:
    name = cfg.online_metric
    if already == name:
        return Check("quality", False, f"quality: {name} already fired a retrain for champion {version}")
    levels = quality_levels(values, cfg.baseline_points, cfg.recent_points, eval_baseline)
    if levels is None:
        needs = cfg.recent_points if cfg.baseline_points == 0 else cfg.baseline_points + cfg.recent_points
        why = "and no numeric eval.rougeL tag" if cfg.baseline_points == 0 and eval_baseline is None else ""
        return Check("quality", False, f"quality: {len(values)} point(s) of {name}, needs {needs} {why}".rstrip())
    baseline, current = levels
    drop = baseline - current
    text = f"{name} {current:.4f} vs baseline {baseline:.4f} (drop {drop:+.4f}, limit {cfg.max_quality_drop})"
    if drop > cfg.max_quality_drop:
        return Check("quality", True, f"quality: {text}", key=name)
    return Check("quality", False, f"quality: {text}: holds")


def check_feedback(old: bytes | None, new: bytes | None, since: str, cfg: TriggersConfig, new_commit: str) -> Check:
    if new is None:
        return Check("feedback", False, f"feedback: {cfg.feedback_file} not found at {new_commit[:12]}")
    count = len(feedback_rows(new) - feedback_rows(old))
    text = f"{count} new row(s) in {cfg.feedback_file} since {since[:12]} (at {new_commit[:12]}; fires at "
    text += f"{cfg.min_feedback_rows})"
    return Check("feedback", count >= cfg.min_feedback_rows, f"feedback: {text}", key=new_commit)


def check_base_model(tags: dict[str, str], cfg: TriggersConfig, already: str | None) -> Check:
    was = f"{tags.get('base_model', '?')}@{tags.get('base_model.revision', '?')}"
    model = cfg.base_model or tags.get("base_model", "?")
    now = f"{model}@{cfg.base_revision}"
    if now == was:
        return Check("base-model", False, f"base model: {now} is what the champion was trained on")
    if already == now:
        return Check("base-model", False, f"base model: {was} → {now} already fired a retrain")
    return Check("base-model", True, f"base model: {was} → {now}", key=now)


# --- reading MLflow and DVC ----------------------------------------------------------------------------------------


def online_series(client: Any, champion: Any, metric: str) -> list[float]:
    run_id = outcomes.online_run_id(champion)
    if not run_id:
        raise TriggerError(
            f"champion {champion.version} has no run and no {ONLINE_RUN_TAG} tag: tag it with the run the online "
            "monitor logs to, or set --online-metric '' to turn the quality trigger off"
        )
    history = client.get_metric_history(run_id, metric)
    return [m.value for m in sorted(history, key=lambda m: (m.step, m.timestamp))]


def _dvc_fs(repo: str, rev: str) -> Any:
    from dvc.api import DVCFileSystem

    try:
        return DVCFileSystem(url=repo, rev=rev)
    except Exception as e:  # DVC raises many types (SCMError, RevError, NotDvcRepoError, …) for a bad repo/rev
        raise TriggerError(
            f"cannot open dataset repo {repo!r} at rev {rev!r}: {e}; check --dataset-repo and --dataset-rev "
            "(or the champion's dataset.repo / dataset.commit tags)"
        ) from e


def read_at(fs: Any, path: str) -> bytes | None:
    try:
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


# The dataset repository goes from a tag (anyone who may write MLflow tags writes it) into the retrain Workflow's
# manifest, quoted in YAML, then into fetch-dataset's command line and git: an https URL (no credentials in it) or an
# absolute local path (the embedded run), of characters that neither YAML, Argo's `{{…}}`, a shell nor git's option
# parser reads specially. Plain http, ssh, git:// and file:// are refused: the git credentials would go in clear or to
# a place the tag chose.
_REPO_URL = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%+@-]+)*/?")
_REPO_PATH = re.compile(r"/[A-Za-z0-9._~+@/-]*")
REPO_RULE = (
    "an https:// URL (host, optional port, a path of letters, digits and . _ ~ % + @ -; no user or password) or an "
    "absolute local path of the same characters"
)


def check_repo(repo: str, source: str) -> str:
    """`repo` if it is a dataset repository this check may pass on to the retrain; else a TriggerError naming
    `source` (where the value came from) and what is allowed."""
    if _REPO_URL.fullmatch(repo) or (_REPO_PATH.fullmatch(repo) and ".." not in repo.split("/")):
        return repo
    raise TriggerError(
        f"{source} is {repo!r}, which is not a dataset repository this check passes on to a retrain; allowed: "
        f"{REPO_RULE}. Fix it at its source (the tag, or the cron's dataset-repo parameter)"
    )


def evaluate_triggers(cfg: TriggersConfig, client: Any, champion: Any) -> tuple[list[Check], str, str]:
    """All enabled triggers for `champion`; returns the checks, the dataset repo and the commit of --dataset-rev."""
    tags = dict(champion.tags)
    version = str(champion.version)
    checks: list[Check] = []
    repo = cfg.dataset_repo or tags.get("dataset.repo", "")
    if not repo:
        raise TriggerError(f"champion {version} has no dataset.repo tag: pass --dataset-repo")
    repo = check_repo(repo, "--dataset-repo" if cfg.dataset_repo else f"champion {version}'s dataset.repo tag")
    new_fs = _dvc_fs(repo, cfg.dataset_rev)
    new_commit = new_fs.repo.scm.resolve_rev(cfg.dataset_rev)

    if cfg.online_metric:
        try:
            eval_baseline: float | None = float(tags["eval.rougeL"])
        except (KeyError, ValueError):
            eval_baseline = None
        values = online_series(client, champion, cfg.online_metric)
        checks.append(check_quality(values, cfg, eval_baseline, tags.get(FIRED_TAG + "quality"), version))

    if cfg.min_feedback_rows:
        since = tags.get(FIRED_TAG + "feedback") or tags.get("dataset.commit", "")
        if not since:
            raise TriggerError(
                f"champion {version} has no dataset.commit tag: cannot tell new feedback from old; "
                "set --min-feedback-rows 0 to turn the feedback trigger off"
            )
        new = read_at(new_fs, cfg.feedback_file)
        old = new if since == new_commit else read_at(_dvc_fs(repo, since), cfg.feedback_file)
        checks.append(check_feedback(old, new, since, cfg, new_commit))

    if cfg.base_revision:
        checks.append(check_base_model(tags, cfg, tags.get(FIRED_TAG + "base-model")))
    return checks, repo, new_commit


@timed
def run(cfg: TriggersConfig) -> TriggersResult:
    refuse(config_problems(cfg), "check-triggers", TriggerError)
    try:
        uri = tracking_uri(cfg.tracking_uri)
    except ValueError as e:
        raise TriggerError(str(e)) from e
    if not uri:
        raise TriggerError(MISSING_TRACKING_URI)
    from mlflow import MlflowClient

    with environment(cfg.http_env()):
        # A local call without --run-id is a run of its own: never the retry of an earlier one.
        run_id = cfg.run_id or uuid.uuid4().hex
        try:
            result = _check(dataclasses.replace(cfg, run_id=run_id), MlflowClient(tracking_uri=uri))
        except Exception as e:
            if not is_transient(e):
                raise
            raise TriggerError(
                f"MLflow at {uri} is unreachable ({str(e).splitlines()[0][:300]}): check that the tracking server "
                "is up and --tracking-uri is right; nothing was decided or recorded"
            ) from e
    with atomic_dir(cfg.out) as out:
        write_result(out, result)
    return result


def _annotation_safe(text: str) -> str:
    """One line without quotes or backslashes: Argo pastes it into a quoted YAML scalar of the retrain's manifest."""
    for bad in ("\\", '"', "'"):
        text = text.replace(bad, "`")
    return " ".join(text.split())


def _check(cfg: TriggersConfig, client: Any) -> TriggersResult:
    champion = registry.champion_version(client, cfg.model_name)
    if champion is None:
        return TriggersResult(
            fire=False,
            triggers="none",
            summary="",
            reasons=[
                f"no '{CHAMPION}' version of {cfg.model_name} yet: nothing to compare with; train the first model "
                "by submitting the distill template by hand, then promote it"
            ],
            dataset_repo="",
            dataset_rev="",
            champion_version="",
            run_id=cfg.run_id,
        )
    recorded = champion.tags.get(DECISION_TAG + cfg.run_id)
    if recorded is not None:
        return _repeat(cfg, client, champion, recorded)
    checks, repo, commit = evaluate_triggers(cfg, client, champion)
    fired = [c for c in checks if c.fired]
    result = TriggersResult(
        fire=bool(fired),
        triggers=".".join(c.trigger for c in fired) or "none",
        summary=_annotation_safe("; ".join(c.reason for c in fired)),
        reasons=[c.reason for c in checks] or ["every trigger is turned off"],
        dataset_repo=repo,
        dataset_rev=commit,
        champion_version=str(champion.version),
        run_id=cfg.run_id,
    )
    if fired and cfg.record:
        # Recorded before the retrain is created: a failure here fails the check, and nothing is created.
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        after: dict[str, str] = {}
        for c in fired:
            after[FIRED_TAG + c.trigger] = c.key
            after[f"{FIRED_TAG}{c.trigger}.reason"] = f"{stamp} {c.reason}"
        # The decision first, in one write: from here on every attempt of this run repeats it (see _repeat).
        decision = {
            "result": dataclasses.asdict(result),
            "tags": {k: [champion.tags.get(k), v] for k, v in after.items()},
        }
        _tag(client, cfg, champion, DECISION_TAG + cfg.run_id, json.dumps(decision, sort_keys=True))
        for key, value in after.items():
            _tag(client, cfg, champion, key, value)
    return result


def _tag(client: Any, cfg: TriggersConfig, champion: Any, key: str, value: str) -> None:
    registry.upsert(client.set_model_version_tag, cfg.model_name, champion.version, key, value)


def _repeat(cfg: TriggersConfig, client: Any, champion: Any, recorded: str) -> TriggersResult:
    """The decision an earlier attempt of this run recorded; writes the debounce tags that attempt did not get to."""
    name = DECISION_TAG + cfg.run_id
    try:
        decision = json.loads(recorded)
        result = TriggersResult(**decision["result"])
        tags = {key: (before, after) for key, (before, after) in decision["tags"].items()}
    except (ValueError, TypeError, KeyError) as e:
        raise TriggerError(
            f"champion {champion.version}'s {name} tag is not a decision this step wrote ({e}): delete the tag to "
            "let this run decide afresh"
        ) from e
    print(
        f"check-triggers: run {cfg.run_id} already decided on champion {champion.version}: repeating it",
        file=sys.stderr,
    )
    if cfg.record:
        for key, (before, after) in tags.items():
            # Still the value from before the decision: that attempt died before this write. Anything else is
            # either this write done, or a later run's decision: leave it.
            if champion.tags.get(key) == before:
                _tag(client, cfg, champion, key, after)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(TriggersConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except TriggerError as e:
        print(f"check-triggers: {e}", file=sys.stderr)
        return 1
    print(f"retrain: {'YES (' + result.triggers + ')' if result.fire else 'no'}")
    for reason in result.reasons:
        print(f"  - {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
