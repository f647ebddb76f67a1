#!/usr/bin/env python3
"""Time per iteration of dense vs --scheme hybrid from the runs of hybrid_runs.sh.

    python3 examples/train/plot_hybrid.py [RESULTS_DIR[,DIR...]] [PNG] [--markdown]
    python3 examples/train/plot_hybrid.py [RESULTS_DIR] --overlap-markdown

Time per iteration = the epoch's wall time (evaluation of the test split included, the
same for both schemes) / steps. "hybrid" is Poseidon's plan (the reconstruction GEMM
ignored, --gemm-us 0), "calibrated" the plan with the GEMM cost measured at plan time.
Several comma-separated directories (repetitions of the time runs) give medians.
--markdown prints the tables used in docs/hybrid.md;
--overlap-markdown the overlap table (ovl_* runs: medians over the repetitions).
"""
import glob
import json
import math
import os
import re
import sys


def load(results):
    """Medians over the comma-separated directories in `results` (ms; the plan of the first)."""
    reps = [load_one(d) for d in results.split(",")]
    out = {}
    for key in reps[0]:
        ms = sorted(r[key]["ms"] for r in reps if key in r)
        out[key] = dict(reps[0][key], ms=ms[len(ms) // 2], reps=len(ms))
    return out


def load_one(results):
    out = {}
    for path in glob.glob(os.path.join(results, "time_*.json")):
        m = re.match(r"time_(dense|hybrid|calibrated)_g(\d+)_p(\d+)_b(\d+)\.json",
                     os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            run = json.load(f)
        steps = math.ceil(run["config"]["train_samples"] / run["config"]["global_batch"])
        e = run["epochs"][0]
        out[(m[1], int(m[2]), int(m[3]), int(m[4]))] = {
            "ms": 1e3 * e["seconds"] / steps, "steps": steps,
            "mb": sum(e["bytes_sent_per_rank"]) / len(e["bytes_sent_per_rank"]) / steps / 1e6,
            "sfb": sfb_layers(path[:-len(".json")] + ".txt")}
    return out


def sfb_layers(log):
    """The weight tensors the run's plan sent by SFB (from the plan the app prints)."""
    if not os.path.exists(log):
        return "?"
    with open(log) as f:
        names = re.findall(r"^\s+(\S+)\s+sfb\s+\(model", f.read(), re.M)
    return ",".join(names) if names else "none"


def overlap_markdown(results):
    runs = {}
    for path in glob.glob(os.path.join(results, "ovl_*.json")):
        m = re.match(r"ovl_(dense|hybrid)_(none|layerwise)_g(\d+)_p(\d+)_b(\d+)_r(\d+)\.json",
                     os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            run = json.load(f)
        steps = math.ceil(run["config"]["train_samples"] / run["config"]["global_batch"])
        key = (int(m[3]), int(m[5]), m[1], m[2])
        runs.setdefault(key, []).append(1e3 * run["epochs"][0]["seconds"] / steps)
    med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
    reps = max((len(v) for v in runs.values()), default=0)
    print(f"medians of {reps} runs, ms per iteration\n")
    print("| link | batch | dense after | dense overlapped | hybrid after | hybrid overlapped "
          "| hybrid: overlapped/after | hybrid overlapped / best dense |")
    print("|---|---|---|---|---|---|---|---|")
    for g, b in sorted({k[:2] for k in med}):
        v = [med.get((g, b, s, o)) for s in ("dense", "hybrid") for o in ("none", "layerwise")]
        if None in v:
            continue
        print(f"| {g} Gbit/s | {b} | {v[0]:.1f} | {v[1]:.1f} | {v[2]:.1f} | {v[3]:.1f} "
              f"| {v[3] / v[2]:.2f} | {v[3] / min(v[0], v[1]):.2f} |")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    results = args[0] if args else "docs/results/hybrid"
    png = args[1] if len(args) > 1 else "docs/img/hybrid_crossover.png"
    if "--overlap-markdown" in sys.argv:
        return overlap_markdown(results)
    runs = load(results)
    keys = sorted({k[1:] for k in runs})
    if "--markdown" in sys.argv:
        print("| link | ranks | batch | steps | dense ms/it | hybrid ms/it | hybrid/dense "
              "| dense MB/it/rank | hybrid MB/it/rank | calibrated: SFB layers | calibrated ms/it "
              "| calibrated/dense |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for g, p, b in keys:
            d, h = runs.get(("dense", g, p, b)), runs.get(("hybrid", g, p, b))
            c = runs.get(("calibrated", g, p, b))
            if d and h:
                cal = (f"{c['sfb']} | {c['ms']:.1f} | {c['ms'] / d['ms']:.2f}" if c
                       else "- | - | -")
                print(f"| {g} Gbit/s | {p} | {b} | {d['steps']} | {d['ms']:.1f} | {h['ms']:.1f} "
                      f"| {h['ms'] / d['ms']:.2f} | {d['mb']:.2f} | {h['mb']:.2f} | {cal} |")
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for g, style in ((1, "-"), (10, "--")):
        bs = sorted(b for (s, gg, p, b) in runs if s == "dense" and gg == g and p == 4)
        for scheme, color in (("dense", "C0"), ("hybrid", "C1"), ("calibrated", "C2")):
            ys = [runs[(scheme, g, 4, b)]["ms"] for b in bs if (scheme, g, 4, b) in runs]
            if ys:
                ax1.plot(bs[:len(ys)], ys, style, color=color, marker="o",
                         label=f"{scheme}, {g} Gbit/s")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("global batch (4 ranks)")
    ps = sorted({p for (s, g, p, b) in runs if g == 1 and b == 256})
    for scheme, color in (("dense", "C0"), ("hybrid", "C1"), ("calibrated", "C2")):
        ys = [runs[(scheme, 1, p, 256)]["ms"] for p in ps if (scheme, 1, p, 256) in runs]
        ax2.plot(ps[:len(ys)], ys, color=color, marker="o", label=f"{scheme}, 1 Gbit/s")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("ranks (global batch 256)")
    for ax in (ax1, ax2):
        ax.set_ylabel("time per iteration [ms]")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle("MNIST MLP 784-512-256-10: dense ring allreduce vs per-layer hybrid (SFB; "
                 "Poseidon's plan and the GEMM-calibrated plan), emulated links", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(png), exist_ok=True)
    fig.savefig(png, dpi=110)
    print("wrote", png)


if __name__ == "__main__":
    main()
