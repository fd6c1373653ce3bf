"""The gate's verdict, authenticated: evaluate signs `decision.json`; register and propose believe only a decision whose
signature holds, and only for the version whose bytes it names.

Why a signature: `decision.json` and register's `result.json` travel through the run's S3 prefix (`distill/*`), which
the shared steps role writes (every step but register, the Ray pods). A hash recorded in a file that role may rewrite
vouches for nothing: the audit put the base model's GGUF under the candidate's name, rewrote `passed` and
`files.candidate.sha256`, and register registered it (issue 37).

Why asymmetric (Ed25519): the deciding step (evaluate's `--gather`, or a whole evaluate) holds the private key, mounted
from the Secret `distillery-verdict-key` into that one template; register and propose hold only the public key (the
Secret `distillery-verdict-public`). A shared HMAC key would let every verifier forge, and the verifiers are exactly the
pods with the most reach (register writes MLflow's artifacts). The admission policy (infra/admission/step-pods.yaml)
keeps the private key's Secret out of every other step pod, whatever its podSpecPatch says.

What is signed: the whole decision, as canonical JSON (keys sorted, no whitespace, ASCII, `default=str` as
`write_json` writes it), without its `signature` field. The signature record names the algorithm and the key (sha256
of the raw public key), so a rotated key is named in the refusal.

Make a key pair (OpenSSL ≥ 1.1.1):

    openssl genpkey -algorithm ed25519 -out private-key
    openssl pkey -in private-key -pubout -out public-key

The shards' answers: on the cluster the gather decides on `shard.json` files that travel through the same prefix.
Each shard signs its answers with a key of its own (`SHARD`: the Secret `distillery-shard-key`, mounted into the shard
pods only), and the gather verifies every shard with its public half before reading a line of it, and signs no
decision over answers it could not verify. A separate key, because a shard runs llama.cpp on GGUFs other roles write:
what takes over a shard can sign answers, never a decision. See docs/security.md ("Threat model").

Bound to the run: a record signed in an earlier run verifies as well as this run's. Shards and decision carry the run
they were made in (`RUN`, evaluate's `--run-id`: on Argo the workflow uid, which the template writes), and every
reader holds it to its own (`check_run`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.core.chain import JUDGED, SHA256_TAG, ChainError, manifest, manifest_problems

SIGNATURE = "signature"  # the signed record's field holding the signature
ALGORITHM = "ed25519"
DECISION_TAG = "eval.decision"  # on the model version: "pass" or "fail", from the verified decision (register)
PASS, FAIL = "pass", "fail"


@dataclass(frozen=True)
class Signer:
    """One signing duty: who signs what with which key pair, where the cluster mounts each half (workflows/security.py
    mounts them; the steps' flags default to nothing) and which flags name them."""

    what: str  # the record signed, as refusals name it
    signer: str  # the one step holding the private half
    private_secret: str
    public_secret: str
    key_dir: str
    sign_flag: str
    verify_flag: str

    @property
    def private_file(self) -> str:
        return f"{self.key_dir}/private-key"

    @property
    def public_file(self) -> str:
        return f"{self.key_dir}/public-key"

    @property
    def make_keys(self) -> str:
        """The shell commands that make the pair and store each half in its Secret (the private key never leaves it)."""
        return (
            "openssl genpkey -algorithm ed25519 -out private-key && openssl pkey -in private-key -pubout -out "
            f"public-key; kubectl -n distillery create secret generic {self.private_secret} --from-file=private-key "
            f"&& kubectl -n distillery create secret generic {self.public_secret} --from-file=public-key"
        )


# The gate's decision: signed by evaluate's gather (or a whole evaluate), verified by register and propose.
DECISION = Signer("the decision", "evaluate", "distillery-verdict-key", "distillery-verdict-public",
                  "/var/run/secrets/distillery-verdict", "--signing-key", "--verify-key")  # fmt: skip
# A shard's answers (`shard.json`): signed by evaluate's shard pods, verified by the gather before it decides on them.
# A key of their own, not the decision's: a shard runs llama.cpp on GGUFs other roles write, so a file that exploits
# llama.cpp could take the key a shard holds; with this one it can sign answers, never a decision.
SHARD = Signer("the shard's answers", "evaluate --shard", "distillery-shard-key", "distillery-shard-public",
               "/var/run/secrets/distillery-shard", "--shard-signing-key", "--shard-verify-key")  # fmt: skip
SIGNERS = (DECISION, SHARD)
# The decision's names, as the rest of the project reads them.
PRIVATE_KEY_SECRET, PUBLIC_KEY_SECRET = DECISION.private_secret, DECISION.public_secret
KEY_DIR, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE = DECISION.key_dir, DECISION.private_file, DECISION.public_file
MAKE_KEYS = DECISION.make_keys


class VerdictError(ChainError):
    """The decision is not the one the deciding step signed, or not about the bytes or version it is used for."""


def canonical(record: dict[str, Any]) -> bytes:
    """The bytes signed: the record without its signature, as `write_json` would store it, canonically encoded."""
    stored = json.loads(json.dumps({k: v for k, v in record.items() if k != SIGNATURE}, default=str))
    return json.dumps(stored, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _read_key(path: str, what: str, flag: str, signer: Signer) -> bytes:
    secret = signer.private_secret if what == "private" else signer.public_secret
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise VerdictError(
            f"{flag} {path}: cannot read the {what} key that signs {signer.what} ({e.strerror}). On the cluster it is "
            f"the Secret {secret}; make the pair and create both Secrets: {signer.make_keys}"
        ) from e


def key_id(public_key: Any) -> str:
    """sha256 of the raw public key, hex: names the key in the signature record and in refusals."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_private_key(path: str, signer: Signer = DECISION) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    flag = signer.sign_flag
    data = _read_key(path, "private", flag, signer)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise VerdictError(
            f"{flag} {path}: not an unencrypted PEM private key ({e}); make one: {signer.make_keys}"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise VerdictError(f"{flag} {path}: a {type(key).__name__}, not an Ed25519 key; make one: {signer.make_keys}")
    return key


def load_public_key(path: str, signer: Signer = DECISION) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    flag = signer.verify_flag
    data = _read_key(path, "public", flag, signer)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise VerdictError(f"{flag} {path}: not a PEM public key ({e}); make the pair: {signer.make_keys}") from e
    if not isinstance(key, Ed25519PublicKey):
        raise VerdictError(f"{flag} {path}: a {type(key).__name__}, not an Ed25519 key; make one: {signer.make_keys}")
    return key


def sign(record: dict[str, Any], private_key_file: str, signer: Signer = DECISION) -> dict[str, Any]:
    """The record with its signature record (`signature`: algorithm, key id, base64 value)."""
    key = load_private_key(private_key_file, signer)
    value = base64.b64encode(key.sign(canonical(record))).decode()
    signature = {"algorithm": ALGORITHM, "key": key_id(key.public_key()), "value": value}
    return {**{k: v for k, v in record.items() if k != SIGNATURE}, SIGNATURE: signature}


def verify(record: dict[str, Any], public_key_file: str, where: str, signer: Signer = DECISION) -> None:
    """Refuse (VerdictError naming `where` and the fix) a record that the holder of `signer`'s private key did not
    sign exactly as it is."""
    from cryptography.exceptions import InvalidSignature

    key = load_public_key(public_key_file, signer)
    found = record.get(SIGNATURE)
    if not isinstance(found, dict) or not found.get("value"):
        raise VerdictError(
            f"{where}: {signer.what} carries no signature; only {signer.signer}, holding the Secret "
            f"{signer.private_secret}, signs one ({signer.sign_flag}). Refusing it: run {signer.signer} again with "
            "its key"
        )
    if found.get("algorithm") != ALGORITHM:
        raise VerdictError(f"{where}: signature algorithm {found.get('algorithm')!r}, not {ALGORITHM!r}; refusing it")
    if found.get("key") != key_id(key):
        raise VerdictError(
            f"{where}: signed with key {found.get('key')}, but {signer.verify_flag} {public_key_file} is key "
            f"{key_id(key)}: {signer.what} was signed by another key (a rotated one?). Refusing it; put the public "
            f"half of {signer.private_secret} in {signer.public_secret}, or run {signer.signer} again"
        )
    try:
        key.verify(base64.b64decode(found["value"], validate=True), canonical(record))
    except (InvalidSignature, ValueError) as e:
        raise VerdictError(
            f"{where}: the signature does not match {signer.what}: it was changed after {signer.signer} signed it. "
            f"Refusing it; find what writes to the run's prefix, then run the pipeline again from {signer.signer}"
        ) from e


def verify_key_in_use(public_key_file: str, signer: Signer | None = None) -> str:
    """The public key to verify with: `public_key_file`, or the one mounted at `signer.public_file` (the decision's
    by default) whatever the flag says (a pod whose arguments were patched to an empty flag still verifies); '' when
    neither (a local run)."""
    signer = signer or DECISION
    return public_key_file or (signer.public_file if Path(signer.public_file).is_file() else "")


def checked(record: dict[str, Any], public_key_file: str, where: str, signer: Signer | None = None) -> dict[str, Any]:
    """The record, after its signature is verified (`verify_key_in_use`). No key: a local run, where the folders are
    the user's own; said on stdout, never silent."""
    signer = signer or DECISION
    key = verify_key_in_use(public_key_file, signer)
    if key:
        verify(record, key, where, signer)
    else:
        print(f"{where}: {signer.what} is not authenticated (no {signer.verify_flag}: a local run)")
    return record


RUN = "run"  # in shard.json and decision.json: the Argo workflow uid they were made in ('' in a local run)


def check_run(record: dict[str, Any], run_id: str, where: str, required: bool) -> None:
    """Refuse a record (a shard's answers, a decision) made in another run than `run_id`, the workflow uid the
    template gave this step, which no other step can rewrite: a record signed in an earlier run verifies as well as
    this run's, and the run's prefix is written by every step (issue 37: a replayed set). `required` (the record was
    authenticated): one that names no run (written by an older evaluate) is refused too, and so is any when this step
    has no `run_id` to hold it to. Not authenticated and no `run_id`: a local run, nothing to bind to."""
    got = str(record.get(RUN) or "")
    if required and not run_id:
        raise VerdictError(
            f"{where}: authenticated, but this step was given no --run-id: it cannot tell this run's record from an "
            "earlier run's copy. Refusing it; give the run's id (on Argo: --run-id {{workflow.uid}})"
        )
    if not run_id or got == run_id or (not got and not required):
        return
    made_in = f"run {got}" if got else "no run (an older evaluate)"
    raise VerdictError(
        f"{where}: made in {made_in}, but this is run {run_id}: a record replayed from another run verifies as well "
        "as this run's own. Refusing it; find what writes to the run's prefix, then run the pipeline again from "
        "evaluate"
    )


DECISION_FILE = "decision.json"
OUTPUTS = "outputs"  # in decision.json: every other file evaluate wrote beside it, with its sha256 (chain.manifest)


def outputs_record(folder: Path) -> dict[str, str]:
    """What a decision records of the folder it is written into: every file but itself, with its sha256."""
    return {path: sha for path, sha in manifest(folder).items() if path != DECISION_FILE}


def check_outputs(decision: dict[str, Any], folder: Path, where: str, required: bool) -> None:
    """Refuse an evaluation folder whose files are not the ones the decision records (`OUTPUTS`): the scores register
    tags on the version (result.json), the metrics it logs (metrics.json) and the reports travel beside the signed
    decision through a prefix every step writes. `required` (the decision was authenticated): a decision that records
    none (an older evaluate's) is refused too; otherwise there is nothing to check against."""
    recorded = decision.get(OUTPUTS)
    if recorded is None:
        if required:
            raise VerdictError(
                f"{where} records no {OUTPUTS} (written by an older evaluate): the scores and reports beside it cannot "
                "be told from rewritten ones. Refusing it; run evaluate again"
            )
        return
    problems = manifest_problems(recorded, outputs_record(folder))
    if problems:
        raise VerdictError(
            f"{folder}: not the files evaluate wrote beside {where} ({'; '.join(problems)}): the scores, metrics or "
            "reports were changed after evaluate signed the decision. Refusing it; find what writes to the run's "
            "prefix, then run the pipeline again from evaluate"
        )


def candidate_sha256(decision: dict[str, Any], where: str) -> str:
    got = ((decision.get(JUDGED) or {}).get("candidate") or {}).get("sha256")
    if not got:
        raise VerdictError(f"{where}: records no sha256 for the candidate it judged ({JUDGED}.candidate.sha256)")
    return str(got)


def check_version(decision: dict[str, Any], tags: dict[str, str], label: str, where: str) -> None:
    """Refuse a decision that is not about this model version: the candidate it judged must be the version's GGUF
    (`gguf.sha256`), and the version's own `eval.decision` (recorded by register from the verified decision) must say
    what the decision says."""
    judged = candidate_sha256(decision, where)
    if tags.get(SHA256_TAG) != judged:
        raise VerdictError(
            f"{where} judged a candidate with sha256 {judged}, but {label} holds a GGUF with {SHA256_TAG} "
            f"{tags.get(SHA256_TAG) or 'none'}: the decision is not about this version (register's result.json names "
            "another version, or the decision was swapped). Refusing it"
        )
    said = PASS if decision.get("passed") is True else FAIL
    if tags.get(DECISION_TAG) != said:
        raise VerdictError(
            f"{label} records {DECISION_TAG}={tags.get(DECISION_TAG) or 'none'}, but {where} says {said}: "
            "the version was registered on another decision. Refusing it"
        )
