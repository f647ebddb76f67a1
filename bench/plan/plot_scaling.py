#!/usr/bin/python3
"""Plot scaling factor vs ranks per planner for ResNet-50 and VGG-16 from fusion_sim --json.

Usage: bench/plan/plot_scaling.py FUSION_SIM_JSON [OUTPUT_PNG]
(default output: docs/img/fusion_sim_scaling.png). Uses Debian's python3-matplotlib,
hence /usr/bin/python3.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODELS = ["resnet50", "vgg16"]
NETWORKS = ["10GbE", "25GbE", "56GbIB", "100GbIB"]
STYLE = {
    "layerwise": ("tab:gray", "o", "-"), "single": ("tab:brown", "s", "-"),
    "threshold": ("tab:olive", "^", "--"), "fusion_100mb": ("tab:pink", "v", "--"),
    "ddp": ("tab:cyan", "D", "--"), "mgwfbp": ("tab:blue", "x", "-"),
    "adafusion": ("tab:green", "+", "-"), "optimal": ("black", "*", ":"),
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "docs", "img", "fusion_sim_scaling.png")
    with open(sys.argv[1]) as f:
        records = json.load(f)
    fig, axes = plt.subplots(len(MODELS), len(NETWORKS), figsize=(18, 8.5), sharex=True, sharey=True)
    for r, model in enumerate(MODELS):
        for c, network in enumerate(NETWORKS):
            ax = axes[r][c]
            for planner, (color, marker, line) in STYLE.items():
                pts = sorted((x["ranks"], x["scaling_factor"]) for x in records
                             if x["model"] == model and x["network"] == network and x["planner"] == planner)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker,
                            linestyle=line, label=planner, markersize=5)
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1.02)
            ax.grid(True, alpha=0.3)
            ax.set_title("%s, %s" % (model, network))
            if r == len(MODELS) - 1:
                ax.set_xlabel("ranks")
            if c == 0:
                ax.set_ylabel("scaling factor (OSF Eq. 3)")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.suptitle("fusion_sim: simulated scaling factor per fusion planner (ring allreduce, V100-class GPU)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=90)
    print("wrote", out)


if __name__ == "__main__":
    main()
