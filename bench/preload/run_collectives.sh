#!/usr/bin/env bash
# MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block (and their uneven forms),
# MPI_Alltoall, MPI_Gather and MPI_Scatter (and the uneven MPI_Alltoallv, MPI_Gatherv and
# MPI_Scatterv) of an unmodified MPI program
# (bench/preload/collectives_loop.c) with and without libtcoll_mpi.so, interleaved,
# REPS times each, on one node: under the preload these run over shared memory
# (shm_transport) with the built-in one-node choice (docs/preload.md: tcoll's binomial tree
# for bcast from 512 B and for reduce at 512 B-32 KiB, ring for reduce_scatter_block from
# 1 KiB on 2 ranks and 8 KiB on more, ring for allgather from 8 KiB on more than 2 ranks;
# MPI's own elsewhere). Prints the medians. To time tcoll's versions of those, set rules in the
# environment, e.g. TCOLL_REDUCE_ALGO=binomial_tree:0-max TCOLL_ALLGATHER_ALGO=ring:0-max.
#
#   bash bench/preload/run_collectives.sh [BUILD_DIR] [REPS] [NPS] [loop args...]
#   e.g. bash bench/preload/run_collectives.sh build 3 "2 4" -b 4K -e 16M -f 4 -r 5 -t 0.1
#   (loop args: -b -e -f -r -t, -c 1 for cold buffers, -C MPI_Gather,MPI_Scatter for only those;
#   -C MPI_Alltoallv,MPI_Gatherv,MPI_Scatterv with TCOLL_ALLTOALLV_ALGO=pairwise_exchange:0-max
#   TCOLL_GATHERV_ALGO=linear:0-max TCOLL_SCATTERV_ALGO=linear:0-max to time tcoll's uneven forms)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
reps=${2:-3}
nps=${3:-"2 4"}
shift $(( $# < 3 ? $# : 3 ))
loop_args=("$@")
lib=$PWD/$build/preload/libtcoll_mpi.so
[ -f "$lib" ] || { echo "run_collectives.sh: $lib missing (ninja -C $build preload/libtcoll_mpi.so)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The reference is Open MPI's defaults: OMPI_MCA_op=^avx (which the tests set for 8-bit sums)
# would turn off its vectorised reductions and slow MPI_Reduce and MPI_Reduce_scatter_block.
if [ -n "${OMPI_MCA_op:-}" ]; then
  echo "run_collectives.sh: ignoring OMPI_MCA_op=$OMPI_MCA_op (the reference is Open MPI's defaults)" >&2
  unset OMPI_MCA_op
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/preload/mpi_launch.sh
echo "run_collectives.sh: $mpi_family (${mpi_run[*]})" >&2
"$mpi_cc" -O2 -o "$tmp/loop" bench/preload/collectives_loop.c
# The MPI at its defaults (Open MPI: vader with its default single-copy mechanism, cross-memory
# attach where permitted); MPI_ARGS adds launcher options, e.g. MPI_ARGS="--mca
# btl_vader_single_copy_mechanism none" for the runs of 2026-11-23. TCOLL_* rules set in the
# environment reach the ranks.
tcoll_vars=$(compgen -e | grep '^TCOLL_' || true)
forward=()
for v in $tcoll_vars; do read -r -a f <<< "$(forward_env "$v")"; forward+=("${f[@]}"); done
M=("${mpi_run[@]}")
for np in $nps; do
  for rep in $(seq "$reps"); do
    "${M[@]}" -np "$np" "$tmp/loop" "${loop_args[@]}" > "$tmp/mpi.$np.$rep"
    "${M[@]}" -np "$np" "${preload_args[@]}" "${forward[@]}" "$tmp/loop" "${loop_args[@]}" > "$tmp/tcoll.$np.$rep"
  done
done
python3 - "$tmp" "$reps" $nps <<'PY'
import statistics, sys
tmp, reps, nps = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(kind, np):
    runs = []
    for rep in range(1, reps + 1):
        rows = {}
        for line in open(f"{tmp}/{kind}.{np}.{rep}"):
            if line.startswith("#"): continue
            coll, size, us, wrong = line.split()
            if int(wrong): sys.exit(f"{kind} np {np}: {wrong} wrong elements, {coll} {size} B")
            rows[(coll, int(size))] = float(us)
        runs.append(rows)
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}
def human(b):
    for u in ("B", "KiB", "MiB", "GiB"):
        if b < 1024: return f"{b} {u}"
        b //= 1024
for np in nps:
    mpi, tc = load("mpi", np), load("tcoll", np)
    print(f"\n{np} processes (medians of {reps} runs; speed-up = MPI time / preload time)\n")
    print("| collective | size | MPI us | preload us | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for k in mpi:
        print(f"| {k[0]} | {human(k[1])} | {mpi[k]:.2f} | {tc[k]:.2f} | {mpi[k] / tc[k]:.2f} |")
PY
