#!/usr/bin/env bash
# The whole pipeline on this machine, no cluster: set-up, then `dvc repro` over dvc.yaml (rendered from
# steps/pipeline.py, the same definition the Argo WorkflowTemplate is built from), then what happened.
#
#   scripts/run_local.sh                          # dvc repro with params.yaml
#   scripts/run_local.sh -S train-backend=ray     # dvc exp run -S …: here, train on a local Ray cluster (2 workers)
#
# A second run with nothing changed skips every finished stage. Parameters: params.yaml (same names as the
# WorkflowTemplate's). Arguments go to `dvc exp run`, which writes the -S values into params.yaml
# (`git checkout params.yaml` to go back).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# shellcheck source=scripts/local_env.sh
. scripts/local_env.sh   # telemetry off, OMP_WAIT_POLICY=PASSIVE unless set: why, there
mkdir -p .cache/mlflow
# Every stage's settings (params.yaml and the -S given) by the stages' own rules, before any stage runs.
python -m steps.check_parameters --local params.yaml "$@"
start=$(date +%s)
if [ $# -gt 0 ]; then dvc exp run "$@"; else dvc repro; fi
echo "pipeline finished in $(( $(date +%s) - start ))s"
python scripts/show_run.py
