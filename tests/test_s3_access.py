"""Every S3 call a step makes, judged against BOTH halves of the grant — its duty's role's identity policy and the
bucket's own policy (infra/iam/, infra/s3/, rendered by scripts/render_iam.py) — with IAM's evaluation logic
(tests/iam_eval.py): allowed only where both allow across accounts, an explicit Deny winning everywhere. The calls come
from the rendered templates (every s3:// location a step or a Ray pod is handed, every keyed artifact, Argo's step
folders and logs, the account each pod runs as) and from the steps' own stores at home (the DVC remote, MLflow's
artifact root). Each role's reach is checked both ways: what its duty needs is allowed, what another duty's is
refused (register alone writes MLflow's artifacts, write-once; serving only reads them). The lifecycle rules expire
the per-run prefixes and caches, never a run's outputs."""

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
from workflows import distill, security

SET = load(SETTINGS)
ROLES = {r.duty: r for r in SET.roles}
IDENTITIES = {r.duty: json.loads((ROOT / f"infra/iam/{r.name}-policy.json").read_text()) for r in SET.roles}
IDENTITY = IDENTITIES["steps"]
BUCKETS = {b.name: b for b in SET.buckets}
BUCKET_POLICIES = {b.name: json.loads((ROOT / f"infra/s3/{b.key}-policy.json").read_text()) for b in SET.buckets}
ARTIFACTS, MLFLOW, DVC = (b.name for b in SET.buckets)
LIFECYCLE = json.loads((ROOT / "infra/s3/distillery-artifacts-lifecycle.json").read_text())
TEMPLATES = sorted((ROOT / "infra/argo").glob("*.yaml"))
TLS = {"aws:SecureTransport": "true"}
# The requests IAM authorizes as s3:PutObject, told apart by their context keys: a plain PutObject (or
# CompleteMultipartUpload) creates an object; PUT_ONCE is one with If-None-Match: * (steps/core/write_once.py);
# UPLOAD_PART is CreateMultipartUpload/UploadPart, which create nothing yet and carry no conditional header.
PUT_ONCE = "s3:PutObject+If-None-Match"
UPLOAD_PART = "s3:PutObject+UploadPart"
PUT_CONTEXT = {
    "s3:PutObject": {"s3:ObjectCreationOperation": "true"},
    PUT_ONCE: {"s3:ObjectCreationOperation": "true", "s3:if-none-match": "*"},
    UPLOAD_PART: {"s3:ObjectCreationOperation": "false"},
}


def s3_call(
    action: str,
    bucket: str,
    key: str = "",
    prefix: str | None = None,
    role: str | None = None,
    tls: bool = True,
    identity: dict | None = None,
    bucket_policies: dict = BUCKET_POLICIES,
    owner: str | None = None,
    duty: str = "steps",
) -> bool:
    """One S3 request by `duty`'s role (or `role` with `identity`): an object call on `bucket/key`, or ListBucket
    with `prefix`."""
    role = role or ROLES[duty].arn
    identity = IDENTITIES[duty] if identity is None else identity
    context = {"aws:SecureTransport": str(tls).lower(), **PUT_CONTEXT.get(action, {})}
    action = action.split("+")[0]
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


def artifact_keys(tmpl: dict, io: tuple[str, ...] = ("inputs", "outputs")) -> set[str]:
    """Keys of the template's Argo artifacts (`io`: inputs, outputs or both) that name their own key in the default
    artifact repository."""
    keys = set()
    for side in io:
        keys |= {concrete(a["s3"]["key"]) for a in tmpl.get(side, {}).get("artifacts", []) if "key" in a.get("s3", {})}
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
    # the run's files (the decision among them) and the logged model, write-once (multipart for the GGUF: parts,
    # then the conditional completion; Abort on failure), then read back for the manifest
    "register": [
        ("s3:ListBucket", MLFLOW, "", MODEL_FILE.rsplit("/", 1)[0] + "/"),  # list_artifacts after logging
        (PUT_ONCE, MLFLOW, RUN_FILE, None),
        (PUT_ONCE, MLFLOW, MODEL_FILE, None),
        (UPLOAD_PART, MLFLOW, MODEL_FILE, None),
        ("s3:AbortMultipartUpload", MLFLOW, MODEL_FILE, None),
        ("s3:GetObject", MLFLOW, MODEL_FILE, None),
    ],
    # the serving pods: the served version's files (workflows/serving.py), nothing else
    "serve": [
        ("s3:ListBucket", MLFLOW, "", MODEL_FILE.rsplit("/", 1)[0] + "/"),
        ("s3:GetObject", MLFLOW, MODEL_FILE, None),
    ],
    # build-dataset's publish: dvc push checks which objects exist, then uploads the rest
    "publish": [*DVC_READ, ("s3:PutObject", DVC, DVC_OBJECT, None)],
}  # fmt: skip
# Steps that reach no store at home themselves (MLflow's tracking API is HTTP to the server, not S3).
# evaluate (the gather step) judges the shards' answers, which Argo downloads for it; evaluate-fanout lists shards.
NO_HOME_S3 = {"check-parameters", "preflight", "kd-targets", "train-gpu", "train-cpu", "train-ray", "convert-gguf",
              "propose", "push-adapter", "ingest", "feedback", "teacher", "filter-split", "promote", "evaluate",
              "evaluate-fanout"}  # fmt: skip
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
        out.append(("s3:GetObject", repo["bucket"], f"{key}/file", None))
    out += [("s3:PutObject", repo["bucket"], f"{key}/file", None) for key in artifact_keys(tmpl, ("outputs",))]
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


def duty_of(name: str) -> str:
    """The duty whose role a template's pod holds: its service account's, by the settings' mapping."""
    spec, tmpl = step_specs()[name]
    account = tmpl.get("serviceAccountName") or spec.get("serviceAccountName")
    if name == "train-ray":
        account = security.RAY
    return next((r.duty for r in SET.roles if account in r.service_accounts), "none")


def test_each_pod_runs_under_its_duty_s_account():
    assert duty_of("register") == "register"
    assert {duty_of(n) for n in step_templates() if n != "register" and n not in RESOURCE_ONLY} == {"steps"}
    assert {duty_of(n) for n in RESOURCE_ONLY} == {"none"}  # the submitter holds no role


@pytest.mark.parametrize("name", sorted(step_templates()))
def test_each_call_of_each_step_is_allowed_by_both_halves(name):
    duty = duty_of(name)
    if name in RESOURCE_ONLY:
        return  # no S3 call at all (test_a_resource_template_makes_no_s3_call)
    refused = [c for c in calls(name, step_templates()[name]) if not s3_call(c[0], c[1], c[2], c[3], duty=duty)]
    assert not refused, f"{name} ({duty}): refused {refused}"


def test_serving_reads_the_served_version():
    assert all(s3_call(*c, duty="serving") for c in HOME_CALLS["serve"])


# --- one role per duty: each reaches what its duty needs and nothing of another's -------------------------------------


@pytest.mark.parametrize("action", ["s3:PutObject", PUT_ONCE, UPLOAD_PART, "s3:DeleteObject"])
@pytest.mark.parametrize("duty", ["steps", "serving"])
def test_only_register_writes_mlflow_artifacts(duty, action):
    """A compromised step (a PDF parser, the trainer, evaluate) or the serving process cannot touch a model version
    or a decision; register can, and only write-once."""
    for key in (MODEL_FILE, RUN_FILE):
        assert not s3_call(action, MLFLOW, key, duty=duty), (duty, action, key)
    assert s3_call("s3:GetObject", MLFLOW, MODEL_FILE, duty=duty)


def test_register_writes_mlflow_artifacts_only_write_once():
    assert s3_call(PUT_ONCE, MLFLOW, MODEL_FILE, duty="register")
    assert s3_call(UPLOAD_PART, MLFLOW, MODEL_FILE, duty="register")  # the parts of a multipart upload
    assert not s3_call("s3:PutObject", MLFLOW, MODEL_FILE, duty="register")  # no header: refused
    assert not s3_call("s3:PutObject", MLFLOW, RUN_FILE, duty="register")
    assert not s3_call("s3:DeleteObject", MLFLOW, MODEL_FILE, duty="register")


def test_the_bucket_refuses_an_unconditional_put_whatever_the_caller_s_own_policy_says():
    """The bucket policy's write-once deny holds for any principal, even one whose identity allows everything (an
    admin of the home account); without it, such a call would pass."""
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    admin = f"arn:aws:iam::{SET.home_account}:role/admin"
    assert not s3_call("s3:PutObject", MLFLOW, MODEL_FILE, role=admin, identity=everything)
    assert s3_call(PUT_ONCE, MLFLOW, MODEL_FILE, role=admin, identity=everything)
    lenient = json.loads(json.dumps(BUCKET_POLICIES[MLFLOW]))
    lenient["Statement"] = [st for st in lenient["Statement"] if not st["Sid"].endswith("WriteOnce")]
    assert s3_call("s3:PutObject", MLFLOW, MODEL_FILE, role=admin, identity=everything,
                   bucket_policies={MLFLOW: lenient})  # fmt: skip


@pytest.mark.parametrize("duty", ["register", "serving"])
def test_only_steps_reach_the_dvc_store(duty):
    assert not s3_call("s3:GetObject", DVC, DVC_OBJECT, duty=duty)
    assert not s3_call("s3:PutObject", DVC, DVC_OBJECT, duty=duty)
    assert not s3_call("s3:ListBucket", DVC, prefix=DVC_OBJECT.rsplit("/", 1)[0] + "/", duty=duty)


def test_serving_reaches_nothing_of_the_run_bucket():
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        for prefix in ("distill", "runs", "cache"):
            assert not s3_call(action, ARTIFACTS, f"{prefix}/x/y", duty="serving"), (action, prefix)
    assert not s3_call("s3:ListBucket", ARTIFACTS, prefix="runs/", duty="serving")


def test_register_reads_its_inputs_and_writes_only_its_step_folder_in_the_run_bucket():
    assert s3_call("s3:GetObject", ARTIFACTS, "runs/x/gguf/candidate.gguf", duty="register")
    assert s3_call("s3:PutObject", ARTIFACTS, f"{step_folder()}/result.tgz", duty="register")
    for key in ("runs/x/gguf/candidate.gguf", "cache/generations/x/y"):
        assert not s3_call("s3:PutObject", ARTIFACTS, key, duty="register"), key
        assert not s3_call("s3:DeleteObject", ARTIFACTS, key, duty="register"), key


def test_each_home_call_needs_the_bucket_policy_too():
    """Across accounts the identity policy alone is not enough: without the bucket policy every home call fails."""
    for name, home in HOME_CALLS.items():
        for action, bucket, key, prefix in home:
            assert not s3_call(action, bucket, key, prefix, bucket_policies={}), (name, action, key)
            no_identity = {"Version": "2012-10-17", "Statement": []}
            assert not s3_call(action, bucket, key, prefix, identity=no_identity), (name, action, key)


# --- and nothing else ------------------------------------------------------------------------------------------------

OTHER_ROLE = f"arn:aws:iam::{SET.training_account}:role/someone-else"
OTHER_ACCOUNT_ROLE = f"arn:aws:iam::999988887777:role/{ROLES['steps'].name}"


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


def test_datasets_are_added_under_the_cache_never_deleted():
    assert s3_call("s3:PutObject", DVC, DVC_OBJECT)
    assert not s3_call("s3:PutObject", DVC, f"{BUCKETS[DVC].read[0]}/config")  # outside the content-addressed cache
    assert not s3_call("s3:PutObject", DVC, "files/md5/ab/cdef")  # outside the remote's prefix
    for bucket, key in ((DVC, DVC_OBJECT), (MLFLOW, MODEL_FILE)):
        assert not s3_call("s3:DeleteObject", bucket, key), bucket


@pytest.mark.parametrize("bucket", [ARTIFACTS, MLFLOW, DVC])
def test_no_role_may_undo_versioning_or_the_bucket_s_rules_even_with_a_broad_grant(bucket):
    """The bucket policy denies it to every role with access, even one whose own policy allows s3:* (in the artifact
    bucket's account an identity grant alone would otherwise be enough)."""
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    key = f"{BUCKETS[bucket].read[0]}/x"
    for duty, _ in BUCKETS[bucket].access:
        for action, resource in (("s3:DeleteObjectVersion", key), ("s3:PutBucketVersioning", ""),
                                 ("s3:PutBucketPolicy", ""), ("s3:PutLifecycleConfiguration", "")):  # fmt: skip
            assert not s3_call(action, bucket, resource, duty=duty, identity=everything), (duty, action)
    if bucket == ARTIFACTS:  # same account: without the deny, the broad identity grant alone would pass
        kept = [st for st in BUCKET_POLICIES[bucket]["Statement"] if st["Sid"] != "DenyRolesHistoryAndPolicyChanges"]
        lenient = {bucket: {**BUCKET_POLICIES[bucket], "Statement": kept}}
        assert s3_call("s3:DeleteObjectVersion", bucket, key, identity=everything, bucket_policies=lenient)


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
