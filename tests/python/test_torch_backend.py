"""The torch.distributed backend "gradwire" (torch_backend/, python/gradwire/_backend.py).

Each test runs this file as N fresh processes (`python test_torch_backend.py SCENARIO RANK N
INITFILE OUTDIR`) that call dist.init_process_group("gradwire", init_method="file://...") and
check every collective against values computed locally; the pytest side asserts that no rank
saw a difference. Real processes, real libgradwire over UCX, nothing mocked.
Skips when the extension is not built (scripts/build-torch-backend.sh).
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

SIZES = [0, 1, 7, 13, 1000]  # empty, one, primes (13: not divisible by 2 or 3), larger


# ---------------------------------------------------------------- worker side

def _values(torch, n, dtype, rank, kind="sum"):
    """Rank-dependent values whose reductions are exact in every dtype."""
    base = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((base + rank) % 2 == 0)
    if kind == "prod":
        return ((base + rank) % 2 + 1).to(dtype)
    return (base % 7 + rank + 1).to(dtype)


def _reduce(torch, xs, op, dtype):
    dist = torch.distributed
    if dtype == torch.bool:
        stacked = torch.stack([x.to(torch.int64) for x in xs])
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            return stacked.max(0).values.bool() if len(xs) else None
        return stacked.min(0).values.bool()
    wide = torch.stack([x.to(torch.float64 if dtype.is_floating_point else torch.int64) for x in xs])
    if op == dist.ReduceOp.SUM:
        r = wide.sum(0)
    elif op == dist.ReduceOp.AVG:
        r = wide.sum(0) / len(xs) if dtype.is_floating_point else torch.div(wide.sum(0), len(xs), rounding_mode="trunc")
    elif op == dist.ReduceOp.PRODUCT:
        r = wide.prod(0)
    elif op == dist.ReduceOp.MIN:
        r = wide.min(0).values
    else:
        r = wide.max(0).values
    return r.to(dtype)


class Checker:
    def __init__(self):
        self.failures = []
        self.checked = 0

    def same(self, what, got, want):
        self.checked += 1
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append("%s: got %s %s, want %s %s" % (what, tuple(got.shape), got.dtype,
                                                               tuple(want.shape), want.dtype))
            return
        import torch
        if got.dtype.is_floating_point:
            ok = torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-3)
        else:
            ok = torch.equal(got, want)
        if not ok:
            self.failures.append("%s: got %s, want %s" % (what, got.flatten()[:8].tolist(), want.flatten()[:8].tolist()))

    def true(self, what, cond):
        self.checked += 1
        if not cond:
            self.failures.append(what)


def scenario_collectives(torch, dist, gwb, rank, size, out):
    c = Checker()
    D = dist.ReduceOp
    float_types = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
    int_types = [torch.int8, torch.uint8, torch.int32, torch.int64]
    all_types = float_types + int_types + [torch.bool]

    # all_reduce: every dtype x op x size, in place
    for dtype in all_types:
        ops = [D.SUM, D.MIN, D.MAX, D.PRODUCT] + ([D.AVG] if dtype != torch.bool else [])
        for op in ops:
            for n in SIZES:
                kind = "prod" if op == D.PRODUCT else "sum"
                t = _values(torch, n, dtype, rank, kind)
                dist.all_reduce(t, op=op)
                want = _reduce(torch, [_values(torch, n, dtype, r, kind) for r in range(size)], op, dtype)
                c.same("all_reduce %s %s n=%d" % (dtype, op, n), t, want)

    # shapes kept, non-contiguous tensors, async with wait / get_future
    x = _values(torch, 35, torch.float32, rank).reshape(5, 7)
    xt = x.t()  # non-contiguous view
    dist.all_reduce(xt)
    want = _reduce(torch, [_values(torch, 35, torch.float32, r).reshape(5, 7) for r in range(size)], D.SUM,
                   torch.float32)
    c.same("all_reduce non-contiguous", x, want)
    t = _values(torch, 1001, torch.float32, rank)
    work = dist.all_reduce(t, async_op=True)
    c.true("async all_reduce wait() returned True", work.wait() is True)
    c.true("async all_reduce is_completed", work.is_completed())
    c.same("async all_reduce", t, _reduce(torch, [_values(torch, 1001, torch.float32, r) for r in range(size)],
                                         D.SUM, torch.float32))
    t = _values(torch, 17, torch.int64, rank)
    fut = dist.all_reduce(t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    res = fut.wait()
    want = _reduce(torch, [_values(torch, 17, torch.int64, r) for r in range(size)], D.SUM, torch.int64)
    c.same("future value", res[0], want)
    c.same("chained future", chained.wait(), want * 2)
    works = [dist.all_reduce(_values(torch, 100 + i, torch.float32, rank), async_op=True) for i in range(6)]
    for w in reversed(works):
        w.wait()
    c.true("several works in flight", all(w.is_completed() for w in works))

    # all_reduce_coalesced (flattened into one all-reduce)
    if hasattr(dist, "all_reduce_coalesced"):
        ts = [_values(torch, n, torch.float32, rank).reshape(-1, 1) for n in (3, 0, 11)]
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.all_reduce_coalesced(ts)
        for n, got in zip((3, 0, 11), ts):
            c.same("all_reduce_coalesced n=%d" % n, got,
                   _reduce(torch, [_values(torch, n, torch.float32, r) for r in range(size)], D.SUM,
                           torch.float32).reshape(-1, 1))

    # reduce, broadcast: every root
    for root in range(size):
        for dtype in (torch.float32, torch.int32, torch.bool):
            for n in (0, 13):
                t = _values(torch, n, dtype, rank)
                dist.reduce(t, dst=root, op=D.SUM)
                if rank == root:
                    c.same("reduce root=%d %s n=%d" % (root, dtype, n), t,
                           _reduce(torch, [_values(torch, n, dtype, r) for r in range(size)], D.SUM, dtype))
                t = _values(torch, n, dtype, rank)
                dist.broadcast(t, src=root)
                c.same("broadcast root=%d %s n=%d" % (root, dtype, n), t, _values(torch, n, dtype, root))
        t = _values(torch, 12, torch.float64, rank).reshape(3, 4).t()
        dist.broadcast(t, src=root)
        c.same("broadcast non-contiguous", t, _values(torch, 12, torch.float64, root).reshape(3, 4).t())

    # all_gather: equal and unequal sizes; all_gather_into_tensor
    for dtype in (torch.float16, torch.int64, torch.bool):
        for n in SIZES:
            outs = [torch.empty(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, _values(torch, n, dtype, rank))
            for r in range(size):
                c.same("all_gather %s n=%d from %d" % (dtype, n, r), outs[r], _values(torch, n, dtype, r))
            o = torch.empty(n * size, dtype=dtype)
            dist.all_gather_into_tensor(o, _values(torch, n, dtype, rank))
            c.same("all_gather_into_tensor %s n=%d" % (dtype, n), o,
                   torch.cat([_values(torch, n, dtype, r) for r in range(size)]))
    outs = [torch.empty(r + 2, dtype=torch.float32) for r in range(size)]
    dist.all_gather(outs, _values(torch, rank + 2, torch.float32, rank))
    for r in range(size):
        c.same("all_gather unequal from %d" % r, outs[r], _values(torch, r + 2, torch.float32, r))
    outs = [torch.empty(3, 2).t() for _ in range(size)]  # non-contiguous outputs
    dist.all_gather(outs, _values(torch, 6, torch.float32, rank).reshape(2, 3))
    for r in range(size):
        c.same("all_gather non-contiguous from %d" % r, outs[r], _values(torch, 6, torch.float32, r).reshape(2, 3))
    if hasattr(dist, "all_gather_coalesced"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ins = [_values(torch, 5, torch.float32, rank), _values(torch, 3, torch.float32, rank).reshape(3, 1)]
            # torch's layout (as gloo's): one list per rank, holding that rank's inputs.
            outl = [[torch.empty(5), torch.empty(3, 1)] for _ in range(size)]
            dist.all_gather_coalesced(outl, ins)
        for r in range(size):
            c.same("all_gather_coalesced float from %d" % r, outl[r][0], _values(torch, 5, torch.float32, r))
            c.same("all_gather_coalesced 3x1 from %d" % r, outl[r][1], _values(torch, 3, torch.float32, r).reshape(3, 1))

    # reduce_scatter (list) and reduce_scatter_tensor
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for n in (0, 1, 13):
            full = [_values(torch, n * size, dtype, r) for r in range(size)]
            want_all = _reduce(torch, full, D.SUM, dtype)
            o = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(o, full[rank])
            c.same("reduce_scatter_tensor %s n=%d" % (dtype, n), o, want_all[rank * n:(rank + 1) * n])
            o = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(o, list(full[rank].split(n)) if n else [torch.empty(0, dtype=dtype)] * size)
            c.same("reduce_scatter %s n=%d" % (dtype, n), o, want_all[rank * n:(rank + 1) * n])
    o = torch.empty(4, dtype=torch.float32)
    full = [_values(torch, 4 * size, torch.float32, r) for r in range(size)]
    dist.reduce_scatter_tensor(o, full[rank], op=D.MAX)
    c.same("reduce_scatter_tensor MAX", o, _reduce(torch, full, D.MAX, torch.float32)[rank * 4:(rank + 1) * 4])
    # PREMUL_SUM (FSDP2's gradient divide factor): sum of factor * input, the input untouched;
    # the factor as a number and as a tensor (dyadic, so every result is exact).
    if hasattr(dist, "_make_nccl_premul_sum"):
        for factor in (0.5, torch.tensor(0.25)):
            f = float(factor)
            try:
                op = dist._make_nccl_premul_sum(factor)
            except TypeError:  # torch 1.13 takes a tensor factor as a list (one per device)
                op = dist._make_nccl_premul_sum([factor])
            want = _reduce(torch, full, D.SUM, torch.float32) * f
            before = full[rank].clone()
            o = torch.empty(4, dtype=torch.float32)
            dist.reduce_scatter_tensor(o, full[rank], op=op)
            c.same("reduce_scatter_tensor PREMUL_SUM(%g)" % f, o, want[rank * 4:(rank + 1) * 4])
            c.same("reduce_scatter_tensor PREMUL_SUM(%g) leaves the input" % f, full[rank], before)
            o = torch.empty(4, dtype=torch.float32)
            dist.reduce_scatter(o, list(full[rank].split(4)), op=op)
            c.same("reduce_scatter PREMUL_SUM(%g)" % f, o, want[rank * 4:(rank + 1) * 4])
            x = full[rank].clone()
            dist.all_reduce(x, op=op)
            c.same("all_reduce PREMUL_SUM(%g)" % f, x, want)
        try:
            dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(0.5))
            c.failures.append("all_reduce PREMUL_SUM on int32: no error")
        except Exception as e:  # NotImplementedError from TORCH_CHECK_NOT_IMPLEMENTED
            c.checked += 1
            if "floating-point" not in str(e):
                c.failures.append("all_reduce PREMUL_SUM on int32: %s" % e)

    # all_to_all_single: equal blocks and split sizes; all_to_all (lists)
    for n in (0, 1, 5):
        ins = _values(torch, n * size, torch.int32, rank) + 100 * rank
        o = torch.empty(n * size, dtype=torch.int32)
        dist.all_to_all_single(o, ins)
        want = torch.cat([(_values(torch, n * size, torch.int32, r) + 100 * r)[rank * n:(rank + 1) * n]
                          for r in range(size)])
        c.same("all_to_all_single equal n=%d" % n, o, want)
    # rank r sends (d + 1) rows of 3 to rank d, so it receives rank + 1 rows from every rank
    in_splits = [d + 1 for d in range(size)]
    out_splits = [rank + 1] * size
    rows = sum(in_splits)

    def rows_of(r):
        return (torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3) + 1000 * r)

    o = torch.empty(sum(out_splits), 3, dtype=torch.float64)
    dist.all_to_all_single(o, rows_of(rank), output_split_sizes=out_splits, input_split_sizes=in_splits)
    want = torch.cat([rows_of(r)[sum(in_splits[:rank]):sum(in_splits[:rank + 1])] for r in range(size)])
    c.same("all_to_all_single split sizes", o, want)
    ins = [torch.full((d + 1,), float(rank * 10 + d)) for d in range(size)]
    outs = [torch.empty(rank + 1) for _ in range(size)]
    dist.all_to_all(outs, ins)
    for r in range(size):
        c.same("all_to_all from %d" % r, outs[r], torch.full((rank + 1,), float(r * 10 + rank)))

    # gather, scatter: every root
    for root in range(size):
        for n in (0, 7):
            g = [torch.empty(n, dtype=torch.int8) for _ in range(size)] if rank == root else None
            dist.gather(_values(torch, n, torch.int8, rank), gather_list=g, dst=root)
            if rank == root:
                for r in range(size):
                    c.same("gather root=%d n=%d from %d" % (root, n, r), g[r], _values(torch, n, torch.int8, r))
            o = torch.empty(n, dtype=torch.uint8)
            s = [_values(torch, n, torch.uint8, r) * 2 for r in range(size)] if rank == root else None
            dist.scatter(o, scatter_list=s, src=root)
            c.same("scatter root=%d n=%d" % (root, n), o, _values(torch, n, torch.uint8, rank) * 2)

    # send / recv around a ring, blocking and non-blocking
    if size > 1:
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        for n in (0, 13):
            got = torch.empty(n, dtype=torch.float32)
            reqs = [dist.isend(_values(torch, n, torch.float32, rank), nxt), dist.irecv(got, prv)]
            for q in reqs:
                q.wait()
            c.same("isend/irecv n=%d" % n, got, _values(torch, n, torch.float32, prv))
        if rank < 2:  # blocking send and recv between ranks 0 and 1, tagged
            peer = 1 - rank
            got = torch.empty(5)
            if rank == 0:
                dist.send(torch.arange(5.0) + rank, peer, tag=3)
                dist.recv(got, peer, tag=4)
            else:
                dist.recv(got, peer, tag=3)
                dist.send(torch.arange(5.0) + rank, peer, tag=4)
            c.same("send/recv", got, torch.arange(5.0) + peer)

    dist.barrier()
    work = dist.barrier(async_op=True)
    work.wait()

    # unsupported requests fail clearly
    for op, what in ((D.BAND, "BAND"), (D.BOR, "BOR"), (D.BXOR, "BXOR")):
        try:
            dist.all_reduce(torch.ones(3, dtype=torch.int32), op=op)
            c.true("all_reduce %s raised" % what, False)
        except RuntimeError as e:
            c.true("all_reduce %s message names it: %s" % (what, e), what in str(e) and "not supported" in str(e))

    # the profiler sees each op
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        dist.all_reduce(torch.ones(10))
        dist.broadcast(torch.ones(10), src=0)
        dist.all_to_all_single(torch.empty(size * 2), torch.ones(size * 2))
    names = {e.name for e in prof.events()}
    for want in ("gradwire:all_reduce", "gradwire:broadcast", "gradwire:all_to_all_single"):
        c.true("profiler shows %s (saw %s)" % (want, sorted(n for n in names if "gradwire" in n or "c10d" in n)),
               want in names)
    shapes = [e.input_shapes for e in prof.events() if e.name == "gradwire:all_reduce"]
    c.true("profiler records the inputs of gradwire:all_reduce (%s)" % shapes, any([10] in s for s in shapes))

    # a subgroup: its own communicator, bootstrapped through the same store
    if size == 3:
        sub = dist.new_group([0, 2])
        if rank in (0, 2):
            t = torch.full((5,), float(rank))
            dist.all_reduce(t, group=sub)
            c.same("all_reduce on new_group([0, 2])", t, torch.full((5,), 2.0))
            subcomm = gwb.get_communicator(sub)
            c.true("subgroup communicator", (subcomm.rank, subcomm.size) == (rank // 2, 2))
            subcomm.close()
        dist.barrier()

    # DistributedDataParallel: its buckets go through all_reduce and the Work's future
    torch.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optim = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        optim.zero_grad()
        ddp(torch.randn(4, 8) * (rank + 1)).sum().backward()
        optim.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    c.true("DDP keeps every rank's parameters equal", all(torch.equal(e, flat) for e in everyone))

    # the group's communicator, its options, its name
    comm = gwb.get_communicator()
    c.true("communicator rank/size", (comm.rank, comm.size) == (rank, size))
    x = torch.full((100,), float(rank + 1))
    comm.allreduce(x, codec="fp16")  # a compressed call on the same communicator, in call order
    dist.all_reduce(y := torch.ones(3))
    c.same("after a compressed call", y, torch.full((3,), float(size)))
    c.same("compressed allreduce via get_communicator", x, torch.full((100,), float(size * (size + 1) // 2)))
    comm.close()  # borrowed: the group keeps working
    dist.all_reduce(y)
    c.same("group usable after closing the borrowed communicator", y, torch.full((3,), float(size * size)))
    opts = gwb.get_options()
    c.true("options read back: %r" % opts, opts.codec == "qsgd:bits=4" and opts.ef is False
           and opts.extra == {"note": "x"})
    backend = dist.distributed_c10d._get_default_group()
    if hasattr(backend, "_get_backend"):
        backend = backend._get_backend(torch.device("cpu"))
    c.true("backend name %r" % backend.name(), backend.name() == "gradwire")
    out["failures"] = c.failures
    out["checked"] = c.checked


def scenario_mismatch(torch, dist, gwb, rank, size, out):
    """Ranks call all_reduce with different sizes: every rank gets gradwire's error."""
    try:
        dist.all_reduce(torch.ones(10 + rank))
        out["error"] = None
    except RuntimeError as e:
        out["error"] = str(e)


def scenario_timeout(torch, dist, gwb, rank, size, out):
    """Rank 1 never calls: rank 0's wait fails within the group's timeout, with gradwire's words."""
    t0 = time.monotonic()
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4))
            out["error"] = None
        except RuntimeError as e:
            out["error"] = str(e)
    else:
        time.sleep(6)
    out["elapsed"] = time.monotonic() - t0


def scenario_exit_pending(torch, dist, gwb, rank, size, out):
    """The script ends with work in flight and without destroy_process_group: the interpreter
    exits normally (the atexit shutdown finishes or aborts what is pending)."""
    for i in range(20):
        dist.all_reduce(torch.full((1000 + i,), float(rank)), async_op=True)  # temporaries, never waited
    if rank == 0 and size > 1:
        out["stuck"] = True
        dist.irecv(torch.empty(4), src=1, tag=7)  # rank 1 never sends: aborted after the grace
    out["pending"] = True


def scenario_shutdown(torch, dist, gwb, rank, size, out):
    """destroy_process_group closes the connections; the backend, still held, refuses later calls."""
    group = dist.group.WORLD
    backend = group._get_backend(torch.device("cpu"))
    t = torch.ones(8)
    dist.all_reduce(t)
    out["sum_ok"] = bool(torch.all(t == size))
    dist.destroy_process_group()
    try:
        backend.allreduce([torch.ones(3)]).wait()
        out["after"] = None
    except RuntimeError as e:
        out["after"] = str(e)


def worker_main(argv):
    scenario, rank, size, init_file, outdir = argv[0], int(argv[1]), int(argv[2]), argv[3], argv[4]
    sys.path.insert(0, PYDIR)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    import gradwire._backend as gwb
    out = {"rank": rank}
    try:
        opts = gwb.BackendOptions(codec="qsgd:bits=4", ef=False, note="x")
        timeout = datetime.timedelta(seconds=3 if scenario == "timeout" else 60)
        dist.init_process_group("gradwire", init_method="file://" + init_file, rank=rank, world_size=size,
                                timeout=timeout, pg_options=opts)
        globals()["scenario_" + scenario](torch, dist, gwb, rank, size, out)
        if scenario == "collectives":
            dist.destroy_process_group()
    except Exception:
        out["exception"] = traceback.format_exc()
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)
    sys.stdout.flush()
    if scenario in ("exit_pending", "shutdown"):
        return  # the interpreter's own exit is what these test
    os._exit(0)  # a broken communicator (error scenarios) need not be torn down


# ---------------------------------------------------------------- pytest side

if __name__ != "__main__":
    import pytest

    def _state():
        sys.path.insert(0, PYDIR)
        try:
            import torch.distributed as dist
            if not dist.is_available():
                return "torch.distributed is not available"
            import gradwire._backend as gwb
        except ImportError as e:
            return "cannot import gradwire._backend: %s" % e
        return gwb.unavailable_reason()

    _why = _state()
    pytestmark = pytest.mark.skipif(_why is not None, reason=str(_why))


def run(scenario, size, timeout=120, logs_out=None):
    tmp = tempfile.mkdtemp(prefix="gw-torch-backend-")
    init_file = os.path.join(tmp, "init")
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("UCX_TLS", "tcp,self")
    env.setdefault("GW_DEBUG", "WARN")
    env["OMP_NUM_THREADS"] = "1"
    for k in ("GW_CODEC", "GW_ALGO", "GW_DENSE_THRESHOLD", "GW_TIMEOUT_S"):
        env.pop(k, None)
    procs, logs = [], []
    for r in range(size):
        log = open(os.path.join(tmp, "rank%d.log" % r), "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), scenario, str(r), str(size),
                                       init_file, tmp], env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    report = ""
    for r, log in enumerate(logs):
        log.seek(0)
        report += "---- rank %d (exit %s) ----\n%s\n" % (r, procs[r].returncode, log.read()[-4000:])
        log.close()
    results = []
    for r in range(size):
        path = os.path.join(tmp, "rank%d.json" % r)
        assert os.path.exists(path), "rank %d wrote no result\n%s" % (r, report)
        with open(path) as f:
            results.append(json.load(f))
    for res in results:
        assert "exception" not in res, "rank %d raised\n%s\n%s" % (res["rank"], res["exception"], report)
    if logs_out is not None:
        logs_out.extend([report, [p.returncode for p in procs]])
    return results


def test_collectives_one_rank():
    (res,) = run("collectives", 1)
    assert res["failures"] == [], "\n".join(res["failures"])
    assert res["checked"] > 250


def test_collectives_two_ranks():
    for res in run("collectives", 2):
        assert res["failures"] == [], "rank %d: %s" % (res["rank"], "\n".join(res["failures"]))


def test_collectives_three_ranks():
    for res in run("collectives", 3):
        assert res["failures"] == [], "rank %d: %s" % (res["rank"], "\n".join(res["failures"]))


def test_mismatched_calls_fail_on_every_rank():
    for res in run("mismatch", 2):
        assert res["error"] is not None, "rank %d: no error" % res["rank"]
        assert "gradwire all_reduce failed" in res["error"] and "invalid usage" in res["error"], res["error"]


def test_timeout_names_the_missing_rank():
    res = run("timeout", 2)[0]
    assert res["error"] is not None and "gradwire all_reduce failed" in res["error"], res
    assert "timeout" in res["error"], res["error"]
    assert res["elapsed"] < 30, res


def _clean_exit(logs, codes):
    report = logs
    assert codes == [0] * len(codes), report
    for bad in ("terminate called", "Endpoint timeout", "Aborted", "Segmentation"):
        assert bad not in report, report


def test_exit_with_work_pending_is_clean():
    logs = []
    t0 = time.monotonic()
    res = run("exit_pending", 3, logs_out=logs)
    elapsed = time.monotonic() - t0
    _clean_exit(*logs)
    assert all(r["pending"] for r in res)
    assert elapsed < 40, "exit took %.1f s\n%s" % (elapsed, logs[0])


def test_destroy_process_group_shuts_the_backend_down():
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        pytest.skip("torch 1.13 has no Backend.shutdown; its groups close when destroyed")
    logs = []
    res = run("shutdown", 2, logs_out=logs)
    _clean_exit(*logs)
    for r in res:
        assert r["sum_ok"], r
        assert r["after"] is not None and "shut down" in r["after"], r


if __name__ == "__main__":
    worker_main(sys.argv[1:])
