#!/usr/bin/env bash
# The preload's per-call cost where it hands the call to MPI (bench/preload/wrapper_cost.c,
# one process, 8-byte calls with the built-in choice, which hands them to MPI, except
# MPI_Allreduce against MPICH, which tcoll runs from 8 B: TCOLL_ALLREDUCE_ALGO=passthrough:0-max
# keeps it with MPI): plain MPI and each library given, interleaved, REPS
# times; prints the medians in ns per call and each library's extra ns over plain MPI.
#   bash bench/preload/run_wrapper_cost.sh REPS LABEL=LIB [LABEL=LIB ...]
# Every library must be built against the same MPI (its launcher is read from the first).
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=$1; shift
labels=(); libs=()
for a in "$@"; do labels+=("${a%%=*}"); libs+=("$(realpath "${a#*=}")"); done
lib=${libs[0]}
source bench/preload/mpi_launch.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TCOLL_ALLREDUCE_ALGO=passthrough:0-max
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$mpi_cc" -O2 -o "$tmp/cost" bench/preload/wrapper_cost.c
for rep in $(seq "$reps"); do
  "${mpi_run[@]}" -np 1 "$tmp/cost" > "$tmp/plain.$rep"
  for i in "${!libs[@]}"; do
    lib=${libs[$i]}
    source bench/preload/mpi_launch.sh # preload_args for this library
    forward=()
    read -r -a forward <<< "$(forward_env TCOLL_ALLREDUCE_ALGO)"
    "${mpi_run[@]}" -np 1 "${preload_args[@]}" "${forward[@]}" "$tmp/cost" > "$tmp/${labels[$i]}.$rep"
  done
done
python3 - "$tmp" "$reps" "$mpi_label" plain "${labels[@]}" <<'PY'
import statistics, sys
tmp, reps, family, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def load(kind):
    runs = [dict(((l.split()[0], l.split()[1]), float(l.split()[2])) for l in open(f"{tmp}/{kind}.{r}"))
            for r in range(1, reps + 1)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}
data = {k: load(k) for k in kinds}
print(f"{family}, 1 process, medians of {reps} runs, ns per call (extra over plain MPI)\n")
print("| call | communicator | plain MPI | " + " | ".join(kinds[1:]) + " |")
print("|---|---|---:|" + "---:|" * (len(kinds) - 1))
for k in data["plain"]:
    base = data["plain"][k]
    cells = [f"{data[x][k]:.0f} (+{data[x][k] - base:.0f})" for x in kinds[1:]]
    print(f"| {k[0]} | {k[1]} | {base:.0f} | " + " | ".join(cells) + " |")
PY
