#!/usr/bin/env bash
# Build and publish a dataset from your own folders of documents, on this machine: set-up, then build-dataset's
# stages in order (scripts/build_dataset.py says how), then how to train on the revision it published.
#
#   scripts/build_dataset.sh ~/papers                                   # PDF, text, Markdown, HTML, searched deeply
#   scripts/build_dataset.sh ~/papers ~/notes -S feedback=feedback.jsonl -S min-eval-documents=2
#
# Nothing tracked is edited: values come from build-dataset/params.yaml and the -S given; outputs land in out/.
# Folders are taken from where the command runs; paths inside -S values, from the repository's root.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."
given=()
for arg in "$@"; do
  if [[ "$arg" != /* && "$arg" != -* ]] && [ -d "$here/$arg" ]; then given+=("$here/$arg"); else given+=("$arg"); fi
done
scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export DVC_NO_ANALYTICS=1 TOKENIZERS_PARALLELISM=false
exec python scripts/build_dataset.py "${given[@]}"
