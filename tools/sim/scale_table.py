#!/usr/bin/env python3
"""The simulated all-reduce times at scale for docs/performance.md ("Simulation at scale").

Replays every algorithm with tools/sim's gw_sim at 64, 1024 and 16384 ranks and 4 KiB, 1 MiB
and 64 MiB on one cost model, and prints a markdown table (milliseconds) with, per column,
what the policy chooses from its closed forms and whether the replay agrees that it is the
fastest of the algorithms the policy weighs.

Usage: tools/sim/scale_table.py BUILD_DIR MODEL_FILE [--ranks 64,1024,16384] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys

SIZES = [("4 KiB", 4096), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20)]
ROWS = [  # label, algorithm, codec
    ("gradwire ring (dense)", "ring", None),
    ("gradwire recursive doubling (dense)", "recursive_doubling", None),
    ("gradwire Rabenseifner (dense)", "rabenseifner", None),
    ("NCCL ring (dense, same model)", "nccl_ring", None),
    ("NCCL double binary tree (dense, same model)", "nccl_tree", None),
    ("halving-doubling, qsgd 8-bit", "halving_doubling", "qsgd:bits=8"),
    ("scatter-reduce, qsgd 8-bit", "scatter_reduce", "qsgd:bits=8"),
    ("halving-doubling, qsgd 4-bit", "halving_doubling", "qsgd:bits=4"),
    ("sparse all-gather, top-k 1%", "sparse_allgather", "topk:ratio=0.01"),
    ("sparse doubling, top-k 1% (disjoint indices)", "sparse_doubling", "topk:ratio=0.01"),
    ("scatter-reduce, top-k 1%", "scatter_reduce", "topk:ratio=0.01"),
    ("halving-doubling, top-k 1%", "halving_doubling", "topk:ratio=0.01"),
]


def gather_fits(p, size):
    """Whether top-k 1%'s k p < n (CodecSpec::k_for): the policy weighs the sparse all-gather only then."""
    n = size // 4
    k = min(n, max(1, int(0.01 * n + 0.5)))
    return k * p < n


def run(build, model, algo, codec, p, size):
    cmd = [os.path.join(build, "tools", "sim", "gw_sim"), "--model", model, "--ranks", str(p), "--bytes", str(size),
           "--algo", algo, "--json", "--max-in-flight", str(32 << 20)]
    if codec:
        cmd += ["--codec", codec]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=3600)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--ranks", default="64,1024,16384")
    ap.add_argument("--json")
    a = ap.parse_args()
    ranks = [int(x) for x in a.ranks.split(",")]
    res = {}
    for label, algo, codec in ROWS:
        for p in ranks:
            for _, size in SIZES:
                # NCCL's ring is gradwire's ring in 512 KiB slices instead of 1 MiB chunks: where a
                # segment (bytes / ranks) is no larger than a slice the two schedules are the same.
                if algo == "nccl_ring" and size // p <= (512 << 10) and ("ring", None, p, size) in res:
                    res[(algo, codec, p, size)] = dict(res[("ring", None, p, size)], algo=algo, closed_form_s=-1)
                    continue
                r = run(a.build, a.model, algo, codec, p, size)
                res[(algo, codec, p, size)] = r
                print("# %s p=%d %d: sim %.6g s, closed %.6g s, %.1f s wall %s" % (
                    label, p, size, r["sim_s"], r["closed_form_s"], r["wall_s"], r["error"]), file=sys.stderr,
                    flush=True)
    head = "| algorithm | " + " | ".join("%s @ %d" % (s, p) for p in ranks for s, _ in SIZES) + " |"
    print(head)
    print("|---|" + "---:|" * (len(ranks) * len(SIZES)))
    for label, algo, codec in ROWS:
        cells = []
        for p in ranks:
            for _, size in SIZES:
                r = res[(algo, codec, p, size)]
                cells.append("%.3g" % (r["sim_s"] * 1e3) if not r["error"] else "n/s")
        print("| %s | %s |" % (label, " | ".join(cells)))
    # The policy's choice among what it weighs, from its closed forms, against the replay.
    print()
    print("| choice | " + " | ".join("%s @ %d" % (s, p) for p in ranks for s, _ in SIZES) + " |")
    print("|---|" + "---:|" * (len(ranks) * len(SIZES)))
    for what, cands in (("dense: ring, recursive doubling or Rabenseifner",
                         [("ring", None), ("recursive_doubling", None), ("rabenseifner", None)]),
                        ("qsgd 8-bit: scatter-reduce or halving-doubling",
                         [("scatter_reduce", "qsgd:bits=8"), ("halving_doubling", "qsgd:bits=8")]),
                        ("top-k 1%: sparse all-gather or sparse doubling while k p < n, else sparse doubling, "
                         "scatter-reduce or halving-doubling",
                         [("sparse_allgather", "topk:ratio=0.01"), ("sparse_doubling", "topk:ratio=0.01"),
                          ("scatter_reduce", "topk:ratio=0.01"), ("halving_doubling", "topk:ratio=0.01")])):
        cells = []
        for p in ranks:
            for _, size in SIZES:
                fits = gather_fits(p, size)
                rs = [(res[(al, co, p, size)], al) for al, co in cands
                      if co != "topk:ratio=0.01" or al == "sparse_doubling" or (al == "sparse_allgather") == fits]
                pol_row, pol = min(rs, key=lambda x: x[0]["closed_form_s"])
                ok = [x for x in rs if not x[0]["error"]]
                best_row, sim = min(ok, key=lambda x: x[0]["sim_s"]) if ok else (None, "?")
                # Within 10% of the fastest replay is agreement: closer calls are below the
                # model's resolution.
                if best_row is not None and not pol_row["error"] and pol_row["sim_s"] <= 1.1 * best_row["sim_s"]:
                    sim = pol
                short = {"ring": "ring", "recursive_doubling": "RD", "scatter_reduce": "SR", "halving_doubling": "HD",
                         "rabenseifner": "Rab", "sparse_allgather": "SAG", "sparse_doubling": "SD"}
                cells.append("%s%s" % (short[pol], "" if sim == pol or len(ok) < len(rs) else " (sim: %s)" % short[sim]))
        print("| %s | %s |" % (what, " | ".join(cells)))
    if a.json:
        json.dump([dict(v, algo=k[0], codec=k[1] or "", ranks=k[2], bytes=k[3]) for k, v in res.items()],
                  open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
