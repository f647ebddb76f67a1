#!/usr/bin/env bash
# Side-by-side allreduce figures for docs/benchmarks.md: float sum, every tcoll algorithm
# and passthrough (MPI_Allreduce) in the same mpirun job at 2 and 4 ranks, then the threads
# transport at 2 ranks over the same sizes; JSON + text per run under $OUT and the ratio
# tables (bench/allreduce_ratios.py) in $OUT/ratios.md.
#
#   bash bench/run_allreduce_suite.sh                 # uses ./build, writes bench/results/
#   BUILD=build REPS=7 OUT=/tmp/r bash bench/run_allreduce_suite.sh
#
# Sizes 8 B .. 128 MiB by factor 8 (8 * 8^k; the next step would pass 256 MiB). Small sizes
# (<= 2 MiB) run -n $SMALL_ITERS (50) after 10 warm-ups, large ones -n $LARGE_ITERS (3)
# after 1, each measurement repeated $REPS times (median reported). The mpirun flags are the project's test flags (meson.build's
# mpiexec_args), used for tcoll and for the MPI_Allreduce baseline alike.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-bench/results}
REPS=${REPS:-5}
RANKS=${RANKS:-"2 4"}
THREAD_RANKS=${THREAD_RANKS:-2}
MPIRUN=${MPIRUN:-mpirun}
# MPI at its defaults (vader with its single-copy mechanism where the kernel allows it): the
# strongest MPI_Allreduce baseline; tcoll runs over the same settings.
MPI_FLAGS=${MPI_FLAGS:-"--allow-run-as-root --oversubscribe"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

exe=$BUILD/bench/allreduce_perf
[ -x "$exe" ] || { echo "build $exe first (ninja -C $BUILD bench/allreduce_perf)" >&2; exit 2; }
mkdir -p "$OUT"
small=(-b 8 -e 2M -f 8 -n "${SMALL_ITERS:-50}" -w 10)
large=(-b 16M -e 128M -f 8 -n "${LARGE_ITERS:-3}" -w 1)
common=(-a all -d float -o sum -R "$REPS")

{
  echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# mpirun flags: $MPI_FLAGS"
} > "$OUT/conditions.txt"

for np in $RANKS; do
  for part in small large; do
    declare -n sizes=$part
    # shellcheck disable=SC2086
    $MPIRUN $MPI_FLAGS -np "$np" "$exe" -t mpi "${common[@]}" "${sizes[@]}" \
      --json "$OUT/mpi_np${np}_$part.json" | tee "$OUT/mpi_np${np}_$part.txt"
  done
done
for g in $THREAD_RANKS; do
  for part in small large; do
    declare -n sizes=$part
    "$exe" -t threads -g "$g" "${common[@]}" "${sizes[@]}" \
      --json "$OUT/threads_np${g}_$part.json" | tee "$OUT/threads_np${g}_$part.txt"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/conditions.txt"

python3 bench/allreduce_ratios.py "$OUT"/mpi_np*.json "$OUT"/threads_np*.json | tee "$OUT/ratios.md"
