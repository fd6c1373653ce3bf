"""A real node joined to the control plane of tests/controlplane.py (issue 35): containerd and runc from Debian's
packages, a bridge + host-local CNI network on a pod subnet the test creates, and kubelet, kube-scheduler and
kube-proxy (iptables mode) built from engines/kubernetes/ by `scripts/engines.sh --cluster`, and CoreDNS (the
cluster DNS, from its module, on the bridge's address); kube-router's network policy controller when a test asks for
NetworkPolicy enforcement (`Node.enforce_network_policies`). Nothing is pulled:
every image the pods use is built here from files on this machine and imported into containerd (`images()`).

The network rule (traffic only to 127.0.0.0/8 and to the pod network the test made) is kept by construction: the
pods get no default route, only their /24 and the service range through the bridge's address, where the API server
listens (tests/controlplane.start(address=…)); no masquerading, no IP forwarding is switched on.

    net = PodNetwork.create()
    plane = controlplane.start(workdir, address=net.gateway, executor_image=ARGOEXEC_IMAGE)
    node = start(plane, net, workdir / "node")        # containerd, images, kubelet, scheduler, kube-proxy; Ready
    node.stop(); plane.stop(); net.delete()           # bounded; removes what they made (mounts, cgroups, rules)

Everything runs as root on the host: this is a test node, not a sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.controlplane import ADMIN_TOKEN, SERVICE_CIDR, ControlPlane, _wait, write_kubeconfig
from tests.engines import ENGINES_SH, binary

IMAGES_SH = ENGINES_SH.parent / "images.sh"

NODE_NAME = "distillery-node"
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CONTAINERD, RUNC = "/usr/bin/containerd", "/usr/sbin/runc"
DEBIAN_PACKAGES = "containerd runc containernetworking-plugins umoci mmdebstrap ipset"
IPSET = "/usr/sbin/ipset"  # kube-router's network policy controller runs it (pkg/utils/ipset.go: exec.LookPath)
# Where scripts/images.sh puts the step images ($DISTILLERY_CACHE/images); this node's own images go to node/ in it.
IMAGE_CACHE = Path(os.environ.get("DISTILLERY_CACHE", Path.home() / ".cache/distillery")) / "images"
# containerd's persistent store (root: content, snapshots, metadata), kept between sessions: importing and unpacking
# the cpu step image's 6.6 GB took 10.4 min here (load 7); a node finding it there imports nothing. One node at a
# time uses it (a lock); each start prunes what the current images do not need.
STORE = IMAGE_CACHE / "node/containerd"
SHIM_SOCKETS = Path("/run/containerd/s")
# Images built here are named under a registry nobody can reach, so a missing import shows as a pull error naming it.
REGISTRY = "distillery.local"
CLUSTER_DOMAIN = "cluster.local"  # what KubeRay and the Services' DNS names assume
DEBIAN_RELEASE = "bookworm"  # the release the step images' Dockerfiles build on (python:3.11-slim-bookworm)
BASE_IMAGE = f"{REGISTRY}/debian:{DEBIAN_RELEASE}"
# Pod subnets the test may take: the shipped pod range (infra/networkpolicy/cluster-network.yaml), a /24 of it that
# no route on this machine overlaps.
POD_RANGE = ipaddress.ip_network(yaml.safe_load(
    (Path(__file__).resolve().parent.parent / "infra/networkpolicy/cluster-network.yaml").read_text()
)["data"]["pod-cidr"])  # fmt: skip
# What the kubelet changes on the host unless protectKernelDefaults (which makes it refuse to start instead):
# restored by Node.stop.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")  # fmt: skip
# The chains the kubelet makes for kube-proxy's benefit (which backend is in use) and KUBE-FIREWALL (v1.34 still
# makes it: drops non-local traffic to 127.0.0.0/8, jumped to from INPUT and OUTPUT); kube-proxy --cleanup leaves them.
KUBELET_CHAINS = (("mangle", "KUBE-IPTABLES-HINT"), ("mangle", "KUBE-KUBELET-CANARY"), ("nat", "KUBE-KUBELET-CANARY"),
                  ("filter", "KUBE-KUBELET-CANARY"), ("filter", "KUBE-FIREWALL"))  # fmt: skip
KUBELET_JUMPS = (("filter", "INPUT", "KUBE-FIREWALL"), ("filter", "OUTPUT", "KUBE-FIREWALL"))
# kube-router's network policy controller (v2.1.0, pkg/controllers/netpol/network_policy_controller.go, the constants at
# its top): its chains in the filter table (KUBE-ROUTER-INPUT/FORWARD/OUTPUT jumped to from the built-in chains, a
# chain per pod and per policy, KUBE-NWPLCY-DEFAULT) and its ipsets (a policy's sources and destinations).
POLICY_CHAINS = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")
POLICY_IPSETS = ("KUBE-SRC-", "KUBE-DST-")


def _run(*cmd: str, check: bool = True, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def require_host() -> None:
    """Root and the Debian packages: the failure names what to install (never a skip)."""
    if os.geteuid() != 0:
        raise RuntimeError("tests/node.py: a real node needs root (containerd, runc, bridges, cgroups, iptables)")
    needed = (CONTAINERD, RUNC, str(CNI_BIN / "bridge"), "/usr/bin/umoci", IPSET)
    missing = [p for p in needed if not Path(p).exists()]
    if missing:
        raise RuntimeError(f"tests/node.py: {', '.join(missing)} missing; apt-get install {DEBIAN_PACKAGES}")


# --- the pod network ----------------------------------------------------------------------------------------------


@dataclass
class PodNetwork:
    """A Linux bridge holding the first address of a /24 of POD_RANGE; pods get the rest (host-local IPAM)."""

    bridge: str
    subnet: ipaddress.IPv4Network

    @property
    def gateway(self) -> str:
        return str(self.subnet[1])

    @classmethod
    def create(cls) -> PodNetwork:
        routes = json.loads(_run("ip", "-j", "route", "show", "table", "all").stdout)
        dsts = [r.get("dst", "default") for r in routes]
        taken = [ipaddress.ip_network(d, strict=False) for d in dsts if d != "default" and ":" not in d]
        for subnet in POD_RANGE.subnets(new_prefix=24):
            if not any(subnet.overlaps(t) for t in taken):
                break
        else:
            raise RuntimeError(f"no free /24 in {POD_RANGE}: every one overlaps a route here")
        net = cls(bridge=f"dnode{os.getpid() % 100000}", subnet=subnet)
        _run("ip", "link", "add", net.bridge, "type", "bridge")
        try:
            _run("ip", "addr", "add", f"{net.gateway}/{subnet.prefixlen}", "dev", net.bridge)
            _run("ip", "link", "set", net.bridge, "up")
        except BaseException:
            net.delete()
            raise
        return net

    def cni_config(self, ipam_dir: Path) -> dict:
        """bridge + host-local: pods on this /24, a route to the service range through the bridge's address (where
        kube-proxy's rules send them on to the API server), no default route, no masquerading."""
        return {
            "cniVersion": "1.0.0",
            "name": self.bridge,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": str(self.subnet), "gateway": self.gateway}]],
                        "routes": [{"dst": str(SERVICE_CIDR), "gw": self.gateway}],
                        "dataDir": str(ipam_dir),
                    },
                }
            ],
        }

    def delete(self) -> None:
        _run("ip", "link", "del", self.bridge, check=False)


# --- images -------------------------------------------------------------------------------------------------------


def oci_archive(name: str, layers: list[Path], out: Path, config: dict[str, str | list[str]]) -> Path:
    """An OCI image archive `out` of uncompressed layer tarballs, made by umoci (Debian's package), with
    `config` as umoci config options (entrypoint, user, env …); `name` (repo:tag) as containerd will know it."""
    layout = out.with_suffix(".layout")
    shutil.rmtree(layout, ignore_errors=True)
    tag = name.rsplit(":", 1)[1]
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:{tag}")
    for layer in layers:
        _run("umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", str(layer), timeout=600)
    opts: list[str] = []
    for key, value in config.items():
        for v in [value] if isinstance(value, str) else value:
            opts += [f"--config.{key}={v}"]
    if opts:
        _run("umoci", "config", "--image", f"{layout}:{tag}", *opts)
    # containerd names an OCI archive's image by this annotation on the index's manifest.
    index = json.loads((layout / "index.json").read_text())
    for m in index["manifests"]:
        m.setdefault("annotations", {})["io.containerd.image.name"] = name
    (layout / "index.json").write_text(json.dumps(index))
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for p in sorted(layout.iterdir()):
            tar.add(p, arcname=p.name)
    tmp.rename(out)
    shutil.rmtree(layout)
    return out


def _files_layer(out: Path, files: dict[str, tuple[Path | bytes, int]], dirs: dict[str, int]) -> Path:
    """A layer tarball of `files` (image path: (host file or content, mode)) and `dirs` (path: mode), owned by root."""

    def info(path: str, mode: int, kind: bytes, size: int = 0) -> tarfile.TarInfo:
        t = tarfile.TarInfo(path.lstrip("/"))
        t.mode, t.type, t.size, t.mtime = mode, kind, size, 0
        return t

    with tarfile.open(out, "w") as tar:
        for d, mode in sorted(dirs.items()):
            tar.addfile(info(d, mode, tarfile.DIRTYPE))
        for path, (src, mode) in sorted(files.items()):
            data = src.read_bytes() if isinstance(src, Path) else src
            tar.addfile(info(path, mode, tarfile.REGTYPE, len(data)), io.BytesIO(data))
    return out


def _key(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def engine_version(name: str) -> str:
    """The release scripts/engines.sh builds `name` at (its folder is <name>-<version>), built or not."""
    path = _run(str(ENGINES_SH), "--path", name).stdout.strip()
    return Path(path).parent.name.removeprefix(f"{name}-")


def pause_image(cache: Path) -> tuple[str, Path]:
    """Kubernetes' own pause (build/pause/linux/pause.c of the k8s.io/kubernetes module the kubelet is built from),
    compiled static: the sandbox every pod's namespaces hang on (containerd's sandbox_image)."""
    version = engine_version("kubelet")
    from tests.controlplane import go_module_dir

    source = go_module_dir(f"k8s.io/kubernetes@{version}") / "build/pause/linux/pause.c"
    name = f"{REGISTRY}/pause:{version}"
    out = cache / f"pause-{_key(source.read_bytes(), version)}.tar"
    if not out.exists():
        work = cache / "pause-build"
        work.mkdir(parents=True, exist_ok=True)
        _run("gcc", "-Os", "-static", f'-DVERSION="{version}"', "-o", str(work / "pause"), str(source))
        _run("strip", str(work / "pause"))
        layer = _files_layer(work / "layer.tar", {"/pause": (work / "pause", 0o755)}, {})
        oci_archive(name, [layer], out, {"entrypoint": "/pause", "user": "65535:65535"})
        shutil.rmtree(work)
    return name, out


def argoexec_image_name() -> str:
    return f"{REGISTRY}/argoexec:{engine_version('argoexec')}"


def argoexec_image(cache: Path) -> tuple[str, Path]:
    """Argo's executor as Argo's Dockerfile packs it (target argoexec on distroless/static): the static binary at
    /bin/argoexec, /etc/mime.types, hack/ssh_known_hosts and hack/nsswitch.conf from the module, CA certificates, a
    passwd naming root and Argo's non-root user 8737, a world-writable /tmp."""
    exe = binary("argoexec")
    from tests.controlplane import ARGO_MODULE, go_module_dir

    module = go_module_dir(ARGO_MODULE)
    name = argoexec_image_name()
    files: dict[str, tuple[Path | bytes, int]] = {
        "/bin/argoexec": (exe, 0o755),
        "/etc/ssh/ssh_known_hosts": (module / "hack/ssh_known_hosts", 0o644),
        "/etc/nsswitch.conf": (module / "hack/nsswitch.conf", 0o644),
        "/etc/ssl/certs/ca-certificates.crt": (Path("/etc/ssl/certs/ca-certificates.crt"), 0o644),
        "/etc/passwd": (b"root:x:0:0:root:/root:/sbin/nologin\nargo:x:8737:8737::/home/argo:/sbin/nologin\n", 0o644),
        "/etc/group": (b"root:x:0:\nargo:x:8737:\n", 0o644),
    }
    if Path("/etc/mime.types").exists():
        files["/etc/mime.types"] = (Path("/etc/mime.types"), 0o644)
    key = _key(*(f"{k} {v[1]}" for k, v in sorted(files.items())),
               *(v[0].read_bytes() if isinstance(v[0], Path) else v[0] for _, v in sorted(files.items())))  # fmt: skip
    out = cache / f"argoexec-{name.rsplit(':', 1)[1]}-{key}.tar"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        dirs = {"/tmp": 0o1777, "/root": 0o700, "/home/argo": 0o755, "/bin": 0o755, "/etc": 0o755, "/etc/ssh": 0o755,
                "/etc/ssl": 0o755, "/etc/ssl/certs": 0o755}  # fmt: skip
        layer = _files_layer(cache / "argoexec-layer.tar", files, dirs)
        oci_archive(name, [layer], out, {"entrypoint": "argoexec", "env": "PATH=/bin"})
        layer.unlink()
    return name, out


def debian_image(cache: Path) -> tuple[str, Path]:
    """A minimal Debian (mmdebstrap --variant=essential of DEBIAN_RELEASE, Debian's archive): a shell and coreutils
    for the test pods, with a non-root user 1000 as the step images have. Cached by the release and today's date
    (the archive moves; a day-old image is as good for these tests)."""
    name = BASE_IMAGE
    out = cache / f"debian-{DEBIAN_RELEASE}-{time.strftime('%Y%m%d')}.tar"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        rootfs = cache / f"debian-{DEBIAN_RELEASE}.rootfs.tar"
        _run("mmdebstrap", "--variant=essential", "--format=tar", "--include=ca-certificates",
             # `useradd` is not in the essential set: the entries written as it would write them
             "--customize-hook=echo 'user:x:1000:1000::/home/user:/bin/sh' >> \"$1/etc/passwd\"",
             "--customize-hook=echo 'user:x:1000:' >> \"$1/etc/group\"",
             "--customize-hook=install -d -o 1000 -g 1000 \"$1/home/user\"",
             DEBIAN_RELEASE, str(rootfs), timeout=1200)  # fmt: skip
        oci_archive(name, [rootfs], out, {"cmd": "/bin/sh", "user": "1000", "workingdir": "/",
                                          "env": "PATH=/usr/local/bin:/usr/bin:/bin"})  # fmt: skip
        rootfs.unlink()
    return name, out


@dataclass(frozen=True)
class StepImage:
    """A step image scripts/images.sh built: its OCI archive, the name the archive gives it
    (`io.containerd.image.name`, as the workflows render it: localhost/distillery-<kind>:<version>) and its manifest
    digest (the `.digest` file beside it, which the rendered templates pin with DISTILLERY_IMAGE_DIGEST_<KIND>)."""

    kind: str
    archive: Path
    name: str
    digest: str

    @property
    def pinned(self) -> str:
        """`<repository>@<digest>`: the reference containerd's CRI resolves `<name>@<digest>` to (a tag beside a
        digest is dropped), made after the import by `ctr images tag`."""
        return f"{self.name.rsplit(':', 1)[0]}@{self.digest}"


def step_images(kinds: tuple[str, ...] = ("cpu", "ray")) -> list[StepImage]:
    """The step images of `kinds` that scripts/images.sh has built for the current inputs (`images.sh --path KIND`
    names the archive those inputs give), ready to import; a kind not built is left out (the test that runs it says
    so, naming the command)."""
    found = []
    for kind in kinds:
        archive = Path(_run(str(IMAGES_SH), "--path", kind).stdout.strip())
        digest = archive.with_suffix(".digest")
        if archive.is_file() and digest.is_file():
            name, manifest = archive_image(archive)
            if manifest != digest.read_text().strip():
                raise RuntimeError(
                    f"{archive}: manifest {manifest}, but {digest} says otherwise; rerun scripts/images.sh"
                )
            found.append(StepImage(kind, archive, name, manifest))
    return found


def archive_image(archive: Path) -> tuple[str, str]:
    """The image name an OCI archive's index.json gives containerd and its manifest digest (read without scanning
    the layers after it: both oci_archive and scripts/images.sh write index.json before the blobs)."""
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name.lstrip("./") == "index.json":
                index = json.load(tar.extractfile(member))  # type: ignore[arg-type]
                (manifest,) = index["manifests"]
                return manifest["annotations"]["io.containerd.image.name"], manifest["digest"]
    raise RuntimeError(f"{archive}: no index.json (not an OCI archive from tests/node.py or scripts/images.sh)")


# --- the node -----------------------------------------------------------------------------------------------------


@dataclass
class Node:
    plane: ControlPlane
    net: PodNetwork
    workdir: Path
    socket: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    step_images: list[StepImage] = field(default_factory=list)
    store_lock: io.TextIOWrapper | None = None

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return _run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args, timeout=timeout)

    def import_image(self, archive: Path) -> bool:
        """`archive` imported and unpacked, unless the store already holds its image (same name, same manifest):
        True when it had to be imported (minutes for a step image's GBs)."""
        name, digest = archive_image(archive)
        if digest in self._stored().get(name, ()):
            return False
        self.ctr("images", "import", str(archive), timeout=1800)
        return True

    def _stored(self) -> dict[str, set[str]]:
        """The store's images: name -> manifest digests (`ctr images ls`: REF TYPE DIGEST …)."""
        found: dict[str, set[str]] = {}
        for line in self.ctr("images", "ls").stdout.splitlines()[1:]:
            ref, _type, digest, *_ = line.split()
            found.setdefault(ref, set()).add(digest)
        return found

    def prune(self, keep: set[str]) -> list[str]:
        """Every image whose manifest is not in `keep` (digests) removed from the persistent store, under all its
        names (its tag, its digest reference, the CRI's sha256:<id>), and the containers a previous node left in its
        metadata: containerd's garbage collector then frees their content and snapshots, so the store holds one
        set of images, not every build's."""
        for cid in self.ctr("containers", "ls", "-q").stdout.split():
            self.ctr("containers", "rm", cid)
        stale = [ref for ref, digests in self._stored().items() if not digests & keep]
        if stale:
            self.ctr("images", "rm", "--sync", *stale, timeout=600)
        return stale

    def log_tail(self, name: str, chars: int = 4000) -> str:
        log = self.workdir / f"{name}.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def peak_memory_mib(self) -> dict[str, float]:
        """Each node and control-plane process's peak resident memory so far (VmHWM), MiB; `shims`: this containerd's
        shims' current resident memory together (they come and go with the pods)."""
        out = {}
        for name, proc in [*self.procs.items(), *self.plane.procs.items()]:
            with contextlib.suppress(OSError, StopIteration):
                status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                out[name] = int(next(x for x in status if x.startswith("VmHWM:")).split()[1]) / 1024
        shims = 0
        for pid in _shims(self.socket):
            with contextlib.suppress(OSError, StopIteration):
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
                shims += int(next(x for x in status if x.startswith("VmRSS:")).split()[1])
        out["shims"] = shims / 1024
        return out

    def ready(self) -> bool:
        """The Node reports Ready and carries no taint any more (the node-lifecycle controller has taken off the
        not-ready taint admission put on it): the scheduler can place pods on it."""
        node = self.plane.get(f"/api/v1/nodes/{NODE_NAME}")
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
        return ready and not node["spec"].get("taints")

    def enforce_network_policies(self, timeout: float = 60) -> None:
        """kube-router's network policy controller (scripts/engines.sh --node) on the host, as root, with the node's
        kubeconfig: from now on the cluster's NetworkPolicies are enforced for this node's pods, in iptables (filter
        table) and ipsets. Its firewall alone: no routing, no BGP, no service proxy (kube-proxy stays), no CNI
        config, no health or metrics listener. Not part of `start`: the scenarios' pods reach S3, MLflow, git and the
        hub on the bridge's address, which the shipped policies (rightly) do not allow; the policy scenario turns it
        on and `stop_network_policies` off. Returns once its chains are hooked into INPUT, FORWARD and OUTPUT."""
        kubeconfig = self.workdir / "node.kubeconfig"
        proc = _spawn_into(self, "kube-router", [
            str(binary("kube-router")), "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            "--run-loadbalancer=false", "--enable-cni=false", "--enable-pod-egress=false", "--enable-ipv6=false",
            f"--kubeconfig={kubeconfig}", f"--hostname-override={NODE_NAME}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--health-port=0", "--metrics-port=0", "--v=1",
        ])  # fmt: skip

        def hooked() -> bool:
            rules = _run("iptables", "-t", "filter", "-S", check=False, timeout=30).stdout
            return all(f"-j KUBE-ROUTER-{chain}" in rules for chain in ("INPUT", "FORWARD", "OUTPUT"))

        _wait("kube-router", hooked, proc, self.workdir / "kube-router.log", timeout)

    def policed(self, pod: str, namespace: str) -> bool:
        """kube-router has given `pod` its firewall chain (its traffic now goes through the policies that select it,
        and the default deny of a policy type when one selects it)."""
        rules = _run("iptables", "-t", "filter", "-S", check=False, timeout=30).stdout
        return f"traffic from POD name:{pod} namespace: {namespace} to chain" in rules

    def stop_network_policies(self) -> None:
        """kube-router stopped and its chains and ipsets removed (nothing when it never ran)."""
        _stop(self.procs.pop("kube-router", None))
        if (self.workdir / "kube-router.log").exists():
            _remove_network_policy_rules()

    def stop(self) -> None:
        """kube-router's network policy controller and its rules, then kubelet, scheduler, kube-proxy and CoreDNS, then
        every container of this containerd (through containerd, so its persistent store keeps no container record; then
        runc kill and delete for whatever is left) and its shims, containerd, kube-proxy's rules (--cleanup), the
        mounts under the work folder, the pods' cgroups and the sysctls the kubelet changed. Each wait bounded."""
        self.stop_network_policies()
        for name in ("kube-scheduler", "kubelet", "kube-proxy", "coredns"):
            _stop(self.procs.pop(name, None))
        containerd = self.procs.get("containerd")
        if containerd is not None and containerd.poll() is None:
            base = ("ctr", "--address", str(self.socket), "--namespace", "k8s.io")
            for cid in _run(*base, "containers", "ls", "-q", check=False, timeout=30).stdout.split():
                _run(*base, "tasks", "kill", "--signal", "SIGKILL", cid, check=False, timeout=10)
                _run(*base, "tasks", "delete", "--force", cid, check=False, timeout=30)
                _run(*base, "containers", "rm", cid, check=False, timeout=30)
        runc_root = self.workdir / "containerd/runc/k8s.io"
        if runc_root.is_dir():
            listed = _run(RUNC, "--root", str(runc_root), "list", "-q", check=False).stdout.split()
            for cid in listed:
                _run(RUNC, "--root", str(runc_root), "kill", cid, "KILL", check=False, timeout=10)
            for cid in listed:
                _run(RUNC, "--root", str(runc_root), "delete", "--force", cid, check=False, timeout=10)
        for pid in _shims(self.socket):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _stop(self.procs.pop("containerd", None))
        if (self.workdir / "kube-proxy.yaml").exists():
            _run(str(binary("kube-proxy")), "--config", str(self.workdir / "kube-proxy.yaml"), "--cleanup",
                 check=False, timeout=60)  # fmt: skip
        for table, chain, target in KUBELET_JUMPS:
            for tool in ("iptables", "ip6tables"):
                _run(tool, "-t", table, "-D", chain, "-j", target, check=False)
        for table, chain in KUBELET_CHAINS:
            for tool in ("iptables", "ip6tables"):
                _run(tool, "-t", table, "-F", chain, check=False)
                _run(tool, "-t", table, "-X", chain, check=False)
        _unmount_under(self.workdir)
        _remove_cgroups("kubepods")
        for key, value in self.sysctls.items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)
        for link in _log_links(self.workdir):
            link.unlink(missing_ok=True)
        # The shims' socket folder is fixed in containerd 1.6 (/run/containerd/s), whatever the state dir: removed
        # when this node's shims have left it empty (a system containerd's would not be).
        for empty in (SHIM_SOCKETS, SHIM_SOCKETS.parent):
            with contextlib.suppress(OSError):
                empty.rmdir()
        if self.store_lock is not None:
            self.store_lock.close()  # the store's lock, released once its containerd is gone
            self.store_lock = None

    def leftovers(self) -> list[str]:
        """What this node left on the host after `stop` (empty when the teardown was clean): mounts under its folder,
        its processes and shims, the kubelet's cgroups, KUBE-/CNI- iptables chains (kube-router's among them) and
        kube-router's ipsets, changed sysctls, log links."""
        found = [f"mount {m}" for folder in (self.workdir, STORE) for m in _mounts_under(folder)]
        found += [f"process {pid}: {cmd}" for pid, cmd in _processes_naming(self.workdir)]
        found += [f"cgroup {h}/kubepods" for h in Path("/sys/fs/cgroup").iterdir() if (h / "kubepods").is_dir()]
        for tool in ("iptables", "ip6tables"):
            rules = _run(f"{tool}-save", check=False).stdout.splitlines()
            found += [f"{tool}: {r}" for r in rules if r.startswith(":KUBE-") or r.startswith(":CNI-")]
        found += [f"ipset {name}" for name in _policy_ipsets()]
        for key, value in self.sysctls.items():
            with contextlib.suppress(OSError):
                if Path("/proc/sys", key).read_text() != value:
                    found.append(f"sysctl {key} not restored to {value.strip()}")
        found += [f"log link {link}" for link in _log_links(self.workdir)]
        found += [f"shim socket {f}" for f in (SHIM_SOCKETS.iterdir() if SHIM_SOCKETS.is_dir() else ())]
        return found


def _policy_ipsets() -> list[str]:
    if not Path(IPSET).exists():
        return []
    return [n for n in _run(IPSET, "list", "-n", check=False).stdout.split() if n.startswith(POLICY_IPSETS)]


def _remove_network_policy_rules() -> None:
    """kube-router's jumps from the built-in chains, then its chains (flushed, then deleted: they jump to each other),
    then its ipsets (no rule names them any more). Not `kube-router --cleanup-config`: in v2.1.0 that cleans the
    policy controller through an empty NetworkPolicyController{} (pkg/cmd/kube-router.go CleanupConfigAndExit),
    whose nil iptables and ipset handler maps make its Cleanup a no-op, and then runs the service proxy's and the
    router's cleanups (IPVS, routes, interfaces), parts this node never started."""
    import shlex

    saved = _run("iptables-save", "-t", "filter", check=False, timeout=60).stdout.splitlines()
    chains = [line[1:].split()[0] for line in saved if line.startswith(":") and line[1:].startswith(POLICY_CHAINS)]
    for line in saved:
        rule = shlex.split(line)
        if rule[:1] == ["-A"] and rule[1] in ("INPUT", "FORWARD", "OUTPUT") and rule[-1].startswith(POLICY_CHAINS):
            _run("iptables", "-t", "filter", "-D", *rule[1:], check=False)
    for op in ("-F", "-X"):
        for chain in chains:
            _run("iptables", "-t", "filter", op, chain, check=False)
    for name in _policy_ipsets():
        _run(IPSET, "destroy", name, check=False)


def _stop(proc: subprocess.Popen | None, grace: float = 10) -> None:
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)


def _shims(socket: Path) -> list[int]:
    """The containerd-shim-runc-v2 processes of this containerd (their command line names its socket)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
                if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in cmd:
                    pids.append(int(proc.name))
    return pids


def _processes_naming(folder: Path) -> list[tuple[int, str]]:
    """Processes whose command line names a path in `folder` (the node's daemons, containerd's shims)."""
    found = []
    needle = str(folder.resolve()).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmd = (proc / "cmdline").read_bytes()
                if needle in cmd:
                    found.append((int(proc.name), cmd.replace(b"\0", b" ").decode(errors="replace")[:200]))
    return found


def _lock(path: Path) -> io.TextIOWrapper:
    """An exclusive lock on `path` held while the returned file stays open; fails at once, naming the holder, when
    another process holds it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    f = path.open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        raise RuntimeError(
            f"{path.parent}: another node's containerd uses this store (pid {holder}); stop it first"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def _mounts_under(folder: Path) -> list[str]:
    prefix = str(folder.resolve()) + "/"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [m for m in mounts if m.startswith(prefix)]


def _unmount_under(folder: Path) -> None:
    """Every mount below `folder` (overlay roots, tmpfs token volumes, netns), deepest first; lazy, so a busy one
    still goes."""
    for point in sorted(_mounts_under(folder), key=len, reverse=True):
        _run("umount", "-l", point, check=False, timeout=30)


def _log_links(folder: Path) -> list[Path]:
    """The kubelet's per-container symlinks in /var/log/containers (a fixed path in the kubelet, not configurable)
    that point into `folder`."""
    links = Path("/var/log/containers")
    prefix = str(folder.resolve()) + "/"
    if not links.is_dir():
        return []
    return [p for p in links.iterdir() if p.is_symlink() and os.readlink(p).startswith(prefix)]


def _remove_cgroups(name: str) -> None:
    """The kubelet's cgroup tree `name` in every v1 hierarchy, leaves first (a cgroup goes once it holds no task)."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def containerd_config(workdir: Path, socket: Path, sandbox_image: str, root: Path) -> str:
    """containerd 1.6's CRI plugin with its persistent store (content, snapshots, metadata: the imported images) in
    `root` and everything else under `workdir` (nothing in /var/lib/containerd or /etc/cni), the cgroupfs driver (no
    systemd here), the CNI config of conf_dir, and no registry: images are imported."""
    c = workdir / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{c}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c}/opt"
[{cri}]
  sandbox_image = "{sandbox_image}"
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  enable_unprivileged_ports = false
  # These machines' root lacks CAP_SYS_RESOURCE: a negative oom_score_adj (the sandbox's -998, a Guaranteed pod's
  # -997) is refused, and runc then dies in nsexec ("can't get final child's PID from pipe: EOF"). Clamped to
  # containerd's own score instead, as for rootless containerd.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        Root = "{c}/runc"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{workdir}/cni/net.d"
  [{cri}.registry]
    config_path = "{c}/certs.d"
"""


def kubelet_config(node: Node, port: int, healthz: int) -> dict:
    w = node.workdir
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.net.gateway,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        # The API server calls in with its kubelet client certificate (system:masters), checked by the node's
        # webhook authorizer: tests/controlplane.make_certs.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(node.plane.ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # these machines mount cgroup v1 (kubelet >= 1.35 refuses it by default)
        "resolvConf": str(w / "resolv.conf"),  # no upstream DNS server: nothing outside to resolve
        # The cluster's DNS (CoreDNS on the bridge's address, `coredns_config`): what ClusterFirst pods are given.
        "clusterDNS": [node.net.gateway],
        "clusterDomain": CLUSTER_DOMAIN,
        "podLogsDir": str(w / "pod-logs"),
        # A shared machine's disk: no eviction or image GC on its fill level; memory pressure still counts.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "shutdownGracePeriod": "0s",
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
    }


def coredns_config(node: Node, kubeconfig: Path, ready_port: int) -> str:
    """The Corefile of the node's cluster DNS: CoreDNS listening on the pod bridge's address only, answering for
    Services and Pods from the API server (its kubernetes plugin, as the admin: CoreDNS's own RBAC is not what is
    tested), `ready` on loopback once the plugin has synced. No `forward`: a name outside the cluster gets no answer
    from anywhere, as the network rule wants."""
    return f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {node.net.gateway}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
    }}
}}
"""


def _coredns_ready(port: int) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
        return r.status == 200


def start(plane: ControlPlane, net: PodNetwork, workdir: Path, images: list[StepImage] | None = None) -> Node:
    """containerd, the images imported (pause, argoexec, Debian, and the step images `images`, each also under its
    pinned reference), kubelet, kube-scheduler and kube-proxy joined to `plane` (whose API server listens on
    net.gateway), the Node Ready. `node.timings`: seconds per part."""
    require_host()
    workdir.mkdir(parents=True, exist_ok=True)
    socket = workdir / "containerd.sock"
    node = Node(plane=plane, net=net, workdir=workdir, socket=socket)
    cache = IMAGE_CACHE / "node"
    try:
        began = time.monotonic()
        sandbox, pause = pause_image(cache)
        built = [pause, argoexec_image(cache)[1], debian_image(cache)[1]]
        node.timings["images built"] = time.monotonic() - began

        (workdir / "cni/net.d").mkdir(parents=True, exist_ok=True)
        (workdir / "cni/net.d/10-distillery.conflist").write_text(json.dumps(net.cni_config(workdir / "cni/ipam")))
        node.store_lock = _lock(STORE / ".lock")
        (workdir / "containerd.toml").write_text(containerd_config(workdir, socket, sandbox, STORE / "root"))
        began = time.monotonic()
        proc = _spawn_into(node, "containerd", [CONTAINERD, "--config", str(workdir / "containerd.toml")])
        _wait("containerd", lambda: _run("ctr", "--address", str(socket), "version", timeout=5).returncode == 0,
              proc, workdir / "containerd.log", 60)  # fmt: skip
        node.timings["containerd"] = time.monotonic() - began
        began = time.monotonic()
        steps = images or []
        node.prune({*(archive_image(a)[1] for a in built), *(s.digest for s in steps)})
        imported = [a.name for a in built if node.import_image(a)]
        node.timings["images imported" if imported else "images found in the store"] = time.monotonic() - began
        for step in steps:
            began = time.monotonic()
            fresh = node.import_image(step.archive)
            node.ctr("images", "tag", "--force", step.name, step.pinned)
            node.timings[f"{step.kind} image {'imported' if fresh else 'found in the store'}"] = (
                time.monotonic() - began
            )
            node.step_images.append(step)
        node.images = node.ctr("images", "ls", "-q").stdout.split()

        began = time.monotonic()
        kubeconfig = workdir / "node.kubeconfig"
        write_kubeconfig(kubeconfig, plane.url, plane.ca, ADMIN_TOKEN, "default")
        (workdir / "resolv.conf").write_text("")
        (workdir / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(node, _free_port(), _free_port())))
        node.sysctls = {k: Path("/proc/sys", k).read_text() for k in KUBELET_SYSCTLS if Path("/proc/sys", k).exists()}
        kubelet = _spawn_into(node, "kubelet", [
            str(binary("kubelet")), "--config", str(workdir / "kubelet.yaml"), "--kubeconfig", str(kubeconfig),
            "--root-dir", str(workdir / "kubelet"), "--cert-dir", str(workdir / "kubelet-pki"),
            "--hostname-override", NODE_NAME, "--node-ip", net.gateway, "--v", "2",
        ])  # fmt: skip
        _spawn_into(node, "kube-scheduler", [
            str(binary("kube-scheduler")), "--kubeconfig", str(kubeconfig),
            "--authentication-kubeconfig", str(kubeconfig), "--authorization-kubeconfig", str(kubeconfig),
            "--leader-elect=false", "--secure-port", "0",
        ])  # fmt: skip
        (workdir / "kube-proxy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": str(net.subnet),
            "healthzBindAddress": f"127.0.0.1:{_free_port()}",
            "metricsBindAddress": f"127.0.0.1:{_free_port()}",
            # Services answer on the bridge only, and the host's conntrack settings stay as they are.
            "nodePortAddresses": [f"{net.gateway}/32"],
            "iptables": {"localhostNodePorts": False},
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }))  # fmt: skip
        _spawn_into(node, "kube-proxy", [str(binary("kube-proxy")), "--config", str(workdir / "kube-proxy.yaml")])
        ready = _free_port()
        (workdir / "Corefile").write_text(coredns_config(node, kubeconfig, ready))
        dns = _spawn_into(node, "coredns", [str(binary("coredns")), "-conf", str(workdir / "Corefile")])
        _wait("coredns", lambda: _coredns_ready(ready), dns, workdir / "coredns.log", 60)
        _wait("kubelet (Node Ready)", node.ready, kubelet, workdir / "kubelet.log", 180)
        node.timings["kubelet ready"] = time.monotonic() - began
    except BaseException:
        node.stop()
        raise
    return node


def _free_port() -> int:
    from tests.conftest import free_port

    return free_port()


def _spawn_into(node: Node, name: str, cmd: list[str]) -> subprocess.Popen:
    """In its own session (Node.stop signals the group), its output in <workdir>/<name>.log."""
    with (node.workdir / f"{name}.log").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=node.workdir,
                                env={"PATH": os.environ["PATH"], "HOME": str(node.workdir)})  # fmt: skip
    node.procs[name] = proc
    return proc


# --- the pods' model hub -------------------------------------------------------------------------------------------

# Files at least this large go into the hub repository as Git LFS objects, as the hub stores weights (olah serves an
# LFS object from the repository's .git/lfs/objects, streamed from the file, not inflated from a git blob).
LFS_MIN_BYTES = 1 << 20
# Fixed author and committer: the base's repository gets the same commit (the run's base-revision) every time.
REPO_ENV = {"GIT_AUTHOR_NAME": "distillery", "GIT_AUTHOR_EMAIL": "tests@distillery.invalid",
            "GIT_COMMITTER_NAME": "distillery", "GIT_COMMITTER_EMAIL": "tests@distillery.invalid",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}  # fmt: skip


def hub_repository(model: Path, repo: Path) -> str:
    """`model`'s files as a hub model repository at `repo` (a git repository, the large files as LFS pointers with
    their objects under .git/lfs/objects, as `git lfs` leaves them); returns its commit."""
    repo.mkdir(parents=True)
    _run("git", "init", "--quiet", str(repo))
    attributes = []
    for f in sorted(p for p in model.iterdir() if p.is_file()):
        size = f.stat().st_size
        if size < LFS_MIN_BYTES:
            shutil.copyfile(f, repo / f.name)
            continue
        digest = hashlib.sha256()
        with f.open("rb") as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
        oid = digest.hexdigest()
        objects = repo / ".git/lfs/objects" / oid[:2] / oid[2:4]
        objects.mkdir(parents=True, exist_ok=True)
        os.link(f, objects / oid) if f.stat().st_dev == objects.stat().st_dev else shutil.copyfile(f, objects / oid)
        (repo / f.name).write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n")
        attributes.append(f"{f.name} filter=lfs diff=lfs merge=lfs -text\n")
    (repo / ".gitattributes").write_text("".join(attributes))
    env = {**os.environ, **REPO_ENV}
    _run("git", "-C", str(repo), "add", "--all", env=env)
    _run("git", "-C", str(repo), "commit", "--quiet", "--message", f"{model.name}", env=env)
    return _run("git", "-C", str(repo), "rev-parse", "HEAD").stdout.strip()


@dataclass
class HubMirror:
    endpoint: str
    repo_id: str
    revision: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        _stop(self.proc)


def start_hub_mirror(model: Path, repo_id: str, address: str, port: int, workdir: Path) -> HubMirror:
    """olah (scripts/engines.sh --node) on `address`, offline, serving `model` as the hub repository `repo_id` from a
    local git mirror: what huggingface_hub reaches through HF_ENDPOINT. Nothing is fetched from huggingface.co."""
    from tests.engines import binary

    python = binary("olah")
    revision = hub_repository(model, workdir / "mirrors/models" / repo_id)
    config = workdir / "olah.toml"
    config.write_text(
        f'[basic]\nhost = "{address}"\nport = {port}\nrepos-path = "{workdir / "repos"}"\n'
        f'mirrors-path = ["{workdir / "mirrors"}"]\n[accessibility]\noffline = true\n'
    )
    log = workdir / "olah.log"
    with log.open("w") as f:
        proc = subprocess.Popen([str(python), "-m", "olah.server", "-c", str(config)], stdout=f,
                                stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)  # fmt: skip
    return HubMirror(f"http://{address}:{port}", repo_id, revision, proc, log)
