#!/usr/bin/env bash
# The training runs behind docs/elastic.md: synchronous SGD over 8 thread ranks against
# EASGD with 2 and 4 clients over the same 8 training ranks (plus one server rank), every
# client's ranks on one emulated node (shared memory inside, free) and 1 Gbit/s, 20 us
# between nodes (tcoll::shaped). Synchronous SGD runs on 2 emulated nodes of 4 ranks.
# Same global batch (64 samples per step over all training ranks), learning rate, momentum
# and seed everywhere; INTERVAL 64 (MXNET-MPI Sec. 8), alpha = 0.9 / clients (the default).
# Also the synchronous elastic variant (--elastic-mode sync: no server, the 2 client leaders
# allreduce their parameters as the center) with 2 clients of 4 ranks on 8 ranks.
#
#   bash examples/train/elastic_runs.sh [BUILD_DIR] [OUT_DIR] [EPOCHS] [SEEDS]
#
# Defaults: build, docs/results/elastic, 10 epochs, seed 1. One JSON per run.
set -euo pipefail
build=${1:-build}
out=${2:-docs/results/elastic}
epochs=${3:-10}
seeds=${4:-1}
exe="$build/examples/train_mnist"
[ -x "$exe" ] || { echo "elastic_runs: $exe not built" >&2; exit 1; }
mkdir -p "$out"
link=(--link-gbit 1 --link-latency-us 20)
for seed in $seeds; do
  echo "== sync SGD, 8 ranks (2 nodes of 4), seed $seed"
  "$exe" --ranks 8 --node-ranks 4 "${link[@]}" --epochs "$epochs" --seed "$seed" \
    --json "$out/sync8_s$seed.json" | grep -E "^epoch" | tail -n 2
  for clients in 2 4; do
    echo "== easgd, $clients clients of $((8 / clients)) ranks + server, seed $seed"
    "$exe" --ranks 9 --scheme easgd --clients "$clients" --interval 64 "${link[@]}" \
      --epochs "$epochs" --seed "$seed" --json "$out/easgd${clients}_s$seed.json" |
      grep -E "server|epoch $epochs "
  done
  echo "== easgd sync, 2 clients of 4 ranks, no server, seed $seed"
  "$exe" --ranks 8 --scheme easgd --elastic-mode sync --clients 2 --interval 64 "${link[@]}" \
    --epochs "$epochs" --seed "$seed" --json "$out/easgdsync2_s$seed.json" |
    grep -E "epoch $epochs "
done
