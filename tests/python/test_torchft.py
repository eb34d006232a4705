"""gradwire as a torchft process group (python/gradwire/torchft.py), with torchft from PyPI.

Each test runs this file as N fresh processes (`python test_torchft.py SCENARIO RANK N PORT
OUTDIR`) that reconfigure one ProcessGroupGradwire across quorums the way torchft's Manager
does (a fresh store prefix each time) and write what they saw; the pytest side checks it.
Real processes, real libgradwire over UCX, torchft's own store client; nothing mocked.
Skips when torchft or the torch extension is missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")


# ---------------------------------------------------------------- worker side

def _allreduce(pg, t):
    from torch.distributed import AllreduceOptions, ReduceOp
    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.SUM
    pg.allreduce([t], opts).wait()
    return t


def _configure(pg, port, quorum, rank, world):
    pg.configure("127.0.0.1:%d/torchft/%d/0" % (port, quorum), "replica_%d" % rank, rank, world, quorum_id=quorum)


def scenario_quorums(rank, n, port, out):
    """Quorum 1: all n ranks; quorum 2: all but the last (it has left); quorum 3: all again
    (it came back). Each quorum an exact all-reduce, and on the group's own communicator a
    compressed one with an error-feedback state carried across quorums."""
    from datetime import timedelta

    import torch
    from torch.distributed import TCPStore

    import gradwire
    from gradwire.torchft import ProcessGroupGradwire

    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False) if rank == 0 else None
    pg = ProcessGroupGradwire(timeout=timedelta(seconds=20))
    ef = gradwire.ErrorFeedback(1000)
    codec = gradwire.Codec("qsgd:bits=8")
    seen = {"backend": pg.getBackendName()}
    for quorum, members in ((1, n), (2, n - 1), (3, n)):
        if rank >= members:
            time.sleep(1.0)  # out of this quorum
            continue
        _configure(pg, port, quorum, rank, members)
        t = torch.full((1003,), float(rank + 1))
        seen["exact_%d" % quorum] = _allreduce(pg, t)[:3].tolist()
        # Checked before the quorum's last call: once a rank is past that, it may configure the
        # next quorum, whose first act (torchft's configure) aborts this one's communicator,
        # and its peers then hear of that abort. (torchft's should_commit checks errored()
        # before a barrier of the replicas, which orders it the same way.)
        seen["errored_%d" % quorum] = pg.errored() is not None
        x = torch.linspace(-1, 1, 1000) * (rank + 1)
        pg.communicator().allreduce(x, codec=codec, ef=ef)
        seen["compressed_%d" % quorum] = float(x.sum())
    pg.shutdown()
    if store is not None:
        time.sleep(0.5)
    return seen


def scenario_abort(rank, n, port, out):
    """Rank 0 starts an all-reduce that rank 1 never joins and aborts it from another thread:
    the wait fails at once (not at the 30 s timeout), rank 1's group reports errored() from
    rank 0's last words, and a new quorum of both works."""
    from datetime import timedelta

    import torch
    from torch.distributed import AllreduceOptions, ReduceOp, TCPStore

    from gradwire.torchft import ProcessGroupGradwire

    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False) if rank == 0 else None
    pg = ProcessGroupGradwire(timeout=timedelta(seconds=30))
    seen = {}
    _configure(pg, port, 1, rank, n)
    seen["before"] = _allreduce(pg, torch.ones(10))[0].item()
    if rank == 0:
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.SUM
        work = pg.allreduce([torch.ones(10)], opts)
        threading.Timer(0.3, pg.abort).start()
        t0 = time.monotonic()
        try:
            work.wait()
            seen["wait"] = "returned"
        except Exception as e:  # noqa: BLE001 - any error is what the test wants to see
            seen["wait"] = "raised: %s" % e
        seen["wait_s"] = time.monotonic() - t0
    else:
        t0 = time.monotonic()
        while pg.errored() is None and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        seen["errored"] = str(pg.errored())
        seen["errored_after_s"] = time.monotonic() - t0
        pg.abort()
    _configure(pg, port, 2, rank, n)
    seen["after"] = _allreduce(pg, torch.ones(10))[0].item()
    pg.shutdown()
    if store is not None:
        time.sleep(0.5)
    return seen


def worker_main(argv):
    scenario, rank, n, port, out = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    result = {"rank": rank}
    try:
        result.update(globals()["scenario_" + scenario](rank, n, port, out))
        result["ok"] = True
    except Exception:  # noqa: BLE001 - reported to the test
        result["ok"] = False
        result["error"] = traceback.format_exc()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)


# ---------------------------------------------------------------- pytest side

def _skip_reason():
    try:
        import torchft  # noqa: F401
    except ImportError:
        return "torchft is not installed (pip install torchft)"
    sys.path.insert(0, PYDIR)
    try:
        from gradwire import _backend
    except Exception as e:  # noqa: BLE001
        return "gradwire does not import: %s" % e
    return None if _backend.available() else "the torch extension is not built: %s" % _backend.unavailable_reason()


def _run(scenario, n, timeout=120):
    import pytest
    why = _skip_reason()
    if why:
        pytest.skip(why)
    sys.path.insert(0, HERE)
    from ranks import free_ports, kill_and_report
    port = free_ports(1)[0]
    out = tempfile.mkdtemp(prefix="gw-torchft-")
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("UCX_TLS", "tcp,self")
    procs, logs = [], []
    for r in range(n):
        log = tempfile.TemporaryFile(mode="w+")
        procs.append(subprocess.Popen([sys.executable, __file__, scenario, str(r), str(n), str(port), out], env=env,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        logs.append(log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.1)
    report = kill_and_report(procs, logs)
    results = []
    for r in range(n):
        path = os.path.join(out, "rank%d.json" % r)
        assert os.path.exists(path), "rank %d wrote nothing\n%s" % (r, report)
        with open(path) as f:
            results.append(json.load(f))
        assert results[-1]["ok"], "rank %d: %s\n%s" % (r, results[-1].get("error"), report)
    return results


def test_reconfigures_across_quorums_with_exact_and_compressed_allreduce():
    n = 3
    res = _run("quorums", n)
    for r, seen in enumerate(res):
        assert seen["backend"] == "torchft-gradwire"
        assert seen["exact_1"] == [6.0] * 3 and seen["exact_3"] == [6.0] * 3, seen
        assert not seen["errored_1"] and not seen["errored_3"], seen
        if r < n - 1:
            assert seen["exact_2"] == [3.0] * 3, seen
    # The compressed sums agree across the ranks of each quorum (every rank holds the same bits).
    for q in (1, 3):
        assert len({seen["compressed_%d" % q] for seen in res}) == 1, res
    assert res[0]["compressed_2"] == res[1]["compressed_2"]


def test_abort_fails_pending_work_at_once_and_the_peer_sees_it():
    res = _run("abort", 2)
    assert res[0]["before"] == 2.0 and res[1]["before"] == 2.0
    assert res[0]["wait"].startswith("raised"), res[0]
    assert res[0]["wait_s"] < 3.0, res[0]  # 0.3 s to the abort, not the 30 s timeout
    assert res[1]["errored"] != "None", res[1]
    assert res[1]["errored_after_s"] < 3.0, res[1]
    assert res[0]["after"] == 2.0 and res[1]["after"] == 2.0, res


if __name__ == "__main__":
    worker_main(sys.argv[1:])
