#!/usr/bin/env python3
"""Runs torch's own distributed backend tests (DistributedTest._DistTestBase from
torch/testing/_internal/distributed/distributed_test.py) against the gradwire torch.distributed
backend, the way torch's test/distributed/test_distributed_spawn.py runs them for gloo/nccl/ucc.

    .venv/bin/python tests/torch_suite/run_distributed_test.py                      # ci subset, 2 ranks
    .venv/bin/python tests/torch_suite/run_distributed_test.py --subset full --world-size 2 3
    .venv/bin/python tests/torch_suite/run_distributed_test.py -k all_to_all        # regex over the subset
    .venv/bin/python tests/torch_suite/run_distributed_test.py test_broadcast test_barrier
    .venv/bin/python tests/torch_suite/run_distributed_test.py --backend gloo       # the harness, on gloo

Each world size runs in a worker process of its own (distributed_test.py reads BACKEND and
WORLD_SIZE when it is imported); each test spawns WORLD_SIZE ranks. The report (default
build/torch-suite/report.txt) has one line per test and world size: pass, skip, fail, error,
xfail (a failure the list expects) or xpass, with the reason of every skip and failure; the
output of a test's ranks is in build/torch-suite/logs/ws<N>/<test>.log. The exit status is 1
when a test of the list failed or errored (a skip is not a failure), 2 on a usage error, and 77
when the backend cannot be loaded (--skip-unavailable; ctest's SKIP_RETURN_CODE).

The lists (ci.txt, full.txt next to this file) name one test per line:
    test_name [unlock] [xfail] [ws=N] # why
unlock: torch gates the test to other backends by name only; run its unchanged CPU body anyway.
xfail:  a known failure that is not the backend's (the reason is in the comment).
ws=N:   only at world size N.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXIT_UNAVAILABLE = 77


class Entry:
    def __init__(self, name, unlock=False, xfail=False, world_sizes=None, note=""):
        self.name, self.unlock, self.xfail, self.world_sizes, self.note = name, unlock, xfail, world_sizes, note


def read_list(path):
    entries = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            text, _, note = line.partition("#")
            words = text.split()
            if not words:
                continue
            e = Entry(words[0], note=note.strip())
            for w in words[1:]:
                if w == "unlock":
                    e.unlock = True
                elif w == "xfail":
                    e.xfail = True
                elif w.startswith("ws="):
                    e.world_sizes = {int(x) for x in w[3:].split(",")}
                else:
                    raise SystemExit("%s:%d: unknown flag %r" % (path, lineno, w))
            entries.append(e)
    return entries


# ---------------------------------------------------------------------------------------------
# worker: one backend, one world size, in its own process (env set by the parent)

_EXC = re.compile(r"^[\w.]*(Error|Exception|Exit|Interrupt|Failure)\b")


def _exception_lines(lines):
    """The last exception line of a traceback and up to two lines of its message."""
    idx = [i for i, l in enumerate(lines) if _EXC.match(l)]
    if not idx:
        tail = [l for l in lines if l.strip() and not l.startswith(" ")]
        return tail[-1] if tail else "?"
    out = []
    for l in lines[idx[-1]:]:
        if l.startswith("To execute this test") or l.startswith("This message can be suppressed"):
            break
        if l.strip():
            out.append(l.strip())
        if len(out) == 3:
            break
    return " / ".join(out)


def _short_reason(text):
    """What each failing rank raised (from the suite's "Process N exited ..." message)."""
    lines = text.splitlines()
    heads = [i for i, l in enumerate(lines) if re.match(r"^(RuntimeError: )?Process \d+ exited with error code", l)]
    if not heads:
        return _exception_lines(lines)
    picked = []
    for n, i in enumerate(heads):
        block = lines[i + 1:heads[n + 1] if n + 1 < len(heads) else len(lines)]
        rank = re.search(r"Process (\d+)", lines[i]).group(1)
        picked.append("rank %s: %s" % (rank, _exception_lines(block)))
    # identical messages on every rank: say it once
    msgs = {p.split(": ", 1)[1] for p in picked}
    if len(msgs) == 1 and len(picked) > 1:
        return "ranks %s: %s" % (",".join(p.split(":")[0][5:] for p in picked), msgs.pop())
    return " | ".join(picked)


def worker(args):
    import unittest

    world_size = int(os.environ["WORLD_SIZE"])
    entries = json.loads(os.environ["GW_SUITE_ENTRIES"])
    try:
        import gw_dist_suite as suite
    except ImportError as e:
        print("gradwire backend unavailable: %s" % e, file=sys.stderr)
        sys.exit(EXIT_UNAVAILABLE)
    logdir = os.path.join(args.out, "logs", "ws%d" % world_size)
    os.makedirs(logdir, exist_ok=True)
    reasons = os.environ["GW_SUITE_REASONS"]
    console = os.fdopen(os.dup(1), "w", buffering=1)
    results = []
    for e in entries:
        name = e["name"]
        if e["world_sizes"] and world_size not in e["world_sizes"]:
            continue
        if not hasattr(suite.GradwireDistTest, name):
            results.append(dict(name=name, outcome="error", reason="no such test in distributed_test.py",
                                seconds=0.0, log="", unlock=e["unlock"], xfail=e["xfail"]))
            continue
        log = os.path.join(logdir, name + ".log")
        for f in os.listdir(reasons):
            os.unlink(os.path.join(reasons, f))
        result = unittest.TestResult()
        start = time.time()
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        with open(log, "w") as lf:
            os.dup2(lf.fileno(), 1)
            os.dup2(lf.fileno(), 2)
            try:
                suite.GradwireDistTest(name).run(result)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        seconds = time.time() - start
        if result.errors or result.failures:
            outcome = "error" if result.errors else "fail"
            text = (result.errors or result.failures)[0][1]
            reason = _short_reason(text)
            if "Expected exit code" in text:
                # a rank died outside the test body (import, init): its own last exception
                with open(log) as lf:
                    died = [l.strip() for l in lf if _EXC.match(l) and not l.startswith("AssertionError")]
                if died:
                    reason += " / a rank: " + died[-1]
            with open(log, "a") as lf:
                lf.write("\n==== gradwire torch_suite: %s ====\n%s\n" % (outcome, text))
        elif result.skipped:
            outcome = "skip"
            reason = result.skipped[0][1]
            if reason == suite.GENERIC_SKIP:
                noted = sorted(os.listdir(reasons))
                if noted:
                    with open(os.path.join(reasons, noted[0])) as f:
                        reason = f.read().strip()
        else:
            outcome, reason = "pass", ""
        if e["xfail"]:
            outcome = {"fail": "xfail", "error": "xfail", "pass": "xpass"}.get(outcome, outcome)
        results.append(dict(name=name, outcome=outcome, reason=reason, seconds=round(seconds, 1),
                            log=os.path.relpath(log, args.out), unlock=e["unlock"], xfail=e["xfail"]))
        console.write("  [ws=%d] %-62s %-5s %5.1fs %s\n" % (world_size, name, outcome, seconds,
                                                            reason[:160].replace("\n", " ")))
    import torch
    with open(args.json, "w") as f:
        json.dump(dict(torch=torch.__version__, results=results), f, indent=1)


# ---------------------------------------------------------------------------------------------
# parent: choose the tests, run one worker per world size, write the report

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="*", help="explicit test names (default: the subset's list)")
    ap.add_argument("--subset", default="ci", help="ci, full, or a path to a list file (default ci)")
    ap.add_argument("-k", "--filter", help="regex: keep the tests of the subset whose name matches")
    ap.add_argument("--backend", default="gradwire")
    ap.add_argument("--world-size", type=int, nargs="+", default=[2])
    ap.add_argument("--transport", default="tcp", choices=["tcp", "sm"],
                    help="UCX_TLS: tcp,self or sm,self (default tcp)")
    ap.add_argument("--init", default="file", choices=["file", "env"],
                    help="INIT_METHOD: file://TEMP_DIR/ as the spawn runner does with an init file, or env://")
    ap.add_argument("--features", default="ddp",
                    help="DistTestCases.backend_feature sets the backend joins besides 'plugin' (default ddp)")
    ap.add_argument("--start-method", default="forkserver", choices=["forkserver", "spawn"],
                    help="how a test starts its ranks: forkserver (default; the ranks fork from a server "
                         "that imported torch once) or spawn (torch's own runner; ~6 s more per test)")
    ap.add_argument("--skip-collective", action="append",
                    help="DistTestCases.skip_collective entry the backend joins, e.g. 'sendrecv anysource' "
                         "(default for gradwire: 'sendrecv anysource': recv without a source is refused by design)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test (the suite's default is 300)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "torch-suite"))
    ap.add_argument("--report", help="default OUT/report.txt")
    ap.add_argument("--skip-unavailable", action="store_true",
                    help="exit 77 when the backend cannot be imported (ctest SKIP_RETURN_CODE)")
    ap.add_argument("--unlock", action="store_true",
                    help="unlock the explicit tests that full.txt does not list (see gw_dist_suite.py)")
    ap.add_argument("--list", action="store_true", help="print the selected tests and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        sys.path.insert(0, HERE)
        return worker(args)

    if args.tests:
        full = os.path.join(HERE, "full.txt")
        listed = {e.name: e for e in read_list(full)} if os.path.exists(full) else {}
        entries = [listed.get(t, Entry(t, unlock=args.unlock)) for t in args.tests]
        list_name = "command line"
    else:
        path = args.subset if os.path.sep in args.subset else os.path.join(HERE, args.subset + ".txt")
        entries = read_list(path)
        list_name = os.path.relpath(path, REPO) if path.startswith(REPO) else path
    if args.filter:
        entries = [e for e in entries if re.search(args.filter, e.name)]
    if not entries:
        print("no tests selected", file=sys.stderr)
        return 2
    if args.list:
        for e in entries:
            print(e.name, "unlock" if e.unlock else "", "xfail" if e.xfail else "", e.note)
        return 0

    os.makedirs(args.out, exist_ok=True)
    report_path = args.report or os.path.join(args.out, "report.txt")
    skip_collectives = args.skip_collective
    if skip_collectives is None:
        skip_collectives = ["sendrecv anysource"] if args.backend == "gradwire" else []
    base_env = dict(os.environ)
    pypath = [HERE, os.path.join(REPO, "python")] + [p for p in base_env.get("PYTHONPATH", "").split(":") if p]
    base_env.update({
        "BACKEND": args.backend,
        "PYTHONPATH": ":".join(pypath),
        "UCX_TLS": "tcp,self" if args.transport == "tcp" else "sm,self",
        "GW_DEBUG": base_env.get("GW_DEBUG", "WARN"),
        "GW_SUITE_FEATURES": args.features,
        "GW_SUITE_SKIP_COLLECTIVES": ",".join(skip_collectives),
        "GW_SUITE_UNLOCK": ",".join(e.name for e in entries if e.unlock),
        "GW_SUITE_ENTRIES": json.dumps([dict(name=e.name, unlock=e.unlock, xfail=e.xfail,
                                             world_sizes=sorted(e.world_sizes) if e.world_sizes else None)
                                        for e in entries]),
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout),
        "GW_SUITE_START": args.start_method,
        "WORLD_SIZE": str(args.world_size[0]),
        "TEMP_DIR": tempfile.gettempdir(),
        "OMP_NUM_THREADS": base_env.get("OMP_NUM_THREADS", "1"),
        "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
    })
    all_results = {}
    torch_version = "?"
    t0 = time.time()
    for ws in args.world_size:
        tmp = tempfile.mkdtemp(prefix="gw-torch-suite-")
        try:
            # The spawn runner's layout: TEMP_DIR with barrier/ and test_dir/; INIT_METHOD
            # file://TEMP_DIR/ (with an init file) or env://. The suite's own setUp makes a fresh
            # TEMP_DIR per test and rendezvous each process group through a file of its own.
            os.mkdir(os.path.join(tmp, "barrier"))
            os.mkdir(os.path.join(tmp, "test_dir"))
            os.mkdir(os.path.join(tmp, "reasons"))
            env = dict(base_env, WORLD_SIZE=str(ws), TEMP_DIR=tmp,
                       INIT_METHOD="file://%s/" % tmp if args.init == "file" else "env://",
                       GW_SUITE_REASONS=os.path.join(tmp, "reasons"))
            out_json = os.path.join(tmp, "results.json")
            print("== %s, world size %d, %d tests (%s)" % (args.backend, ws, len(entries), list_name), flush=True)
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--json", out_json,
                                "--out", args.out], env=env, cwd=REPO)
            if p.returncode == EXIT_UNAVAILABLE:
                print("backend %s unavailable" % args.backend, file=sys.stderr)
                return EXIT_UNAVAILABLE if args.skip_unavailable else 1
            if p.returncode != 0 or not os.path.exists(out_json):
                print("worker for world size %d died (exit %d)" % (ws, p.returncode), file=sys.stderr)
                all_results[ws] = [dict(name="<worker>", outcome="error", reason="worker exit %d" % p.returncode,
                                        seconds=0, log="", unlock=False, xfail=False)]
                continue
            with open(out_json) as f:
                data = json.load(f)
            all_results[ws] = data["results"]
            torch_version = data["torch"]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    text = render_report(args, skip_collectives, torch_version, list_name, all_results, time.time() - t0)
    with open(report_path, "w") as f:
        f.write(text)
    print(text)
    print("report: %s" % report_path)
    bad = any(r["outcome"] in ("fail", "error") for rs in all_results.values() for r in rs)
    return 1 if bad else 0


OUTCOMES = ["pass", "skip", "fail", "error", "xfail", "xpass"]


def render_report(args, skip_collectives, torch_version, list_name, all_results, seconds):
    out = []
    out.append("torch distributed_test.py suite: backend %s, torch %s, list %s, UCX_TLS %s, init %s, ranks by %s, features plugin%s, skip_collective [%s]"
               % (args.backend, torch_version, list_name,
                  "tcp,self" if args.transport == "tcp" else "sm,self", args.init, args.start_method,
                  "," + args.features if args.features else "", ", ".join(skip_collectives)))
    out.append("total time %.0f s" % seconds)
    for ws, results in all_results.items():
        counts = {o: sum(1 for r in results if r["outcome"] == o) for o in OUTCOMES}
        out.append("")
        out.append("world size %d: %s" % (ws, ", ".join("%d %s" % (counts[o], o) for o in OUTCOMES if counts[o] or o in ("pass", "skip", "fail", "error"))))
        for r in results:
            flags = ("unlock " if r.get("unlock") else "") + ("xfail " if r.get("xfail") else "")
            line = "  %-5s %-62s %6.1fs %s" % (r["outcome"], r["name"], r["seconds"], flags)
            if r["reason"]:
                line += "| " + r["reason"].replace("\n", " ")
            out.append(line.rstrip())
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
