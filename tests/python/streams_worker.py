"""One rank of tests/python/test_torch_streams.py (and test_torch_cuda.py): the torch backend's
stream order on gradwire's stand-in accelerator (gradwire.standin), whose streams run their work
later on threads of their own, or on CUDA (GRADWIRE_TEST_DEVICE=cuda: torch's streams, with
torch.cuda._sleep making the writes late), so that every missing wait reads a value that is not
there yet.

    python streams_worker.py SCENARIO OUTDIR      (RANK, WORLD_SIZE, MASTER_* set by ranks.py)

Every check is recorded by name in OUTDIR/rank<R>.json ("failures": names that failed), so the
test can also show which checks fail when one wait of the backend is left out.
"""
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gradwire.torch as gwt  # noqa: E402
from gradwire import standin  # noqa: E402

FILL_DELAY_S = 0.03  # the caller's stream writes the inputs this late
CUDA = os.environ.get("GRADWIRE_TEST_DEVICE") == "cuda"


class Checks:
    def __init__(self):
        self.failures = []
        self.passed = []

    def true(self, name, cond):
        (self.passed if cond else self.failures).append(name)
        if not cond:
            print("FAILED %s" % name, flush=True)

    def close(self, name, got, want):
        self.true(name, got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-6))

    def equal(self, name, got, want):
        ok = got.shape == want.shape and bool((got == want).all())
        (self.passed if ok else self.failures).append(name)
        if not ok:
            print("FAILED %s: got %s want %s" % (name, got.flatten()[:6].tolist(), want.flatten()[:6].tolist()),
                  flush=True)


def new_stream(seed):
    return torch.cuda.Stream() if CUDA else standin.Stream(max_delay_us=2000, seed=seed)


def on(s):
    """s becomes this thread's current stream (torch.cuda.stream or gradwire.standin.stream)."""
    return torch.cuda.stream(s) if CUDA else standin.stream(s)


def later(s, fn):
    """fn's work runs on stream s after FILL_DELAY_S (work queued on a busy GPU stream)."""
    if CUDA:
        with torch.cuda.stream(s):
            torch.cuda._sleep(int(FILL_DELAY_S * 2e9))  # about 30 ms at 2 GHz
            fn()
    else:
        s.enqueue(lambda: (time.sleep(FILL_DELAY_S), fn()))


def read_on(s, tensor, box, key):
    """A copy of tensor taken in s's order."""
    if CUDA:
        with torch.cuda.stream(s):
            box[key] = tensor.clone()
    else:
        s.enqueue(lambda: box.__setitem__(key, tensor.clone()))


def zeros(*shape):
    return torch.zeros(*shape, device="cuda" if CUDA else "cpu")


def host(box):
    return {k: v.cpu() for k, v in box.items()}


def scenario_order(rank, size, checks):
    s = new_stream(rank + 1)
    side = new_stream(rank + 101)
    seen = {}
    total = float(sum(range(1, size + 1)))
    with on(s):
        # Two async all-reduces of one tensor, issued back to back, then used on the stream.
        t = zeros(4099)
        later(s, lambda: t.fill_(rank + 1))
        w1 = dist.all_reduce(t, async_op=True)
        w2 = dist.all_reduce(t, async_op=True)
        w1.wait()
        w2.wait()
        read_on(s, t, seen, "back_to_back")

        # A non-contiguous tensor: packed on the caller's stream, unpacked on the group's.
        m = zeros(64, 33)
        col = m[:, 5]
        later(s, lambda: col.fill_(rank + 1))
        dist.all_reduce(col)  # blocking call: its Work is waited on the stream
        read_on(s, col, seen, "non_contiguous")

        # Coalesced (a list packed into one buffer).
        a, b = zeros(7), zeros(3, 5)
        later(s, lambda: (a.fill_(rank + 1), b.fill_(10 * (rank + 1))))
        dist.all_reduce_coalesced([a, b], async_op=True).wait()
        read_on(s, a, seen, "coalesced_a")
        read_on(s, b, seen, "coalesced_b")

        # Reduce-scatter and all-gather into tensors (FSDP's pair).
        rs_in = zeros(size * 5)
        rs_out = zeros(5)
        later(s, lambda: rs_in.copy_(torch.arange(size * 5, dtype=torch.float32, device=rs_in.device) + rank))
        dist.reduce_scatter_tensor(rs_out, rs_in, async_op=True).wait()
        read_on(s, rs_out, seen, "reduce_scatter_tensor")
        ag_in = zeros(6)
        ag_out = zeros(size * 6)
        later(s, lambda: ag_in.fill_(rank + 1))
        dist.all_gather_into_tensor(ag_out, ag_in, async_op=True).wait()
        read_on(s, ag_out, seen, "all_gather_into_tensor")

        # All-gather into a list, broadcast, reduce, scatter, all-to-all.
        outs = [zeros(3) for _ in range(size)]
        g_in = zeros(3)
        later(s, lambda: g_in.fill_(rank + 1))
        dist.all_gather(outs, g_in, async_op=True).wait()
        for r in range(size):
            read_on(s, outs[r], seen, "all_gather_%d" % r)
        bc = zeros(9)
        later(s, lambda: bc.fill_(rank + 7))
        dist.broadcast(bc, src=size - 1, async_op=True).wait()
        read_on(s, bc, seen, "broadcast")
        rd = zeros(5)
        later(s, lambda: rd.fill_(rank + 1))
        dist.reduce(rd, dst=0, async_op=True).wait()
        read_on(s, rd, seen, "reduce")
        a2a_in = zeros(size * 2)
        a2a_out = zeros(size * 2)
        later(s, lambda: a2a_in.copy_(torch.arange(size * 2, dtype=torch.float32, device=a2a_in.device) + 100 * rank))
        dist.all_to_all_single(a2a_out, a2a_in, async_op=True).wait()
        read_on(s, a2a_out, seen, "all_to_all_single")

        # A side stream: the call is made while it is current, the main stream waits for it.
        x = zeros(1000)
        with on(side):
            later(side, lambda: x.fill_(rank + 1))
            dist.all_reduce(x, async_op=True).wait()
        s.wait_stream(side)
        read_on(s, x, seen, "side_stream")
    s.synchronize()
    side.synchronize()
    seen = host(seen)

    checks.equal("back_to_back", seen["back_to_back"], torch.full((4099,), size * total))
    checks.equal("non_contiguous", seen["non_contiguous"], torch.full((64,), total))
    checks.equal("coalesced_a", seen["coalesced_a"], torch.full((7,), total))
    checks.equal("coalesced_b", seen["coalesced_b"], torch.full((3, 5), 10 * total))
    want = sum(torch.arange(size * 5, dtype=torch.float32) + r for r in range(size))[rank * 5:(rank + 1) * 5]
    checks.equal("reduce_scatter_tensor", seen["reduce_scatter_tensor"], want)
    checks.equal("all_gather_into_tensor", seen["all_gather_into_tensor"],
                 torch.cat([torch.full((6,), float(r + 1)) for r in range(size)]))
    for r in range(size):
        checks.equal("all_gather_%d" % r, seen["all_gather_%d" % r], torch.full((3,), float(r + 1)))
    checks.equal("broadcast", seen["broadcast"], torch.full((9,), float(size - 1 + 7)))
    checks.equal("reduce", seen["reduce"], torch.full((5,), total if rank == 0 else float(rank + 1)))
    want = torch.cat([torch.arange(size * 2, dtype=torch.float32)[2 * rank:2 * rank + 2] + 100 * r for r in range(size)])
    checks.equal("all_to_all_single", seen["all_to_all_single"], want)
    checks.equal("side_stream", seen["side_stream"], torch.full((1000,), total))


def _model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    return m.cuda() if CUDA else m


def _train(ddp, steps, rank, start=0):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(start, start + steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 32, generator=g).to("cuda" if CUDA else "cpu")
        y = torch.randint(0, 10, (16,), generator=g).to("cuda" if CUDA else "cpu")
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def scenario_ddp(rank, size, checks):
    """DDP on the stand-in device path (every tensor is stand-in memory; no stream is chosen,
    so torch's own ops keep the host's order), without and with the gradwire hook, against
    the same training on gloo; and the hook's device EF state saved and resumed."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    gloo = dist.new_group(backend="gloo")
    # Without a hook: DDP's own all-reduces on the gradwire group (the stand-in device path).
    a, b = _model(), _model()
    _train(DDP(a), 3, rank)
    _train(DDP(b, process_group=gloo), 3, rank)
    # gloo and gradwire sum three or more ranks in other orders: equal to rounding.
    checks.close("ddp_no_hook", _params(a), _params(b))
    # With the hook, top-k and EF: the device path (stand-in EF states) against the host path
    # (a communicator of its own over plain host buffers), bit for bit.
    host_comm = gwt.init_communicator(gloo)
    codec, ratio = "topk:ratio=0.05", None
    del ratio
    m1, m2, m3 = _model(), _model(), _model()
    d1 = DDP(m1)
    s1 = gwt.HookState(codec=codec, min_size=0, algo="sparse_allgather")
    d1.register_comm_hook(s1, gwt.comm_hook)
    d2 = DDP(m2, process_group=gloo)
    s2 = gwt.HookState(comm=host_comm, codec=codec, min_size=0, algo="sparse_allgather", process_group=gloo)
    d2.register_comm_hook(s2, gwt.comm_hook)
    _train(d1, 2, rank)
    _train(d2, 4, rank)
    for i in s1._ef:
        where = s1._ef[i][2].device
        checks.true("hook_ef_on_device_%d" % i, (where is not None and where != "standin") if CUDA else where == "standin")
    # Checkpoint the hook after 2 steps, resume into a fresh state and model, go on 2 steps.
    saved_state, saved_model = s1.state_dict(), {k: v.clone() for k, v in m1.state_dict().items()}
    m3.load_state_dict(saved_model)
    d3 = DDP(m3)
    s3 = gwt.HookState(codec=codec, min_size=0, algo="sparse_allgather")
    s3.load_state_dict(saved_state)
    d3.register_comm_hook(s3, gwt.comm_hook)
    _train(d3, 2, rank, start=2)
    checks.equal("hook_resumed_vs_host_path", _params(m3), _params(m2))
    checks.true("hook_compressed", s3.stats["compressed"] > 0)
    res3 = {i: torch.from_numpy(s3._ef[i][2].residual()) for i in s3._ef}
    res2 = {i: torch.from_numpy(s2._ef[i][2].residual()) for i in s2._ef}
    checks.true("hook_same_buckets", sorted(res3) == sorted(res2))
    for i in res2:
        checks.equal("hook_residual_%d" % i, res3.get(i, torch.zeros(0)), res2[i])
    s1.close()
    s2.close()
    s3.close()
    host_comm.close()


def scenario_ddp_timing(rank, size, checks):
    """Steps of DDP on a 25M-parameter MLP: the gradwire group (dense: NCCL where each rank has
    a GPU, else gradwire's device path) against gloo on the same CUDA tensors (staged through
    the host), in the same processes. Seconds per step, into the results."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    gloo = dist.new_group(backend="gloo")
    timings = {}
    for name, group in (("gradwire", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)]).cuda()
        ddp = DDP(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        x = torch.randn(64, 2048, device="cuda")
        for step in range(13):
            if step == 3:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            opt.zero_grad()
            ddp(x).square().mean().backward()
            opt.step()
        torch.cuda.synchronize()
        timings[name] = (time.perf_counter() - t0) / 10
    checks.timings = timings
    checks.true("timed", all(v > 0 for v in timings.values()))


def main():
    scenario, outdir = sys.argv[1], sys.argv[2]
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    checks = Checks()
    out = {"rank": rank}
    try:
        if CUDA:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        dist.init_process_group("gradwire", init_method="env://", rank=rank, world_size=size,
                                pg_options=gwt.BackendOptions(standin=not CUDA))
        out["device_path"] = gwt.device_path()
        if not CUDA:
            standin.use_for_cpu_tensors()  # every tensor from here on is stand-in device memory
        globals()["scenario_" + scenario](rank, size, checks)
        dist.destroy_process_group()
    except Exception:
        out["exception"] = traceback.format_exc()
        print(out["exception"], flush=True)
    out["failures"] = checks.failures
    out["passed"] = checks.passed
    out["timings"] = getattr(checks, "timings", {})
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
