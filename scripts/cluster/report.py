#!/usr/bin/python3
"""Turns perf-tool -J files into a markdown report and PNG plots.

usage: report.py PATH... [--ranks N] [--plots DIR] [--prefix NAME]

Each PATH is a scripts/bench-emulated.sh output directory (<rate>/<system>.r<round>.json,
rate in tbf syntax: 1gbit, 10gbit, "none" for unshaped veth, and meta.txt), any other
directory (its *.json), or a -J file of allreduce_perf, mpi_allreduce_perf or
perf/gloo_allreduce_perf.py. A loose file's system comes from its name when that is one of
the systems below (gw_auto.json, mpi_ring.r1.json), else from its tool; its link rate from
its "link_gbps" (allreduce_perf --link-gbps), else "link rate not given". For every system,
codec and size the median round is kept (rounds: -R of bench-emulated). Prints markdown to stdout
and writes plots into DIR (default OUT/plots, or ./plots for loose files): time against
size, speedup over the best peer, and achieved time against the link floor
2(p-1)/p * S / (r * B), with r the measured compression ratio and B the link rate. Columns
that allreduce_perf records (vs dense, its link floor, the running-sum error) are printed
when the files have them.
"""
import argparse
import glob
import json
import os
import re
import sys

PEERS = ["gloo", "mpi_default", "mpi_ring", "mpi"]
PEER_LABEL = {"gloo": "Gloo (torch) all_reduce", "mpi_default": "OpenMPI default", "mpi_ring": "OpenMPI ring",
              "mpi": "OpenMPI MPI_Allreduce"}
SYSTEMS = PEERS + ["gw_dense", "gw_auto", "gw_forced"]
TOOL_SYSTEM = {"mpi_allreduce_perf": "mpi", "gloo_allreduce_perf": "gloo", "allreduce_perf": "gw_auto"}


def rate_bps(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)bit", rate.lower())
    if not m:
        return None
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8.0  # bytes per second


def rate_label(rate):
    b = rate_bps(rate)
    if b is not None:
        return "%g Gbit/s" % (b * 8 / 1e9)
    return "unshaped veth" if rate == "none" else "link rate not given"


def rate_of_doc(doc):
    g = doc.get("link_gbps")
    if isinstance(g, (int, float)) and g > 0:
        mbit = g * 1e3
        return ("%dmbit" % mbit) if mbit == int(mbit) else ("%.6fgbit" % g).rstrip("0")
    return "unknown"


def input_files(paths):
    """[(rate or None, system or None, path, from_layout)]"""
    files = []
    for path in paths:
        if os.path.isdir(path):
            layout = sorted(glob.glob(os.path.join(path, "*", "*.r*.json")))
            if layout:
                for f in layout:
                    files.append((os.path.basename(os.path.dirname(f)),
                                  re.sub(r"\.r\d+\.json$", "", os.path.basename(f)), f, True))
                continue
            found = sorted(glob.glob(os.path.join(path, "*.json")))
            if not found:
                print("report: no JSON files in %s" % path, file=sys.stderr)
            files.extend((None, None, f, False) for f in found)
        elif os.path.isfile(path):
            files.append((None, None, path, False))
        else:
            sys.exit("report: %s: no such file or directory" % path)
    return files


def load(paths):
    """({rate: {series: {bytes: row}}}, [nranks of each file]), series = (system, codec);
    the median round's row."""
    data = {}
    nranks = []
    entries = []
    for rate, system, path, from_layout in input_files(paths):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit("report: %s: %s" % (path, e))
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            sys.exit("report: %s: not a perf-tool -J file (no \"results\" list)" % path)
        tool = doc.get("tool", "")
        if tool == "sparse_allgather_perf":
            print("report: %s: sparse all-gather results are not all-reduce results; skipped" % path, file=sys.stderr)
            continue
        if rate is None:
            rate = rate_of_doc(doc)
        if system is None:
            name = re.sub(r"(\.r\d+)?\.json$", "", os.path.basename(path))
            system = name if name in SYSTEMS else TOOL_SYSTEM.get(tool, tool or name)
        if "nranks" in doc:
            nranks.append(doc["nranks"])
        entries.append((rate, system, doc, from_layout))
    # Loose files that do not say their link rate join the one rate the others give, if one.
    given = {rate for rate, _, _, from_layout in entries if not from_layout and rate != "unknown"}
    if len(given) == 1:
        only = given.pop()
        entries = [(only if (rate == "unknown" and not fl) else rate, system, doc, fl) for rate, system, doc, fl in entries]
    # A layout run with gradwire dense files takes its dense rows from them; the dense
    # reference rows allreduce_perf adds to the codec runs are then left out.
    dense_files = {rate for rate, system, _, from_layout in entries if system == "gw_dense" and from_layout}
    for rate, system, doc, from_layout in entries:
        for row in doc["results"]:
            codec = row.get("codec", "none")
            if system in PEERS or system == "gw_dense":
                key = (system, "none")
            elif codec == "none" and system.startswith("gw_"):
                if from_layout and rate in dense_files:
                    continue
                key = ("gw_dense", "none")
            else:
                key = (system, codec)
            data.setdefault(rate, {}).setdefault(key, {}).setdefault(row["bytes"], []).append(row)
    # The median round of each (an even count: the faster of the middle two), with every
    # round's time kept for the report.
    for rate in data:
        for key, series in data[rate].items():
            for b, rows in series.items():
                rows.sort(key=lambda r: r["time_us"])
                pick = dict(rows[(len(rows) - 1) // 2])
                pick["round_times_us"] = [r["time_us"] for r in rows]
                series[b] = pick
    return data, nranks


def series_label(key):
    system, codec = key
    if system in PEER_LABEL:
        return PEER_LABEL[system]
    if system == "gw_dense":
        return "gradwire dense"
    if system == "gw_auto":
        return "gradwire %s" % codec
    if system == "gw_forced":
        return "gradwire %s, always compressed" % codec
    return "%s %s" % key


def order(keys):
    rank = {"gloo": 0, "mpi_default": 1, "mpi_ring": 2, "mpi": 2.5, "gw_dense": 3, "gw_auto": 4, "gw_forced": 5}
    return sorted(keys, key=lambda k: (rank.get(k[0], 9), k[1]))


def human(nbytes):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div:
            v = nbytes / div
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.1f %s" % (v, unit))
    return "%d B" % nbytes


def fmt_time(us):
    if us >= 1e6:
        return "%.3f s" % (us / 1e6)
    if us >= 1e3:
        return "%.1f ms" % (us / 1e3)
    return "%.0f us" % us


def floor_us(nbytes, p, ratio, bps):
    if bps is None or not ratio:
        return None
    return 2.0 * (p - 1) / p * nbytes / (ratio * bps) * 1e6


def best_peer(series, nbytes):
    best = None
    for k in PEERS:
        row = series.get((k, "none"), {}).get(nbytes)
        if row and (best is None or row["time_us"] < best[1]["time_us"]):
            best = (k, row)
    return best


def headline(rate, series, p, out):
    bps = rate_bps(rate)
    sizes = sorted({b for s in series.values() for b in s})
    if not sizes:
        return
    big = sizes[-1]
    peer = best_peer(series, big)
    out.append("")
    out.append("#### %s, %d ranks, %s fp32 per rank" % (rate_label(rate), p, human(big)))
    out.append("")
    fl = floor_us(big, p, 1.0, bps)
    if fl:
        out.append("Link floor (uncompressed): %s. Best peer: %s, %s." % (
            fmt_time(fl), PEER_LABEL[peer[0]] if peer else "-", fmt_time(peer[1]["time_us"]) if peer else "-"))
        out.append("")
    rows = [(key, series[key][big]) for key in order(series) if big in series[key]]

    def has(k):
        return any(r.get(k) is not None for _, r in rows)

    # allreduce_perf's own columns, when the files have them
    extra = []
    if has("vs_dense"):
        extra.append(("vs dense (same run)", lambda r: "%.2fx" % r["vs_dense"] if r.get("vs_dense") is not None else "-"))
    if has("link_floor_us"):
        extra.append(("link floor (tool)", lambda r: fmt_time(r["link_floor_us"]) if r.get("link_floor_us") is not None else "-"))
    if has("sum_relerr"):
        steps = max((r.get("ef_steps") or 0) for _, r in rows)
        extra.append(("err after %d steps (running sum)" % steps,
                      lambda r: "%.1e" % r["sum_relerr"] if r.get("sum_relerr") is not None else "-"))
    out.append("| system | algorithm | time | busbw GB/s | wire/rank | ratio r | encode / transfer / decode | relerr | "
               + "".join(name + " | " for name, _ in extra) + "speedup over best peer | time / link floor(r) |")
    out.append("|---|---|---:|---:|---:|---:|---|---:|" + "---:|" * len(extra) + "---:|---:|")
    for key, row in rows:
        ratio = row.get("ratio", 1.0) or 1.0
        fl = floor_us(big, p, ratio, bps)
        split = "-"
        if "encode_us" in row:
            split = "%s / %s / %s" % (fmt_time(row["encode_us"]), fmt_time(row["transfer_us"]), fmt_time(row["decode_us"]))
        wire = row.get("wire_bytes")
        out.append("| %s | %s | %s | %.3f | %s | %s | %s | %s | %s%s | %s |" % (
            series_label(key), row.get("algo", "-"), fmt_time(row["time_us"]), row["busbw"],
            human(wire) if wire else "-", "%.2f" % ratio if "ratio" in row else "1", split,
            "%.1e" % row["relerr"] if "relerr" in row else "-",
            "".join(f(row) + " | " for _, f in extra),
            "%.2fx" % (peer[1]["time_us"] / row["time_us"]) if peer else "-",
            "%.2f" % (row["time_us"] / fl) if fl else "-"))


def all_sizes(rate, series, out):
    sizes = sorted({b for s in series.values() for b in s})
    out.append("")
    out.append("Time per call at %s, every size (best peer marked *):" % rate_label(rate))
    out.append("")
    out.append("| system | " + " | ".join(human(b) for b in sizes) + " |")
    out.append("|---|" + "---:|" * len(sizes))
    peers = {b: best_peer(series, b) for b in sizes}
    for key in order(series):
        cells = []
        for b in sizes:
            row = series[key].get(b)
            if row is None:
                cells.append("-")
                continue
            mark = "*" if peers[b] and key == (peers[b][0], "none") else ""
            cells.append(fmt_time(row["time_us"]) + mark)
        out.append("| %s | %s |" % (series_label(key), " | ".join(cells)))


def policy_check(data, out):
    """gradwire's default (gw_auto) against its own dense path, every codec, size and rate."""
    out.append("")
    out.append("### Default policy against gradwire dense")
    out.append("")
    out.append("Each cell: time of the default policy / time of gradwire dense (the median round of each), and "
               "the algorithm the default ran. Where it ran ring it chose dense and ran the dense path "
               "itself: the ratio is then run-to-run noise of the same code. Above 1.05 where it "
               "compressed is a miss.")
    worst = 0.0
    worst_dense = 0.0
    for rate in sorted(data, key=lambda r: rate_bps(r) or 1e30):
        series = data[rate]
        dense = series.get(("gw_dense", "none"), {})
        codecs = sorted(c for s, c in series if s == "gw_auto")
        sizes = sorted(dense)
        if not codecs or not sizes:
            continue
        out.append("")
        out.append("%s:" % rate_label(rate))
        out.append("")
        out.append("| codec | " + " | ".join(human(b) for b in sizes) + " |")
        out.append("|---|" + "---:|" * len(sizes))
        for codec in codecs:
            cells = []
            for b in sizes:
                row = series[("gw_auto", codec)].get(b)
                if row is None or b not in dense:
                    cells.append("-")
                    continue
                q = row["time_us"] / dense[b]["time_us"]
                if row.get("algo") == "ring":
                    worst_dense = max(worst_dense, q)
                    cells.append("%.2f ring" % q)
                else:
                    worst = max(worst, q)
                    cells.append("%.2f %s%s" % (q, row.get("algo", ""), " **miss**" if q > 1.05 else ""))
            out.append("| %s | %s |" % (codec, " | ".join(cells)))
    out.append("")
    out.append("Worst default/dense ratio where the default compressed: %.3f (%s); %s." % (
        worst, "within 5%" if worst <= 1.05 else "MISSES the 5% bound",
        "where it chose dense: %.3f (noise between two runs of the dense ring)" % worst_dense if worst_dense
        else "it never chose dense"))


def targets(data, p, out):
    rate = next((r for r in data if rate_bps(r) == 1e9 / 8), None)
    out.append("")
    out.append("### Targets (%d ranks, largest size, 1 Gbit/s)" % p)
    out.append("")
    if rate is None:
        out.append("No 1 Gbit/s run in this report.")
        return
    series = data[rate]
    sizes = sorted({b for s in series.values() for b in s})
    big = sizes[-1]
    peer = best_peer(series, big)
    fl = floor_us(big, p, 1.0, rate_bps(rate))
    out.append("| target | measured | met |")
    out.append("|---|---|---|")

    def row_of(key):
        return series.get(key, {}).get(big)

    d = row_of(("gw_dense", "none"))
    if d and peer:
        q = d["time_us"] / peer[1]["time_us"]
        out.append("| gradwire dense no slower than the best peer (within 5%%) | %s vs %s (%s): %.3fx | %s |" % (
            fmt_time(d["time_us"]), fmt_time(peer[1]["time_us"]), PEER_LABEL[peer[0]], q, "yes" if q <= 1.05 else "no"))
    if d and fl:
        q = d["time_us"] / fl
        out.append("| gradwire dense within 1.15x of the link floor | %s vs %s: %.3fx | %s |" % (
            fmt_time(d["time_us"]), fmt_time(fl), q, "yes" if q <= 1.15 else "no"))
    # Issue 15's targets: speedup over the best peer by codec and rank count, each compressed
    # row also against the link floor of its own wire bytes.
    need = {4: {"qsgd:bits=8": 3.7, "topk:ratio=0.01": 12.0, "dgc:ratio=0.001": 20.0},
            2: {"qsgd:bits=8": 3.9, "topk:ratio=0.01": 15.0}}.get(p, {})
    labels = {"qsgd:bits=8": "qsgd 8-bit", "topk:ratio=0.01": "topk 1% + EF", "dgc:ratio=0.001": "dgc 0.1% + EF"}
    for prefix, want in need.items():
        for key in order(series):
            if key[0] not in ("gw_auto", "gw_forced") or not key[1].startswith(prefix):
                continue
            if prefix != "qsgd:bits=8" and "ef=1" not in key[1]:
                continue
            r = row_of(key)
            if not (r and peer):
                continue
            s = peer[1]["time_us"] / r["time_us"]
            how = "default policy" if key[0] == "gw_auto" else "always compressed"
            out.append("| %s (%s) >= %.1fx faster than the best peer | %s (%s): %.2fx | %s |" % (
                labels[prefix], how, want, fmt_time(r["time_us"]), r.get("algo", ""), s, "yes" if s >= want else "no"))
            wire = r.get("wire_bytes")
            if wire:
                lf = wire / (rate_bps(rate))  # seconds: each rank's bytes through its own link
                q = r["time_us"] / (lf * 1e6)
                out.append("| %s (%s) within 1.25x of its link floor | %s vs %s: %.2fx | %s |" % (
                    labels[prefix], how, fmt_time(r["time_us"]), fmt_time(lf * 1e6), q, "yes" if q <= 1.25 else "no"))


def plots(data, p, pdir, prefix):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)

    rates = sorted(data, key=lambda r: rate_bps(r) or 1e30)
    os.makedirs(pdir, exist_ok=True)
    files = []
    # One colour and one marker per series, the same in every panel: tab20's dark shades,
    # then its light ones, then evenly spaced hues when there are more than 20 series.
    all_keys = order({k for r in rates for k in data[r]})
    n = len(all_keys)
    if n <= 20:
        tab20 = plt.get_cmap("tab20")
        colors = [tab20(i) for i in list(range(0, 20, 2)) + list(range(1, 20, 2))][:n]
    else:
        hsv = plt.get_cmap("hsv")
        colors = [hsv(i / n) for i in range(n)]
    markers = ["o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p", "d", "8", "H", "1", "2", "3", "4", "+"]
    style_of = {k: (colors[i], markers[i % len(markers)]) for i, k in enumerate(all_keys)}

    def color_of(key, codecs):
        del codecs  # the style is per series now
        return style_of[key]

    # 1. time against size
    fig, axes = plt.subplots(1, len(rates), figsize=(7 * len(rates), 5.5), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        series = data[rate]
        codecs = sorted({c for s, c in series if s in ("gw_auto", "gw_forced")})
        for key in order(series):
            pts = sorted(series[key].items())
            color, marker = color_of(key, codecs)
            ax.plot([b / 2**20 for b, _ in pts], [r["time_us"] / 1e3 for _, r in pts], marker=marker, color=color,
                    linestyle="--" if key[0] == "gw_forced" else "-", linewidth=1.0 if key[0] == "gw_forced" else 1.8,
                    label=series_label(key))
        bps = rate_bps(rate)
        if bps:
            sizes = sorted({b for s in series.values() for b in s})
            ax.plot([b / 2**20 for b in sizes], [floor_us(b, p, 1, bps) / 1e3 for b in sizes], ":", color="gray",
                    label="link floor, uncompressed")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size per rank (MiB, fp32)")
        ax.set_ylabel("time per all-reduce (ms)")
        ax.set_title("%d ranks, %s links" % (p, rate_label(rate)))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = os.path.join(pdir, prefix + "time_vs_size.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files.append(path)

    # 2. speedup over the best peer (when a peer ran)
    prates = [r for r in rates if any(best_peer(data[r], b) for s in data[r].values() for b in s)]
    if prates:
        fig, axes = plt.subplots(1, len(prates), figsize=(7 * len(prates), 5), squeeze=False)
        for ax, rate in zip(axes[0], prates):
            series = data[rate]
            codecs = sorted({c for s, c in series if s in ("gw_auto", "gw_forced")})
            for key in order(series):
                if not key[0].startswith("gw_"):
                    continue
                xs, ys = [], []
                for b, r in sorted(series[key].items()):
                    peer = best_peer(series, b)
                    if peer:
                        xs.append(b / 2**20)
                        ys.append(peer[1]["time_us"] / r["time_us"])
                if not xs:
                    continue
                color, marker = color_of(key, codecs)
                ax.plot(xs, ys, marker=marker, color=color, linestyle="--" if key[0] == "gw_forced" else "-",
                        linewidth=1.0 if key[0] == "gw_forced" else 1.8, label=series_label(key))
            ax.axhline(1.0, color="gray", linewidth=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            fmt = matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v)
            ax.yaxis.set_major_formatter(fmt)
            ax.yaxis.set_minor_formatter(fmt)
            ax.tick_params(axis="y", which="minor", labelsize=7)
            ax.set_xlabel("size per rank (MiB, fp32)")
            ax.set_ylabel("speedup over the best peer (x)")
            ax.set_title("%d ranks, %s links" % (p, rate_label(rate)))
            ax.grid(True, which="both", alpha=0.3)
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = os.path.join(pdir, prefix + "speedup.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)

    # 3. achieved time against the link floor for each row's compression ratio
    shaped = [r for r in rates if rate_bps(r)]
    if shaped:
        fig, axes = plt.subplots(1, len(shaped), figsize=(6.5 * len(shaped), 5.5), squeeze=False)
        for ax, rate in zip(axes[0], shaped):
            series = data[rate]
            bps = rate_bps(rate)
            codecs = sorted({c for s, c in series if s in ("gw_auto", "gw_forced")})
            lo, hi = 1e30, 0
            for key in order(series):
                xs, ys = [], []
                for b, r in sorted(series[key].items()):
                    fl = floor_us(b, p, r.get("ratio", 1.0) or 1.0, bps)
                    xs.append(fl / 1e3)
                    ys.append(r["time_us"] / 1e3)
                if not xs:
                    continue
                lo, hi = min(lo, min(xs), min(ys)), max(hi, max(xs), max(ys))
                color, marker = color_of(key, codecs)
                ax.plot(xs, ys, marker=marker, color=color, linestyle="--" if key[0] == "gw_forced" else "-",
                        linewidth=0.8, label=series_label(key))
            ax.plot([lo, hi], [lo, hi], color="gray", linewidth=0.8, label="time = link floor")
            ax.plot([lo, hi], [1.15 * lo, 1.15 * hi], ":", color="gray", linewidth=0.8, label="1.15x the floor")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("link floor 2(p-1)/p * S / (r * B) (ms)")
            ax.set_ylabel("achieved time (ms)")
            ax.set_title("%d ranks, %s links" % (p, rate_label(rate)))
            ax.grid(True, which="both", alpha=0.3)
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = os.path.join(pdir, prefix + "link_floor.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser(description="Report of perf-tool -J files (a scripts/bench-emulated.sh run, a "
                                 "directory of JSON files, or the files themselves)")
    ap.add_argument("paths", nargs="+", metavar="PATH", help="bench-emulated output dir, dir of *.json, or -J files")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--plots", default="")
    ap.add_argument("--prefix", default="emulated_", help="file name prefix of the plots")
    a = ap.parse_args()
    data, nranks = load(a.paths)
    if not data:
        sys.exit("report: no results in %s" % " ".join(a.paths))
    p = a.ranks
    if not p:
        if not nranks:
            sys.exit("report: the files do not say how many ranks ran: pass --ranks")
        p = nranks[0]
        if len(set(nranks)) > 1:
            print("report: the files ran on %s ranks; the report assumes %d (--ranks to choose)" % (
                sorted(set(nranks)), p), file=sys.stderr)
    single_dir = len(a.paths) == 1 and os.path.isdir(a.paths[0])
    title = os.path.basename(os.path.normpath(a.paths[0])) if single_dir else ", ".join(
        os.path.basename(x) for x in a.paths)
    out = ["## Results: %s" % title, ""]
    meta = os.path.join(a.paths[0], "meta.txt") if single_dir else ""
    if meta and os.path.exists(meta):
        out.append("```")
        out.extend(l.rstrip() for l in open(meta))
        out.append("```")
    for rate in sorted(data, key=lambda r: rate_bps(r) or 1e30):
        headline(rate, data[rate], p, out)
        all_sizes(rate, data[rate], out)
    policy_check(data, out)
    targets(data, p, out)
    pdir = a.plots or (os.path.join(a.paths[0], "plots") if single_dir else "plots")
    files = plots(data, p, pdir, a.prefix)
    out.append("")
    out.append("Plots: " + ", ".join(files))
    print("\n".join(out))


if __name__ == "__main__":
    main()
