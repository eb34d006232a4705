"""The bad-argument check the perf tools' tests share: each case must exit 2 within 5 s with a
message naming what was wrong, print nothing on stdout and start no rank."""
import subprocess
import time


def check_bad_args(base_cmd, cases, ran, fail):
    """base_cmd: the tool and its good arguments; cases: (extra arguments, text the message must
    hold); ran(stderr): whether a rank or the rendezvous started; fail(msg): reports and exits."""
    for extra, needle in cases:
        cmd = base_cmd + extra
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        except subprocess.TimeoutExpired:
            fail("%s: did not exit within 20 s (ranks started?)" % " ".join(extra))
        dt = time.monotonic() - t0
        out, err = p.stdout.decode(), p.stderr.decode()
        if p.returncode != 2:
            fail("%s: exit status %d, expected 2\nstdout: %s\nstderr: %s" % (" ".join(extra), p.returncode, out, err))
        if needle not in err:
            fail("%s: the message does not name %r:\n%s" % (" ".join(extra), needle, err))
        if out.strip():
            fail("%s: something was printed on stdout (a rank started?):\n%s" % (" ".join(extra), out))
        if "gw_comm_init" in err or "gw_get_unique_id" in err or ran(err):
            fail("%s: a rank or the rendezvous ran:\n%s" % (" ".join(extra), err))
        if dt > 5:
            fail("%s: took %.1f s" % (" ".join(extra), dt))
        print("ok: %-40s exit 2 in %.2f s: %s" % (" ".join(extra), dt, err.strip().splitlines()[0]))
