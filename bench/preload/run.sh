#!/usr/bin/env bash
# Times an unmodified MPI_Allreduce loop (bench/preload/allreduce_loop.c, float sum, out of
# place) three ways in one script, interleaved, `reps` times each: plain MPI, under
# libtcoll_mpi.so with the default selection (on one node with TCOLL_SHM=1: passthrough below
# 512 B, recursive_doubling up to 16 KiB, ring up to 1 MiB on more than 2 ranks,
# recursive_halving_doubling above; over MPI:
# passthrough up to 16 KiB, then tcoll's automatic), and under it with tcoll's own
# algorithms only (recursive_doubling up to 32 KiB, ring above). Prints a
# Markdown table of the medians over the repetitions (time per call and busbw ratio to MPI).
# usage: bash bench/preload/run.sh [build dir, default build] [reps, 5] ["2 4" rank counts]
#        [-b -e -f -r -t -c -p arguments for the loop; -c 1: cold buffers; -p 1: persistent
#        MPI_Allreduce_init, MPI_Start + MPI_Wait per call]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
reps=${2:-5}
nps=${3:-"2 4"}
shift $(( $# < 3 ? $# : 3 ))
loop_args=("$@")
lib=$PWD/$build/preload/libtcoll_mpi.so
[ -f "$lib" ] || { echo "run.sh: $lib missing (ninja -C $build preload/libtcoll_mpi.so)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The MPI the library was built against, at its defaults (Open MPI: MPI_ARGS="--mca btl
# self,vader,tcp --mca btl_vader_single_copy_mechanism none" gives the launcher arguments of
# the runs before 2026-11-27)
source bench/preload/mpi_launch.sh
echo "run.sh: $mpi_family (${mpi_run[*]})" >&2
"$mpi_cc" -O2 -o "$tmp/loop" bench/preload/allreduce_loop.c
M=("${mpi_run[@]}")
for np in $nps; do
  for rep in $(seq "$reps"); do
    env -u TCOLL_ALLREDUCE_ALGO "${M[@]}" -np "$np" "$tmp/loop" "${loop_args[@]}" > "$tmp/mpi.$np.$rep"
    env -u TCOLL_ALLREDUCE_ALGO "${M[@]}" -np "$np" "${preload_args[@]}" "$tmp/loop" \
      "${loop_args[@]}" > "$tmp/default.$np.$rep"
    export TCOLL_ALLREDUCE_ALGO="recursive_doubling:0-32K;ring:32K-max"
    # shellcheck disable=SC2046
    "${M[@]}" -np "$np" "${preload_args[@]}" $(forward_env TCOLL_ALLREDUCE_ALGO) "$tmp/loop" \
      "${loop_args[@]}" > "$tmp/own.$np.$rep"
    unset TCOLL_ALLREDUCE_ALGO
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
            size, us, bw, wrong = line.split()
            if int(wrong): sys.exit(f"{kind} np {np}: {wrong} wrong elements at {size} B")
            rows[int(size)] = float(us)
        runs.append(rows)
    return {s: statistics.median(r[s] for r in runs) for s in runs[0]}
def human(b):
    for u in ("B", "KiB", "MiB", "GiB"):
        if b < 1024: return f"{b} {u}"
        b //= 1024
for np in nps:
    mpi, dflt, own = load("mpi", np), load("default", np), load("own", np)
    print(f"\n{np} processes (medians of {reps} runs; ratio = MPI time / preload time = busbw ratio)\n")
    print("| size | MPI_Allreduce us | MPI busbw GB/s | preload default us | ratio | preload tcoll-only us | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    n = int(np)
    for s in sorted(mpi):
        bw = s / (mpi[s] * 1e-6) * 2 * (n - 1) / n / 1e9
        print(f"| {human(s)} | {mpi[s]:.2f} | {bw:.2f} | {dflt[s]:.2f} | {mpi[s] / dflt[s]:.2f} | "
              f"{own[s]:.2f} | {mpi[s] / own[s]:.2f} |")
PY
