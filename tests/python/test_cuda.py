"""CUDA tensors through the Python package: the device collectives give what the host ones
give, bit for bit. Skipped (with the reason) where torch has no CUDA device; with
GW_REQUIRE_GPU set (scripts/gpu-check.sh, the GPU bundle) they fail instead."""
import os

import pytest

import gradwire

REQUIRE_GPU = os.environ.get("GW_REQUIRE_GPU", "") not in ("", "0")
if REQUIRE_GPU:
    import torch  # GW_REQUIRE_GPU: no torch is a failure, not a skip
else:
    torch = pytest.importorskip("torch")


def need_cuda():
    """Skips without a CUDA device for torch, or fails when GW_REQUIRE_GPU is set."""
    if not torch.cuda.is_available():
        why = "torch %s has no CUDA device (built for CUDA %s)" % (torch.__version__, torch.version.cuda)
        if REQUIRE_GPU:
            pytest.fail("GW_REQUIRE_GPU is set, but " + why)
        pytest.skip(why)


def test_device_allreduce_matches_host_and_keeps_its_residual_on_the_device():
    need_cuda()
    with gradwire.Communicator.init_rank(1, gradwire.get_unique_id(), 0, timeout_s=60) as comm:
        g = torch.randn(100003, generator=torch.Generator().manual_seed(3))
        for spec, algo in (("qsgd:bits=4", "scatter_reduce"), ("topk:ratio=0.01", "sparse_allgather")):
            host_ef = gradwire.ErrorFeedback(g.numel())
            dev_ef = gradwire.ErrorFeedback(g.numel(), device="cuda:0")
            host = g.clone()
            dev = g.clone().cuda()
            for _ in range(3):
                host.copy_(g)
                dev.copy_(g)
                comm.allreduce(host, op="avg", codec=spec, ef=host_ef, algo=algo)
                comm.allreduce(dev, op="avg", codec=spec, ef=dev_ef, algo=algo)
            assert torch.equal(dev.cpu().view(torch.int32), host.view(torch.int32)), spec
            assert (dev_ef.residual() == host_ef.residual()).all(), spec
        with pytest.raises(gradwire.GradwireError, match="host memory but the buffer is on cuda"):
            comm.allreduce(dev, codec="qsgd:bits=4", ef=gradwire.ErrorFeedback(g.numel()))
        x = torch.arange(8, dtype=torch.float32, device="cuda")
        comm.iallreduce(x).wait()
        assert x.cpu().tolist() == list(range(8))
        # One rank: nothing to compress, on host or device (gw_allreduce_algo_device).
        assert comm.algo_for(x, "qsgd:bits=4") == comm.algo_for(x.cpu(), "qsgd:bits=4") == "ring"


def test_ddp_hook_keeps_cuda_buckets_on_the_gpu():
    """DDP over one process (gloo) with the hook on a CUDA model: with codec none the
    parameters follow plain training bit for bit; with top-k + EF the buckets are compressed
    on the device and the EF states live there."""
    need_cuda()
    import socket
    import torch.distributed as dist
    import gradwire.torch as gwt

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        comm = gwt.init_communicator(dense_threshold_bytes=0)
        torch.manual_seed(0)
        base = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).cuda()
        data = [(torch.randn(32, 64, device="cuda"), torch.randn(32, 8, device="cuda")) for _ in range(4)]

        def train(model, hook_state):
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            if hook_state is not None:
                ddp.register_comm_hook(hook_state, gwt.comm_hook)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
            for x, y in data:
                opt.zero_grad()
                torch.nn.functional.mse_loss(ddp(x), y).backward()
                opt.step()
            return [p.detach().clone() for p in model.parameters()]

        import copy
        plain = train(copy.deepcopy(base), None)
        dense_state = gwt.HookState(comm, codec="none", min_size=0)
        hooked = train(copy.deepcopy(base), dense_state)
        for a, b in zip(plain, hooked):
            assert torch.equal(a, b)
        assert dense_state.stats["dense"] > 0

        topk_state = gwt.HookState(comm, codec="topk:ratio=0.05", min_size=0, dense_1d=False, algo="sparse_allgather")
        train(copy.deepcopy(base), topk_state)
        assert topk_state.stats["compressed"] > 0
        ef = topk_state.ef_state(0)
        # DDP rebuilds its buckets after the first step, and a rebuilt bucket gets a fresh state.
        assert ef is not None and ef.device is not None and ef.step >= len(data) - 1
        dense_state.close()
        topk_state.close()
        comm.close()
    finally:
        dist.destroy_process_group()


def _pending_work(stream_cycles):
    """Keeps the current stream busy for a while (a spinning kernel)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(stream_cycles)
        return
    big = torch.ones(1 << 26, device="cuda")  # without _sleep: some 50 passes over 256 MiB
    for _ in range(50):
        big.mul_(1.0)


def test_device_allreduce_waits_for_work_pending_on_the_current_stream():
    """torch's current stream is a side stream (not the default one) whose queue still holds a
    long sleep and then the copy that fills the input when the call is made: the collective
    must start after that work (gradwire.Communicator passes torch.cuda.current_stream(),
    and the library waits on it with an event), else it reads the stale -7s or writes its
    result before the copy lands. In place and out of place, allreduce and iallreduce, dense
    and with codecs + EF; the result must be the host path's bit for bit."""
    need_cuda()
    n = (1 << 20) + 3  # 4 MiB: more than one 1 MiB chunk
    g = torch.randn(n, generator=torch.Generator().manual_seed(11))
    g_dev = g.cuda()
    side = torch.cuda.Stream()
    cases = ((None, "auto"), ("qsgd:bits=4", "scatter_reduce"), ("topk:ratio=0.01", "sparse_allgather"))
    with gradwire.Communicator.init_rank(1, gradwire.get_unique_id(), 0, timeout_s=60) as comm:
        for spec, algo in cases:
            for call in ("allreduce", "iallreduce"):
                for in_place in (True, False):
                    what = (spec, algo, call, "in place" if in_place else "out of place")
                    host_ef = gradwire.ErrorFeedback(n) if spec else None
                    dev_ef = gradwire.ErrorFeedback(n, device="cuda:0") if spec else None
                    host = g.clone()
                    host_out = host if in_place else torch.full_like(host, -9.0)
                    comm.allreduce(host, out=None if in_place else host_out, op="avg", codec=spec, ef=host_ef,
                                   algo=algo)
                    x = torch.full_like(g_dev, -7.0)
                    out = x if in_place else torch.full_like(g_dev, -9.0)
                    torch.cuda.synchronize()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        assert torch.cuda.current_stream().cuda_stream == side.cuda_stream
                        _pending_work(200_000_000)  # some 0.1 s on an H100
                        x.copy_(g_dev)
                        if call == "allreduce":
                            comm.allreduce(x, out=None if in_place else out, op="avg", codec=spec, ef=dev_ef,
                                           algo=algo)
                        else:
                            comm.iallreduce(x, out=None if in_place else out, op="avg", codec=spec, ef=dev_ef,
                                            algo=algo).wait()
                        got = out.cpu()  # ordered on the side stream
                    torch.cuda.synchronize()
                    assert not torch.equal(got, torch.full_like(got, -7.0)), what
                    assert torch.equal(got.view(torch.int32), host_out.view(torch.int32)), what
                    if spec:
                        assert (dev_ef.residual() == host_ef.residual()).all(), what
