#!/usr/bin/env bash
# The serving loop on this machine — serve, outcomes, online metrics, promote, rollback — on a copy of the local
# registry, with a simulated week; your registry is not touched (scripts/try_promotion.py says how, step by step).
#
#   scripts/run_local.sh          # once: it registers a version in .cache/mlflow
#   scripts/try_promotion.sh      # then this; --requests N, --keep: scripts/try_promotion.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# shellcheck source=scripts/local_env.sh
. scripts/local_env.sh   # telemetry off, OMP_WAIT_POLICY=PASSIVE unless set: why, there
exec python scripts/try_promotion.py "$@"
