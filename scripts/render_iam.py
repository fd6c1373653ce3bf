"""Render the cross-account grant — both halves — from one settings file.

    python scripts/render_iam.py                                     # rewrite the committed example (infra/)
    python scripts/render_iam.py --check                             # exit 1 if a committed file is stale
    python scripts/render_iam.py --settings mine.yaml --out build/aws   # your accounts; apply what it writes

Training account (infra/iam/): the IRSA trust policy of the pods' role (only the step and Ray service accounts of one
namespace, audience sts.amazonaws.com) and its identity policy (exact buckets and prefixes, `s3:prefix` on every
ListBucket, `aws:ResourceAccount` on every Allow, TLS only, KMS through S3 only). Both accounts' buckets (infra/s3/):
bucket policies that grant the role exactly what the identity policy does, deny every other outside principal and
deny plain HTTP; and, for each bucket encrypted with a KMS key, the key-policy statement that lets the role use the
key through S3 (merge it into the key's policy). Account ids, bucket names, the namespace, the OIDC provider and the
keys are settings (infra/iam/settings.yaml); the Argo artifact bucket and its prefixes are the templates' own
(workflows/distill.py, infra/artifact-repository.yaml), read from there.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "infra/iam/settings.yaml"
VERSION = "2012-10-17"
STS_AUDIENCE = "sts.amazonaws.com"
# DVC 3 keeps a remote's content-addressed objects under <remote>/files/md5/; `dvc push` writes only there.
DVC_CACHE = "files/md5"
READ = ["s3:GetObject"]
# Multipart uploads (large GGUFs, checkpoints) are PutObject's; an aborted one needs its own action.
WRITE = ["s3:PutObject", "s3:AbortMultipartUpload"]
DELETE = ["s3:DeleteObject"]

ACCOUNT = re.compile(r"^\d{12}$")
BUCKET = re.compile(r"^(?!xn--)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$")
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d$")
KMS_KEY = re.compile(r"^arn:aws:kms:([a-z0-9-]+):(\d{12}):key/[A-Za-z0-9-]+$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
OIDC = re.compile(r"^oidc\.eks\.[a-z0-9-]+\.amazonaws\.com/id/[A-Z0-9]+$")
ROLE = re.compile(r"^[\w+=,.@-]{1,64}$")
TOP_KEYS = {
    "training_account": str,
    "home_account": str,
    "role_name": str,
    "oidc_provider": str,
    "namespace": str,
    "service_accounts": list,
    "artifact_bucket": dict,
    "mlflow_bucket": dict,
    "dvc_bucket": dict,
}
BUCKET_KEYS = {
    "artifact_bucket": {"region", "kms_key_arn"},
    "mlflow_bucket": {"name", "prefix", "region", "kms_key_arn"},
}
BUCKET_KEYS["dvc_bucket"] = BUCKET_KEYS["mlflow_bucket"]


@dataclass(frozen=True)
class Bucket:
    """One bucket of the grant: who owns it, and which prefixes the role may list, read, write and delete."""

    key: str  # the settings key, also the rendered files' stem (mlflow-bucket-policy.json …)
    name: str
    account: str
    region: str
    kms_key_arn: str
    read: tuple[str, ...]
    write: tuple[str, ...]
    delete: tuple[str, ...]

    @property
    def arn(self) -> str:
        return f"arn:aws:s3:::{self.name}"

    def objects(self, prefixes: tuple[str, ...]) -> list[str]:
        return [f"{self.arn}/{p}/*" for p in prefixes]


@dataclass(frozen=True)
class Settings:
    training_account: str
    home_account: str
    role_name: str
    oidc_provider: str
    namespace: str
    service_accounts: tuple[str, ...]
    buckets: tuple[Bucket, ...]

    @property
    def role_arn(self) -> str:
        return f"arn:aws:iam::{self.training_account}:role/{self.role_name}"


def artifact_prefixes(root: Path = ROOT) -> tuple[str, str, tuple[str, ...]]:
    """The Argo artifact bucket, the step folders' top prefix and the run/cache prefixes, as the templates use them."""
    sys.path.insert(0, str(root))
    from workflows import distill

    repo = yaml.safe_load((root / "infra/artifact-repository.yaml").read_text())
    default = repo["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    s3 = yaml.safe_load(repo["data"][default])["s3"]
    if s3["bucket"] != distill.BUCKET:
        raise SystemExit(
            f"infra/artifact-repository.yaml names bucket {s3['bucket']!r}, the templates {distill.BUCKET!r}"
        )
    caches = {uri.removeprefix(f"s3://{distill.BUCKET}/").split("/")[0] for _, uri in distill.SHARED_CACHES.values()}
    return distill.BUCKET, s3["keyFormat"].split("/")[0], (distill.RUN_PREFIX.split("/")[0], *sorted(caches))


def load(path: Path, root: Path = ROOT) -> Settings:
    """Read and check the settings; one error naming every bad field and what it should be."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SystemExit(f"{path}: cannot read the settings: {e}") from e
    problems: list[str] = []

    def bad(field: str, why: str) -> None:
        problems.append(f"{path}: {field}: {why}")

    if not isinstance(raw, dict):
        raise SystemExit(f"{path}: expected a mapping of settings (see infra/iam/settings.yaml)")
    for key in sorted(set(raw) - set(TOP_KEYS)):
        bad(key, f"unknown setting; known: {', '.join(TOP_KEYS)}")
    for key, kind in TOP_KEYS.items():
        if not isinstance(raw.get(key), kind):
            bad(key, f"missing or not a {kind.__name__}")
    if problems:
        raise SystemExit("\n".join(problems))
    training, home = raw["training_account"], raw["home_account"]
    for key in ("training_account", "home_account"):
        if not ACCOUNT.match(raw[key]):
            bad(key, f"{raw[key]!r} is not a 12-digit AWS account id (quote it: YAML drops leading zeros)")
    if training == home:
        bad("home_account", "equals training_account: the grant joins two accounts (one account needs no grant)")
    if not ROLE.match(raw["role_name"]):
        bad("role_name", f"{raw['role_name']!r} is not an IAM role name (1-64 of letters, digits, +=,.@_-)")
    if not OIDC.match(raw["oidc_provider"]):
        bad("oidc_provider", f"{raw['oidc_provider']!r}: expected oidc.eks.<region>.amazonaws.com/id/<ID>, no https://")
    if not DNS_LABEL.match(raw["namespace"]):
        bad("namespace", f"{raw['namespace']!r} is not a Kubernetes namespace name")
    if not raw["service_accounts"] or not all(
        isinstance(s, str) and DNS_LABEL.match(s) for s in raw["service_accounts"]
    ):
        bad("service_accounts", "a non-empty list of Kubernetes service account names")
    owners = {"artifact_bucket": training, "mlflow_bucket": home, "dvc_bucket": home}
    for key, account in owners.items():
        spec = raw[key]
        for extra in sorted(set(spec) - BUCKET_KEYS[key]):
            bad(f"{key}.{extra}", f"unknown setting; known: {', '.join(sorted(BUCKET_KEYS[key]))}")
        for need in sorted(BUCKET_KEYS[key] - set(spec)):
            bad(f"{key}.{need}", "missing")
        if "name" in spec and not BUCKET.match(str(spec["name"])):
            bad(f"{key}.name", f"{spec['name']!r} is not an S3 bucket name")
        if "prefix" in spec and not PREFIX.match(str(spec["prefix"])):
            bad(f"{key}.prefix", f"{spec['prefix']!r}: a key prefix without leading or trailing '/' (e.g. 'store')")
        if "region" in spec and not REGION.match(str(spec["region"])):
            bad(f"{key}.region", f"{spec['region']!r} is not an AWS region")
        kms = str(spec.get("kms_key_arn", ""))
        if kms and not (m := KMS_KEY.match(kms)):
            bad(f"{key}.kms_key_arn", f"{kms!r}: expected arn:aws:kms:<region>:<account>:key/<id>, or '' for SSE-S3")
        elif kms and (m.group(1), m.group(2)) != (spec.get("region"), account):
            bad(
                f"{key}.kms_key_arn",
                f"the key must be in the bucket's region and account ({spec.get('region')}, {account})",
            )
    if raw["mlflow_bucket"].get("name") == raw["dvc_bucket"].get("name"):
        bad("dvc_bucket.name", "the same bucket as mlflow_bucket.name: give DVC and MLflow a bucket each")
    if problems:
        raise SystemExit("\n".join(problems))

    name, steps, run_and_caches = artifact_prefixes(root)
    art, mlf, dvc = raw["artifact_bucket"], raw["mlflow_bucket"], raw["dvc_bucket"]
    buckets = (
        # Argo's executor reads and writes each step's folder; the steps read, write and prune (superseded
        # checkpoints, torn cache entries) their run's prefix and the shared caches.
        Bucket("artifact-bucket", name, training, art["region"], art["kms_key_arn"],
               read=(steps, *run_and_caches), write=(steps, *run_and_caches), delete=run_and_caches),
        # register logs the model version's files; evaluate downloads the champion's. MLflow never deletes.
        Bucket("mlflow-bucket", mlf["name"], home, mlf["region"], mlf["kms_key_arn"],
               read=(mlf["prefix"],), write=(mlf["prefix"],), delete=()),
        # fetch-dataset and check-triggers read; build-dataset's dvc push adds content-addressed objects, nothing else.
        Bucket("dvc-bucket", dvc["name"], home, dvc["region"], dvc["kms_key_arn"],
               read=(dvc["prefix"],), write=(f"{dvc['prefix']}/{DVC_CACHE}",), delete=()),
    )  # fmt: skip
    return Settings(training, home, raw["role_name"], raw["oidc_provider"], raw["namespace"],
                    tuple(raw["service_accounts"]), buckets)  # fmt: skip


def _sid(bucket: Bucket, what: str) -> str:
    return "".join(part.capitalize() for part in bucket.key.split("-")) + what


def _s3_grants(bucket: Bucket, owner_condition: dict) -> list[dict]:
    """What the role may do in `bucket`: the statements both halves carry (the bucket policy adds a Principal)."""
    out = [
        {
            "Sid": _sid(bucket, "List"),
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [bucket.arn],
            # Listing is by prefix only: a listing of the whole bucket (no s3:prefix) is refused.
            "Condition": {"StringLike": {"s3:prefix": [f"{p}/*" for p in bucket.read]}, **owner_condition},
        },
        {"Sid": _sid(bucket, "Read"), "Effect": "Allow", "Action": READ, "Resource": bucket.objects(bucket.read)},
        {"Sid": _sid(bucket, "Write"), "Effect": "Allow", "Action": WRITE, "Resource": bucket.objects(bucket.write)},
    ]
    if bucket.delete:
        out.append(
            {
                "Sid": _sid(bucket, "Delete"),
                "Effect": "Allow",
                "Action": DELETE,
                "Resource": bucket.objects(bucket.delete),
            }
        )
    for st in out[1:]:
        if owner_condition:
            st["Condition"] = owner_condition
    return out


def identity_policy(s: Settings) -> dict:
    statements: list[dict] = []
    for b in s.buckets:
        # aws:ResourceAccount: the bucket must belong to the account we mean, so a same-named bucket elsewhere
        # (a deleted bucket's name taken by someone else) gets nothing.
        statements += _s3_grants(b, {"StringEquals": {"aws:ResourceAccount": b.account}})
    keys = [b for b in s.buckets if b.kms_key_arn]
    for b in keys:
        statements.append(
            {
                "Sid": _sid(b, "KmsViaS3"),
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": [b.kms_key_arn],
                "Condition": {
                    "StringEquals": {"kms:ViaService": f"s3.{b.region}.amazonaws.com"},
                    "StringLike": _s3_encryption_context(b),
                },
            }
        )
    statements.append(
        {
            "Sid": "DenyPlainHttp",
            "Effect": "Deny",
            "Action": ["s3:*"],
            "Resource": ["*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    )
    return {"Version": VERSION, "Statement": statements}


def trust_policy(s: Settings) -> dict:
    issuer = s.oidc_provider
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "StepAndRayServiceAccounts",
                "Effect": "Allow",
                "Principal": {"Federated": f"arn:aws:iam::{s.training_account}:oidc-provider/{issuer}"},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{issuer}:aud": STS_AUDIENCE,
                        f"{issuer}:sub": [f"system:serviceaccount:{s.namespace}:{sa}" for sa in s.service_accounts],
                    }
                },
            }
        ],
    }


def bucket_policy(s: Settings, b: Bucket) -> dict:
    everything = [b.arn, f"{b.arn}/*"]
    grants = [
        {"Sid": "DistilleryRole" + st.pop("Sid"), "Effect": st.pop("Effect"), "Principal": {"AWS": s.role_arn}, **st}
        for st in _s3_grants(b, {})
    ]
    return {
        "Version": VERSION,
        "Statement": [
            *grants,
            {
                # Whatever else is ever granted here by mistake, nobody outside the owning account except the role.
                "Sid": "DenyOtherOutsidePrincipals",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:*"],
                "Resource": everything,
                "Condition": {
                    "StringNotEquals": {"aws:PrincipalAccount": b.account},
                    "ArnNotEquals": {"aws:PrincipalArn": s.role_arn},
                },
            },
            {
                "Sid": "DenyPlainHttp",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:*"],
                "Resource": everything,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


def _s3_encryption_context(b: Bucket) -> dict:
    """S3 names what a data key is for: the bucket (with S3 Bucket Keys) or the object. Only this bucket's."""
    return {"kms:EncryptionContext:aws:s3:arn": [b.arn, f"{b.arn}/*"]}


def key_policy_statement(s: Settings, b: Bucket) -> dict:
    """The statement to add to the bucket's KMS key policy: the role may use the key through S3 in the key's region,
    for this bucket's objects only."""
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": f"Distillery{_sid(b, 'ViaS3')}",
                "Effect": "Allow",
                "Principal": {"AWS": s.role_arn},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {
                        "kms:ViaService": f"s3.{b.region}.amazonaws.com",
                        "kms:CallerAccount": s.training_account,
                    },
                    "StringLike": _s3_encryption_context(b),
                },
            }
        ],
    }


def rendered(s: Settings) -> dict[str, dict]:
    """Every file of the grant, by path relative to the output folder."""
    out = {
        "iam/distillery-workflows-trust-policy.json": trust_policy(s),
        "iam/distillery-workflows-policy.json": identity_policy(s),
    }
    for b in s.buckets:
        out[f"s3/{b.key}-policy.json"] = bucket_policy(s, b)
        if b.kms_key_arn:
            out[f"s3/{b.key}-kms-key-policy-statement.json"] = key_policy_statement(s, b)
    return out


def text(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=Path, default=SETTINGS, help="settings file (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=ROOT / "infra", help="folder to write iam/ and s3/ under")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a file is stale or missing")
    args = parser.parse_args(argv)
    stale = []
    for rel, doc in rendered(load(args.settings)).items():
        path = args.out / rel
        if path.exists() and path.read_text() == text(doc):
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text(doc))
        print(f"{'stale' if args.check else 'wrote'} {path}")
    if args.check and stale:
        print("run `python scripts/render_iam.py` and commit the result", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
