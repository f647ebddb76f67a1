#!/usr/bin/env bash
# IMB-MPI1 (Intel MPI Benchmarks) with and without libtcoll_mpi.so, interleaved, `reps` times
# each, on one node at the MPI's defaults: `IMB-MPI1 <benchmarks> -off_cache -1` (cold
# buffers: IMB cycles through buffers larger than the last-level cache, as a program that
# touches other data between calls does). Prints a Markdown table per rank count: the median
# over the repetitions of IMB's t_avg per size, both ways, and MPI's time over the preload's
# (above 1: the preload is faster).
#
# IMB is not packaged by Debian and is not fetched here (the machine reaches only Debian and
# PyPI): give the directory of its sources (github.com/intel/mpi-benchmarks; measured with
# commit 46e8757), which this script builds once with the MPI the library was built against.
#
# usage: bash bench/preload/run_imb.sh IMB_SOURCE_DIR [build dir, default build] [reps, 3]
#        ["2 4" rank counts, default 2] [benchmarks, default "Allreduce Bcast Reduce"]
#        [more IMB arguments, e.g. -msglog 0:16]
# IMB_CONTROL=1 runs MPI alone a second time in each repetition and adds the ratio of the two
# plain runs (the spread of identical launches on this machine, against which the preload's
# ratios are read). After the tables, one table of the ratios only: a row per size, a column
# per benchmark, from the medians and again from the fastest run of each (this VM switches
# between a fast and a slow state from one launch to the next, which can split the runs of one
# configuration in two; the fastest run compares the fast states). IMB_RAW_DIR=DIR keeps
# IMB's outputs there.
set -euo pipefail
imb_src=$(cd "${1:?usage: run_imb.sh IMB_SOURCE_DIR [build] [reps] [nps] [benchmarks]}" && pwd)
cd "$(dirname "$0")/../.."
build=${2:-build}
reps=${3:-3}
nps=${4:-2}
benchmarks=${5:-"Allreduce Bcast Reduce"}
shift $(( $# < 5 ? $# : 5 ))
lib=$PWD/$build/preload/libtcoll_mpi.so
[ -f "$lib" ] || { echo "run_imb.sh: $lib missing (ninja -C $build preload/libtcoll_mpi.so)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source bench/preload/mpi_launch.sh
imb=$imb_src/IMB-MPI1.$mpi_label
if [ ! -x "$imb" ]; then
  # IMB's own build (its -O0 included), with the MPI's C++ bindings left out: Debian's Open
  # MPI headers do not compile under IMB's -Werror otherwise
  make -s -C "$imb_src" clean >/dev/null 2>&1 || true
  make -s -C "$imb_src" IMB-MPI1 CC="$mpi_cc" CXX="${mpi_cc/mpicc/mpicxx}" \
    CPPFLAGS="-DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1" >&2
  mv "$imb_src/IMB-MPI1" "$imb"
fi
echo "run_imb.sh: $mpi_label (${mpi_run[*]}), $imb" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${IMB_RAW_DIR:-}" ]; then
  mkdir -p "$IMB_RAW_DIR"
  trap 'cp "$tmp"/* "$IMB_RAW_DIR"/ 2>/dev/null; rm -rf "$tmp"' EXIT
fi
read -r -a names <<< "$benchmarks"
for np in $nps; do
  for rep in $(seq "$reps"); do
    "${mpi_run[@]}" -np "$np" "$imb" "${names[@]}" -off_cache -1 "$@" > "$tmp/mpi.$np.$rep"
    "${mpi_run[@]}" -np "$np" "${preload_args[@]}" "$imb" "${names[@]}" -off_cache -1 "$@" \
      > "$tmp/preload.$np.$rep"
    if [ "${IMB_CONTROL:-0}" = 1 ]; then
      "${mpi_run[@]}" -np "$np" "$imb" "${names[@]}" -off_cache -1 "$@" > "$tmp/control.$np.$rep"
    fi
  done
done
python3 - "$tmp" "$nps" "$reps" "${IMB_CONTROL:-0}" "$mpi_label" <<'PY'
import re, statistics, sys
tmp, nps, reps = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
control, label = sys.argv[4] == "1", sys.argv[5]

def parse(path):
    """{benchmark: {bytes: t_avg}} from one IMB output."""
    out, current = {}, None
    for line in open(path):
        m = re.match(r"# Benchmarking (\S+)", line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        fields = line.split()
        if current is not None and len(fields) >= 5 and fields[0].isdigit():
            current[int(fields[0])] = float(fields[4])  # t_avg[usec]
    return out

def ratio(a, b):
    return f"{a / b:.2f}x" if b > 0 else "-"

def size_name(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"

for np in nps:
    kinds = ("mpi", "preload", "control") if control else ("mpi", "preload")
    runs = {k: [parse(f"{tmp}/{k}.{np}.{r}") for r in range(1, reps + 1)] for k in kinds}
    med = {k: {b: {n: statistics.median(r[b][n] for r in runs[k]) for n in runs[k][0][b]}
               for b in runs[k][0]} for k in kinds}
    benches = list(med["mpi"])
    for bench in benches:
        print(f"\n{np} processes, {bench} (t_avg, us; median of {reps} interleaved runs)\n")
        print("| bytes | MPI | preload | MPI / preload |" + (" MPI / MPI again |" if control else ""))
        print("|---:|---:|---:|---:|" + ("---:|" if control else ""))
        for size in sorted(med["mpi"][bench]):
            m, p = med["mpi"][bench][size], med["preload"][bench][size]
            row = f"| {size} | {m:.2f} | {p:.2f} | {ratio(m, p)} |"
            if control:
                row += f" {ratio(m, med['control'][bench][size])} |"
            print(row)
    best = {k: {b: {n: min(r[b][n] for r in runs[k]) for n in runs[k][0][b]}
                for b in runs[k][0]} for k in kinds}
    sizes = sorted(set().union(*(med["mpi"][b].keys() for b in benches)))
    for stat, values in (("median", med), ("fastest", best)):
        print(f"\n{label}, {np} processes: MPI / preload, the {stat} of {reps} interleaved runs "
              f"of IMB -off_cache" + ("; in brackets MPI / MPI again" if control else "") + "\n")
        print("| bytes | " + " | ".join(benches) + " |")
        print("|---:|" + "---:|" * len(benches))
        for size in sizes:
            cells = []
            for b in benches:
                if size not in values["mpi"][b]:
                    cells.append("")
                    continue
                cell = ratio(values["mpi"][b][size], values["preload"][b][size])
                if control:
                    cell += f" ({ratio(values['mpi'][b][size], values['control'][b][size])})"
                cells.append(cell)
            print(f"| {size_name(size)} | " + " | ".join(cells) + " |")
PY
