#!/usr/bin/env python3
"""Turns alltoall_perf --json files into the side-by-side tables of docs/benchmarks.md.

Per (transport of the tcoll rows, ranks, size): the median over the files (repeated runs
of one configuration) of each algorithm's time, and the ratio of the `--against` time to
the `--tcoll` time (above 1: the --tcoll algorithm is faster). Out of place unless
--inplace. Defaults: --tcoll automatic --against passthrough (MPI_Alltoall in the same job).

Usage: alltoall_ratios.py [--inplace] [--tcoll NAME] [--against NAME] FILE.json [...]
(stdlib only)
"""
import json
import statistics
import sys
from collections import defaultdict


def main(argv):
    inplace, tcoll, against, files = False, "automatic", "passthrough", []
    it = iter(argv)
    for a in it:
        if a == "--inplace":
            inplace = True
        elif a == "--tcoll":
            tcoll = next(it)
        elif a == "--against":
            against = next(it)
        else:
            files.append(a)
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    # (ranks, bytes) -> algorithm -> [time_us, one per file]; the transport of the tcoll rows
    times = defaultdict(lambda: defaultdict(list))
    transports = set()
    for f in files:
        with open(f) as fh:
            for r in json.load(fh):
                if bool(r["inplace"]) != inplace:
                    continue
                times[(r["ranks"], r["bytes"])][r["algorithm"]].append(r["time_us"])
                if r["algorithm"] == tcoll:
                    transports.add(r["transport"])
    print(f"tcoll side: {tcoll} on {', '.join(sorted(transports))}; against: {against}; "
          f"{'in place' if inplace else 'out of place'}; medians of {len(files)} file(s)")
    print(f"| ranks | send buffer (B) | {tcoll} (us) | {against} (us) | {against} / {tcoll} |")
    print("|---|---|---|---|---|")
    status = 0
    for (ranks, nbytes), by in sorted(times.items()):
        if tcoll not in by or against not in by:
            status = 1
            continue
        t, a = statistics.median(by[tcoll]), statistics.median(by[against])
        print(f"| {ranks} | {nbytes} | {t:.2f} | {a:.2f} | {a / t:.2f} |")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
