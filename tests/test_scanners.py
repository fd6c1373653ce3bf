"""The security scanners, run as CI runs them: parliament on every IAM policy of the grant (identity, trust, bucket and
key-policy statements), checkov on infra/ (Kubernetes objects, the kustomization, the Argo templates) and on the pods
the templates produce (tests/argo_pods.py: Argo's step pods and KubeRay's head and workers), and checkov's IAM checks
on the role (as a CloudFormation resource: privilege escalation, exfiltration, unconstrained writes). Zero findings,
or an entry in infra/scan-skips.yaml naming the finding and why; an entry that matches nothing is stale and fails too.
Each scanner is shown to catch a broken fixture, so a scanner that silently finds nothing cannot pass.

Both tools live in .venv-scan (scripts/setup.sh --dev; pinned by scripts/scan-requirements.txt), never the main
environment. Hadolint on the Dockerfiles is in tests/test_images.py. Each checkov run happens once (~13 s, ~8 s here).
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts.render_iam import BUCKET_SETTINGS
from tests.argo_pods import rayjob_pods, shipped_config, workflow_pods, write_pods
from tests.conftest import ROOT
from tests.manifests import rendered_rayjob

SCAN_BIN = ROOT / ".venv-scan/bin"
SKIPS = yaml.safe_load((ROOT / "infra/scan-skips.yaml").read_text())
STATUSES = {"false-positive", "accepted", "k8s-hardening", "open"}
POLICIES = sorted(
    p
    for folder in ("iam", "s3")
    for p in (ROOT / "infra" / folder).glob("*.json")
    if not p.name.endswith(BUCKET_SETTINGS)
)
BROKEN_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:GetObjects", "Resource": "*"}],
}


def scanner(name: str) -> str:
    path = SCAN_BIN / name
    if not path.exists():
        pytest.skip(f"{path} missing: run scripts/setup.sh --dev (the scanners' own environment)")
    return str(path)


def unexplained(findings: list[tuple[str, str]], section: str, key: str) -> tuple[list, list]:
    """(findings no skip entry covers, skip entries that cover no finding) for (path, id) findings."""
    entries = SKIPS[section]
    covered = [any(e[key] == fid and any(fnmatch.fnmatch(path, g) for g in e["files"]) for e in entries)
               for path, fid in findings]  # fmt: skip
    stale = [e for e in entries if not any(e[key] == fid and any(fnmatch.fnmatch(p, g) for g in e["files"])
                                           for p, fid in findings)]  # fmt: skip
    return sorted({f for f, ok in zip(findings, covered, strict=True) if not ok}), stale


# --- parliament ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parliament(tmp_path_factory) -> list[dict]:
    broken = tmp_path_factory.mktemp("parliament") / "broken-policy.json"
    broken.write_text(json.dumps(BROKEN_POLICY))
    files = [str(p.relative_to(ROOT)) for p in POLICIES] + [str(broken)]
    proc = subprocess.run(
        [scanner("python"), "tests/parliament_findings.py", *files], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_parliament_reads_every_policy_of_the_grant():
    names = {p.name for p in POLICIES}
    for role in ("distillery-steps", "distillery-register", "distillery-serving"):
        assert {f"{role}-policy.json", f"{role}-trust-policy.json"} <= names
    assert {"mlflow-bucket-policy.json", "dvc-bucket-policy.json", "artifact-bucket-policy.json"} <= names


def test_parliament_catches_a_broken_policy(parliament):
    assert any(f["issue"] == "UNKNOWN_ACTION" for f in parliament if f["file"].endswith("broken-policy.json"))


def test_parliament_finds_nothing_unexplained(parliament):
    findings = [(f["file"], f["issue"]) for f in parliament if not f["file"].endswith("broken-policy.json")]
    missing, stale = unexplained(findings, "parliament", "issue")
    detail = [f for f in parliament if (f["file"], f["issue"]) in missing]
    assert not missing, f"new parliament findings (fix, or explain in infra/scan-skips.yaml): {detail}"
    assert not stale, f"infra/scan-skips.yaml entries that match nothing any more (delete them): {stale}"


# --- checkov ---------------------------------------------------------------------------------------------------------


def scanned_pods() -> dict[str, dict]:
    """`<file stem>-<template>` and `rayjob-<group>` → the pod the cluster would run."""
    pods = {}
    for path in sorted((ROOT / "infra/argo").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        pods |= {f"{path.stem}/{name}": pod for name, pod in workflow_pods(doc, shipped_config()).items()}
    return pods | {f"rayjob/{name}": pod for name, pod in rayjob_pods(rendered_rayjob()).items()}


@pytest.fixture(scope="module")
def checkov(tmp_path_factory) -> list[tuple[str, str]]:
    """(scanned path, check id) of every failed check, from one checkov run over infra/, the pods and a broken pod."""
    tmp = tmp_path_factory.mktemp("checkov")
    pods = scanned_pods()
    write_pods(pods, tmp / "pods")
    broken = json.loads(json.dumps(pods["distill-workflowtemplate/train-cpu"]))
    broken["spec"]["hostPID"] = True
    broken["spec"]["containers"][-1]["securityContext"] = {"privileged": True}
    write_pods({"privileged": broken}, tmp / "broken")
    # kustomize builds infra/'s kustomization with the main environment's kubectl.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = [scanner("checkov"), "-d", "infra", "-d", str(tmp / "pods"), "-d", str(tmp / "broken"),
           "--framework", "kubernetes", "kustomize", "argo_workflows",
           "--skip-download", "--quiet", "--compact", "-o", "json"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: some check failed
    reports = []
    decoder, text, at = json.JSONDecoder(), proc.stdout.strip(), 0
    while at < len(text):  # one JSON document per -d folder, one after the other
        doc, end = decoder.raw_decode(text, at)
        reports += doc if isinstance(doc, list) else [doc]
        at = len(text) - len(text[end:].lstrip())
    assert {r["check_type"] for r in reports} >= {"kubernetes", "kustomize"}, [r["check_type"] for r in reports]
    out = []
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, report["check_type"]
        for failed in report["results"]["failed_checks"]:
            path = Path(failed["file_abs_path"])
            # file_path is relative to its -d folder (`/infra/…` for the one given relative to ROOT)
            rel = str(path.relative_to(tmp)) if path.is_relative_to(tmp) else failed["file_path"].lstrip("/")
            out.append((rel, failed["check_id"]))
    return out


@pytest.mark.slow
def test_checkov_scans_every_pod_and_catches_a_privileged_one(checkov):
    assert {"CKV_K8S_16", "CKV_K8S_17"} <= {cid for path, cid in checkov if path == "broken/privileged.yaml"}
    scanned = {path for path, _ in checkov if path.startswith("pods/")}
    expected = {f"pods/{name.replace('/', '-')}.yaml" for name in scanned_pods()}
    assert scanned == expected  # every pod failed at least one check, so every pod was read
    assert "pods/rayjob-head.yaml" in scanned and "pods/distill-workflowtemplate-train-gpu.yaml" in scanned


@pytest.mark.slow
def test_checkov_finds_nothing_unexplained(checkov):
    findings = [(path, cid) for path, cid in checkov if not path.startswith("broken/")]
    missing, stale = unexplained(findings, "checkov", "check")
    assert not missing, f"new checkov findings (fix, or explain in infra/scan-skips.yaml): {missing}"
    assert not stale, f"infra/scan-skips.yaml entries that match nothing any more (delete them): {stale}"


ROLES = ("distillery-steps", "distillery-register", "distillery-serving")


def cloudformation(identity: dict, trust: dict, name: str = "distillery-steps") -> dict:
    """The role as a CloudFormation resource, the only shape in which checkov reads IAM policy documents."""
    policies = [{"PolicyName": "distillery-s3", "PolicyDocument": identity}]
    role = {"RoleName": name, "AssumeRolePolicyDocument": trust, "Policies": policies}
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {"Role": {"Type": "AWS::IAM::Role", "Properties": role}},
    }


@pytest.fixture(scope="module")
def checkov_iam(tmp_path_factory) -> dict[str, set[str]]:
    """Failed check ids per file: checkov's IAM checks on each rendered role and on one granting everything."""
    tmp = tmp_path_factory.mktemp("checkov-iam")
    files = []
    for name in ROLES:
        identity = json.loads((ROOT / f"infra/iam/{name}-policy.json").read_text())
        trust = json.loads((ROOT / f"infra/iam/{name}-trust-policy.json").read_text())
        (tmp / f"{name}.json").write_text(json.dumps(cloudformation(identity, trust, name)))
        files += ["-f", str(tmp / f"{name}.json")]
    broken = {**identity, "Statement": [*identity["Statement"], {"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    (tmp / "broken.json").write_text(json.dumps(cloudformation(broken, trust)))
    cmd = [scanner("checkov"), *files, "-f", str(tmp / "broken.json"),
           "--framework", "cloudformation", "--skip-download", "--compact", "-o", "json"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    count = len(ROLES) + 1
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["resource_count"] == count, report["summary"]
    failed: dict[str, set[str]] = {f"{name}.json": set() for name in (*ROLES, "broken")}
    for check in report["results"]["failed_checks"]:
        failed[Path(check["file_abs_path"]).name].add(check["check_id"])
    assert len(report["results"]["passed_checks"]) >= 8  # privilege escalation, exfiltration, write, assume-role…
    return failed


@pytest.mark.slow
def test_checkov_passes_each_role_and_catches_one_that_allows_everything(checkov_iam):
    assert all(checkov_iam[f"{name}.json"] == set() for name in ROLES), checkov_iam
    assert {"CKV_AWS_62", "CKV_AWS_108", "CKV_AWS_110", "CKV_AWS_111"} <= checkov_iam["broken.json"]


def test_every_skip_says_why_and_how_it_stands():
    for section, key in (("parliament", "issue"), ("checkov", "check")):
        for entry in SKIPS[section]:
            assert set(entry) == {key, "files", "status", "why"}, entry
            assert entry["status"] in STATUSES and len(entry["why"]) > 40, entry


def test_a_finding_outside_the_skip_list_is_reported():
    missing, stale = unexplained([("pods/x.yaml", "CKV_K8S_16"), ("pods/x.yaml", "CKV_K8S_34")], "checkov", "check")
    assert missing == [("pods/x.yaml", "CKV_K8S_16")]
    assert stale  # most entries match nothing in this two-finding list
