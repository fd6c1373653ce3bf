"""Kubernetes Pod Security admission, `restricted` level, ported from the checks the API server runs.

A fast pre-check with field-named messages: the API server's own admission judges the pods Argo's controller creates in
tests/test_controlplane.py, and engines/podsecurity/ runs the same evaluator on every pod tests/argo_pods.py builds.

Source: kubernetes/kubernetes `staging/src/k8s.io/pod-security-admission/policy/` (Apache-2.0). Each check below names
its `check_*.go` file and function. `restricted` is every baseline check, minus the baseline checks a restricted check
overrides (`OverrideCheckIDs`), plus the restricted checks (`registry.go`). Containers are visited as `visitor.go` does:
init containers, containers, ephemeral containers — so Argo's `init` and `wait` are judged like `main`.

Where policy versions differ, this port takes the *strictest* reading of the versions a cluster from 1.33 on may run,
so a pod that passes here passes every one of them:
- `runAsNonRoot` / `runAsUser` are not relaxed for `hostUsers: false` (that relaxation exists only at policy 1.35+).
- `hostProbesAndHostLifecycle` (policy 1.34+) is checked.
- sysctls: the 1.32 safe set (1.37 adds two more, not taken).
- `image` volumes are allowed: PR kubernetes/kubernetes#130394 added them to the 1.0 check itself, in 1.33.

A fast pre-check, confirmed by the engine: tests/test_engines.py runs Kubernetes' own evaluator (engines/podsecurity/,
k8s.io/pod-security-admission v0.33.7) on every pod Argo and KubeRay would create; where the two disagree, the engine
is right.

`check(pod)` returns one line per forbidding check, `"<reason>: <detail>"`, worded as the API server words them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

CheckFn = Callable[[dict], str | None]


def _spec(pod: dict) -> dict:
    return pod.get("spec") or {}


def _pod_sc(pod: dict) -> dict:
    return _spec(pod).get("securityContext") or {}


def _containers(pod: dict) -> Iterator[dict]:
    """visitor.go `visitContainers`: init containers, containers, ephemeral containers."""
    spec = _spec(pod)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(container: dict) -> dict:
    return container.get("securityContext") or {}


def _windows(pod: dict) -> bool:
    """The 1.25 checks admit `spec.os.name: windows` pods (their API validation forbids the Linux-only fields)."""
    return ((_spec(pod).get("os") or {}).get("name")) == "windows"


def _names(names: list[str]) -> str:
    """helpers.go `pluralize` + `joinQuote`."""
    word = "container" if len(names) == 1 else "containers"
    return f"{word} {_quote(names, sort=False)}"


def _quote(values, sort: bool = True) -> str:
    return ", ".join(f'"{v}"' for v in (sorted(values) if sort else values))


# --- baseline ------------------------------------------------------------------------------------------------------


def host_namespaces(pod: dict) -> str | None:
    """check_hostNamespaces.go `hostNamespaces_1_0`: hostNetwork, hostPID, hostIPC must be false/unset."""
    used = sorted(k for k in ("hostNetwork", "hostPID", "hostIPC") if _spec(pod).get(k))
    return f"host namespaces: {', '.join(used)}" if used else None


def privileged(pod: dict) -> str | None:
    """check_privileged.go `privileged_1_0`: no container with securityContext.privileged=true."""
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("privileged") is True]
    return f"privileged: {_names(bad)} must not set securityContext.privileged=true" if bad else None


CAPABILITIES_BASELINE = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def capabilities_baseline(pod: dict) -> str | None:
    """check_capabilities_baseline.go `capabilitiesBaseline_1_0`: capabilities.add only from the default set."""
    bad, caps = [], set()
    for c in _containers(pod):
        extra = set((_sc(c).get("capabilities") or {}).get("add") or []) - CAPABILITIES_BASELINE
        if extra:
            bad.append(c["name"])
            caps |= extra
    if bad:
        detail = f"{_names(bad)} must not include {_quote(caps)} in securityContext.capabilities.add"
        return f"non-default capabilities: {detail}"
    return None


def host_path_volumes(pod: dict) -> str | None:
    """check_hostPathVolumes.go `hostPathVolumes_1_0`: no hostPath volume (overridden by restrictedVolumes)."""
    bad = [v["name"] for v in _spec(pod).get("volumes") or [] if "hostPath" in v]
    return f"hostPath volumes: {', '.join(bad)}" if bad else None


def host_ports(pod: dict) -> str | None:
    """check_hostPorts.go `hostPorts_1_0`: every container's ports[*].hostPort undefined or 0."""
    bad, ports = [], set()
    for c in _containers(pod):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c["name"])
            ports |= used
    return f"hostPort: {_names(bad)} use hostPorts {', '.join(sorted(ports))}" if bad else None


APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def app_armor(pod: dict) -> str | None:
    """check_appArmorProfile.go `appArmorProfile_1_0`: the pod's and containers' appArmorProfile.type is RuntimeDefault
    or Localhost, and the deprecated per-container annotations are empty, `runtime/default` or `localhost/*`."""
    bad = []
    types = [("pod", (_pod_sc(pod).get("appArmorProfile") or {}))]
    types += [(c["name"], _sc(c).get("appArmorProfile") or {}) for c in _containers(pod)]
    for who, profile in types:
        if profile and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{who}: appArmorProfile.type={profile.get('type')!r}")
    for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION_PREFIX) and not (
            value in ("", "runtime/default") or value.startswith("localhost/")
        ):
            bad.append(f"{key}={value!r}")
    return f"forbidden AppArmor profiles: {', '.join(bad)}" if bad else None


SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}  # 1.31 set


def selinux(pod: dict) -> str | None:
    """check_seLinuxOptions.go, its 1.31 version: seLinuxOptions.type from the allowed set, user and role unset."""

    def bad(opts: dict) -> bool:
        return opts.get("type", "") not in SELINUX_TYPES or bool(opts.get("user")) or bool(opts.get("role"))

    setters = ["pod"] if bad(_pod_sc(pod).get("seLinuxOptions") or {}) else []
    containers = [c["name"] for c in _containers(pod) if bad(_sc(c).get("seLinuxOptions") or {})]
    if containers:
        setters.append(_names(containers))
    return f"seLinuxOptions: {' and '.join(setters)} set forbidden securityContext.seLinuxOptions" if setters else None


def proc_mount(pod: dict) -> str | None:
    """check_procMount_restricted.go `procMount_1_35_restricted` (also the baseline check for pods that share the
    host's user namespace, check_procMount_baseline.go): securityContext.procMount unset or Default."""
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("procMount") not in (None, "Default")]
    return f"procMount: {_names(bad)} must not set securityContext.procMount to a non-Default value" if bad else None


def seccomp_baseline(pod: dict) -> str | None:
    """check_seccompProfile_baseline.go, its 1.19 version: no Unconfined profile (overridden by the restricted
    seccomp check)."""
    setters = ["pod"] if (_pod_sc(pod).get("seccompProfile") or {}).get("type") == "Unconfined" else []
    setters += [c["name"] for c in _containers(pod) if (_sc(c).get("seccompProfile") or {}).get("type") == "Unconfined"]
    return f"seccompProfile: {', '.join(setters)} must not set seccompProfile.type to Unconfined" if setters else None


SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",  # 1.0
    "net.ipv4.ip_local_reserved_ports",  # 1.27
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",  # 1.29
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",  # 1.32
}  # fmt: skip


def sysctls(pod: dict) -> str | None:
    """check_sysctls.go, its 1.32 version (`sysctlsAllowedV1Dot32`): spec.securityContext.sysctls[*].name from the
    safe set."""
    bad = [s["name"] for s in _pod_sc(pod).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]
    return f"forbidden sysctls: {', '.join(bad)}" if bad else None


def windows_host_process(pod: dict) -> str | None:
    """check_windowsHostProcess.go `windowsHostProcess_1_0`: windowsOptions.hostProcess unset or false, pod and
    containers."""
    setters = ["pod"] if (_pod_sc(pod).get("windowsOptions") or {}).get("hostProcess") is True else []
    bad = [c["name"] for c in _containers(pod) if (_sc(c).get("windowsOptions") or {}).get("hostProcess") is True]
    if bad:
        setters.append(_names(bad))
    if setters:
        return f"hostProcess: {' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    return None


def host_probes_and_lifecycle(pod: dict) -> str | None:
    """check_hostProbesAndhostLifecycle.go `hostProbesAndHostLifecycleV1Dot34`: no `host` in probes' or lifecycle
    handlers' httpGet / tcpSocket."""
    bad, hosts = [], set()
    for c in _containers(pod):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        used = {(h.get(a) or {}).get("host") for h in handlers if h for a in ("httpGet", "tcpSocket")} - {None, ""}
        if used:
            bad.append(c["name"])
            hosts |= used
    return f"probe or lifecycle host: {_names(bad)} use probe or lifecycle hosts {_quote(hosts)}" if bad else None


# --- restricted ----------------------------------------------------------------------------------------------------

ALLOWED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
    "image",  # kubernetes/kubernetes#130394 (1.33)
}  # fmt: skip


def restricted_volumes(pod: dict) -> str | None:
    """check_restrictedVolumes.go `restrictedVolumes_1_0`: inline volume sources only of the allowed types."""
    bad, types = [], set()
    for v in _spec(pod).get("volumes") or []:
        sources = set(v) - {"name"}
        if not sources & ALLOWED_VOLUME_TYPES:
            bad.append(v["name"])
            types |= sources or {"unknown"}
    if bad:
        return f"restricted volume types: volumes {_quote(bad)} use restricted volume types {_quote(types)}"
    return None


def allow_privilege_escalation(pod: dict) -> str | None:
    """check_allowPrivilegeEscalation.go `allowPrivilegeEscalation_1_25`: every container (init ones included) sets
    securityContext.allowPrivilegeEscalation=false."""
    if _windows(pod):
        return None
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if bad:
        return (
            f"allowPrivilegeEscalation != false: {_names(bad)} must set securityContext.allowPrivilegeEscalation=false"
        )
    return None


def run_as_non_root(pod: dict) -> str | None:
    """check_runAsNonRoot.go `runAsNonRoot_1_0`: runAsNonRoot=true on the pod, or on every container; false nowhere.
    (The 1.35 `hostUsers: false` relaxation is not taken: see the module docstring.)"""
    pod_value = _pod_sc(pod).get("runAsNonRoot")
    setters = ["pod"] if pod_value is False else []
    explicit = [c["name"] for c in _containers(pod) if _sc(c).get("runAsNonRoot") is False]
    implicit = [c["name"] for c in _containers(pod) if _sc(c).get("runAsNonRoot") is None and pod_value is not True]
    if explicit:
        setters.append(_names(explicit))
    if setters:
        return f"runAsNonRoot != true: {' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return f"runAsNonRoot != true: pod or {_names(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def run_as_user(pod: dict) -> str | None:
    """check_runAsUser.go `runAsUser_1_23`: runAsUser is never 0, on the pod or any container."""
    setters = ["pod"] if _pod_sc(pod).get("runAsUser") == 0 else []
    bad = [c["name"] for c in _containers(pod) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_names(bad))
    return f"runAsUser=0: {' and '.join(setters)} must not set runAsUser=0" if setters else None


def seccomp_restricted(pod: dict) -> str | None:
    """check_seccompProfile_restricted.go `seccompProfileRestricted_1_25`: seccompProfile.type RuntimeDefault or
    Localhost, set on the pod or on every container; no container may set another type."""
    if _windows(pod):
        return None
    allowed = ("RuntimeDefault", "Localhost")
    pod_profile = _pod_sc(pod).get("seccompProfile")
    setters = ["pod"] if pod_profile and pod_profile.get("type") not in allowed else []
    pod_set = bool(pod_profile) and not setters
    explicit, implicit = [], []
    for c in _containers(pod):
        profile = _sc(c).get("seccompProfile")
        if profile:
            if profile.get("type") not in allowed:
                explicit.append(c["name"])
        elif not pod_set:
            implicit.append(c["name"])
    if explicit:
        setters.append(_names(explicit))
    if setters:
        return f"seccompProfile: {' and '.join(setters)} must not set securityContext.seccompProfile.type to that value"
    if implicit:
        return (
            f"seccompProfile: pod or {_names(implicit)} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost"'
        )
    return None


def capabilities_restricted(pod: dict) -> str | None:
    """check_capabilities_restricted.go `capabilitiesRestricted_1_25`: every container drops ALL and adds at most
    NET_BIND_SERVICE."""
    if _windows(pod):
        return None
    missing, adding, caps = [], [], set()
    for c in _containers(pod):
        capabilities = _sc(c).get("capabilities")
        if not capabilities:
            missing.append(c["name"])
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing.append(c["name"])
        extra = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            adding.append(c["name"])
            caps |= extra
    details = []
    if missing:
        details.append(f'{_names(missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_names(adding)} must not include {_quote(caps)} in securityContext.capabilities.add")
    return f"unrestricted capabilities: {'; '.join(details)}" if details else None


# (id, level, check, ids of the baseline checks it overrides under `restricted`), as registered upstream.
CHECKS: list[tuple[str, str, CheckFn, tuple[str, ...]]] = [
    ("hostNamespaces", "baseline", host_namespaces, ()),
    ("privileged", "baseline", privileged, ()),
    ("capabilities_baseline", "baseline", capabilities_baseline, ()),
    ("hostPathVolumes", "baseline", host_path_volumes, ()),
    ("hostPorts", "baseline", host_ports, ()),
    ("appArmorProfile", "baseline", app_armor, ()),
    ("seLinuxOptions", "baseline", selinux, ()),
    ("procMount_baseline", "baseline", proc_mount, ()),
    ("seccompProfile_baseline", "baseline", seccomp_baseline, ()),
    ("sysctls", "baseline", sysctls, ()),
    ("windowsHostProcess", "baseline", windows_host_process, ()),
    ("hostProbesAndHostLifecycle", "baseline", host_probes_and_lifecycle, ()),
    ("restrictedVolumes", "restricted", restricted_volumes, ("hostPathVolumes",)),
    ("allowPrivilegeEscalation", "restricted", allow_privilege_escalation, ()),
    ("runAsNonRoot", "restricted", run_as_non_root, ()),
    ("runAsUser", "restricted", run_as_user, ()),
    ("seccompProfile_restricted", "restricted", seccomp_restricted, ("seccompProfile_baseline",)),
    ("capabilities_restricted", "restricted", capabilities_restricted, ("capabilities_baseline",)),
    ("procMount_restricted", "restricted", proc_mount, ("procMount_baseline",)),
]


def checks(level: str = "restricted") -> list[tuple[str, CheckFn]]:
    """The checks a namespace at `level` runs (registry.go: restricted drops the baseline checks it overrides)."""
    if level == "baseline":
        return [(cid, fn) for cid, lvl, fn, _ in CHECKS if lvl == "baseline"]
    assert level == "restricted", level
    overridden = {o for _, lvl, _, overrides in CHECKS if lvl == "restricted" for o in overrides}
    return [(cid, fn) for cid, _, fn, _ in CHECKS if cid not in overridden]


def violations(pod: dict, level: str = "restricted") -> dict[str, str]:
    """Check id → the reason it refuses `pod`, for every check at `level` that does."""
    return {cid: found for cid, fn in checks(level) if (found := fn(pod))}


def check(pod: dict, level: str = "restricted") -> list[str]:
    """Every reason Pod Security admission at `level` would give for refusing `pod`; empty when it admits it."""
    return list(violations(pod, level).values())
