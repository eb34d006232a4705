"""The torch backend on real CUDA tensors (needs a GPU and the backend's extension built with
CUDA for the torch that runs it): the stream-order scenarios of test_torch_streams.py with
torch's CUDA streams (torch.cuda._sleep makes the caller's writes late), on 2 processes that
share one GPU (gradwire's device path over UCX: NCCL refuses two ranks on one GPU) and on 1
process (NCCL); DDP without and with the hook, and the hook's device EF state resumed; and a
DDP step on the gradwire group timed against gloo on the same CUDA tensors.

Skipped without a CUDA device, unless GW_REQUIRE_GPU is set (then it fails).
"""
import os

import pytest

import ranks

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "streams_worker.py")


def _state():
    try:
        import torch
        import gradwire._backend as gwb
    except ImportError as e:
        return "cannot import torch / gradwire._backend: %s" % e
    if not torch.cuda.is_available():
        return "no CUDA device for torch"
    if gwb.unavailable_reason():
        return gwb.unavailable_reason()
    if not getattr(gwb._ext, "WITH_CUDA", False):
        return "the torch backend's extension was built without CUDA"
    return None


_why = _state()
if _why is not None and os.environ.get("GW_REQUIRE_GPU"):
    raise RuntimeError("GW_REQUIRE_GPU is set but: %s" % _why)
pytestmark = pytest.mark.skipif(_why is not None, reason=str(_why))

CUDA_ENV = {"GRADWIRE_TEST_DEVICE": "cuda"}


def _run(scenario, nranks):
    results = ranks.run_ranks(scenario, nranks=nranks, timeout=240, env=CUDA_ENV, worker=WORKER)
    for res in results:
        assert "exception" not in res, "rank %d raised\n%s" % (res["rank"], res["exception"])
        assert res["failures"] == [], "rank %d: %s failed" % (res["rank"], res["failures"])
    return results


def test_stream_order_two_processes_sharing_the_gpu():
    results = _run("order", 2)
    print("device path:", results[0]["device_path"])
    assert "no NCCL" in results[0]["device_path"], results[0]["device_path"]


def test_stream_order_one_process_on_nccl():
    results = _run("order", 1)
    print("device path:", results[0]["device_path"])
    assert "NCCL" in results[0]["device_path"] and "no NCCL" not in results[0]["device_path"]


def test_ddp_and_the_hook_on_cuda():
    _run("ddp", 2)


def test_ddp_step_against_gloo():
    results = _run("ddp_timing", 2)
    for res in results:
        t = res["timings"]
        print("rank %d: DDP step %.1f ms on gradwire, %.1f ms on gloo (CUDA tensors, 25M parameters, 2 ranks "
              "on one GPU)" % (res["rank"], 1e3 * t["gradwire"], 1e3 * t["gloo"]))
