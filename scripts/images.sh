#!/usr/bin/env bash
# Build the step images from the shipped images/*.Dockerfile, daemonless (buildah, no Docker daemon, no Docker Hub),
# on a Python base made from Debian's archive, cache each by the hash of its inputs, and export it as an OCI archive.
#
#   scripts/images.sh [KIND ...]        build (default: cpu ray); KIND is base, cpu, ray or cuda; cached kinds build
#                                       nothing; prints each one's build time (cold, or the cache hit) and size
#   scripts/images.sh --dir             the folder the archives are written to, and stop
#   scripts/images.sh --path KIND       the OCI archive KIND's current inputs give (built or not), and stop
#   scripts/images.sh --ref KIND        its reference in the local containers-storage (podman/buildah), and stop
#   scripts/images.sh --run-flags       the `podman run` flags this machine needs (see RUN_FLAGS), and stop
#
# Where they land ($DISTILLERY_CACHE, default ~/.cache/distillery):
#   images/<kind>-<hash>.tar      OCI archive of localhost/distillery-<kind>:<version>; import it into a node's
#                                 containerd with `ctr -n k8s.io images import images/<kind>-<hash>.tar`
#   images/<kind>-<hash>.digest   its manifest digest (sha256:…), which that import keeps
#   images/<kind>-<hash>.build    how long the cold build took and the image's size
#   images/images.env             DISTILLERY_IMAGE_REGISTRY/TAG/DIGEST_<KIND> of the last built set: workflows/images.py
#                                 from_env() reads them, so the rendered templates pin exactly these images
# and in the local containers-storage as localhost/distillery-<kind>:<hash> (podman run, the cluster tests).
# tests/step_images.py asks this script (--dir, --path, --ref) for all of these; nothing else derives them.
#
# The inputs hashed per image: the Dockerfile's instructions (not its comments), every file it COPYs from the repository (.dockerignore applied), the
# build arguments, the base image's own hash and the builder's version. Debian's archive and PyPI are not inputs: a
# cached image keeps the packages it was built with until an input changes (delete the archive to rebuild).
#
# What differs from `docker buildx bake` with internet (docker-bake.hcl), and why:
# - PYTHON_IMAGE: the Dockerfiles' base is python:3.11.11-slim-bookworm from Docker Hub, unreachable here. The base is
#   Debian bookworm (the release that image is built on) from Debian's archive by mmdebstrap, with Debian's Python 3.11,
#   venv, pip and `python` (python-is-python3); its pip installs system-wide into /usr/local like that image's
#   (Debian's EXTERNALLY-MANAGED marker, absent there, is removed). Python itself lives in /usr/bin, not /usr/local/bin.
# - torch: PyTorch's CPU index is unreachable, so TORCH_INDEX_URL=https://pypi.org/simple TORCH_BUILD=cuda (the
#   Dockerfiles' arguments): PyPI's CUDA build with its CUDA libraries from the cuda image's hashed lock, GBs larger;
#   the image's torch check then wants that build. A user's build keeps the CPU index and the CPU check.
# - llama.cpp (cpu image): the Dockerfile keeps install_llama_cpp.sh's cache on a build cache mount (id distillery);
#   here that mount is the local set-up's own cache ($DISTILLERY_CACHE), so a wheel compiled for the same version,
#   machine, flags and compiler (the script's key) is reused instead of compiled again, in either direction.
# - RUN_FLAGS: this machine's containers may not raise their limits (no CAP_SYS_RESOURCE), and podman and buildah
#   otherwise ask runc for a higher nofile/nproc than the sandbox allows; cgroups are v1, so runc, not crun.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${DISTILLERY_CACHE:-$HOME/.cache/distillery}"
OUT="$CACHE/images"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
CA_BUNDLE="${DISTILLERY_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
RUN_FLAGS=(--runtime runc --ulimit nofile=16384:16384 --ulimit nproc=16384:16384)
# Debian's release under python:3.11.11-slim-bookworm, and its mirrors as that image lists them.
SUITE=bookworm
MIRRORS=(
  "deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main"
)
BASE_PACKAGES=ca-certificates,python3.11,python3.11-venv,python3-pip,python-is-python3
# The build arguments that make these images build here (see above); part of each image's hash.
BUILD_ARGS=(TORCH_INDEX_URL=https://pypi.org/simple TORCH_BUILD=cuda)
if [ -n "${DISTILLERY_GIT_SHA:-}" ]; then
  BUILD_ARGS+=("GIT_SHA=$DISTILLERY_GIT_SHA")
fi

need() {
  local missing=()
  for tool in "$@"; do
    command -v "$tool" > /dev/null || missing+=("$tool")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "images.sh: ${missing[*]} not installed: apt-get install -y mmdebstrap buildah podman skopeo runc" >&2
    exit 2
  fi
}

base_hash() {
  printf '%s\n' "$SUITE" "${MIRRORS[@]}" "$BASE_PACKAGES" "$(declare -f build_base)" | sha256sum | cut -c1-16
}

base_ref() {
  echo "localhost/distillery-base:$SUITE-py311-$(base_hash)"
}

# The files a Dockerfile COPYs from the repository (not from another stage), as buildah sees them: directories
# expanded, .dockerignore's patterns (__pycache__, *.pyc) left out.
copied_files() {
  local dockerfile=$1
  sed -n 's/^COPY \+//p' "$dockerfile" | grep -v -- '^--from' | while read -r -a words; do
    unset 'words[${#words[@]}-1]'
    for source in "${words[@]}"; do
      find "$source" -type f ! -path '*/__pycache__/*' ! -name '*.pyc'
    done
  done | LC_ALL=C sort -u
}

image_hash() {
  local kind=$1 dockerfile="images/$1.Dockerfile"
  {
    echo "dockerfile $(grep -v '^[[:space:]]*\(#\|$\)' "$dockerfile" | sha256sum)"  # comments build nothing
    copied_files "$dockerfile" | while read -r file; do echo "file $file $(sha256sum < "$file")"; done
    printf 'arg %s\n' "${BUILD_ARGS[@]}"
    echo "base $(base_ref)"
    echo "dockerignore $(sha256sum < .dockerignore)"
    echo "builder $(buildah --version)"
  } | sha256sum | cut -c1-16
}

ref() {
  case "$1" in
    base) base_ref ;;
    cpu | ray | cuda)
      local known="HASH_$1"  # computed once per run by main (hashing every input takes seconds)
      echo "localhost/distillery-$1:${!known:-$(image_hash "$1")}" ;;
    *) echo "images.sh: unknown image kind '$1': base, cpu, ray or cuda" >&2; exit 2 ;;
  esac
}

archive() {
  local r
  r="$(ref "$1")"
  echo "$OUT/$1-${r##*:}.tar"
}

build_base() {
  local tar="$1"
  # minbase with apt (the Dockerfiles apt-get install their own tools), no recommends, no docs or locales (as -slim);
  # Debian's PEP 668 marker removed so pip installs system-wide as in python:3.11-slim, apt's lists dropped.
  nice -n 15 mmdebstrap --variant=minbase --mode=root --format=tar \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --include="$BASE_PACKAGES" \
    --customize-hook='rm -f "$1"/usr/lib/python3.11/EXTERNALLY-MANAGED' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$SUITE" "$tar" "${MIRRORS[@]}"
}

size_of() {
  podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.2f GB", $1 / 1e9}'
}

build() {
  local kind=$1 r start
  r="$(ref "$kind")"
  if [ "$kind" != base ] && [ -f "$(archive "$kind")" ] && podman image exists "$r"; then
    echo "$kind: cached, nothing built ($r; $(size_of "$r"); cold build: $(head -n 1 "$(archive "$kind" | sed 's/\.tar$/.build/')"))"
    return
  fi
  if [ "$kind" = base ] && podman image exists "$r"; then
    echo "base: cached, nothing built ($r; $(size_of "$r"))"
    return
  fi
  start=$(date +%s)
  if [ "$kind" = base ]; then
    local tmp
    tmp="$(mktemp -d "$OUT/base.XXXXXX")"
    build_base "$tmp/rootfs.tar" > "$tmp/mmdebstrap.log" 2>&1 || { tail -n 20 "$tmp/mmdebstrap.log" >&2; exit 1; }
    # What python:3.11-slim sets besides the filesystem.
    podman import --quiet --change 'ENV LANG=C.UTF-8' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["python3"]' "$tmp/rootfs.tar" "$r" > /dev/null
    rm -rf "$tmp"
    echo "base: built in $(( $(date +%s) - start )) s ($r; $(size_of "$r"))"
    return
  fi
  build base > /dev/null
  # The cpu image's llama.cpp cache mount (id distillery) is the local set-up's cache: buildah keeps cache mounts
  # under $TMPDIR/buildah-cache-<uid>/<id> (buildah-cache/<id> before 1.27), so link those to it.
  local tmpdir="$OUT/buildah-tmp"
  mkdir -p "$tmpdir/buildah-cache-$(id -u)" "$tmpdir/buildah-cache"
  ln -sfn "$CACHE" "$tmpdir/buildah-cache-$(id -u)/distillery"
  ln -sfn "$CACHE" "$tmpdir/buildah-cache/distillery"
  local args=()
  for a in "PYTHON_IMAGE=$(base_ref)" "${BUILD_ARGS[@]}"; do args+=(--build-arg "$a"); done
  echo "$kind: building $r (images/$kind.Dockerfile; log $OUT/$kind.log)" >&2
  # --format docker: SHELL (bash with pipefail, which every RUN of the Dockerfiles relies on) is a Docker-format
  # setting; buildah's default OCI format drops it and runs /bin/sh. The archive is OCI all the same (skopeo converts).
  # The RUN steps trust what this machine trusts (here an egress proxy's CA, which pip needs to reach PyPI): the
  # host's bundle is mounted over the base's for the build only; nothing of it is committed to a layer.
  if ! TMPDIR="$tmpdir" nice -n 15 buildah bud --format docker --layers --pull=never "${RUN_FLAGS[@]}" "${args[@]}" \
      --volume "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro" \
      --label "org.opencontainers.image.version=$VERSION" -f "images/$kind.Dockerfile" -t "$r" . > "$OUT/$kind.log" 2>&1
  then
    tail -n 30 "$OUT/$kind.log" >&2
    echo "$kind: build failed after $(( $(date +%s) - start )) s; full log $OUT/$kind.log" >&2
    exit 1
  fi
  local built=$(( $(date +%s) - start ))
  # The archive names the image as the workflows render it (registry localhost, the project version), in the OCI
  # annotation and in containerd's own (io.containerd.image.name, which `ctr images import` takes as the name as it
  # is); the digest file pins it.
  local tar layout name="localhost/distillery-$kind:$VERSION"
  tar="$(archive "$kind")"
  layout="$tar.layout"
  rm -rf "$layout" "$tar.tmp"
  # Layers stay uncompressed: gzip of GBs took minutes per 100 MB on this shared machine, and a local import gains
  # nothing from it (OCI allows plain tar layers; containerd imports them).
  nice -n 15 skopeo copy --quiet --dest-oci-accept-uncompressed-layers "containers-storage:$r" "oci:$layout:$name"
  python3 - "$layout/index.json" "$name" "${tar%.tar}.digest" <<'EOF'
import json, sys
path, name, digest = sys.argv[1:]
index = json.load(open(path))
(manifest,) = index["manifests"]
manifest["annotations"]["io.containerd.image.name"] = name
json.dump(index, open(path, "w"))
open(digest, "w").write(manifest["digest"] + "\n")
EOF
  # --remove-files: each blob leaves the layout as it enters the archive, so the disk holds one copy, not two.
  tar --remove-files -C "$layout" -cf "$tar.tmp" oci-layout index.json blobs
  rm -rf "$layout"
  mv "$tar.tmp" "$tar"
  local total=$(( $(date +%s) - start ))
  printf '%s\n' "built in $built s, exported in $(( total - built )) s; image $(size_of "$r"), archive $(du -h "$tar" | cut -f1)" \
    > "${tar%.tar}.build"
  echo "$kind: $(cat "${tar%.tar}.build") ($r)"
}

write_env() {
  local env="$OUT/images.env" kind
  {
    echo "# scripts/images.sh: the images last built here; source it before python -m workflows.render"
    echo "DISTILLERY_IMAGE_REGISTRY=localhost"
    echo "DISTILLERY_IMAGE_TAG=$VERSION"
    for kind in cpu ray cuda; do
      if [ -f "$(archive "$kind" | sed 's/\.tar$/.digest/')" ]; then
        echo "DISTILLERY_IMAGE_DIGEST_${kind^^}=$(cat "$(archive "$kind" | sed 's/\.tar$/.digest/')")"
      fi
    done
  } > "$env"
}

# The whole command in one function, parsed before it runs: editing this file while a build runs cannot change it.
main() {
  case "${1:-}" in
    --dir) echo "$OUT"; exit 0 ;;
    --path) need buildah; archive "${2:?--path KIND}"; exit 0 ;;
    --ref) need buildah; ref "${2:?--ref KIND}"; exit 0 ;;
    --run-flags) printf '%s\n' "${RUN_FLAGS[@]}"; exit 0 ;;
  esac
  need mmdebstrap buildah podman skopeo runc
  mkdir -p "$OUT"
  local kind
  for kind in cpu ray cuda; do
    declare -g "HASH_$kind=$(image_hash "$kind")"
  done
  kinds=("$@")
  [ "${#kinds[@]}" -gt 0 ] || kinds=(cpu ray)
  for kind in "${kinds[@]}"; do
    ref "$kind" > /dev/null
  done
  for kind in "${kinds[@]}"; do
    start=$(date +%s)
    build "$kind"
    echo "$kind: $(( $(date +%s) - start )) s this run" >&2
  done
  write_env
}

main "$@"
exit
