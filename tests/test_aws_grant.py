"""The rest of the cross-account grant: who may assume the role (IRSA trust), the KMS half, the renderer and its
settings, and the policy evaluator itself (tests/iam_eval.py), each rule shown able to fail on a broken fixture.
The S3 calls themselves are judged in tests/test_s3_access.py."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from scripts import render_iam
from tests.conftest import ROOT
from tests.iam_eval import Request, allowed, condition_holds, decide, may_assume, wildcard

SET = render_iam.load(render_iam.SETTINGS)
TRUST = json.loads((ROOT / "infra/iam/distillery-workflows-trust-policy.json").read_text())
IDENTITY = json.loads((ROOT / "infra/iam/distillery-workflows-policy.json").read_text())
PROVIDER = f"arn:aws:iam::{SET.training_account}:oidc-provider/{SET.oidc_provider}"


def web_identity(sub: str, aud: str = "sts.amazonaws.com", provider: str = PROVIDER) -> Request:
    issuer = provider.split("oidc-provider/")[1]
    role = f"arn:aws:iam::{SET.training_account}:role/{SET.role_name}"
    return Request(
        "sts:AssumeRoleWithWebIdentity", role, federated=provider, context={f"{issuer}:sub": sub, f"{issuer}:aud": aud}
    )


# --- IRSA trust -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sa", ["distillery-steps", "distillery-ray"])
def test_the_step_and_ray_service_accounts_may_assume_the_role(sa):
    assert sa in SET.service_accounts
    assert may_assume(TRUST, web_identity(f"system:serviceaccount:{SET.namespace}:{sa}"))


@pytest.mark.parametrize(
    "sub",
    [
        "system:serviceaccount:{ns}:default",  # any other pod of the namespace
        "system:serviceaccount:{ns}:distillery-submitter",  # the submitter creates Workflows, never touches S3
        "system:serviceaccount:other:distillery-steps",  # the same name in another namespace
        "system:serviceaccount:{ns}:distillery-steps-x",  # no prefix matching
        "system:serviceaccount:{ns}:*",
    ],
)
def test_nobody_else_may_assume_the_role(sub):
    assert not may_assume(TRUST, web_identity(sub.format(ns=SET.namespace)))


def test_the_audience_and_the_provider_are_checked():
    sub = f"system:serviceaccount:{SET.namespace}:{SET.service_accounts[0]}"
    assert not may_assume(TRUST, web_identity(sub, aud="https://kubernetes.default.svc"))
    other = f"arn:aws:iam::{SET.training_account}:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/0THERC1USTER"
    assert not may_assume(TRUST, web_identity(sub, provider=other))


def test_the_service_accounts_carry_the_rendered_role():
    """Every IRSA annotation in infra/ names the role the trust and identity policies were rendered for."""
    arns = []
    for path in sorted((ROOT / "infra").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ServiceAccount":
                arn = doc["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn")
                arns += [arn] if arn else []
    assert arns and set(arns) == {SET.role_arn}


# --- KMS ------------------------------------------------------------------------------------------------------------


def kms_call(
    bucket: render_iam.Bucket, action: str = "kms:Decrypt", via: str | None = "s3", role: str = "", for_arn: str = ""
) -> bool:
    """A KMS call S3 makes for the role (or, via=None, the role's own call to KMS) for an object of `bucket`."""
    statement = json.loads((ROOT / f"infra/s3/{bucket.key}-kms-key-policy-statement.json").read_text())
    context = {
        "kms:CallerAccount": (role or SET.role_arn).split(":")[4],
        "kms:EncryptionContext:aws:s3:arn": for_arn or f"{bucket.arn}/{bucket.read[0]}/some/object",
    }
    if via:
        context["kms:ViaService"] = f"{via}.{bucket.region}.amazonaws.com"
    request = Request(action, bucket.kms_key_arn, principal_arn=role or SET.role_arn, context=context)
    return allowed(request, IDENTITY, statement, bucket.kms_key_arn.split(":")[4])


HOME_KEYED = [b for b in SET.buckets if b.kms_key_arn and b.account == SET.home_account]


@pytest.mark.parametrize("bucket", HOME_KEYED, ids=lambda b: b.key)
def test_the_role_may_use_a_home_key_through_s3_only(bucket):
    assert kms_call(bucket, "kms:Decrypt") and kms_call(bucket, "kms:GenerateDataKey")
    assert kms_call(bucket, for_arn=bucket.arn)  # S3 Bucket Keys: the context is the bucket
    assert not kms_call(bucket, for_arn="arn:aws:s3:::another-bucket-on-the-same-key/x")
    assert not kms_call(bucket, via=None)  # calling KMS directly
    assert not kms_call(bucket, via="secretsmanager")
    assert not kms_call(bucket, "kms:Encrypt")
    assert not kms_call(bucket, role=f"arn:aws:iam::{SET.training_account}:role/someone-else")


def test_the_example_encrypts_both_home_buckets_with_kms():
    assert {b.key for b in HOME_KEYED} == {"mlflow-bucket", "dvc-bucket"}


# --- rendering ------------------------------------------------------------------------------------------------------


def test_the_committed_files_are_rendered_from_the_settings():
    for rel, doc in render_iam.rendered(SET).items():
        assert (ROOT / "infra" / rel).read_text() == render_iam.text(doc), (
            f"stale: run python scripts/render_iam.py ({rel})"
        )


def test_check_mode_fails_on_a_stale_file(tmp_path, capsys):
    args = ["--out", str(tmp_path)]
    assert render_iam.main(args) == 0
    assert render_iam.main([*args, "--check"]) == 0
    (tmp_path / "iam/distillery-workflows-policy.json").write_text("{}\n")
    capsys.readouterr()
    assert render_iam.main([*args, "--check"]) == 1
    out = capsys.readouterr()
    assert "stale" in out.out and "distillery-workflows-policy.json" in out.out and "render_iam.py" in out.err


def test_settings_change_every_half_without_edits(tmp_path):
    raw = yaml.safe_load(render_iam.SETTINGS.read_text())
    raw |= {"training_account": "000011112222", "namespace": "ml", "role_name": "trainer"}
    raw["dvc_bucket"] |= {"name": "acme-datasets", "prefix": "dvc/remote", "kms_key_arn": ""}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(raw))
    files = render_iam.rendered(render_iam.load(path))
    text = json.dumps(files)
    assert "111122223333" not in text and "distillery-dvc" not in text
    assert "system:serviceaccount:ml:distillery-steps" in text
    assert "arn:aws:s3:::acme-datasets/dvc/remote/files/md5/*" in text
    assert "s3/dvc-bucket-kms-key-policy-statement.json" not in files  # SSE-S3: no key to grant


def test_bad_settings_are_all_named_at_once(tmp_path):
    raw = yaml.safe_load(render_iam.SETTINGS.read_text())
    raw |= {"training_account": 111122223333, "home_account": "4444", "oidc_provider": "https://oidc.eks.x/id/A"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SystemExit) as e:
        render_iam.load(path)
    assert "training_account: missing or not a str" in str(e.value)
    raw["training_account"] = "111122223333"
    raw["dvc_bucket"] |= {"prefix": "/store/", "kms_key_arn": "arn:aws:kms:us-east-1:444455556666:key/k", "x": 1}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SystemExit) as e:
        render_iam.load(path)
    for expected in ("home_account: '4444'", "oidc_provider:", "dvc_bucket.prefix", "dvc_bucket.kms_key_arn: the key "
                     "must be in the bucket's region", "dvc_bucket.x: unknown setting"):  # fmt: skip
        assert f"{path}: {expected}" in str(e.value), expected


# --- the evaluator's rules, each able to fail -----------------------------------------------------------------------

ROLE = "arn:aws:iam::111122223333:role/r"


def req(action: str = "s3:GetObject", resource: str = "arn:aws:s3:::b/k", **context: str) -> Request:
    return Request(action, resource, principal_arn=ROLE, context=context)


def policy(*statements: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


ALLOW_ALL = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}


def test_wildcards_match_as_iam_does():
    assert wildcard("arn:aws:s3:::b/runs/*", "arn:aws:s3:::b/runs/x/y/z")  # `*` crosses `/`
    assert wildcard("a?c", "abc") and not wildcard("a?c", "abbc")
    assert not wildcard("arn:aws:s3:::b/[ab]", "arn:aws:s3:::b/a")  # brackets are literal, unlike fnmatch
    assert not wildcard("arn:aws:s3:::B/*", "arn:aws:s3:::b/k")  # resources: case-sensitive
    assert decide(policy({"Effect": "Allow", "Action": "S3:getobject", "Resource": "*"}), req()) == "Allow"


def test_explicit_deny_wins_and_nothing_applying_is_an_implicit_deny():
    deny = {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "*"}
    assert decide(policy(ALLOW_ALL, deny), req()) == "Deny"
    assert decide(policy(ALLOW_ALL), req()) == "Allow"
    assert decide(policy({"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*"}), req()) is None


def test_not_action_and_not_resource_invert_the_match():
    st = {"Effect": "Allow", "NotAction": "s3:Delete*", "NotResource": "arn:aws:s3:::secret/*"}
    assert decide(policy(st), req()) == "Allow"
    assert decide(policy(st), req("s3:DeleteObject")) is None
    assert decide(policy(st), req(resource="arn:aws:s3:::secret/k")) is None


def test_condition_values_are_or_keys_and_operators_and():
    cond = {"StringLike": {"s3:prefix": ["a/*", "b/*"]}, "StringEquals": {"aws:ResourceAccount": "1"}}
    assert condition_holds(cond, req(**{"s3:prefix": "b/x", "aws:ResourceAccount": "1"}))
    assert not condition_holds(cond, req(**{"s3:prefix": "c/x", "aws:ResourceAccount": "1"}))
    assert not condition_holds(cond, req(**{"s3:prefix": "a/x", "aws:ResourceAccount": "2"}))


def test_a_missing_key_fails_positive_operators_and_satisfies_negated_and_if_exists():
    assert not condition_holds({"StringLike": {"s3:prefix": "*"}}, req())
    assert condition_holds({"StringNotEquals": {"aws:PrincipalTag/team": "x"}}, req())
    assert condition_holds({"StringLikeIfExists": {"s3:prefix": "a/*"}}, req())
    assert not condition_holds({"StringLikeIfExists": {"s3:prefix": "a/*"}}, req(**{"s3:prefix": "b/"}))
    assert condition_holds({"Bool": {"aws:SecureTransport": "false"}}, req(**{"aws:SecureTransport": "FALSE"}))
    assert condition_holds({"ArnNotEquals": {"aws:PrincipalArn": "arn:aws:iam::1:role/x"}}, req())
    assert not condition_holds({"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/x"}}, req())


def test_an_operator_it_does_not_know_is_refused():
    with pytest.raises(NotImplementedError, match="NumericLessThan"):
        condition_holds({"NumericLessThan": {"s3:max-keys": "10"}}, req())


def test_cross_account_needs_both_halves_same_account_either():
    bucket = policy({**ALLOW_ALL, "Principal": {"AWS": ROLE}})
    empty = policy()
    assert allowed(req(), policy(ALLOW_ALL), bucket, "444455556666")
    assert not allowed(req(), policy(ALLOW_ALL), empty, "444455556666")
    assert not allowed(req(), empty, bucket, "444455556666")
    assert allowed(req(), policy(ALLOW_ALL), empty, "111122223333")
    assert allowed(req(), empty, bucket, "111122223333")


def test_principals_match_by_arn_account_or_root_only():
    for who in (ROLE, "111122223333", "arn:aws:iam::111122223333:root", "*"):
        assert decide(policy({**ALLOW_ALL, "Principal": {"AWS": who}}), req(), resource_policy=True) == "Allow", who
    for who in ("arn:aws:iam::111122223333:role/other", "444455556666"):
        assert decide(policy({**ALLOW_ALL, "Principal": {"AWS": who}}), req(), resource_policy=True) is None, who


def test_breaking_the_rendered_grant_is_caught():
    """Each safeguard of the rendered identity policy, removed, lets a call through that must not pass."""
    broken = copy.deepcopy(IDENTITY)
    broken["Statement"] = [st for st in broken["Statement"] if st["Sid"] != "DenyPlainHttp"]
    art = next(b for b in SET.buckets if b.account == SET.training_account)
    key = f"arn:aws:s3:::{art.name}/runs/x/y"
    http = Request("s3:GetObject", key, principal_arn=SET.role_arn, context={"aws:SecureTransport": "false"})
    assert not allowed(http, IDENTITY, None, SET.training_account)
    assert allowed(http, broken, None, SET.training_account)
    unconditioned = copy.deepcopy(IDENTITY)
    for st in unconditioned["Statement"]:
        st.get("Condition", {}).pop("StringEquals", None)
    elsewhere = Request("s3:GetObject", key, principal_arn=SET.role_arn, context={"aws:SecureTransport": "true"})
    assert not allowed(elsewhere, IDENTITY, None, "999988887777")
    assert allowed(elsewhere, unconditioned, policy({**ALLOW_ALL, "Principal": "*"}), "999988887777")


def test_render_iam_is_the_only_writer():
    """The files under infra/iam and infra/s3 that look like the grant's are exactly the rendered set."""
    rendered = set(render_iam.rendered(SET))
    on_disk = {
        str(p.relative_to(ROOT / "infra"))
        for folder in ("iam", "s3")
        for p in Path(ROOT / "infra" / folder).glob("*.json")
        if "lifecycle" not in p.name
    }
    assert on_disk == rendered


# IAM's and S3's size quotas, counted without whitespace (IAM's rule): inline role policy, trust policy (the default
# quota; it can be raised to 4,096), bucket policy.
QUOTAS = {"iam/distillery-workflows-policy.json": 10240, "iam/distillery-workflows-trust-policy.json": 2048}


def test_every_policy_fits_its_quota():
    for rel, doc in render_iam.rendered(SET).items():
        size = len(json.dumps(doc, separators=(",", ":")))
        assert size <= QUOTAS.get(rel, 20480), (rel, size)


def test_the_docs_apply_every_rendered_file():
    readme = (ROOT / "docs/security.md").read_text()  # "IAM and buckets: the cross-account grant"
    applied = set(re.findall(r"\$G/([\w./-]+\.json)", readme))
    rendered = set(render_iam.rendered(SET))
    assert applied <= rendered, applied - rendered
    # the MLflow bucket's files are applied like the DVC bucket's (the README shows one)
    assert {rel.replace("mlflow-", "dvc-") for rel in rendered} <= applied, rendered - applied


def test_the_trust_admits_exactly_the_service_accounts_that_carry_the_role():
    annotated = set()
    for path in sorted((ROOT / "infra").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not (isinstance(doc, dict) and doc.get("kind") == "ServiceAccount"):
                continue
            if doc["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn") == SET.role_arn:
                annotated.add((doc["metadata"]["namespace"], doc["metadata"]["name"]))
    assert annotated == {(SET.namespace, sa) for sa in SET.service_accounts}
    for ns, sa in annotated:
        assert may_assume(TRUST, web_identity(f"system:serviceaccount:{ns}:{sa}"))
