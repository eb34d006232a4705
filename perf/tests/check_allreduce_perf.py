#!/usr/bin/env python3
"""ctest checks of build/perf/allreduce_perf (registered in perf/CMakeLists.txt).

usage: check_allreduce_perf.py bad-codec TOOL
       check_allreduce_perf.py ef-json TOOL WORKDIR
       check_allreduce_perf.py policy TOOL WORKDIR
       check_allreduce_perf.py sparse-ag TOOL

bad-codec: a bad --codec (and other bad arguments) exits 2 at once, with one message naming
the argument, and starts no rank (no rank prints the table header, nothing hangs).
ef-json: a 2-rank run (--np 2) with qsgd:bits=8, topk:ratio=0.01,ef=1 and
topk:ratio=0.01,ef=0 writes a -J record with the new keys, a dense reference row, finite
"vs dense", link floor and running-sum error, and the running-sum error of top-k with error
feedback is smaller than without.
policy: under the default policy (the tuner times candidates over a key's first calls), each
row says what its timed calls ran and its wire bytes and error come from them: 2-rank runs
of topk:ratio=0.01 without and with the dense reference (and qsgd:bits=8, fp16) exit 0; every
row's timed calls ran one algorithm (algo_calls), the algo column names it, the check ran it,
its wire bytes are those of the same codec run with --algo forced to it (no trial of another
algorithm in the timed window), and a row is judged bit for bit only where its timed calls
were lossless (a compressed top-k row has #wrong "-" and relerr well above 0).
sparse-ag: sparse_allgather_perf (the same driver) runs 2 ranks, says "direct", #wrong 0.
"""
import json
import math
import os
import re
import subprocess
import sys
import time

from bad_args import check_bad_args


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def bad_codec(tool):
    cases = [
        (["--codec", "bogus"], "bogus"),
        (["--codec", "qsgd:bits=8", "--codec", "topk:ratio=7"], "topk:ratio=7"),
        (["--codec", "qsgd:bitz=8"], "qsgd:bitz=8"),
        (["-b", "12Q"], "12Q"),
        (["-n", "ten"], "ten"),
        (["--link-gbps", "0"], "--link-gbps"),
        (["--ef-steps", "-1"], "--ef-steps"),
        (["--algo", "fastest"], "fastest"),
        (["-b", "8M", "-e", "1M"], "-b"),
    ]
    check_bad_args([tool, "--np", "2", "-b", "1M", "-e", "1M", "-n", "1", "-w", "0"], cases, lambda err: re.search(r"rank \d", err) is not None, fail)


def ef_json(tool, workdir):
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "allreduce_perf_ef.json")
    if os.path.exists(path):
        os.remove(path)
    env = dict(os.environ)
    env.setdefault("UCX_TLS", "tcp,self")
    env["GW_TUNE"] = "0"  # the static policy: compressed rows stay compressed
    env.setdefault("GW_DEBUG", "WARN")
    cmd = [tool, "--np", "2", "-b", "1M", "-e", "1M", "-n", "3", "-w", "1", "--ef-steps", "20",
           "--codec", "qsgd:bits=8", "--codec", "topk:ratio=0.01,ef=1", "--codec", "topk:ratio=0.01,ef=0",
           "-J", path]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=240)
    out = p.stdout.decode()
    print(out)
    if p.returncode != 0:
        fail("exit status %d" % p.returncode)
    with open(path) as f:
        doc = json.load(f)
    for key in ("tool", "nranks", "iters", "warmup", "dtype", "op", "host", "ucx_tls", "bus_factor", "results",
                "gradwire_version", "ucx_version", "transport", "date", "ef_steps", "link_floor_source",
                "dense_reference"):
        if key not in doc:
            fail("JSON lacks %r" % key)
    if doc["nranks"] != 2 or doc["ef_steps"] != 20 or doc["link_floor_source"] != "measured dense":
        fail("header: nranks %r, ef_steps %r, link_floor_source %r" % (doc["nranks"], doc["ef_steps"],
                                                                        doc["link_floor_source"]))
    if not doc["gradwire_version"] or not doc["ucx_version"] or doc["transport"] != "ucx":
        fail("versions/transport: %r %r %r" % (doc["gradwire_version"], doc["ucx_version"], doc["transport"]))
    rows = {r["codec"]: r for r in doc["results"]}
    want = ["none", "qsgd:bits=8", "topk:ratio=0.01,ef=1", "topk:ratio=0.01,ef=0"]
    if [r["codec"] for r in doc["results"]] != want:
        fail("rows %r, expected %r (dense reference first)" % ([r["codec"] for r in doc["results"]], want))
    if not rows["none"]["dense_reference"]:
        fail("the none row is not marked as the dense reference")
    for codec, r in rows.items():
        for key in ("bytes", "time_us", "busbw", "wire_bytes", "ratio", "relerr", "vs_dense", "link_floor_us",
                    "sum_relerr", "time_min_us", "time_median_us", "time_max_us", "slowest_rank", "rank_time_us"):
            if key not in r:
                fail("row %s lacks %r" % (codec, key))
        if not (r["time_min_us"] <= r["time_median_us"] <= r["time_max_us"]) or len(r["rank_time_us"]) != 2:
            fail("row %s: bad spread %r" % (codec, r))
        if r["slowest_rank"] not in (0, 1) or abs(r["rank_time_us"][r["slowest_rank"]] - r["time_max_us"]) > 1e-3:
            fail("row %s: slowest_rank %r does not hold the max time" % (codec, r["slowest_rank"]))
        if not (isinstance(r["vs_dense"], float) and r["vs_dense"] > 0 and math.isfinite(r["vs_dense"])):
            fail("row %s: vs_dense %r" % (codec, r["vs_dense"]))
        if not (isinstance(r["link_floor_us"], float) and r["link_floor_us"] > 0):
            fail("row %s: link_floor_us %r" % (codec, r["link_floor_us"]))
    if abs(rows["none"]["vs_dense"] - 1.0) > 1e-6:
        fail("the dense row's vs_dense is %r, not 1" % rows["none"]["vs_dense"])
    if rows["none"]["sum_relerr"] is not None:
        fail("the dense row has a running-sum error %r" % rows["none"]["sum_relerr"])
    for codec in want[1:]:
        e = rows[codec]["sum_relerr"]
        if not (isinstance(e, float) and math.isfinite(e) and e >= 0):
            fail("row %s: sum_relerr %r is not a finite number" % (codec, e))
    # top-k's wire must be compressed (the static policy), so the floor lies below the dense one
    if not rows["topk:ratio=0.01,ef=1"]["ratio"] > 5:
        fail("topk ratio %r: the row did not run compressed" % rows["topk:ratio=0.01,ef=1"]["ratio"])
    with_ef = rows["topk:ratio=0.01,ef=1"]["sum_relerr"]
    without = rows["topk:ratio=0.01,ef=0"]["sum_relerr"]
    if not with_ef < without:
        fail("running-sum error with EF %.3e is not below without EF %.3e" % (with_ef, without))
    print("ok: running-sum error after 20 steps: topk ef=1 %.3e < ef=0 %.3e; qsgd:bits=8 %.3e" % (
        with_ef, without, rows["qsgd:bits=8"]["sum_relerr"]))


# The algo column's short names (perf/driver.cpp, algo_label).
SHORT = {"compressed_ring": "cring", "scatter_reduce": "sreduce", "sparse_allgather": "sparseag",
         "hierarchical": "hier"}
LOSSY_COMPRESSED = ("compressed_ring", "scatter_reduce", "sparse_allgather")


def policy_env():
    env = dict(os.environ)
    env.setdefault("UCX_TLS", "tcp,self")
    env.setdefault("GW_DEBUG", "WARN")
    for var in ("GW_TUNE", "GW_ALGO", "GW_CODEC", "GW_LINK_GBPS"):  # the default policy, measuring
        env.pop(var, None)
    return env


def run_json(tool, path, args):
    """Runs tool with args and -J path; returns (exit status, stdout, the JSON record or None)."""
    if os.path.exists(path):
        os.remove(path)
    cmd = [tool, "--np", "2", "-b", "1M", "-e", "1M", "-n", "5", "-w", "1", "--ef-steps", "0"] + args + ["-J", path]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=policy_env(), timeout=240)
    out = p.stdout.decode()
    print("$ " + " ".join(cmd[1:]))
    print(out)
    doc = None
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    return p.returncode, out, doc


def check_rows(doc, iters):
    """Every row ran one algorithm in all its timed calls and says so; returns {codec: (algo, row)}."""
    ran = {}
    for r in doc["results"]:
        codec, calls = r["codec"], r["algo_calls"]
        if len(calls) != 1 or sum(calls.values()) != iters:
            fail("row %s: timed calls %r, expected %d calls of one algorithm (trials in the timed window?)" % (
                codec, calls, iters))
        if not r["settled"]:
            fail("row %s: the policy did not settle during the warm-up" % codec)
        algo = next(iter(calls))
        if r["algo"] != SHORT.get(algo, algo):
            fail("row %s: algo column %r, but the timed calls ran %s" % (codec, r["algo"], algo))
        if r["check_algo"] != algo:
            fail("row %s: the check ran %s, the timed calls %s" % (codec, r["check_algo"], algo))
        lossless = codec in ("none", "fp16", "bf16") or algo == "ring"
        if lossless and r["wrong"] != 0:
            fail("row %s (%s): #wrong %r on a lossless row" % (codec, algo, r["wrong"]))
        if not lossless and r["wrong"] != -1:
            fail("row %s ran %s, lossy, yet was judged bit for bit (#wrong %r)" % (codec, algo, r["wrong"]))
        if codec.startswith("topk") and algo in LOSSY_COMPRESSED and not r["relerr"] > 1e-2:
            fail("row %s ran %s but shows relerr %r, a dense call's error" % (codec, algo, r["relerr"]))
        if algo == "ring" and not r["relerr"] < 1e-5:
            fail("row %s ran the dense ring but shows relerr %r" % (codec, r["relerr"]))
        ran[codec] = (algo, r)
    return ran


def check_wire_as_forced(tool, workdir, ran):
    """Each row's wire bytes are those of its codec with --algo forced to what its timed calls ran."""
    for codec, (algo, row) in ran.items():
        path = os.path.join(workdir, "forced.json")
        rc, _, doc = run_json(tool, path, ["--codec", codec, "--algo", algo, "--no-dense-reference"])
        if rc != 0 or doc is None:
            fail("--codec %s --algo %s: exit status %d" % (codec, algo, rc))
        forced = doc["results"][0]["wire_bytes"]
        if abs(row["wire_bytes"] - forced) > 0.02 * forced:
            fail("row %s (%s): %.0f wire bytes per call; forced --algo %s sends %.0f" % (
                codec, algo, row["wire_bytes"], algo, forced))
        print("ok: %-16s %-16s wire %.0f B per call, forced %.0f" % (codec, algo, row["wire_bytes"], forced))


def policy(tool, workdir):
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "allreduce_perf_policy.json")
    # As a new user tries it: top-k under the default policy, no dense reference.
    rc, out, doc = run_json(tool, path, ["--codec", "topk:ratio=0.01", "--no-dense-reference"])
    if rc != 0 or "#wrong on lossless rows: 0 OK" not in out:
        fail("topk without dense reference: exit status %d" % rc)
    ran = check_rows(doc, 5)
    # With the dense reference first (the policy's first calls of each codec come after it).
    rc, out, doc = run_json(tool, path, ["--codec", "topk:ratio=0.01", "--codec", "qsgd:bits=8", "--codec", "fp16"])
    if rc != 0 or "#wrong on lossless rows: 0 OK" not in out:
        fail("with the dense reference: exit status %d" % rc)
    if [r["codec"] for r in doc["results"]] != ["none", "topk:ratio=0.01", "qsgd:bits=8", "fp16"]:
        fail("rows %r" % [r["codec"] for r in doc["results"]])
    ran_ref = check_rows(doc, 5)
    if ran_ref["none"][0] != "ring":
        fail("the dense reference ran %s" % ran_ref["none"][0])
    check_wire_as_forced(tool, workdir, {"topk:ratio=0.01": ran["topk:ratio=0.01"]})
    check_wire_as_forced(tool, workdir, {c: v for c, v in ran_ref.items() if c != "none"})
    print("ok: every row says what its timed calls ran: %s" % ", ".join(
        "%s %s" % (c, a) for c, (a, _) in sorted(ran_ref.items())))


def sparse_ag(tool):
    env = policy_env()
    cmd = [tool, "--np", "2", "-b", "1M", "-e", "1M", "-n", "3", "-w", "1", "--ef-steps", "0"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=120)
    out = p.stdout.decode()
    print(out)
    if p.returncode != 0 or "#wrong on lossless rows: 0 OK" not in out:
        fail("exit status %d" % p.returncode)
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
    if len(rows) != 1 or rows[0][4] != "direct" or rows[0][16] != "0":
        fail("rows %r: expected one row, algo direct, #wrong 0" % rows)
    print("ok: sparse_allgather_perf row: algo direct, #wrong 0")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "bad-codec":
        bad_codec(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "ef-json":
        ef_json(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "policy":
        policy(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "sparse-ag":
        sparse_ag(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
