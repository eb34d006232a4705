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
