#!/usr/bin/env python3
"""Accuracy against epochs and against wall time for the runs of elastic_runs.sh.

    python3 examples/train/plot_elastic.py [RESULTS_DIR] [PNG] [--markdown]

Synchronous SGD (syncP_sS.json, train_mnist --json): test accuracy of the (identical)
replicas after each epoch, wall time = cumulative epoch seconds (evaluation included).
EASGD (easgdC_sS.json, --scheme easgd --json): each client's own parameters after each of
its epochs, wall time since the start of the run (the same clock start), and the center's
accuracy at the end. --markdown prints the table used in docs/elastic.md.
"""
import glob
import json
import os
import sys


def load(results):
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        name = os.path.basename(path)[:-5]
        with open(path) as f:
            runs[name] = json.load(f)
    return runs


def curves(run):
    """[(label, epochs, accuracies, seconds)] of one run."""
    if run["config"].get("scheme") == "easgd":
        out = []
        for c in run["clients"]:
            e = [r["epoch"] for r in c["epochs"]]
            out.append((f"client {c['client']}", e, [r["test_accuracy"] for r in c["epochs"]],
                        [r["seconds"] for r in c["epochs"]]))
        return out
    t, secs = 0.0, []
    for r in run["epochs"]:
        t += r["seconds"]
        secs.append(t)
    return [("", [r["epoch"] for r in run["epochs"]],
             [r["test_accuracy"] for r in run["epochs"]], secs)]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    results = args[0] if args else "docs/results/elastic"
    png = args[1] if len(args) > 1 else "docs/img/elastic_accuracy.png"
    runs = load(results)
    if "--markdown" in sys.argv:
        print("| run | epoch 1 | epoch 2 | epoch 5 | last epoch | wall time | center (end) |")
        print("|---|---|---|---|---|---|---|")
        for name, run in runs.items():
            for label, e, acc, secs in curves(run):
                pick = lambda k: f"{100 * acc[k - 1]:.1f} %" if k <= len(acc) else "-"
                center = (f"{100 * run['server']['center_test_accuracy']:.1f} %"
                          if "server" in run else "-")
                print(f"| {name} {label} | {pick(1)} | {pick(2)} | {pick(5)} | "
                      f"{100 * acc[-1]:.1f} % ({e[-1]}) | {secs[-1]:.1f} s | {center} |")
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"sync8": "C0", "easgd2": "C1", "easgd4": "C2"}
    labelled = set()
    for name, run in runs.items():
        kind = name.split("_")[0]
        cs = curves(run)
        # one line per run: sync SGD's replicas, EASGD's mean over its clients (each client
        # at its own epoch ends: the latest of them as the time)
        n = min(len(c[1]) for c in cs)
        acc = [100 * sum(c[2][k] for c in cs) / len(cs) for k in range(n)]
        secs = [max(c[3][k] for c in cs) for k in range(n)]
        label = None if kind in labelled else {
            "sync8": "sync SGD, 8 ranks", "easgd2": "EASGD, 2 clients x 4 (client mean)",
            "easgd4": "EASGD, 4 clients x 2 (client mean)"}.get(kind, kind)
        labelled.add(kind)
        color = colors.get(kind, None)
        ax1.plot(cs[0][1][:n], acc, marker="o", ms=3, color=color, label=label)
        ax2.plot(secs, acc, marker="o", ms=3, color=color, label=label)
        if "server" in run:
            center_label = None if kind + "c" in labelled else f"{label or kind} center (end)"
            labelled.add(kind + "c")
            ax1.plot([n], [100 * run["server"]["center_test_accuracy"]], "*", ms=12, color=color)
            ax2.plot([run["server"]["seconds"]], [100 * run["server"]["center_test_accuracy"]],
                     "*", ms=12, color=color, label=center_label)
    ax1.set_xlabel("epoch")
    ax2.set_xlabel("wall time [s] (2 shared cores, emulated 1 Gbit/s between nodes)")
    for ax in (ax1, ax2):
        ax.set_ylabel("test accuracy [%]")
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.suptitle("MNIST MLP: synchronous SGD on 8 ranks vs EASGD with 2 and 4 clients")
    fig.tight_layout()
    os.makedirs(os.path.dirname(png), exist_ok=True)
    fig.savefig(png, dpi=110)
    print("wrote", png)


if __name__ == "__main__":
    main()
