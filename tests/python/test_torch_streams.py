"""The torch backend's stream order, checked without a GPU on gradwire's stand-in accelerator
(tests/python/streams_worker.py has the scenarios). ProcessGroupNCCL's contract, which the
backend follows on CUDA tensors with the same code (torch_backend/device_streams.hpp):

  - an op starts after what the caller had queued on its current stream when it was called
    (the library takes that point in the calling thread: gw_iallreduce_device & co.);
  - Work.wait() makes the caller's current stream wait for the op, and the host does not;
  - outputs that must be unpacked are unpacked on the group's stream once the request is done.

Each wait is then left out in turn (GW_STANDIN_SKIP_CALLER_WAIT in the library's stand-in,
GRADWIRE_TEST_DROP_WAIT in the backend) and the checks that depend on it must fail: the tests
can fail.
"""
import os

import pytest

import ranks

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "streams_worker.py")


def _state():
    try:
        import torch.distributed as dist
        if not dist.is_available():
            return "torch.distributed is not available"
        import gradwire._backend as gwb
        import gradwire._lib as lib
    except ImportError as e:
        return "cannot import gradwire._backend: %s" % e
    if gwb.unavailable_reason():
        return gwb.unavailable_reason()
    if not lib.has("gw_standin_stream_create"):
        return "this libgradwire has no stand-in accelerator"
    return None


_why = _state()
pytestmark = pytest.mark.skipif(_why is not None, reason=str(_why))

ORDER_CHECKS = {"back_to_back", "non_contiguous", "coalesced_a", "coalesced_b", "reduce_scatter_tensor",
                "all_gather_into_tensor", "broadcast", "reduce", "all_to_all_single", "side_stream"}


def _run(scenario, nranks, env=None):
    return ranks.run_ranks(scenario, nranks=nranks, timeout=120, env=env, worker=WORKER)


def _failures(results):
    for res in results:
        assert "exception" not in res, "rank %d raised\n%s" % (res["rank"], res["exception"])
    return [set(res["failures"]) for res in results]


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_op_keeps_the_callers_stream_order(nranks):
    results = _run("order", nranks)
    for res, failed in zip(results, _failures(results)):
        assert res["device_path"].startswith("stand-in"), res["device_path"]
        assert failed == set(), "rank %d: %s failed" % (res["rank"], sorted(failed))
        assert ORDER_CHECKS <= set(res["passed"]), sorted(ORDER_CHECKS - set(res["passed"]))


def test_without_the_wait_for_the_callers_stream_inputs_are_read_too_early():
    failed = set.union(*_failures(_run("order", 2, env={"GW_STANDIN_SKIP_CALLER_WAIT": "1"})))
    # Every op whose inputs the caller's stream writes late, and that gradwire reads directly.
    assert {"back_to_back", "all_gather_into_tensor", "broadcast", "side_stream"} <= failed, sorted(failed)


def test_without_the_work_wait_the_stream_reads_before_the_op_is_done():
    failed = set.union(*_failures(_run("order", 2, env={"GRADWIRE_TEST_DROP_WAIT": "work"})))
    # Which reads win the race depends on timing; two all-reduces back to back always lose it.
    assert "back_to_back" in failed and len(failed) >= 2, sorted(failed)


def test_without_the_group_streams_wait_outputs_are_unpacked_too_early():
    failed = set.union(*_failures(_run("order", 2, env={"GRADWIRE_TEST_DROP_WAIT": "group"})))
    # The ops that unpack a temporary on the group's stream.
    assert {"non_contiguous", "coalesced_a", "reduce_scatter_tensor"} <= failed, sorted(failed)


@pytest.mark.parametrize("nranks", [2, 3])
def test_ddp_and_the_hook_on_the_device_path_match_the_host_path(nranks):
    results = _run("ddp", nranks)
    for res, failed in zip(results, _failures(results)):
        assert failed == set(), "rank %d: %s failed" % (res["rank"], sorted(failed))
        assert {"ddp_no_hook", "hook_resumed_vs_host_path", "hook_compressed"} <= set(res["passed"]), res["passed"]
