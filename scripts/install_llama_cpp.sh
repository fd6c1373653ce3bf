#!/usr/bin/env bash
# Install llama-cpp-python (the runtime) and extract llama.cpp's own HF→GGUF converter from the same release.
#
#   scripts/install_llama_cpp.sh [CONVERTER_DIR]        (default: .cache/llama.cpp)
#
# Why this way: PyPI ships llama-cpp-python only as source, and its default build targets the build machine's exact
# CPU (on AMX CPUs every quantised model then segfaults), so it is built portable (GGML_NATIVE=OFF). The converter is
# not in any package; the llama-cpp-python sdist carries it under vendor/llama.cpp, from the very llama.cpp commit the
# runtime is built from, so converter and runtime always agree. Nothing of llama.cpp is committed to this repo.
# The sdist and the built wheel are cached in $DISTILLERY_CACHE (default ~/.cache/distillery): later installs take
# seconds; a fresh machine builds once (~7 min on 2 cores).
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
DEST="${1:-.cache/llama.cpp}"
CACHE="${DISTILLERY_CACHE:-$HOME/.cache/distillery}"
PYTHON="${PYTHON:-python}"
SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
ARCH="$(uname -m)"

mkdir -p "$CACHE/sdist" "$CACHE/wheels"
if [ ! -f "$SDIST" ]; then
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$CACHE/sdist" "llama-cpp-python==$VERSION"
fi

wheel="$(ls "$CACHE"/wheels/llama_cpp_python-"$VERSION"-*"$ARCH"*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python $VERSION (portable, GGML_NATIVE=OFF); ~7 min on 2 cores, cached afterwards" >&2
  CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$PYTHON" -m pip wheel --quiet --no-deps -w "$CACHE/wheels" "$SDIST"
  wheel="$(ls "$CACHE"/wheels/llama_cpp_python-"$VERSION"-*"$ARCH"*.whl | head -n 1)"
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
