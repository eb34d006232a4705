#!/usr/bin/python3
"""Report of scripts/bench-hierarchical.sh: markdown tables (stdout) and PNG plots.

usage: hier_report.py OUT [--plots DIR]

OUT holds <rate>/<system>.r<round>[.<codec>].json and meta.txt. For every rate, system and
codec the median over rounds is kept. The inter-node link floor of a dense all-reduce
among H hosts is 2(H-1)/H * S / B (each host's link carries that much each way); a codec
with wire ratio r divides it by r. Targets are checked against the best peer of the same
run (gloo, OpenMPI default, ring and han).
"""
import argparse
import glob
import json
import os
import re
import statistics

PEERS = {"gloo": "Gloo (torch) all_reduce", "mpi_default": "OpenMPI default", "mpi_ring": "OpenMPI ring",
         "mpi_han": "OpenMPI coll/han"}


def rate_bps(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)bit", rate.lower())
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8.0 if m else None


def load(out):
    """{rate: {(system, codec): [row per round]}}"""
    data = {}
    for path in sorted(glob.glob(os.path.join(out, "*", "*.json"))):
        rate = os.path.basename(os.path.dirname(path))
        name = os.path.basename(path)[:-len(".json")]
        m = re.fullmatch(r"([a-z_]+)\.r(\d+)(?:\.(.+))?", name)
        if not m:
            continue
        system, codec = m.group(1), m.group(3) or "none"
        with open(path) as f:
            doc = json.load(f)
        for row in doc.get("results", []):
            data.setdefault(rate, {}).setdefault((system, codec), []).append(dict(row, nranks=doc.get("nranks")))
    return data


def median_row(rows):
    t = statistics.median(r["time_us"] for r in rows)
    best = min(rows, key=lambda r: abs(r["time_us"] - t))
    return dict(best, time_us=t, rounds=[r["time_us"] for r in rows])


def fmt_ms(us):
    return "%.1f ms" % (us / 1e3) if us < 1e6 else "%.3f s" % (us / 1e6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--plots", default=None)
    a = ap.parse_args()
    plots = a.plots or os.path.join(a.out, "plots")
    meta = open(os.path.join(a.out, "meta.txt")).read() if os.path.exists(os.path.join(a.out, "meta.txt")) else ""
    hosts = int(re.search(r"layout: (\d+) hosts", meta).group(1)) if "layout:" in meta else 2
    data = load(a.out)
    print("# Hierarchical all-reduce benchmark\n")
    print("```\n" + meta.strip() + "\n```\n")
    summary = {}
    for rate in sorted(data, key=lambda r: rate_bps(r) or 0):
        rows = {k: median_row(v) for k, v in data[rate].items()}
        size = next(iter(rows.values()))["bytes"]
        B = rate_bps(rate)
        floor_us = 2 * (hosts - 1) / hosts * size / B * 1e6 if B else None
        peers = {k: r for k, r in rows.items() if k[0] in PEERS}
        best_key = min(peers, key=lambda k: peers[k]["time_us"]) if peers else None
        best = peers[best_key]["time_us"] if best_key else None
        print("## %s between hosts, %d MiB fp32 per rank\n" % (rate, size >> 20))
        if floor_us:
            print("Inter-node link floor (dense): 2(H-1)/H x S / B = %s.%s\n" %
                  (fmt_ms(floor_us), " Best peer: %s (%s)." % (PEERS[best_key[0]], fmt_ms(best)) if best else ""))
        print("| system | codec | algorithm | time (median) | rounds | codec ratio r | vs best peer | vs flat, same codec | time / floor(r) |")
        print("|---|---|---|---:|---|---:|---:|---:|---:|")
        order = sorted(rows, key=lambda k: (k[0] not in PEERS, k[1] != "none", k[1], k[0]))
        for k in order:
            r = rows[k]
            # The codec's compression ratio, as the flat path measures it (hierarchical sends
            # fewer bytes per rank than any flat path, so its own ratio is not the codec's).
            flat_same = rows.get(("gw_flat", k[1]))
            ratio = (flat_same or r).get("ratio", 1.0) or 1.0
            flat = rows.get(("gw_flat", k[1]))
            vs_flat = "%.2fx" % (flat["time_us"] / r["time_us"]) if k[0] in ("gw_hier", "gw_auto") and flat else "-"
            vs_best = "%.2fx" % (best / r["time_us"]) if best else "-"
            fl = "%.2f" % (r["time_us"] / (floor_us / ratio)) if floor_us else "-"
            label = PEERS.get(k[0], "gradwire " + k[0][3:])
            print("| %s | %s | %s | %s | %s | %.2f | %s | %s | %s |" % (
                label, k[1], r.get("algo", "-"), fmt_ms(r["time_us"]), ", ".join("%.0f" % (x / 1e3) for x in r["rounds"]),
                ratio, vs_best, vs_flat, fl))
        print()
        summary[rate] = (rows, best, floor_us)
    # Targets (Deliver 4), at the slowest rate measured (1 Gbit/s in the default run).
    if summary:
        rate = min(summary, key=lambda r: rate_bps(r) or 0)
        rows, best, floor_us = summary[rate]
        print("## Targets (%s)\n" % rate)
        print("| target | measured | met |\n|---|---|---|")
        h = rows.get(("gw_hier", "none"))
        if h and floor_us:
            x = h["time_us"] / floor_us
            print("| dense hierarchical within 1.15x of the link floor | %s against %s: %.3fx | %s |" %
                  (fmt_ms(h["time_us"]), fmt_ms(floor_us), x, "yes" if x <= 1.15 else "**no**"))
        for codec, goal, label in (("qsgd:bits=8", 3.5, "qsgd 8-bit"), ("topk:ratio=0.01,ef=1", 10.0, "topk 1% + EF")):
            h = rows.get(("gw_hier", codec))
            if h and best:
                x = best / h["time_us"]
                print("| %s hierarchical >= %.1fx faster than the best peer | %s: %.2fx | %s |" %
                      (label, goal, fmt_ms(h["time_us"]), x, "yes" if x >= goal else "**no**"))
        for (system, codec), h in sorted(rows.items()):
            flat = rows.get(("gw_flat", codec))
            if system in ("gw_hier", "gw_auto") and flat:
                x = flat["time_us"] / h["time_us"]
                what = "hierarchical" if system == "gw_hier" else "default policy (ran %s)" % h.get("algo", "?")
                print("| %s at least as fast as flat, %s | %s against %s: %.2fx | %s |" %
                      (what, codec, fmt_ms(h["time_us"]), fmt_ms(flat["time_us"]), x, "yes" if x >= 1.0 else "**no**"))
        print()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plots)")
        return
    os.makedirs(plots, exist_ok=True)
    for rate, (rows, best, floor_us) in summary.items():
        order = sorted(rows, key=lambda k: (k[1] != "none", k[1], k[0] not in PEERS, k[0]))
        labels = [("%s" % PEERS.get(k[0], k[0].replace("gw_", "gradwire "))) + ("" if k[1] == "none" else "\n" + k[1])
                  for k in order]
        times = [rows[k]["time_us"] / 1e3 for k in order]
        colors = ["#999999" if k[0] in PEERS else {"gw_flat": "#1f77b4", "gw_hier": "#d62728"}.get(k[0], "#2ca02c")
                  for k in order]
        fig, ax = plt.subplots(figsize=(max(8, len(order) * 0.9), 4.5))
        ax.bar(range(len(order)), times, color=colors)
        for i, t in enumerate(times):
            ax.text(i, t, "%.0f" % t, ha="center", va="bottom", fontsize=8)
        if floor_us:
            ax.axhline(floor_us / 1e3, color="k", ls="--", lw=1, label="dense link floor %.0f ms" % (floor_us / 1e3))
            ax.legend()
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")  # coll/han takes seconds; the compressed rows tens of ms
        ax.set_ylabel("ms per all-reduce (median, log scale)")
        ax.set_title("%d hosts, %d MiB fp32, %s: grey peers, blue gradwire flat, red hierarchical, green default policy" %
                     (hosts, next(iter(rows.values()))["bytes"] >> 20, rate), fontsize=9)
        fig.tight_layout()
        path = os.path.join(plots, "hierarchical_%s.png" % rate)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print("plot: %s" % path)


if __name__ == "__main__":
    main()
