"""The cluster objects beyond Argo's own: the KubeRay RayJob that `train-ray` creates, the Karpenter spot GPU pool and
the RBAC, each checked against its CRD (strictly) and for the properties the design needs."""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from steps import sizing
from tests.conftest import ROOT
from tests.manifests import (
    WORKFLOW_UID,
    argo_expression,
    default_artifact_repository,
    rayjob_template,
    rendered_rayjob,
    rendered_template,
    substitute,
    templates,
)
from workflows import distill, images, rayjob, security

SCHEMAS = ROOT / "tests/schemas"  # vendored: source, version and licence in its README
RAYJOB_CRD = SCHEMAS / "kuberay-v1.7.0-ray.io_rayjobs.yaml"
NODEPOOL_CRD = SCHEMAS / "karpenter-v1.14.1-karpenter.sh_nodepools.yaml"
NODECLASS_CRD = SCHEMAS / "karpenter-aws-v1.14.1-karpenter.k8s.aws_ec2nodeclasses.yaml"
NODEPOOL_FILE = ROOT / "infra/karpenter/nodepool-gpu-spot.yaml"
NODECLASS_FILE = ROOT / "infra/karpenter/ec2nodeclass-gpu.yaml"


@functools.cache  # the RayJob CRD is 1.4 MB of YAML: parse it once
def crd_validator(crd_file: Path, version: str):
    """A validator for the CRD's openAPIV3Schema that, like the API server's strict field validation, rejects unknown
    fields: `additionalProperties: false` on every object schema that lists its properties and neither admits extra
    keys (`additionalProperties`) nor preserves unknown fields. CEL rules (x-kubernetes-validations) are not checked."""
    from jsonschema import Draft7Validator

    crd = yaml.load(crd_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = copy.deepcopy(next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"])

    def strict(node: object) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for child in node.values():
                strict(child)
        elif isinstance(node, list):
            for child in node:
                strict(child)

    strict(schema["openAPIV3Schema"])
    return Draft7Validator(schema["openAPIV3Schema"])


def errors(validator, doc: dict) -> list[str]:
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(doc)]


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def head(job: dict) -> dict:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]


def workers(job: dict) -> dict[str, dict]:
    return {g["groupName"]: g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}


def match_expressions(pod_template: dict) -> list[dict]:
    terms = pod_template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [e for term in terms["nodeSelectorTerms"] for e in term["matchExpressions"]]


# --- against the CRDs ---------------------------------------------------------------------------------------------


SIZINGS = {  # the resource template's per-group inputs, as preflight and the workflow parameters may set them
    "ceilings": {},
    "no-pi": {"replicas": {"ray-pi-workers": 0, "ray-small-workers": 0}},
    "sized": {
        "replicas": {"ray-large-workers": 3, "ray-pi-workers": 0},
        "cpus": {"ray-large-cpus": 6, "ray-medium-cpus": 4, "ray-small-cpus": 2, "ray-pi-cpus": 0},
        "memory": {"ray-large-memory": "20Gi", "ray-medium-memory": "12Gi", "ray-small-memory": "6144Mi"},
    },
}


@pytest.mark.parametrize("case", list(SIZINGS))
def test_rayjob_passes_kuberays_crd_strictly(case: str):
    assert errors(crd_validator(RAYJOB_CRD, "v1"), rendered_rayjob(**SIZINGS[case])) == []


def test_nodepool_and_ec2nodeclass_pass_karpenters_crds_strictly():
    assert errors(crd_validator(NODEPOOL_CRD, "v1"), load(NODEPOOL_FILE)) == []
    assert errors(crd_validator(NODECLASS_CRD, "v1"), load(NODECLASS_FILE)) == []


def test_strict_crd_schema_catches_misspelled_fields():
    job = rendered_rayjob()
    job["spec"]["shutdownAfterJobFinish"] = True
    head(job)["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    found = errors(crd_validator(RAYJOB_CRD, "v1"), job)
    assert len(found) == 2, found
    pool = load(NODEPOOL_FILE)
    pool["spec"]["template"]["spec"]["taint"] = pool["spec"]["template"]["spec"].pop("taints")
    assert errors(crd_validator(NODEPOOL_CRD, "v1"), pool)
    node_class = load(NODECLASS_FILE)
    node_class["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSise"] = "200Gi"
    assert errors(crd_validator(NODECLASS_CRD, "v1"), node_class)


def test_a_string_where_the_crd_wants_a_replica_count_fails():
    # Why the manifest carries bare placeholders: quoted, Argo's substitution would leave a string here.
    job = rendered_rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "1"
    assert errors(crd_validator(RAYJOB_CRD, "v1"), job)


# --- the RayJob's shape -------------------------------------------------------------------------------------------


def test_head_is_a_coordinator_only():
    # Off spot, off the Pis and out of Karpenter's disruptions: tests/test_rayjob_states.py.
    assert head(rendered_rayjob())["rayStartParams"]["num-cpus"] == "0"


def test_worker_groups_are_the_node_groups_each_pinned_to_its_architecture():
    groups = workers(rendered_rayjob())
    assert list(groups) == [g.name for g in sizing.RAY_NODE_GROUPS] + [rayjob.GPU_GROUP.name]
    for g in sizing.RAY_NODE_GROUPS:
        assert {"key": "kubernetes.io/arch", "operator": "In", "values": [g.arch]} in match_expressions(
            groups[g.name]["template"]
        ), g.name


def test_worker_pods_take_their_size_from_the_template_inputs():
    cpus = {"ray-large-cpus": 6, "ray-medium-cpus": 2, "ray-small-cpus": 2, "ray-pi-cpus": 0}
    memory = {"ray-large-memory": "20Gi", "ray-medium-memory": "9Gi", "ray-small-memory": "5Gi", "ray-pi-memory": "3Gi"}
    disk = {"ray-large-disk": "30Gi", "ray-medium-disk": "12Gi", "ray-small-disk": "11Gi", "ray-pi-disk": "10Gi"}
    groups = workers(rendered_rayjob(cpus=cpus, memory=memory, disk=disk))
    for g in rayjob.WORKER_GROUPS:
        pod = groups[g.name]["template"]["spec"]
        resources = pod["containers"][0]["resources"]
        size = {"cpu": str(cpus[g.cpus_parameter]), "memory": memory[g.memory_parameter]}
        size["ephemeral-storage"] = disk[g.disk_parameter]
        assert resources["requests"] == size == resources["limits"], g.name
        # the scratch emptyDir (Ray's /tmp/ray, the hub download, checkpoints) is capped at the same size
        emptydirs = [v for v in pod["volumes"] if "emptyDir" in v]
        assert emptydirs == [{"name": "scratch", "emptyDir": {"sizeLimit": disk[g.disk_parameter]}}], g.name
        # Ray must see the CPUs the pod was given, neither more (oversubscription) nor fewer (idle cores).
        assert groups[g.name]["rayStartParams"]["num-cpus"] == str(cpus[g.cpus_parameter]), g.name


def test_template_inputs_are_what_the_manifest_reads():
    template = rayjob_template()
    read = set(re.findall(r"\{\{inputs\.parameters\.([\w-]+)\}\}", template["resource"]["manifest"]))
    declared = {p["name"] for p in template["inputs"]["parameters"]}
    assert set(rayjob.input_parameters()) <= read == declared


def test_replica_counts_come_from_the_workflow_parameters():
    groups = workers(rendered_rayjob({"ray-large-workers": 3, "ray-medium-workers": 2}))
    assert groups["large"]["replicas"] == groups["large"]["maxReplicas"] == 3
    assert groups["medium"]["replicas"] == 2
    parameters = {p["name"] for p in rendered_template()["spec"]["arguments"]["parameters"]}
    assert {g.parameter for g in rayjob.WORKER_GROUPS} <= parameters


def ray_arguments() -> dict[str, str]:
    """The arguments the pipeline's train-ray task gives the RayJob's resource template."""
    task = next(t for t in templates()["pipeline"]["dag"]["tasks"] if t["name"] == rayjob_template()["name"])
    return {a["name"]: a["value"] for a in task["arguments"]["parameters"]}


def preflight_env(per_pod: dict[str, str], requested: dict[str, str]) -> dict:
    outputs = {sizing.ray_workers_output(g): n for g, n in per_pod.items()}
    return {
        "tasks": {"preflight": {"outputs": {"parameters": outputs}}},
        "workflow": {"parameters": {"ray-gpu-workers": "0"} | {f"ray-{g}-workers": n for g, n in requested.items()}},
    }


def test_training_workers_follow_preflight_s_workers_per_pod():
    args = ray_arguments()
    env = preflight_env(
        per_pod={"large": "3", "medium": "2", "small": "1", "pi": "0"},
        requested={"large": "2", "medium": "1", "small": "1", "pi": "4"},
    )
    assert argo_expression(args["ray-workers"], env) == 2 * 3 + 1 * 2 + 1 * 1 + 4 * 0
    assert "/" not in args["ray-workers"]  # expr-lang's `/` gives a float: Argo would pass "2.5"
    words = shlex.split(rendered_rayjob(threads=4)["spec"]["entrypoint"])
    assert words[words.index("--ray-workers") + 1] == "6"  # the value the resource template was given


# preflight's sizing outputs for the RayJob, and what the train-ray task must hand the resource template for each.
RAY_SIZES = {"ray-threads": ("3", "3")} | {
    out: (n, want)
    for g in rayjob.WORKER_GROUPS
    for out, n, want in (
        (sizing.ray_cpus_output(g.name), "6", "6"),
        (sizing.ray_memory_output(g.name), "12", "12Gi"),
        (sizing.ray_disk_output(g.name), "20", "20Gi"),
    )
}


def ray_size_arguments() -> dict[str, str]:
    """preflight's output -> the train-ray task's argument that carries it (a group's CPUs, memory, disk; threads)."""
    args = ray_arguments()
    found = {sizing.RAY_THREADS_OUTPUT: args[rayjob.THREADS_INPUT]}
    for g in rayjob.WORKER_GROUPS:
        found[sizing.ray_cpus_output(g.name)] = args[g.cpus_parameter]
        found[sizing.ray_memory_output(g.name)] = args[g.memory_parameter]
        found[sizing.ray_disk_output(g.name)] = args[g.disk_parameter]
    return found


def test_the_rayjob_takes_preflight_s_sizes_as_whole_numbers_only():
    """Argo's own substitution (harness: util/template.Replace) of the train-ray task's arguments: preflight's whole
    numbers become the pods' CPUs, memory and disk and every worker's threads; a value with a quote, a quantity or a
    fraction fails the task. The manifest quotes each value for YAML and the entrypoint for a shell: passed through
    as text, `ray-threads` = "1' ; id ; '" put `--threads '1' ; id ; ''` in the Ray driver's command line."""
    from tests.engines import harness

    given = ray_size_arguments()
    assert set(given) == set(RAY_SIZES)
    var = "tasks.preflight.outputs.parameters.{}".format
    variables = {var(out): n for out, (n, _) in RAY_SIZES.items()}
    requests = [{"op": "replace", "text": json.dumps(text), "vars": variables} for text in given.values()]
    hostile = ["1' ; id ; '", "12Gi", "1.5", "4\n"]
    requests += [
        {"op": "replace", "text": json.dumps(text), "vars": {**variables, var(out): v}}
        for out, text in given.items()
        for v in hostile
    ]
    answers = harness(requests)
    filled = {out: json.loads(a.get("value", "null")) for out, a in zip(given, answers, strict=False)}
    assert filled == {out: want for out, (_, want) in RAY_SIZES.items()}
    refused = answers[len(given) :]
    assert len(refused) == len(given) * len(hostile)
    assert all("error" in a and "asInt" in a["error"] for a in refused), [a for a in refused if "error" not in a]
    words = shlex.split(rendered_rayjob(threads=4)["spec"]["entrypoint"])
    assert words[words.index("--threads") + 1] == "4"


@pytest.mark.parametrize(("per_pod", "expected"), [("1", "4"), ("0", "0")])
def test_a_group_gets_replicas_only_when_a_worker_fits_its_pods(per_pod: str, expected: str):
    env = preflight_env(per_pod={"pi": per_pod}, requested={"pi": "4"})
    assert argo_expression(ray_arguments()["ray-pi-workers"], env) == expected


def test_expression_helpers_refuse_a_missing_group():
    every = {g.name: "x" for g in rayjob.WORKER_GROUPS}
    with pytest.raises(ValueError, match="pi"):
        rayjob.train_workers_expression(every, {k: v for k, v in every.items() if k != "pi"})


# --- the optional GPU worker group ---------------------------------------------------------------------------------

GPU_ONLY = {**{g.parameter: 0 for g in rayjob.WORKER_GROUPS}, rayjob.GPU_GROUP.parameter: 1}


def test_the_gpu_group_passes_the_crd_and_is_the_gpu_box_with_one_gpu():
    job = rendered_rayjob(GPU_ONLY, ray_workers=1)
    assert errors(crd_validator(RAYJOB_CRD, "v1"), job) == []
    group = workers(job)[rayjob.GPU_GROUP.name]
    assert group["replicas"] == group["maxReplicas"] == 1
    assert group["rayStartParams"]["num-gpus"] == "1"
    pod = group["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == 1  # extended resources: equal
    assert {"key": "nvidia.com/training", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    key, value = rayjob.GPU_GROUP.node_label
    assert pod["nodeSelector"] == {key: value}
    assert workers(rendered_rayjob())[rayjob.GPU_GROUP.name]["replicas"] == 0  # optional: none by default
    cpu_pod = workers(job)["large"]["template"]["spec"]
    assert "tolerations" not in cpu_pod and "nvidia.com/gpu" not in cpu_pod["containers"][0]["resources"]["limits"]


def test_the_train_step_uses_the_gpu_exactly_when_the_gpu_group_has_replicas():
    args = ray_arguments()
    cpu_zero = {g.name: "0" for g in rayjob.WORKER_GROUPS}
    env = preflight_env(per_pod={"large": "3", "medium": "2", "small": "1", "pi": "0"}, requested=cpu_zero)
    assert argo_expression(args[rayjob.RAY_GPU_INPUT], env) == "false"
    env["workflow"]["parameters"]["ray-gpu-workers"] = "1"
    assert argo_expression(args[rayjob.RAY_GPU_INPUT], env) == "true"
    assert argo_expression(args["ray-workers"], env) == 1  # one worker per GPU pod, no CPU workers
    filled = {**{k: str(v) for k, v in GPU_ONLY.items()}, rayjob.RAY_GPU_INPUT: "true"}
    job = yaml.safe_load(substitute(rayjob_template()["resource"]["manifest"], filled))
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[words.index("--ray-gpu") + 1] == "true"


def test_the_entrypoint_with_the_gpu_parses_as_a_gpu_ray_train_run():
    from steps.core.cli import build_parser
    from steps.train import TrainConfig
    from steps.train.launchers import scaling

    words = shlex.split(rendered_rayjob(GPU_ONLY, ray_workers=1)["spec"]["entrypoint"])
    flags = dict(zip(words[3::2], words[4::2], strict=True))
    ray = [a for k in ("--train-backend", "--ray-workers", "--threads", "--max-failures") for a in (k, flags[k])]
    argv = [*ray, "--ray-gpu", "true", "--dataset", "d", "--out", "o"]
    cfg = TrainConfig(**vars(build_parser(TrainConfig, "train").parse_args(argv)))
    plan = scaling(cfg, cfg.threads)
    assert plan["scaling"]["use_gpu"] is True and plan["scaling"]["resources_per_worker"]["GPU"] == 1
    assert plan["torch"]["backend"] == "nccl"
    assert plan["scaling"]["resources_per_worker"]["CPU"] <= rayjob.GPU_GROUP.cpus  # fits the GPU pod


def test_entrypoint_is_the_train_step_joining_the_cluster_with_data_through_the_runs_s3_prefix():
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    assert words[:3] == ["python", "-m", "steps.train"]
    assert words.count("--train-backend") == 1 and words[words.index("--train-backend") + 1] == "ray"
    assert words[words.index("--ray-address") + 1] == "auto"
    prefix = f"s3://{distill.BUCKET}/runs/{WORKFLOW_UID}"
    for flag, where in (("--dataset", "dataset"), ("--out", "adapter"), ("--checkpoint-dir", "ray")):
        assert words[words.index(flag) + 1] == f"{prefix}/{where}", flag
    assert words[words.index("--run-id") + 1] == WORKFLOW_UID


def test_ray_pods_run_unprivileged_as_ray_s_service_account_with_no_api_token():
    job = rendered_rayjob()
    for pod in [head(job)["template"], *(g["template"] for g in workers(job).values())]:
        spec = pod["spec"]
        assert spec["serviceAccountName"] == security.RAY
        assert spec["automountServiceAccountToken"] is False
        assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        container = spec["containers"][0]["securityContext"]
        assert container["allowPrivilegeEscalation"] is False and container["capabilities"]["drop"] == ["ALL"]
        assert spec["containers"][0]["image"] == images.DEFAULT.ref("ray")


# --- the Argo side of the Ray path ------------------------------------------------------------------------------------


def test_data_and_adapter_live_at_the_runs_fixed_keys_whichever_backend_trains():
    ts = templates()
    dataset = next(a for a in ts["fetch-dataset"]["outputs"]["artifacts"] if a["name"] == "dataset")
    assert dataset["s3"] == {"key": "runs/{{workflow.uid}}/dataset"} and dataset["archive"] == {"none": {}}
    adapter_key = {"key": "runs/{{workflow.uid}}/adapter"}
    for name in ("train-gpu", "train-cpu"):
        adapter = next(a for a in ts[name]["outputs"]["artifacts"] if a["name"] == "adapter")
        assert adapter["s3"] == adapter_key, name
    words = shlex.split(rendered_rayjob()["spec"]["entrypoint"])
    assert words[words.index("--out") + 1] == f"s3://{distill.BUCKET}/runs/{WORKFLOW_UID}/adapter"
    readers = [t for t in ts.values() if any(a["name"] == "adapter" for a in t.get("inputs", {}).get("artifacts", []))]
    assert readers
    for t in readers:
        adapter = next(a for a in t["inputs"]["artifacts"] if a["name"] == "adapter")
        assert adapter["s3"] == adapter_key, t["name"]


def test_run_prefix_bucket_is_the_artifact_repository_s():
    assert default_artifact_repository()["s3"]["bucket"] == distill.BUCKET


def test_gpu_and_cpu_train_pods_checkpoint_to_the_runs_prefix():
    for name in ("train-gpu", "train-cpu"):
        args = templates()[name]["container"]["args"]
        checkpoints = f"s3://{distill.BUCKET}/runs/{{{{workflow.uid}}}}/checkpoints"
        assert args[args.index("--checkpoint-dir") + 1] == checkpoints, name
        assert args[args.index("--run-id") + 1] == "{{workflow.uid}}", name


# --- Karpenter and RBAC ---------------------------------------------------------------------------------------------


def test_nodepool_is_what_the_gpu_train_pod_selects_and_tolerates():
    pool = load(NODEPOOL_FILE)
    node_class = load(NODECLASS_FILE)
    gpu = templates()["train-gpu"]
    assert gpu["nodeSelector"]["karpenter.sh/nodepool"] == pool["metadata"]["name"]
    requirements = {r["key"]: r for r in pool["spec"]["template"]["spec"]["requirements"]}
    capacity = requirements["karpenter.sh/capacity-type"]
    assert capacity["operator"] == "In" and capacity["values"] == [gpu["nodeSelector"]["karpenter.sh/capacity-type"]]
    for taint in pool["spec"]["template"]["spec"]["taints"]:
        assert any(
            t["key"] == taint["key"]
            and t.get("effect") in (None, taint["effect"])
            and (t["operator"] == "Exists" or t.get("value") == taint.get("value"))
            for t in gpu["tolerations"]
        ), f"the GPU train pod does not tolerate {taint}"
    assert {t["key"] for t in pool["spec"]["template"]["spec"]["taints"]} == {"nvidia.com/gpu"}
    assert pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] == node_class["metadata"]["name"]
    assert gpu["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def test_karpenter_objects_have_their_own_kustomization():
    kustomization = load(ROOT / "infra/karpenter/kustomization.yaml")
    assert {ROOT / "infra/karpenter" / r for r in kustomization["resources"]} == {NODEPOOL_FILE, NODECLASS_FILE}


AMI_ALIAS = re.compile(r"al2023@v\d{8}")  # Karpenter's alias: family@version; a release is vYYYYMMDD


def gpu_count_admitted(pool: dict) -> set[str] | None:
    """The per-node GPU counts the NodePool admits (its instance-gpu-count requirement), None if unbounded."""
    for r in pool["spec"]["template"]["spec"]["requirements"]:
        if r["key"] == "karpenter.k8s.aws/instance-gpu-count":
            assert r["operator"] == "In", r
            return set(r["values"])
    return None


def test_gpu_ami_is_pinned_to_one_release():
    aliases = [t["alias"] for t in load(NODECLASS_FILE)["spec"]["amiSelectorTerms"] if "alias" in t]
    assert aliases and all(AMI_ALIAS.fullmatch(a) for a in aliases), aliases
    assert not AMI_ALIAS.fullmatch("al2023@latest")


def test_gpu_pool_admits_single_gpu_instances_only_as_the_train_pod_asks_for_one():
    pool = load(NODEPOOL_FILE)
    assert gpu_count_admitted(pool) == {"1"}
    assert templates()["train-gpu"]["container"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    broken = copy.deepcopy(pool)
    broken["spec"]["template"]["spec"]["requirements"] = [
        r for r in broken["spec"]["template"]["spec"]["requirements"] if "gpu-count" not in r["key"]
    ]
    assert gpu_count_admitted(broken) is None
