"""Credentials by reference only, each reaching only its steps; read-only root filesystems with a writable place for
everything the steps write.

Judged on the pods the cluster would run (tests/argo_pods.py): Argo's pods for every template, KubeRay's for the
RayJob.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.argo_pods import MAIN, rayjob_pods, shipped_config, workflow_pods
from tests.conftest import ROOT
from tests.manifests import rendered_rayjob, serving_pods
from workflows import security

ARGO_FILES = sorted((ROOT / "infra/argo").glob("*.yaml"))

# What a credential's value looks like, so that one pasted into a parameter, argument, annotation or label is caught.
KEY_MATERIAL = {
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"),
    "AWS secret key": re.compile(r"(?i)aws.?secret.?access.?key\W+[A-Za-z0-9/+=]{40}"),
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "GitHub token": re.compile(r"\b(ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}\b"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "password in a URL": re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@"),
    "authorization header": re.compile(r"(?i)\b(authorization|bearer|basic)\b[:\s]+[A-Za-z0-9+/=._-]{16,}"),
}
# Fake secret values, as a platform engineer would create them; none may appear in anything rendered.
FAKE_SECRETS = {
    security.MLFLOW_SECRET: {"token": "mlflowtok-9f8e7d6c5b4a", "username": "svc-distill", "password": "pw-5a4b3c2d"},
    security.S3_SECRET: {"AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKE1234", "AWS_SECRET_ACCESS_KEY": "x" * 40},
    security.HUB_SECRET: {"token": "hf_" + "f" * 34},
    security.GIT_SECRET: {"count": "1", "key": "http.extraHeader", "value": "Authorization: Basic ZmFrZTpmYWtl"},
}


@functools.cache
def _parsed() -> dict[str, dict]:
    return {p.stem: yaml.load(p.read_text(), Loader=yaml.CSafeLoader) for p in ARGO_FILES}


def docs() -> dict[str, dict]:
    """The rendered docs, a fresh copy each call (tests break them)."""
    return copy.deepcopy(_parsed())


@pytest.fixture(scope="module")
def pods() -> dict[str, dict]:
    """Every pod, keyed by its template name (`train-ray/<pod>` for the RayJob's, `serve/<alias>` for the serving
    Deployments')."""
    config = shipped_config()
    out = {}
    for doc in docs().values():
        out.update(workflow_pods(doc, config))
    out.update({f"train-ray/{name}": pod for name, pod in rayjob_pods(rendered_rayjob()).items()})
    out.update({f"serve/{alias}": pod for alias, pod in serving_pods().items()})
    return out


def user_containers(pod: dict) -> list[dict]:
    """The containers that run the project's code: a step's `main`, the Ray containers (not Argo's argoexec)."""
    ctrs = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    return [c for c in ctrs if "distillery-" in c["image"]]


def secret_reach(pods: dict[str, dict]) -> dict[str, set[str]]:
    """secret name -> the templates whose containers reference it (`train-ray` for any Ray pod)."""
    reach: dict[str, set[str]] = defaultdict(set)
    for key, pod in pods.items():
        template = key.split("/")[0]
        for ctr in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            for env in ctr.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    reach[ref["name"]].add(template)
            for env_from in ctr.get("envFrom") or []:
                if "secretRef" in env_from:
                    reach[env_from["secretRef"]["name"]].add(template)
        for volume in pod["spec"].get("volumes") or []:
            if "secret" in volume and not volume["secret"]["secretName"].endswith(".service-account-token"):
                reach[volume["secret"]["secretName"]].add(template)
    return reach


def test_each_secret_reaches_exactly_its_steps(pods):
    reach = secret_reach(pods)
    expected: dict[str, set[str]] = defaultdict(set)
    for credential, users in security.USERS.items():
        for ref in (*security.SECRETS[credential], *security.FILES.get(credential, ())):
            expected[ref.secret] |= set(users)
    assert dict(reach) == expected


def test_mlflow_credentials_reach_exactly_the_steps_that_take_a_tracking_uri(pods):
    talks = {
        k.split("/")[0]
        for k, p in pods.items()
        for c in user_containers(p)
        if "--tracking-uri" in (c.get("args") or [])
    }
    talks.remove("check-parameters")  # it checks every parameter's value and connects to nothing
    reach = secret_reach(pods)
    assert reach[security.MLFLOW_SECRET] | reach[security.MLFLOW_READ_SECRET] == talks
    # One MLflow user a pod, and the writer's only where the step writes to the registry.
    assert not reach[security.MLFLOW_SECRET] & reach[security.MLFLOW_READ_SECRET]
    assert reach[security.MLFLOW_SECRET] == {"register", "propose", "check-triggers", "promote"}


def test_a_secret_given_to_an_extra_step_is_caught(pods):
    broken = copy.deepcopy(pods)
    broken["propose"]["spec"]["containers"][-1]["env"].append(
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": security.HUB_SECRET, "key": "token"}}}
    )
    assert "propose" in secret_reach(broken)[security.HUB_SECRET]


def test_every_reference_is_optional_so_clusters_that_need_none_create_none(pods):
    for key, pod in pods.items():
        for ctr in user_containers(pod):
            for env in ctr.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    assert ref.get("optional") is True, (key, env["name"])


def strings_that_must_hold_no_secret(doc: dict) -> list[tuple[str, str]]:
    """(where, text) for every parameter value, argument, annotation and label of a rendered doc, its resource
    manifests included."""
    found: list[tuple[str, str]] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("labels", "annotations") and isinstance(v, dict):
                    found.extend((f"{path}.{k}.{n}", f"{n}={s}") for n, s in v.items())
                elif k == "parameters" and isinstance(v, list):
                    found.extend((f"{path}.parameters.{p.get('name')}", str(p.get("value", ""))) for p in v)
                    found.extend((f"{path}.parameters.{p.get('name')}", str(p.get("default", ""))) for p in v)
                elif k in ("args", "command") and isinstance(v, list):
                    found.extend((f"{path}.{k}", str(a)) for a in v)
                elif k == "manifest" and isinstance(v, str):
                    found.append((f"{path}.manifest", v))
                else:
                    walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(doc, doc["metadata"]["name"])
    return found


def leaks(doc: dict) -> list[str]:
    values = [v for secret in FAKE_SECRETS.values() for v in secret.values() if len(v) > 8]
    out = []
    for where, text in strings_that_must_hold_no_secret(doc):
        out += [f"{where}: {what}" for what, rx in KEY_MATERIAL.items() if rx.search(text)]
        out += [f"{where}: a secret's value" for v in values if v in text]
    return out


def test_nothing_rendered_holds_a_secret_value_or_key_material():
    for name, doc in docs().items():
        assert leaks(doc) == [], name


@pytest.mark.parametrize(
    ("where", "value", "what"),
    [
        ("parameter", "https://svc:hunter2hunter2@mlflow.example.com", "password in a URL"),
        ("parameter", "AKIAFAKEFAKEFAKE1234", "AWS access key id"),
        ("label", "hf_" + "a" * 34, "Hugging Face token"),
        ("annotation", "Authorization: Basic ZmFrZTpmYWtlZmFrZWZha2U=", "authorization header"),
        ("argument", "pw-5a4b3c2d-and-more", "a secret's value"),
    ],
)
def test_a_planted_secret_is_found(where, value, what, monkeypatch):
    doc = docs()["distill-workflowtemplate"]
    if where == "parameter":
        doc["spec"]["arguments"]["parameters"][0]["value"] = value
    elif where == "label":
        doc["metadata"]["labels"]["x"] = value
    elif where == "annotation":
        doc["metadata"]["annotations"]["x"] = value
    else:
        monkeypatch.setitem(FAKE_SECRETS, security.MLFLOW_SECRET, {"password": value})
        doc["spec"]["templates"][0]["container"]["args"].append(value)
    assert any(line.endswith(what) for line in leaks(doc))


# --- read-only root filesystems ------------------------------------------------------------------------------------


def writable_paths(pod: dict, ctr: dict) -> list[str]:
    """Where the container may write: its volume mounts of emptyDirs (the root filesystem is read-only)."""
    empty = {v["name"] for v in pod["spec"].get("volumes") or [] if "emptyDir" in v}
    return [m["mountPath"] for m in ctr.get("volumeMounts") or [] if m["name"] in empty and not m.get("readOnly")]


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def test_every_project_container_has_a_read_only_root_filesystem(pods):
    for key, pod in pods.items():
        for ctr in user_containers(pod):
            assert (ctr.get("securityContext") or {}).get("readOnlyRootFilesystem") is True, (key, ctr["name"])


def test_every_cache_and_temp_dir_lands_on_an_empty_dir(pods):
    for key, pod in pods.items():
        for ctr in user_containers(pod):
            env = {e["name"]: e.get("value") for e in ctr.get("env") or []}
            roots = writable_paths(pod, ctr)
            for var in security.WRITABLE_ENV:
                assert var in env and under(env[var], roots), (key, ctr["name"], var, roots)


def test_a_cache_left_on_the_root_filesystem_is_caught(pods):
    pod = copy.deepcopy(pods["evaluate"])
    main = next(c for c in pod["spec"]["containers"] if c["name"] == MAIN)
    next(e for e in main["env"] if e["name"] == "HF_HOME")["value"] = "/work/.hf"  # the images' default
    assert not under("/work/.hf", writable_paths(pod, main))


def test_every_step_pod_has_ephemeral_storage_requests_and_limits(pods):
    for key, pod in pods.items():
        for ctr in [c for c in user_containers(pod) if c in pod["spec"]["containers"]]:  # not KubeRay's wait-gcs-ready
            resources = ctr.get("resources") or {}
            for kind in ("requests", "limits"):
                assert "ephemeral-storage" in resources.get(kind, {}), (key, kind)


# --- git credentials: a URL-scoped git config file --------------------------------------------------------------------


def test_git_credentials_reach_dulwich_for_their_host_only(pods, tmp_path, monkeypatch):
    """The rendered fetch-dataset pod, reproduced under tmp_path: the Secret's file where the pod mounts it, and the
    pod's XDG_CONFIG_HOME. dulwich (DVC's git client) then sends the header to the configured host and no other."""
    from dulwich.client import get_transport_and_path
    from dulwich.config import StackedConfig

    pod = pods["fetch-dataset"]
    main = next(c for c in pod["spec"]["containers"] if c["name"] == MAIN)
    volume = next(v for v in pod["spec"]["volumes"] if v.get("secret", {}).get("secretName") == security.GIT_SECRET)
    mount = next(m for m in main["volumeMounts"] if m["name"] == volume["name"])
    item = volume["secret"]["items"][0]
    env = {e["name"]: e.get("value") for e in main["env"]}
    config = tmp_path / mount["mountPath"].lstrip("/") / item["path"]
    config.parent.mkdir(parents=True)
    config.write_text('[http "https://git.example.org/"]\n\textraHeader = Authorization: Basic ZmFrZTpmYWtl\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / env["XDG_CONFIG_HOME"].lstrip("/")))
    monkeypatch.setenv("HOME", str(tmp_path / "no-home"))

    def headers(url: str) -> dict:
        client, _ = get_transport_and_path(url, config=StackedConfig.default())
        return dict(client.pool_manager.headers)

    assert headers("https://git.example.org/ml/data.git")["Authorization"] == "Basic ZmFrZTpmYWtl"
    assert "Authorization" not in headers("https://elsewhere.example.com/ml/data.git")


# --- no credential in any log line ----------------------------------------------------------------------------------


def _run_check(tracking_uri: str, env: dict[str, str], out) -> str:
    flags = {"tracking-uri": tracking_uri, "model-name": "never-registered", "dataset-rev": "main", "run-id": "r1"}
    argv = [sys.executable, "-m", "steps.check_triggers", "--out", str(out)]
    argv += [a for k, v in flags.items() for a in (f"--{k}", v)]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return proc.stdout + proc.stderr


@pytest.mark.integration
def test_check_triggers_logs_no_credential(mlflow_server, tmp_path):
    """check-triggers with every credential its pod gets (fake values, variables from the rendered pod's env), against
    the real MLflow server and then an unreachable one (the error path prints a traceback): no value in any log line
    or output file."""
    variables = [e["name"] for e in security.secret_env("check-triggers")]
    fake = {v: f"fake-{v.lower()}-7c1e9a3b" for v in variables if not v.startswith("AWS_")}
    env = {**os.environ, **fake, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    assert {"MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD"} <= set(fake)
    logs = _run_check(mlflow_server, env, tmp_path / "ok")
    assert "never-registered" in logs  # it ran and said why nothing fired
    logs += _run_check("http://127.0.0.1:9", env, tmp_path / "down")
    files = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert [v for v in fake.values() if v in logs + files] == []


# --- images by digest ---------------------------------------------------------------------------------------------


def test_with_digests_given_every_project_image_is_pinned_by_digest_the_rayjob_s_included():
    from workflows import distill, images, promote, retrain

    digests = {kind: "sha256:" + f"{i}" * 64 for i, kind in enumerate(images.KINDS, 1)}
    pinned = images.Images(images.DEFAULT.registry, images.DEFAULT.tag, digests)
    text = yaml.safe_dump(distill.build(pinned).to_dict()) + yaml.safe_dump(retrain.build(images=pinned).to_dict())
    text += yaml.safe_dump(promote.build(images=pinned).to_dict())
    refs = set(re.findall(r"ghcr\.io/distillery-ml/distillery-[a-z]+:[^\s'\"]+", text))
    assert refs == {pinned.ref(k) for k in images.KINDS}, refs
    assert all("@sha256:" in r for r in refs)


def test_preflight_s_patch_sizes_both_empty_dirs_of_a_sized_step(pods):
    """A real plan's podSpecPatch on the convert-gguf pod: the output folder and /tmp are each capped at the step's
    disk, the pod's ephemeral-storage limit (which bounds their sum)."""
    from steps import sizing
    from tests.argo_pods import apply_pod_spec_patches

    smollm2 = sizing.Shape(576, 1536, 30, 9, 3, 64, 49152, True, 134_515_008, 2)
    p = sizing.planning.plan_for(smollm2, sizing.Knobs("cpu", False, 512, 16, 16, ("Q8_0", "Q4_K_M")), "SmolLM2-135M")
    spec = apply_pod_spec_patches(pods["convert-gguf"]["spec"], [p.pod_patch("convert-gguf")])
    main = next(c for c in spec["containers"] if c["name"] == MAIN)
    disk = main["resources"]["limits"]["ephemeral-storage"]
    sizes = {v["name"]: v["emptyDir"].get("sizeLimit") for v in spec["volumes"] if v["name"] in sizing.SIZED_VOLUMES}
    assert sizes == {"out": disk, "scratch": disk}


def test_every_step_pod_caps_both_empty_dirs_at_its_disk(pods):
    """A step pod's disk is one number: its ephemeral-storage request and limit and each emptyDir's sizeLimit — a
    light step's from its row (workflows/deploy.py `fixed_resources`), a sized step's from preflight's patch (applied
    here as Argo does)."""
    from steps import sizing

    checked = []
    for key, pod in pods.items():
        steps_main = [c for c in user_containers(pod) if c["name"] == MAIN]
        if key.startswith(("train-ray/", "serve/")) or not steps_main:
            continue  # the Ray and serving pods; resource templates (argoexec runs them)
        resources = steps_main[0]["resources"]
        disk = resources["limits"]["ephemeral-storage"]
        sizes = {v["name"]: v["emptyDir"].get("sizeLimit") for v in pod["spec"]["volumes"] if "emptyDir" in v}
        assert {name: sizes.get(name) for name in sizing.exports.SIZED_VOLUMES} == {"out": disk, "scratch": disk}, key
        assert resources["requests"]["ephemeral-storage"] == disk, key
        checked.append(key)
    assert {"check-parameters", "fetch-dataset", "publish", "check-triggers", "promote", "convert-gguf"} <= set(checked)


def test_the_teacher_key_is_a_mounted_file_not_a_variable(pods, tmp_path, monkeypatch):
    """The teacher step gets the key as a file and its path in TEACHER_API_KEY_FILE; no variable holds the key, so
    llama.cpp's server (its child for a local teacher) inherits nothing."""
    from steps import teacher

    (teacher_pod,) = [p for k, p in pods.items() if k.split("/")[0] == "teacher"]
    env = {e["name"]: e for c in teacher_pod["spec"]["containers"] for e in c.get("env") or []}
    assert "TEACHER_API_KEY" not in env
    path = env["TEACHER_API_KEY_FILE"]["value"]
    mounts = [m["mountPath"] for c in teacher_pod["spec"]["containers"] for m in c.get("volumeMounts") or []]
    assert any(path.startswith(m + "/") for m in mounts), (path, mounts)
    key = tmp_path / "api-key"
    key.write_text("sk-from-file\n")
    monkeypatch.setenv("TEACHER_API_KEY_FILE", str(key))
    monkeypatch.setenv("TEACHER_API_KEY", "sk-from-env")
    assert teacher.api_key() == "sk-from-file"
    monkeypatch.setenv("TEACHER_API_KEY_FILE", str(tmp_path / "absent"))
    assert teacher.api_key() == "sk-from-env"  # a local run


def test_the_hub_token_is_a_file_in_the_steps_and_a_variable_only_in_the_ray_pods(pods, tmp_path):
    """Argo's steps get the hub token as a file that huggingface_hub reads (HF_TOKEN_PATH); the Ray pods, which may
    mount no Secret (infra/admission/rayjob-pods.yaml), as HF_TOKEN."""
    for key, pod in pods.items():
        if key.split("/")[0] not in security.USERS["model-hub"] or key == "train-ray":  # that one: argoexec only
            continue
        env = {e["name"]: e for c in pod["spec"]["containers"] for e in c.get("env") or []}
        secrets = {v["secret"]["secretName"] for v in pod["spec"].get("volumes") or [] if "secret" in v}
        if key.startswith("train-ray/"):
            assert "HF_TOKEN" in env and security.HUB_SECRET not in secrets, key
        else:
            assert "HF_TOKEN" not in env and security.HUB_SECRET in secrets, key
            assert env["HF_TOKEN_PATH"]["value"] == f"{security.HUB_DIR}/token", key
    token = tmp_path / "token"
    token.write_text("hf_from_file\n")
    environ = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"} | {"HF_TOKEN_PATH": str(token)}
    read = subprocess.run([sys.executable, "-c", "import huggingface_hub; print(huggingface_hub.get_token())"],
                          env=environ, capture_output=True, text=True, check=True)  # fmt: skip
    assert read.stdout.strip() == "hf_from_file"


def test_a_hub_mirror_reaches_every_pod_that_downloads_the_base_and_no_other(pods, tmp_path):
    """HF_ENDPOINT from the optional `distillery-settings` ConfigMap (a cluster without huggingface.co names its hub
    mirror there): in exactly the pods of the steps that download the base, the Ray pods included; and
    huggingface_hub takes that variable as the hub it downloads from."""
    ((variable, key),) = security.SETTINGS["model-hub"]
    reach = set()
    for name, pod in pods.items():
        for c in user_containers(pod):
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if e["name"] == variable:
                    assert ref == {"name": security.SETTINGS_CONFIGMAP, "key": key, "optional": True}, (name, e)
                    reach.add(name.split("/")[0])
    assert reach == set(security.USERS["model-hub"]), reach
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {variable: "http://10.0.0.1:8090"}
    read = subprocess.run([sys.executable, "-c", "from huggingface_hub import constants; print(constants.ENDPOINT)"],
                          env=environ, capture_output=True, text=True, check=True)  # fmt: skip
    assert read.stdout.strip() == "http://10.0.0.1:8090"


HUB_CALLS = re.compile(r"\b(from_pretrained|snapshot_download|hf_hub_download)\(")


def test_every_stage_whose_code_downloads_from_the_hub_gets_the_hub_credential_and_mirror(pods):
    """Read from the code, not from the list: a stage whose module (or its package) calls huggingface_hub or
    transformers' `from_pretrained` downloads from the hub on a cluster, so its pods need HF_TOKEN (a gated base such
    as Llama 3.2) and HF_ENDPOINT (a cluster without huggingface.co). build-dataset's ingest, which sizes chunks with
    the base's tokenizer, had neither (found preparing build-dataset for the node, whose pods reach only a mirror)."""
    from steps.pipeline import BUILD_STAGES, STAGES

    templates = {name.split("/")[0] for name in pods}
    downloading = set()
    for stage in (*STAGES, *BUILD_STAGES):
        path = ROOT / Path(*stage.module.split("."))
        sources = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
        if any(HUB_CALLS.search(f.read_text()) for f in sources):
            downloading |= {t for t in templates if t == stage.name or t.startswith(f"{stage.name}-")}
    assert downloading, "no stage downloads from the hub: the pattern no longer matches the code"
    missing = downloading - set(security.USERS["model-hub"])
    assert not missing, f"{sorted(missing)} download from the hub without the model-hub credential and mirror"


def test_every_stage_given_a_parameter_that_may_be_an_s3_uri_gets_the_s3_keys():
    """A parameter whose help offers an s3:// URI (build-dataset's documents, its feedback file) is read by its step
    through the AWS SDK: without the optional S3 keys (IRSA on EKS) in its pod it cannot. build-dataset's feedback
    step had none: on the node it stopped with botocore's NoCredentialsError reading the feedback file from S3."""
    from steps.pipeline import BUILD_PARAMS, BUILD_STAGES, PARAMS, STAGES

    helps = {p.name: p.help for p in (*PARAMS, *BUILD_PARAMS)}
    readers = {st.name for st in (*STAGES, *BUILD_STAGES) if any("s3://" in (helps.get(p) or "") for p in st.params)}
    assert readers, "no parameter offers an s3:// URI: the test no longer reads the parameters"
    assert not readers - set(security.USERS["s3"]), sorted(readers - set(security.USERS["s3"]))
