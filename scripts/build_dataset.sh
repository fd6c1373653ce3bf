#!/usr/bin/env bash
# Build and publish a dataset from your own folders of documents, on this machine: set-up, then build-dataset's
# stages in order (scripts/build_dataset.py says how), then how to train on the revision it published.
#
#   scripts/build_dataset.sh ~/papers                                   # PDF, text, Markdown, HTML, searched deeply
#   scripts/build_dataset.sh ~/papers ~/notes -S feedback=feedback.jsonl -S min-eval-documents=2
#
# Nothing tracked is edited: values come from build-dataset/params.yaml and the -S given; outputs land in out/.
# Folders and the paths in -S values are taken from where the command runs (--cwd), checked before anything runs.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."
scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# shellcheck source=scripts/local_env.sh
. scripts/local_env.sh   # telemetry off, OMP_WAIT_POLICY=PASSIVE unless set: why, there
exec python scripts/build_dataset.py --cwd "$here" "$@"
