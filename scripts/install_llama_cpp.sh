#!/usr/bin/env bash
# Install llama-cpp-python (the runtime) and extract llama.cpp's own HF→GGUF converter from the same release.
#
#   scripts/install_llama_cpp.sh [CONVERTER_DIR]        (default: .cache/llama.cpp)
#   LLAMA_CPU_SET=avx512 scripts/install_llama_cpp.sh   (x86_64 nodes that all have AVX-512 VNNI/BF16)
#   scripts/install_llama_cpp.sh --wheel-dir            (print where the wheel for these flags is cached, and stop)
#
# Why this way: PyPI ships llama-cpp-python only as source, and its default build targets the build machine's exact
# CPU (on AMX CPUs every quantised model then segfaults in ggml_backend_amx_mul_mat), so it is built for a named
# instruction set instead (LLAMA_CPU_SET):
#   portable (default)  GGML_NATIVE=OFF: on x86_64 SSE4.2, AVX, AVX2, FMA, F16C, BMI2 — every x86 node of the last ten
#                       years; on aarch64 plain ARMv8-A NEON (Raspberry Pi 4 and 5);
#   avx512              portable plus AVX-512F/VBMI/VNNI/BF16, AMX left off (the crash above): only for machines that
#                       all have them (Intel Ice Lake+/Sapphire Rapids, AMD Zen 4+); elsewhere it dies on an illegal
#                       instruction.
# llama.cpp's run-time CPU selection (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS) is not used: llama-cpp-python 0.3.36
# installs only the plain ggml-cpu library and never loads backends from its own lib folder (ggml searches the
# executable's folder and the working directory), and its Sapphire Rapids variant enables AMX again.
# The converter is not in any package; the llama-cpp-python sdist carries it under vendor/llama.cpp, from the very
# llama.cpp commit the runtime is built from, so converter and runtime always agree. Nothing of llama.cpp is committed
# to this repo. The sdist and the built wheel are cached in $DISTILLERY_CACHE (default ~/.cache/distillery), the wheel
# under a key of everything that shapes it (version, machine, CMake flags, compiler): later installs take seconds, a
# changed flag builds anew (~7 min on 2 cores) instead of reusing a wheel built otherwise.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
# The sdist's sha256, as PyPI lists it (https://pypi.org/simple/llama-cpp-python/): the one pin of what is compiled
# and where the converter comes from. Every use checks the file against it, a cached one too; another VERSION needs
# its own LLAMA_CPP_PYTHON_SHA256.
PINNED_VERSION=0.3.36
PINNED_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
if [ "$VERSION" = "$PINNED_VERSION" ]; then
  SHA256="${LLAMA_CPP_PYTHON_SHA256:-$PINNED_SHA256}"
else
  SHA256="${LLAMA_CPP_PYTHON_SHA256:-}"
fi
CACHE="${DISTILLERY_CACHE:-$HOME/.cache/distillery}"
PYTHON="${PYTHON:-python}"
SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
ARCH="$(uname -m)"
CPU_SET="${LLAMA_CPU_SET:-portable}"

case "$ARCH:$CPU_SET" in
  *:portable) flags="-DGGML_NATIVE=OFF" ;;
  x86_64:avx512)
    flags="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
    flags="$flags -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
  *)
    echo "LLAMA_CPU_SET=$CPU_SET is not a CPU set for $ARCH: use portable (any $ARCH machine) or, on x86_64 machines" \
      "that all have AVX-512, avx512" >&2
    exit 2 ;;
esac
flags="$flags${CMAKE_ARGS:+ $CMAKE_ARGS}"
key="$(printf '%s\n' "$VERSION" "$ARCH" "$flags" "$(${CC:-cc} --version 2>/dev/null | head -n 1)" | sha256sum | cut -c1-16)"
WHEELS="$CACHE/wheels/$key"
if [ "${1:-}" = "--wheel-dir" ]; then
  echo "$WHEELS"
  exit 0
fi
DEST="${1:-.cache/llama.cpp}"

mkdir -p "$CACHE/sdist" "$WHEELS"
if [ -z "$SHA256" ]; then
  echo "install_llama_cpp.sh: llama-cpp-python $VERSION has no pinned sha256: set LLAMA_CPP_PYTHON_SHA256 to the" \
    "sdist's digest from https://pypi.org/simple/llama-cpp-python/ (or use $PINNED_VERSION)" >&2
  exit 2
fi
if [ ! -f "$SDIST" ]; then
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$CACHE/sdist" "llama-cpp-python==$VERSION"
fi
if ! echo "$SHA256  $SDIST" | sha256sum --check --status; then
  echo "install_llama_cpp.sh: $SDIST does not match the pinned sha256 $SHA256 (got $(sha256sum "$SDIST" | cut -c1-64))." \
    "Nothing was built. Delete the file to download it again; if PyPI's file really changed, check why before" \
    "updating the pin." >&2
  exit 1
fi

wheel="$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*"$ARCH"*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python $VERSION ($CPU_SET: $flags); ~7 min on 2 cores, cached in $WHEELS" >&2
  start=$(date +%s)
  CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$PYTHON" -m pip wheel --quiet --no-deps -w "$WHEELS" "$SDIST"
  printf '%s\n' "version $VERSION" "machine $ARCH" "cpu set $CPU_SET" "CMAKE_ARGS $flags" \
    "compiler $(${CC:-cc} --version 2>/dev/null | head -n 1)" "built in $(( $(date +%s) - start )) s" > "$WHEELS/BUILD"
  wheel="$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*"$ARCH"*.whl | head -n 1)"
fi
"$PYTHON" -m pip install --quiet --no-deps "$wheel"

if [ ! -f "$DEST/VERSION" ] || [ "$(cat "$DEST/VERSION")" != "$VERSION" ]; then
  mkdir -p "$(dirname "$DEST")"
  tmp="$(mktemp -d "${DEST%/}.tmp-XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$SDIST" -C "$tmp" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/convert_hf_to_gguf.py" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/conversion" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/gguf-py" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/LICENSE"
  echo "$VERSION" > "$tmp/VERSION"
  rm -rf "$DEST"
  mv "$tmp" "$DEST"
  chmod 755 "$DEST"
  trap - EXIT
fi
# llama.cpp's own test vocabularies (a real Qwen2 tokenizer among them): the tests build a tiny Qwen2 from one, since
# no model hub can be reached here. From the same sdist, so they match this converter.
if [ ! -f "$DEST/models/ggml-vocab-qwen2.gguf" ]; then
  tmp="$(mktemp -d "${DEST%/}.vocab-XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$SDIST" -C "$tmp" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf.inp" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf.out"
  rm -rf "$DEST/models"
  mv "$tmp/models" "$DEST/models"
  rm -rf "$tmp"
  trap - EXIT
fi
echo "llama-cpp-python $VERSION installed; converter in $DEST" >&2
