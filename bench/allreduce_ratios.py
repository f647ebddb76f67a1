#!/usr/bin/env python3
"""Turns allreduce_perf --json files into the side-by-side ratio tables of docs/benchmarks.md.

For every (ranks, dtype, op, placement, size) of the MPI runs: the passthrough
(MPI_Allreduce) busbw, the best tcoll algorithm and its busbw, their ratio; and, where a
threads run has the same ranks/dtype/op/placement/size, the best threads busbw over the
same MPI_Allreduce busbw. Goals (docs/benchmarks.md): best/MPI >= 0.9 at every size and
>= 1.0 from 1 MiB; threads/MPI >= 2 from 16 MiB.

With --shm the tcoll side is the shared-memory transport (allreduce_perf -t shm, whose
passthrough rows are MPI_Allreduce on the same processes) and the goals are issue 11's:
best/MPI >= 1.0 at every size and >= 1.5 from 1 MiB. With --registered the tcoll side is
the same transport on registered buffers (allreduce_perf -t shm --registered 1), and a
column compares it with the threads transport at the same ranks (goal: >= 0.9 of it).
--bound FILE (bench/memory_bound --json) adds tcoll's busbw as a percentage of the
measured in-place add rate ("acc").

With --node the files are allreduce_perf -t node runs: per size the time of MPI_Allreduce,
of the best flat tcoll algorithm, of the best hierarchical/X on mpi+mpi
(hierarchical<mpi_transport, mpi_transport>) and on shm+mpi (mpi_node_hierarchy), and the
speed-ups of shm+mpi over MPI_Allreduce and over mpi+mpi (time ratios, > 1: shm+mpi faster).

Usage: allreduce_ratios.py [--inplace] [--shm | --registered | --node] [--bound FILE]
                           FILE.json [FILE.json ...]   (stdlib only)
"""
import json
import sys
from collections import defaultdict


def human(nbytes):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div}{unit}"
    return str(nbytes)


def node_tables(files, inplace):
    """The --node tables (see the module comment); returns the exit status."""
    # (ranks, dtype, op, bytes) -> {(transport, algorithm): time_us}
    times = defaultdict(dict)
    wrong = 0
    for path in files:
        with open(path) as f:
            for r in json.load(f):
                if bool(r.get("inplace", False)) != inplace:
                    continue
                if r.get("wrong"):
                    wrong += 1
                    continue
                key = (r["ranks"], r.get("dtype", "?"), r.get("op", "?"), int(r["bytes"]))
                times[key][(r["transport"], r["algorithm"])] = r["time_us"]

    def best(m, transport, hierarchical):
        c = {a: t for (tr, a), t in m.items()
             if tr == transport and a != "passthrough" and a.startswith("hierarchical/") == hierarchical}
        a = min(c, key=c.get) if c else None
        return (a.removeprefix("hierarchical/") if a else None), (c[a] if a else None)

    def us(v):
        return "-" if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}"

    def ratio(a, b):
        return "-" if a is None or b is None else f"{a / b:.2f}"

    placement = "in-place" if inplace else "out-of-place"
    for ranks, dtype, op in sorted({k[:3] for k in times}):
        print(f"\n### {ranks} ranks, {dtype} {op}, {placement}, time per call (us)\n")
        print("| size | MPI_Allreduce | best flat tcoll | hierarchical<mpi, mpi> (best inter) "
              "| hierarchical<shm, mpi> (best inter) | MPI / shm+mpi | mpi+mpi / shm+mpi |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for size in sorted(k[3] for k in times if k[:3] == (ranks, dtype, op)):
            m = times[(ranks, dtype, op, size)]
            mpi = m.get(("mpi", "passthrough"))
            fa, ft = best(m, "mpi", False)
            ma, mt = best(m, "mpi+mpi", True)
            sa, st = best(m, "shm+mpi", True)
            name = lambda a, t: "-" if t is None else f"{us(t)} ({a})"
            print(f"| {human(size)} | {us(mpi)} | {name(fa, ft)} | {name(ma, mt)} | {name(sa, st)} "
                  f"| {ratio(mpi, st)} | {ratio(mt, st)} |")
    if wrong:
        print(f"\n{wrong} records had wrong results and were left out", file=sys.stderr)
        return 1
    return 0


def main(argv):
    inplace = "--inplace" in argv
    if "--node" in argv:
        files = [a for a in argv if not a.startswith("--")]
        if not files:
            print(__doc__, file=sys.stderr)
            return 2
        return node_tables(files, inplace)
    registered = "--registered" in argv
    shm = "--shm" in argv or registered
    tcoll_transport = "shm-registered" if registered else "shm" if shm else "mpi"
    bound = None
    if "--bound" in argv:
        at = argv.index("--bound")
        if at + 1 >= len(argv):
            print("allreduce_ratios.py: --bound needs a memory_bound --json file", file=sys.stderr)
            return 2
        with open(argv[at + 1]) as f:
            bound = json.load(f)["acc_GBps"]
        argv = argv[:at] + argv[at + 2:]
    files = [a for a in argv if not a.startswith("--")]
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    # (transport, ranks, dtype, op, inplace, bytes) -> {algorithm: busbw}
    bw = defaultdict(dict)
    wrong = 0
    for path in files:
        with open(path) as f:
            for r in json.load(f):
                key = (r["transport"], r["ranks"], r.get("dtype", "?"), r.get("op", "?"),
                       bool(r.get("inplace", False)), int(r["bytes"]))
                if r.get("wrong"):
                    wrong += 1
                    continue  # a wrong result never counts as fast
                # several files may hold the same point (reruns): keep the median-of-reps
                # figure of the last file, as each file is one complete side-by-side run
                bw[key][r["algorithm"]] = r["busbw_gbs"]
    groups = sorted({(k[1], k[2], k[3]) for k in bw if k[0] == "mpi" and k[4] == inplace})
    placement = "in-place" if inplace else "out-of-place"
    status = 0
    for ranks, dtype, op in groups:
        print(f"\n### {ranks} ranks, {dtype} {op}, {placement}\n")
        extra_head = (" tcoll/threads |" if registered else "") + \
            (" % of memory bound |" if bound else "")
        print("| size | MPI_Allreduce busbw (GB/s) | best tcoll algorithm | busbw (GB/s) "
              "| tcoll/MPI | threads busbw (GB/s) | threads/MPI |" + extra_head)
        print("|---:|---:|:---|---:|---:|---:|---:|" + "---:|" * extra_head.count("|"))
        sizes = sorted(k[5] for k in bw if k[:5] == ("mpi", ranks, dtype, op, inplace))
        for size in sizes:
            m = bw[("mpi", ranks, dtype, op, inplace, size)]
            base = m.get("passthrough")
            mine = bw.get((tcoll_transport, ranks, dtype, op, inplace, size), {})
            tc = {a: v for a, v in mine.items() if a != "passthrough"}
            best = max(tc, key=tc.get) if tc else None
            ratio = tc[best] / base if best and base else None
            th = bw.get(("threads", ranks, dtype, op, inplace, size), {})
            th_best = max(th.values()) if th else None
            th_ratio = th_best / base if th_best is not None and base else None
            goal = (1.5 if size >= (1 << 20) else 1.0) if shm else \
                (1.0 if size >= (1 << 20) else 0.9)
            miss = ratio is not None and ratio < goal
            th_miss = th_ratio is not None and size >= (16 << 20) and th_ratio < 2.0
            fmt = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
            print(f"| {human(size)} | {fmt(base)} | {best or '-'} | "
                  f"{fmt(tc.get(best) if best else None)} | {fmt(ratio)}{' (miss)' if miss else ''} | "
                  f"{fmt(th_best)} | {fmt(th_ratio)}{' (miss)' if th_miss else ''} |", end="")
            if registered:
                vs = tc[best] / th_best if best and th_best else None
                print(f" {fmt(vs)}{' (miss)' if vs is not None and vs < 0.9 else ''} |", end="")
            if bound:
                print(f" {fmt(100 * tc[best] / bound if best else None, 0)} |", end="")
            print()
    if wrong:
        print(f"\n{wrong} records had wrong results and were left out", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
