#!/usr/bin/env bash
# Build the engines the tests run, from their own Go modules, into a cache keyed by version (seconds when present).
#
#   scripts/engines.sh               # what CI's tiers run: engines/harness/ and engines/podsecurity/, argo's CLI (each
#                                    # ARGO_VERSIONS); ~15 min cold on 2 cores
#   scripts/engines.sh --cluster     # the same, then what the cluster tier (`scripts/test.sh --cluster`, pytest -m
#                                    # cluster) runs: the control plane (tests/controlplane.py): kube-apiserver,
#                                    # kube-controller-manager, etcd, Argo's workflow-controller, KubeRay's
#                                    # ray-operator; about an hour more cold on 2 cores, so CI does not build it
#   scripts/engines.sh --path NAME   # where NAME (harness, podsecurity, argo-v4.0.5, kube-apiserver,
#                                    # kube-controller-manager, etcd, workflow-controller, ray-operator) is;
#                                    # builds nothing (tests/engines.py)
#   scripts/engines.sh --argo-versions   # the Argo releases built and linted with
#   scripts/engines.sh --cluster     # also the node (tests/node.py): kubelet, kube-scheduler, kube-proxy, Argo's
#                                    # executor argoexec, and the hub mirror the pods download the base from (olah,
#                                    # from PyPI into its own virtual environment; --path olah is its python),
#                                    # CoreDNS, the pods' cluster DNS, and kube-router, the NetworkPolicy enforcer
#   scripts/engines.sh --node        # the node's binaries only
#
# The folder: ${DISTILLERY_ENGINES:-~/.cache/distillery/engines}/<name>-<version>/<binary>. The Go module cache
# (~/go/pkg/mod) keeps the sources; a second machine run of this script finds the binaries and builds nothing.
#
# Argo's CLI: `go install github.com/argoproj/argo-workflows/v4/cmd/argo@VERSION` cannot build from the module zip:
# ui/embed.go embeds ui/dist/app, which the zip omits (Argo's Makefile touches a placeholder there before building).
# So the module is fetched with `go mod download`, copied to a scratch folder, given the same placeholder and built
# there with its own go.mod and go.sum (replace directives included, so v3 builds the same way). The control plane's
# workflow-controller is built the same way (CONTROLLER_ARGO).
#
# The control plane, each keyed by the version it pins:
# - kube-apiserver, kube-controller-manager: engines/kubernetes/ (k8s.io/kubernetes, its staging modules replaced by
#   their releases);
# - etcd: engines/etcd/ (go.etcd.io/etcd/server/v3, whose root package is etcd's main);
# - ray-operator: KubeRay's module as downloaded (no replace directives), built in place.
# Minutes to tens of minutes each on 2 cores (docs/engines.md has the numbers): outside the heavy-job lock, at the
# lowest priority with one compile at a time, as this machine's rules ask of builds longer than 10 minutes.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
# Argo v4.1.2 is the version the issue named; the module proxy here refuses it (403 "This module version is not
# available"), and v4.0.5 is the newest v4 it serves. v3.7.18 (the newest v3, served) builds the same way, its
# go.mod's replace directive included, but has not been built and linted here yet: add it when it has.
# The Argo release is the one engines/harness/go.mod requires (the harness runs that release's code; the render's
# default executor image, workflows/images.py argo_release, reads the same line).
CONTROLLER_ARGO=$(awk '$1 == "github.com/argoproj/argo-workflows/v4" {print $2; exit}' engines/harness/go.mod)
[ -n "$CONTROLLER_ARGO" ] || { echo "engines.sh: engines/harness/go.mod requires no argo-workflows/v4" >&2; exit 1; }
ARGO_VERSIONS=("$CONTROLLER_ARGO")
# KubeRay v1.7.0 (the release the templates' RayJob fields need, authOptions from 1.6.0) is refused by the module
# proxy here (403 on its .zip); v1.5.0 is the newest it serves (docs/engines.md: what that changes).
KUBERAY_VERSION=v1.5.0
root="${DISTILLERY_ENGINES:-$HOME/.cache/distillery/engines}"
# The repository's own Go programs (engines/<name>/, each its own module), cached by the hash of their sources.
MODULES=(harness podsecurity)
module_key() { cat "engines/$1/go.mod" "engines/$1/go.sum" "engines/$1"/*.go | sha256sum | cut -c1-16; }
# The control plane's own modules (engines/kubernetes/, engines/etcd/) hold no Go source, only `tool` directives; each
# binary is named by the release its module requires.
TOOLS=(kube-apiserver kube-controller-manager etcd)
# The node's (scripts/engines.sh --cluster; tests/node.py): from the same engines/kubernetes/ module, so Go's build
# cache already holds most of their packages once the API server is built.
NODE_TOOLS=(kubelet kube-scheduler kube-proxy)
# The pods' model hub: huggingface.co is not reachable here, so the node's pods download the base from olah (a
# Hugging Face hub mirror, MIT), serving a git repository of the base on the pod network (HF_ENDPOINT through the
# distillery-settings ConfigMap, as a cluster without huggingface.co would). Pinned; its own virtual environment, so
# its dependencies (FastAPI, GitPython, ...) never meet the project's.
OLAH_VERSION=0.5.4
# The node's cluster DNS: CoreDNS from its Go module, run on the pod bridge's address with its kubernetes plugin
# (tests/node.py), so pods resolve Services by name (KubeRay's workers dial the Ray head's Service by its DNS name).
COREDNS_VERSION=v1.15.0
# The node's NetworkPolicy enforcer: the bridge CNI enforces none. kube-router's network policy controller alone
# (no routing, no service proxy, no BGP: tests/node.py), iptables + ipset on the host, so the policies of infra/
# really block on the node. Test-only, never shipped: the module proxy serves v2.1.0 alone and notes security flaws
# reported for it; it runs on an isolated test node as root, reaching only the loopback API server and the pod
# bridge. kube-network-policies (sigs.k8s.io, v0.7.0/v0.8.0 served) would be the lighter choice, but it sends each
# new connection to user space with the nftables `queue` expression (pkg/networkpolicy/controller.go, expr.Queue),
# and this machine's kernel has no CONFIG_NFT_QUEUE (docs/engines.md).
KUBE_ROUTER_VERSION=v2.1.0
tool_dir() { case "$1" in etcd) echo engines/etcd ;; *) echo engines/kubernetes ;; esac; }
tool_module() { case "$1" in etcd) echo go.etcd.io/etcd/server/v3 ;; *) echo k8s.io/kubernetes ;; esac; }
tool_package() { case "$1" in etcd) echo go.etcd.io/etcd/server/v3 ;; *) echo "k8s.io/kubernetes/cmd/$1" ;; esac; }
tool_version() {
  awk -v m="$(tool_module "$1")" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' \
    "$(tool_dir "$1")/go.mod"
}
if [ "${1:-}" = "--argo-versions" ]; then
  echo "${ARGO_VERSIONS[*]}"
  exit 0
fi
if [ "${1:-}" = "--path" ]; then
  case "${2:-}" in
    harness | podsecurity) echo "$root/$2-$(module_key "$2")/$2" ;;
    argo-*) echo "$root/$2/argo" ;;
    kube-apiserver | kube-controller-manager | etcd | kubelet | kube-scheduler | kube-proxy)
      echo "$root/$2-$(tool_version "$2")/$2"
      ;;
    workflow-controller | argoexec) echo "$root/$2-$CONTROLLER_ARGO/$2" ;;
    ray-operator) echo "$root/ray-operator-$KUBERAY_VERSION/ray-operator" ;;
    olah) echo "$root/olah-$OLAH_VERSION/bin/python" ;;
    coredns) echo "$root/coredns-$COREDNS_VERSION/coredns" ;;
    kube-router) echo "$root/kube-router-$KUBE_ROUTER_VERSION/kube-router" ;;
    *)
      echo "engines.sh --path: name one of ${MODULES[*]}, argo-<version> (${ARGO_VERSIONS[*]}), ${TOOLS[*]}," \
        "${NODE_TOOLS[*]}, workflow-controller, argoexec, ray-operator, olah, coredns, kube-router" >&2
      exit 2
      ;;
  esac
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "engines.sh: no 'go' on PATH; install Go >= 1.26 (the tests run Argo's CLI and engines/harness/, built with it)" >&2
  exit 1
fi
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
scratch=""
trap '[ -z "$scratch" ] || rm -rf "$scratch"' EXIT
# Run under the heavy-job lock (taken once, below) at low priority.
heavy() { nice -n 10 "$@"; }
heavy_build() { heavy go build -trimpath "$@"; }

argo_scratch() {  # the Argo module `$1` as a scratch copy with the UI placeholder; prints its folder
  local version="$1" mod dir
  mod="github.com/argoproj/argo-workflows/${version%%.*}"
  dir="$(go mod download -json "$mod@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  scratch="$(mktemp -d)"  # global: the EXIT trap removes it
  cp -r "$dir/." "$scratch/"
  chmod -R u+w "$scratch"
  mkdir -p "$scratch/ui/dist/app" && touch "$scratch/ui/dist/app/placeholder"
}

# One command of Argo's module at `version` into $root/<cmd>-<version>/<cmd>, built by `builder` (heavy_build or
# long_build) in a scratch copy of the module (argo_scratch); nothing when the binary is there.
build_argo_cmd() {
  local version="$1" cmd="$2" builder="$3" mod dest
  mod="github.com/argoproj/argo-workflows/${version%%.*}"
  dest="$root/$cmd-$version"
  [ -x "$dest/$cmd" ] && return 0
  argo_scratch "$version"
  mkdir -p "$dest"
  echo "engines: building argo's $cmd $version (minutes, once)" >&2
  (cd "$scratch" && "$builder" -ldflags "-X $mod.version=$version" -o "$dest/$cmd.tmp" "./cmd/$cmd")
  mv "$dest/$cmd.tmp" "$dest/$cmd"
  rm -rf "$scratch"
  scratch=""
}

# The control plane's long builds: lowest priority, outside the lock (see the top); every core unless
# DISTILLERY_GO_JOBS says how many packages compile at once (1 on a machine others share).
long_build() { nice -n 15 go build -p "${DISTILLERY_GO_JOBS:-$(nproc)}" -trimpath "$@"; }

build_tool() {
  local name="$1" dest version ldflags=""
  version="$(tool_version "$name")"
  dest="$root/$name-$version"
  [ -x "$dest/$name" ] && return 0
  mkdir -p "$dest"
  echo "engines: building $name $version from $(tool_dir "$name")/ (tens of minutes on 2 cores, once)" >&2
  if [ "$name" != etcd ]; then  # what --version and /version report (Kubernetes' hack/lib/version.sh)
    local minor="${version#v1.}"
    ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
    ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
  fi
  (cd "$(tool_dir "$name")" && long_build -ldflags "$ldflags" -o "$dest/$name.tmp" "$(tool_package "$name")")
  mv "$dest/$name.tmp" "$dest/$name"
}

# name module version [package [ldflags]]: the module's main package (its root unless named), built once into
# $root/name-version/name
build_main_module() {
  local name="$1" dest="$root/$1-$3" dir
  [ -x "$dest/$name" ] && return 0
  dir="$(go mod download -json "$2@$3" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$dest"
  echo "engines: building $name $3 from $2 (minutes, once)" >&2
  (cd "$dir" && long_build -ldflags "${5:-}" -o "$dest/$name.tmp" "${4:-.}")
  mv "$dest/$name.tmp" "$dest/$name"
}

build_ray_operator() { build_main_module ray-operator github.com/ray-project/kuberay/ray-operator "$KUBERAY_VERSION"; }

# --- the node (--cluster; tests/node.py) -------------------------------------------------------------------------

# Builder (build_argo_cmd) of Argo's executor, run in the module's scratch copy. The module zip drops symlinks, and
# upstream workflow/executor/osspecific/signal_linux.go is one, to signal_darwin.go (the same Getpgid/Kill code for
# both): restoring it restores the shipped source (without it: command_unix.go:37:3: undefined: Setpgid).
# Static, as `argoexec init` copies this binary into every step's container whatever libc that image has. Argo's
# Makefile gets there with CGO_ENABLED=0; here cgo stays as for the CLI and the harness and the link is static
# (glibc's libc.a), so Go's build cache serves every package those builds compiled: a link instead of a cold build.
argoexec_build() {
  ln -s signal_darwin.go workflow/executor/osspecific/signal_linux.go
  local args=()
  while [ $# -gt 0 ]; do
    if [ "$1" = -ldflags ]; then
      args+=(-ldflags "$2 -linkmode external -extldflags -static")
      shift
    else
      args+=("$1")
    fi
    shift
  done
  long_build "${args[@]}"
}

build_hub_mirror() {
  local dest="$root/olah-$OLAH_VERSION"
  [ -x "$dest/bin/olah-cli" ] && return 0
  echo "engines: installing olah $OLAH_VERSION (the pods' hub mirror) into $dest" >&2
  rm -rf "$dest.tmp"
  python3.11 -m venv "$dest.tmp"
  "$dest.tmp/bin/pip" install --quiet --disable-pip-version-check "olah==$OLAH_VERSION"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
  # a venv's scripts name its folder: the move needs them re-pointed
  sed -i "1s|^#!.*python.*|#!$dest/bin/python|" "$dest"/bin/*
}

build_node() {
  for t in "${NODE_TOOLS[@]}"; do build_tool "$t"; done
  build_argo_cmd "$CONTROLLER_ARGO" argoexec argoexec_build
  build_hub_mirror
  build_main_module coredns github.com/coredns/coredns "$COREDNS_VERSION"
  build_main_module kube-router github.com/cloudnativelabs/kube-router/v2 "$KUBE_ROUTER_VERSION" ./cmd/kube-router \
    "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
}

build_module() {
  local name="$1" dest
  dest="$root/$name-$(module_key "$name")"
  [ -x "$dest/$name" ] && return 0
  mkdir -p "$dest"
  echo "engines: building engines/$name/" >&2
  (cd "engines/$name" && heavy go build -trimpath -o "$dest/$name.tmp" .)
  mv "$dest/$name.tmp" "$dest/$name"
}

if [ "${1:-}" = "--node" ]; then
  build_node
  exit 0
fi
missing=()
for m in "${MODULES[@]}"; do [ -x "$("$self" --path "$m")" ] || missing+=("$m"); done
for v in "${ARGO_VERSIONS[@]}"; do [ -x "$("$self" --path "argo-$v")" ] || missing+=("argo-$v"); done
# Heavy on 2 cores (each argo release: minutes of compile): these builds take the machine's heavy-job lock once, all
# together, and run at low priority.
if [ ${#missing[@]} -gt 0 ] && [ -z "${DISTILLERY_ENGINES_LOCKED:-}" ]; then
  echo "engines: to build: ${missing[*]} (waiting for /tmp/distillery-heavy.lock)" >&2
  DISTILLERY_ENGINES_LOCKED=1 flock /tmp/distillery-heavy.lock "$self" --locked-part
fi
if [ "${1:-}" = "--locked-part" ]; then
  for m in "${MODULES[@]}"; do build_module "$m"; done
  for v in "${ARGO_VERSIONS[@]}"; do build_argo_cmd "$v" argo heavy_build; done
  exit 0
fi
# The cluster tier's engines: only when asked (CI's tiers need none of them; a missing one fails its test by name).
[ "${1:-}" = "--cluster" ] || exit 0
for t in "${TOOLS[@]}"; do build_tool "$t"; done
# Argo's controller. (Its executor, cmd/argoexec, needs a symlink the module zip drops restored: argoexec_build.)
build_argo_cmd "$CONTROLLER_ARGO" workflow-controller long_build
build_ray_operator
if [ "${1:-}" = "--cluster" ]; then build_node; fi
