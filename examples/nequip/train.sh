#!/bin/sh
# One attempt of a NequIP training job under ddprun (or torchrun): runs
# nequip-train on tiny.yaml (or the config given with -cn), and resumes from
# the job's last checkpoint when an earlier attempt left one.
#
#   RUN_DIR=runs/cu ddprun --nproc_per_node=2 --max_restarts=3 examples/nequip/train.sh [OVERRIDES...]
#
# RUN_DIR (default ./outputs/nequip-tiny) holds checkpoints/ (shared by all
# attempts: last.ckpt is the newest epoch) and attempt_<N>/ per attempt
# (TORCHELASTIC_RESTART_COUNT; Hydra's logs and csv/metrics.csv), so that a
# resumed attempt never overwrites the metrics of the one before it.
# nequip-train must be on PATH (the environment NequIP is installed in).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
run=${RUN_DIR:-$PWD/outputs/nequip-tiny}
case $run in /*) ;; *) run=$PWD/$run ;; esac
attempt=${TORCHELASTIC_RESTART_COUNT:-0}
last=$run/checkpoints/last.ckpt
resume=
# Every rank of an attempt starts after the previous attempt stopped, so all
# ranks see the same file here.
if [ -f "$last" ]; then resume="++ckpt_path=$last"; fi
# The caller's options and overrides first (options before overrides, as
# nequip-train's argparse wants them), then these overrides.
exec nequip-train -cp "$here" -cn tiny "$@" "hydra.run.dir=$run/attempt_$attempt" \
  "ckpt_dir=$run/checkpoints" ${resume:+"$resume"}
