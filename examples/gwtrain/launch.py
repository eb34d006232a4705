"""Starts N ranks of a script on this machine, with the variables torchrun would set, and
waits for them; a rank that fails or a run past the timeout ends them all."""
import os
import secrets
import signal
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def without_option(argv, name):
    """argv less `name VALUE` and `name=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def run_ranks(script, argv, n, timeout, label):
    """Runs n ranks of `script argv`; raises SystemExit naming the exit codes if one fails."""
    port = free_port()
    token = secrets.token_hex(16)  # gradwire's rendezvous lets in only the ranks that know it
    procs = []
    for r in range(n):
        env = dict(os.environ)
        env.update({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(n),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GW_TOKEN": token,
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        env.setdefault("UCX_TLS", "tcp,self")
        env.setdefault("GW_DEBUG", "WARN")
        procs.append(subprocess.Popen([sys.executable, script] + argv, env=env, start_new_session=True))
    deadline = time.monotonic() + timeout
    failed = False
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print("%s: ranks ran past --timeout %gs; killing them" % (label, timeout), file=sys.stderr)
                failed = True
                break
            if p.returncode != 0:
                failed = True
                break
    finally:
        for p in procs:
            if p.poll() is None:
                # One rank failed: the others wait on it until gradwire's or gloo's timeout.
                # Give them a moment to exit on their own, then kill.
                try:
                    p.wait(timeout=1 if failed else 5)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    if failed or any(p.returncode != 0 for p in procs):
        raise SystemExit("%s: a rank failed (exit codes %s)" % (label, [p.returncode for p in procs]))
