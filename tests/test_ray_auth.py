"""Ray's token authentication fails closed: every Ray container of the rendered RayJob carries RAY_AUTH_MODE=token
itself, so an operator that drops `authOptions` (an older CRD prunes the field) leaves Ray without a token and Ray
refuses to start, instead of serving its dashboard and GCS to anyone (issue #27, item 6).

    pytest tests/test_ray_auth.py
"""

from __future__ import annotations

from tests.manifests import rendered_rayjob


def ray_containers(rayjob: dict) -> list[dict]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_every_ray_container_asks_for_token_auth_itself():
    rayjob = rendered_rayjob()
    assert rayjob["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    containers = ray_containers(rayjob)
    assert len(containers) >= 2
    for container in containers:
        modes = [e.get("value") for e in container["env"] if e["name"] == "RAY_AUTH_MODE"]
        assert modes == ["token"], container["name"]
