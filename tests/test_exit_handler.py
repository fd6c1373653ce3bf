"""distill's exit handler: a run on the Ray backend that does not succeed (`argo stop`, a failed step, the deadline)
deletes its RayJob, so its Ray cluster stops holding the CPU pool. The rendered objects' schemas are checked in
test_workflows.py (Argo's, strictly) and test_infra_crds.py (KubeRay's RayJob CRD)."""

from __future__ import annotations

import re

import pytest
import yaml

from steps.train.config import BACKENDS
from tests.manifests import WORKFLOW_UID, rayjob_template, rendered_rayjob, rendered_template, substitute, templates
from workflows import rayjob, security


def exit_handler() -> dict:
    doc = rendered_template()
    assert doc["spec"].get("onExit"), "the distill template has no exit handler"
    return templates(doc)[doc["spec"]["onExit"]]


def delete_task() -> dict:
    (task,) = exit_handler()["dag"]["tasks"]
    return task


def delete_template() -> dict:
    return templates()[delete_task()["template"]]


def test_template_has_an_on_exit_handler():
    doc = rendered_template()
    handler = exit_handler()
    assert handler["name"] != doc["spec"]["entrypoint"]
    assert [t["name"] for t in handler["dag"]["tasks"]] == ["delete-rayjob"]


def test_exit_handler_deletes_the_rayjob_the_create_manifest_names():
    resource = delete_template()["resource"]
    assert resource["action"] == "delete"
    assert "--ignore-not-found" in resource["flags"]  # nothing was created: preflight failed, or a gpu/cpu run
    assert not resource.get("setOwnerReference")
    create = rayjob_template()["resource"]  # still the create: the delete template comes after it
    assert create["action"] == "create"
    deleted = yaml.safe_load(substitute(resource["manifest"], {}))
    assert deleted == {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": f"distill-{WORKFLOW_UID}"}}
    job = rendered_rayjob()
    assert "generateName" not in job["metadata"]
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == (
        deleted["apiVersion"],
        deleted["kind"],
        deleted["metadata"]["name"],
    )
    # The same placeholder in both manifests, so any workflow's create and delete agree, not only the test's uid.
    assert f"name: {rayjob.NAME}\n" in create["manifest"] and f"name: {rayjob.NAME}\n" in resource["manifest"]


@pytest.mark.parametrize("uid", [WORKFLOW_UID, "00000000-0000-0000-0000-000000000000"])
def test_rayjob_name_is_one_kuberay_accepts(uid: str):
    """KubeRay refuses a RayJob name over 47 characters or not a DNS-1035 label (a letter first); uids may start with
    a digit."""
    name = rayjob.NAME.replace("{{workflow.uid}}", uid)
    assert len(name) <= rayjob.MAX_NAME_LENGTH == 47
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)


def argo_when(expression: str, status: str, backend: str) -> bool:
    """Argo's `when` after substitution, for the only form it takes here: quoted equalities joined by `&&`."""
    filled = expression.replace("{{workflow.status}}", status)
    filled = filled.replace("{{workflow.parameters.train-backend}}", backend)
    clauses = re.findall(r"'([^']*)' (==|!=) '([^']*)'", filled)
    assert " && ".join(f"'{a}' {op} '{b}'" for a, op, b in clauses) == filled, "a form this reading does not know"
    return all((a == b) == (op == "==") for a, op, b in clauses)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("status", ["Succeeded", "Failed", "Error"])  # `argo stop` and a passed deadline: Failed
def test_delete_runs_only_for_the_ray_backend_when_the_workflow_did_not_succeed(status: str, backend: str):
    assert argo_when(delete_task()["when"], status, backend) is (backend == "ray" and status != "Succeeded")


def test_the_delete_runs_as_the_submitter_whose_role_tests_test_rbac_derives():
    """delete-rayjob's verbs (delete, and the get/list/watch of kubectl's wait) are checked against the submitter's
    Role by tests/test_rbac.py, from the rendered template."""
    spec = rendered_template()["spec"]
    delete = next(t for t in spec["templates"] if t["name"] == "delete-rayjob")
    assert delete["serviceAccountName"] == security.SUBMITTER
    assert delete["executor"]["serviceAccountName"] == security.SUBMITTER
