#!/usr/bin/env bash
# The training runs behind docs/sparse.md, "Training with sparse gradients": dense, CSC and
# top-k at 85 %, 90 % and 99 % sparsity, 4 and 8 thread ranks, default network and data, and
# a few seeds of dense and CSC at 85 % to show the run-to-run spread. One JSON file per run
# (train_mnist --json) in OUT_DIR; plot them with examples/train/plot_sparse.py.
# Every run uses the ring allreduce, so the bytes follow one closed form (2 (P-1)/P n b per
# allreduce): `automatic` picks recursive doubling (log2 P n b) for CSC's smaller buffers, and
# 90 % sparsity would then send more bytes than 85 %.
#
#   bash examples/train/sparse_runs.sh [BUILD_DIR] [OUT_DIR] [EPOCHS]
#
# Defaults: build, docs/results/train_sparse, 10 epochs. Run from the repository root
# after `ninja -C BUILD_DIR examples/train_mnist`. About 15 minutes on 2 shared cores (top-k's
# per-rank selection over 535,818 elements dominates).
set -euo pipefail
build=${1:-build}
out=${2:-docs/results/train_sparse}
epochs=${3:-10}
exe="$build/examples/train_mnist"
[ -x "$exe" ] || { echo "sparse_runs: $exe not built (ninja -C $build examples/train_mnist)" >&2; exit 1; }
mkdir -p "$out"

run() { # NAME ARGS...
  local name=$1
  shift
  echo "== $name: $*"
  "$exe" --epochs "$epochs" --algo ring --json "$out/$name.json" "$@" | tail -n 3
}

for ranks in 4 8; do
  run "dense_p${ranks}" --ranks "$ranks"
  for density in 0.15 0.10 0.01; do
    run "csc_d${density}_p${ranks}" --ranks "$ranks" --scheme csc --density "$density"
    run "topk_d${density}_p${ranks}" --ranks "$ranks" --scheme topk --density "$density"
  done
done
# The other residual rule at 85 % and 99 % sparsity (4 ranks).
for density in 0.15 0.01; do
  run "csc_d${density}_p4_error_feedback" --ranks 4 --scheme csc --density "$density" --residual error_feedback
  run "topk_d${density}_p4_error_feedback" --ranks 4 --scheme topk --density "$density" --residual error_feedback
done
# DGC's momentum correction and masking (top-k only) at 85 % and 99 % sparsity (4 ranks).
for density in 0.15 0.01; do
  run "topk_d${density}_p4_dgc" --ranks 4 --scheme dgc --density "$density"
done
# Seed spread of the goal comparison (seed 1 is above).
for seed in 2 3 4 5; do
  run "dense_p4_seed${seed}" --ranks 4 --seed "$seed"
  run "csc_d0.15_p4_seed${seed}" --ranks 4 --scheme csc --density 0.15 --seed "$seed"
done
