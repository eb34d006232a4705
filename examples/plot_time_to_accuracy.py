#!/usr/bin/env python3
"""Reads the runs of scripts/bench-training-emulated.sh (one JSON per rate and configuration,
named RATE-CONFIG.json) and prints, per rate, a markdown table: the training time each
configuration took to reach DDP-over-gloo's final accuracy (and that less half a point), its
speed-up over DDP, the accuracy it had after half of DDP's training time, and its final
accuracy. Writes one plot per rate (accuracy against training time), time-to-accuracy-RATE.png,
next to the runs.

    examples/plot_time_to_accuracy.py DIR
"""
import glob
import json
import os
import sys


def label(r):
    c = r["codec"]
    if c == "gloo":
        return "DDP over gloo"
    if c == "torch_fp16":
        return "torch fp16_compress_hook"
    if c.startswith("powersgd"):
        return "torch PowerSGD rank %s" % c.partition("=")[2]
    return "gradwire %s%s%s" % (c, " + EF" if r["ef"] else "", ", hook momentum" if r.get("hook_momentum") else "")


def time_to(curve, target, key):
    """Training time of the first evaluation at or past the target (None: never)."""
    for p in curve:
        if p[key] >= target:
            return p["train_s"]
    return None


def value_at(curve, t, key):
    """The last evaluation made by training time t (None: none yet)."""
    seen = [p[key] for p in curve if p["train_s"] <= t]
    return seen[-1] if seen else None


def main():
    d = sys.argv[1]
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        rate = os.path.basename(path).split("-", 1)[0]
        with open(path) as f:
            runs.setdefault(rate, []).append(json.load(f))
    if not runs:
        raise SystemExit("no runs in %s" % d)
    for rate, rs in sorted(runs.items()):
        base = next((r for r in rs if r["codec"] == "gloo"), None)
        if base is None:
            print("%s: no DDP-over-gloo run to compare with" % rate)
            continue
        key = base["metric"]
        if key != "test_accuracy":
            raise SystemExit("time to accuracy needs an image task (test_accuracy), not %s" % key)
        target = base["final"][key]
        t_base = time_to(base["curve"], target, key)
        half = base["train_s"] / 2
        print("### %s links, %d ranks: %s, %d parameters, %d steps of global batch %d\n" % (
            rate, base["ranks"], base["data"], base["params"], base["planned_steps"], base["global_batch"]))
        print("Target: DDP over gloo's final test accuracy, %.2f %%; half of DDP's training time: %.1f s.\n"
              % (100 * target, half))
        print("| configuration | time to %.2f %% | vs DDP | time to %.2f %% | accuracy at %.0f s | final accuracy "
              "| training time | step (median) | wire / dense |" % (100 * target, 100 * target - 0.5, half))
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        order = sorted(rs, key=lambda r: (r["codec"] != "gloo", r["train_s"]))
        for r in order:
            t = time_to(r["curve"], target, key)
            t5 = time_to(r["curve"], target - 0.005, key)
            at = value_at(r["curve"], half, key)
            print("| %s | %s | %s | %s | %s | %.2f %% | %.1f s | %.0f ms | %s |" % (
                label(r), "%.1f s" % t if t is not None else "not reached",
                "%.2fx" % (t_base / t) if t and t_base else "-", "%.1f s" % t5 if t5 is not None else "not reached",
                "%.2f %%" % (100 * at) if at is not None else "-", 100 * r["final"][key], r["train_s"],
                r["step_ms_median"], "%.2f" % r["wire_fraction"] if "wire_fraction" in r else "-"))
        print()
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("(matplotlib is missing: no plot)\n")
            continue
        fig, ax = plt.subplots(figsize=(8, 5))
        colors = plt.get_cmap("tab10")
        for i, r in enumerate(order):
            xs = [p["train_s"] for p in r["curve"]]
            ys = [100 * p[key] for p in r["curve"]]
            ax.plot(xs, ys, marker="o", markersize=3, color=colors(i % 10), label=label(r),
                    linewidth=2.5 if r["codec"] == "gloo" else 1.5)
        ax.axhline(100 * target, color="grey", linestyle="--", linewidth=1, label="DDP's final accuracy")
        lo = min(100 * p[key] for r in rs for p in r["curve"][len(r["curve"]) // 3:])
        ax.set_ylim(max(lo - 1, 0), 100 * max(p[key] for r in rs for p in r["curve"]) + 0.5)
        ax.set_xlabel("training time, s (evaluations excluded)")
        ax.set_ylabel("test accuracy, %")
        ax.set_title("%s, %d ranks, %s links" % (base["data"].split(":")[0], base["ranks"], rate))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        png = os.path.join(d, "time-to-accuracy-%s.png" % rate)
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        print("plot: %s\n" % png)


if __name__ == "__main__":
    main()
