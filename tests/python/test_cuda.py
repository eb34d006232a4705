"""CUDA tensors through the Python package: the device collectives give what the host ones
give, bit for bit. Skipped (with the reason) where torch has no CUDA device."""
import pytest

import gradwire

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")


def test_device_allreduce_matches_host_and_keeps_its_residual_on_the_device():
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
    import os
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
