#!/usr/bin/python3
"""Measured vs simulated iteration time per planner from train_sim --json files.

Usage: bench/train_sim_plot.py [-o OUTPUT_PNG] [--markdown] TRAIN_SIM_JSON...

One panel per setting (profile, network, ranks), grouped bars per planner: measured median
iteration time (solid, with the interquartile range as error bar) next to the simulator's
prediction for the same plan on the nominal network (hatched), and the prediction with the
cost fitted to the run's measured allreduces (dot). Default output:
docs/results/train_sim.png. --markdown prints the result tables and the goal summary used in
docs/benchmarks.md. Uses Debian's python3-matplotlib, hence /usr/bin/python3; --markdown
alone needs only the standard library.
"""
import argparse
import json
import os
import statistics
import sys

PLANNER_ORDER = ["layerwise", "single", "threshold", "ddp", "mgwfbp", "adafusion", "optimal",
                 "autotune"]
NETWORK_ORDER = ["10gbe", "25gbe", "100gib"]


def load(paths):
    settings = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or "settings" not in doc:
            print(f"{path}: not a train_sim --json file (a trace?), skipped", file=sys.stderr)
            continue
        for s in doc["settings"]:
            s["_file"] = os.path.basename(path)
            s["_machine"] = doc.get("machine", {})
            settings.append(s)

    def key(s):
        net = NETWORK_ORDER.index(s["network"]) if s["network"] in NETWORK_ORDER else 99
        return (s["ranks"], s["profile"], net)

    return sorted(settings, key=key)


def planners_of(s):
    by_name = {p["name"]: p for p in s["planners"]}
    order = [n for n in PLANNER_ORDER if n in by_name]
    order += [n for n in by_name if n not in order]
    return [by_name[n] for n in order]


def iqr(values):
    if len(values) < 2:
        return 0.0, 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def plot(settings, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = 3
    nrows = (len(settings) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(settings):]:
        ax.axis("off")
    for ax, s in zip(axes.flat, settings):
        ps = planners_of(s)
        xs = range(len(ps))
        meas = [p["measured_us"] / 1e3 for p in ps]
        lo_hi = [iqr([v / 1e3 for v in p["iteration_us"]]) for p in ps]
        err = [[m - lh[0] for m, lh in zip(meas, lo_hi)], [lh[1] - m for m, lh in zip(meas, lo_hi)]]
        sim = [p["sim_us"] / 1e3 for p in ps]
        fit = [p["sim_fit_us"] / 1e3 for p in ps]
        w = 0.38
        ax.bar([x - w / 2 for x in xs], meas, w, yerr=err, capsize=2, color="tab:blue",
               label="measured (median, IQR)")
        ax.bar([x + w / 2 for x in xs], sim, w, color="white", edgecolor="tab:orange",
               hatch="///", label="simulated (nominal link)")
        ax.plot([x + w / 2 for x in xs], fit, "k.", label="simulated (fitted cost)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([p["name"] for p in ps], rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("iteration (ms)")
        ax.set_title(f"{s['profile']}, {s['network']}, {s['ranks']} ranks "
                     f"(compute {s['compute_us'] / 1e3:.0f} ms)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=7, loc="upper right")
    fig.suptitle("train_sim: scheduled iterations (threads + shaped<>, 2-core VM) vs the simulator",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def markdown(settings):
    # compact: one row per setting, one column per planner
    names = [n for n in PLANNER_ORDER if any(p["name"] == n for s in settings for p in s["planners"])]
    print("Iteration time in ms, measured median / simulated (buckets):\n")
    print("| setting | compute | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for s in settings:
        ps = {p["name"]: p for p in s["planners"]}
        cells = []
        for n in names:
            p = ps.get(n)
            cells.append("-" if p is None else
                         f"{p['measured_us'] / 1e3:.1f} / {p['sim_us'] / 1e3:.1f} ({p['buckets']})")
        print(f"| {s['profile']} {s['network']} P={s['ranks']} | {s['compute_us'] / 1e3:.0f} | "
              + " | ".join(cells) + " |")
    print()

    # optimal per setting
    print("| setting | optimal: error % | non-overlapped meas. / sim. (ms) | vs layerwise meas. (sim.) "
          "| vs single meas. (sim.) | best other (ms) | autotune (ms, buckets) | IQR % |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for s in settings:
        ps = {p["name"]: p for p in s["planners"]}
        o = ps.get("optimal")
        if o is None:
            continue
        others = [(p["measured_us"], n) for n, p in ps.items() if n not in ("optimal", "autotune")]
        best = min(others) if others else None
        at = ps.get("autotune")
        print(f"| {s['profile']} {s['network']} P={s['ranks']} | {o['error_pct']:+.1f} | "
              f"{o['nonoverlap_measured_us'] / 1e3:.1f} / {o['nonoverlap_sim_us'] / 1e3:.1f} | "
              f"{fmt(o['speedup_vs_layerwise'], '.2f')} ({fmt(o['sim_speedup_vs_layerwise'], '.2f')}) | "
              f"{fmt(o['speedup_vs_single'], '.2f')} ({fmt(o['sim_speedup_vs_single'], '.2f')}) | "
              + (f"{best[1]} {best[0] / 1e3:.1f} | " if best else "- | ")
              + (f"{at['measured_us'] / 1e3:.1f} ({at['buckets']}) | " if at else "- | ")
              + f"{o['noise_iqr_pct']:.1f} |")
    print()

    # everything, folded
    print("<details><summary>Every planner and setting</summary>\n")
    print("| setting | planner | buckets | measured (ms) | IQR % | simulated (ms) | error % | "
          "non-overlapped meas. / sim. (ms) | vs layerwise meas. (sim.) | vs single meas. (sim.) | "
          "fitted-cost sim. error % |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in settings:
        tag = f"{s['profile']} {s['network']} P={s['ranks']}"
        for p in planners_of(s):
            print(f"| {tag} | {p['name']} | {p['buckets']} | {p['measured_us'] / 1e3:.2f} | "
                  f"{p['noise_iqr_pct']:.1f} | {p['sim_us'] / 1e3:.2f} | {p['error_pct']:+.1f} | "
                  f"{p['nonoverlap_measured_us'] / 1e3:.2f} / {p['nonoverlap_sim_us'] / 1e3:.2f} | "
                  f"{fmt(p['speedup_vs_layerwise'], '.2f')} ({fmt(p['sim_speedup_vs_layerwise'], '.2f')}) | "
                  f"{fmt(p['speedup_vs_single'], '.2f')} ({fmt(p['sim_speedup_vs_single'], '.2f')}) | "
                  f"{p['sim_fit_error_pct']:+.1f} |")
    print("\n</details>\n")

    # per setting: overheads, memory, fitted cost
    print("| setting | pool / rank (MiB) | peak RSS (MiB) | pools all ranks (MiB) | wrong | "
          "fitted allreduce cost | nominal ring cost | overhead median / p90 (us) | "
          "ready->queued / queued->started (us) | backward late (us) |")
    print("|---|---:|---:|---:|---:|---|---|---:|---:|---:|")
    for s in settings:
        P = s["ranks"]
        nominal_a = 2 * (P - 1) * s["alpha_us"]
        nominal_b = 2 * (P - 1) / P * s["beta_us_per_byte"] + (P - 1) / P * s["gamma_us_per_byte"]
        print(f"| {s['profile']} {s['network']} P={P} | {s['pool_bytes_per_rank'] / 2**20:.1f} | "
              f"{s['peak_rss_bytes'] / 2**20:.0f} | {s['pool_bytes_all_ranks'] / 2**20:.0f} | "
              f"{s['wrong']} | {s['fitted_startup_us']:.0f} us + {s['fitted_per_byte_us'] * 1e3:.2f} ns/B | "
              f"{nominal_a:.0f} us + {nominal_b * 1e3:.2f} ns/B | "
              f"{s['overhead_median_us']:.1f} / {s['overhead_p90_us']:.1f} | "
              f"{s['overhead_submit_median_us']:.1f} / {s['overhead_wake_median_us']:.1f} | "
              f"{s['backward_late_us']:.0f} |")
    print()

    # goals
    errors, fit_errors = [], []
    for s in settings:
        for p in s["planners"]:
            if p["name"] == "autotune":
                continue  # not one of the seven planners
            errors.append(abs(p["error_pct"]))
            fit_errors.append(abs(p["sim_fit_error_pct"]))
    print(f"(a) |error| over {len(errors)} planner x setting cells: median "
          f"{statistics.median(errors):.1f} %, cells within 10 %: "
          f"{sum(e <= 10 for e in errors)}; with the fitted cost: median "
          f"{statistics.median(fit_errors):.1f} %, within 10 %: {sum(e <= 10 for e in fit_errors)}")
    for net in NETWORK_ORDER:
        e = [abs(p["error_pct"]) for s in settings if s["network"] == net for p in s["planners"]
             if p["name"] != "autotune"]
        if e:
            print(f"    {net}: median |error| {statistics.median(e):.1f} % over {len(e)} cells")
    for most in (8, 16):
        e = [abs(p["error_pct"]) for s in settings for p in s["planners"]
             if p["name"] != "autotune" and p["buckets"] <= most]
        if e:
            print(f"    plans with <= {most} buckets: median |error| {statistics.median(e):.1f} % "
                  f"over {len(e)} cells, within 10 %: {sum(x <= 10 for x in e)}")
    print("(b) optimal vs every other planner (noise = larger IQR of the two, % of median):")
    for s in settings:
        ps = {p["name"]: p for p in s["planners"]}
        if "optimal" not in ps:
            continue
        o = ps["optimal"]
        losses, within = [], []
        for name, p in ps.items():
            if name in ("optimal", "autotune"):
                continue
            noise = max(o["noise_iqr_pct"], p["noise_iqr_pct"])
            slower = 100 * (o["measured_us"] / p["measured_us"] - 1)
            if slower > noise:
                losses.append(f"{name} by {slower:.1f} % (noise {noise:.1f} %)")
            elif slower > 0:
                within.append(f"{name} +{slower:.1f} % (noise {noise:.1f} %)")
        best_other = min((p["measured_us"], n) for n, p in ps.items() if n not in ("optimal",
                                                                                    "autotune"))
        line = f"    {s['profile']} {s['network']} P={s['ranks']}: "
        line += "no slower than any" if not losses else "SLOWER than " + "; ".join(losses)
        if within:
            line += " [within noise: " + ", ".join(within) + "]"
        line += f"; best other {best_other[1]} {best_other[0] / 1e3:.2f} ms vs optimal "
        line += f"{o['measured_us'] / 1e3:.2f} ms"
        for ref in ("layerwise", "single"):
            sp, ssp = o[f"speedup_vs_{ref}"], o[f"sim_speedup_vs_{ref}"]
            if ssp is not None and ssp >= 1.3:
                line += f"; vs {ref} {sp:.2f}x (sim {ssp:.2f}x) {'ok' if sp >= 1.3 else 'MISSED'}"
        if "autotune" in ps:
            a = ps["autotune"]
            slower = 100 * (a["measured_us"] / best_other[0] - 1)
            noise = max(a["noise_iqr_pct"], ps[best_other[1]]["noise_iqr_pct"])
            verdict = "best" if slower <= 0 else ("within noise" if slower <= noise else "SLOWER")
            line += (f"; autotune {a['measured_us'] / 1e3:.2f} ms ({slower:+.1f} % vs best other, "
                     f"noise {noise:.1f} %: {verdict})")
        print(line)
    ov = [s["overhead_median_us"] for s in settings]
    print(f"(c) scheduler overhead per bucket, median per setting: {min(ov):.1f}-{max(ov):.1f} us "
          f"(median of medians {statistics.median(ov):.1f} us)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--output")
    ap.add_argument("--markdown", action="store_true", help="print tables instead of plotting")
    a = ap.parse_args()
    settings = load(a.files)
    if not settings:
        sys.exit("no settings in the input")
    if a.markdown:
        markdown(settings)
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plot(settings, a.output or os.path.join(root, "docs", "results", "train_sim.png"))


if __name__ == "__main__":
    main()
