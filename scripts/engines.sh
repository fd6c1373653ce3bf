#!/usr/bin/env bash
# Build the engines the tests run, from their own Go modules, into a cache keyed by version (seconds when present).
#
#   scripts/engines.sh            # argo CLI + the harness (engines/harness/), into $DISTILLERY_ENGINES
#   scripts/engines.sh --print    # the folder only (what the tests read)
#
# The folder: ${DISTILLERY_ENGINES:-~/.cache/distillery/engines}/<name>-<version>/<binary>. The Go module cache
# (~/go/pkg/mod) keeps the sources; a second machine run of this script finds the binaries and builds nothing.
#
# Argo's CLI: `go install github.com/argoproj/argo-workflows/v4/cmd/argo@VERSION` cannot build from the module zip:
# ui/embed.go embeds ui/dist/app, which the zip omits (Argo's Makefile touches a placeholder there before building).
# So the module is fetched with `go mod download`, copied to a scratch folder, given the same placeholder and built
# there with its own go.mod and go.sum (replace directives included, so v3 builds the same way).
set -euo pipefail
cd "$(dirname "$0")/.."
# Argo v4.1.2 is the version the issue named; the module proxy here refuses it (403 "This module version is not
# available"), and v4.0.5 is the newest v4 it serves. v3.7.18 is the newest v3 the README's ">= v3.6.0" covers.
ARGO_VERSIONS=(v4.0.5 v3.7.18)
root="${DISTILLERY_ENGINES:-$HOME/.cache/distillery/engines}"
if [ "${1:-}" = "--print" ]; then
  echo "$root"
  exit 0
fi
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
# Heavy on 2 cores (argo: minutes of compile): one build at a time on a shared machine, at low priority.
heavy() { flock /tmp/distillery-heavy.lock nice -n 10 "$@"; }

build_argo() {
  local version="$1" major dest mod dir scratch
  major="${version%%.*}"
  dest="$root/argo-$version"
  [ -x "$dest/argo" ] && return 0
  mod="github.com/argoproj/argo-workflows/$major"
  dir="$(go mod download -json "$mod@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' RETURN
  cp -r "$dir/." "$scratch/"
  chmod -R u+w "$scratch"
  mkdir -p "$scratch/ui/dist/app" && touch "$scratch/ui/dist/app/placeholder"
  mkdir -p "$dest"
  echo "engines: building argo $version (minutes, once)" >&2
  (cd "$scratch" && heavy go build -trimpath -ldflags "-X $mod.version=$version" -o "$dest/argo.tmp" ./cmd/argo)
  mv "$dest/argo.tmp" "$dest/argo"
}

build_harness() {
  local key dest
  key="$(cat engines/harness/go.mod engines/harness/go.sum engines/harness/*.go | sha256sum | cut -c1-16)"
  dest="$root/harness-$key"
  [ -x "$dest/harness" ] && return 0
  mkdir -p "$dest"
  echo "engines: building the harness (engines/harness/)" >&2
  (cd engines/harness && heavy go build -trimpath -o "$dest/harness.tmp" .)
  mv "$dest/harness.tmp" "$dest/harness"
}

for v in "${ARGO_ONLY:-${ARGO_VERSIONS[@]}}"; do build_argo "$v"; done
[ -f engines/harness/go.mod ] && build_harness
