"""Two processes on one GPU: gradwire's device path against its host path, bit for bit.

Each rank (tests/python/cuda_procs_worker.py, a fresh interpreter per rank: no fork of a
process that touched CUDA) joins a gloo process group and a gradwire communicator built
beside it (gradwire.torch.init_communicator), then runs everything twice with the same
seeds, once on CUDA tensors and once on CPU tensors, and compares:

  comm.allreduce / comm.iallreduce (op avg, 600k elements: three 1 MiB chunks): dense,
    qsgd:bits=4 scatter_reduce and topk:ratio=0.01 sparse_allgather with an ErrorFeedback
    (device EF for the CUDA run), 4 steps; two all-reduces in flight at once; and each call
    made while torch's current stream is a side stream still holding a long sleep and the
    copy that fills the input. Outputs of every step and the final residuals must be
    bit-identical to the CPU run's: that is what the library guarantees (device codecs and
    collectives produce the host's bits), so no tolerance is used.
  the DDP comm hook (gradwire.torch.HookState / comm_hook) over DDP on gloo, codec none,
    topk + EF and qsgd:bits=4 + EF, 4 steps of SGD on a small MLP, every hook call recorded:
    - the CUDA run's recorded bucket inputs replayed through the hook on CPU tensors give the
      CUDA run's outputs and EF residuals bit for bit (the library's guarantee, independent
      of torch's own math);
    - the whole CUDA training run equals the CPU training run bit for bit (bucket inputs and
      outputs of every call, parameters after every step, EF residuals). This is NOT a
      guarantee of torch's CUDA vs CPU math in general (cuBLAS and the CPU BLAS sum in other
      orders); it holds here by construction: dyadic weights and data, lr 1/16, and weights
      put back on a grid of eighths after each step make every forward and backward sum exact
      in fp32, so any summation order gives the same bits. The CPU run checks that premise
      at every step against float64 ("exact"); the test asserts it first.

gradwire.torch.all_reduce is not called: it needs the gradwire torch backend (a C++
extension built for the running torch and Python, here torch 2.11 / Python 3.12), which
cannot be built where this file was written. It is a thin wrapper over comm.allreduce /
comm.iallreduce on the group's communicator, which is what is tested here.

The hook states are made with model= (EF slices keyed by parameter name, as a trainer would).
Without it this test once found a real bug: DDP's bucket rebuild carried one (512,) bias's
residual into the other from a state whose all-reduce was still in flight (fixed in
HookState._carry_residual; tests/python/test_torch_hook.py has its unit test).

Skipped without a CUDA device for torch, unless GW_REQUIRE_GPU is set (then it fails).
GRADWIRE_TEST_DEVICE=cpu runs the worker's "device" half on the CPU too: a check of this file
on a machine without a GPU (the stream test then skips); GRADWIRE_TEST_NRANKS=1 runs one rank
(a library built without UCX).
Time: one launch of 2 ranks for all the tests (module fixture); each rank's communicator
times out after 20 s (gloo after 40 s), the launch is killed after 80 s, and a rank that
fails gets its peer killed 25 s later if the peer has not exited by itself.
"""
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

REQUIRE_GPU = os.environ.get("GW_REQUIRE_GPU", "") not in ("", "0")
if REQUIRE_GPU:
    import torch  # GW_REQUIRE_GPU: no torch is a failure, not a skip
else:
    torch = pytest.importorskip("torch")

from ranks import child_env, free_ports, kill_and_report  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "cuda_procs_worker.py")
NRANKS = 2
LAUNCH_TIMEOUT_S = 80
PEER_GRACE_S = 25


def need_cuda():
    """Skip without a CUDA device, or fail when GW_REQUIRE_GPU is set."""
    if os.environ.get("GRADWIRE_TEST_DEVICE") == "cpu":
        return  # the worker's CPU-only check of this script
    if not torch.cuda.is_available():
        why = "torch %s has no CUDA device (built for CUDA %s)" % (torch.__version__, torch.version.cuda)
        if REQUIRE_GPU:
            pytest.fail("GW_REQUIRE_GPU is set, but " + why)
        pytest.skip(why)


def launch(nranks=NRANKS, timeout=LAUNCH_TIMEOUT_S):
    """Runs the worker as nranks processes; returns each rank's JSON. Raises AssertionError
    with every rank's output when a rank fails, is killed or the launch times out."""
    torch_port, gw_port = free_ports(2)
    out = tempfile.mkdtemp(prefix="gw-cuda-procs-")
    token = secrets.token_hex(16)
    procs, logs = [], []
    for r in range(nranks):
        e = child_env({"GW_TIMEOUT_S": "20"})
        for k in ("GW_REQUIRE_GPU", "GW_REQUIRE_NCCL"):  # the worker needs CUDA anyway; the library warns of them
            e.pop(k, None)
        if "GLOO_SOCKET_IFNAME" not in e and os.path.exists("/sys/class/net/lo"):
            e["GLOO_SOCKET_IFNAME"] = "lo"  # one machine: gloo on loopback, whatever the hostname resolves to
        e.update({"RANK": str(r), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(r),
                  "LOCAL_WORLD_SIZE": str(nranks), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(torch_port), "GW_RANK": str(r), "GW_SIZE": str(nranks),
                  "GW_ROOT": "127.0.0.1:%d" % gw_port, "GW_TOKEN": token, "PYTHONUNBUFFERED": "1"})
        log = open(os.path.join(out, "rank%d.log" % r), "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, WORKER, out], env=e, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    start = time.monotonic()
    deadline = start + timeout
    first_failure = None
    why = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if all(c is not None for c in codes):
                break
            if first_failure is None and any(c not in (None, 0) for c in codes):
                first_failure = now
            if first_failure is not None and now - first_failure > PEER_GRACE_S:
                why = "a rank failed and its peer was still running %d s later" % PEER_GRACE_S
                break
            if now > deadline:
                why = "timed out after %d s" % timeout
                break
            time.sleep(0.1)
    finally:
        report = kill_and_report(procs, logs, tail_chars=8000)
    elapsed = time.monotonic() - start
    if why is not None or any(p.returncode != 0 for p in procs):
        raise AssertionError("cuda_procs_worker failed (%s, %.0f s; logs kept in %s)\n%s"
                             % (why or "a rank exited with an error", elapsed, out, report))
    results = []
    for r in range(nranks):
        with open(os.path.join(out, "rank%d.json" % r)) as f:
            results.append(json.load(f))
    shutil.rmtree(out, ignore_errors=True)
    print("cuda_procs_worker: %d ranks in %.1f s" % (nranks, elapsed))
    return results


@pytest.fixture(scope="module")
def ranks_results():
    """The one launch every test here reads: the ranks' results, the AssertionError saying
    why the launch failed, or None where there is no CUDA device (each test then skips or
    fails itself)."""
    try:
        need_cuda()
    except BaseException:  # pytest's skip and fail outcomes are BaseExceptions
        return None
    try:
        return launch(nranks=int(os.environ.get("GRADWIRE_TEST_NRANKS", NRANKS)))
    except AssertionError as e:
        return e


def results_of(value):
    need_cuda()
    if isinstance(value, AssertionError):
        pytest.fail(str(value), pytrace=False)
    assert value is not None
    return value


def test_allreduce_on_cuda_equals_cpu_bit_for_bit(ranks_results):
    res = results_of(ranks_results)
    for r in res:
        for name in ("dense", "qsgd4", "topk"):
            e = r["allreduce"][name]
            assert all(e["steps_equal"]) and len(e["steps_equal"]) == 4, (r["rank"], name, e)
            if name != "dense":
                assert e["residual_equal"] and (e["residual_norm"] > 0 or r["size"] == 1), (r["rank"], name, e)
                assert e["ef_steps"][0] == e["ef_steps"][1] > 0, (r["rank"], name, e)
    for name in ("dense", "qsgd4", "topk"):  # every rank ends with the same bits
        assert len({r["allreduce"][name]["digest"] for r in res}) == 1, name


def test_iallreduce_two_in_flight_on_cuda_equals_cpu(ranks_results):
    res = results_of(ranks_results)
    for r in res:
        for name, e in r["allreduce"]["in_flight"].items():
            assert all(e["steps_equal"]) and len(e["steps_equal"]) == 4 and e["residual_equal"], (r["rank"], name, e)
    for name in res[0]["allreduce"]["in_flight"]:
        assert len({r["allreduce"]["in_flight"][name]["digest"] for r in res}) == 1, name


def test_allreduce_waits_for_pending_work_on_the_current_stream(ranks_results):
    """A call that did not wait for the side stream's queue would read the stale -7s (or
    write its result before the stream's copy lands)."""
    res = results_of(ranks_results)
    if res[0]["device"] != "cuda":
        pytest.skip("the CPU-only check of the worker has no streams")
    for r in res:
        for name in ("dense", "qsgd4", "topk"):
            e = r["allreduce"][name]
            assert all(e["stream_steps_equal"]) and len(e["stream_steps_equal"]) == 4, (r["rank"], name, e)
            if name != "dense":
                assert e["stream_residual_equal"], (r["rank"], name, e)


def test_reduce_scatter_on_cuda_equals_cpu_bit_for_bit(ranks_results):
    """comm.reduce_scatter / ireduce_scatter of uneven blocks (one empty) on device tensors,
    codec none, qsgd 4-bit + EF and topk 1% + EF: every step's block and the final residual
    bit-identical to the same calls on CPU tensors."""
    for r in results_of(ranks_results):
        assert r["reduce_scatter"], r["rank"]
        for name, entry in r["reduce_scatter"].items():
            assert entry["steps_equal"] and all(entry["steps_equal"]), (r["rank"], name, entry)
            assert entry["residual_equal"] in (None, True), (r["rank"], name, entry)


def test_allgather_compressed_on_cuda_equals_cpu_bit_for_bit(ranks_results):
    """comm.allgather / iallgather (in place) with int8, bf16 and top-k codecs on device tensors:
    the gathered blocks bit-identical to the same calls on CPU tensors, the same on every rank."""
    res = results_of(ranks_results)
    for r in res:
        assert r["allgather_compressed"], r["rank"]
        for name, entry in r["allgather_compressed"].items():
            assert entry["steps_equal"] and all(entry["steps_equal"]), (r["rank"], name, entry)
    for name in res[0]["allgather_compressed"]:
        assert len({r["allgather_compressed"][name]["digest"] for r in res}) == 1, name


def test_hook_replayed_on_cpu_gives_the_cuda_run_bit_for_bit(ranks_results):
    """The library's guarantee inside the hook: the CUDA run's bucket inputs, replayed through
    comm_hook on CPU tensors (same bucket indices and parameters, a fresh HookState), give
    the CUDA run's outputs and EF residuals."""
    res = results_of(ranks_results)
    for r in res:
        for name in ("none", "topk_ef", "qsgd4_ef"):
            e = r["hook"][name]
            assert e["calls"][1] > 0 and all(e["replay_outputs_equal"]), (r["rank"], name, e)
            assert len(e["replay_outputs_equal"]) == e["calls"][1]
            if name != "none":
                assert e["replay_residuals_equal"] and all(e["replay_residuals_equal"].values()), (r["rank"], name, e)
                assert e["stats_dev"]["compressed"] > 0, (r["rank"], name, e)
                if r["device"] == "cuda":
                    assert e["ef_devices"] and all(d.startswith("cuda") for d in e["ef_devices"]), e["ef_devices"]


def test_ddp_hook_cuda_training_equals_cpu_training_bit_for_bit(ranks_results):
    """Bitwise here because the data make torch's own sums exact (module docstring), which
    the CPU run checks against float64 at every step; given that, the hook's all-reduce
    (library guarantee) and SGD with lr 1/16 (one rounding of an exact product) give the
    same bits on both devices."""
    res = results_of(ranks_results)
    for r in res:
        for name in ("none", "topk_ef", "qsgd4_ef"):
            e = r["hook"][name]
            assert all(e["exact"]) and len(e["exact"]) == 4, \
                ("premise broken: the CPU run's fp32 gradients are not exact", r["rank"], name, e["exact"])
            assert e["calls"][0] == e["calls"][1] and e["layout_host"] == e["layout_dev"], (r["rank"], name, e)
            assert all(e["inputs_equal"]), (r["rank"], name, e["inputs_equal"])
            assert all(e["outputs_equal"]), (r["rank"], name, e["outputs_equal"], e["outputs_max_diff"])
            assert all(e["stepped_equal"]) and e["params_equal"], (r["rank"], name, e["params_max_diff"])
            assert e["residual_buckets"][0] == e["residual_buckets"][1], (r["rank"], name, e)
            assert all(e["residuals_equal"].values()), (r["rank"], name, e["residuals_equal"])
            assert e["stats_host"] == e["stats_dev"], (r["rank"], name, e)
            if name == "none":
                assert e["stats_dev"]["compressed"] == 0 and e["stats_dev"]["dense"] > 0
            else:
                assert e["stats_dev"]["compressed"] > 0 and e["residuals_equal"], (r["rank"], name, e)
    for name in ("none", "topk_ef", "qsgd4_ef"):  # DDP keeps the ranks in step
        assert len({r["hook"][name]["params_digest"] for r in res}) == 1, name
