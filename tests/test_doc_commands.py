"""Every command in the docs runs: the code blocks of README.md and docs/ (tests/doc_blocks.py says how they are
marked), checked in the unit tier and the "run" ones run in the integration tier.

Unit tier (seconds): every fenced block names its language and every shell or Python block carries a mark that
parses; every shell block passes `bash -n` and every Python block compiles; the scripts and modules a block names
exist, the flags it gives them are in their `--help`, and the `-S` / `-p` parameters it sets are the pipeline's; the
walk that runs the "run" blocks fails on a page broken on purpose, naming the page, the line and the output's tail.

Integration tier: the walk itself. A fresh copy of the repository (the working tree's tracked and untracked,
not-ignored files, committed in a new git repository) and a new user's home (a git identity; the documents and
feedback files the pages' commands name: ~/my-documents, ~/papers, ~/notes, my-reviewed.jsonl), then each page's
"run" blocks in order, page by page (README first, then mkdocs.yml's nav), each page in a new bash. What the walk
takes as done, because the suite already did it: the set-up command (`scripts/setup.sh --dev`, run before the suite
by scripts/test.sh and CI): the copy links this checkout's `.venv`, the base model folder and llama.cpp's converter,
and `scripts/setup.sh` finds them; and the embedded run's base model: the copy's `params.yaml` points `base-model` at
the session's tiny Llama (SmolLM2's tokenizer, `tiny_model_dir`) at a quarter epoch, so `scripts/run_local.sh` takes
~1.5 minutes, not 13. The build-dataset pipeline runs as a user runs it (SmolLM2-135M's GGUF as the teacher). A
command already run, verbatim, earlier in the walk is not run again.

The walk is also the suite's run of the embedded pipeline and of the two local trials: after README's commands it
checks what they left (version 1 registered with its cost; a second `dvc repro` skips every stage; a broken eval
split, committed, is refused naming file, line and field, nothing registered; the build from ~/my-documents published
with the reviewed summaries as eval references and no tracked file edited; the promotion trial's loop, its servers
gone and the copied registry without a champion), and after docs/dataset.md's the refused build's reasons.

pytest tests/test_doc_commands.py                     # unit tier
pytest -m integration tests/test_doc_commands.py      # the walk (~5 min on 2 cores)
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from steps.pipeline import STAGES
from tests.conftest import ROOT
from tests.doc_blocks import (
    SHELL,
    Block,
    Command,
    all_blocks,
    blocks,
    inline_commands,
    pages,
    relative,
    simple_commands,
)

integration = pytest.mark.integration
if TYPE_CHECKING:
    from mlflow import MlflowClient

OUR_PACKAGES = ("steps", "workflows", "benchmarks", "scripts")
TAIL = 4000  # characters of a failed command's output the failure shows


# --- the marks ----------------------------------------------------------------------------------------------------


def test_every_code_block_names_its_language_and_every_shell_or_python_block_is_marked():
    problems = [f"{b.where}: {p}" for b in all_blocks() for p in b.problems]
    problems += [
        f"{b.where}: a {b.lang} block without a mark: put <!-- docs: run -->, <!-- docs: render-only --> or "
        "<!-- docs: cluster-only --> on the line above its fence (docs/development.md, 'Commands in the docs')"
        for b in all_blocks()
        if b.lang in SHELL | {"python", "py"} and b.kind is None
    ]
    assert not problems, "\n".join(problems)


def test_an_unmarked_block_or_a_bad_mark_is_named_with_its_file_and_line(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```bash\nls\n```\n\n<!-- docs: runn -->\n```bash\nls\n```\n\n```\nx\n```\n"
                    '<!-- docs: run except="scripts/test.sh" -->\n```bash\nls\n```\n')  # fmt: skip
    found = blocks(page)
    assert [(b.line, b.kind) for b in found] == [(3, None), (8, None), (12, None), (16, "run")]
    assert "does not parse" in found[1].problems[0]
    assert "without a language" in found[2].problems[0]
    assert found[3].problems == ['except="scripts/test.sh" names no command of the block']


def test_a_blocks_commands_join_continuations_and_keep_their_first_line_and_comment(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("<!-- docs: run -->\n```bash\n# a comment\nfoo --a 1 \\\n    --b '#2'   # why # not\n\nbar\n```\n")
    assert blocks(page)[0].commands() == [Command(4, "foo --a 1 --b '#2'", "why # not"), Command(7, "bar", "")]


# --- what the blocks name -----------------------------------------------------------------------------------------


def shell_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang in SHELL]


def test_every_shell_block_parses():
    bad = []
    for b in shell_blocks():
        done = subprocess.run(["bash", "-n"], input=b.text, capture_output=True, text=True)
        if done.returncode:
            bad.append(f"{b.where}: bash -n: {done.stderr.strip()}")
    assert not bad, "\n".join(bad)


def test_every_python_block_compiles_and_its_imports_of_the_project_resolve():

    bad = []
    for b in all_blocks():
        if b.lang not in ("python", "py"):
            continue
        try:
            tree = ast.parse(b.text, b.where)
        except SyntaxError as e:
            bad.append(f"{b.where}: {e}")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OUR_PACKAGES:
                module = importlib.import_module(node.module)
                bad += [f"{b.where}: {node.module} has no {a.name}" for a in node.names if not hasattr(module, a.name)]
    assert not bad, "\n".join(bad)


def program(argv: list[str]) -> tuple[str, list[str]] | None:
    """The project's program `argv` runs, as the argv that prints its help, with the words it was given; None for
    another program (dvc, argo, kubectl, …)."""
    if argv[0] in ("python", "python3") and len(argv) > 2 and argv[1] == "-m":
        if argv[2].split(".")[0] in OUR_PACKAGES:
            return f"-m {argv[2]}", argv[3:]
        return None
    if argv[0] in ("python", "python3") and len(argv) > 1 and argv[1].startswith("scripts/"):
        return argv[1], argv[2:]
    if argv[0].startswith("scripts/"):
        return argv[0], argv[1:]
    return None


@functools.cache
def help_text(prog: str) -> str:
    """`prog --help` as this checkout prints it."""
    if prog.endswith(".sh"):  # its Python twin's --help when it hands over to one, else its own usage comment
        twin, script = prog[:-3] + ".py", (ROOT / prog).read_text()
        return help_text(twin) if twin in script else script
    argv = [sys.executable, *prog.split(" ")] if prog.startswith("-m") else [sys.executable, prog]
    done = subprocess.run([*argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, f"{prog} --help: {done.stderr[-2000:]}"
    return done.stdout


def exists(prog: str) -> bool:
    if prog.startswith("-m "):
        module = prog[3:].replace(".", "/")
        return (ROOT / f"{module}.py").is_file() or (ROOT / module / "__main__.py").is_file()
    return (ROOT / prog).is_file() and (not prog.endswith(".sh") or os.access(ROOT / prog, os.X_OK))


@functools.cache
def pipeline_params() -> dict[str, set[str]]:
    """The parameters each command that takes `-S` / `-p` accepts, from the rendered files: params.yaml for the
    distill run, build-dataset/params.yaml for a dataset build, each Argo object's arguments by `kind/name`."""
    distill = set(yaml.safe_load((ROOT / "params.yaml").read_text()))
    build = set(yaml.safe_load((ROOT / "build-dataset/params.yaml").read_text()))
    found = {"dvc exp run": distill, "scripts/run_local.sh": distill, "scripts/build_dataset.sh": build}
    refs = {}
    for path in (ROOT / "infra/argo").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = doc["spec"].get("workflowSpec", doc["spec"])
            key = {"WorkflowTemplate": "workflowtemplate", "CronWorkflow": "cronwf"}[doc["kind"]] + "/"
            key += doc["metadata"]["name"]
            found[key] = {p["name"] for p in spec.get("arguments", {}).get("parameters", [])}
            if "workflowTemplateRef" in spec:  # a CronWorkflow that runs a template takes the template's too
                refs[key] = "workflowtemplate/" + spec["workflowTemplateRef"]["name"]
    for key, ref in refs.items():
        found[key] |= found[ref]
    return found


def setting_problems(argv: list[str]) -> list[str]:
    """The `-S name=value` / `-p name=value` that name no parameter of what `argv` runs."""
    if argv[:3] == ["dvc", "exp", "run"]:
        takes, flag = pipeline_params()["dvc exp run"], "-S"
    elif argv[0] in ("scripts/run_local.sh", "scripts/build_dataset.sh"):
        takes, flag = pipeline_params()[argv[0]], "-S"
    elif argv[:2] == ["argo", "submit"] and "--from" in argv:
        source = argv[argv.index("--from") + 1]
        if source not in pipeline_params():
            return [f"argo submit --from {source}: no such object in infra/argo/"]
        takes, flag = pipeline_params()[source], "-p"
    else:
        return []
    words = [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == flag]
    return [f"{flag} {w}: not a parameter" for w in words if w.split("=")[0] not in takes]


def flag_problems(command: str) -> list[str]:
    problems = []
    for argv in simple_commands(command):
        problems += setting_problems(argv)
        found = program(argv)
        if found is None:
            continue
        prog, words = found
        if not exists(prog):
            problems.append(f"{prog}: no such {'module' if prog.startswith('-m') else 'script (or not executable)'}")
            continue
        flags = {w.split("=")[0] for w in words if w.startswith("--")}
        text = help_text(prog)
        problems += [f"{prog}: {f} is not in its --help" for f in sorted(flags)
                     if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]  # fmt: skip
    return problems


@pytest.mark.slow  # a --help run per module the pages name: ~10 s on 2 cores
def test_the_scripts_modules_flags_and_parameters_every_shell_block_names_exist():
    commands = [(b, c) for b in shell_blocks() for c in b.commands()]
    progs = {p[0] for _, c in commands for argv in simple_commands(c.text) if (p := program(argv)) and exists(p[0])}
    with ThreadPoolExecutor(2) as pool:  # the --help runs, two at a time (2 cores)
        list(pool.map(help_text, sorted(p for p in progs if not p.endswith(".sh"))))
    bad = [f"{relative(b.page)}:{c.line}: {c.text[:80]}: {p}" for b, c in commands for p in flag_problems(c.text)]
    assert not bad, "\n".join(bad)


@pytest.mark.slow  # a --help run per module the prose names
def test_the_commands_quoted_in_the_prose_name_scripts_modules_flags_and_parameters_that_exist():
    commands = [(page, c) for page in pages() for c in inline_commands(page)]
    progs = {p[0] for _, c in commands for argv in simple_commands(c.text) if (p := program(argv)) and exists(p[0])}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(help_text, sorted(p for p in progs if not p.endswith(".sh"))))
    bad = [f"{relative(page)}:{c.line}: `{c.text[:80]}`: {p}" for page, c in commands for p in flag_problems(c.text)]
    assert not bad, "\n".join(bad)


@pytest.mark.slow  # steps.promote --help
def test_the_check_catches_a_renamed_flag_a_missing_script_and_a_wrong_parameter():
    assert flag_problems("python -m steps.promote --tracking-uri x --no-such-flag 1") == [
        "-m steps.promote: --no-such-flag is not in its --help"
    ]
    assert flag_problems("scripts/nowhere.sh --x") == ["scripts/nowhere.sh: no such script (or not executable)"]
    assert flag_problems("dvc exp run -S lora-r=8 -S lora_rank=8") == ["-S lora_rank=8: not a parameter"]
    assert flag_problems("argo submit -n d --from workflowtemplate/distill -p dataset-rev=v3 -p rev=v3") == [
        "-p rev=v3: not a parameter"
    ]


# --- the walk -----------------------------------------------------------------------------------------------------


def page_script(page_blocks: list[Block], ran: dict[str, str]) -> str:
    """A bash script that runs the page's "run" blocks' commands in order, each announced with its page and line,
    and stops at the first that fails (or, said to be refused, succeeds), naming it. `ran`: command → where it ran
    first, across pages; a command already there is announced and not run again."""
    out = ["set -u -o pipefail"]
    for b in page_blocks:
        if b.lang in ("python", "py"):  # the whole block, in the checkout's Python, as a reader with .venv active
            where = f"{relative(b.page)}:{b.line + 1}"
            out += [f"echo {shlex.quote(f'### {where} $ python (the block)')}", "SECONDS=0",
                    f".venv/bin/python - <<'__DOCS_PYTHON__'\n{b.text}__DOCS_PYTHON__", "__s=$?",
                    'echo "### took ${SECONDS} s"',
                    f'[ $__s -eq 0 ] || {{ echo "### FAILED {where}: exit $__s"; exit 97; }}']  # fmt: skip
            continue
        for c in b.commands():
            where = f"{relative(b.page)}:{c.line}"
            announce = shlex.quote(f"### {where} $ {c.text}")
            if b.is_excepted(c):
                out.append(f"echo {announce}; echo '### not run here: the mark of the block excepts it'")
                continue
            if c.text in ran:
                out.append(f"echo {announce}; echo {shlex.quote(f'### ran at {ran[c.text]} already')}")
                continue
            ran[c.text] = where
            out += [f"echo {announce}", "SECONDS=0", c.text, "__s=$?", 'echo "### took ${SECONDS} s"']
            if c.refused:
                said = shlex.quote(f"### FAILED {where}: exit 0, the page says it is refused")
                out.append(f"[ $__s -ne 0 ] || {{ echo {said}; exit 98; }}")
            else:
                out.append(f'[ $__s -eq 0 ] || {{ echo "### FAILED {where}: exit $__s"; exit 97; }}')
    return "\n".join(out) + "\n"


def walk(
    checkout: Path,
    run_pages: list[Path],
    env: dict[str, str],
    timeout: float,
    ran: dict[str, str] | None = None,
    log: dict[str, str] | None = None,
) -> list[str]:
    """Run each page's "run" blocks in `checkout`, page by page, each page in a new bash; the failures, each with its
    page, line, command and the output's tail (empty when all ran). `ran` carries the commands already run across
    calls (a walk in parts); `log` gets each page's whole output (stdout and stderr), by page."""
    ran = {} if ran is None else ran
    for page in run_pages:
        page_blocks = [b for b in blocks(page) if b.kind == "run"]
        if not page_blocks:
            continue
        script = page_script(page_blocks, ran)
        print(f"--- {relative(page)}", flush=True)
        done = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)  # fmt: skip
        print("\n".join(line for line in done.stdout.splitlines() if line.startswith("### ")), flush=True)
        if log is not None:
            log[relative(page)] = done.stdout
        if done.returncode:
            failed = re.findall(r"^### FAILED (.*)$", done.stdout, re.M)
            said = failed[-1] if failed else f"{relative(page)}: bash exited {done.returncode}"
            return [f"{said}\n--- output (tail) ---\n{done.stdout[-TAIL:]}"]
    return []


def test_the_walk_names_the_page_line_and_output_of_a_failing_command(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("<!-- docs: run -->\n```bash\necho one\nls no-such-file   # a typo\necho never\n```\n")
    failed = walk(tmp_path, [page], dict(os.environ), timeout=60)
    assert len(failed) == 1 and failed[0].startswith(f"{page}:4: exit 2")
    assert "No such file or directory" in failed[0] and "### " + f"{page}:3 $ echo one" in failed[0]
    assert "never" not in failed[0].replace("echo never", "")

    page.write_text("<!-- docs: run -->\n```bash\ntrue  # refused: it is not\n```\n")
    assert walk(tmp_path, [page], dict(os.environ), timeout=60)[0].startswith(f"{page}:3: exit 0, the page says")

    page.write_text('<!-- docs: run except="false" -->\n```bash\nfalse\nls no-such-file  # refused\ntrue\n```\n'
                    "<!-- docs: run -->\n```bash\ntrue\n```\n")  # fmt: skip
    assert walk(tmp_path, [page], dict(os.environ), timeout=60) == []

    (tmp_path / ".venv").symlink_to((ROOT / ".venv").resolve())
    page.write_text("Text.\n\n<!-- docs: run -->\n```python\nprint('from python')\nraise SystemExit(3)\n```\n")
    failed = walk(tmp_path, [page], dict(os.environ), timeout=60)
    assert failed[0].startswith(f"{page}:5: exit 3") and "from python" in failed[0]


# The pages a new user follows on this machine, and what the walk runs of them (their "run" blocks).
LOCAL_PAGES = ("README.md", "docs/local.md", "docs/dataset.md", "docs/serving.md", "docs/development.md",
               "docs/benchmarks.md")  # fmt: skip


def test_only_the_local_pages_have_run_blocks():
    elsewhere = [b.where for b in all_blocks() if b.kind == "run" and relative(b.page) not in LOCAL_PAGES]
    assert not elsewhere, f"run blocks outside the walked pages {LOCAL_PAGES}: {elsewhere}"


def test_setup_check_installs_nothing_and_says_what_to_run(tmp_path: Path):
    for name in ("pyproject.toml", "constraints.txt", "scripts/setup.sh", "scripts/install_llama_cpp.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    done = subprocess.run(["scripts/setup.sh", "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "set-up is not done" in done.stderr and "run scripts/setup.sh" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["constraints.txt", "pyproject.toml", "scripts"]


def fresh_checkout(to: Path, tiny_model: Path) -> Path:
    """The working tree's tracked and untracked, not-ignored files, in a new git repository at `to`; set-up taken as
    done (this checkout's .venv, base model and llama.cpp linked in) and the distill run pointed at the tiny model."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to / name)
    (to / ".venv").symlink_to((ROOT / ".venv").resolve())
    for shared in (".cache/models", ".cache/llama.cpp"):
        (to / shared).parent.mkdir(parents=True, exist_ok=True)
        (to / shared).symlink_to((ROOT / shared).resolve())
    params = (to / "params.yaml").read_text()
    params = re.sub(r"^base-model: \S+", f"base-model: {tiny_model}", params, flags=re.M)
    (to / "params.yaml").write_text(re.sub(r"^epochs: \S+", "epochs: 0.25", params, flags=re.M))
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "a fresh clone"]):
        subprocess.run(["git", *argv], cwd=to, check=True, capture_output=True)
    return to


def new_users_home(home: Path, checkout: Path) -> None:
    """A git identity, and the documents and feedback the pages' commands name (~/my-documents with a reviewed
    summary of three of its four documents in my-reviewed.jsonl: one is held out for eval, and train keeps the
    two others whatever the teacher writes, above filter-split's MIN_EXAMPLES; ~/papers and ~/notes with the sample
    documents)."""
    from steps.core.io import write_jsonl
    from tests.test_build_dataset import TEXTS, fb, gist, steer

    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = New User\n\temail = new.user@example.org\n")
    mine = home / "my-documents"
    mine.mkdir()
    texts = [steer(text, "train").decode() for text in TEXTS]
    for i, text in enumerate(texts):
        (mine / f"note-{i}.txt").write_text(text)
    write_jsonl(checkout / "my-reviewed.jsonl",
                [fb(f"r{i}", t, "accepted", "2026-12-01T09:00:00+00:00", summary=gist(t)) for i, t in enumerate(texts[:3])])  # fmt: skip  # noqa: E501
    samples = sorted((ROOT / "data/documents").iterdir())
    for folder, part in (("papers", samples[::2]), ("notes", samples[1::2])):
        (home / folder).mkdir()
        for src in part:
            shutil.copy(src, home / folder / src.name)


@integration
def test_the_local_pages_run_blocks_run_in_a_fresh_checkout(tmp_path: Path, tiny_model_dir: Path):
    checkout = fresh_checkout(tmp_path / "checkout", tiny_model_dir)
    # The copy's scripts/setup.sh must find set-up done: were it to install, it would point this .venv at the copy.
    done = subprocess.run(["scripts/setup.sh", "--check"], cwd=checkout, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr + " (in this checkout first: scripts/setup.sh --dev)"
    new_users_home(tmp_path / "home", checkout)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env |= {"HOME": str(tmp_path / "home"), "PYTHONPATH": str(checkout),  # the clone's editable install, as it were
            "PATH": os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)}  # fmt: skip
    readme, *rest = [p for p in pages() if relative(p) in LOCAL_PAGES]
    assert relative(readme) == "README.md"
    ran: dict[str, str] = {}
    log: dict[str, str] = {}
    failed = walk(checkout, [readme], env, timeout=1200, ran=ran, log=log)
    assert not failed, failed[0]
    # README's commands, and what they left, as a user would then look (the suite's embedded-run and trial checks).
    the_embedded_run_is_registered_then_skipped_and_refuses_a_broken_split(checkout, env)
    the_dataset_built_from_your_folder_is_published_with_reviewed_eval_references(checkout, log["README.md"])
    the_promotion_trial_walked_the_loop_on_a_copy_and_ended_clean(checkout, log["README.md"])
    failed = walk(checkout, rest, env, timeout=1200, ran=ran, log=log)
    assert not failed, failed[0]
    refused = output_of(log["docs/dataset.md"], "scripts/build_dataset.sh ~/my-documents")
    assert "0 document(s) can be eval references (eval-references=curated)" in refused, refused[-3000:]
    assert "-S feedback=FILE" in refused and "-S eval-references=curated-or-teacher" in refused
    assert "refused before any stage ran (nothing was run, nothing published)" in refused  # known from the preamble
    assert "$ python -m steps.ingest" not in refused
    # The pages say how to put the checkout back after the runs that write into it: followed, nothing tracked changed.
    status = subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True).stdout
    assert status.splitlines() == ["?? my-reviewed.jsonl"], status  # the user's own file, beside them


def registry(checkout: Path) -> tuple[MlflowClient, str]:
    """The checkout's local MLflow registry (params.yaml's tracking-uri, a sqlite file under the checkout) and the
    model name the embedded run registers."""
    from mlflow import MlflowClient

    params = yaml.safe_load((checkout / "params.yaml").read_text())
    store = params["tracking-uri"].removeprefix("sqlite:///")
    return MlflowClient(tracking_uri=f"sqlite:///{checkout / store}"), params["model-name"]


def output_of(log: str, command: str) -> str:
    """What the walk's run of `command` printed: between its announcement and its "took" line."""
    found = re.search(rf"^### \S+ \$ {re.escape(command)}\n(.*?)^### took", log, re.S | re.M)
    assert found, f"the walk did not run `{command}`:\n{log[-TAIL:]}"
    return found.group(1)


# How far the embedded run's training wall time may be from preflight's forecast, either way (this 2-core machine is
# the AVX2 kind the float32 rate was measured on; a shared machine runs slower, a CPU with native bf16 faster).
FORECAST_FACTOR = 3.0


def the_embedded_run_is_registered_then_skipped_and_refuses_a_broken_split(checkout: Path, env: dict[str, str]) -> None:
    """After README's `scripts/run_local.sh` (`dvc repro` of dvc.yaml): version 1 registered and proposed, with its
    cost; `dvc repro` again skips every stage; an eval split broken and committed stops the run naming the file, line
    and field, and registers nothing. The broken commit is undone, the checkout left as the page left it."""
    client, name = registry(checkout)
    assert json.loads((checkout / "out/proposal/result.json").read_text())["model_version"] == "1"
    tags = client.get_model_version(name, "1").tags
    assert float(tags["cost.estimate_usd"]) > 0  # steps run from the command line record their wall time
    assert set(json.loads(tags["cost.breakdown"])) == {"dataset", "adapter", "gguf", "evaluation"}
    # preflight's training forecast (steps/sizing/forecast.py: the train split's tokens over the measured 77 tokens/s
    # of SmolLM2-135M in float32 on 2 AVX2 cores, scaled by parameters) beside train's real loop time (loading the
    # base is in neither; CI shares its machine with other jobs): within FORECAST_FACTOR either way
    ratio = float(tags["train.actual_over_forecast"])
    seen = {k: tags.get(k) for k in ("train.forecast_seconds", "train.loop_seconds", "train.wall_seconds")}
    assert ratio == pytest.approx(float(seen["train.loop_seconds"]) / float(seen["train.forecast_seconds"]), rel=0.1)
    assert 1 / FORECAST_FACTOR <= ratio <= FORECAST_FACTOR, (ratio, seen)

    env = env | {"DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}

    def sh(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)

    def repro() -> subprocess.CompletedProcess:
        return sh("bash", "-c", ". .venv/bin/activate && dvc repro")  # as run_local.sh does

    second = repro()
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert second.stdout.count("didn't change, skipping") == len(STAGES), second.stdout

    split = "data/summaries/eval.jsonl"
    (checkout / split).write_text('{"id": "eval-001", "document": "x"}\n')
    sh("git", "commit", "-qam", "break the eval split")
    third = repro()
    assert third.returncode != 0
    assert f"{split}:1: field 'summary' is missing" in third.stderr + third.stdout, third.stderr[-3000:]
    assert len(client.search_model_versions(f"name = '{name}'")) == 1  # nothing new registered
    for undo in (["reset", "-q", "HEAD~1"], ["checkout", "--", split]):
        assert sh("git", *undo).returncode == 0


def the_dataset_built_from_your_folder_is_published_with_reviewed_eval_references(checkout: Path, log: str) -> None:
    """README's build from ~/my-documents with the reviewed summaries: the smallest build it accepts said before it
    starts, the reviewed summaries as the eval references, the revision published and the command to train on it
    printed; no tracked file of the build's pipeline edited, none left beside it (`dvc exp run -S` would have)."""
    out = output_of(log, "scripts/build_dataset.sh ~/my-documents -S feedback=my-reviewed.jsonl")
    assert out.index("a build needs 2 or more usable documents") < out.index("$ python -m steps.ingest"), out[-3000:]
    evaluation = [json.loads(line) for line in (checkout / "out/examples/eval.jsonl").read_text().splitlines()]
    assert evaluation and {r["lineage"]["summary_by"] for r in evaluation} == {"feedback"}
    rev = json.loads((checkout / "out/published/result.json").read_text())["dataset_rev"]
    repo = yaml.safe_load((checkout / "build-dataset/params.yaml").read_text())["dataset-repo"]
    assert f"scripts/run_local.sh -S dataset-repo={repo} -S dataset-rev={rev}" in out, out[-3000:]
    argv = ["git", "status", "--porcelain", "--untracked-files=all", "--", "params.yaml", "dvc.yaml", "build-dataset"]
    assert subprocess.run(argv, cwd=checkout, capture_output=True, text=True).stdout == ""


def the_promotion_trial_walked_the_loop_on_a_copy_and_ended_clean(checkout: Path, log: str) -> None:
    """README's `scripts/try_promotion.sh`: held, promoted, rolled back; its servers gone, its folder removed, and the
    registry it copied (the embedded run's) without a champion or a new version."""
    out = output_of(log, "scripts/try_promotion.sh")
    assert re.search(r"a simulated week: \d+ records", out), out[-3000:]
    loop = (": held (champion", ": promoted (champion", ": rolled-back (champion", "aliases: {'champion': '2'}")
    for expected in loop:
        assert expected in out, expected
    work = Path(re.search(r"in (/\S+distillery-promotion-trial-\S+)", out).group(1))
    assert not work.exists()
    for port in map(int, re.findall(r"--port (\d+)", out)):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still listening"
    client, name = registry(checkout)
    aliases = client.get_registered_model(name).aliases
    assert "champion" not in aliases and len(client.search_model_versions(f"name = '{name}'")) == 1, aliases
