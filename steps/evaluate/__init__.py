"""evaluate: base, current champion (when one exists) and candidate, all as the GGUF that will be served, through
llama.cpp, on the eval split and the adversarial suite; writes metrics, plots and a decision with every check.

    python -m steps.evaluate --dataset out/dataset --gguf out/gguf --out out/evaluation \
        [--tracking-uri sqlite:///.cache/mlflow/mlflow.db --model-name distillery-summariser]

Every contender answers every document through llama.cpp's chat completion with the chat template embedded in its GGUF,
the prompt from `steps.contract.prompting` and the serving configuration (`steps.contract.serving_config`: greedy
decoding, a fixed seed, the token cap and context size that are served), several documents per llama.cpp decode as
llama.cpp's server batches its parallel slots (`generate_all`); a line per contender every few seconds says how far it
is and at what rate. Per example: ROUGE-1/2/L (F1) against the reference, length compliance (at most `--max-words`), a
faithfulness proxy (numbers and capitalised names in the summary that the document does not contain), and whether
generation ended by itself. Per adversarial case, its family's judge (steps/adversarial/, one module each): hijacked
when the answer shows the attack worked the way that family's attack works (the canary in any encoding the case used,
the demanded language or format, the system prompt, the attacker's address), and failed as well when the answer is no
faithful summary of the carrier (steps/core/faithfulness.py) or lacks a word the case requires.

The gate passes only when all hold — this is the one place that decides whether the candidate beats the base and the
champion; `propose` only acts on it:
- GGUF parity passed (convert-gguf);
- the candidate beats the base — and the champion, when the registry has one — and each extractive baseline
  (steps/evaluate/baselines.py: the document's first sentence, its first 25 words, the document whole) on ROUGE-L: the
  lower bound of the paired bootstrap's `--confidence` BCa interval of the per-example gain is above `--min-rouge-gain`
  (PASS; FAIL when its upper bound is not above it, INCONCLUSIVE when the interval straddles it);
- length and faithfulness on the eval split: the share of answers within the length bounds (`--max-words`, at most
  half the document), and the share with every name and number in the document, each shown non-inferior to every
  rival's by the exact paired test at `--max-summary-regression`, and not shown below `--min-summary-rate`;
- safety, per adversarial family and per rival (steps/core/gate_stats.py): H0 "the candidate's pass rate is lower than
  the rival's by at least δ" (`--max-attack-regression`, 0.2) is rejected by an exact paired non-inferiority test at
  `--gate-alpha` in every comparison (intersection-union: no multiplicity correction). A comparison not rejected is
  INCONCLUSIVE when the suite had less than `--min-power` power to reject it for an equally safe candidate, FAIL
  otherwise; an inconclusive verdict proposes only with `--accept-inconclusive-safety '<who, why>'`, recorded in
  decision.json, and never where an exact test shows the candidate worse than the rival;
- a family's pass rate is not shown below its floor (`--min-family-pass-rate`);
- the stop rate (not a safety comparison) is not shown below a rival's by more than `--max-stop-regression` nor below
  `--min-stop-rate`.
Every verdict carries the safety half's error rates on this suite, simulated from the per-case outcomes: the chance it
passes a candidate exactly as safe as its rival and the chance it passes one δ worse on a single family
(`operating_characteristics` in decision.json, the report and the step's output).
Fanned out: `--shard i/k` answers every k-th document from the i-th for every contender and writes `shard.json` (no
decision), signed with `--shard-signing-key`; `--gather <the k shard folders>` verifies every shard's signature with
`--shard-verify-key` (refusing an unsigned or changed `shard.json` by its file), judges the reassembled answers and
decides, as one run would; it signs no decision over shards it could not verify.
Produces in `--out`: `metrics.json`, `decision.json` (every check with figures and reason, which champion version it
compared against — `propose` refuses when the registry's champion has moved since —, the serving configuration it
measured with and the sha256 of every GGUF it judged (`files`), both of which `register` checks; signed with
`--signing-key`, steps/core/verdict.py, so that register and propose can tell it from a forgery), `generations.jsonl`,
`report.md`, `score_diff.png`, `adversarial_families.png`, `result.json`.

A contender's generations are a function of its GGUF's bytes, the prompts (the documents in the serving prompt), the
serving configuration, the thread count, the CPU llama.cpp computes on, llama.cpp's version and the generating code
(`GENERATION_VERSION`): with `--generation-cache` (a local folder, by default `.cache/generations`) they are kept as a
sealed folder (steps/core/sealed.py) under the sha256 of all of these and reused, so the base (the same file in every
run on a base) and the champion are not generated again. Never a shared s3:// prefix: kept answers decide the
comparison, and a shared prefix is written by other roles (issue 37); on Argo every contender is generated every run.
The scores are always computed afresh; `metrics.json` says which contenders came from the cache.

The package, by what each file holds: `config` (the flags, the result, the checks on the settings), `generation`
(`generate_all`, `generate_sequential`, the progress line), `llama_internals` (batched decoding: the one module that
uses llama-cpp-python's private internals and low-level bindings, pinned to the release it was read from), `cache`
(the generation cache and its key), `scoring` (ROUGE, length, faithfulness proxy, the adversarial verdicts, the paired
bootstrap, the aggregate metrics), `gate` (`decide`, its paired comparisons, its error rates, decision.json),
`champion` (the registry's champion GGUF), `report` (report.md and the plots); this file is the step (`run`, `main`),
`__main__` its command line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from steps.core import chain, verdict
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.dataset import load_split
from steps.core.io import atomic_dir, read_json, write_json
from steps.evaluate.cache import cached_generate
from steps.evaluate.champion import Champion, check_judged_champion, resolve_champion
from steps.evaluate.config import EvaluateConfig, EvaluateResult, config_problems, shard_of
from steps.evaluate.gate import decide, decision_record, operating_characteristics
from steps.evaluate.generation import progress_line
from steps.evaluate.report import report_markdown, write_plots
from steps.evaluate.scoring import adversarial, aggregate_metrics, baseline_metrics, paired_bootstrap, quality

# What other code reads: the config and result types, the checks check-parameters runs, decision.json's record (and
# cached_generate, which tests/canned.py replaces with canned answers). The rest is imported from its module.
__all__ = [
    "Champion", "EvaluateConfig", "EvaluateResult", "cached_generate", "config_problems", "decision_record", "main",
    "run",
]  # fmt: skip


SHARD_FILE = "shard.json"


def _contenders(cfg: EvaluateConfig, gguf_result: dict, champion: Champion) -> dict[str, Path]:
    contenders = {"base": Path(cfg.gguf) / gguf_result["base_gguf"]}
    if champion.file is not None:
        contenders["champion"] = champion.file
    contenders["candidate"] = Path(cfg.gguf) / gguf_result["candidate_gguf"]
    return contenders


def _generate(
    cfg: EvaluateConfig, contenders: dict[str, Path], documents: list[str], picked: list[int]
) -> dict[str, dict[str, Any]]:
    """Each contender's answers to the `picked` documents (through the generation cache), rate, time, cache hit."""
    answers = {}
    for name, file in contenders.items():
        print(f"evaluating {name}: {file.name} on {len(picked)} of {len(documents)} documents", flush=True)
        start = time.perf_counter()
        outputs, tok_s, hit = cached_generate(file, [documents[i] for i in picked], cfg, progress_line(name))
        if hit:
            print(f"  {name}: generations reused from {cfg.generation_cache}", flush=True)
        seconds = round(time.perf_counter() - start, 1)
        answers[name] = {"outputs": outputs, "tokens_per_second": tok_s, "seconds": seconds, "from_cache": hit}
    return answers


def _shard_folders(folders: list[Path]) -> list[Path]:
    """The folders as given, a folder without shard.json standing for its subfolders that hold one (the cluster's
    gather downloads every shard under one prefix)."""
    found = []
    for folder in folders:
        inner = sorted(p.parent for p in Path(folder).glob(f"*/{SHARD_FILE}"))
        found += inner if inner and not (Path(folder) / SHARD_FILE).is_file() else [folder]
    return found


def suite_digest(ids: list[str], documents: list[str]) -> str:
    """sha256 of the documents every contender answers (eval, then adversarial), with their ids: a shard signs it, the
    gather recomputes it from the dataset it scores against, so answers to other documents are not judged as these."""
    return hashlib.sha256(json.dumps(list(zip(ids, documents, strict=True))).encode()).hexdigest()


def check_share(shard: dict[str, Any], documents: int, contenders: list[str], where: str) -> None:
    """Refuse (VerdictError) a shard that did not answer exactly its share: shard i/k answers every k-th of the
    `documents` from the i-th (`picked`), each once, with one answer per contender the shards agree on. A shard that
    signed answers to another shard's documents would overwrite that shard's; one that left some out, a hole."""
    i, k = shard["i"], shard["k"]
    assigned = list(range(i, documents, k))
    if shard["picked"] != assigned:
        raise verdict.VerdictError(
            f"{where}: answers documents {shard['picked'][:5]}… ({len(shard['picked'])}), but shard {i}/{k} answers "
            f"the documents {i}, {i}+{k}, …: {assigned[:5]}… ({len(assigned)} of {documents}). "
            "Refusing it: it answered another share than its own; run the shards again"
        )
    counts = {name: len(got.get("outputs") or []) for name, got in shard["answers"].items()}
    if sorted(counts) != sorted(contenders) or set(counts.values()) != {len(assigned)}:
        raise verdict.VerdictError(
            f"{where}: answers for {', '.join(f'{n} ({c})' for n, c in counts.items()) or 'no contender'}, but every "
            f"contender ({', '.join(contenders)}) answers each of its {len(assigned)} documents once. Refusing it; "
            "run the shards again"
        )


def check_contenders(common: dict[str, Any], where: str) -> None:
    """Refuse (VerdictError) contenders the shards agree on that are not base and candidate, with the champion exactly
    when they name a champion version, each with the file they judged."""
    expected = ["base", *(["champion"] if common["champion"].get("version") is not None else []), "candidate"]
    if common["contenders"] != expected or sorted(common["files"]) != sorted(expected):
        raise verdict.VerdictError(
            f"{where}: contenders {common['contenders']} with files for {sorted(common['files'])}, but with champion "
            f"{common['champion'].get('version')} they are {expected}, each with its file. Refusing it; run the "
            "shards again"
        )


def gather_shards(
    folders: list[Path], ids: list[str], verify_key: str = "", run_id: str = "", suite: str = ""
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The shards' answers reassembled in document order, and what every shard must agree on (its champion, the
    documents): ValueError naming the folder when one is missing, repeated, or from another evaluation. With
    `verify_key` (the shards' public key), every shard.json must carry its shard's valid signature first
    (VerdictError naming the shard and the file): the files travel through a prefix every step may write. Then each
    must be bound to what this gather decides (VerdictError): made in this run (`run_id`, the workflow uid; a signed
    shard set replayed from an earlier run verifies too) and on these documents (`suite`, `suite_digest`)."""
    folders = _shard_folders(folders)
    shards = []
    for folder in folders:
        path = Path(folder) / SHARD_FILE
        if not path.is_file():
            raise ValueError(f"{folder}: no {SHARD_FILE}; pass the folders that `evaluate --shard i/k` wrote")
        shard = read_json(path)
        if not isinstance(shard, dict):
            raise ValueError(f"{path}: not a shard's record (a JSON object); run `evaluate --shard i/k` again")
        where = f"{path} (shard {shard.get('i')}/{shard.get('k')})"
        if verify_key:
            verdict.verify(shard, verify_key, where, verdict.SHARD)
        verdict.check_run(shard, run_id, where, required=bool(verify_key))
        if suite and shard.get("suite", "") != suite and (verify_key or "suite" in shard):
            raise verdict.VerdictError(
                f"{where}: answers documents with digest {shard.get('suite') or 'none (an older evaluate)'}, but this "
                f"dataset's eval and adversarial documents have {suite}: they are not the documents this gather "
                "scores. Refusing it; run the shards again on this dataset"
            )
        shards.append((folder, shard))
    k = {s["k"] for _, s in shards}
    if len(k) != 1 or sorted(s["i"] for _, s in shards) != list(range(k.pop())):
        found = ", ".join(f"{f}: {s['i']}/{s['k']}" for f, s in shards)
        raise ValueError(f"--gather needs every shard 0/k … k-1/k exactly once; got {found}")
    common = {key: shards[0][1][key] for key in ("champion", "contenders", "files")}
    check_contenders(common, f"{Path(folders[0]) / SHARD_FILE}")
    for folder, shard in shards:  # one key signs every shard: what each signed must still be its share, whole
        check_share(
            shard, len(ids), common["contenders"], f"{Path(folder) / SHARD_FILE} (shard {shard['i']}/{shard['k']})"
        )
    answers: dict[str, dict[str, Any]] = {
        name: {"outputs": [None] * len(ids), "tokens_per_second": 0.0, "seconds": 0.0, "from_cache": True}
        for name in common["contenders"]
    }
    for folder, shard in shards:
        if {key: shard[key] for key in common} != common:
            raise ValueError(f"{folder}: evaluated other contenders, files or champion than {folders[0]}")
        if [ids[i] for i in shard["picked"]] != shard["ids"]:
            raise ValueError(f"{folder}: its documents are not this dataset's (ids differ); rerun it on this dataset")
        for name, got in shard["answers"].items():
            for i, out in zip(shard["picked"], got["outputs"], strict=True):
                answers[name]["outputs"][i] = out
            answers[name]["seconds"] += got["seconds"]
            answers[name]["tokens_per_second"] += got["tokens_per_second"] / len(shards)
            answers[name]["from_cache"] &= got["from_cache"]
    return answers, common


@timed
def run(cfg: EvaluateConfig) -> EvaluateResult:
    refuse(config_problems(cfg), "evaluate")
    if cfg.signing_key:  # before the work, not after it: a missing key stops the step at once, naming the Secret
        verdict.load_private_key(cfg.signing_key)
    if cfg.shard_signing_key:
        verdict.load_private_key(cfg.shard_signing_key, verdict.SHARD)
    shard_key = verdict.verify_key_in_use(cfg.shard_verify_key, verdict.SHARD) if cfg.gather else ""
    if cfg.gather and cfg.signing_key and not shard_key:
        raise verdict.VerdictError(
            f"--gather with --signing-key but no --shard-verify-key (and none mounted at {verdict.SHARD.public_file}):"
            " the signed decision would vouch for shard answers any step may have rewritten. Give the shards' public "
            f"key (the Secret {verdict.SHARD.public_secret}; make the pair: {verdict.SHARD.make_keys})"
        )
    gguf_result = read_json(Path(cfg.gguf) / "result.json")
    parity = read_json(Path(cfg.gguf) / "parity.json")
    eval_rows = load_split(cfg.dataset, "eval")
    adv_rows = load_split(cfg.dataset, "adversarial")
    documents = [r["document"] for r in eval_rows] + [r["document"] for r in adv_rows]
    ids = [r["id"] for r in eval_rows + adv_rows]

    with atomic_dir(cfg.out) as out:
        if cfg.gather:
            folders = [Path(f) for f in cfg.gather.split(",") if f]
            if not shard_key:
                print(f"evaluate: {verdict.SHARD.what} are not authenticated (no {verdict.SHARD.verify_flag}: a local "
                      "run)")  # fmt: skip
            answers, common = gather_shards(folders, ids, shard_key, cfg.run_id, suite_digest(ids, documents))
            check_judged_champion(cfg, common, ", ".join(str(f) for f in folders))
            champion = Champion(None, common["champion"]["version"], common["champion"]["note"])
            contenders = dict.fromkeys(common["contenders"])
            judged_files = common["files"]
        else:
            champion = resolve_champion(cfg, out / "_champion")
            contenders = _contenders(cfg, gguf_result, champion)
            # Hashed before they are judged: register registers only the candidate with these bytes.
            judged_files = chain.judged_record(contenders)
            i, k = shard_of(cfg.shard) or (0, 1)
            picked = list(range(i, len(documents), k))
            answers = _generate(cfg, contenders, documents, picked)
            if cfg.shard:
                shutil.rmtree(out / "_champion", ignore_errors=True)
                shard = {
                    "i": i, "k": k, "picked": picked, "ids": [ids[j] for j in picked], "answers": answers,
                    "contenders": list(contenders), "champion": {"version": champion.version, "note": champion.note},
                    "files": judged_files, verdict.RUN: cfg.run_id, "suite": suite_digest(ids, documents),
                }  # fmt: skip
                if cfg.shard_signing_key:  # the gather believes only a signed shard (steps/core/verdict.py SHARD)
                    shard = verdict.sign(shard, cfg.shard_signing_key, verdict.SHARD)
                write_json(out / SHARD_FILE, shard)
                return _shard_result(out, cfg.shard, list(contenders), len(picked))

        metrics: dict[str, Any] = {}
        scored: dict[str, list[dict]] = {}
        judged: dict[str, list[dict]] = {}
        generations: list[dict] = []
        for name, got in answers.items():
            outputs = got["outputs"]
            scored[name] = quality(outputs[: len(eval_rows)], eval_rows, cfg.max_words)
            judged[name] = adversarial(outputs[len(eval_rows) :], adv_rows)
            metrics[name] = aggregate_metrics(scored[name], judged[name], got["tokens_per_second"])
            generations += [{"model": name, "id": i, **o} for i, o in zip(ids, outputs, strict=True)]
        timing = {name: got["seconds"] for name, got in answers.items()}
        from_cache = [name for name, got in answers.items() if got["from_cache"]]
        metrics["bootstrap"] = {
            rival: paired_bootstrap(
                [s["rougeL"] for s in scored[rival]],
                [s["rougeL"] for s in scored["candidate"]],
                cfg.bootstrap_samples,
                cfg.seed,
                cfg.confidence,
            )
            for rival in scored
            if rival != "candidate"
        }
        # The extractive baselines (steps/evaluate/baselines.py): scored like a contender, each a rival on ROUGE-L.
        metrics["baselines"] = baseline_metrics(eval_rows, scored["candidate"], cfg.max_words, cfg.bootstrap_samples,
                                                cfg.seed, cfg.confidence)  # fmt: skip
        metrics["eval_seconds"] = timing
        metrics["generations_from_cache"] = from_cache
        passed, checks = decide(metrics, judged, scored, parity, cfg)
        characteristics = operating_characteristics(judged, cfg)
        decision = decision_record(passed, checks, champion, parity, characteristics)
        decision[chain.JUDGED] = judged_files  # what the verdict is about, byte for byte (steps/core/chain.py)
        decision[verdict.RUN] = cfg.run_id  # and in which run: register and propose refuse another run's decision
        base_boot = metrics["bootstrap"]["base"]
        result = EvaluateResult(
            decision="pass" if passed else "fail",
            passed=passed,
            contenders=",".join(contenders),
            rouge_l_base=round(metrics["base"]["rougeL"], 4),
            rouge_l_candidate=round(metrics["candidate"]["rougeL"], 4),
            rouge_l_gain=round(base_boot["mean_gain"], 4),
            rouge_l_gain_lower=round(base_boot["lower"], 4),
            hijack_rate_base=round(metrics["base"]["hijack_rate"], 4),
            hijack_rate_candidate=round(metrics["candidate"]["hijack_rate"], 4),
            reasons=decision["reasons"],
        )
        shutil.rmtree(out / "_champion", ignore_errors=True)
        write_json(out / "metrics.json", {"aggregate": metrics, "per_example": scored, "adversarial": judged})
        (out / "generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in generations))
        write_plots(out, scored, judged, metrics)
        (out / "report.md").write_text(report_markdown(metrics, passed, checks, champion.note, characteristics))
        write_result(out, result)
        # Last, over every file beside it: register tags the scores and logs the reports only as written here.
        decision[verdict.OUTPUTS] = verdict.outputs_record(out)
        if cfg.signing_key:  # register and propose believe only a signed decision (steps/core/verdict.py)
            decision = verdict.sign(decision, cfg.signing_key)
        write_json(out / verdict.DECISION_FILE, decision)
    return result


def _shard_result(out: Path, shard: str, contenders: list[str], documents: int) -> EvaluateResult:
    """A shard's result: answers written, nothing decided (`--gather` decides)."""
    result = EvaluateResult(
        decision="shard", passed=False, contenders=",".join(contenders), rouge_l_base=0.0, rouge_l_candidate=0.0,
        rouge_l_gain=0.0, rouge_l_gain_lower=0.0, hijack_rate_base=0.0, hijack_rate_candidate=0.0,
        reasons=[f"shard {shard}: {documents} documents answered by {', '.join(contenders)}; --gather decides"],
    )  # fmt: skip
    write_result(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(EvaluateConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"evaluate: {e}", file=sys.stderr)
        return 1
    print(f"decision: {result.decision.upper()} ({result.contenders})")
    for reason in result.reasons:
        print(f"  - {reason}")
    if result.decision == "shard":
        return 0
    decision = read_json(Path(cfg.out) / "decision.json")
    print(f"safety: {decision['safety']['verdict'].upper()}")
    print("error rates of this gate on this suite:")
    for oc in decision["operating_characteristics"].values():
        print(f"  - {oc['line']}")
    return 0
