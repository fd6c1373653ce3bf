# shellcheck shell=bash
# The environment of every run on this machine (sourced by scripts/run_local.sh, build_dataset.sh, try_promotion.sh
# after set-up), so that the embedded run, the dataset build and the serving trial run alike.
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false
# OpenMP threads spin at barriers by default: torch's in train and convert-gguf, and llama.cpp's in the teacher,
# convert-gguf's parity checks and evaluate (ggml is built with OpenMP). That is fastest on cores a step has to itself
# (the cluster's pods request whole CPUs, and keep the default), but beside any other busy process a spinning thread
# holds a core the others wait for. This machine is a desktop, a laptop or a shared box, so the runs here let waiting
# threads sleep, PASSIVE. Measured on this 2-core machine shared with other work (load average 7-14): the teacher's
# GGUF answering 4 eval documents took 383 s and 383 s with the default, 122 s and 49 s with PASSIVE (4.5x, median of
# 2: python -m benchmarks.wait_policy --neighbours 0); 6 tiny-model training steps 26.5 s vs 2.8 s beside one niced
# process (steps/train/launchers.py). On an idle machine PASSIVE costs 10-25 % of a training step (the same place):
# `OMP_WAIT_POLICY=ACTIVE scripts/run_local.sh` takes the spinning default back on a machine that is the run's alone.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
