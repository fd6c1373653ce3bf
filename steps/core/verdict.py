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

What a signature cannot vouch for: the inputs the deciding step read. The shards' answers (`shard.json`) and the
generation cache are written under the steps role; see docs/security.md ("Threat model").
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from steps.core.chain import JUDGED, SHA256_TAG, ChainError

SIGNATURE = "signature"  # decision.json's field holding the signature record
ALGORITHM = "ed25519"
DECISION_TAG = "eval.decision"  # on the model version: "pass" or "fail", from the verified decision (register)
PASS, FAIL = "pass", "fail"
# Where the cluster mounts the keys (workflows/security.py mounts them; the steps' flags default to nothing).
PRIVATE_KEY_SECRET = "distillery-verdict-key"
PUBLIC_KEY_SECRET = "distillery-verdict-public"
KEY_DIR = "/var/run/secrets/distillery-verdict"
PRIVATE_KEY_FILE = f"{KEY_DIR}/private-key"
PUBLIC_KEY_FILE = f"{KEY_DIR}/public-key"
MAKE_KEYS = (
    "openssl genpkey -algorithm ed25519 -out private-key && openssl pkey -in private-key -pubout -out public-key; "
    f"kubectl -n distillery create secret generic {PRIVATE_KEY_SECRET} --from-file=private-key && "
    f"kubectl -n distillery create secret generic {PUBLIC_KEY_SECRET} --from-file=public-key"
)


class VerdictError(ChainError):
    """The decision is not the one the deciding step signed, or not about the bytes or version it is used for."""


def canonical(decision: dict[str, Any]) -> bytes:
    """The bytes signed: the decision without its signature, as `write_json` would store it, canonically encoded."""
    stored = json.loads(json.dumps({k: v for k, v in decision.items() if k != SIGNATURE}, default=str))
    return json.dumps(stored, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _read_key(path: str, what: str, flag: str, secret: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise VerdictError(
            f"{flag} {path}: cannot read the verdict's {what} key ({e.strerror}). On the cluster it is the Secret "
            f"{secret}; make the pair and create both Secrets: {MAKE_KEYS}"
        ) from e


def key_id(public_key: Any) -> str:
    """sha256 of the raw public key, hex: names the key in the signature record and in refusals."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_private_key(path: str) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key(path, "private", "--signing-key", PRIVATE_KEY_SECRET)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise VerdictError(
            f"--signing-key {path}: not an unencrypted PEM private key ({e}); make one: {MAKE_KEYS}"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise VerdictError(f"--signing-key {path}: a {type(key).__name__}, not an Ed25519 key; make one: {MAKE_KEYS}")
    return key


def load_public_key(path: str) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key(path, "public", "--verify-key", PUBLIC_KEY_SECRET)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise VerdictError(f"--verify-key {path}: not a PEM public key ({e}); make the pair: {MAKE_KEYS}") from e
    if not isinstance(key, Ed25519PublicKey):
        raise VerdictError(f"--verify-key {path}: a {type(key).__name__}, not an Ed25519 key; make one: {MAKE_KEYS}")
    return key


def sign(decision: dict[str, Any], private_key_file: str) -> dict[str, Any]:
    """The decision with its signature record (`signature`: algorithm, key id, base64 value)."""
    key = load_private_key(private_key_file)
    value = base64.b64encode(key.sign(canonical(decision))).decode()
    record = {"algorithm": ALGORITHM, "key": key_id(key.public_key()), "value": value}
    return {**{k: v for k, v in decision.items() if k != SIGNATURE}, SIGNATURE: record}


def verify(decision: dict[str, Any], public_key_file: str, where: str) -> None:
    """Refuse (VerdictError naming `where` and the fix) a decision that the holder of the private key did not sign
    exactly as it is."""
    from cryptography.exceptions import InvalidSignature

    key = load_public_key(public_key_file)
    record = decision.get(SIGNATURE)
    if not isinstance(record, dict) or not record.get("value"):
        raise VerdictError(
            f"{where}: the decision carries no signature; only evaluate, holding the Secret {PRIVATE_KEY_SECRET}, "
            "signs one (--signing-key). Refusing it: run evaluate again with its key"
        )
    if record.get("algorithm") != ALGORITHM:
        raise VerdictError(f"{where}: signature algorithm {record.get('algorithm')!r}, not {ALGORITHM!r}; refusing it")
    if record.get("key") != key_id(key):
        raise VerdictError(
            f"{where}: signed with key {record.get('key')}, but --verify-key {public_key_file} is key {key_id(key)}: "
            f"the decision was signed by another key (a rotated one?). Refusing it; put the public half of "
            f"{PRIVATE_KEY_SECRET} in {PUBLIC_KEY_SECRET}, or run evaluate again"
        )
    try:
        key.verify(base64.b64decode(record["value"], validate=True), canonical(decision))
    except (InvalidSignature, ValueError) as e:
        raise VerdictError(
            f"{where}: the signature does not match the decision: it was changed after evaluate signed it. "
            "Refusing it; find what writes to the run's prefix, then run the pipeline again from evaluate"
        ) from e


def checked(decision: dict[str, Any], public_key_file: str, where: str) -> dict[str, Any]:
    """The decision, after its signature is verified. The key: `public_key_file`, or the one mounted at
    PUBLIC_KEY_FILE whatever the flag says (a pod whose arguments were patched to an empty `--verify-key` still
    verifies). Neither: a local run, where the folders are the user's own; said on stdout, never silent."""
    key = public_key_file or (PUBLIC_KEY_FILE if Path(PUBLIC_KEY_FILE).is_file() else "")
    if key:
        verify(decision, key, where)
    else:
        print(f"{where}: decision not authenticated (no --verify-key: a local run)")
    return decision


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
