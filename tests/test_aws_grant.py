"""The rest of the cross-account grant: who may assume each duty's role (IRSA trust), the KMS half, the renderer and
its settings, and the policy evaluator itself (tests/iam_eval.py), each rule shown able to fail on a broken fixture.
The S3 calls themselves, and each role's reach, are judged in tests/test_s3_access.py."""

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
ROLES = {r.duty: r for r in SET.roles}
TRUST = {r.duty: json.loads((ROOT / f"infra/iam/{r.name}-trust-policy.json").read_text()) for r in SET.roles}
IDENTITY = {r.duty: json.loads((ROOT / f"infra/iam/{r.name}-policy.json").read_text()) for r in SET.roles}
PROVIDER = f"arn:aws:iam::{SET.training_account}:oidc-provider/{SET.oidc_provider}"
STEPS = ROLES["steps"]


def web_identity(sub: str, aud: str = "sts.amazonaws.com", provider: str = PROVIDER, role=STEPS) -> Request:
    issuer = provider.split("oidc-provider/")[1]
    context = {f"{issuer}:sub": sub, f"{issuer}:aud": aud}
    return Request("sts:AssumeRoleWithWebIdentity", role.arn, federated=provider, context=context)


def sub_of(sa: str, ns: str = SET.namespace) -> str:
    return f"system:serviceaccount:{ns}:{sa}"


# --- IRSA trust -----------------------------------------------------------------------------------------------------


def test_one_role_per_duty_each_held_by_its_own_service_accounts():
    assert set(ROLES) == {"steps", "register", "serving"}
    assert ROLES["steps"].service_accounts == ("distillery-steps", "distillery-ray")
    assert ROLES["register"].service_accounts == ("distillery-register",)
    assert ROLES["serving"].service_accounts == ("distillery-serve",)
    assert len({r.arn for r in SET.roles}) == 3


@pytest.mark.parametrize("duty,sa", [(r.duty, sa) for r in SET.roles for sa in r.service_accounts])
def test_each_service_account_may_assume_its_role_and_no_other(duty, sa):
    for other in SET.roles:
        got = may_assume(TRUST[other.duty], web_identity(sub_of(sa), role=other))
        assert got == (other.duty == duty), (sa, other.name)


@pytest.mark.parametrize("duty", sorted(ROLES))
@pytest.mark.parametrize(
    "sub",
    [
        "system:serviceaccount:{ns}:default",  # any other pod of the namespace
        "system:serviceaccount:{ns}:distillery-submitter",  # the submitter creates Workflows, never touches S3
        "system:serviceaccount:other:{sa}",  # the same name in another namespace
        "system:serviceaccount:{ns}:{sa}-x",  # no prefix matching
        "system:serviceaccount:{ns}:*",
    ],
)
def test_nobody_else_may_assume_a_role(duty, sub):
    role = ROLES[duty]
    subject = sub.format(ns=SET.namespace, sa=role.service_accounts[0])
    assert not may_assume(TRUST[duty], web_identity(subject, role=role))


def test_the_audience_and_the_provider_are_checked():
    sub = sub_of(STEPS.service_accounts[0])
    assert may_assume(TRUST["steps"], web_identity(sub))
    assert not may_assume(TRUST["steps"], web_identity(sub, aud="https://kubernetes.default.svc"))
    other = f"arn:aws:iam::{SET.training_account}:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/0THERC1USTER"
    assert not may_assume(TRUST["steps"], web_identity(sub, provider=other))


def annotated_accounts() -> dict[tuple[str, str], str]:
    """(namespace, name) → the IAM role ARN of every IRSA-annotated ServiceAccount in infra/."""
    found = {}
    for path in sorted((ROOT / "infra").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ServiceAccount":
                arn = doc["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn")
                if arn:
                    found[(doc["metadata"]["namespace"], doc["metadata"]["name"])] = arn
    return found


def test_the_service_accounts_carry_their_duty_s_rendered_role():
    """Every IRSA annotation in infra/ names the role the trust policy admitting that account was rendered for."""
    expected = {(SET.namespace, sa): r.arn for r in SET.roles for sa in r.service_accounts}
    assert annotated_accounts() == expected


# --- KMS ------------------------------------------------------------------------------------------------------------


def kms_call(
    bucket: render_iam.Bucket,
    action: str = "kms:Decrypt",
    via: str | None = "s3",
    role: str = "",
    for_arn: str = "",
    duty: str = "steps",
) -> bool:
    """A KMS call S3 makes for a duty's role (or, via=None, the role's own call to KMS) for an object of `bucket`."""
    statement = json.loads((ROOT / f"infra/s3/{bucket.key}-kms-key-policy-statement.json").read_text())
    principal = role or ROLES[duty].arn
    context = {
        "kms:CallerAccount": principal.split(":")[4],
        "kms:EncryptionContext:aws:s3:arn": for_arn or f"{bucket.arn}/{bucket.read[0]}/some/object",
    }
    if via:
        context["kms:ViaService"] = f"{via}.{bucket.region}.amazonaws.com"
    request = Request(action, bucket.kms_key_arn, principal_arn=principal, context=context)
    return allowed(request, IDENTITY[duty], statement, bucket.kms_key_arn.split(":")[4])


HOME_KEYED = [b for b in SET.buckets if b.kms_key_arn and b.account == SET.home_account]


@pytest.mark.parametrize("bucket", HOME_KEYED, ids=lambda b: b.key)
def test_a_role_may_use_a_home_key_through_s3_only(bucket):
    writer = next(duty for duty, access in bucket.access if access.write)
    assert kms_call(bucket, "kms:Decrypt", duty=writer) and kms_call(bucket, "kms:GenerateDataKey", duty=writer)
    assert kms_call(bucket, for_arn=bucket.arn, duty=writer)  # S3 Bucket Keys: the context is the bucket
    assert not kms_call(bucket, for_arn="arn:aws:s3:::another-bucket-on-the-same-key/x", duty=writer)
    assert not kms_call(bucket, via=None, duty=writer)  # calling KMS directly
    assert not kms_call(bucket, via="secretsmanager", duty=writer)
    assert not kms_call(bucket, "kms:Encrypt", duty=writer)
    assert not kms_call(bucket, role=f"arn:aws:iam::{SET.training_account}:role/someone-else", duty=writer)


@pytest.mark.parametrize("bucket", HOME_KEYED, ids=lambda b: b.key)
def test_each_role_gets_a_key_only_as_its_access_needs(bucket):
    """Readers decrypt and never ask for data keys; a role without access to the bucket gets nothing from its key."""
    for duty in ROLES:
        access = bucket.grant(duty)
        assert kms_call(bucket, "kms:Decrypt", duty=duty) == (access is not None), duty
        assert kms_call(bucket, "kms:GenerateDataKey", duty=duty) == bool(access and access.write), duty


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
    (tmp_path / "iam/distillery-register-policy.json").write_text("{}\n")
    capsys.readouterr()
    assert render_iam.main([*args, "--check"]) == 1
    out = capsys.readouterr()
    assert "stale" in out.out and "distillery-register-policy.json" in out.out and "render_iam.py" in out.err


def test_settings_change_every_half_without_edits(tmp_path):
    raw = yaml.safe_load(render_iam.SETTINGS.read_text())
    raw |= {"training_account": "000011112222", "namespace": "ml"}
    raw["roles"]["steps"]["name"] = "trainer"
    raw["dvc_bucket"] |= {"name": "acme-datasets", "prefix": "dvc/remote", "kms_key_arn": ""}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(raw))
    files = render_iam.rendered(render_iam.load(path))
    text = json.dumps(files)
    assert "111122223333" not in text and "distillery-dvc" not in text
    assert "system:serviceaccount:ml:distillery-steps" in text
    assert "iam/trainer-policy.json" in files and "arn:aws:iam::000011112222:role/trainer" in text
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


def test_roles_must_be_one_per_duty(tmp_path):
    raw = yaml.safe_load(render_iam.SETTINGS.read_text())
    raw["roles"]["register"]["name"] = raw["roles"]["steps"]["name"]
    raw["roles"]["serving"]["service_accounts"] = ["distillery-steps"]
    raw["roles"]["admin"] = {"name": "x", "service_accounts": ["y"]}
    del raw["roles"]["steps"]["service_accounts"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SystemExit) as e:
        render_iam.load(path)
    for expected in ("roles.admin: unknown duty", "roles.steps: missing, or not a mapping",
                     "roles: two duties share a role name"):  # fmt: skip
        assert f"{path}: {expected}" in str(e.value), expected
    raw = yaml.safe_load(render_iam.SETTINGS.read_text())
    raw["roles"]["serving"]["service_accounts"] = ["distillery-register"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SystemExit, match="a service account holds two roles"):
        render_iam.load(path)


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


def test_null_tests_the_key_s_presence():
    assert condition_holds({"Null": {"s3:if-none-match": "true"}}, req())
    assert not condition_holds({"Null": {"s3:if-none-match": "true"}}, req(**{"s3:if-none-match": "*"}))
    assert condition_holds({"Null": {"s3:if-none-match": "false"}}, req(**{"s3:if-none-match": "*"}))
    assert not condition_holds({"Null": {"s3:if-none-match": "false"}}, req())


def test_breaking_the_rendered_grant_is_caught():
    """Each safeguard of the rendered identity policy, removed, lets a call through that must not pass."""
    identity = IDENTITY["steps"]
    broken = copy.deepcopy(identity)
    broken["Statement"] = [st for st in broken["Statement"] if st["Sid"] != "DenyPlainHttp"]
    art = next(b for b in SET.buckets if b.account == SET.training_account)
    key = f"arn:aws:s3:::{art.name}/runs/x/y"
    http = Request("s3:GetObject", key, principal_arn=STEPS.arn, context={"aws:SecureTransport": "false"})
    assert not allowed(http, identity, None, SET.training_account)
    assert allowed(http, broken, None, SET.training_account)
    unconditioned = copy.deepcopy(identity)
    for st in unconditioned["Statement"]:
        st.get("Condition", {}).pop("StringEquals", None)
    elsewhere = Request("s3:GetObject", key, principal_arn=STEPS.arn, context={"aws:SecureTransport": "true"})
    assert not allowed(elsewhere, identity, None, "999988887777")
    assert allowed(elsewhere, unconditioned, policy({**ALLOW_ALL, "Principal": "*"}), "999988887777")


def test_render_iam_is_the_only_writer():
    """The files under infra/iam and infra/s3 that look like the grant's are exactly the rendered set."""
    rendered = set(render_iam.rendered(SET))
    on_disk = {
        str(p.relative_to(ROOT / "infra"))
        for folder in ("iam", "s3")
        for p in Path(ROOT / "infra" / folder).glob("*.json")
        if not p.name.endswith(render_iam.BUCKET_SETTINGS)
    }
    assert on_disk == rendered


# IAM's and S3's size quotas, counted without whitespace (IAM's rule): inline role policy, trust policy (the default
# quota; it can be raised to 4,096), bucket policy.
QUOTAS = {
    **{f"iam/{r.name}-policy.json": 10240 for r in SET.roles},
    **{f"iam/{r.name}-trust-policy.json": 2048 for r in SET.roles},
}


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


def test_the_trusts_admit_exactly_the_service_accounts_that_carry_their_roles():
    for (ns, sa), arn in annotated_accounts().items():
        role = next(r for r in SET.roles if r.arn == arn)
        assert may_assume(TRUST[role.duty], web_identity(sub_of(sa, ns), role=role))
    admitted = {(SET.namespace, sa) for r in SET.roles for sa in r.service_accounts}
    assert admitted == set(annotated_accounts())
