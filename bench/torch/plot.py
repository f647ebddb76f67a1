"""Plots bench/torch/collectives_perf.py JSON files: time per call of tcoll and gloo, and the
speedup, per collective (one PNG).

    .venv/bin/pip install matplotlib    # once; the plot is not part of the tests
    .venv/bin/python bench/torch/plot.py bench/results/torch_np2.json \
        bench/results/torch_np4.json -o docs/img/torch_collectives.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("json", nargs="+")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    runs = [json.load(open(p)) for p in args.json]
    ops = []
    for run in runs:
        run["rows"] = [r for r in run["rows"] if r["op"] != "overhead"]
        for row in run["rows"]:
            if row["op"] not in ops:
                ops.append(row["op"])
    fig, axes = plt.subplots(2, len(ops), figsize=(4.2 * len(ops), 7), squeeze=False)
    for col, op in enumerate(ops):
        top, bottom = axes[0][col], axes[1][col]
        for run, style in zip(runs, ["-", "--", ":"]):
            rows = [r for r in run["rows"] if r["op"] == op]
            sizes = [r["bytes"] for r in rows]
            P = run["ranks"]
            top.plot(sizes, [r["tcoll"]["time_us"] for r in rows], "C0" + style, marker="o",
                     ms=3, label=f"tcoll, {P} proc")
            top.plot(sizes, [r["gloo"]["time_us"] for r in rows], "C3" + style, marker="s",
                     ms=3, label=f"gloo, {P} proc")
            bottom.plot(sizes, [r["speedup"] for r in rows], "C2" + style, marker="o", ms=3,
                        label=f"{P} processes")
        top.set_title(op)
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
        top.set_yscale("log")
        bottom.set_yscale("log")
        bottom.axhline(1.0, color="k", lw=0.8)
        bottom.set_xlabel("bytes per rank")
        if col == 0:
            top.set_ylabel("time per call (us)")
            bottom.set_ylabel("speedup over gloo")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    fig.suptitle(f"torch.distributed on CPU tensors: tcoll vs gloo (torch {runs[0]['torch']})")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
