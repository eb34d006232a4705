#!/usr/bin/env python3
"""ctest checks of build/perf/calibrate (registered in perf/CMakeLists.txt).

usage: check_calibrate.py run TOOL WORKDIR
       check_calibrate.py bad-args TOOL

run: a quick 2-rank run (--np 2 --quick) writes a cost model file (--out) that
collectives/policy/cost_model.cpp can read: its first line says where and how it was measured;
every key is present exactly once (latency_s, switch_s, link_bytes_per_s, message_cpu_s,
reduce_bytes_per_s, sparse_sum_bytes_per_s, cores, version, transport), version = 1, every
number is finite and > 0, cores is a whole number >= 1, there is an encode and a decode line
for at least none, qsgd and topk (and for every codec one has, the other), and no unknown key
appears; no temporary file is left behind. Without --out the same text goes to stdout.
bad-args: a bad argument exits 2 at once with one message naming it, and starts no rank.
"""
import math
import os
import re
import subprocess
import sys
import time

from bad_args import check_bad_args

NUMBERS = ("latency_s", "switch_s", "link_bytes_per_s", "message_cpu_s", "reduce_bytes_per_s", "sparse_sum_bytes_per_s")
REQUIRED = ("version", "transport", "cores") + NUMBERS
CODEC_KEY = re.compile(r"^(encode|decode)_bytes_per_s\.([A-Za-z0-9_]+)$")
MUST_HAVE_CODECS = ("none", "qsgd", "topk")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def positive_number(key, value):
    try:
        x = float(value)
    except ValueError:
        fail("%s = %r is not a number" % (key, value))
    if not (math.isfinite(x) and x > 0):
        fail("%s = %r is not a finite number > 0" % (key, value))
    return x


def check_text(text, where):
    """Checks a cost model file's text; returns {key: value}."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# gradwire cost model, measured by perf/calibrate on "):
        fail("%s: the first line is not the header: %r" % (where, lines[:1]))
    if "UCX_TLS=" not in lines[0] or not lines[0].endswith(", 2 ranks"):
        fail("%s: the header does not say UCX_TLS and 2 ranks: %r" % (where, lines[0]))
    kv = {}
    for n, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            fail("%s:%d: %r is not 'key = value'" % (where, n, raw))
        key, value = (s.strip() for s in line.split("=", 1))
        if key in kv:
            fail("%s:%d: %s is given twice" % (where, n, key))
        if key not in REQUIRED and not CODEC_KEY.match(key):
            fail("%s:%d: unknown key %r" % (where, n, key))
        kv[key] = value
    for key in REQUIRED:
        if key not in kv:
            fail("%s: no %s line" % (where, key))
    if kv["version"] != "1":
        fail("%s: version = %r, expected 1" % (where, kv["version"]))
    if not kv["transport"]:
        fail("%s: the transport line is empty" % where)
    for key in NUMBERS:
        positive_number(key, kv[key])
    cores = positive_number("cores", kv["cores"])
    if cores != int(cores) or cores < 1:
        fail("%s: cores = %r is not a whole number >= 1" % (where, kv["cores"]))
    rates = {}
    for key, value in kv.items():
        m = CODEC_KEY.match(key)
        if m:
            positive_number(key, value)
            rates.setdefault(m.group(2), set()).add(m.group(1))
    for codec, kinds in sorted(rates.items()):
        for kind in ("encode", "decode"):
            if kind not in kinds:
                fail("%s: codec %s has no %s_bytes_per_s line" % (where, codec, kind))
    for codec in MUST_HAVE_CODECS:
        if codec not in rates:
            fail("%s: no encode/decode lines for %s (codecs: %s)" % (where, codec, ", ".join(sorted(rates))))
    return kv


def run(tool, workdir):
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "calibrate-quick.txt")
    for p in (path, path + ".tmp"):
        if os.path.exists(p):
            os.remove(p)
    env = dict(os.environ)
    env.setdefault("UCX_TLS", "sm,self")
    env.setdefault("GW_DEBUG", "WARN")
    cmd = [tool, "--np", "2", "--quick", "--out", path]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=100)
    dt = time.monotonic() - t0
    out, err = p.stdout.decode(), p.stderr.decode()
    print("$ " + " ".join(cmd[1:]) + "   (%.1f s)" % dt)
    print(err)
    if p.returncode != 0:
        fail("exit status %d\nstdout: %s" % (p.returncode, out))
    if out.strip():
        fail("with --out, something was printed on stdout:\n%s" % out)
    if "latency" not in err or "wrote " + path not in err:
        fail("no summary on stderr")
    if os.path.exists(path + ".tmp"):
        fail("the temporary file %s.tmp was left behind" % path)
    with open(path) as f:
        text = f.read()
    print(text)
    kv = check_text(text, path)
    if kv["transport"] != "UCX_TLS=" + env["UCX_TLS"]:
        fail("transport = %r, expected UCX_TLS=%s" % (kv["transport"], env["UCX_TLS"]))
    print("ok: %s: %d keys, latency %s s, link %s B/s, %d codecs" % (
        path, len(kv), kv["latency_s"], kv["link_bytes_per_s"], sum(1 for k in kv if k.startswith("encode_"))))
    # Without --out: the same text on stdout, the summary still on stderr.
    p = subprocess.run(cmd[:-2], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=100)
    if p.returncode != 0:
        fail("without --out: exit status %d\n%s" % (p.returncode, p.stderr.decode()))
    kv2 = check_text(p.stdout.decode(), "stdout")
    if sorted(kv2) != sorted(kv):
        fail("stdout has other keys than the file: %r vs %r" % (sorted(kv2), sorted(kv)))
    print("ok: without --out the cost model goes to stdout (%d keys)" % len(kv2))


def bad_args(tool):
    cases = [
        (["--np", "1"], "--np"),
        (["--np", "two"], "two"),
        (["--size-mb", "0"], "--size-mb"),
        (["--size-mb", "lots"], "lots"),
        (["--size-mb"], "--size-mb"),
        (["--out", "/nonexistent-calibrate-dir/cost.txt"], "--out"),
        (["--out", ""], "--out"),
        (["--bogus"], "--bogus"),
        (["--quick", "extra"], "extra"),
    ]
    check_bad_args([tool, "--np", "2", "--quick"], cases, lambda err: "latency" in err, fail)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "bad-args":
        bad_args(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
