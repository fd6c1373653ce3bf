"""fetch-dataset: get the summarisation dataset at a git rev through DVC, validate every row, record its lineage.

    python -m steps.fetch_dataset --dataset-repo . --dataset-rev HEAD --dataset-path data/summaries --out out/dataset

Reads `<dataset-path>/{train,eval,adversarial}.jsonl` from `dataset-repo` at `dataset-rev` with DVC's API, so files
tracked by DVC (pulled from the repo's remote, e.g. S3) and files tracked by git are read the same way. Produces in
`--out`: the three validated files, `lineage.json` (repo, requested rev, resolved commit, per-file and overall
sha256, row counts) and `result.json`. Any invalid row stops the step with one error listing every problem by file,
line and field; nothing is written then.

A valid file is as steps/dataset.py describes, checked row by row with its parser (`dataset.parse_split`, which
`dataset.load_split` reads with in later steps). Across splits, an eval or adversarial row may not share its id or its
document, nor nearly its document (NEAR_DUPLICATE_SHARE), with a train row.
"""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from steps.common import atomic_dir, parse_config, timed, write_json, write_result
from steps.dataset import SPLITS, DatasetError, parse_split

MAX_LISTED_PROBLEMS = 50

# --- leakage ---------------------------------------------------------------------------------------------------------
# An eval or adversarial document is a near-duplicate of a train one when at least NEAR_DUPLICATE_SHARE of the shorter
# one's SHINGLE_WORDS-word sequences (NFKC, case-folded words) also occur in the other (the overlap coefficient of
# the shingle sets). Measured on the committed train documents: a copy with 10 % of its words replaced still shares
# >= 70 %, one with a sentence dropped or an injected instruction added >= 95 %, its first half 100 %, while the
# most similar unrelated pair across the committed splits shares 7 %.
SHINGLE_WORDS = 3
NEAR_DUPLICATE_SHARE = 0.5
# Documents of fewer shingles (about a dozen words) are compared exactly only: a few shared phrases decide nothing.
MIN_SHINGLES = 8
# A shingle in more train documents than this is boilerplate (a byline, a licence line): evidence neither for nor
# against a particular pair, so it is left out of both sides. It also keeps the comparison linear: 5,000 train and
# 1,200 eval documents sharing a 30-word footer took 50 s with it in, 2-3 s without.
COMMON_SHINGLE_DOCS = 50

WORD = re.compile(r"\w+")


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


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return set(zip(*(words[i:] for i in range(SHINGLE_WORDS)), strict=False))


def near_duplicates(references: list[str], documents: list[str]) -> list[tuple[int, int, float]]:
    """(document index, reference index, share) for each document whose most similar reference shares at least
    NEAR_DUPLICATE_SHARE of the shorter one's shingles, boilerplate left out. An inverted index from shingle to
    references keeps this to the pairs that share any shingle at all."""
    referenced = [_shingles(text) for text in references]
    frequency = Counter(s for shingles in referenced for s in shingles)
    common = {s for s, n in frequency.items() if n > COMMON_SHINGLE_DOCS}
    referenced = [shingles - common for shingles in referenced]
    shingled = [_shingles(text) - common for text in documents]
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for j, shingles in enumerate(referenced):
        if len(shingles) >= MIN_SHINGLES:
            for s in shingles:
                index[s].append(j)
    found = []
    for i, shingles in enumerate(shingled):
        if len(shingles) < MIN_SHINGLES:
            continue
        shared = Counter(j for s in shingles for j in index.get(s, ()))
        best = max(((n / min(len(shingles), len(referenced[j])), j) for j, n in shared.items()), default=None)
        if best and best[0] >= NEAR_DUPLICATE_SHARE:
            found.append((i, best[1], best[0]))
    return found


def validate(raw: dict[str, bytes], origin: str) -> tuple[dict[str, list[dict]], list[str]]:
    """Parse and check the three splits. Returns the rows and the list of problems (empty when valid)."""
    problems: list[str] = []
    parsed: dict[str, list[tuple[int, dict]]] = {}
    for split in SPLITS:
        parsed[split], split_problems = parse_split(raw[split], f"{origin}/{split}.jsonl", split)
        problems += split_problems

    # Leakage: an eval or adversarial example the student trained on makes the gate meaningless.
    train = f"{origin}/train.jsonl"
    train_ids = {r["id"]: line for line, r in parsed["train"]}
    train_docs = {_normalise(r["document"]): line for line, r in parsed["train"]}
    held_out = [(split, line, row) for split in ("eval", "adversarial") for line, row in parsed[split]]
    exact = set()
    for i, (split, line, row) in enumerate(held_out):
        where = f"{origin}/{split}.jsonl:{line}"
        if row["id"] in train_ids:
            problems.append(
                f"{where}: field 'id' {row['id']!r} also appears in {train}:{train_ids[row['id']]}; "
                "an example may be in one split only"
            )
        doc = _normalise(row["document"])
        if doc in train_docs:
            exact.add(i)
            problems.append(
                f"{where}: field 'document' also appears in {train}:{train_docs[doc]} "
                "(train/eval leak); remove it from one of the splits"
            )
    near = near_duplicates([r["document"] for _, r in parsed["train"]], [r["document"] for _, _, r in held_out])
    for i, j, share in near:
        split, line, _ = held_out[i]
        if i not in exact:
            problems.append(
                f"{origin}/{split}.jsonl:{line}: field 'document' nearly repeats {train}:{parsed['train'][j][0]} "
                f"({share:.0%} of the shorter one's {SHINGLE_WORDS}-word sequences are in the other; "
                f"{NEAR_DUPLICATE_SHARE:.0%} is a leak); remove it from one of the splits or rewrite it"
            )
    return {split: [row for _, row in parsed[split]] for split in SPLITS}, problems


def content_hash(raw: dict[str, bytes]) -> tuple[dict[str, str], str]:
    """Each split file's sha256, and the dataset's: the hash lineage records (build-dataset tags by it too)."""
    file_hashes = {f"{split}.jsonl": hashlib.sha256(raw[split]).hexdigest() for split in SPLITS}
    overall = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(file_hashes.items())).encode()).hexdigest()
    return file_hashes, overall


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


@timed
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
