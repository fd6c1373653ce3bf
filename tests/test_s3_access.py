"""Every S3 call a step makes, judged against BOTH halves of the grant — the pods' role's identity policy and the
bucket's own policy (infra/iam/, infra/s3/, rendered by scripts/render_iam.py) — with IAM's evaluation logic
(tests/iam_eval.py): allowed only where both allow across accounts, an explicit Deny winning everywhere. The calls come
from the rendered templates (every s3:// location a step or a Ray pod is handed, every keyed artifact, Argo's step
folders and logs) and from the steps' own stores at home (the DVC remote, MLflow's artifact root). The lifecycle
rules expire the per-run prefixes and caches, never a run's outputs."""

from __future__ import annotations

import functools
import json
import re

import pytest
import yaml

from scripts.render_iam import DVC_CACHE, SETTINGS, load
from tests.argo_pods import archive_logs, workflow_spec
from tests.conftest import ROOT, make_bucket, s3_client
from tests.iam_eval import Request, allowed
from tests.manifests import default_artifact_repository, rendered_template
from workflows import distill

SET = load(SETTINGS)
IDENTITY = json.loads((ROOT / "infra/iam/distillery-workflows-policy.json").read_text())
BUCKETS = {b.name: b for b in SET.buckets}
BUCKET_POLICIES = {b.name: json.loads((ROOT / f"infra/s3/{b.key}-policy.json").read_text()) for b in SET.buckets}
ARTIFACTS, MLFLOW, DVC = (b.name for b in SET.buckets)
LIFECYCLE = json.loads((ROOT / "infra/s3/distillery-artifacts-lifecycle.json").read_text())
TEMPLATES = sorted((ROOT / "infra/argo").glob("*.yaml"))
TLS = {"aws:SecureTransport": "true"}


def s3_call(
    action: str,
    bucket: str,
    key: str = "",
    prefix: str | None = None,
    role: str = SET.role_arn,
    tls: bool = True,
    identity: dict = IDENTITY,
    bucket_policies: dict = BUCKET_POLICIES,
    owner: str | None = None,
) -> bool:
    """One S3 request by `role`: an object call on `bucket/key`, or ListBucket with `prefix`."""
    context = {"aws:SecureTransport": str(tls).lower()}
    if prefix is not None:
        context["s3:prefix"] = prefix
    resource = f"arn:aws:s3:::{bucket}" + (f"/{key}" if key else "")
    account = owner or (BUCKETS[bucket].account if bucket in BUCKETS else "999988887777")
    request = Request(action, resource, principal_arn=role, context=context)
    return allowed(request, identity, bucket_policies.get(bucket), account)


def concrete(key: str) -> str:
    return re.sub(r"\{\{[^}]*\}\}", "x", key).strip("/")


# --- the calls each step makes --------------------------------------------------------------------------------------


@functools.cache
def step_specs() -> dict[str, tuple[dict, dict]]:
    """Every template of the rendered files that runs a pod: `name` → (its workflow's spec, the template)."""
    found = {}
    for path in TEMPLATES:
        for doc in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            spec = workflow_spec(doc)
            found |= {t["name"]: (spec, t) for t in spec["templates"] if {"container", "script", "resource"} & set(t)}
    return found


def step_templates() -> dict[str, dict]:
    """Every template of the rendered files that runs a pod: `name` → template."""
    return {name: tmpl for name, (_, tmpl) in step_specs().items()}


def uris(tmpl: dict) -> set[tuple[str, str]]:
    """(bucket, key) of every s3:// URI the template hands its step (or, for the RayJob, its Ray pods)."""
    return {(b, concrete(k)) for b, k in re.findall(r"s3://([a-z0-9.-]+)/([^'\"\s,\]]+)", json.dumps(tmpl))}


def artifact_keys(tmpl: dict) -> set[str]:
    """Keys of the template's Argo artifacts that name their own key in the default artifact repository."""
    keys = set()
    for io in ("inputs", "outputs"):
        keys |= {concrete(a["s3"]["key"]) for a in tmpl.get(io, {}).get("artifacts", []) if "key" in a.get("s3", {})}
    return keys


def step_folder() -> str:
    return concrete(default_artifact_repository()["s3"]["keyFormat"])


# The steps' own stores at home, as their code reaches them: DVC 3's remote layout (`<remote>/files/md5/ab/cdef…`,
# existence checks list a shard), MLflow 3's artifact root (`<root>/<experiment>/<run>/artifacts/…` for a run's
# files, `<root>/<experiment>/models/m-<id>/artifacts/…` for a logged model).
DVC_OBJECT = f"{BUCKETS[DVC].read[0]}/{DVC_CACHE}/ab/cdef0123456789"
RUN_FILE = f"{BUCKETS[MLFLOW].read[0]}/1/0a1b2c/artifacts/evaluation/metrics.json"
MODEL_FILE = f"{BUCKETS[MLFLOW].read[0]}/1/models/m-0a1b2c/artifacts/summariser-Q8_0.gguf"
DVC_READ = [
    ("s3:ListBucket", DVC, "", DVC_OBJECT.rsplit("/", 1)[0] + "/"),
    ("s3:GetObject", DVC, DVC_OBJECT, None),
]
HOME_CALLS: dict[str, list[tuple[str, str, str, str | None]]] = {
    "fetch-dataset": DVC_READ,  # dvc get/pull of the dataset at a rev
    "check-triggers": DVC_READ,  # the feedback file at two revs
    # the champion's GGUF: models:/<name>/<version> resolves to the logged model's files (evaluate's shards)
    **{
        shard: [
            ("s3:ListBucket", MLFLOW, "", MODEL_FILE.rsplit("/", 1)[0] + "/"),
            ("s3:GetObject", MLFLOW, MODEL_FILE, None),
        ]
        for shard in ("evaluate-shard-cpu", "evaluate-shard-gpu")
    },
    # the run's files and the logged model (multipart for the GGUF: PutObject, and Abort on failure)
    "register": [
        ("s3:ListBucket", MLFLOW, "", MODEL_FILE.rsplit("/", 1)[0] + "/"),  # list_artifacts after logging
        ("s3:PutObject", MLFLOW, RUN_FILE, None),
        ("s3:PutObject", MLFLOW, MODEL_FILE, None),
        ("s3:AbortMultipartUpload", MLFLOW, MODEL_FILE, None),
    ],
    # build-dataset's publish: dvc push checks which objects exist, then uploads the rest
    "publish": [*DVC_READ, ("s3:PutObject", DVC, DVC_OBJECT, None)],
}  # fmt: skip
# Steps that reach no store at home themselves (MLflow's tracking API is HTTP to the server, not S3).
# evaluate (the gather step) judges the shards' answers, which Argo downloads for it; evaluate-fanout lists shards.
NO_HOME_S3 = {"check-parameters", "preflight", "train-gpu", "train-cpu", "train-ray", "convert-gguf", "propose",
              "ingest", "feedback", "teacher", "filter-split", "promote", "evaluate", "evaluate-fanout"}  # fmt: skip
# Resource templates run `kubectl` only: Argo's executor, as the submitter, which has no S3 access (no log archive).
RESOURCE_ONLY = {"delete-rayjob", "submit-retrain"}


def calls(name: str, tmpl: dict) -> list[tuple[str, str, str, str | None]]:
    """(action, bucket, key, list prefix) for every S3 call the pod(s) of template `name` make."""
    out: list[tuple[str, str, str, str | None]] = []
    for bucket, key in uris(tmpl):
        # Checkpoint stores and sealed caches list, read, write, and delete superseded or torn folders.
        out.append(("s3:ListBucket", bucket, "", key + "/"))
        out += [(a, bucket, f"{key}/some/object", None) for a in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")]
    repo = default_artifact_repository()["s3"]
    for key in artifact_keys(tmpl):
        out.append(("s3:ListBucket", repo["bucket"], "", key + "/"))  # a folder artifact is listed first
        out += [(a, repo["bucket"], f"{key}/file", None) for a in ("s3:GetObject", "s3:PutObject")]
    if archive_logs(step_specs()[name][0], tmpl, default_artifact_repository()):  # workflowpod.go IsArchiveLogs
        out.append(("s3:PutObject", repo["bucket"], f"{step_folder()}/main.log", None))
    out.append(("s3:GetObject", repo["bucket"], f"{step_folder()}/{name}.tgz", None))
    return out + HOME_CALLS.get(name, [])


@pytest.mark.parametrize("name", sorted(RESOURCE_ONLY | {"train-ray"}))
def test_a_resource_template_makes_no_s3_call(name):
    """Their pods run as distillery-submitter (no AWS role, no metadata address): a log upload would fail in the
    wait container and turn the node to Error after its resource action succeeded."""
    spec, tmpl = step_specs()[name]
    assert "resource" in tmpl
    assert not archive_logs(spec, tmpl, default_artifact_repository()), f"{name} would upload its log to S3"
    assert not any(c[2].endswith("main.log") for c in calls(name, tmpl))


def test_every_template_is_accounted_for():
    names = set(step_templates())
    assert names - set(HOME_CALLS) - NO_HOME_S3 - RESOURCE_ONLY == set(), "say which home stores the new step reaches"
    assert {"fetch-dataset", "evaluate", "register", "check-triggers"} <= names


def test_the_templates_use_the_run_prefix_and_both_caches():
    found = {(b, k) for t in step_templates().values() for b, k in uris(t)}
    assert {k.split("/")[0] for _, k in found} == {"runs", "cache"} and len(found) >= 5
    assert {b for b, _ in found} == {ARTIFACTS} == {distill.BUCKET}
    keys = set().union(*(artifact_keys(t) for t in step_templates().values()))
    assert keys >= {"runs/x/dataset", "runs/x/adapter"}


@pytest.mark.parametrize("name", sorted(step_templates()))
def test_each_call_of_each_step_is_allowed_by_both_halves(name):
    refused = [c for c in calls(name, step_templates()[name]) if not s3_call(c[0], c[1], c[2], c[3])]
    assert not refused, f"{name}: refused {refused}"


def test_each_home_call_needs_the_bucket_policy_too():
    """Across accounts the identity policy alone is not enough: without the bucket policy every home call fails."""
    for name, home in HOME_CALLS.items():
        for action, bucket, key, prefix in home:
            assert not s3_call(action, bucket, key, prefix, bucket_policies={}), (name, action, key)
            no_identity = {"Version": "2012-10-17", "Statement": []}
            assert not s3_call(action, bucket, key, prefix, identity=no_identity), (name, action, key)


# --- and nothing else ------------------------------------------------------------------------------------------------

OTHER_ROLE = f"arn:aws:iam::{SET.training_account}:role/someone-else"
OTHER_ACCOUNT_ROLE = f"arn:aws:iam::999988887777:role/{SET.role_name}"


@pytest.mark.parametrize("bucket", [ARTIFACTS, MLFLOW, DVC])
def test_plain_http_is_refused_on_every_bucket(bucket):
    key = f"{BUCKETS[bucket].read[-1]}/some/object"
    assert s3_call("s3:GetObject", bucket, key)
    assert not s3_call("s3:GetObject", bucket, key, tls=False)
    assert not s3_call("s3:ListBucket", bucket, prefix=key, tls=False)
    # …by either half alone: the bucket's policy refuses it even for a caller whose own policy would allow it
    assert not s3_call("s3:GetObject", bucket, key, tls=False, identity={"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})  # fmt: skip


@pytest.mark.parametrize("bucket", [MLFLOW, DVC])
def test_home_buckets_refuse_another_role_and_another_account(bucket):
    key = f"{BUCKETS[bucket].read[0]}/some/object"
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    for role in (OTHER_ROLE, OTHER_ACCOUNT_ROLE):
        assert not s3_call("s3:GetObject", bucket, key, role=role, identity=everything), role
        assert not s3_call("s3:ListBucket", bucket, prefix=key, role=role, identity=everything), role


@pytest.mark.parametrize("bucket", [MLFLOW, DVC])
def test_a_later_grant_to_everyone_still_lets_no_other_account_in(bucket):
    """The bucket policy's own deny holds even when someone adds a broad Allow to it later; without it, it would not."""
    key = f"{BUCKETS[bucket].read[0]}/some/object"
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    careless = json.loads(json.dumps(BUCKET_POLICIES[bucket]))
    careless["Statement"].append(
        {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": f"arn:aws:s3:::{bucket}/*"}
    )
    assert not s3_call("s3:GetObject", bucket, key, role=OTHER_ACCOUNT_ROLE, identity=everything,
                       bucket_policies={bucket: careless})  # fmt: skip
    careless["Statement"] = [st for st in careless["Statement"] if st.get("Sid") != "DenyOtherOutsidePrincipals"]
    assert s3_call("s3:GetObject", bucket, key, role=OTHER_ACCOUNT_ROLE, identity=everything,
                   bucket_policies={bucket: careless})  # fmt: skip


def test_a_bucket_outside_the_grant_is_refused():
    assert not s3_call("s3:GetObject", "someone-elses-bucket", "runs/x/y")
    assert not s3_call("s3:PutObject", "someone-elses-bucket", "runs/x/y")
    assert not s3_call("s3:ListBucket", "someone-elses-bucket", prefix="runs/")


def test_a_granted_bucket_name_in_another_account_is_refused():
    """aws:ResourceAccount: a bucket of the same name elsewhere (a deleted name re-registered) gets nothing."""
    for bucket in (ARTIFACTS, MLFLOW, DVC):
        key = f"{BUCKETS[bucket].read[0]}/some/object"
        assert not s3_call("s3:GetObject", bucket, key, owner="999988887777", bucket_policies={}), bucket


def test_listing_needs_a_granted_prefix():
    assert not s3_call("s3:ListBucket", DVC)  # the whole bucket: no s3:prefix
    assert not s3_call("s3:ListBucket", DVC, prefix="")
    assert not s3_call("s3:ListBucket", MLFLOW, prefix="other/")
    assert not s3_call("s3:ListBucket", ARTIFACTS, prefix="elsewhere/")


def test_datasets_are_appended_never_rewritten_or_deleted():
    assert s3_call("s3:PutObject", DVC, DVC_OBJECT)
    assert not s3_call("s3:PutObject", DVC, f"{BUCKETS[DVC].read[0]}/config")  # outside the content-addressed cache
    assert not s3_call("s3:PutObject", DVC, "files/md5/ab/cdef")  # outside the remote's prefix
    for bucket, key in ((DVC, DVC_OBJECT), (MLFLOW, MODEL_FILE)):
        assert not s3_call("s3:DeleteObject", bucket, key), bucket


def test_step_outputs_and_logs_are_kept():
    assert not s3_call("s3:DeleteObject", ARTIFACTS, f"{step_folder()}/main.log")
    assert not s3_call("s3:GetObject", ARTIFACTS, "elsewhere/x")
    assert not s3_call("s3:PutBucketPolicy", ARTIFACTS)
    assert not s3_call("s3:DeleteBucket", DVC)


# --- lifecycle -------------------------------------------------------------------------------------------------------


def expiry_days(key: str) -> int | None:
    """Days after which the lifecycle rules delete an object at `key`, or None when nothing does."""
    days = [
        r["Expiration"]["Days"]
        for r in LIFECYCLE["Rules"]
        if r["Status"] == "Enabled" and "Expiration" in r and key.startswith(r["Filter"]["Prefix"])
    ]
    return min(days, default=None)


def test_lifecycle_rules_are_a_valid_s3_request():
    """Checked against botocore's model of S3's PutBucketLifecycleConfiguration, as `aws s3api` would send it."""
    import botocore.session
    from botocore.validate import validate_parameters

    shape = botocore.session.get_session().get_service_model("s3").operation_model("PutBucketLifecycleConfiguration")
    validate_parameters({"Bucket": distill.BUCKET, "LifecycleConfiguration": LIFECYCLE}, shape.input_shape)


def test_run_prefixes_and_caches_expire_and_outputs_are_kept():
    deadline = rendered_template()["spec"]["activeDeadlineSeconds"]
    for _, key in {(b, k) for t in step_templates().values() for b, k in uris(t)}:
        days = expiry_days(key + "/object")
        assert days is not None, key
        assert days * 86400 > 2 * deadline, (key, days)  # never under a running workflow
    assert expiry_days(step_folder() + "/adapter.tgz") is None  # the run's outputs and logs stay


@pytest.mark.integration
def test_lifecycle_rules_are_accepted_by_an_s3_server(s3_server: str):
    make_bucket(s3_server, distill.BUCKET)
    client = s3_client(s3_server)
    client.put_bucket_lifecycle_configuration(Bucket=distill.BUCKET, LifecycleConfiguration=LIFECYCLE)
    rules = client.get_bucket_lifecycle_configuration(Bucket=distill.BUCKET)["Rules"]
    assert {r["ID"]: r.get("Expiration") for r in rules} == {r["ID"]: r.get("Expiration") for r in LIFECYCLE["Rules"]}
