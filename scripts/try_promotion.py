"""The serving loop, tried on this machine: serve → outcomes → online metrics → promote → rollback, on a copy of the
local registry, with a simulated week.

    scripts/try_promotion.sh                     # after scripts/run_local.sh (which registers a version)
    scripts/try_promotion.sh --requests 5 --keep # more requests per side; keep the trial's folder to look at

Each step prints the command it runs; they are the commands of docs/serving.md with the trial's values:

1. **A copy of the registry** (`--tracking-uri`, the local `sqlite:///.cache/mlflow/mlflow.db`): the folder holding
   the database is copied into the trial's folder, so nothing the trial does reaches your registry (MLflow's recorded
   artifact paths follow the copy: `steps.core.mlflow_client.anchor_local_store`). In the copy, `challenger` is the
   version proposed last (or, with none proposed, the newest version, set by hand: any version can be made
   challenger by hand, even one that failed evaluate's gate, and promote will decide on it like any other), and
   `champion` the champion, or another version, or — with a single version in the registry — that version registered
   again as a stand-in.
2. **Serve both aliases**: `python -m steps.serve` for `champion` and for `challenger` (falling back to the champion),
   each on a loopback port.
3. **Requests and outcomes**: `--requests` documents of the committed eval split to each side. A client builds the
   served prompt itself (`steps.contract.prompting.messages`: the system prompt and the document in its frame) and
   posts it to `/v1/chat/completions` with no decoding settings (the server fills in the recorded ones); the answer's
   `X-Distillery-Version` header says which version answered. Each answer becomes an outcome record (accepted when
   the model said something, rejected when it answered nothing).
4. **A simulated week**: online metrics count complete UTC days only, so today's records would wait until tomorrow.
   The trial dates a copy of every record on each of the 8 days from the challenger's `challenger.since` on, and gives
   `--now` = since + 8 days to online-metrics and promote: the clock they would see a week later.
5. **Promote**: first on the real clock and the defaults (held: the hold and the samples are not there yet), then at
   the simulated time with `--min-samples` (the trial's requests) and `--margin` (`TRIAL_MARGIN`) sized to the
   trial's few requests (promoted).
6. **Rollback**: `champion` back to the version before; `previous-champion` removed. The champion's server follows
   each move (it polls the alias every 2 s here).
7. **Clean up**: the servers stop and the trial's folder is removed (kept with `--keep`).

Exit status 0 when each step did what it says; 1, naming the step, otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from steps.contract.prompting import messages
from steps.core import outcomes as om
from steps.core.io import read_jsonl
from steps.core.mlflow_client import local_store_folder, tracking_uri
from steps.core.registry import CHALLENGER, CHALLENGER_SINCE, CHAMPION, MODEL_NAME

LOCAL_REGISTRY = "sqlite:///.cache/mlflow/mlflow.db"  # steps/pipeline.py's local tracking-uri
DOCUMENTS = "data/summaries/eval.jsonl"
SIMULATED_DAYS = 8  # the 7-day hold, and the day it ends on
POLL_SECONDS = 2
# The non-inferiority margin for the trial's decision: a few requests a side give wide intervals (16 of 16 accepted on
# both sides: Newcombe's 95 % interval of the difference is ±0.19), so the default 0.05 would hold an equal
# challenger back.
TRIAL_MARGIN = 0.5


class TrialError(RuntimeError):
    """A step of the trial did not do what it says; the message names it."""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/try_promotion.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-uri", default=LOCAL_REGISTRY, help="the local registry to copy (sqlite:///…)")
    parser.add_argument("--model-name", default=MODEL_NAME, help="registered model name")
    parser.add_argument("--requests", type=int, default=3, help="requests sent to each side")
    parser.add_argument("--keep", action="store_true", help="keep the trial's folder (printed at the start)")
    parser.add_argument("--start-timeout", type=float, default=300, help="seconds a server may take to answer")
    return parser


def say(text: str) -> None:
    print(text, flush=True)


def step(argv: list[str]) -> str:
    """Run one of the pipeline's commands, showing it; its stdout, or TrialError with its stderr."""
    say("$ " + " ".join(argv))
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=False)
    out = done.stdout.strip()
    if out:
        say("  " + out.replace("\n", "\n  "))
    if done.returncode:
        raise TrialError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_registry(uri: str, work: Path) -> str:
    folder = local_store_folder(uri)
    if folder is None:
        raise TrialError(
            f"--tracking-uri {uri}: the trial works on a copy of a local SQLite registry (sqlite:///…); against a "
            "server, follow docs/serving.md step by step"
        )
    if not (folder / Path(uri).name).is_file():
        raise TrialError(f"{folder / Path(uri).name}: no registry; run scripts/run_local.sh first (it registers one)")
    shutil.copytree(folder, work / "mlflow")
    return f"sqlite:///{work / 'mlflow' / Path(uri).name}"


def prepare_aliases(uri: str, name: str, now: dt.datetime) -> tuple[str, str, dt.datetime]:
    """(champion, challenger, challenger since) in the copy, set as the module docstring says."""
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri(uri))  # re-anchors the copy before anything reads a path from it
    versions = sorted(client.search_model_versions(f"name = '{name}'"), key=lambda v: int(v.version))
    if not versions:
        raise TrialError(f"the registry has no version of {name}: run scripts/run_local.sh first")
    aliases = {k: str(v) for k, v in client.get_registered_model(name).aliases.items()}
    challenger = aliases.get(CHALLENGER) or str(versions[-1].version)
    if CHALLENGER not in aliases:
        say(f"  no '{CHALLENGER}': version {challenger}, the newest, is made challenger by hand")
        client.set_registered_model_alias(name, CHALLENGER, challenger)
    champion = aliases.get(CHAMPION)
    if champion is None or champion == challenger:
        others = [str(v.version) for v in versions if str(v.version) != challenger]
        if others:
            champion = others[-1]
            say(f"  no other '{CHAMPION}': version {champion} is made champion by hand")
        else:
            source = client.get_model_version(name, challenger)
            # MLflow's SQL registry looks a `models:/<id>` source up through the global tracking URI, not the
            # client's: without this it searches ./mlflow.db and says the logged model does not exist.
            mlflow.set_tracking_uri(client.tracking_uri)
            copy = client.create_model_version(
                name,
                source=source.source,
                run_id=source.run_id,
                tags=source.tags,
                model_id=source.model_id,
                description=f"trial: version {challenger} again, as the champion",
            )
            champion = str(copy.version)
            say(f"  one version only: version {challenger} registered again as version {champion}, the champion")
        client.set_registered_model_alias(name, CHAMPION, champion)
    version = client.get_model_version(name, challenger)
    since_text = version.tags.get(CHALLENGER_SINCE)
    if since_text is None:
        since_text = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        client.set_model_version_tag(name, challenger, CHALLENGER_SINCE, since_text)
    return str(champion), str(challenger), om.parse_time(since_text)


def aliases_now(uri: str, name: str) -> dict[str, str]:
    from mlflow import MlflowClient

    return {k: str(v) for k, v in MlflowClient(uri).get_registered_model(name).aliases.items()}


def health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def wait_serving(port: int, proc: subprocess.Popen, version: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TrialError(f"{what}: the serve command exited with {proc.returncode} (its log is above)")
        with contextlib.suppress(OSError, ValueError):
            status, body = health(port)
            if status == 200 and (body.get("serving") or {}).get("version") == version:
                return
        time.sleep(0.5)
    raise TrialError(f"{what}: version {version} not served on port {port} within {timeout:g}s")


@contextlib.contextmanager
def serving(uri: str, name: str, work: Path, log: Path) -> Iterator[dict[str, tuple[int, subprocess.Popen]]]:
    """Both sides' serve commands; stopped (SIGTERM, then SIGKILL) however the trial ends."""
    sides: dict[str, tuple[int, subprocess.Popen]] = {}
    sink = log.open("w")
    try:
        for alias, fallback in ((CHAMPION, ""), (CHALLENGER, CHAMPION)):
            port = free_port()
            argv = ["python", "-m", "steps.serve", "--tracking-uri", uri, "--model-name", name, "--alias", alias,
                    "--port", str(port), "--work", str(work / f"serve-{alias}"),
                    "--poll-seconds", str(POLL_SECONDS)]  # fmt: skip
            if fallback:
                argv += ["--fallback-alias", fallback]
            say("$ " + " ".join(argv) + " &")
            proc = subprocess.Popen([sys.executable, *argv[1:]], stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
            sides[alias] = (port, proc)
        yield sides
    finally:
        for _, proc in sides.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for _, proc in sides.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        sink.close()


def ask(port: int, document: str) -> tuple[str, str, float]:
    """(version, answer, latency ms) of one summary request, as a client sends it."""
    body = json.dumps({"messages": messages(document)}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})  # fmt: skip
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as reply:
        answer = json.loads(reply.read())["choices"][0]["message"]["content"] or ""
        return reply.headers["X-Distillery-Version"], answer, (time.monotonic() - start) * 1000


def simulated_week(records: list[dict], since: dt.datetime) -> list[dict]:
    """A copy of every record on each of the SIMULATED_DAYS days from `since`'s day on."""
    start = dt.datetime.combine(since.date(), dt.time(12), tzinfo=dt.UTC)
    week = []
    for day in range(SIMULATED_DAYS):
        for i, r in enumerate(records):
            when = start + dt.timedelta(days=day, seconds=i)
            week.append(r | {"request_id": f"{r['request_id']}-day{day}", "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return week


def trial(args: argparse.Namespace, work: Path) -> None:
    name, now = args.model_name, dt.datetime.now(dt.UTC)
    say(f"1. a copy of the registry {args.tracking_uri}, in {work}")
    uri = copy_registry(args.tracking_uri, work)
    champion, challenger, since = prepare_aliases(uri, name, now)
    say(f"  champion version {champion}, challenger version {challenger} (challenger since {since:%Y-%m-%d %H:%M}Z)")

    say("\n2. serve both aliases")
    with serving(uri, name, work, work / "serve.log") as sides:
        for alias, version in ((CHAMPION, champion), (CHALLENGER, challenger)):
            port, proc = sides[alias]
            wait_serving(port, proc, version, args.start_timeout, f"serving {alias}")
            say(f"  {alias}: version {version} on 127.0.0.1:{port} (GET /healthz says so)")

        say(f"\n3. {args.requests} request(s) to each side, the served prompt built by the client; one outcome each")
        documents = [r["document"] for r in read_jsonl(Path(DOCUMENTS))][: args.requests]
        records = []
        for alias in (CHAMPION, CHALLENGER):
            for i, document in enumerate(documents):
                version, answer, latency = ask(sides[alias][0], document)
                outcome = "accepted" if answer.strip() else "rejected"
                records.append({"request_id": f"{alias}-{i}", "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "model": name, "version": version, "latency_ms": round(latency, 1),
                                "outcome": outcome})  # fmt: skip
                say(f"  {alias} (version {version}, {latency:.0f} ms, {outcome}): {answer.strip()[:100]!r}")
        if {r["version"] for r in records} != {champion, challenger}:
            raise TrialError(f"step 3: the answers came from versions {sorted({r['version'] for r in records})}")

        later = since + dt.timedelta(days=SIMULATED_DAYS)
        stamp = later.strftime("%Y-%m-%dT%H:%M:%SZ")
        outcomes = work / "outcomes.jsonl"
        week = simulated_week(records, since)
        outcomes.write_text("".join(json.dumps(r) + "\n" for r in week))
        say(f"\n4. a simulated week: {len(week)} records in {outcomes}, {len(records)} a day for {SIMULATED_DAYS} days")
        step(["python", "-m", "steps.online_metrics", "--outcomes", str(outcomes), "--tracking-uri", uri,
              "--model-name", name, "--out", str(work / "online-metrics"), "--now", stamp])  # fmt: skip

        say("\n5. promote: on today's clock with the defaults (held), then a week later, sized for the trial")
        common = ["--tracking-uri", uri, "--model-name", name]
        step(["python", "-m", "steps.promote", *common, "--out", str(work / "promote-now")])
        per_version = len(week) // 2
        promoted = step(["python", "-m", "steps.promote", *common, "--out", str(work / "promote"), "--now", stamp,
                         "--min-samples", str(per_version), "--margin", str(TRIAL_MARGIN)])  # fmt: skip
        if ": promoted" not in promoted.splitlines()[0]:
            raise TrialError(f"step 5: the challenger was not promoted: {promoted}")
        wait_serving(*sides[CHAMPION], challenger, args.start_timeout, "the champion's server following the promotion")
        say(f"  aliases: {aliases_now(uri, name)}; the champion's server now serves version {challenger}")

        say("\n6. roll back")
        step(["python", "-m", "steps.promote", *common, "--action", "rollback", "--reason", "trial of the loop",
              "--out", str(work / "rollback")])  # fmt: skip
        after = aliases_now(uri, name)
        if after != {CHAMPION: champion}:
            raise TrialError(f"step 6: after the rollback the aliases are {after}, not {{'champion': '{champion}'}}")
        wait_serving(*sides[CHAMPION], champion, args.start_timeout, "the champion's server following the rollback")
        say(f"  aliases: {after}; the champion's server serves version {champion} again")
    say("\n7. clean up: both servers stopped")


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="distillery-promotion-trial-"))
    try:
        trial(args, work)
    except TrialError as e:
        print(f"try-promotion: {e}", file=sys.stderr)
        if (work / "serve.log").is_file():
            print(f"serve log (last lines):\n{(work / 'serve.log').read_text()[-3000:]}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if not args.keep:
        say(f"the trial's folder is removed; the registry at {args.tracking_uri} is as it was")
    return 0


if __name__ == "__main__":
    sys.exit(main())
