#!/usr/bin/env bash
# MXNET-MPI's own setup (Sec. 8) under MPI: two clients of six workers and a server, each
# started as its own mpirun and joined through an MPI port (--elastic-port, Open MPI's
# ompi-server), against the same 13 processes as one job split into groups, and synchronous
# SGD over the 12 workers as one job. INTERVAL 64, alpha = 0.9 / 2, global batch 64 per step
# over the 12 workers, lr 0.05, momentum 0.9. All processes share this machine's cores (no
# emulated link: under MPI the link is Open MPI's shared memory).
#
#   bash examples/train/elastic_joined_runs.sh [BUILD_DIR] [OUT_DIR] [EPOCHS] [SEEDS]
#
# Defaults: build, docs/results/elastic_joined, 10 epochs, seed 1. One JSON per run (the
# server writes it for EASGD: every client's records and the center's curve) and the logs.
set -euo pipefail
build=${1:-build}
out=${2:-docs/results/elastic_joined}
epochs=${3:-10}
seeds=${4:-1}
exe="$build/examples/train_mnist"
[ -x "$exe" ] || { echo "elastic_joined_runs: $exe not built" >&2; exit 1; }
command -v ompi-server > /dev/null || { echo "elastic_joined_runs: needs ompi-server" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
tmp=$(mktemp -d)
ompi-server --no-daemonize --report-uri "$tmp/uri" &
server_pid=$!
trap 'kill $server_pid 2> /dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -s "$tmp/uri" ] && break; sleep 0.1; done
M=(mpirun --oversubscribe)
J=("${M[@]}" --ompi-server "file:$tmp/uri" --mca orte_allowed_exit_without_sync 1)
common=(--transport mpi --epochs "$epochs" --interval 64)
for seed in $seeds; do
  echo "== easgd, 2 client jobs of 6 + a server job, joined, seed $seed"
  A=("${common[@]}" --seed "$seed" --scheme easgd --clients 2 --elastic-port "$tmp/port")
  "${J[@]}" -np 1 "$exe" "${A[@]}" --elastic-role server --json "$out/joined_s$seed.json" \
    > "$out/joined_s$seed.server.txt" 2>&1 &
  s=$!
  "${J[@]}" -np 6 "$exe" "${A[@]}" --elastic-role client > "$out/joined_s$seed.client1.txt" 2>&1 &
  c=$!
  "${J[@]}" -np 6 "$exe" "${A[@]}" --elastic-role client > "$out/joined_s$seed.client2.txt" 2>&1
  wait "$c"
  wait "$s"
  tail -n 1 "$out/joined_s$seed.server.txt"
  echo "== easgd, the same 13 processes as one job, seed $seed"
  "${M[@]}" -np 13 "$exe" "${common[@]}" --seed "$seed" --scheme easgd --clients 2 \
    --json "$out/onejob_s$seed.json" > "$out/onejob_s$seed.txt" 2>&1
  grep -E "easgd server" "$out/onejob_s$seed.txt" | tail -n 1 || true
  echo "== synchronous SGD, 12 processes, seed $seed"
  "${M[@]}" -np 12 "$exe" "${common[@]}" --seed "$seed" --json "$out/sync12_s$seed.json" \
    > "$out/sync12_s$seed.txt" 2>&1
  grep -E "^epoch" "$out/sync12_s$seed.txt" | tail -n 1
done
