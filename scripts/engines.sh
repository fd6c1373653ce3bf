#!/usr/bin/env bash
# Build the engines the tests run, from their own Go modules, into a cache keyed by version (seconds when present).
#
#   scripts/engines.sh               # engines/harness/ and engines/podsecurity/, then argo's CLI (each ARGO_VERSIONS)
#   scripts/engines.sh --path NAME   # where NAME (harness, podsecurity, argo-v4.0.5) is; builds nothing (tests/engines.py)
#   scripts/engines.sh --argo-versions   # the Argo releases built and linted with
#
# The folder: ${DISTILLERY_ENGINES:-~/.cache/distillery/engines}/<name>-<version>/<binary>. The Go module cache
# (~/go/pkg/mod) keeps the sources; a second machine run of this script finds the binaries and builds nothing.
#
# Argo's CLI: `go install github.com/argoproj/argo-workflows/v4/cmd/argo@VERSION` cannot build from the module zip:
# ui/embed.go embeds ui/dist/app, which the zip omits (Argo's Makefile touches a placeholder there before building).
# So the module is fetched with `go mod download`, copied to a scratch folder, given the same placeholder and built
# there with its own go.mod and go.sum (replace directives included, so v3 builds the same way).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
# Argo v4.1.2 is the version the issue named; the module proxy here refuses it (403 "This module version is not
# available"), and v4.0.5 is the newest v4 it serves. v3.7.18 (the newest v3, served) builds the same way, its
# go.mod's replace directive included, but has not been built and linted here yet: add it when it has.
ARGO_VERSIONS=(v4.0.5)
root="${DISTILLERY_ENGINES:-$HOME/.cache/distillery/engines}"
# The repository's own Go programs (engines/<name>/, each its own module), cached by the hash of their sources.
MODULES=(harness podsecurity)
module_key() { cat "engines/$1/go.mod" "engines/$1/go.sum" "engines/$1"/*.go | sha256sum | cut -c1-16; }
if [ "${1:-}" = "--argo-versions" ]; then
  echo "${ARGO_VERSIONS[*]}"
  exit 0
fi
if [ "${1:-}" = "--path" ]; then
  case "${2:-}" in
    harness | podsecurity) echo "$root/$2-$(module_key "$2")/$2" ;;
    argo-*) echo "$root/$2/argo" ;;
    *) echo "engines.sh --path: name one of ${MODULES[*]}, argo-<version> (${ARGO_VERSIONS[*]})" >&2; exit 2 ;;
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

build_argo() {
  local version="$1" major dest mod dir
  major="${version%%.*}"
  dest="$root/argo-$version"
  [ -x "$dest/argo" ] && return 0
  mod="github.com/argoproj/argo-workflows/$major"
  dir="$(go mod download -json "$mod@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  scratch="$(mktemp -d)"  # global: the EXIT trap removes it
  cp -r "$dir/." "$scratch/"
  chmod -R u+w "$scratch"
  mkdir -p "$scratch/ui/dist/app" && touch "$scratch/ui/dist/app/placeholder"
  mkdir -p "$dest"
  echo "engines: building argo $version (minutes, once)" >&2
  (cd "$scratch" && heavy go build -trimpath -ldflags "-X $mod.version=$version" -o "$dest/argo.tmp" ./cmd/argo)
  mv "$dest/argo.tmp" "$dest/argo"
  rm -rf "$scratch"
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

missing=()
for m in "${MODULES[@]}"; do [ -x "$("$self" --path "$m")" ] || missing+=("$m"); done
for v in "${ARGO_VERSIONS[@]}"; do [ -x "$("$self" --path "argo-$v")" ] || missing+=("argo-$v"); done
[ ${#missing[@]} -eq 0 ] && exit 0
# Heavy on 2 cores (each argo release: minutes of compile): the builds take the machine's heavy-job lock once, all
# together, and run at low priority.
if [ -z "${DISTILLERY_ENGINES_LOCKED:-}" ]; then
  echo "engines: to build: ${missing[*]} (waiting for /tmp/distillery-heavy.lock)" >&2
  DISTILLERY_ENGINES_LOCKED=1 exec flock /tmp/distillery-heavy.lock "$self" "$@"
fi
for m in "${MODULES[@]}"; do build_module "$m"; done
for v in "${ARGO_VERSIONS[@]}"; do build_argo "$v"; done
