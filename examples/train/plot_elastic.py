#!/usr/bin/env python3
"""Accuracy against epochs and against wall time for the runs of elastic_runs.sh.

    python3 examples/train/plot_elastic.py [RESULTS_DIR] [PNG] [--markdown | --summary]

Synchronous SGD (syncP_sS.json, train_mnist --json): test accuracy of the (identical)
replicas after each epoch, wall time = cumulative epoch seconds (evaluation included).
EASGD (easgdC_sS.json, --scheme easgd --json; easgdsyncC_sS.json with --elastic-mode sync,
which has no server and no center at the end): each client's own parameters after each of
its epochs, wall time since the start of the run (the same clock start), and the center's
accuracy over the run (the server's `center_curve`: a copy per job epoch of pushes, dashed)
and at the end (a star). --summary prints the table used in docs/elastic.md, --center the
center's curve against the client mean, --markdown the per-client table behind it.
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


def summary(runs):
    """The table of docs/elastic.md: per run, the mean over its clients (sync SGD: its
    replicas) after epochs 1, 2, 5 and 10, the first epoch where that mean reaches 93 %, the
    wall time when the slowest client finished the last epoch, the center at the end."""
    names = {"sync8": "sync SGD 8", "easgd2": "EASGD 2 x 4", "easgd4": "EASGD 4 x 2",
             "easgdsync2": "sync EASGD 2 x 4"}
    print("| run | epoch 1 | epoch 2 | epoch 5 | epoch 10 | 93 % first at | wall time "
          "| center at end |")
    print("|---|---|---|---|---|---|---|---|")
    order = ["sync8", "easgd2", "easgd4", "easgdsync2"]
    for name in sorted(runs, key=lambda n: (order.index(n.split("_")[0])
                                            if n.split("_")[0] in order else 9, n)):
        kind, seed = name.split("_")[0], name.split("_")[-1].lstrip("s")
        cs = curves(runs[name])
        n = min(len(c[1]) for c in cs)
        acc = [100 * sum(c[2][k] for c in cs) / len(cs) for k in range(n)]
        secs = [max(c[3][k] for c in cs) for k in range(n)]
        pick = lambda k: f"{acc[k - 1]:.1f}" if k <= n else "-"
        first = next((k for k in range(n) if acc[k] >= 93.0), None)
        at = f"epoch {first + 1}, {secs[first]:.1f} s" if first is not None else "never"
        run = runs[name]
        center = (f"{100 * run['server']['center_test_accuracy']:.1f}" if "server" in run
                  else "-")
        print(f"| {names.get(kind, kind)}, seed {seed} | {pick(1)} | {pick(2)} | {pick(5)} "
              f"| {pick(10)} | {at} | {secs[-1]:.1f} s | {center} |")


def center_table(runs):
    """Per asynchronous EASGD run: the center after each job epoch of pushes (accuracy, wall
    time; `epochs`: the training the center has seen) next to the client mean after the
    nearest whole epoch."""
    print("| run | epochs seen | center accuracy | at | client mean | at |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, run in runs.items():
        points = run.get("server", {}).get("center_curve")
        if not points:
            continue
        cs = curves(run)
        n = min(len(c[1]) for c in cs)
        acc = [100 * sum(c[2][k] for c in cs) / len(cs) for k in range(n)]
        secs = [max(c[3][k] for c in cs) for k in range(n)]
        for p in points:
            k = round(p["epochs"])
            mean = f"{acc[k - 1]:.1f} % | {secs[k - 1]:.1f} s" if 1 <= k <= n else "- | -"
            print(f"| {name} | {p['epochs']:.2f} | {100 * p['test_accuracy']:.1f} % "
                  f"| {p['seconds']:.1f} s | {mean} |")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    results = args[0] if args else "docs/results/elastic"
    png = args[1] if len(args) > 1 else "docs/img/elastic_accuracy.png"
    runs = load(results)
    if "--summary" in sys.argv:
        return summary(runs)
    if "--center" in sys.argv:
        return center_table(runs)
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
    colors = {"sync8": "C0", "easgd2": "C1", "easgd4": "C2", "easgdsync2": "C3"}
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
            "easgd4": "EASGD, 4 clients x 2 (client mean)",
            "easgdsync2": "sync EASGD, 2 clients x 4, no server (client mean)"}.get(kind, kind)
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
            # the first copy is the initial center (no training seen): left out
            points = [p for p in run["server"].get("center_curve", []) if p["epochs"] > 0]
            if points:  # the center over the run (older results have only the end)
                ax1.plot([p["epochs"] for p in points], [100 * p["test_accuracy"] for p in points],
                         "--", lw=1, color=color)
                ax2.plot([p["seconds"] for p in points], [100 * p["test_accuracy"] for p in points],
                         "--", lw=1, color=color)
    ax1.set_xlabel("epoch")
    ax2.set_xlabel("wall time [s] (2 shared cores, emulated 1 Gbit/s between nodes)")
    for ax in (ax1, ax2):
        ax.set_ylabel("test accuracy [%]")
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.suptitle("MNIST MLP: synchronous SGD on 8 ranks vs EASGD with 2 and 4 clients "
                 "(and its synchronous variant)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(png), exist_ok=True)
    fig.savefig(png, dpi=110)
    print("wrote", png)


if __name__ == "__main__":
    main()
