#!/usr/bin/env bash
# tcoll's shared-memory allreduce and all-to-all against Open MPI 5's MPI_Allreduce and
# MPI_Alltoall (the PyPI wheel, at its defaults) at 2, 4, 8 and 16 processes, on a machine
# with more cores than this project's 2-core VM (the lent GPU machine: 16 cores, no MPI of
# its own, so the wheel travels with the binaries).
#
#   bash bench/device/shm_vs_mpi.sh OUT_DIR [ROUNDS]
#
# Needs build-openmpi5/bench/{allreduce_perf,alltoall_perf} (ninja -C build-openmpi5
# bench/allreduce_perf bench/alltoall_perf) and .venv/mpi/openmpi5 (scripts/setup_mpi_wheels.sh),
# both found relative to the repository root (their RUNPATH is $ORIGIN-relative). Rounds run
# the process counts in turn, so repeats interleave; BUDGET_S (default 420) stops starting
# runs once spent. Summaries: python3 bench/allreduce_ratios.py and bench/alltoall_ratios.py.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?OUT_DIR}
rounds=${2:-3}
budget=${BUDGET_S:-420}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=$root/.venv/mpi/openmpi5/bin/mpirun
bin=$root/build-openmpi5/bench
cores=$(lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l)
{
  echo "cpus: $(nproc), physical cores: $cores"
  lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA|MHz' || true
  "$mpirun" --version | head -1
} > "$out/machine.txt" 2>&1
for i in $(seq 1 "$rounds"); do
  for P in 2 4 8 16; do
    [ "$SECONDS" -ge "$budget" ] && { echo "budget spent before round $i P=$P" >> "$out/machine.txt"; break 2; }
    extra=()
    [ "$P" -gt "$cores" ] && extra=(--oversubscribe)
    echo "round $i P=$P mpirun flags: ${extra[*]:-(defaults)}" >> "$out/machine.txt"
    timeout 90 "$mpirun" "${extra[@]}" -np "$P" "$bin/allreduce_perf" -t shm -b 8 -e 4M -f 4 -R 5 \
      -n 300 -a automatic,passthrough --json "$out/allreduce_np${P}_r$i.json" \
      > "$out/allreduce_np${P}_r$i.txt" 2>&1 || echo "allreduce P=$P round $i: exit $?" >> "$out/machine.txt"
    timeout 60 "$mpirun" "${extra[@]}" -np "$P" "$bin/alltoall_perf" -t shm -b 64 -e 1M -f 4 -n 20 \
      -w 5 -R 5 -a automatic,passthrough --json "$out/alltoall_np${P}_r$i.json" \
      > "$out/alltoall_np${P}_r$i.txt" 2>&1 || echo "alltoall P=$P round $i: exit $?" >> "$out/machine.txt"
  done
done
echo "done in ${SECONDS}s" >> "$out/machine.txt"
