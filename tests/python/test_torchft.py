"""gradwire as a torchft process group (python/gradwire/torchft.py), with torchft from PyPI.

Each test runs this file as N fresh processes (ranks.run_ranks: `python test_torchft.py
SCENARIO OUTDIR`) that reconfigure one ProcessGroupGradwire across quorums the way torchft's Manager
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


def replica_main(argv):
    """One torchft replica group of one rank: Manager over ProcessGroupGradwire, torchft's DDP and
    optimizer wrapper, a small model trained to `steps` committed steps. Writes its progress
    (the committed step) as it goes and, at the end, its parameters' sum and what it saw."""
    replica_id, lighthouse, store_port, out, steps = int(argv[0]), argv[1], int(argv[2]), argv[3], int(argv[4])
    codec = argv[5]
    from datetime import timedelta

    import torch
    import torch.nn as nn
    from torch.distributed import TCPStore
    from torchft import DistributedDataParallel, Manager
    from torchft import Optimizer as OptimizerWrapper

    from gradwire.torchft import ProcessGroupGradwire

    store = TCPStore("127.0.0.1", store_port, is_master=True, wait_for_workers=False)  # noqa: F841 - kept alive
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    manager = Manager(pg=ProcessGroupGradwire(timeout=timedelta(seconds=10)), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict, replica_id=str(replica_id),
                      store_addr="127.0.0.1", store_port=store_port, rank=0, world_size=1,
                      lighthouse_addr=lighthouse, port=0, timeout=timedelta(seconds=10))
    if codec == "none":
        ddp = DistributedDataParallel(manager, model)  # torchft's own hook: dense through the group
    else:
        import gradwire.torchft as gwft
        # scatter_reduce: compressed although these buckets are under the dense threshold.
        ddp = gwft.DistributedDataParallel(manager, model, codec=codec, ef=True, algo="scatter_reduce")
    wrapped = OptimizerWrapper(manager, opt)
    torch.manual_seed(1000 + replica_id + os.getpid())
    seen = []
    while manager.current_step() < steps:
        x, y = torch.randn(32, 8), torch.randint(4, (32,))
        wrapped.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        wrapped.step()
        seen.append([time.time(), manager.current_step(), manager.num_participants()])
        with open(out + ".step.tmp", "w") as f:
            f.write(str(manager.current_step()))
        os.replace(out + ".step.tmp", out + ".step")
        time.sleep(0.02)
    psum = sum(float(p.detach().double().sum()) for p in model.parameters())
    with open(out, "w") as f:
        json.dump({"step": manager.current_step(), "psum": psum, "seen": seen,
                   "hook": getattr(ddp, "gradwire_state", None) and ddp.gradwire_state.stats}, f)
    manager.shutdown(wait=False)


def worker_main(argv):
    """ranks.run_ranks' worker: `test_torchft.py SCENARIO OUTDIR`, rank and size from RANK and
    WORLD_SIZE; the store's port is MASTER_PORT. A failure exits non-zero with its traceback."""
    scenario, out = argv[0], argv[1]
    rank, n, port = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["MASTER_PORT"])
    result = {"rank": rank}
    result.update(globals()["scenario_" + scenario](rank, n, port, out))
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
    from ranks import run_ranks
    return run_ranks(scenario, nranks=n, timeout=timeout, worker=os.path.abspath(__file__))


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


def test_managed_hook_residuals_survive_a_checkpoint():
    import pytest
    why = _skip_reason()
    if why:
        pytest.skip(why)
    import torch

    from gradwire.torchft import ManagedHookState
    state = ManagedHookState(None, codec="qsgd:bits=8")
    r = torch.linspace(-1, 1, 1001)
    state.ef_for(3, 1001).set_residual(r)
    saved = state.state_dict()
    again = ManagedHookState(None, codec="qsgd:bits=8")
    again.load_state_dict(saved)
    assert torch.equal(torch.from_numpy(again.ef_for(3, 1001).residual()), r)
    with pytest.raises(ValueError, match="codec"):
        ManagedHookState(None, codec="topk:ratio=0.01").load_state_dict(saved)


def pytest_generate_tests(metafunc):
    if "codec" in metafunc.fixturenames:
        metafunc.parametrize("codec", ["none", "qsgd:bits=8"])


def test_a_replica_killed_mid_training_is_survived_and_heals(codec):
    """torchft's lighthouse and two replica groups, each a Manager over ProcessGroupGradwire:
    replica 1 is SIGKILLed at step 10 and restarted. Replica 0 keeps committing steps alone,
    replica 1 heals from it, and both end with the same parameters. Dense through torchft's
    own DDP hook, and compressed with error feedback through gradwire.torchft's."""
    import signal

    import pytest
    why = _skip_reason()
    if why:
        pytest.skip(why)
    sys.path.insert(0, PYDIR)
    sys.path.insert(0, HERE)
    from ranks import free_ports
    from torchft._torchft import LighthouseServer
    steps = 80
    out = tempfile.mkdtemp(prefix="gw-torchft-kill-")
    ports = free_ports(2)
    # A 2 s heartbeat timeout: how long the lighthouse takes to drop the dead replica.
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=500, heartbeat_timeout_ms=2000)
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("UCX_TLS", "tcp,self")
    paths = [os.path.join(out, "replica%d.json" % i) for i in range(2)]

    def start(i):
        log = open(paths[i] + ".log", "a")
        return subprocess.Popen([sys.executable, __file__, "--replica", str(i), lighthouse.address(), str(ports[i]),
                                 paths[i], str(steps), codec], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def step_of(i):
        try:
            with open(paths[i] + ".step") as f:
                return int(f.read() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def logs():
        return "\n".join("---- replica %d ----\n%s" % (i, open(paths[i] + ".log").read()[-4000:]) for i in range(2))

    procs = [start(0), start(1)]
    try:
        deadline = time.monotonic() + 120
        while step_of(1) < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert step_of(1) >= 10, "replica 1 never reached step 10\n" + logs()
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        killed_at, survivor_step = time.monotonic(), step_of(0)
        while step_of(0) < survivor_step + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        resumed_after = time.monotonic() - killed_at
        assert step_of(0) >= survivor_step + 2, "replica 0 stopped stepping after the kill\n" + logs()
        procs[1] = start(1)
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        lighthouse.shutdown()
    assert all(p.returncode == 0 for p in procs), logs()
    res = []
    for path in paths:
        with open(path) as f:
            res.append(json.load(f))
    assert res[0]["step"] == steps and res[1]["step"] == steps, res
    # Replica 0 stepped alone after the kill and with replica 1 again after it healed.
    assert {1, 2} <= {n for _, _, n in res[0]["seen"]}, res[0]["seen"]
    assert 2 in {n for _, _, n in res[1]["seen"]}, res[1]["seen"]
    # Healed: the same parameters at the end (same updates since the heal).
    assert abs(res[0]["psum"] - res[1]["psum"]) < 1e-9, (res[0]["psum"], res[1]["psum"])
    # The lighthouse's 2 s heartbeat timeout dominates; gradwire fails the pending step in ms.
    assert resumed_after < 10, resumed_after
    if codec != "none":
        # Every backward pass of each replica (one bucket each: the model is small) went
        # through gradwire's compressed hook: sent, skipped after an error, or failed and
        # reported. Steps a replica took over by healing ran no backward pass there, so the
        # count is the replica's iterations, not the committed step.
        for r in res:
            hook = r["hook"]
            assert hook["buckets"] > 0 and hook["buckets"] + hook["skipped"] + hook["errors"] == len(r["seen"]), r
    print("%s: replica 0 committed two more steps %.2f s after the kill" % (codec, resumed_after))


if __name__ == "__main__":
    if sys.argv[1] == "--replica":
        replica_main(sys.argv[2:])
    else:
        worker_main(sys.argv[1:])
