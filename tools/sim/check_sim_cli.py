#!/usr/bin/env python3
"""ctest checks of gw_sim: bad arguments exit 2 naming the argument; a replay prints a time for
every (algorithm, ranks, bytes) asked; --policy agrees with the replays on the defaults.

Usage: check_sim_cli.py GW_SIM
"""
import subprocess
import sys


def run(sim, *args):
    return subprocess.run([sim, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)


def main():
    sim = sys.argv[1]
    failures = []
    for args, want in ((["--ranks", "0", "--bytes", "4K"], "--ranks 0"),
                       (["--ranks", "70000", "--bytes", "4K"], "--ranks 70000"),
                       (["--ranks", "4", "--bytes", "4Q"], "--bytes '4Q'"),
                       (["--ranks", "4", "--bytes", "-1"], "--bytes '-1'"),
                       (["--ranks", "4", "--bytes", "4K", "--algo", "tree"], "--algo 'tree'"),
                       (["--ranks", "4", "--bytes", "4K", "--codec", "qsgd:bits=3"], "--codec"),
                       (["--ranks", "4", "--bytes", "4K", "--model", "/nonexistent"], "cannot be read"),
                       (["--ranks", "4"], "--bytes"),
                       (["--frobnicate"], "unknown argument")):
        r = run(sim, *args)
        if r.returncode != 2 or want not in r.stderr:
            failures.append("%s: exit %d, stderr %r (wanted 2 and %r)" % (args, r.returncode, r.stderr[-200:], want))
    r = run(sim, "--codec", "qsgd:bits=8", "--ranks", "1,2,5,64", "--bytes", "0,4K,1M", "--json")
    rows = [l for l in r.stdout.splitlines() if l.startswith("{")]
    import json
    rows = [json.loads(l) for l in rows]
    # Every schedule but sparse doubling (sparse codecs only): 9 schedules x 4 rank counts x 3 sizes.
    if r.returncode != 0 or len(rows) != 9 * 4 * 3 or "sparse_doubling takes sparse codecs" not in r.stderr:
        failures.append("replay: exit %d, %d rows (wanted 108): %s" % (r.returncode, len(rows), r.stderr[-300:]))
    for row in rows:
        if row["error"] or row["sim_s"] < 0 or (row["bytes"] > 0 and row["ranks"] > 1 and row["sim_s"] <= 0):
            failures.append("replay row %s" % row)
    r = run(sim, "--policy", "--ranks", "2,3,8,64,256", "--bytes", "4K,64K,1M,16M")
    if r.returncode != 0 or "# 0 disagreement(s)" not in r.stdout:
        failures.append("--policy (dense):\n" + r.stdout[-1500:])
    r = run(sim, "--policy", "--codec", "qsgd:bits=8", "--ranks", "3,8,64,256", "--bytes", "64K,1M,16M")
    if r.returncode != 0 or "disagreement(s)" not in r.stdout:
        failures.append("--policy (qsgd):\n" + r.stdout[-1500:])
    for f in failures:
        print("FAILED:", f)
    print("ok" if not failures else "%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
