"""check-parameters: the cluster run's first step refuses any bad workflow parameter, naming the value and what is
allowed, with the steps' own rules; and every other task of the run waits for it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from steps import check_parameters
from steps.pipeline import PARAMS, RAY_REPLICA_PARAMS
from tests.conftest import ROOT
from tests.manifests import rayjob_template, rendered_template, templates
from workflows.distill import CHECK_TASK

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cluster_values(**changes: str) -> dict[str, str]:
    """The WorkflowTemplate's defaults, with the required dataset repository and a pinned base revision given, and
    `changes` applied."""
    values = {p["name"]: p.get("value", "") for p in rendered_template()["spec"]["arguments"]["parameters"]}
    values["dataset-repo"] = "https://git.example.com/you/summaries-data.git"
    values["base-revision"] = COMMIT
    values.update({k.replace("_", "-"): v for k, v in changes.items()})
    return values


def test_the_templates_defaults_pass():
    assert check_parameters.problems(cluster_values()) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"train_backend": "GPU"}, r"--train-backend 'GPU' is not one of cpu, gpu, ray"),
        ({"lora_r": "sixteen"}, r"--lora-r: invalid int value: 'sixteen'"),
        ({"learning_rate": "2e-4x"}, r"--learning-rate: invalid float value"),
        ({"qlora": "maybe"}, r"--qlora: expected true or false, got 'maybe'"),
        ({"qlora": "true", "train_backend": "cpu"}, r"--qlora needs --train-backend gpu"),
        ({"quantization": "Q4_K_M", "quantizations": "Q8_0"}, r"--quantization 'Q4_K_M' must be one of"),
        ({"quantizations": "Q8_0,Q3_XS"}, r"--quantizations: 'Q3_XS' is not one of"),
        ({"confidence": "95"}, r"--confidence 95.0: use a value between 0.5 and 1"),
        ({"ray_pi_workers": "-1"}, r"--ray-pi-workers '-1': a replica count"),
        ({"batch_size": "0"}, r"--batch-size 0: needs at least 1"),
        ({"learning_rate": "-1e-3"}, r"--learning-rate -0.001: use a positive rate"),
        ({"lora_dropout": "1.5"}, r"--lora-dropout 1.5: a probability"),
        ({"epochs": "0"}, r"--epochs 0.0: use more than 0 passes"),
        ({"price_table": "cpu=cheap"}, r"--price-table 'cpu=cheap': 'cpu=cheap' is not NAME=NUMBER"),
        ({"threads": "-2"}, r"--threads -2: use 0 \(the CPUs this container may use\) or more"),
        ({"threads": "four"}, r"--threads: invalid int value: 'four'"),
        ({"precision": "fp16"}, r"--precision 'fp16' is not one of auto, fp32, bf16"),
        ({"kd_weight": "1.5"}, r"--kd-weight 1.5: use a share between 0 \(cross-entropy only, the default\) and 1"),
        ({"kd_weight": "half"}, r"--kd-weight: invalid float value: 'half'"),
        ({"kd_weight": "-0.5"}, r"--kd-weight -0.5: use a share between 0"),
        ({"kd_temperature": "0"}, r"--kd-temperature 0.0: use a positive temperature"),
        ({"kd_top_k": "0"}, r"--kd-top-k 0: keep at least 1 log-probability per token"),
        ({"kd_weight": "0.5", "teacher": "gpt-9"}, r"--teacher gpt-9: teacher 'gpt-9' is not listed in data/teachers"),
        ({"adapter_repo": "http://gitea.home/ml/a.git"}, r"plain http would send the token in clear text; use https"),
        ({"adapter_repo": "gitea.home/ml/a.git"}, r"--adapter-repo 'gitea.home/ml/a.git': use https://"),
        ({"evaluate_shards": "0"}, r"--evaluate-shards '0': a whole number of shards from 1 to 64"),
        ({"evaluate_shards": "eight"}, r"--evaluate-shards 'eight': a whole number of shards from 1 to 64"),
        ({"evaluate_parallelism": "-1"}, r"--evaluate-parallelism '-1': a whole number of shards at once"),
        ({"evaluate_shards": "2", "evaluate_parallelism": "3"}, r"--evaluate-parallelism 3 with evaluate-shards 2"),
    ],
)
def test_a_bad_value_is_named_with_what_is_allowed(changes: dict, expected: str):
    found = check_parameters.problems(cluster_values(**changes))
    assert any(re.search(expected, p) for p in found), found


def test_a_kd_run_and_a_push_pass_with_good_values():
    """kd-weight > 0 with the committed teacher: train's --kd-targets is the folder the run supplies (kd-targets'
    output), not a missing flag."""
    good = cluster_values(kd_weight="0.5", kd_temperature="2", adapter_repo="https://gitea.home/ml/a.git")
    assert check_parameters.problems(good) == []


def test_a_hosted_teacher_is_refused_for_kd_before_any_pod(tmp_path):
    teachers = tmp_path / "teachers.yaml"
    teachers.write_text(
        "teachers:\n  api:\n    {provider: p, model: m, terms_url: 'https://t', outputs_may_train_models: true,\n"
        "     reviewed_by: r, reviewed_on: '2026-12-01', hosted: true, endpoint: 'https://api.example.com'}\n"
    )
    found = check_parameters.problems(cluster_values(kd_weight="0.5", teacher="api", teachers_file=str(teachers)))
    assert found == [
        f"--teacher api: {teachers} lists it as a hosted API; logit-level distillation scores the teacher's GGUF "
        "itself: use an open-weights entry, or -p kd-weight=0"
    ]
    # KD off: the teacher is not used, so not judged
    assert check_parameters.problems(cluster_values(teacher="api", teachers_file=str(teachers))) == []


def test_cpu_and_gpu_ray_workers_together_are_refused_naming_the_settings():
    found = check_parameters.problems(cluster_values(train_backend="ray", ray_gpu_workers="1"))
    assert found == [
        "--ray-gpu-workers 1 with CPU workers (ray-large-workers=1, ray-medium-workers=1): CPU and GPU workers cannot "
        "train in one DDP group; for the GPU box alone submit with -p ray-large-workers=0 -p ray-medium-workers=0, or "
        "drop the GPU with -p ray-gpu-workers=0"
    ]
    alone = cluster_values(train_backend="ray", ray_gpu_workers="1", ray_large_workers="0", ray_medium_workers="0")
    assert check_parameters.problems(alone) == []
    # Another backend does not read the Ray groups: nothing to refuse.
    assert check_parameters.problems(cluster_values(train_backend="gpu", ray_gpu_workers="1")) == []


def test_a_ray_run_with_no_worker_pods_is_refused():
    zero = {name.replace("-", "_"): "0" for name in RAY_REPLICA_PARAMS}
    found = check_parameters.problems(cluster_values(train_backend="ray", **zero))
    assert len(found) == 1 and found[0].startswith("train-backend ray with no Ray worker pods"), found
    assert found[0].endswith(f"-p {RAY_REPLICA_PARAMS[0]}=1")
    # Another backend starts no Ray cluster: no replicas is its normal state.
    assert check_parameters.problems(cluster_values(train_backend="gpu", **zero)) == []


def entrypoint_parameters() -> set[str]:
    """The parameters Argo substitutes into the rendered RayJob's shell entrypoint."""
    line = next(t for t in rayjob_template()["resource"]["manifest"].splitlines() if "entrypoint:" in t)
    return set(re.findall(r"\{\{inputs\.parameters\.([a-z0-9-]+)\}\}", line))


@pytest.mark.parametrize("value", ["org/it's", "a b", "x;rm -rf /", "$(id)", "a\nb", "`id`", 'say"'])
def test_a_value_that_could_break_the_ray_entrypoints_quoting_is_refused(value: str):
    names = entrypoint_parameters()
    assert {"base-model", "base-revision"} <= names
    found = check_parameters.problems(cluster_values(train_backend="ray", base_model=value))
    assert any(p.startswith(f"--base-model {value!r}: the Ray backend passes it through a shell") for p in found)


def test_every_parameter_of_the_ray_entrypoint_is_held_to_the_safe_characters():
    """Each `{{inputs.parameters.X}}` of the rendered entrypoint is a workflow parameter check-parameters restricts
    (or one the workflow computes: the worker count and the GPU switch, integers and booleans from expressions, and
    every worker's threads, an integer from preflight's plan)."""
    computed = {"ray-workers", "ray-gpu", "ray-threads"}
    for name in entrypoint_parameters() - computed:
        found = check_parameters.problems(cluster_values(train_backend="ray", **{name.replace("-", "_"): "a'b"}))
        assert f"--{name} {'a' + chr(39) + 'b'!r}: the Ray backend passes" in "\n".join(found), (name, found)
    assert check_parameters.problems(cluster_values(train_backend="gpu", base_model="org/it's")) == []


def test_a_moving_base_revision_is_refused_unless_allowed():
    default = next(p for p in PARAMS if p.name == "base-revision").cluster
    assert check_parameters.problems(cluster_values(base_revision=default)) == []  # the shipped default is a commit
    for revision in ("main", "v1.0", COMMIT[:12], COMMIT.upper(), COMMIT + "0"):
        found = check_parameters.problems(cluster_values(base_revision=revision))
        assert len(found) == 1 and f"--base-revision {revision!r} is not a commit" in found[0], (revision, found)
        allowed = cluster_values(base_revision=revision, allow_moving_base_revision="true")
        assert check_parameters.problems(allowed) == []
    assert "true or false" in check_parameters.problems(cluster_values(allow_moving_base_revision="yes"))[0]


def test_every_problem_is_listed_once_and_at_once():
    found = check_parameters.problems(cluster_values(train_backend="tpu", lora_r="x", seed="y"))
    assert len(found) == 3, found  # seed is read by two steps: said once


def test_the_command_exits_1_and_lists_the_problems():
    args = [a for k, v in cluster_values(train_backend="GPU").items() for a in (f"--{k}", v)]
    proc = subprocess.run(
        [sys.executable, "-m", "steps.check_parameters", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "--train-backend 'GPU' is not one of cpu, gpu, ray" in proc.stderr


def model_folder(where) -> str:
    """A folder that is a base model's as far as the settings check looks (its config.json)."""
    (where / "model").mkdir()
    (where / "model/config.json").write_text("{}")
    return str(where / "model")


def test_the_embedded_runs_values_pass_with_their_cluster_only_rules_left_out(tmp_path):
    """params.yaml's own values (base-revision `main`, no Ray pods, no fan-out) are fine for the embedded run."""
    values, unknown = check_parameters.local_values(ROOT / "params.yaml", [f"base-model={model_folder(tmp_path)}"])
    assert unknown == [] and values["base-revision"] == "main"
    assert check_parameters.local_problems(values) == []


def test_the_embedded_run_refuses_a_bad_value_given_with_dash_s_before_dvc_runs(tmp_path, capsys):
    """scripts/run_local.sh hands it `dvc exp run`'s arguments: the -S values are judged, other flags let through."""
    argv = ["--local", str(ROOT / "params.yaml"), "-S", "learning-rate=-1e-3", "-S", "params.yaml:lora-r=0",
            "--set-param", "epochs=0", "-S", "lerning-rate=1e-4", "--name", "my-exp",
            "-S", "base-model=./no/such"]  # fmt: skip
    assert check_parameters.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"check-parameters: 5 invalid parameter(s) in {ROOT / 'params.yaml'} and -S; nothing was run")
    for said in ("-S lerning-rate=1e-4: use NAME=VALUE with NAME a parameter of", "--learning-rate -0.001: use a "
                 "positive rate", "--lora-r 0: needs at least 1", "--epochs 0.0: use more than 0 passes",
                 "--base-model ./no/such: no such folder"):  # fmt: skip
        assert said in err, err
    good = ["--local", str(ROOT / "params.yaml"), "-S", f"base-model={model_folder(tmp_path)}", "--name", "my-exp"]
    assert check_parameters.main(good) == 0


def test_it_checks_every_workflow_parameter_and_runs_first():
    declared = [p["name"] for p in rendered_template()["spec"]["arguments"]["parameters"]]
    check = templates()[CHECK_TASK]
    assert [p["name"] for p in check["inputs"]["parameters"]] == declared
    assert {p.name for p in PARAMS} <= set(declared)
    tasks = {t["name"]: t for t in templates()["pipeline"]["dag"]["tasks"]}
    assert "depends" not in tasks[CHECK_TASK]

    def ancestors(name: str) -> set[str]:
        direct = set(re.findall(r"([a-z0-9-]+)\.Succeeded", tasks[name].get("depends", "")))
        return direct.union(*(ancestors(d) for d in direct)) if direct else set()

    for name in tasks:
        if name != CHECK_TASK:
            assert CHECK_TASK in ancestors(name), f"{name} may start before the parameters are checked"
