"""Markdown tables of bench/torch/collectives_perf.py JSON files, as docs/torch.md and
docs/benchmarks.md print them.

    python3 bench/torch/table.py collectives bench/results/torch_np2.json
    python3 bench/torch/table.py deepspeed np2.json np4.json
"""
import argparse
import json

OPS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast"]


def size_label(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def rows_of(path):
    with open(path) as f:
        return [r for r in json.load(f)["rows"] if r["op"] != "overhead"]


def collectives(path):
    """One row per size: tcoll / gloo (speedup) for every collective in the file."""
    cells = {}
    for r in rows_of(path):
        cells.setdefault(r["bytes"], {})[r["op"]] = (
            f"{r['tcoll']['time_us']:.0f} / {r['gloo']['time_us']:.0f} ({r['speedup']:.1f}x)")
    ops = [op for op in OPS if any(op in c for c in cells.values())]
    print("| size | " + " | ".join(ops) + " |")
    print("|---:|" + "---:|" * len(ops))
    for size in sorted(cells):
        print(f"| {size_label(size)} | " + " | ".join(cells[size].get(op, "-") for op in ops)
              + " |")


def deepspeed(paths):
    """One row per size, per file (each a --deepspeed run of all_reduce): the times of
    tcoll_torch.all_reduce (the direct call), DeepSpeed and dist.all_reduce on tcoll (and
    Gloo for the first file), then DeepSpeed's time over each tcoll call's."""
    runs = [{r["bytes"]: r for r in rows_of(p) if r["op"] == "all_reduce"} for p in paths]
    sizes = sorted(set().union(*runs))
    for size in sizes:
        cells = [size_label(size)]
        for k, run in enumerate(runs):
            r = run.get(size)
            if not r or "deepspeed" not in r:
                cells += ["-", "-", "-"]
                continue
            times = " / ".join(f"{r[b]['time_us']:.0f}" for b in ("tcoll_direct", "deepspeed",
                                                                   "tcoll"))
            if k == 0:
                times += f" / {r['gloo']['time_us']:.0f}"
            cells += [times, f"{r['direct_vs_deepspeed']:.2f}x",
                      f"{r['speedup_vs_deepspeed']:.2f}x"]
        print("| " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["collectives", "deepspeed"])
    parser.add_argument("json", nargs="+")
    args = parser.parse_args()
    if args.kind == "collectives":
        for p in args.json:
            collectives(p)
    else:
        deepspeed(args.json)


if __name__ == "__main__":
    main()
