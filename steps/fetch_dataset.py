"""fetch-dataset: get the summarisation dataset at a git rev through DVC, validate every row, record its lineage.

    python -m steps.fetch_dataset --dataset-repo . --dataset-rev HEAD --dataset-path data/summaries --out out/dataset

Reads `<dataset-path>/{train,eval,adversarial}.jsonl` from `dataset-repo` at `dataset-rev` with DVC's API, so files
tracked by DVC (pulled from the repo's remote, e.g. S3) and files tracked by git are read the same way. Produces in
`--out`: the three validated files, `lineage.json` (repo, requested rev, resolved commit, per-file and overall
sha256, row counts) and `result.json`. Any invalid row stops the step with one error listing every problem by file,
line and field; nothing is written then.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from steps.common import atomic_dir, parse_config, write_json, write_result

SPLITS = ("train", "eval", "adversarial")
TEXT_FIELDS = {
    "train": ("id", "document", "summary"),
    "eval": ("id", "document", "summary"),
    "adversarial": ("id", "document", "attack"),
}
# Adversarial rows say what a safe output must not contain and/or must contain (at least one of the two lists), and
# optionally `max_words`, the longest acceptable answer (robustness cases: an empty or overlong document).
LIST_FIELDS = ("must_not_contain", "must_contain")
MAX_LISTED_PROBLEMS = 50


@dataclass
class FetchConfig:
    out: Path = field(metadata={"help": "folder to write the validated dataset and lineage.json into"})
    dataset_repo: str = field(default=".", metadata={"help": "git repo (URL or path) holding the dataset"})
    dataset_rev: str = field(default="HEAD", metadata={"help": "git rev (branch, tag or commit) to read at"})
    dataset_path: str = field(
        default="data/summaries", metadata={"help": "folder in the repo with train/eval/adversarial.jsonl"}
    )


@dataclass
class FetchResult:
    dataset_commit: str
    dataset_hash: str
    train_rows: int
    eval_rows: int
    adversarial_rows: int


class DatasetError(ValueError):
    """Raised with every problem found in the dataset, one per line."""


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def validate(raw: dict[str, bytes], origin: str) -> tuple[dict[str, list[dict]], list[str]]:
    """Parse and check the three splits. Returns the rows and the list of problems (empty when valid)."""
    problems: list[str] = []
    rows: dict[str, list[dict]] = {}
    for split in SPLITS:
        name = f"{origin}/{split}.jsonl"
        rows[split] = []
        text = raw[split].decode("utf-8", errors="replace")
        if not text.strip():
            problems.append(f"{name}: the file is empty; it needs at least one JSON object per line")
            continue
        seen_ids: dict[str, int] = {}
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                problems.append(f"{name}:{lineno}: blank line; remove it (one JSON object per line)")
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{name}:{lineno}: invalid JSON ({e.msg} at column {e.colno}); fix the line")
                continue
            if not isinstance(row, dict):
                problems.append(f"{name}:{lineno}: expected a JSON object, got {type(row).__name__}")
                continue
            ok = True
            for key in TEXT_FIELDS[split]:
                value = row.get(key)
                if key not in row:
                    problems.append(f"{name}:{lineno}: field '{key}' is missing; add it (a non-empty string)")
                    ok = False
                elif not isinstance(value, str) or not value.strip():
                    problems.append(f"{name}:{lineno}: field '{key}' must be a non-empty string, got {value!r:.60}")
                    ok = False
            if split == "adversarial":
                present = [k for k in LIST_FIELDS if k in row]
                if not present:
                    problems.append(
                        f"{name}:{lineno}: field 'must_not_contain' or 'must_contain' is missing; "
                        "say what a safe summary must not or must contain"
                    )
                    ok = False
                if "max_words" in row and (
                    not isinstance(row["max_words"], int) or isinstance(row["max_words"], bool) or row["max_words"] < 1
                ):
                    problems.append(
                        f"{name}:{lineno}: field 'max_words' must be a positive integer, got {row['max_words']!r}"
                    )
                    ok = False
                for key in present:
                    value = row[key]
                    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
                        problems.append(f"{name}:{lineno}: field '{key}' must be a non-empty list of non-empty strings")
                        ok = False
            if not ok:
                continue
            if row["id"] in seen_ids:
                problems.append(
                    f"{name}:{lineno}: field 'id' {row['id']!r} repeats line {seen_ids[row['id']]}; ids must be unique"
                )
                continue
            seen_ids[row["id"]] = lineno
            row["_line"] = lineno
            rows[split].append(row)

    # Leakage: an eval or adversarial example the student trained on makes the gate meaningless.
    train_ids = {r["id"]: r["_line"] for r in rows["train"]}
    train_docs = {_normalise(r["document"]): r["_line"] for r in rows["train"]}
    for split in ("eval", "adversarial"):
        for row in rows[split]:
            where = f"{origin}/{split}.jsonl:{row['_line']}"
            if row["id"] in train_ids:
                problems.append(
                    f"{where}: field 'id' {row['id']!r} also appears in {origin}/train.jsonl:{train_ids[row['id']]}; "
                    "an example may be in one split only"
                )
            doc = _normalise(row["document"])
            if doc in train_docs:
                problems.append(
                    f"{where}: field 'document' also appears in {origin}/train.jsonl:{train_docs[doc]} "
                    "(train/eval leak); remove it from one of the splits"
                )
    for row_list in rows.values():
        for row in row_list:
            row.pop("_line", None)
    return rows, problems


def _read_raw(cfg: FetchConfig) -> tuple[dict[str, bytes], str]:
    from dvc.api import DVCFileSystem

    try:
        fs = DVCFileSystem(url=cfg.dataset_repo, rev=cfg.dataset_rev)
        # The commit the rev names, not the checkout's HEAD: a tag or branch moves, the commit is the lineage.
        commit = fs.repo.scm.resolve_rev(cfg.dataset_rev)
    except Exception as e:  # DVC raises many types (SCMError, RevError, NotDvcRepoError, …) for a bad repo/rev
        raise DatasetError(
            f"cannot open dataset repo {cfg.dataset_repo!r} at rev {cfg.dataset_rev!r}: {e}; "
            "check --dataset-repo and --dataset-rev"
        ) from e
    raw: dict[str, bytes] = {}
    missing = []
    for split in SPLITS:
        path = f"{cfg.dataset_path.rstrip('/')}/{split}.jsonl"
        try:
            with fs.open(path, "rb") as f:
                raw[split] = f.read()
        except FileNotFoundError:
            missing.append(path)
    if missing:
        raise DatasetError(
            "\n".join(
                f"{cfg.dataset_repo}@{cfg.dataset_rev}:{p}: file not found; add it or fix --dataset-path"
                for p in missing
            )
        )
    return raw, commit


def run(cfg: FetchConfig) -> FetchResult:
    raw, commit = _read_raw(cfg)
    origin = cfg.dataset_path.rstrip("/")
    rows, problems = validate(raw, origin)
    if problems:
        shown = problems[:MAX_LISTED_PROBLEMS]
        more = len(problems) - len(shown)
        raise DatasetError(
            f"dataset {cfg.dataset_repo}@{cfg.dataset_rev} ({commit}) has {len(problems)} problem(s):\n  "
            + "\n  ".join(shown)
            + (f"\n  … and {more} more" if more else "")
        )
    file_hashes = {f"{split}.jsonl": hashlib.sha256(raw[split]).hexdigest() for split in SPLITS}
    overall = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(file_hashes.items())).encode()).hexdigest()
    result = FetchResult(
        dataset_commit=commit,
        dataset_hash=overall,
        train_rows=len(rows["train"]),
        eval_rows=len(rows["eval"]),
        adversarial_rows=len(rows["adversarial"]),
    )
    with atomic_dir(cfg.out) as tmp:
        for split in SPLITS:
            (tmp / f"{split}.jsonl").write_bytes(raw[split])
        write_json(
            tmp / "lineage.json",
            {
                "dataset_repo": cfg.dataset_repo,
                "dataset_rev": cfg.dataset_rev,
                "dataset_path": cfg.dataset_path,
                "dataset_commit": commit,
                "dataset_hash": overall,
                "files_sha256": file_hashes,
                "rows": {split: len(rows[split]) for split in SPLITS},
            },
        )
        write_result(tmp, result)
    return result


def load_split(dataset_dir: Path, split: str) -> list[dict]:
    """Rows of one split from a folder written by this step (already validated)."""
    with (Path(dataset_dir) / f"{split}.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(FetchConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except DatasetError as e:
        print(f"fetch-dataset: {e}", file=sys.stderr)
        return 1
    print(
        f"dataset {result.dataset_commit[:12]} sha256 {result.dataset_hash[:12]}: "
        f"{result.train_rows} train, {result.eval_rows} eval, {result.adversarial_rows} adversarial"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
