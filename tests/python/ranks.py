"""Runs a worker scenario as N real processes on this machine and collects what each wrote.

Every rank is a fresh `python3 worker.py SCENARIO OUTDIR` process (no fork of a threaded
parent) with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT) and
gradwire's (GW_RANK, GW_SIZE, GW_ROOT, and a fresh random GW_TOKEN per run: without a token or a
launcher job id the library refuses a job of several ranks) set, UCX on TCP or shared memory, and
a hard timeout:
a rank still running then is killed with its whole process group and the test fails.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYDIR = os.path.join(ROOT, "python")


def kill_and_report(procs, logs, tail_chars=6000):
    """Kills what is still running of procs (each rank's whole session), waits for every rank,
    and returns their logs, each cut to its last tail_chars, headed by rank and exit code."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    texts = []
    for r, log in enumerate(logs):
        log.seek(0)
        texts.append("---- rank %d (exit %s) ----\n%s" % (r, procs[r].returncode, log.read()[-tail_chars:]))
        log.close()
    return "\n".join(texts)


def free_ports(n):
    """n distinct TCP ports that were free a moment ago on 127.0.0.1."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def child_env(extra=None):
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = PYDIR + (os.pathsep + path if path else "")
    env.setdefault("UCX_TLS", "tcp,self")
    env.setdefault("GW_DEBUG", "WARN")
    env["GW_TIMEOUT_S"] = env.get("GW_TEST_TIMEOUT_S", "60")
    # Four ranks share two cores: one intra-op thread each.
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    for k in ("GW_CODEC", "GW_ALGO", "GW_DENSE_THRESHOLD"):  # a test decides these itself
        env.pop(k, None)
    # The tests check what a codec does to training, so the library must not swap a
    # compressed all-reduce for a dense one it measured to be faster here.
    env["GW_TUNE"] = "0"
    env.update(extra or {})
    return env


def run_ranks(scenario, nranks=4, timeout=90, env=None, worker=None):
    """Runs scenario on nranks processes; returns each rank's result (JSON from the worker).

    Raises AssertionError with every rank's output when a rank fails or the run times out."""
    worker = worker or os.path.join(HERE, "worker.py")
    torch_port, gw_port = free_ports(2)
    out = tempfile.mkdtemp(prefix="gw-pytest-")
    token = secrets.token_hex(16)  # authenticates this run's ranks to each other
    procs, logs = [], []
    for r in range(nranks):
        e = child_env(env)
        e.update({"RANK": str(r), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(r),
                  "LOCAL_WORLD_SIZE": str(nranks), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(torch_port), "GW_RANK": str(r), "GW_SIZE": str(nranks),
                  "GW_ROOT": "127.0.0.1:%d" % gw_port, "GW_TOKEN": token})
        log = open(os.path.join(out, "rank%d.log" % r), "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, worker, scenario, out], env=e, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        for p in procs:
            left = deadline - time.monotonic()
            try:
                p.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        report = kill_and_report(procs, logs)
    if timed_out:
        raise AssertionError("scenario %s timed out after %ss\n%s" % (scenario, timeout, report))
    if any(p.returncode != 0 for p in procs):
        raise AssertionError("scenario %s failed\n%s" % (scenario, report))
    results = []
    for r in range(nranks):
        with open(os.path.join(out, "rank%d.json" % r)) as f:
            results.append(json.load(f))
    shutil.rmtree(out, ignore_errors=True)  # kept when a run fails, for its logs
    return results
