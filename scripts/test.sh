#!/usr/bin/env bash
# Every test this machine can run, in three tiers: set-up (with the dev tools, the scanners in .venv-scan, and the
# engines the tier runs: scripts/engines.sh), lint, rendered files up to date, then pytest (GPU tests skip themselves
# without CUDA). CI runs the first form (.ci/run); it prints how long set-up and pytest took.
#
#   scripts/test.sh [extra pytest args]            # the unit and integration tiers (CI, .ci/run): ~35 min warm,
#                                                  # inside CI's 90 on a cold machine (docs/development.md)
#   scripts/test.sh --fast [extra pytest args]     # the inner loop: the same set-up, lint and render checks, then the
#                                                  # unit tier only (what `pytest` alone runs): minutes, no training
#   scripts/test.sh --cluster [extra pytest args]  # the cluster tier (pytest -m cluster): the control plane and what
#                                                  # runs on it, built first by `scripts/engines.sh --cluster` (about
#                                                  # an hour more cold on 2 cores, so CI leaves it out); run it on every
#                                                  # change to workflows/, infra/ or images/ (docs/engines.md)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
tier=(-m "not gpu and not cluster" --durations=25)  # the 25 slowest: pytest must stay under 30 minutes on 2 cores
cluster=""
case "${1:-}" in
  --fast)
    shift
    tier=(-m "not integration and not gpu and not cluster" --durations=10)
    ;;
  --cluster)
    shift
    tier=(-m cluster --durations=25)
    cluster=1
    ;;
esac
scripts/setup.sh --dev
[ -z "$cluster" ] || scripts/engines.sh --cluster
# shellcheck disable=SC1091
. .venv/bin/activate
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false
ruff check .
ruff format --check .
python -m workflows.render --check
python scripts/render_iam.py --check  # the cross-account grant's JSON, from infra/iam/settings.yaml
setup_s=$((SECONDS - start))
status=0
python -m pytest "${tier[@]}" "$@" || status=$?
echo "test.sh: set-up and checks $((setup_s / 60)) min $((setup_s % 60)) s, pytest $(((SECONDS - start - setup_s) / 60)) min" \
  "$(((SECONDS - start - setup_s) % 60)) s, total $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s" >&2
exit $status
