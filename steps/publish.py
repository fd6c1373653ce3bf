"""publish: the built dataset as a revision of the dataset repository — DVC-tracked files pushed to its remote, a git
commit and a tag — with a data card.

    python -m steps.publish --examples out/examples --chunks out/chunks --curated out/curated \
        --summaries out/summaries --dataset-repo https://github.com/you/summaries-data.git --out out/published

The splits are checked first with the validator fetch-dataset runs (`dataset.validate`): what is published is what
`distill` accepts. Then, in the dataset repository (`--dataset-repo`: a local checkout, or a git URL that is cloned
and pushed back; credentials are git's own, e.g. a credential helper or an SSH key), under `--dataset-path`:
`train/eval/adversarial.jsonl` and `feedback.jsonl` (the serving side's rows the build read: the retrain trigger
counts new rows in it) are `dvc add`-ed and pushed to the repository's DVC remote (`--dvc-remote` sets one when the
repository has none), `card.json` and `card.md` are written, everything is committed and tagged
`dataset-<first 12 of the dataset hash>` (fetch-dataset's hash). The tag is the `dataset-rev` to train on. Publishing
content whose tag exists already changes nothing in the repository and returns that tag and its commit.

The data card: examples per split and per kind of source, who wrote the summaries (teacher or reviewer) and so where
each split's references came from (`references`: with the eval-references rule filter-split held eval to), the teacher
with its terms decision, the filters and how many each dropped, the files skipped at ingest with why, feedback rows
(and how many are new since the previous revision: `steps.core.card.feedback_rows`, the retrain trigger's own
count), and length statistics. It is committed with the revision, so fetch-dataset brings it back and register logs it
with every
model version trained on the revision and tags the version with it (`steps.core.card.card_tags`).

Produces in `--out`: `card.json`, `card.md`, `result.json` (`dataset-rev`, `dataset-commit`, `dataset-hash`).
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from steps.core.card import FEEDBACK_FILE, feedback_rows, train_fit_line
from steps.core.cli import parse_config, timed, write_result
from steps.core.dataset import SPLITS, DatasetError, content_hash, validate
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, is_uri, read_json, read_jsonl, write_json

TAG_PREFIX = "dataset-"
AUTHOR = ("distillery build-dataset", "build-dataset@distillery.invalid")


class PublishError(RuntimeError):
    """git or DVC refused; the message names the command and what it said."""


@dataclass
class PublishConfig:
    out: Path = field(metadata={"help": "folder to write the card and result into"})
    examples: Path = field(metadata={"help": "filter-split's folder (the splits)"})
    chunks: Path = field(metadata={"help": "ingest's folder (for the card)"})
    curated: Path = field(metadata={"help": "feedback's folder (feedback.jsonl, for the card)"})
    summaries: Path = field(metadata={"help": "teacher's folder (the terms decision, for the card)"})
    dataset_repo: str = field(
        default=".cache/dataset-repo",
        metadata={"help": "dataset git repository: a local checkout (created when missing) or a URL to clone and push"},
    )
    dataset_path: str = field(default=SHARED.dataset_path, metadata={"help": "folder in the repo for the dataset"})
    dvc_remote: str = field(
        default="", metadata={"help": "DVC remote URL to set as the repo's default when it has none"}
    )


@dataclass
class PublishResult:
    dataset_rev: str
    dataset_commit: str
    dataset_hash: str
    committed: bool


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise PublishError(f"`{' '.join(argv)}` in {cwd} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done.stdout.strip()


def _git(cwd: Path, *args: str) -> str:
    name, email = AUTHOR
    return _run(["git", "-c", f"user.name={name}", "-c", f"user.email={email}", *args], cwd)


@contextlib.contextmanager
def _checkout(cfg: PublishConfig) -> Iterator[Path]:
    """The repository to publish into: the local checkout (initialised with git and DVC when missing), or a clone of
    the URL, removed afterwards."""
    if not is_uri(cfg.dataset_repo) and not cfg.dataset_repo.startswith("git@"):
        repo = Path(cfg.dataset_repo)
        if not (repo / ".git").exists():
            repo.mkdir(parents=True, exist_ok=True)
            _git(repo, "init", "-q", "-b", "main")
        if not (repo / ".dvc").exists():
            _run([sys.executable, "-m", "dvc", "init", "-q"], repo)
        yield repo
        return
    tmp = Path(tempfile.mkdtemp(prefix="dataset-repo-"))
    try:
        _git(tmp, "clone", "-q", cfg.dataset_repo, "repo")
        yield tmp / "repo"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _old_feedback(repo: Path, path: str) -> bytes | None:
    """The published feedback at the repository's HEAD (through DVC), or None (no commit, no file)."""
    try:
        _git(repo, "rev-parse", "--verify", "-q", "HEAD")
    except PublishError:
        return None
    from dvc.api import DVCFileSystem

    try:
        with DVCFileSystem(url=str(repo), rev="HEAD").open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "mean": round(statistics.mean(values), 1),
    }


def card(cfg: PublishConfig, rows: dict[str, list[dict]], new_feedback: int | None) -> dict:
    """What the dataset holds, where it came from and what was left out."""
    documents = {d["document_sha256"]: d for d in read_jsonl(cfg.chunks / "documents.jsonl")}
    teacher = read_json(cfg.summaries / "teacher.json")
    per_split = {}
    for split in ("train", "eval"):
        kinds = Counter(documents.get(r["lineage"]["document_sha256"], {}).get("kind", "feedback") for r in rows[split])
        per_split[split] = {
            "rows": len(rows[split]),
            "by_kind": dict(sorted(kinds.items())),
            "summary_by": dict(Counter(r["lineage"]["summary_by"] for r in rows[split])),
            "document_words": _stats([len(r["document"].split()) for r in rows[split]]),
            "summary_words": _stats([len(r["summary"].split()) for r in rows[split]]),
        }
    per_split["adversarial"] = {"rows": len(rows["adversarial"])}
    feedback_blob = (cfg.curated / FEEDBACK_FILE).read_bytes()
    filters = read_json(cfg.examples / "filters.json")
    # What the teacher's summaries came to on this build: written, dropped by each filter, passed (a rate by build).
    written = len(read_jsonl(cfg.summaries / "summaries.jsonl"))
    by_filter = Counter(
        d["reason"]
        for d in read_jsonl(cfg.examples / "dropped.jsonl")
        if d["reason"] in filters["filters"] and d["source"]["summary_by"] == "teacher"
    )
    return {
        "splits": per_split,
        "references": references(per_split, filters),
        "teacher": {
            k: teacher.get(k) for k in ("name", "provider", "model", "revision", "terms_url", "licence", "caveat")
        }
        | {
            "on_this_build": {
                "summaries": written,
                "dropped_by_filters": dict(sorted(by_filter.items())),
                "passed_filters": written - sum(by_filter.values()),
            },
            "outputs_may_train_models": teacher["outputs_may_train_models"],
            "terms_reviewed_by": teacher["reviewed_by"],
            "terms_reviewed_on": str(teacher["reviewed_on"]),
            "decision": teacher["decision"],
        },
        "filters": filters,
        "skipped_files": read_json(cfg.chunks / "skipped.json"),
        "feedback": {"rows": len(feedback_rows(feedback_blob)), "new_since_previous_revision": new_feedback},
        "ingest": read_json(cfg.chunks / "result.json"),
    }


# Who wrote each split's summaries, in the card's words: the lineage's `summary_by`.
WRITERS = {"feedback": "reviewers (curated feedback)", "teacher": "the teacher"}


def references(per_split: dict, filters: dict) -> dict:
    """Where each split's reference summaries came from, and the rule the eval split was held to."""
    setting = filters.get("eval_references", "curated-or-teacher")  # builds before the setting: teacher allowed
    rule = {
        "curated": "reviewed summaries only: the teacher's are never eval references",
        "curated-or-teacher": "reviewed summaries and the teacher's: eval scores measure agreement with the teacher "
        "where it wrote the reference",
    }[setting]
    return {
        "eval_references": setting,
        "rule": rule,
        "by_split": {split: per_split[split]["summary_by"] for split in ("train", "eval")},
        "teacher_eval_references_left_out": filters.get("teacher_eval_references_left_out", 0),
    }


def teacher_caveat(teacher: dict) -> str | None:
    """What the teachers file says anyone building with this teacher must know (its `caveat`), with what its summaries
    came to on this build; None for a teacher without one."""
    if not teacher.get("caveat"):
        return None
    build = teacher["on_this_build"]
    dropped = ", ".join(f"{reason} {n}" for reason, n in build["dropped_by_filters"].items()) or "none"
    return (
        f"{teacher['name']} is {teacher['caveat']}. On this build it wrote {build['summaries']} summaries: the filters "
        f"dropped {build['summaries'] - build['passed_filters']} ({dropped}) and passed {build['passed_filters']}, "
        "which the filters cannot call right: read a few before training on them"
    )


def card_markdown(data: dict, rev: str) -> str:
    t = data["teacher"]
    lines = [
        f"# Dataset {rev}",
        "",
        "| split | rows | by kind | summary by | summary words (median) |",
        "|---|---|---|---|---|",
    ]
    for split, s in data["splits"].items():
        median = s.get("summary_words", {}).get("median", "")
        lines.append(f"| {split} | {s['rows']} | {s.get('by_kind', '')} | {s.get('summary_by', '')} | {median} |")
    refs = data["references"]
    lines += ["", f"**References** (eval-references={refs['eval_references']}: {refs['rule']}):"]
    for split, by in refs["by_split"].items():
        written = ", ".join(f"{n} by {WRITERS.get(who, who)}" for who, n in sorted(by.items())) or "none"
        lines.append(f"- {split}: {written}")
    if refs["teacher_eval_references_left_out"]:
        lines.append(f"- held out but left out of both splits (the teacher's summary, no reviewed one): "
                     f"{refs['teacher_eval_references_left_out']}")  # fmt: skip
    lines += [
        "",
        f"**Teacher**: {t['name']} ({t['model']}, {t['revision']}) by {t['provider']}: outputs may train other models "
        f"= {t['outputs_may_train_models']} per {t['terms_url']}, reviewed by {t['terms_reviewed_by']} on "
        f"{t['terms_reviewed_on']}.",
        *(["", f"**Teacher caveat**: {caveat}."] if (caveat := teacher_caveat(t)) else []),
        "",
        f"**Filters** (dropped): {data['filters']['filters']}; de-duplication: {data['filters']['deduplication']}; "
        f"teacher answers trimmed to complete sentences: {data['filters']['trimmed']}.",
        "",
        f"**Feedback**: {data['feedback']['rows']} rows, {data['feedback']['new_since_previous_revision']} new.",
        "",
        *([f"**Training length**: {line}.", ""] if (line := train_fit_line(data["filters"]["train_fit"])) else []),
        f"**Skipped files**: {len(data['skipped_files'])}",
        *(f"- {s['source_uri']}: {s['reason']}" for s in data["skipped_files"]),
    ]
    return "\n".join(lines) + "\n"


@timed
def run(cfg: PublishConfig) -> PublishResult:
    raw = {split: (cfg.examples / f"{split}.jsonl").read_bytes() for split in SPLITS}
    parsed, problems = validate(raw, cfg.dataset_path.rstrip("/"))
    if problems:
        raise DatasetError("the built dataset does not pass fetch-dataset's validation:\n  " + "\n  ".join(problems))
    _, dataset_hash = content_hash(raw)
    rev = f"{TAG_PREFIX}{dataset_hash[:12]}"
    with _checkout(cfg) as repo:
        from dvc.repo import Repo

        if cfg.dvc_remote and not _run([sys.executable, "-m", "dvc", "remote", "list"], repo):
            remote = cfg.dvc_remote if is_uri(cfg.dvc_remote) else str(Path(cfg.dvc_remote).resolve())
            _run([sys.executable, "-m", "dvc", "remote", "add", "-d", "storage", remote], repo)
            # Rehash what is pulled: an object overwritten in the store is refused, not checked out (dvc pull exits 1).
            _run([sys.executable, "-m", "dvc", "remote", "modify", "storage", "verify", "true"], repo)
        folder = repo / cfg.dataset_path
        old = _old_feedback(repo, f"{cfg.dataset_path.rstrip('/')}/{FEEDBACK_FILE}")
        new_blob = (cfg.curated / FEEDBACK_FILE).read_bytes()
        new_feedback = len(feedback_rows(new_blob) - feedback_rows(old))
        data = card(cfg, parsed, new_feedback)
        if _git(repo, "tag", "--list", rev):  # this content is published already: nothing to commit or push
            commit, committed = _git(repo, "rev-list", "-n", "1", rev), False
        else:
            folder.mkdir(parents=True, exist_ok=True)
            files = [f"{split}.jsonl" for split in SPLITS] + [FEEDBACK_FILE]
            for split in SPLITS:
                (folder / f"{split}.jsonl").write_bytes(raw[split])
            (folder / FEEDBACK_FILE).write_bytes(new_blob)
            write_json(folder / "card.json", data)
            (folder / "card.md").write_text(card_markdown(data, rev))
            for name in files:  # files git tracked directly move under DVC
                if _git(repo, "ls-files", f"{cfg.dataset_path}/{name}"):
                    _git(repo, "rm", "-q", "--cached", f"{cfg.dataset_path}/{name}")
            dvc = Repo(str(repo))
            dvc.scm_context.quiet = True  # its "git add …" and autostage hints: this step commits what it added
            try:
                dvc.add([str(folder / name) for name in files])
                dvc.push()
            except Exception as e:  # DVC raises many types; the remote's message is what matters
                raise PublishError(f"dvc add/push in {repo}: {e}") from e
            finally:
                dvc.close()
            _git(
                repo, "add", "-A", "--", cfg.dataset_path, ".dvc", *[n for n in (".dvcignore",) if (repo / n).exists()]
            )
            committed = bool(_git(repo, "status", "--porcelain", "--untracked-files=no"))
            if committed:
                _git(repo, "commit", "-q", "-m", f"dataset {rev}: {data['splits']['train']['rows']} train, "
                     f"{data['splits']['eval']['rows']} eval (build-dataset)")  # fmt: skip
            commit = _git(repo, "rev-parse", "HEAD")
            _git(repo, "tag", "-a", rev, "-m", f"build-dataset {rev}")
            if is_uri(cfg.dataset_repo) or cfg.dataset_repo.startswith("git@"):
                _git(repo, "push", "-q", "origin", "HEAD", rev)
    result = PublishResult(dataset_rev=rev, dataset_commit=commit, dataset_hash=dataset_hash, committed=committed)
    with atomic_dir(cfg.out) as tmp:
        write_json(tmp / "card.json", data)
        (tmp / "card.md").write_text(card_markdown(data, rev))
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(PublishConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (DatasetError, PublishError) as e:
        print(f"publish: {e}", file=sys.stderr)
        return 1
    print("\n".join(train_on_it(cfg, result)))
    if caveat := teacher_caveat(read_json(cfg.out / "card.json")["teacher"]):
        print(f"  teacher:     {caveat}")
    if line := train_fit_line(read_json(cfg.examples / "filters.json")["train_fit"]):
        print(f"  note:        {line}")
    return 0


def train_on_it(cfg: PublishConfig, result: PublishResult) -> list[str]:
    """What publish prints: the revision, and how to train on it here (DVC's -S) and on the cluster (Argo's -p)."""
    repo, rev = cfg.dataset_repo, result.dataset_rev
    remote = repo if is_uri(repo) or repo.startswith("git@") else "<the repository's git URL>"
    state = "published" if result.committed else "already published as"
    return [
        f"{state} {rev} (commit {result.dataset_commit[:12]}) in {repo}; train on it",
        f"  here:        scripts/run_local.sh -S dataset-repo={repo} -S dataset-rev={rev}",
        "               (dvc exp run writes the values into params.yaml and dvc.lock: "
        "`git checkout params.yaml dvc.lock` puts them back)",
        f"  on Argo:     argo submit -n distillery --from workflowtemplate/distill -p dataset-repo={remote} "
        f"-p dataset-rev={rev}",
    ]


if __name__ == "__main__":
    sys.exit(main())
