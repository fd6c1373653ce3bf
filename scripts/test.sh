#!/usr/bin/env bash
# Every test this machine can run, in three tiers: set-up (with the dev tools, the scanners in .venv-scan, and the
# engines the tier runs: scripts/engines.sh), lint, rendered files up to date, then pytest (GPU tests skip themselves
# without CUDA). CI runs the first form (.ci/run); it prints how long set-up and pytest took.
#
#   scripts/test.sh [extra pytest args]            # the unit and integration tiers (CI, .ci/run): ~40 min warm,
#                                                  # inside CI's 90 on a cold machine (docs/development.md)
#   scripts/test.sh --fast [extra pytest args]     # the inner loop: the same set-up, lint and render checks, then the
#                                                  # unit tier only (what `pytest` alone runs): minutes, no training
#   scripts/test.sh --cluster [extra pytest args]  # the cluster tier (pytest -m cluster): the control plane, the
#                                                  # real node and both backends' distill on it, built first by
#                                                  # `scripts/engines.sh --cluster` and `scripts/images.sh cpu ray`
#                                                  # (95 min from a fresh clone with warm machine caches,
#                                                  # hours cold, ~50 GB of disk: docs/engines.md; root: CI leaves it out);
#                                                  # run it on every change to workflows/, infra/, images/ or steps/
#                                                  # (docs/engines.md)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
# The unit tier runs on every core (pytest-xdist, one test file per worker: a module's fixtures are built once); the
# integration tier one test at a time, as its llama.cpp and torch runs each use every core and time themselves.
unit=(-m "not integration and not gpu and not cluster" -n auto --dist loadfile --durations=10)
integration=(-m "integration and not gpu and not cluster" --durations=25)  # pytest stays under 30 min on 2 cores
runs=(unit integration)
cluster=""
case "${1:-}" in
  --fast)
    shift
    runs=(unit)
    ;;
  --cluster)
    shift
    integration=(-m cluster --durations=25)
    runs=(integration)
    cluster=1
    ;;
esac
scripts/setup.sh --dev
[ -z "$cluster" ] || { scripts/engines.sh --cluster && scripts/images.sh cpu ray; }
# shellcheck disable=SC1091
. .venv/bin/activate
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false
ruff check .
ruff format --check .
python -m workflows.render --check
python scripts/render_iam.py --check  # the cross-account grant's JSON, from infra/iam/settings.yaml
setup_s=$((SECONDS - start))
status=0
pytest_run() {
  local code=0
  python -m pytest "$@" || code=$?
  [ "$code" -eq 5 ] && code=0  # this run's marker selected none of the tests named
  [ "$code" -eq 0 ] || status=$code
}
for run in "${runs[@]}"; do
  if [ "$run" = unit ]; then pytest_run "${unit[@]}" "$@"; else pytest_run "${integration[@]}" "$@"; fi
done
echo "test.sh: set-up and checks $((setup_s / 60)) min $((setup_s % 60)) s, pytest $(((SECONDS - start - setup_s) / 60)) min" \
  "$(((SECONDS - start - setup_s) % 60)) s, total $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s" >&2
exit $status
