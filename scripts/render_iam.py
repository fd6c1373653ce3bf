"""Render the cross-account grant — both halves — from one settings file.

    python scripts/render_iam.py                                     # rewrite the committed example (infra/)
    python scripts/render_iam.py --check                             # exit 1 if a committed file is stale
    python scripts/render_iam.py --settings mine.yaml --out build/aws   # your accounts; apply what it writes

One IAM role per duty (`DUTIES`): `steps` (every step and Ray pod: read data, write run outputs, never MLflow's
artifacts), `register` (the only writer of MLflow's artifact root, where model versions and the gate's decisions
live), `serving` (reads MLflow's artifact root, nothing else). The workflow submitter has none. Training account
(infra/iam/): each role's IRSA trust policy (only its own service accounts of one namespace, audience
sts.amazonaws.com) and identity policy (exact buckets and prefixes, `s3:prefix` on every ListBucket,
`aws:ResourceAccount` on every Allow, TLS only, KMS through S3 only). Both accounts' buckets (infra/s3/): bucket
policies that grant each role exactly what its identity policy does, deny every other outside principal, deny plain
HTTP and deny any object creation without `If-None-Match: *` under the write-once prefixes (MLflow's artifact root:
steps/core/write_once.py); and, for each bucket encrypted with a KMS key, the key-policy statement that lets the
roles use the key through S3 (merge it into the key's policy). Account ids, bucket names, role names, service
accounts, the namespace, the OIDC provider and the keys are settings (infra/iam/settings.yaml); what each duty may
reach is this file's (`load`); the Argo artifact bucket and its prefixes are the templates' own
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
# What would undo versioning (infra/s3/bucket-versioning.json) or the bucket's own rules: denied to the roles in every
# bucket policy, whatever a later identity grant says (in the artifact bucket's own account an identity grant alone
# would otherwise do).
KEEP_HISTORY = ["s3:DeleteObjectVersion", "s3:PutBucketVersioning", "s3:PutLifecycleConfiguration",
                "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"]  # fmt: skip
# Bucket settings beside the rendered policies in infra/s3/, applied as they are (not policies, not rendered):
# the artifact bucket's lifecycle rules and every bucket's versioning.
BUCKET_SETTINGS = ("-lifecycle.json", "bucket-versioning.json")

ACCOUNT = re.compile(r"^\d{12}$")
BUCKET = re.compile(r"^(?!xn--)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$")
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d$")
KMS_KEY = re.compile(r"^arn:aws:kms:([a-z0-9-]+):(\d{12}):key/[A-Za-z0-9-]+$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
OIDC = re.compile(r"^oidc\.eks\.[a-z0-9-]+\.amazonaws\.com/id/[A-Z0-9]+$")
ROLE = re.compile(r"^[\w+=,.@-]{1,64}$")
# The duties, each its own role: what each may reach is decided in `load`, who holds it in the settings.
DUTIES = ("steps", "register", "serving")
ROLE_KEYS = {"name", "service_accounts"}
TOP_KEYS = {
    "training_account": str,
    "home_account": str,
    "oidc_provider": str,
    "namespace": str,
    "roles": dict,
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
class Access:
    """The prefixes one role may list and read, write, and delete in one bucket."""

    read: tuple[str, ...]
    write: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bucket:
    """One bucket of the grant: who owns it, what each duty may do there, and which prefixes are write-once."""

    key: str  # the settings key, also the rendered files' stem (mlflow-bucket-policy.json …)
    name: str
    account: str
    region: str
    kms_key_arn: str
    access: tuple[tuple[str, Access], ...]  # (duty, its access), in DUTIES order
    # Objects here are created with If-None-Match: * (steps/core/write_once.py) and never replaced: the bucket
    # policy denies every object creation here that does not carry the header, whoever sends it.
    write_once: tuple[str, ...] = ()

    @property
    def arn(self) -> str:
        return f"arn:aws:s3:::{self.name}"

    @property
    def read(self) -> tuple[str, ...]:
        """Every prefix any duty reads here, in order."""
        return tuple(dict.fromkeys(p for _, a in self.access for p in a.read))

    def grant(self, duty: str) -> Access | None:
        return dict(self.access).get(duty)

    def objects(self, prefixes: tuple[str, ...]) -> list[str]:
        return [f"{self.arn}/{p}/*" for p in prefixes]


@dataclass(frozen=True)
class Role:
    """One duty's IAM role in the training account and the service accounts that may assume it."""

    duty: str
    name: str
    account: str
    service_accounts: tuple[str, ...]

    @property
    def arn(self) -> str:
        return f"arn:aws:iam::{self.account}:role/{self.name}"


@dataclass(frozen=True)
class Settings:
    training_account: str
    home_account: str
    oidc_provider: str
    namespace: str
    roles: tuple[Role, ...]
    buckets: tuple[Bucket, ...]

    def role(self, duty: str) -> Role:
        return next(r for r in self.roles if r.duty == duty)


def artifact_prefixes(root: Path = ROOT) -> tuple[str, str, tuple[str, ...]]:
    """The Argo artifact bucket, the step folders' top prefix and the run/cache prefixes, as the templates use them."""
    sys.path.insert(0, str(root))
    from workflows import deploy, distill

    repo = yaml.safe_load((root / "infra/artifact-repository.yaml").read_text())
    default = repo["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    s3 = yaml.safe_load(repo["data"][default])["s3"]
    if s3["bucket"] != distill.BUCKET:
        raise SystemExit(
            f"infra/artifact-repository.yaml names bucket {s3['bucket']!r}, the templates {distill.BUCKET!r}"
        )
    shared = [d.shared_cache for d in deploy.DEPLOY.values() if d.shared_cache]
    caches = {uri.removeprefix(f"s3://{deploy.BUCKET}/").split("/")[0] for _, uri in shared}
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
    roles = raw["roles"]
    for duty in sorted(set(roles) - set(DUTIES)):
        bad(f"roles.{duty}", f"unknown duty; known: {', '.join(DUTIES)}")
    for duty in DUTIES:
        spec = roles.get(duty)
        if not isinstance(spec, dict) or set(spec) != ROLE_KEYS:
            bad(f"roles.{duty}", f"missing, or not a mapping of exactly {', '.join(sorted(ROLE_KEYS))}")
            continue
        if not (isinstance(spec["name"], str) and ROLE.match(spec["name"])):
            bad(f"roles.{duty}.name", f"{spec['name']!r} is not an IAM role name (1-64 of letters, digits, +=,.@_-)")
        sas = spec["service_accounts"]
        if not (isinstance(sas, list) and sas and all(isinstance(a, str) and DNS_LABEL.match(a) for a in sas)):
            bad(f"roles.{duty}.service_accounts", "a non-empty list of Kubernetes service account names")
    names = [s["name"] for s in roles.values() if isinstance(s, dict) and "name" in s]
    if len(set(names)) != len(names):
        bad("roles", "two duties share a role name: one role per duty")
    held = [a for s in roles.values() if isinstance(s, dict) for a in s.get("service_accounts") or []]
    if len(set(held)) != len(held):
        bad("roles", "a service account holds two roles: give each duty its own service accounts")
    if not OIDC.match(raw["oidc_provider"]):
        bad("oidc_provider", f"{raw['oidc_provider']!r}: expected oidc.eks.<region>.amazonaws.com/id/<ID>, no https://")
    if not DNS_LABEL.match(raw["namespace"]):
        bad("namespace", f"{raw['namespace']!r} is not a Kubernetes namespace name")
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
    run_prefix = run_and_caches[0]
    buckets = (
        # steps: Argo's executor reads and writes each step's folder; the steps read, write and prune (superseded
        # checkpoints, torn cache entries) their run's prefix and the shared caches. register: its inputs (step
        # folders, the run's keyed GGUF) and its own step folder (outputs, log), nothing it could rewrite for others.
        Bucket("artifact-bucket", name, training, art["region"], art["kms_key_arn"], access=(
            ("steps", Access(read=(steps, *run_and_caches), write=(steps, *run_and_caches), delete=run_and_caches)),
            ("register", Access(read=(steps, run_prefix), write=(steps,))),
        )),
        # register alone logs the model version's files and the gate's decision, write-once; evaluate (steps)
        # downloads the champion's, serving the served version's. Nobody deletes.
        Bucket("mlflow-bucket", mlf["name"], home, mlf["region"], mlf["kms_key_arn"], access=(
            ("steps", Access(read=(mlf["prefix"],))),
            ("register", Access(read=(mlf["prefix"],), write=(mlf["prefix"],))),
            ("serving", Access(read=(mlf["prefix"],))),
        ), write_once=(mlf["prefix"],)),
        # fetch-dataset and check-triggers read; build-dataset's dvc push adds content-addressed objects, nothing
        # else. DVC sends no If-None-Match (steps/core/write_once.py says why), so this store is not write-once by
        # policy: versioning keeps what an overwrite would replace, and readers verify every md5.
        Bucket("dvc-bucket", dvc["name"], home, dvc["region"], dvc["kms_key_arn"], access=(
            ("steps", Access(read=(dvc["prefix"],), write=(f"{dvc['prefix']}/{DVC_CACHE}",))),
        )),
    )  # fmt: skip
    roles_out = tuple(
        Role(duty, raw["roles"][duty]["name"], training, tuple(raw["roles"][duty]["service_accounts"]))
        for duty in DUTIES
    )
    return Settings(training, home, raw["oidc_provider"], raw["namespace"], roles_out, buckets)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def _sid(bucket: Bucket, what: str) -> str:
    return _camel(bucket.key) + what


def _s3_grants(bucket: Bucket, access: Access, owner_condition: dict) -> list[dict]:
    """What one role may do in `bucket`: the statements both halves carry (the bucket policy adds a Principal)."""
    out = [
        {
            "Sid": _sid(bucket, "List"),
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [bucket.arn],
            # Listing is by prefix only: a listing of the whole bucket (no s3:prefix) is refused.
            "Condition": {"StringLike": {"s3:prefix": [f"{p}/*" for p in access.read]}, **owner_condition},
        },
        {"Sid": _sid(bucket, "Read"), "Effect": "Allow", "Action": READ, "Resource": bucket.objects(access.read)},
    ]
    if access.write:
        out.append(
            {"Sid": _sid(bucket, "Write"), "Effect": "Allow", "Action": WRITE, "Resource": bucket.objects(access.write)}
        )
    if access.delete:
        resource = bucket.objects(access.delete)
        out.append({"Sid": _sid(bucket, "Delete"), "Effect": "Allow", "Action": DELETE, "Resource": resource})
    for st in out[1:]:
        if owner_condition:
            st["Condition"] = owner_condition
    return out


def _write_once_deny(bucket: Bucket) -> dict:
    """Deny creating an object under the write-once prefixes without If-None-Match: * (AWS, "Enforce conditional
    writes on Amazon S3 buckets"): PutObject and CompleteMultipartUpload are object-creating operations and must carry
    the header; CreateMultipartUpload and UploadPart (also s3:PutObject) take no conditional header and are exempt by
    s3:ObjectCreationOperation false. CopyObject into these prefixes is refused with it, which nothing here needs."""
    return {
        "Sid": _sid(bucket, "WriteOnce"),
        "Effect": "Deny",
        "Action": ["s3:PutObject"],
        "Resource": bucket.objects(bucket.write_once),
        "Condition": {"Null": {"s3:if-none-match": "true"}, "Bool": {"s3:ObjectCreationOperation": "true"}},
    }


def _kms_actions(bucket: Bucket, access: Access) -> list[str]:
    """A reader decrypts; a writer also asks S3 for data keys to encrypt what it writes."""
    return ["kms:Decrypt", "kms:GenerateDataKey"] if access.write else ["kms:Decrypt"]


def identity_policy(s: Settings, role: Role) -> dict:
    statements: list[dict] = []
    for b in s.buckets:
        access = b.grant(role.duty)
        if access is None:
            continue
        # aws:ResourceAccount: the bucket must belong to the account we mean, so a same-named bucket elsewhere
        # (a deleted bucket's name taken by someone else) gets nothing.
        statements += _s3_grants(b, access, {"StringEquals": {"aws:ResourceAccount": b.account}})
        if b.write_once and access.write:
            statements.append(_write_once_deny(b))
    for b in s.buckets:
        access = b.grant(role.duty)
        if not (access and b.kms_key_arn):
            continue
        statements.append(
            {
                "Sid": _sid(b, "KmsViaS3"),
                "Effect": "Allow",
                "Action": _kms_actions(b, access),
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


def trust_policy(s: Settings, role: Role) -> dict:
    issuer = s.oidc_provider
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": f"{_camel(role.duty)}ServiceAccounts",
                "Effect": "Allow",
                "Principal": {"Federated": f"arn:aws:iam::{s.training_account}:oidc-provider/{issuer}"},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{issuer}:aud": STS_AUDIENCE,
                        f"{issuer}:sub": [f"system:serviceaccount:{s.namespace}:{sa}" for sa in role.service_accounts],
                    }
                },
            }
        ],
    }


def _roles_of(s: Settings, b: Bucket) -> list[tuple[Role, Access]]:
    return [(s.role(duty), access) for duty, access in b.access]


def bucket_policy(s: Settings, b: Bucket) -> dict:
    everything = [b.arn, f"{b.arn}/*"]
    grants = []
    for role, access in _roles_of(s, b):
        for st in _s3_grants(b, access, {}):
            sid = "Role" + _camel(role.duty) + st.pop("Sid")
            grants.append({"Sid": sid, "Effect": st.pop("Effect"), "Principal": {"AWS": role.arn}, **st})
    denies = [
        {
            "Sid": "DenyRolesHistoryAndPolicyChanges",
            "Effect": "Deny",
            "Principal": {"AWS": [r.arn for r, _ in _roles_of(s, b)]},
            "Action": KEEP_HISTORY,
            "Resource": everything,
        }
    ]
    if b.write_once:
        # Whoever writes: the roles, and anyone of the owning account.
        denies.append({**_write_once_deny(b), "Principal": "*"})
    return {
        "Version": VERSION,
        "Statement": [
            *grants,
            {
                # Whatever else is ever granted here by mistake, nobody outside the owning account except the roles.
                "Sid": "DenyOtherOutsidePrincipals",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:*"],
                "Resource": everything,
                "Condition": {
                    "StringNotEquals": {"aws:PrincipalAccount": b.account},
                    "ArnNotEquals": {"aws:PrincipalArn": [r.arn for r, _ in _roles_of(s, b)]},
                },
            },
            *denies,
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
    """The statements to add to the bucket's KMS key policy: each role may use the key through S3 in the key's region,
    for this bucket's objects only, and only as its access there needs (readers decrypt)."""
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": f"Distillery{_camel(role.duty)}{_sid(b, 'ViaS3')}",
                "Effect": "Allow",
                "Principal": {"AWS": role.arn},
                "Action": _kms_actions(b, access),
                "Resource": "*",
                "Condition": {
                    "StringEquals": {
                        "kms:ViaService": f"s3.{b.region}.amazonaws.com",
                        "kms:CallerAccount": s.training_account,
                    },
                    "StringLike": _s3_encryption_context(b),
                },
            }
            for role, access in _roles_of(s, b)
        ],
    }


def rendered(s: Settings) -> dict[str, dict]:
    """Every file of the grant, by path relative to the output folder."""
    out = {}
    for role in s.roles:
        out[f"iam/{role.name}-trust-policy.json"] = trust_policy(s, role)
        out[f"iam/{role.name}-policy.json"] = identity_policy(s, role)
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
