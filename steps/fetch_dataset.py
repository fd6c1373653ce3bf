"""fetch-dataset: get the summarisation dataset at a git rev through DVC, validate every row, record its lineage.

    python -m steps.fetch_dataset --dataset-repo . --dataset-rev HEAD --dataset-path data/summaries --out out/dataset

Reads `<dataset-path>/{train,eval,adversarial}.jsonl` from `dataset-repo` at `dataset-rev` with DVC's API, so files
tracked by DVC (pulled from the repo's remote, e.g. S3) and files tracked by git are read the same way. Produces in
`--out`: the three validated files, `lineage.json` (repo, requested rev, resolved commit, per-file and overall
sha256, row counts), the data card `card.json` when the revision has one (build-dataset's publish writes it; register
logs it and tags the model version with it) and `result.json`. Any invalid row stops the step with one error listing
every problem by file,
line and field; nothing is written then.

Every DVC-tracked file read is compared with the md5 the revision records for it (DVC's index at that commit): the
store's objects are named by their md5 but an object overwritten in the remote would otherwise be read as it is.

A valid file is as steps/core/dataset.py describes, checked row by row with its parser (`dataset.parse_split`, which
`dataset.load_split` reads with in later steps). Across splits, an eval or adversarial row may not share its id or its
document, nor nearly its document (NEAR_DUPLICATE_SHARE), with a train row.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from steps.core.card import CARD_FILE
from steps.core.cli import parse_config, timed, write_result
from steps.core.dataset import SPLITS, DatasetError, content_hash, validate
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, write_json

MAX_LISTED_PROBLEMS = 50


@dataclass
class FetchConfig:
    out: Path = field(metadata={"help": "folder to write the validated dataset and lineage.json into"})
    dataset_repo: str = field(default=".", metadata={"help": "git repo (URL or path) holding the dataset"})
    dataset_rev: str = field(default="HEAD", metadata={"help": "git rev (branch, tag or commit) to read at"})
    dataset_path: str = field(
        default=SHARED.dataset_path, metadata={"help": "folder in the repo with train/eval/adversarial.jsonl"}
    )


@dataclass
class FetchResult:
    dataset_commit: str
    dataset_hash: str
    train_rows: int
    eval_rows: int
    adversarial_rows: int


def _read_raw(cfg: FetchConfig) -> tuple[dict[str, bytes], str, bytes | None]:
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
    changed = []
    for split in SPLITS:
        path = f"{cfg.dataset_path.rstrip('/')}/{split}.jsonl"
        try:
            with fs.open(path, "rb") as f:
                raw[split] = f.read()
        except FileNotFoundError:
            missing.append(path)
            continue
        recorded = (fs.info(path).get("dvc_info") or {}).get("md5")  # None: tracked by git, which hashes it itself
        actual = hashlib.md5(raw[split]).hexdigest()
        if recorded and actual != recorded:
            changed.append(f"{cfg.dataset_repo}@{cfg.dataset_rev}:{path}: read bytes have md5 {actual}, the revision "
                           f"records {recorded}: the object in the DVC store was overwritten; restore it (bucket "
                           "versioning) or publish the dataset again")  # fmt: skip
    if changed:
        raise DatasetError("\n".join(changed))
    if missing:
        raise DatasetError(
            "\n".join(
                f"{cfg.dataset_repo}@{cfg.dataset_rev}:{p}: file not found; add it or fix --dataset-path"
                for p in missing
            )
        )
    card = None
    card_path = f"{cfg.dataset_path.rstrip('/')}/{CARD_FILE}"
    try:
        with fs.open(card_path, "rb") as f:
            card = f.read()
        json.loads(card)
    except FileNotFoundError:
        pass  # a hand-written dataset has no card
    except ValueError as e:
        raise DatasetError(f"{cfg.dataset_repo}@{cfg.dataset_rev}:{card_path}: not a JSON data card ({e})") from e
    return raw, commit, card


@timed
def run(cfg: FetchConfig) -> FetchResult:
    raw, commit, card = _read_raw(cfg)
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
    file_hashes, overall = content_hash(raw)
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
        if card is not None:
            (tmp / CARD_FILE).write_bytes(card)
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
                "card": CARD_FILE if card is not None else None,
            },
        )
        write_result(tmp, result)
    return result


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
