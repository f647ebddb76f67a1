#!/usr/bin/python3
"""Test accuracy and loss of dense, CSC and top-k training against epochs and bytes sent.

Usage: examples/train/plot_sparse.py [--results DIR] [--img DIR] [--markdown]

Reads the train_mnist --json files that examples/train/sparse_runs.sh writes (default
docs/results/train_sparse) and draws, per rank count P, docs/img/train_sparse_pP.png: four
panels, test accuracy and training loss against epochs and against the cumulative bytes
each rank sent (mean over the ranks, counted by tcoll::counting). --markdown prints the
result tables of docs/sparse.md instead (standard library only). Plotting uses Debian's
python3-matplotlib, hence /usr/bin/python3.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

NAME = re.compile(r"^(dense|csc|topk)(?:_d([0-9.]+))?_p(\d+)(?:_(error_feedback|dgc))?(?:_seed(\d+))?$")


def load(directory):
    """{name: (scheme, density, ranks, residual, seed, doc)} for every run file."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.splitext(os.path.basename(path))[0]
        m = NAME.match(name)
        if not m:
            print(f"plot_sparse: skipping {path} (unknown run name)", file=sys.stderr)
            continue
        with open(path) as f:
            doc = json.load(f)
        scheme, density, ranks, residual, seed = m.groups()
        runs[name] = dict(scheme=scheme, density=float(density) if density else 1.0,
                          ranks=int(ranks), residual=residual or "momentum",
                          seed=int(seed) if seed else 1, doc=doc)
    return runs


def series(doc):
    """Per-epoch lists: epoch, test accuracy (%), train loss, test loss, cumulative MB/rank."""
    epochs, acc, train_loss, test_loss, mb = [], [], [], [], []
    total = 0.0
    for e in doc["epochs"]:
        sent = e["bytes_sent_per_rank"]
        total += sum(sent) / len(sent)
        epochs.append(e["epoch"])
        acc.append(100 * e["test_accuracy"])
        train_loss.append(e["train_loss"])
        test_loss.append(e["test_loss"])
        mb.append(total / 1e6)
    return epochs, acc, train_loss, test_loss, mb


def label(run):
    if run["scheme"] == "dense":
        return "dense"
    sparsity = round(100 * (1 - run["density"]))
    extra = {"error_feedback": " (error feedback)", "dgc": " (DGC momentum correction)"}.get(
        run["residual"], "")
    return f"{run['scheme']} {sparsity}% sparse{extra}"


def main_runs(runs, ranks):
    """The plotted runs at `ranks`: seed 1, momentum residual, dense first."""
    chosen = [r for r in runs.values()
              if r["ranks"] == ranks and r["seed"] == 1 and r["residual"] == "momentum"]
    order = {"dense": 0, "csc": 1, "topk": 2}
    return sorted(chosen, key=lambda r: (order[r["scheme"]], -r["density"]))


def plot(runs, img_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {("dense", 1.0): "black",
               ("csc", 0.15): "#08519c", ("csc", 0.1): "#3182bd", ("csc", 0.01): "#9ecae1",
               ("topk", 0.15): "#a63603", ("topk", 0.1): "#e6550d", ("topk", 0.01): "#fdae6b"}
    styles = {"dense": "-", "csc": "-", "topk": "--"}
    os.makedirs(img_dir, exist_ok=True)
    for ranks in sorted({r["ranks"] for r in runs.values()}):
        chosen = main_runs(runs, ranks)
        if not chosen:
            continue
        fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
        for run in chosen:
            epochs, acc, train_loss, _, mb = series(run["doc"])
            kw = dict(color=colours.get((run["scheme"], run["density"]), "grey"),
                      linestyle=styles[run["scheme"]], marker="o", markersize=3,
                      label=label(run))
            axes[0][0].plot(epochs, acc, **kw)
            axes[1][0].plot(epochs, train_loss, **kw)
            axes[0][1].plot(mb, acc, **kw)
            axes[1][1].plot(mb, train_loss, **kw)
        axes[0][0].set(xlabel="epoch", ylabel="test accuracy (%)")
        axes[1][0].set(xlabel="epoch", ylabel="training loss (epoch mean)", yscale="log")
        axes[0][1].set(xlabel="cumulative MB sent per rank", ylabel="test accuracy (%)",
                       xscale="log")
        axes[1][1].set(xlabel="cumulative MB sent per rank", ylabel="training loss (epoch mean)",
                       xscale="log", yscale="log")
        for ax in (axes[0][0], axes[0][1]):
            ax.set_ylim(85, 97.5)
        for ax in axes.flat:
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=8, loc="lower right")
        fig.suptitle(f"MLP 784-512-256-10 on 4,000 MNIST digits, {ranks} thread ranks, "
                     "global batch 64, lr 0.05, momentum 0.9 (seed 1)")
        fig.tight_layout()
        path = os.path.join(img_dir, f"train_sparse_p{ranks}.png")
        fig.savefig(path, dpi=90)
        print("wrote", path)


def markdown(runs):
    dense = {r["ranks"]: r for r in runs.values()
             if r["scheme"] == "dense" and r["seed"] == 1}
    print("| ranks | run | test accuracy after the last epoch | vs dense (pp) | best epoch's "
          "accuracy | final training loss | final test loss | MB sent per rank, all epochs | "
          "of dense | s/epoch (median) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ranks in sorted({r["ranks"] for r in runs.values()}):
        chosen = main_runs(runs, ranks) + sorted(
            [r for r in runs.values() if r["ranks"] == ranks and r["seed"] == 1
             and r["residual"] != "momentum"], key=lambda r: (r["scheme"], -r["density"]))
        _, dacc, _, _, dmb = series(dense[ranks]["doc"]) if ranks in dense else (0, [0], 0, 0, [1])
        for run in chosen:
            epochs, acc, train_loss, test_loss, mb = series(run["doc"])
            secs = statistics.median(e["seconds"] for e in run["doc"]["epochs"])
            print(f"| {ranks} | {label(run)} | {acc[-1]:.2f}% | {acc[-1] - dacc[-1]:+.2f} | "
                  f"{max(acc):.2f}% | {train_loss[-1]:.4f} | {test_loss[-1]:.4f} | "
                  f"{mb[-1]:,.0f} | {100 * mb[-1] / dmb[-1]:.1f}% | {secs:.2f} |")
    seeds = {}
    for r in runs.values():
        if r["ranks"] == 4 and r["residual"] == "momentum" and (
                r["scheme"] == "dense" or (r["scheme"] == "csc" and r["density"] == 0.15)):
            seeds.setdefault(r["seed"], {})[r["scheme"]] = series(r["doc"])[1][-1]
    complete = {s: v for s, v in sorted(seeds.items()) if len(v) == 2}
    if complete:
        print()
        print("| seed | dense | csc 85% sparse | difference (pp) |")
        print("|---|---|---|---|")
        for s, v in complete.items():
            print(f"| {s} | {v['dense']:.2f}% | {v['csc']:.2f}% | {v['csc'] - v['dense']:+.2f} |")
        d = [v["dense"] for v in complete.values()]
        c = [v["csc"] for v in complete.values()]
        diff = [v["csc"] - v["dense"] for v in complete.values()]
        print(f"| mean | {statistics.mean(d):.2f}% | {statistics.mean(c):.2f}% | "
              f"{statistics.mean(diff):+.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results/train_sparse")
    ap.add_argument("--img", default="docs/img")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    runs = load(args.results)
    if not runs:
        sys.exit(f"plot_sparse: no run files in {args.results} (examples/train/sparse_runs.sh)")
    if args.markdown:
        markdown(runs)
    else:
        plot(runs, args.img)


if __name__ == "__main__":
    main()
