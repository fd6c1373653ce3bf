#!/usr/bin/env bash
# Every test this machine can run: set-up (with the dev tools, the scanners in .venv-scan, and the engines the tests
# run: scripts/engines.sh), lint, rendered files up to date, then pytest with the unit and integration tiers (GPU
# tests skip themselves without CUDA). CI runs this.
#
#   scripts/test.sh [extra pytest args]          # everything: the unit and integration tiers (CI, .ci/run)
#   scripts/test.sh --fast [extra pytest args]   # the inner loop: the same set-up, lint and render checks, then the
#                                                # unit tier only (what `pytest` alone runs): minutes, no training
set -euo pipefail
cd "$(dirname "$0")/.."
tier=(-m "not gpu and not cluster" --durations=25)  # the 25 slowest: the suite must stay under 30 minutes of pytest on 2 cores
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not integration and not gpu" --durations=10)
fi
scripts/setup.sh --dev
# shellcheck disable=SC1091
. .venv/bin/activate
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false
ruff check .
ruff format --check .
python -m workflows.render --check
python scripts/render_iam.py --check  # the cross-account grant's JSON, from infra/iam/settings.yaml
python -m pytest "${tier[@]}" "$@"
