"""Build and publish a dataset from your own documents, on this machine, without editing any generated file:

    scripts/build_dataset.sh ~/papers                         # one folder (PDF, text, Markdown, HTML; searched deeply)
    scripts/build_dataset.sh ~/papers ~/notes -S feedback=my-feedback.jsonl -S min-eval-documents=2
    python scripts/build_dataset.py --help

It runs build-dataset's stages (ingest, feedback, teacher, filter-split, publish) in order, each with the command line
`steps.pipeline.command` gives it: the same definition `build-dataset/dvc.yaml` and the Argo WorkflowTemplate are
rendered from. Values are the local ones of `build-dataset/params.yaml`, except `documents` (the folders given) and
`feedback` (none unless `-S feedback=FILE`: the committed feedback is about the sample documents) and what `-S
name=value` sets. Nothing tracked changes: `params.yaml`, `dvc.yaml` and the lock files stay as they are; the stages
write under `--out` (out/), publish commits to the dataset repository (`dataset-repo`, .cache/dataset-repo) and
prints how to train on the revision. What the build will do is printed before it starts (the documents found, the
teacher, how the eval split is chosen and the smallest build it accepts), and a build the stages would refuse for
reasons known already (no reviewed summary to be an eval reference, a malformed or over-long reviewed summary, too
few documents, a bad split setting, a base-model folder that is not there) is refused then, before ingest and the
teacher run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

from steps.core.base_model import folder_problem
from steps.core.cli import name_value
from steps.core.dataset import PROSE_CHARS_PER_TOKEN, summary_token_budget
from steps.core.io import is_uri
from steps.feedback import FeedbackError, is_outcomes, merge, read_rows, too_long
from steps.filter_split import references_problem, settings_problems
from steps.ingest import KINDS
from steps.pipeline import BUILD_DATASET, LOCAL_OUT, command

# Locally, the committed feedback file describes the sample documents in data/documents: a build from your own
# folders starts without it.
OWN_DOCUMENTS_FEEDBACK = ""
# The parameters that name a local path, and what must be there: a relative one given with -S is taken from where the
# command runs, like the folders (the defaults in build-dataset/params.yaml are the repository's own files). `file`
# and `folder` must exist; `new` may be created by the build (publish makes the dataset repository and the remote);
# `folder-or-id` is a folder when one is there, else a model hub id.
PATH_PARAMS = {
    "feedback": "file",
    "teachers-file": "file",
    "adversarial-file": "file",
    "base-model": "folder-or-id",
    "dataset-repo": "new",
    "dvc-remote": "new",
}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/build_dataset.sh",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("documents", nargs="+", help="folders (or s3:// prefixes) holding the documents")
    parser.add_argument(
        "-S",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a build-dataset parameter (build-dataset/params.yaml's names), as `dvc exp run -S` takes it",
    )
    parser.add_argument("--out", default=LOCAL_OUT, help="folder for the stages' outputs (out/<output>)")
    parser.add_argument(
        "--cwd",
        type=Path,
        default=Path.cwd(),
        help="where relative folders and -S paths are taken from (build_dataset.sh passes where it was run)",
    )
    return parser


def _local(value: str) -> bool:
    return bool(value) and not is_uri(value) and not value.startswith("git@")


def _path_problem(name: str, value: str, cwd: Path) -> tuple[str, str | None]:
    """(the value, relative paths taken from `cwd`; what is wrong with it or None) for a -S path setting."""
    kind = PATH_PARAMS.get(name)
    if kind is None or not _local(value):
        return value, None
    path = Path(value).expanduser()
    path = path if path.is_absolute() else cwd / path
    where = f"(a relative path is taken from where the command runs, {cwd})"
    if kind == "file" and not path.is_file():
        return str(path), f"-S {name}={value}: no such file {path} {where}; give the file's path"
    if kind == "folder-or-id":
        problem = folder_problem(value, cwd)
        if problem:
            return value, f"-S {name}={value}: {problem} {where}"
        return (str(path), None) if path.is_dir() else (value, None)
    return str(path), None


def values(documents: list[str], settings: list[str], cwd: Path | None = None) -> dict[str, str]:
    """Every build-dataset parameter's value for this build, local paths given with -S and the folders taken from
    `cwd` (where the command runs); SystemExit naming each bad setting, missing file and missing folder."""
    cwd = (cwd or Path.cwd()).resolve()
    found = {p.name: p.local for p in BUILD_DATASET.params} | {"feedback": OWN_DOCUMENTS_FEEDBACK}
    problems = []
    for setting in settings:
        name, value = name_value(setting) or ("", "")
        if name not in found:
            known = ", ".join(p.name for p in BUILD_DATASET.params if p.name != "documents")
            problems.append(f"-S {setting}: use NAME=VALUE with NAME one of {known}")
        elif name == "documents":
            problems.append("-S documents=…: give the folders as arguments instead")
        else:
            found[name], problem = _path_problem(name, value, cwd)
            problems += [problem] if problem else []
    folders = []
    for location in documents:
        folder = location if is_uri(location) else str(cwd / Path(location).expanduser())
        folders.append(folder)
        if "," in location:
            problems.append(f"{location}: a comma in a folder name is not supported (commas separate folders)")
        elif not is_uri(location) and not Path(folder).is_dir():
            problems.append(f"{location}: not a folder ({folder})")
    if problems:
        sys.exit("build-dataset: " + "\n  ".join(["nothing was run:", *problems]))
    return found | {"documents": ",".join(folders)}


def preamble(documents: list[str], found: dict[str, str]) -> list[str]:
    """What the build is about to do, said before it does it."""
    kinds: Counter[str] = Counter()
    files = 0
    for location in documents:
        if is_uri(location):
            continue
        for path in Path(location).rglob("*"):
            if path.is_file():
                files += 1
                kinds[KINDS.get(path.suffix.lower(), "other (skipped)")] += 1
    counted = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    minimum = int(found["min-eval-documents"])
    who = {"curated": "a reviewed one, from feedback", "curated-or-teacher": "a reviewed one or the teacher's"}.get(
        found["eval-references"], found["eval-references"]
    )
    return [
        f"build-dataset: {', '.join(documents)}: {files} file(s) ({counted or 'none'})",
        f"  feedback: {found['feedback'] or 'none (-S feedback=FILE adds reviewed summaries)'}; a reviewed summary "
        f"may take {summary_token_budget()} tokens as the dataset estimates them ({PROSE_CHARS_PER_TOKEN} characters "
        f"of prose each: about {summary_token_budget() * PROSE_CHARS_PER_TOKEN} characters), a longer one is refused",
        f"  teacher: {found['teacher']} ({found['teachers-file']}), "
        f"at {found['teacher-url'] or 'its GGUF, served on 127.0.0.1'}",
        f"  eval split: documents held out by a hash of each at eval-share {found['eval-share']}, and at least "
        f"{minimum} (min-eval-documents) with a summary that may be an eval reference: {who} "
        f"(eval-references={found['eval-references']}); a build needs {minimum + 1} or more usable documents",
        f"  publishes to {found['dataset-repo']} (DVC remote {found['dvc-remote'] or 'that of the repository'})",
    ]


def refusals(found: dict[str, str]) -> list[str]:
    """What the stages would refuse, known before any of them runs (by their own rules: filter-split's settings and
    eval-reference minimum, the feedback's rows and length cap, the fewest documents), so that a build bound to be
    refused is refused before ingest and the teacher spend minutes on it."""
    problems = []
    try:
        share, minimum = float(found["eval-share"]), int(found["min-eval-documents"])
    except ValueError as e:
        return [f"-S eval-share / min-eval-documents: {e}; use a share (0.2) and a whole number (1)"]
    problems += settings_problems(share, found["eval-references"], minimum)
    if problem := folder_problem(found["base-model"]):  # ingest sizes the chunks by its tokenizer
        problems.append(f"base-model {found['base-model']}: {problem}")
    reviewed: int | None = 0  # reviewed summaries the feedback holds; None: not known before the build (s3://)
    if (name := found["feedback"]) and is_uri(name):
        reviewed = None
    elif name:
        blob = Path(name).read_bytes()
        try:
            curated = merge(read_rows(blob, name))[0] if blob.strip() else []
        except FeedbackError as e:
            return [*problems, f"-S feedback={name}: {e}"]
        problems += too_long(curated, name) if not is_outcomes(blob) else []
        reviewed = len(curated)
    if reviewed is not None and found["eval-references"] == "curated":
        problems += [p for p in [references_problem(reviewed, minimum, "curated")] if p]
    documents = [loc for loc in found["documents"].split(",") if not is_uri(loc)]
    if len(documents) == len(found["documents"].split(",")):  # all local: the files are counted
        usable = sum(1 for loc in documents for f in Path(loc).rglob("*") if f.is_file() and f.suffix.lower() in KINDS)
        if usable < minimum + 1:
            problems.append(
                f"{usable} file(s) of a kind ingest reads ({', '.join(sorted(KINDS))}), but a build needs "
                f"{minimum + 1} or more usable documents (min-eval-documents {minimum} held out, one to train on): "
                "add documents"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    found = values(args.documents, args.settings, args.cwd)
    print("\n".join(preamble(found["documents"].split(","), found)), flush=True)
    if problems := refusals(found):
        print("build-dataset: refused before any stage ran (nothing was run, nothing published):\n  "
              + "\n  ".join(problems), file=sys.stderr)  # fmt: skip
        return 1
    for stage in BUILD_DATASET.stages:
        cmd = command(stage, folder=lambda name: f"{args.out}/{name}", value=found.__getitem__)
        print(f"\n$ {' '.join(cmd)}", flush=True)
        done = subprocess.run([sys.executable, *cmd[1:]], check=False)
        if done.returncode:
            print(f"build-dataset: the {stage.name} stage failed (exit {done.returncode}; its message is above); "
                  "nothing was published", file=sys.stderr)  # fmt: skip
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
