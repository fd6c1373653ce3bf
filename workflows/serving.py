"""The home serving set: `champion` and `challenger` served by llama.cpp (`python -m steps.serve`), and the canary
split between them as a Gateway API `HTTPRoute` whose backend weights give the challenger `--canary-percent` of the
requests. Rendered into infra/serving/ (`python -m workflows.render`), installed with the rest (`kubectl apply -k
infra/`), next to a Gateway of the cluster's (`GATEWAY`; any Gateway API implementation: Envoy Gateway, Cilium,
Istio, NGINX Gateway Fabric, ...).

    python -m workflows.serving --canary-percent 25 | kubectl apply -n distillery -f -   # move the share now
    python -m workflows.serving --canary-percent 0  | kubectl apply -n distillery -f -   # champion only

The share is one number: the route's two weights are derived from it (`100 - p` and `p`), so they cannot disagree.
The committed manifest carries `CANARY_PERCENT`; change it there and re-render to change the default.

Each Deployment runs one pod that follows its alias in MLflow (steps/serve.py: the GGUF checked against the
version's sha256, the version's serving settings, an atomic swap when the alias moves). The challenger side falls back
to the champion while no challenger exists (after a promotion removes the alias), so its share of the traffic never
fails. Requests may also pin a side with the header `X-Distillery-Alias: champion|challenger` (for trying a
challenger before it takes a share). The pods pass the namespace's `restricted` Pod Security level, read credentials
only through optional Secret references (workflows/security.py: MLflow, and S3 when the artifact store is read
directly), and carry no Kubernetes API token.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from steps.core.registry import MODEL_NAME
from steps.pipeline import param
from workflows import security
from workflows.images import DEFAULT as DEFAULT_IMAGES
from workflows.images import Images
from workflows.pods import AMD64, CONTAINER_SECURITY, POD_SECURITY

STEP = "serve"  # the credentials' user (security.USERS)
ALIASES = ("champion", "challenger")
FALLBACK = {"challenger": "champion"}  # served while no version holds the alias
CANARY_PERCENT = 10  # the challenger's share of the requests, in percent
PORT = 8080
# The cluster's Gateway the route attaches to: (name, namespace); a homelab usually has one shared Gateway.
GATEWAY = ("home", "gateway")
ROUTE = MODEL_NAME  # the HTTPRoute is named for the model it serves
PIN_HEADER = "X-Distillery-Alias"  # steps/serve.py sends the same header back with the side that answered
MODELS_DIR = f"{security.SCRATCH_DIR}/models"
# serve's log of the requests it answered (`--served-log`; online-metrics counts an outcome only for an id logged
# there): on a PersistentVolumeClaim of its own per side, so it outlives the pod; the pod's root is read-only and its
# scratch emptyDir goes with the pod. ReadWriteOnce, one writer: the Deployments are `Recreate`.
SERVED_LOG_VOLUME = "served-log"
SERVED_LOG_DIR = "/var/lib/distillery/served"
SERVED_LOG = f"{SERVED_LOG_DIR}/served.jsonl"
SERVED_LOG_SIZE = "1Gi"  # ~150 bytes a request: millions of requests
# The GGUF and llama.cpp's context (SERVING.n_ctx) in memory, twice while a swap starts the next version beside the
# running one; SmolLM2-class models take well under 1 GiB each. The downloads live in the scratch emptyDir.
# llama.cpp runs exactly as many threads as the pod's CPU limit: no throttling, no idle core.
CPUS = 2
RESOURCES = {
    "requests": {"cpu": str(CPUS), "memory": "2Gi", "ephemeral-storage": "8Gi"},
    "limits": {"cpu": str(CPUS), "memory": "6Gi", "ephemeral-storage": "8Gi"},
}
NAMESPACE = "distillery"  # infra/kustomization.yaml sets it too; here so that each file says where it goes
LABELS = {"app.kubernetes.io/name": "distillery", "app.kubernetes.io/component": "serve"}


def name(alias: str) -> str:
    return f"distillery-serve-{alias}"


def served_claim(alias: str) -> str:
    return f"distillery-served-{alias}"


def _labels(alias: str) -> dict[str, str]:
    return {**LABELS, "distillery/alias": alias}


def args(alias: str) -> list[str]:
    """The container's command line: steps/serve.py's flags."""
    found = ["-m", "steps.serve", "--tracking-uri", param("tracking-uri").cluster or "",
             "--model-name", param("model-name").cluster or "", "--alias", alias,
             "--host", "0.0.0.0", "--port", str(PORT), "--work", MODELS_DIR, "--threads", str(CPUS),
             "--token-file", f"{security.SERVE_TOKENS_DIR}/clients",
             "--operator-token-file", f"{security.SERVE_TOKENS_DIR}/operators", "--served-log", SERVED_LOG]  # fmt: skip
    if alias in FALLBACK:
        found += ["--fallback-alias", FALLBACK[alias]]
    return found


def deployment(alias: str, images: Images = DEFAULT_IMAGES) -> dict:
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5, "failureThreshold": 3}
    token_volumes, token_mounts = security.secret_volumes(STEP)
    container = {
        "name": "llama-cpp",
        "image": images.ref("cpu"),  # llama-cpp-python[server], built portable (images/cpu.Dockerfile)
        "command": ["python"],
        "args": args(alias),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        # Ready only while a checked version answers; alive while the front answers at all (a missing alias is a
        # wait, not a fault: a restart would not help).
        "readinessProbe": probe,
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 20, "failureThreshold": 3},
        "resources": RESOURCES,
        "securityContext": CONTAINER_SECURITY.model_dump(by_alias=True, exclude_none=True),
        "env": security.writable_env() + security.secret_env(STEP),
        # The bearer tokens (a mounted Secret the kubelet refreshes on rotation; the front re-reads the files).
        "volumeMounts": [
            {"name": security.SCRATCH_VOLUME, "mountPath": security.SCRATCH_DIR},
            {"name": SERVED_LOG_VOLUME, "mountPath": SERVED_LOG_DIR},
            *token_mounts,
            security.trust_mount(),  # MLflow and S3 behind a private CA
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name(alias), "namespace": NAMESPACE, "labels": _labels(alias)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels(alias)},
            # One pod follows the alias and swaps versions itself (an alias move restarts nothing). A new pod (a new
            # image) replaces the old one after it stops: the served log's ReadWriteOnce claim has one writer, and a
            # surge pod on another node could not attach it while the old pod holds it.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": _labels(alias)},
                "spec": {
                    "serviceAccountName": security.SERVE,
                    "automountServiceAccountToken": False,  # serving needs no Kubernetes API
                    "securityContext": POD_SECURITY.model_dump(by_alias=True, exclude_none=True),
                    "nodeSelector": dict(AMD64),  # the cpu image is amd64 only
                    "containers": [container],
                    "volumes": [
                        {
                            "name": security.SCRATCH_VOLUME,
                            "emptyDir": {"sizeLimit": RESOURCES["limits"]["ephemeral-storage"]},
                        },
                        {"name": SERVED_LOG_VOLUME, "persistentVolumeClaim": {"claimName": served_claim(alias)}},
                        *token_volumes,
                        security.trust_volume(),
                    ],
                },
            },
        },
    }


def claim(alias: str) -> dict:
    """The side's served log's volume (the cluster's default StorageClass)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": served_claim(alias), "namespace": NAMESPACE, "labels": _labels(alias)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": SERVED_LOG_SIZE}}},
    }


def service(alias: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name(alias), "namespace": NAMESPACE, "labels": _labels(alias)},
        "spec": {
            "selector": _labels(alias),
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def weights(canary_percent: int) -> dict[str, int]:
    """The route's backend weights: the challenger's share and the champion's rest, from the one number."""
    if not isinstance(canary_percent, int) or not 0 <= canary_percent <= 100:
        raise ValueError(f"canary percent {canary_percent!r}: use a whole number from 0 (champion only) to 100")
    return {"champion": 100 - canary_percent, "challenger": canary_percent}


def _backend(alias: str, weight: int) -> dict:
    return {"name": name(alias), "port": PORT, "weight": weight}


def httproute(canary_percent: int = CANARY_PERCENT) -> dict:
    share = weights(canary_percent)
    gateway, gateway_namespace = GATEWAY
    pinned = [
        {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"},
                      "headers": [{"type": "Exact", "name": PIN_HEADER, "value": alias}]}],
         "backendRefs": [_backend(alias, 1)]}
        for alias in ALIASES
    ]  # fmt: skip
    split = {
        "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
        "backendRefs": [_backend(alias, share[alias]) for alias in ALIASES],
    }
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": ROUTE,
            "namespace": NAMESPACE,
            "labels": LABELS,
            "annotations": {"distillery/canary-percent": str(canary_percent)},
        },
        "spec": {
            "parentRefs": [{"name": gateway, "namespace": gateway_namespace}],
            # A header match is more specific than none, so the pinned rules win over the split (Gateway API's rule
            # precedence); the split takes every other /v1 request.
            "rules": [*pinned, split],
        },
    }


# The cluster's address settings (infra/networkpolicy/cluster-network.yaml, the one place they are set; kustomize
# copies them into the policies at build time): the serving pods send HTTPS only to the private endpoints' range.
# In-cluster MLflow and MinIO, where the README puts them, get rules of their own.
CLUSTER_NETWORK = Path(__file__).resolve().parent.parent / "infra/networkpolicy/cluster-network.yaml"
IN_CLUSTER = (("mlflow", 5000), ("minio", 9000))


def endpoints_cidr() -> str:
    """The private endpoints' range (cluster-network.yaml), the only addresses the serving pods send HTTPS to."""
    return str(yaml.safe_load(CLUSTER_NETWORK.read_text())["data"]["endpoints-cidr"])


def networkpolicy() -> dict:
    """Only the Gateway's namespace reaches the serving pods, on the serving port: nothing bypasses the route's split.
    Out, they reach DNS, MLflow and the artifact store (HTTPS at the private endpoints, or MLflow and MinIO in the
    cluster), and nothing else: no public host, not the instance metadata address, not another pod. (Needs a CNI that
    enforces NetworkPolicy; kubelet probes are not pod traffic.)"""
    dns = {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }  # fmt: skip
    # HTTPS only to the private endpoints (S3 and STS behind VPC endpoints on EKS): serving reaches no public host.
    https = {"to": [{"ipBlock": {"cidr": endpoints_cidr()}}], "ports": [{"protocol": "TCP", "port": 443}]}
    in_cluster = [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}],
         "ports": [{"protocol": "TCP", "port": port}]}
        for ns, port in IN_CLUSTER
    ]  # fmt: skip
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "distillery-serve", "namespace": NAMESPACE, "labels": LABELS},
        "spec": {
            "podSelector": {"matchLabels": LABELS},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": GATEWAY[1]}}}],
                    "ports": [{"protocol": "TCP", "port": PORT}],
                }
            ],
            "egress": [dns, https, *in_cluster],
        },
    }


def manifests(images: Images = DEFAULT_IMAGES, canary_percent: int = CANARY_PERCENT) -> dict[str, list[dict]]:
    """File name (under infra/serving/) -> its objects."""
    found: dict[str, list[dict]] = {
        f"{alias}.yaml": [deployment(alias, images), service(alias), claim(alias)] for alias in ALIASES
    }
    found["httproute.yaml"] = [httproute(canary_percent)]
    found["networkpolicy.yaml"] = [networkpolicy()]
    return found


def dump(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print the canary HTTPRoute with another share")
    parser.add_argument("--canary-percent", type=int, default=CANARY_PERCENT, help="the challenger's share, 0-100")
    a = parser.parse_args(argv)
    try:
        route = httproute(a.canary_percent)
    except ValueError as e:
        parser.error(str(e))
    sys.stdout.write(dump([route]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
