"""A private CA for the services a step reaches over TLS: a dataset git host (Gitea), an S3 endpoint (MinIO), MLflow, a
hub mirror, a teacher — behind certificates a homelab's own CA signed.

The platform team puts its CA certificate(s), PEM, in the optional ConfigMap `CONFIGMAP` under `KEY`; the templates
mount it read-only at `FILE` in every step pod, the Ray head and workers and the serving pods (workflows/security.py
`trust_volume`). Every step calls `install()` as it starts (`cli.timed`; serve's `main`; each Ray Train worker): when
the file is there and not empty it writes ONE bundle — the trust every library here had before (certifi's, which
requests and botocore use, and the system's, which OpenSSL, urllib3, httpx and git use) plus the private CAs — to the
scratch folder (`$TMPDIR`: the root filesystem is read-only) and points each library at it, for the step and every
process it starts (git, dvc's clients, llama.cpp's server):

- SSL_CERT_FILE: OpenSSL's default verify paths (Python's `ssl`, urllib3 and so dulwich — DVC's git client —,
  pygit2/libgit2, httpx as huggingface_hub uses it);
- REQUESTS_CA_BUNDLE: requests (MLflow's client, the teacher's HTTP);
- AWS_CA_BUNDLE: botocore, so boto3, aiobotocore (s3fs, dvc-s3), MLflow's S3 artifact store; pyarrow's S3 filesystem
  is given it too (steps/train/launchers.py `ray_storage`);
- GIT_SSL_CAINFO: the git command line (publish, push-adapter), whose libcurl reads no SSL_CERT_FILE.

A variable the pod already sets wins: `install` never replaces it (a team that set REQUESTS_CA_BUNDLE to its own
bundle keeps it for requests, and the others get the bundle written here). No file, or an empty one: nothing changes,
and each library keeps its public CAs. A file that is not PEM certificates stops the step with `TrustError`, naming
the ConfigMap, the key and the fix: a step would otherwise fail later on a TLS error that never names the ConfigMap.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

CONFIGMAP = "distillery-trust"
KEY = "ca.crt"
DIR = "/etc/distillery/trust"  # the ConfigMap's mount point, read-only
FILE = f"{DIR}/{KEY}"
BUNDLE = "distillery-ca-bundle.pem"  # written into $TMPDIR (the scratch emptyDir on the cluster)
VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE", "GIT_SSL_CAINFO")
CREATE = (
    f"kubectl -n distillery create configmap {CONFIGMAP} --from-file={KEY}=<your CA's certificate, PEM> "
    "--dry-run=client -o yaml | kubectl apply -f -"
)

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.S)
CERTIFICATE = "CERTIFICATE"


class TrustError(ValueError):
    """The trust ConfigMap's file is not PEM certificates."""


def certificates(text: str, where: str) -> list[str]:
    """The PEM certificate blocks of `text`, each parsed by OpenSSL. Raises TrustError listing every problem (nothing
    PEM at all, a block that is not a certificate, a certificate OpenSSL cannot read), `where` naming the source."""
    blocks = [(m.group(1), m.group(0)) for m in _BLOCK.finditer(text)]
    problems = []
    if not blocks:
        problems.append("no PEM block (-----BEGIN CERTIFICATE-----) in it: DER or another format?")
    for number, (kind, block) in enumerate(blocks, 1):
        if kind != CERTIFICATE:
            fix = "; remove it, and replace that key: a ConfigMap is not secret" if "PRIVATE KEY" in kind else ""
            problems.append(f"block {number} is a {kind}, not a CERTIFICATE{fix}")
            continue
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=block)
        except ssl.SSLError as e:
            problems.append(f"block {number} is not a certificate OpenSSL reads ({e.reason or e})")
    if problems:
        raise TrustError(
            f"{where} (ConfigMap {CONFIGMAP}, key {KEY}) is not PEM certificates:\n  " + "\n  ".join(problems)
            + f"\nPut your CA's certificate(s) there, PEM: {CREATE}; or delete the ConfigMap to trust the public CAs "
            "only."
        )  # fmt: skip
    return [block for _, block in blocks]


def default_files() -> list[Path]:
    """The trust stores the libraries here use when told nothing: certifi's (requests, botocore) and the system's
    (OpenSSL's compiled-in file: urllib3, httpx, git), each where it exists."""
    found = []
    try:
        import certifi

        found.append(Path(certifi.where()))
    except ImportError:
        pass
    found.append(Path(ssl.get_default_verify_paths().openssl_cafile))  # compiled in: not SSL_CERT_FILE's value
    return [p for p in dict.fromkeys(found) if p.is_file()]


def bundle_text(private: list[str], defaults: list[Path]) -> str:
    """One PEM bundle: every certificate of `defaults`, then the private ones; each certificate once."""
    blocks = [m.group(0) for path in defaults for m in _BLOCK.finditer(path.read_text(errors="replace"))
              if m.group(1) == CERTIFICATE]  # fmt: skip
    return "\n".join(dict.fromkeys([*blocks, *private])) + "\n"


def install(
    source: Path | None = None, folder: Path | None = None, environ: MutableMapping[str, str] = os.environ
) -> Path | None:
    """Trust the private CAs in `source` (default FILE) besides the defaults: write the bundle into `folder` (default
    $TMPDIR) and set each of VARIABLES that `environ` does not set yet to it. Returns the bundle; None (and changes
    nothing) when `source` is absent or empty. Raises TrustError when it is not PEM certificates."""
    source = source or Path(FILE)
    try:
        text = source.read_text(errors="replace")
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    private = certificates(text, str(source))
    bundle = (folder or Path(tempfile.gettempdir())) / BUNDLE
    bundle.parent.mkdir(parents=True, exist_ok=True)
    # Written whole, then renamed: the Ray workers of one pod (and nested steps) may write it at the same time.
    partial = bundle.with_name(f".{BUNDLE}.{os.getpid()}")
    partial.write_text(bundle_text(private, default_files()))
    partial.replace(bundle)
    for variable in VARIABLES:
        environ.setdefault(variable, str(bundle))
    return bundle
