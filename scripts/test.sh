#!/usr/bin/env bash
# Every test this machine can run: set-up (with the dev tools, the scanners in .venv-scan, and the engines the tests
# run: scripts/engines.sh), lint, rendered files up to date, then pytest with the unit and integration tiers (GPU
# tests skip themselves without CUDA). CI runs this.
#
#   scripts/test.sh [extra pytest args]          # everything: the unit and integration tiers (CI, .ci/run)
#   scripts/test.sh --fast [extra pytest args]   # the inner loop: the same set-up, lint and render checks, then the
#                                                # unit tier only (what `pytest` alone runs): minutes, no training
#   scripts/test.sh --cluster [extra pytest args]  # the real node's tests (-m cluster, tests/node.py; as root): also
#                                                # builds the node's binaries (scripts/engines.sh --cluster); hours cold
set -euo pipefail
cd "$(dirname "$0")/.."
tier=(-m "not gpu and not cluster" --durations=25)  # the 25 slowest: pytest must stay under 30 minutes on 2 cores
cluster=""
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not integration and not gpu and not cluster" --durations=10)
elif [ "${1:-}" = "--cluster" ]; then
  shift
  tier=(-m cluster --durations=10)
  cluster=1
fi
scripts/setup.sh --dev
if [ -n "$cluster" ]; then scripts/engines.sh --cluster; fi
# shellcheck disable=SC1091
. .venv/bin/activate
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false
ruff check .
ruff format --check .
python -m workflows.render --check
python scripts/render_iam.py --check  # the cross-account grant's JSON, from infra/iam/settings.yaml
python -m pytest "${tier[@]}" "$@"
