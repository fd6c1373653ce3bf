"""The Argo objects: golden files, Argo's JSON schema in strict mode, and the same pipeline as the local run."""

from __future__ import annotations

import ast
import copy
import json
import re
import shlex
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml

from steps.core import verdict
from steps.pipeline import (
    BUILD_DATASET,
    CLUSTER_ONLY_PARAMS,
    EVALUATE_PARALLELISM_PARAM,
    EVALUATE_SHARDS_PARAM,
    PIPELINES,
    RAY_REPLICA_PARAMS,
    STAGES,
    command,
    config_type,
)
from steps.train import TrainConfig
from tests.conftest import ROOT
from tests.manifests import default_artifact_repository, rendered_rayjob
from workflows import security
from workflows.deploy import DEPLOY, SHARD, Deploy
from workflows.distill import CHECK_TASK, CLUSTER_PARAMS, FANOUT_TASK, SHARDS_TASK, pod_spec_patch
from workflows.render import rendered

ARGO_SCHEMA = ROOT / "tests/schemas/argo-workflows-v4.1.2.schema.json"  # vendored (tests/schemas/README.md)
TEMPLATE_FILE = ROOT / "infra/argo/distill-workflowtemplate.yaml"
BUILD_TEMPLATE_FILE = ROOT / "infra/argo/build-dataset-workflowtemplate.yaml"
BUILD_DVC = ROOT / "build-dataset/dvc.yaml"


def argo_objects() -> list[tuple[Path, dict]]:
    found = []
    for path in sorted((ROOT / "infra").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("apiVersion", "").startswith("argoproj.io/"):
                found.append((path, doc))
    return found


@pytest.mark.parametrize("path", sorted(rendered()), ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_file_matches_rendering(path: Path):
    assert path.read_text() == rendered()[path], f"{path} is stale: run `python -m workflows.render`"


def strict_validator(kind: str):
    from jsonschema import Draft202012Validator

    schema = json.loads(ARGO_SCHEMA.read_text())
    defs = copy.deepcopy(schema["definitions"])
    # Argo's schema declares IntOrString as string only, and never forbids unknown fields: fix both (TOOLCHAIN.md).
    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["string", "integer"]}
    for d in defs.values():
        if d.get("type") == "object" and "properties" in d and "additionalProperties" not in d:
            d["additionalProperties"] = False
    return Draft202012Validator({"definitions": defs, "$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}"})


def test_every_argo_object_passes_argos_schema_strictly():
    objects = argo_objects()
    assert objects, "no Argo objects under infra/"
    for path, doc in objects:
        errors = [f"/{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
                  for e in strict_validator(doc["kind"]).iter_errors(doc)]  # fmt: skip
        assert errors == [], f"{path.name} {doc['kind']}"


def test_strict_schema_catches_a_misspelled_field():
    doc = yaml.safe_load(TEMPLATE_FILE.read_text())
    doc["spec"]["templates"][0]["container"]["imagePullPolicyy"] = "Always"
    assert list(strict_validator("WorkflowTemplate").iter_errors(doc))


# --- one pipeline, two runners ---------------------------------------------------------------------------------


# Flags only the cluster's train tasks pass: checkpoints under the run's S3 prefix (a retried pod resumes there), and
# how the RayJob's entrypoint joins its Ray cluster and sizes the worker group. Locally the step's defaults serve.
CLUSTER_ONLY_TRAIN_FLAGS = {"checkpoint-dir", "ray-address", "ray-workers", "ray-gpu", "max-failures"}


# What each stage's Deploy row adds on the cluster: where it keeps state across runs in S3 (locally the steps'
# defaults, folders under .cache, do the same) and its mounted Secrets' files (locally $GITEA_TOKEN, or no key).
def config_flags(config_cls: type) -> set[str]:
    """The parameter names a step accepts (its config's fields as flags, without the leading dashes)."""
    return {f.name.replace("_", "-") for f in fields(config_cls)}


def cluster_only_flags(stage: str, row: Deploy) -> set[str]:
    flags = {flag[2:] for flag in (*(row.shared_cache or ())[:1], *security.file_args(stage)[::2])}
    if row.kind == "backends":
        flags |= CLUSTER_ONLY_TRAIN_FLAGS
    if row.kind == "fanned-out":  # the cluster's evaluate task gathers its shards (the fan-out: test_evaluate_*)
        flags.add("gather")
    return flags


CLUSTER_ONLY_FLAGS = {s.module: cluster_only_flags(s.name, DEPLOY[s.name]) for p in PIPELINES for s in p.stages}


def step_args(templates: dict[str, dict], name: str) -> list[str]:
    """`-m <module> --flag value …` of the step a pipeline task runs: its container's arguments, or, for the Ray
    backend, the entrypoint of the RayJob its resource template creates."""
    template = templates[name]
    if "container" in template:
        assert template["container"]["command"] == ["python"]
        return template["container"]["args"]
    assert "RayJob" in template["resource"]["manifest"], name
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    assert words[0] == "python"
    return words[1:]


def argo_pipeline(path: Path = TEMPLATE_FILE) -> tuple[dict[str, dict], list[str]]:
    """From the rendered WorkflowTemplate: module -> {deps (modules), flags}, and the workflow parameter names."""
    doc = yaml.safe_load(path.read_text())
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    dag = templates[doc["spec"]["entrypoint"]]["dag"]["tasks"]
    # The parameter check runs on the cluster only (argo submit -p enforces no enum); locally each step checks its own.
    # So does evaluate's fan-out: its shards' answers are what the local run's one evaluate process generates.
    cluster_only = {CHECK_TASK, FANOUT_TASK, SHARDS_TASK}
    dag = [t for t in dag if t["name"] not in cluster_only]
    task_module = {}
    stages: dict[str, dict] = {}
    for task in dag:
        args = step_args(templates, task["template"])
        assert args[0] == "-m"
        task_module[task["name"]] = args[1]
    for task in dag:
        args = step_args(templates, task["template"])
        module = task_module[task["name"]]
        deps = {
            task_module[d]
            for d in re.findall(r"([a-z0-9-]+)\.Succeeded", task.get("depends", ""))
            if d not in cluster_only
        }
        flags = {a[2:] for a in args if a.startswith("--")} - {"out"}
        flags -= CLUSTER_ONLY_FLAGS.get(module, set())
        entry = {"deps": deps, "flags": flags}
        assert stages.setdefault(module, entry) == entry, f"{module}: its Argo tasks differ"
    return stages, [p["name"] for p in doc["spec"]["arguments"]["parameters"]]


def dvc_pipeline(path: Path = ROOT / "dvc.yaml") -> dict[str, dict]:
    """From dvc.yaml: module -> {deps (modules, via outs consumed), flags}."""
    stages = yaml.safe_load(path.read_text())["stages"]
    out_module = {}
    parsed = {}
    for stage in stages.values():
        words = stage["cmd"].split()
        module = words[2]
        for out in stage["outs"]:
            out_module[next(iter(out))] = module
        parsed[module] = (stage, words)
    result = {}
    for module, (stage, words) in parsed.items():
        deps = {out_module[d] for d in stage["deps"] if d in out_module}
        flags = {w[2:] for w in words if w.startswith("--")} - {"out"}
        result[module] = {"deps": deps, "flags": flags}
    return result


def test_argo_and_local_run_the_same_steps_in_the_same_order_with_the_same_parameters():
    argo, argo_params = argo_pipeline()
    local = dvc_pipeline()
    # Argo passes the workflow uid as the run id (lineage, idempotency key); locally the steps derive their own.
    for stage in STAGES:
        if stage.run_id:
            argo[stage.module]["flags"].remove("run-id")
    assert argo == local
    params_yaml = yaml.safe_load((ROOT / "params.yaml").read_text())
    # The Ray backend's replica counts exist on the cluster only.
    assert argo_params == list(params_yaml) + [p.name for p in CLUSTER_PARAMS]


def test_build_dataset_runs_the_same_steps_on_argo_and_locally():
    argo, argo_params = argo_pipeline(BUILD_TEMPLATE_FILE)
    assert argo == dvc_pipeline(BUILD_DVC)
    assert list(argo) == [s.module for s in BUILD_DATASET.stages]
    params_yaml = yaml.safe_load((BUILD_DVC.parent / "params.yaml").read_text())
    assert argo_params == list(params_yaml) == [p.name for p in BUILD_DATASET.params]


def test_build_dataset_local_stages_run_from_the_root_and_read_their_own_params():
    stages = yaml.safe_load(BUILD_DVC.read_text())["stages"]
    for name, stage in stages.items():
        assert stage["wdir"] == "..", name  # python -m steps.… from the repository root
        assert list(stage["params"][0]) == ["build-dataset/params.yaml"], name
    assert stages["publish"]["always_changed"] is True  # a publication is never "up to date"
    # `dvc repro` at the root (the distill run, scripts/run_local.sh) never reaches them.
    assert not set(stages) & set(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def test_a_stage_command_line_is_built_in_one_place():
    """dvc.yaml, the Argo containers and the RayJob entrypoint all call `steps.pipeline.command`: no function of
    workflows/ spells `-m <module>` itself, but those of the parameter check, of evaluate's fan-out list, of the crons'
    one step (the promotion and the retrain trigger) and of the serving Deployments (not stages)."""
    builders = []
    for path in sorted((ROOT / "workflows").glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef) and any(
                isinstance(n, ast.Constant) and n.value == "-m" for n in ast.walk(fn)
            ):
                builders.append(f"{path.name}:{fn.name}")
    assert builders == [
        "cron.py:step_container", "distill.py:_check_template", "distill.py:_fanout_template", "serving.py:args",
    ]  # fmt: skip


def test_a_fixed_flag_takes_its_parameters_place_and_the_rest_follow():
    train = next(s for s in STAGES if s.module == "steps.train")
    argv = command(train, str.upper, lambda n: f"<{n}>", run_id="uid", fixed={"train-backend": "ray", "threads": "2"})
    assert argv[:5] == ["python", "-m", "steps.train", "--out", "ADAPTER"]
    assert argv[argv.index("--train-backend") + 1] == "ray" and argv.count("--train-backend") == 1
    assert argv[-4:] == ["--threads", "2", "--run-id", "uid"]


def test_the_ray_entrypoint_parses_as_a_ray_train_run():
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    assert words[:3] == ["python", "-m", "steps.train"]
    flags = dict(zip(words[3::2], words[4::2], strict=True))
    assert set(flags) <= {f"--{f}" for f in config_flags(TrainConfig)}, "every flag is one of train's"
    assert flags["--train-backend"] == "ray" and flags["--ray-address"] == "auto"
    assert flags["--out"].endswith("/adapter") and flags["--checkpoint-dir"].endswith("/ray")


def test_stage_order_respects_dependencies():
    local = dvc_pipeline()
    order = [s.module for s in STAGES]
    for module, entry in local.items():
        assert all(order.index(d) < order.index(module) for d in entry["deps"])


def test_every_parameter_is_a_flag_of_the_step_that_takes_it():
    for pipeline in PIPELINES:
        for stage in pipeline.stages:
            flags = config_flags(config_type(stage))
            assert set(stage.params) | set(stage.inputs) | {"out"} <= flags, stage.name
        assert len({p.name for p in pipeline.params}) == len(pipeline.params)


def test_every_stage_is_one_stage_row_one_deploy_row_and_a_step_module():
    """A new stage is three places: its module (in steps.STEP_MODULES), one `Stage` and one `Deploy` row."""
    import steps

    stages = [s for pipeline in PIPELINES for s in pipeline.stages]
    names = [s.name for s in stages]
    assert len(names) == len(set(names)) and set(DEPLOY) == set(names), (
        f"Deploy rows without a stage: {sorted(set(DEPLOY) - set(names))}; stages without a row: "
        f"{sorted(set(names) - set(DEPLOY))} (workflows/deploy.py)"
    )
    modules = {m for group in steps.STEP_MODULES.values() for m in group}
    for stage in stages:
        assert stage.module.split(".")[1] in modules, stage.name
        assert set(stage.file_params) <= set(stage.params), stage.name
        row = DEPLOY[stage.name]
        if row.kind == "container":  # one template, named as the stage
            assert set(row.resources) == {stage.name}, stage.name
        assert not row.read_by_key or row.keyed, stage.name  # read at its key: it must be written there


# Module-level literal tables in steps/, workflows/ and scripts/ that name a stage or one of its templates, with why
# they are not a stage's fact. Every other such table is a second place a new stage must be added: make it a field of
# `Stage` (runner-neutral) or `Deploy` (Argo only).
NAMED_NOT_BY_STAGE = {
    "workflows/deploy.py:DEPLOY": "the Deploy rows themselves",
    # preflight (a step: it cannot read workflows/) computes these templates' numbers, and steps.pipeline imports
    # sizing (preflight's exports), so a Stage field read by sizing would be an import circle
    "steps/sizing/exports.py:POD_PATCH_STEPS": "the templates sizing's model sizes (one Need each in planning.plan)",
    "steps/sizing/exports.py:THREADED_STEPS": "those of them that compute with the run's threads",
    # a kind of pod, not a stage: what infra/admission/rayjob-pods.yaml allows a RayJob's pods, read by security's
    # own functions (which workflows/deploy.py imports)
    "workflows/security.py:NO_SECRET_VOLUMES": "the RayJob's head and workers ('train-ray') mount no Secret",
    # the same word, another thing
    "steps/core/dataset.py:SPLITS": "the split 'train'",
    "steps/core/dataset.py:TEXT_FIELDS": "the split 'train'",
    "steps/filter_split.py:MIN_EXAMPLES": "the split 'train'",
    "steps/core/dataset.py:SUMMARY_BY": "a row's lineage: who wrote its summary ('teacher', 'feedback')",
    "steps/publish.py:WRITERS": "the same, in words for the data card",
    "workflows/security.py:SECRETS": "the credential 'teacher'",
    "workflows/security.py:USERS": "the credential 'teacher'",
    "workflows/security.py:FILES": "the credential 'teacher'",
    "workflows/security.py:FILE_ENV": "the credential 'teacher'",
    "workflows/security.py:PUBLIC_HOST_CREDENTIALS": "the credential 'teacher'",
    "scripts/build_dataset.py:PATH_PARAMS": "the parameter 'feedback'",
    "scripts/render_iam.py:DUTIES": "the IAM duty 'register'",
}


def test_no_table_but_the_rows_is_keyed_by_stage():
    """A new stage is its module, one Stage and one Deploy row: no other literal table (dict keys, tuple or set
    members) names a stage or one of its templates."""
    names = {s.name for p in PIPELINES for s in p.stages} | {t for row in DEPLOY.values() for t in row.resources}
    names |= {"train-ray"}  # the Ray backend's template (a RayJob, no resources row)
    found = set()
    for folder in ("steps", "workflows", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                    continue
                value = node.value
                items = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
                if any(isinstance(i, ast.Constant) and i.value in names for i in items):
                    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    found.add(f"{path.relative_to(ROOT)}:{getattr(target, 'id', '?')}")
    new, stale = found - set(NAMED_NOT_BY_STAGE), set(NAMED_NOT_BY_STAGE) - found
    assert not new, f"tables keyed by stage: {sorted(new)}; make each a field of Stage or Deploy"
    assert not stale, f"stale rows of NAMED_NOT_BY_STAGE: {sorted(stale)}"


def test_the_cluster_parameters_are_the_ones_check_parameters_reads():
    assert [p.name for p in CLUSTER_PARAMS] == list(CLUSTER_ONLY_PARAMS)
    assert CLUSTER_ONLY_PARAMS[: len(RAY_REPLICA_PARAMS)] == RAY_REPLICA_PARAMS


def test_the_pods_emptydirs_are_the_volumes_preflight_sizes():
    """preflight's pod patch gives `sizing.SIZED_VOLUMES` their sizeLimit, by name: they must be the pod's emptyDirs."""
    from steps import sizing
    from workflows.pods import OUTPUT_VOLUME, SCRATCH_VOLUME

    assert (OUTPUT_VOLUME.name, SCRATCH_VOLUME.name) == sizing.SIZED_VOLUMES


def test_gpu_train_task_lands_on_the_spot_gpu_pool_and_retries():
    doc = yaml.safe_load(TEMPLATE_FILE.read_text())
    gpu = next(t for t in doc["spec"]["templates"] if t["name"] == "train-gpu")
    assert gpu["nodeSelector"]["karpenter.sh/capacity-type"] == "spot"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in gpu["tolerations"]
    assert gpu["container"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert int(gpu["retryStrategy"]["limit"]) >= 1
    spec = doc["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["activeDeadlineSeconds"] > 0 and spec["podGC"]["strategy"] and spec["ttlStrategy"]


def test_artifact_repository_config_passes_argos_schema_strictly():
    repo = default_artifact_repository()
    errors = [e.message for e in strict_validator("ArtifactRepository").iter_errors(repo)]
    assert errors == []


@pytest.mark.parametrize("folder", ["infra", "infra/karpenter"])
def test_kustomization_lists_files_that_exist(folder: str):
    kustomization = yaml.safe_load((ROOT / folder / "kustomization.yaml").read_text())
    if folder == "infra":
        assert "argo/distill-workflowtemplate.yaml" in kustomization["resources"]
        assert "argo/build-dataset-workflowtemplate.yaml" in kustomization["resources"]
    assert all((ROOT / folder / r).is_file() for r in kustomization["resources"])


@pytest.mark.parametrize(
    ("path", "least"), [(TEMPLATE_FILE, 7), (BUILD_TEMPLATE_FILE, 5)], ids=["distill", "build-dataset"]
)
def test_every_output_folder_is_on_an_emptydir_and_travels_unarchived(path: Path, least: int):
    """Argo's wait container uploads an unarchived output straight from a mirrored volume; from the container's own
    filesystem it tars, gzips, copies and unpacks it first (executor.go stageArchiveFile) — steps/sizing/ assumes
    the former (ARGO_OUTPUT_COPIES = 0)."""
    from steps import sizing
    from workflows.pods import OUT_DIR

    assert sizing.disk.ARGO_OUTPUT_COPIES == 0
    doc = yaml.safe_load(path.read_text())
    checked = 0
    for template in doc["spec"]["templates"]:
        artifacts = template.get("outputs", {}).get("artifacts", [])
        if "container" not in template or not artifacts:
            continue
        volumes = {v["name"]: v for v in template.get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in template["container"].get("volumeMounts", [])}
        assert OUT_DIR in mounts and "emptyDir" in volumes[mounts[OUT_DIR]], template["name"]
        for artifact in artifacts:
            assert artifact["path"].startswith(OUT_DIR + "/"), (template["name"], artifact["name"])
            assert artifact.get("archive") == {"none": {}}, (template["name"], artifact["name"])
        checked += 1
    assert checked >= least


def sized_templates(templates: dict[str, dict]) -> dict[str, str]:
    """Every template with a podSpecPatch, by name -> the sized step whose numbers it takes (a shard: evaluate's)."""
    return {n: "evaluate" if n.startswith(SHARD) else n for n, t in templates.items() if "podSpecPatch" in t}


def test_each_sized_step_takes_its_numbers_from_preflight():
    from steps import sizing

    doc = yaml.safe_load(TEMPLATE_FILE.read_text())
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    tasks = {t["name"]: t for t in templates["pipeline"]["dag"]["tasks"]}
    sized = sized_templates(templates)
    assert set(sized.values()) == set(sizing.POD_PATCH_STEPS) and len(sized) == len(sizing.POD_PATCH_STEPS) + 2
    for name, step in sized.items():
        own_cpu = templates[name]["container"]["resources"]["requests"]["cpu"]
        assert templates[name]["podSpecPatch"] == pod_spec_patch(step, own_cpu), name
        inputs = {p["name"] for p in templates[name]["inputs"]["parameters"]}
        assert set(sizing.size_inputs(step)) <= inputs, name
    for step in sizing.POD_PATCH_STEPS:
        for task in [tasks[step]] + ([tasks[SHARDS_TASK]] if step == "evaluate" else []):
            given = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
            for n in sizing.size_inputs(step):
                assert given[n] == f"{{{{tasks.preflight.outputs.parameters.{sizing.size_output(step, n)}}}}}", step
    exported = {p["name"] for p in templates["preflight"]["outputs"]["parameters"]}
    assert set(sizing.preflight_exports()) <= exported


# What a compromised preflight could write in place of a number: the whole patch it used to write (a command for
# register's pod), a quantity, a number with a line after it, a fraction, a hex number.
HOSTILE_NUMBERS = (
    '1"}}],"containers":[{"name":"main","command":["sh","-c","id"]}],"x":[{"y":{"z":"',
    "12Gi",
    "12\nserviceAccountName: distillery-register",
    "1.5",
    "0x10",
)


def test_argo_fills_each_sized_pods_patch_with_preflights_numbers_and_nothing_else():
    """Argo's own substitution (util/template.Replace, as the controller resolves a template's fields) on every
    rendered podSpecPatch: preflight's numbers give exactly the patch sizing computes for the step (train-gpu's card
    floor included), and any text that is not a whole number fails the pod instead of reaching its spec. On a
    template whose podSpecPatch is preflight's text (`{{inputs.parameters.pod-spec-patch}}`) every hostile value
    would have been the patch."""
    from steps import sizing
    from tests.engines import harness
    from tests.test_sizing import THREE_B, knobs, plan

    templates = {t["name"]: t for t in yaml.safe_load(TEMPLATE_FILE.read_text())["spec"]["templates"]}
    p = replace(plan(THREE_B, knobs("gpu", qlora=True)), threads=3)  # `threads` set: the CPU steps request 3 CPUs
    filled, expected, attacks, hostile = [], [], [], []
    for name, step in sized_templates(templates).items():
        text = json.dumps(templates[name]["podSpecPatch"])
        numbers = {f"inputs.parameters.{n}": str(v) for n, v in p.size(step).items()}
        if sizing.CPU_INPUT in sizing.size_inputs(step):  # `threads` not set: the template's own CPU request stays
            unset = harness([{"op": "replace", "text": text, "vars": {**numbers, "inputs.parameters.cpus": "0"}}])[0]
            cpu = json.loads(json.loads(unset["value"]))["containers"][0]["resources"]["requests"]["cpu"]
            assert cpu == templates[name]["container"]["resources"]["requests"]["cpu"], name
        tags = set(re.findall(r"\{\{(.*?)\}\}", templates[name]["podSpecPatch"]))
        own_cpu = templates[name]["container"]["resources"]["requests"]["cpu"]
        shapes = {re.sub(r"asInt\(inputs\.parameters\['[a-z-]+'\]\)", "N", t) for t in tags}
        assert shapes <= {"=N", f"=N > 0 ? string(N) : '{own_cpu}'"}, name
        filled.append({"op": "replace", "text": text, "vars": numbers})
        expected.append((name, json.loads(p.pod_patch(step))))
        for var in numbers:
            for value in HOSTILE_NUMBERS:
                attacks.append({"op": "replace", "text": text, "vars": {**numbers, var: value}})
                hostile.append((name, var, value))
    answers = harness(filled + attacks)
    for (name, patch), answer in zip(expected, answers, strict=False):
        assert "error" not in answer, (name, answer)
        assert json.loads(json.loads(answer["value"])) == patch, name
    assert "affinity" in dict(expected)["train-gpu"]
    for (name, var, value), answer in zip(hostile, answers[len(expected) :], strict=True):
        assert "error" in answer and "asInt" in answer["error"], (name, var, value, answer)


def _container_templates():
    for path, doc in argo_objects():
        spec = doc["spec"].get("workflowSpec", doc["spec"])
        for t in spec.get("templates", []):
            if "container" in t:
                yield path, t


def test_every_step_that_takes_threads_learns_its_cpu_request():
    """--threads 0 means the CPUs the container asked for (steps.contract.threads.cpu_threads): the pods have no CPU
    limit, so only the Downward API's requests.cpu (divisor 1: the kubelet rounds up) says it; a step without a CPU
    request would
    get 0 and fall back to every core of its node."""
    from steps.contract.threads import CPUS_ENV

    checked = set()
    for path, t in _container_templates():
        if "--threads" not in t["container"].get("args", []):
            continue
        env = {e["name"]: e for e in t["container"].get("env", [])}
        assert env.get(CPUS_ENV, {}).get("valueFrom") == {
            "resourceFieldRef": {"resource": "requests.cpu", "divisor": "1"}
        }, f"{path.name}: {t['name']}"
        assert float(t["container"]["resources"]["requests"]["cpu"].rstrip("m")) > 0, f"{path.name}: {t['name']}"
        checked.add(t["name"])
    assert {"train-cpu", "convert-gguf", "evaluate"} <= checked


# Kubernetes' own rule for a container env's resourceFieldRef (pkg/apis/core/validation: the field's allowed
# expressions and validateContainerResourceDivisor): the resource is one of these, and a CPU divisor is 1m or 1 — a
# schema sees only a quantity string.
RESOURCE_FIELDS = {"limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu", "requests.memory",
                   "requests.ephemeral-storage"}  # fmt: skip
CPU_DIVISORS = {"1m", "1"}


def resource_field_problems(env: list[dict]) -> list[str]:
    problems = []
    for e in env:
        ref = e.get("valueFrom", {}).get("resourceFieldRef")
        if ref is None:
            continue
        if ref.get("resource") not in RESOURCE_FIELDS:
            problems.append(f"{e['name']}: resource {ref.get('resource')!r} is not one Kubernetes allows")
        elif ref["resource"].endswith(".cpu") and str(ref.get("divisor", "1")) not in CPU_DIVISORS:
            problems.append(f"{e['name']}: CPU divisor {ref.get('divisor')!r} is not 1m or 1")
    return problems


def test_every_resource_field_ref_is_one_kubernetes_admits():
    for path, t in _container_templates():
        assert resource_field_problems(t["container"].get("env", [])) == [], f"{path.name}: {t['name']}"
    # the rule refuses what the API server would
    bad = [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "2"}}},
           {"name": "Y", "valueFrom": {"resourceFieldRef": {"resource": "requests.gpu"}}}]  # fmt: skip
    assert resource_field_problems(bad) == [
        "X: CPU divisor '2' is not 1m or 1",
        "Y: resource 'requests.gpu' is not one Kubernetes allows",
    ]


# --- evaluate, fanned out (workflows/distill.py; steps/pipeline.py holds its parameters and lanes) --------------------


def distill_templates() -> tuple[dict[str, dict], dict[str, dict]]:
    """The rendered distill template's templates and its pipeline's tasks, by name."""
    doc = yaml.safe_load(TEMPLATE_FILE.read_text())
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    return templates, {t["name"]: t for t in templates[doc["spec"]["entrypoint"]]["dag"]["tasks"]}


def shard_templates() -> dict[str, dict]:
    templates, tasks = distill_templates()
    lane = templates[tasks[SHARDS_TASK]["template"]]
    return {t["when"]: templates[t["template"]] for t in lane["dag"]["tasks"]}


def test_evaluate_fans_out_over_the_lanes_the_fanout_step_emits():
    templates, tasks = distill_templates()
    fanout = templates[tasks[FANOUT_TASK]["template"]]
    assert fanout["container"]["args"][:2] == ["-m", "steps.evaluate.fanout"]
    given = {p["name"]: p["value"] for p in tasks[FANOUT_TASK]["arguments"]["parameters"]}
    assert given == {n: f"{{{{workflow.parameters.{n}}}}}" for n in (EVALUATE_SHARDS_PARAM, EVALUATE_PARALLELISM_PARAM)}
    shards = tasks[SHARDS_TASK]
    assert shards["withParam"] == f"{{{{tasks.{FANOUT_TASK}.outputs.parameters.lanes}}}}"
    assert f"{FANOUT_TASK}.Succeeded" in shards["depends"]
    lane = templates[shards["template"]]
    assert lane["parallelism"] == 1  # a lane's shards one after the other: at most evaluate-parallelism pods at once
    assert {p["name"]: p["value"] for p in shards["arguments"]["parameters"]}["shards"] == "{{item}}"
    for task in lane["dag"]["tasks"]:
        assert task["withParam"] == "{{inputs.parameters.shards}}"
        given = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        assert (given["shard"], given["index"]) == ("{{item.shard}}", "{{item.index}}")


def test_each_shard_runs_the_local_evaluate_on_its_slice_and_the_gather_reads_them_all():
    templates, tasks = distill_templates()
    local = dvc_pipeline()["steps.evaluate"]["flags"]
    prefix = f"runs/{{{{workflow.uid}}}}/evaluation-shards/{{{{workflow.parameters.{EVALUATE_SHARDS_PARAM}}}}}"
    for shard in shard_templates().values():
        args = shard["container"]["args"]
        assert args[args.index("--shard") + 1] == "{{inputs.parameters.shard}}"
        cluster_only = {"out", "shard", "generation-cache", "gpu-layers", "shard-signing-key", "run-id"}
        assert {a[2:] for a in args if a.startswith("--")} - cluster_only == local
        # Signed with the shards' key, which the gather verifies (steps/core/verdict.py SHARD), and bound to the run.
        assert args[args.index("--shard-signing-key") + 1] == verdict.SHARD.private_file
        assert args[args.index("--run-id") + 1] == "{{workflow.uid}}"
        # No kept generations: a shared prefix of them is the steps role's to write, and they decide the comparison.
        assert args[args.index("--generation-cache") + 1] == ""
        (output,) = shard["outputs"]["artifacts"]
        assert output["s3"]["key"] == f"{prefix}/{{{{inputs.parameters.index}}}}"
        assert "parameters" not in shard["outputs"]  # a shard decides nothing
    gather = templates["evaluate"]
    args = gather["container"]["args"]
    (shards,) = [a for a in gather["inputs"]["artifacts"] if a["path"] == args[args.index("--gather") + 1]]
    assert shards["s3"]["key"] == prefix  # every shard's folder, one artifact
    assert "--shard" not in args and "--generation-cache" not in args  # it generates nothing
    assert args[args.index("--shard-verify-key") + 1] == verdict.SHARD.public_file
    # The gather refuses shards of another run, and register and propose a decision of another run: one workflow uid.
    for name in ("evaluate", "register", "propose"):
        held = templates[name]["container"]["args"]
        assert held[held.index("--run-id") + 1] == "{{workflow.uid}}", name
    assert f"{SHARDS_TASK}.Succeeded" in tasks["evaluate"]["depends"]
    # What downstream reads is the gather's, under the names it always had.
    assert [p["name"] for p in gather["outputs"]["parameters"]] == ["decision"]
    for reader in ("register", "propose"):
        given = {a["name"]: a.get("from") for a in tasks[reader]["arguments"].get("artifacts", [])}
        assert given["evaluation"] == "{{tasks.evaluate.outputs.artifacts.evaluation}}", reader


def test_evaluate_runs_on_the_gpu_pool_when_training_does():
    templates, _ = distill_templates()
    shards = shard_templates()
    train = templates["train-gpu"]
    gpu = shards["'{{workflow.parameters.train-backend}}' == 'gpu'"]
    cpu = shards["'{{workflow.parameters.train-backend}}' != 'gpu'"]
    for key in ("nodeSelector", "tolerations", "retryStrategy"):
        assert gpu[key] == train[key], key
    assert gpu["metadata"]["annotations"] == train["metadata"]["annotations"]  # not reclaimed mid-answer
    assert "labels" not in gpu["metadata"]  # no public host to reach, unlike train (workflows/security.py)
    assert gpu["container"]["image"] == train["container"]["image"] and "distillery-cuda" in train["container"]["image"]
    for kind in ("requests", "limits"):
        assert gpu["container"]["resources"][kind]["nvidia.com/gpu"] == "1"
    args = gpu["container"]["args"]
    assert args[args.index("--gpu-layers") + 1] == "-1"  # every layer on the card
    assert "distillery-cpu" in cpu["container"]["image"] and "tolerations" not in cpu
    assert (
        "nvidia.com/gpu" not in cpu["container"]["resources"]["requests"]
        and "--gpu-layers" not in cpu["container"]["args"]
    )
    # Exactly one of them runs, whichever backend trained: each `when` as Argo's controller evaluates it.
    from tests.engines import harness

    for backend in ("gpu", "cpu", "ray"):
        whens = list(shards)
        answers = harness(
            [{"op": "when", "text": w.replace("{{workflow.parameters.train-backend}}", backend)} for w in whens]
        )
        runs = [shards[w] for w, a in zip(whens, answers, strict=True) if a == {"value": True}]
        assert all("value" in a for a in answers), answers
        assert len(runs) == 1 and (runs[0] is gpu) == (backend == "gpu"), backend
