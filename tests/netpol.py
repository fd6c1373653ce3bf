"""NetworkPolicy evaluated with its own semantics, for tests.

NetworkPolicy (k8s.io/api/networking/v1 types.go; the Kubernetes docs' "Network Policies"): pods no policy selects
for a direction are open in it; a selected pod admits a connection only when some rule of a selecting policy admits
it. A peer with only `podSelector` means pods of the policy's own namespace; only `namespaceSelector`, every pod of
the matching namespaces; both, the pods that match in the matching namespaces; `ipBlock`, addresses: outside the
cluster, and, as Calico and Cilium enforce it, a pod's own address too (the API docs leave pod IPs in an ipBlock to
the implementation, so a policy must not rely on ipBlock missing them: `0.0.0.0/0` is read as reaching every pod with
an address). A rule with no `from`/`to` admits every peer; no `ports`, every port. A connection needs both the source's
egress and the destination's ingress to allow it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace + labels, and its address `pod_ip` when an ipBlock should see it) or, with `ip`, an address
    that is no pod (outside the cluster, or a Service's cluster IP)."""

    namespace: str = ""
    labels: dict = field(default_factory=dict, hash=False)
    ip: str = ""
    pod_ip: str = ""

    @property
    def namespace_labels(self) -> dict:
        return {"kubernetes.io/metadata.name": self.namespace}  # set by the API server on every namespace


def matches(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist); {} matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": present and value in e.get("values", []), "NotIn": not present or value not in e.get("values", []),
              "Exists": present, "DoesNotExist": not present}[e["operator"]]  # fmt: skip
        if not ok:
            return False
    return True


def peer_matches(peer: dict, policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        address = other.ip or other.pod_ip
        if not address:
            return False
        block, ip = peer["ipBlock"], ipaddress.ip_address(address)
        inside = ip in ipaddress.ip_network(block["cidr"])
        return inside and not any(ip in ipaddress.ip_network(x) for x in block.get("except") or [])
    if other.ip:
        return False
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return matches(peer.get("podSelector"), other.labels)


def port_matches(ports: list[dict] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        low = p.get("port")
        if p.get("protocol", "TCP") != protocol:
            continue
        if low is None or low == port or (p.get("endPort") and low <= port <= p["endPort"]):
            return True
    return False


def direction_allows(policies: list[dict], pod: Endpoint, other: Endpoint, port: int, protocol: str, kind: str) -> bool:
    """`kind` Ingress: may `other` connect to `pod`; Egress: may `pod` connect to `other`."""
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace") == pod.namespace
        and not pod.ip
        and matches(p["spec"]["podSelector"], pod.labels)
        and kind in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    key, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    for policy in selecting:
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(peer_matches(pe, policy["metadata"]["namespace"], other) for pe in peers)
            if peer_ok and port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(policies: list[dict], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
    return direction_allows(policies, src, dst, port, protocol, "Egress") and direction_allows(
        policies, dst, src, port, protocol, "Ingress"
    )
