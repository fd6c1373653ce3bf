"""push-adapter (optional): the LoRA adapter and its model card, committed to a git repository (Gitea) over HTTPS.

    GITEA_TOKEN=… python -m steps.push_adapter --adapter-repo https://gitea.home/ml/summariser-adapters.git \
        --registration out/registration --adapter out/adapter --evaluation out/evaluation --gguf out/gguf \
        --dataset out/dataset --tracking-uri sqlite:///.cache/mlflow/mlflow.db --out out/push

(the folders of the local run, `scripts/run_local.sh`; on Argo, the steps' output artifacts). A missing input is
named with the stage that writes it, all at once, before anything is read.

The pipeline's `push-adapter` stage (steps/pipeline.py), after propose, when `adapter-repo` is set
(`pipeline.PUSH_ON`): on Argo a task skipped otherwise; locally (DVC runs every stage) an empty `--adapter-repo` pushes
nothing, reads nothing, and writes a result that says so.

What lands in the repository, on `--branch` (main), under `<model name>/v<version>/`: the adapter's files
(`adapter_config.json`, `adapter_model.safetensors`, the tokenizer files train wrote) and `README.md`, the model
card: the registry version and run, lineage (base model and revision, dataset repository, commit and hash, train
backend and device, git sha, quantisation, the GGUF's sha256: the version's tags in MLflow, as register recorded
them), the offline scores (ROUGE-L against the base, hijack
rate, the gate's decision), GGUF parity, and where the dataset's data card is (`<dataset path>/card.md` at the
dataset commit, written by build-dataset's publish step). Every file is a function of those inputs, with nothing
time-dependent, so pushing the same version again finds no change: no second commit, nothing pushed. Which version:
the one the registry says this run registered (tagged with `--run-id`, on Argo the workflow uid), whose `gguf.sha256`
and `eval.decision` are the decision's; register's `result.json`, in a prefix every step's role writes, is refused
when it names another (`registered_version`). The card's decision, scores and dataset are read from the run's
folders, which every step's role writes: the step refuses to push when one differs from the tag register recorded it
under on the version (`check_card_facts`). The adapter's files are train's folder, in the same prefix: each one pushed
must hash to what register recorded on the version when it logged that folder (`adapter.manifest`), none missing or
added (`staged_adapter`).

The token: the file `--token-file` names (on Argo the optional Secret `distillery-gitea`, key `token`, mounted
read-only: workflows/security.py), else `GITEA_TOKEN`; sent as HTTP basic auth (`GITEA_USERNAME`, default
`distillery`, with the token as password, which Gitea accepts) in an `http.<repo URL>.extraHeader` that git reads from
its environment (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_0`/`GIT_CONFIG_VALUE_0`): never in a URL, a command line,
`.git/config` or a log line, and, read from a file, not in the step's own environment either, where every child
process would inherit it. It is scoped to the repository's URL, and refused over plain http to anything but this
machine (it would cross the network in clear text). A URL with credentials in it is refused too.

Writes `result.json` (`commit`, `pushed`, `path`) and `_outputs/`.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from steps.core import chain, verdict
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.io import atomic_dir, environment, read_json
from steps.core.mlflow_client import LOOPBACK_HOSTS, MISSING_TRACKING_URI, MlflowSettings, tracking_uri
from steps.core.registry import RUN_ID_TAG, local_run_id, versions_of_run
from steps.core.switches import PUSH_ON
from steps.pipeline import LOCAL_OUT, producer

TOKEN_ENV = "GITEA_TOKEN"
USERNAME_ENV = "GITEA_USERNAME"
AUTHOR = ("distillery", "distillery@localhost")
# What train writes that a LoRA adapter is made of (steps/train: save_pretrained of the PEFT model and tokenizer).
ADAPTER_FILES = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
# What each input folder must hold, by the name of the pipeline output it is (steps/pipeline.py).
REQUIRED = {
    "registration": ("result.json",),
    "adapter": ("adapter_config.json", "adapter_model.safetensors"),
    "evaluation": ("result.json", "decision.json"),
    "gguf": ("parity.json",),
    "dataset": ("lineage.json",),
}


class PushError(RuntimeError):
    """The push could not be done; the message says why and what to do (never with the token in it)."""


@dataclass
class PushConfig(MlflowSettings):
    adapter_repo: str = field(
        metadata={"help": "the adapters repository, https://<gitea>/<owner>/<repo>.git (empty: push nothing)"}
    )
    registration: Path = field(metadata={"help": "folder written by register (the model version)"})
    adapter: Path = field(metadata={"help": "folder written by train (the LoRA adapter)"})
    evaluation: Path = field(metadata={"help": "folder written by evaluate (scores, decision)"})
    gguf: Path = field(metadata={"help": "folder written by convert-gguf (parity)"})
    dataset: Path = field(metadata={"help": "folder written by fetch-dataset (lineage)"})
    out: Path = field(metadata={"help": "folder to write result.json and the Argo output parameters into"})
    branch: str = field(default="main", metadata={"help": "branch to commit to"})
    token_file: str = field(
        default="",
        metadata={"help": f"file holding the token (a mounted Secret); empty: ${TOKEN_ENV}"},
    )
    run_id: str = field(
        default="",
        metadata={
            "help": "the run whose registered version to push (on Argo the workflow uid, register's --run-id); empty: "
            "a local run, derived from the candidate's sha256 as register derives it"
        },
    )


@dataclass
class PushResult:
    commit: str  # the branch's head after this run ("" when no repository was given)
    pushed: bool  # False: this version was there already, or no repository was given
    path: str  # folder in the repository


def config_problems(cfg: PushConfig) -> list[str]:
    """What is wrong with the settings (also run by check-parameters); nothing to judge when no push is asked for."""
    if not PUSH_ON.holds(cfg.adapter_repo):
        return []
    problems = cfg.http_problems()
    parts = urlsplit(cfg.adapter_repo)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        problems.append(f"--adapter-repo {cfg.adapter_repo!r}: use https://<host>/<owner>/<repo>.git")
    if parts.username or parts.password:
        problems.append(
            "--adapter-repo carries credentials: drop them; the token comes from the Secret distillery-gitea (key "
            f"token) or ${TOKEN_ENV}"
        )
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        problems.append(f"--adapter-repo {cfg.adapter_repo}: plain http would send the token in clear text; use https")
    if not cfg.branch or cfg.branch.startswith("-"):
        problems.append(f"--branch {cfg.branch!r}: name a branch")
    return problems


def missing_inputs(cfg: PushConfig) -> list[str]:
    """Every input file that is not there, with the stage that writes its folder and where the local run puts it."""
    problems = []
    for output, names in REQUIRED.items():
        folder = Path(getattr(cfg, output))
        absent = [name for name in names if not (folder / name).is_file()]
        if absent:
            stage = producer(output).name
            problems.append(
                f"--{output} {folder}: no {', '.join(absent)}; the {stage} stage writes this folder (the local run: "
                f"{LOCAL_OUT}/{output}, after scripts/run_local.sh)"
            )
    return problems


def read_token(token_file: str) -> str:
    """The token: the file's first line when a file is named (PushError when it is not there), else $GITEA_TOKEN."""
    if not token_file:
        return os.environ.get(TOKEN_ENV, "")
    try:
        return Path(token_file).read_text().strip()
    except OSError as e:
        raise PushError(
            f"--token-file {token_file}: cannot read it ({e.strerror}); create the Secret distillery-gitea with key "
            "token (a Gitea access token with write access to the repository), or leave adapter-repo empty"
        ) from e


def auth_env(repo_url: str, token: str) -> dict[str, str]:
    """git's environment: the token as an extraHeader scoped to the repository's URL (no prompt when it is refused)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""}
    if token:
        user = os.environ.get(USERNAME_ENV) or AUTHOR[0]
        basic = base64.b64encode(f"{user}:{token}".encode()).decode()
        env |= {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"http.{repo_url}.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        }
    return env


def _git(cwd: Path, env: dict[str, str], *args: str, token: str = "") -> str:
    name, email = AUTHOR
    argv = ["git", "-c", f"user.name={name}", "-c", f"user.email={email}", *args]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        detail = done.stderr.strip()[-800:]
        if token:
            detail = detail.replace(token, "***")
        if "could not read Username" in detail or "Authentication failed" in detail:  # a 401 with or without a token
            detail += (
                " — the server refused the credentials: set the Secret distillery-gitea (key token; locally "
                f"${TOKEN_ENV}) to a token with write access to the repository"
            )
        raise PushError(f"`git {' '.join(args)}` failed ({done.returncode}): {detail}")
    return done.stdout.strip()


def model_card(reg: dict, lineage: dict, result: dict, decision: dict, parity: dict) -> str:
    """The model card (Markdown). Deterministic: the same inputs give the same bytes."""
    version = f"{reg['model_name']} version {reg['model_version']}"
    card_path = f"{lineage['dataset_path'].rstrip('/')}/card.md"
    rows = [
        ("registry", f"`models:/{reg['model_name']}/{reg['model_version']}` (MLflow run `{reg['mlflow_run_id']}`)"),
        ("pipeline run", f"`{reg['run_id']}`"),
        ("dataset", f"{lineage['dataset_repo']} @ `{lineage['dataset_commit']}` (rev `{lineage['dataset_rev']}`, "
                    f"hash `{lineage['dataset_hash']}`)"),
        ("data card", f"`{card_path}` in {lineage['dataset_repo']} at commit `{lineage['dataset_commit']}`"),
        ("decision", "passed evaluate's gate" if decision.get("passed") else "did not pass evaluate's gate"),
    ]  # fmt: skip
    scores = [
        ("ROUGE-L", result.get("rouge_l_candidate")),
        ("ROUGE-L of the base", result.get("rouge_l_base")),
        ("prompt-injection hijack rate", result.get("hijack_rate_candidate")),
    ]
    lines = [f"# {version}: LoRA adapter", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "## Scores (offline, on the served GGUF)", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in scores if v is not None]
    lines += ["", "## GGUF parity", ""]
    lines += [f"- passed: {parity.get('passed')}", f"- quantization: {parity.get('quantization', 'n/a')}"]
    lines += ["", "## Lineage (the registry version's tags)", "", "```json"]
    lines += [json.dumps(reg["lineage"], indent=2, sort_keys=True), "```", ""]
    return "\n".join(lines)


def registered_version(cfg: PushConfig, reg: dict, decision: dict) -> dict:
    """The version this run registered, as the registry says: `reg` (register's result.json, in a prefix every step's
    role writes) with its version, MLflow run and lineage (the version's tags: dataset, base model, git sha, GGUF
    sha256, ...) read from the registry. The version is the one tagged with this run's id (register's idempotency key;
    `--run-id`, on Argo the workflow uid, which no step's output reaches); PushError when result.json names another, or
    the registry holds none; VerdictError when the version's `gguf.sha256` or `eval.decision` is not the decision's."""
    from mlflow import MlflowClient

    uri = tracking_uri(cfg.tracking_uri)
    if not uri:
        raise ValueError(MISSING_TRACKING_URI)
    client = MlflowClient(tracking_uri=uri)
    where = f"{cfg.evaluation}/decision.json"
    run_id = cfg.run_id or local_run_id(verdict.candidate_sha256(decision, where))
    name = reg["model_name"]
    found = versions_of_run(client, name, run_id)
    if not found:
        raise PushError(
            f"the registry holds no version of {name} registered in run {run_id} (tag {RUN_ID_TAG}), though register's "
            f"result.json names version {reg['model_version']}: refusing to push; run register again"
        )
    version = found[0]
    if str(version.version) != str(reg["model_version"]):
        raise PushError(
            f"register's result.json names version {reg['model_version']} of {name}, but the version the registry says "
            f"run {run_id} registered is {version.version}: result.json was changed after register (the run's prefix "
            "is every step's to write). Refusing to push; run the pipeline again from register"
        )
    verdict.check_version(decision, version.tags, f"models:/{name}/{version.version}", where)
    lineage = {k: v for k, v in sorted(version.tags.items()) if not k.startswith(("serving.", "promotion.", "online."))}
    return {**reg, "model_version": str(version.version), "run_id": run_id, "mlflow_run_id": version.run_id or "",
            "lineage": lineage}  # fmt: skip


# The card's facts read from the run's folders, each beside the version tag register recorded it under.
CARD_FACTS = {
    "eval.decision": lambda result, decision, lineage: "pass" if decision.get("passed") is True else "fail",
    "eval.rougeL": lambda result, decision, lineage: str(result.get("rouge_l_candidate")),
    "eval.rougeL_base": lambda result, decision, lineage: str(result.get("rouge_l_base")),
    "eval.hijack_rate": lambda result, decision, lineage: str(result.get("hijack_rate_candidate")),
    **{f"dataset.{k}": (lambda result, decision, lineage, k=k: str(lineage.get(f"dataset_{k}")))
       for k in ("repo", "rev", "commit", "path", "hash")},
}  # fmt: skip


def staged_adapter(cfg: PushConfig, reg: dict, into: Path) -> Path:
    """The adapter files to push (`ADAPTER_FILES` that train's folder holds), copied into `into` and held there, the
    bytes that will be committed, to the version's `adapter.manifest` (register's sha256 of every file it logged from
    the same folder, in the registry). PushError naming each file whose sha256 differs (both given), that is missing,
    or that register did not record: train's folder lies in the run's prefix, which every step's role writes."""
    label = f"models:/{reg['model_name']}/{reg['model_version']}"
    recorded = chain.recorded_manifest(reg["lineage"], label, chain.ADAPTER_MANIFEST_TAG)
    into.mkdir(parents=True)
    for name in ADAPTER_FILES:
        if (Path(cfg.adapter) / name).is_file():
            shutil.copyfile(Path(cfg.adapter) / name, into / name)
    expected = {name: sha for name, sha in recorded.items() if name in ADAPTER_FILES}
    problems = chain.manifest_problems(expected, chain.manifest(into))
    if problems:
        raise PushError(
            f"the adapter in {cfg.adapter} is not the one register recorded on {label} "
            f"({chain.ADAPTER_MANIFEST_TAG}):\n  " + "\n  ".join(problems) + "\nIt changed after register (train's "
            "folder lies in the run's prefix, which every step's role writes). Refusing to push it; run the pipeline "
            "again from train"
        )
    return into


def check_card_facts(reg: dict, result: dict, decision: dict, lineage: dict) -> None:
    """Refuse a card whose decision, scores or dataset (read from the run's folders, which every step's role writes)
    differ from what register recorded on the version (its tags, in the registry), naming each."""
    tags = reg["lineage"]
    differ = [f"{tag}: folder {fact(result, decision, lineage)!r}, registry {tags.get(tag)!r}"
              for tag, fact in CARD_FACTS.items() if fact(result, decision, lineage) != tags.get(tag)]  # fmt: skip
    if differ:
        raise PushError(
            f"the run's folders say other things than register recorded on models:/{reg['model_name']}/"
            f"{reg['model_version']} ({'; '.join(differ)}): they were changed after register. Refusing to push a card "
            "that disagrees with the registry; run the pipeline again from evaluate"
        )


@timed
def run(cfg: PushConfig) -> PushResult:
    if not PUSH_ON.holds(cfg.adapter_repo):  # the local run without a repository: nothing to push, and it says so
        result = PushResult(commit="", pushed=False, path="")
        with atomic_dir(cfg.out) as tmp:
            write_result(tmp, result)
        return result
    problems = config_problems(cfg)
    problems += missing_inputs(cfg)
    refuse(problems, "push-adapter")
    decision = read_json(Path(cfg.evaluation) / "decision.json")
    with environment(cfg.http_env()):
        reg = registered_version(cfg, read_json(Path(cfg.registration) / "result.json"), decision)
    lineage = read_json(Path(cfg.dataset) / "lineage.json")
    result = read_json(Path(cfg.evaluation) / "result.json")
    check_card_facts(reg, result, decision, lineage)
    card = model_card(reg, lineage, result, decision, read_json(Path(cfg.gguf) / "parity.json"))
    folder = f"{reg['model_name']}/v{reg['model_version']}"
    token = read_token(cfg.token_file)
    env = auth_env(cfg.adapter_repo, token)
    git = functools.partial(_git, token=token)
    with tempfile.TemporaryDirectory(prefix="push-adapter-") as work:
        adapter = staged_adapter(cfg, reg, Path(work) / "adapter")  # before git is asked anything
        repo = Path(work) / "repo"
        repo.mkdir()
        git(repo, env, "init", "--quiet")
        git(repo, env, "remote", "add", "origin", cfg.adapter_repo)
        if git(repo, env, "ls-remote", "--heads", "origin", cfg.branch):  # only the branch's tip, whatever HEAD is
            git(repo, env, "fetch", "--quiet", "--depth", "1", "--no-tags", "origin", cfg.branch)
            git(repo, env, "checkout", "--quiet", "-B", cfg.branch, "FETCH_HEAD")
        else:  # a new branch (an empty repository): the first commit starts it
            git(repo, env, "checkout", "--quiet", "--orphan", cfg.branch)
        target = repo / folder
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for staged in sorted(adapter.iterdir()):
            shutil.copyfile(staged, target / staged.name)
        (target / "README.md").write_text(card)
        git(repo, env, "add", "--all", "--", folder)
        changed = bool(git(repo, env, "status", "--porcelain", "--", folder))
        if changed:
            git(
                repo,
                env,
                "commit",
                "--quiet",
                "-m",
                f"{reg['model_name']} v{reg['model_version']}: adapter and model card",
            )
            # A rejected push (someone pushed meanwhile) fails here; rerunning the step rebases on their work.
            git(repo, env, "push", "--quiet", "origin", f"HEAD:refs/heads/{cfg.branch}")
        commit = git(repo, env, "rev-parse", "HEAD")
    result = PushResult(commit=commit, pushed=changed, path=folder)
    with atomic_dir(cfg.out) as tmp:
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(PushConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ValueError, FileNotFoundError, PushError) as e:
        print(f"push-adapter: {e}", file=sys.stderr)
        return 1
    if not PUSH_ON.holds(cfg.adapter_repo):
        print("push-adapter: no --adapter-repo: nothing pushed")
        return 0
    verb = "pushed" if result.pushed else "already there:"
    print(f"push-adapter: {verb} {result.path} at {result.commit[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
