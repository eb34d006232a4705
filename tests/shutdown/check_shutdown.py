"""Processes that exit with their communicators still open: each run of ranks must exit 0,
promptly, with nothing on stderr (no dropped-connection warnings on the peers). Also the
launcher-environment errors and the once-per-process log lines in real ranks.
  check_shutdown.py c PATH/TO/no_destroy
  check_shutdown.py python PATH/TO/libgradwire.so PYTHON_PACKAGE_DIR"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def ranks(cmd, n, tls, **extra):
    """Runs n ranks of cmd under GW_RANK/GW_SIZE (one host assumed); returns [(rc, out, err)]."""
    job = "shutdown-%d-%d-%s" % (os.getpid(), time.monotonic_ns(), tls)
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GW_")}
        env.update(GW_RANK=str(r), GW_SIZE=str(n), GW_JOB_ID=job, UCX_TLS=tls + ",self")
        env.update(extra)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e += "\n(killed after 60 s: a hang)"
        out.append((p.returncode, o, e))
    return out


def expect_clean(what, results, t0, budget_s):
    took = time.monotonic() - t0
    for r, (rc, o, e) in enumerate(results):
        if rc != 0 or e.strip():
            failures.append("%s: rank %d exited %s with stderr:\n%s" % (what, r, rc, e))
    if took > budget_s:
        failures.append("%s: took %.1f s (more than %.0f s: something waited for a timeout)" % (what, took, budget_s))


def check_c(exe):
    for tls in ("tcp", "sm"):
        for sleep_ms in ("0", "1500"):
            t0 = time.monotonic()
            expect_clean("C, no gw_comm_destroy, %s, rank 1 sleeps %s ms" % (tls, sleep_ms),
                         ranks([exe, sleep_ms], 3, tls), t0, 20)
    # The launcher environment, wrong: the exact words.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GW_")}
    for extra, want in [
        ({"GW_RANK": "0"}, "GW_SIZE is not set, but GW_RANK is (gradwire launch)"),
        ({"GW_RANK": "0", "GW_SIZE": "2"},
         "the gradwire environment has 2 ranks but neither GW_TOKEN nor a launcher job id"),
        ({"GW_RANK": "0", "GW_SIZE": "2", "GW_LOCAL_SIZE": "1", "GW_JOB_ID": "x"},
         "the gradwire ranks may span several hosts: set GW_ROOT=host:port"),
        ({"GW_RANK": "2", "GW_SIZE": "2", "GW_JOB_ID": "x"}, "GW_RANK='2' is not an integer in [0, 1]"),
    ]:
        p = subprocess.run([exe], env=dict(env, **extra), capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or want not in p.stderr:
            failures.append("environment %r: exit %d, stderr %r (want %r)" % (extra, p.returncode, p.stderr, want))
    # INFO in real ranks: the banner once per process, an unknown GW_* variable warned about once.
    results = ranks([exe], 2, "tcp", GW_DEBUG="INFO", GW_DEBUG_SUBSYS="INIT,ENV", GW_FROBNICATE="1")
    for r, (rc, o, e) in enumerate(results):
        banners = [l for l in e.splitlines() if " gradwire VERSION INIT gradwire " in l]
        unknown = [l for l in e.splitlines() if "GW_FROBNICATE is set but gradwire does not read it" in l]
        up = [l for l in e.splitlines() if (":%d gradwire INFO INIT communicator up: rank %d of 2" % (r, r)) in l]
        if rc != 0 or len(banners) != 1 or len(unknown) != 1 or len(up) != 1:
            failures.append("INFO rank %d: exit %d, %d banners, %d unknown-variable warnings, %d 'communicator up' "
                            "lines with the rank (want 0, 1, 1, 1):\n%s" % (r, rc, len(banners), len(unknown), len(up), e))


def check_python(lib, pydir):
    env = dict(GRADWIRE_LIB=lib, PYTHONPATH=pydir)
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    for scenario in ("plain", "cycle", "two", "request"):
        for tls in ("tcp", "sm"):
            t0 = time.monotonic()
            expect_clean("python %s, no close(), %s" % (scenario, tls),
                         ranks([py, os.path.join(HERE, "noclose.py"), scenario, "1.5"], 3, tls, **env), t0, 30)


if sys.argv[1] == "c":
    check_c(sys.argv[2])
else:
    check_python(sys.argv[2], sys.argv[3])
if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("shutdown (%s): all checks passed" % sys.argv[1])
