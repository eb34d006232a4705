#!/usr/bin/env python3
"""Validates the simulator against real runs on this machine.

For each (ranks, algorithm, codec, size) it times the all-reduce with perf/allreduce_perf
(real UCX processes, the algorithm forced) and replays the same call with tools/sim's gw_sim
on a cost model measured by perf/calibrate, with the ranks sharing this machine's cores, and
prints both times and their ratio, then the median and worst ratio per algorithm.

Usage: tools/sim/validate.py BUILD_DIR MODEL_FILE [--ranks 2,3,4,8,16,32] [--json OUT]
                             [--quick] [--within X] [--algos A,B]
--quick: two cases (a smoke test); --within X: exit 1 when a ratio is outside [1/X, X].
(UCX_TLS should name the transport the model was measured over.)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = [  # algorithm, codec, bytes
    ("ring", None, 4096),
    ("ring", None, 1 << 20),
    ("recursive_doubling", None, 4096),
    ("recursive_doubling", None, 64 << 10),
    ("scatter_reduce", "qsgd:bits=8", 64 << 10),
    ("scatter_reduce", "qsgd:bits=8", 1 << 20),
    ("halving_doubling", "qsgd:bits=8", 64 << 10),
    ("halving_doubling", "qsgd:bits=8", 1 << 20),
    ("sparse_allgather", "topk:ratio=0.01", 1 << 20),
    ("rabenseifner", None, 1 << 20),
    ("sparse_doubling", "topk:ratio=0.01", 1 << 20),
]


def measure(build, p, algo, codec, size):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        # Enough calls that the first ones (page faults, wire-up) do not weigh: ~0.2-1 s a run.
        base = 4000 if size <= 4096 else (800 if size <= (64 << 10) else 120)
        iters = str(max(20, base * 2 // max(2, p)))
        cmd = [os.path.join(build, "perf", "allreduce_perf"), "--np", str(p), "-b", str(size), "-e", str(size),
               "-n", iters, "--algo", algo, "--ef-steps", "0", "-J", out]
        if codec:
            cmd += ["--codec", codec, "--no-dense-reference"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(" ".join(cmd) + " failed:\n" + r.stdout[-2000:])
        row = json.load(open(out))["results"][0]
        return row["time_median_us"] * 1e-6


def simulate(build, model, p, algo, codec, size):
    cmd = [os.path.join(build, "tools", "sim", "gw_sim"), "--model", model, "--ranks", str(p), "--bytes", str(size),
           "--algo", algo, "--json"]
    if codec:
        cmd += ["--codec", codec]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, check=True)
    row = json.loads(r.stdout.strip().splitlines()[-1])
    return row["sim_s"], row["closed_form_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--ranks", default="2,3,4,8,16,32")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--within", type=float, default=0)
    ap.add_argument("--algos", help="only these algorithms (comma-separated)")
    a = ap.parse_args()
    cases = [CASES[0], CASES[6]] if a.quick else CASES
    if a.algos:
        cases = [c for c in cases if c[0] in a.algos.split(",")]
    rows = []
    print("%-19s %-16s %5s %9s %12s %12s %12s %7s" % ("algorithm", "codec", "ranks", "bytes", "measured_us", "sim_us",
                                                     "closed_us", "sim/me"))
    for p in [int(x) for x in a.ranks.split(",")]:
        for algo, codec, size in cases:
            t = measure(a.build, p, algo, codec, size)
            s, c = simulate(a.build, a.model, p, algo, codec, size)
            rows.append(dict(algo=algo, codec=codec or "", ranks=p, bytes=size, measured_s=t, sim_s=s, closed_s=c))
            print("%-19s %-16s %5d %9d %12.1f %12.1f %12.1f %7.2f" % (algo, codec or "-", p, size, t * 1e6, s * 1e6,
                                                                       c * 1e6, s / t), flush=True)
    print("\n# per algorithm: median and worst of sim/measured over the rank counts and sizes")
    for algo in sorted({r["algo"] for r in rows}):
        q = [r["sim_s"] / r["measured_s"] for r in rows if r["algo"] == algo]
        worst = max(q, key=lambda x: max(x, 1 / x))
        print("%-19s median %.2f  worst %.2f  (%d cases)" % (algo, statistics.median(q), worst, len(q)))
    allq = [r["sim_s"] / r["measured_s"] for r in rows]
    inside = sum(1 for x in allq if 0.5 <= x <= 2.0)
    print("all: median %.2f, %d of %d within 2x" % (statistics.median(allq), inside, len(allq)))
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)
    if a.within > 0:
        bad = [x for x in allq if not 1 / a.within <= x <= a.within]
        if bad:
            print("FAILED: %d ratio(s) outside [1/%g, %g]" % (len(bad), a.within, a.within))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
