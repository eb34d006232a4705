"""The ctypes package without torch: codecs, EF states, errors, communicators."""
import os
import subprocess
import sys

import numpy as np
import pytest

import gradwire
from gradwire import _lib as gradwire_lib
from ranks import child_env, run_ranks


def test_bad_spec_raises_with_the_library_message():
    with pytest.raises(gradwire.GradwireError) as e:
        gradwire.Codec("qsgd:bits=3")
    assert e.value.code == 1  # GW_ERR_INVALID_ARGUMENT
    assert "gw_codec_create" in e.value.message and "bits=3 is out of range" in e.value.message
    assert "bits=3 is out of range" in str(e.value)

    with pytest.raises(gradwire.GradwireError) as e:
        gradwire.Codec("zip:level=9")
    assert "unknown codec 'zip'" in e.value.message and "topk" in e.value.message

    with pytest.raises(gradwire.GradwireError) as e:
        gradwire.Codec("topk:ratio=0.01,bucket=4")
    assert "unknown key 'bucket'" in e.value.message


def test_codec_spec_and_roundtrip():
    c = gradwire.Codec("qsgd:bits=4,bucket=256")
    assert c.name == "qsgd"
    assert c.spec.startswith("qsgd:bits=4,bucket=256")
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    msg = gradwire.Codec("none").encode(x)
    y = gradwire.decode(msg, np.empty_like(x))
    assert np.array_equal(x, y)
    info = gradwire.message_info(gradwire.Codec("topk:k=10").encode(x))
    assert info["codec"] == "topk" and info["count"] == 4096 and info["nnz"] == 10
    # A corrupt message is refused with the library's reason and leaves out untouched.
    bad = bytearray(gradwire.Codec("fp16").encode(x))
    out = np.zeros_like(x)
    with pytest.raises(gradwire.GradwireError) as e:
        gradwire.decode(bytes(bad[:-3]), out)
    assert e.value.code == 2 and e.value.message  # GW_ERR_INVALID_MESSAGE
    assert not out.any()


def test_error_feedback_keeps_what_the_codec_drops():
    """EF on one buffer: with a constant gradient g, the decoded messages plus the residual
    always add up to T * g, so their mean converges to g even at top-8 of 512."""
    rng = np.random.default_rng(1)
    g = rng.standard_normal(512).astype(np.float32)
    for spec in ("topk:k=8", "sign:bucket=64", "qsgd:bits=2"):
        codec = gradwire.Codec(spec)
        ef = gradwire.ErrorFeedback(g.size)
        total = np.zeros(g.size, dtype=np.float64)
        steps = 3000
        for t in range(steps):
            out = np.zeros_like(g)
            gradwire.decode(codec.encode(g, step=t, ef=ef), out)
            total += out
        assert ef.step == steps
        # sum of messages + residual == T g (up to fp32 rounding of the residual)
        np.testing.assert_allclose(total + ef.residual(), steps * g.astype(np.float64), rtol=0, atol=2e-2 * steps ** 0.5)
        err = np.linalg.norm(total / steps - g) / np.linalg.norm(g)
        assert err < 0.05, (spec, err)
    # and without EF, top-1 never sends the other 511 coordinates
    codec = gradwire.Codec("topk:k=1")
    out = np.zeros_like(g)
    for t in range(10):
        gradwire.decode(codec.encode(g, step=t), out, mode="accumulate")
    assert np.count_nonzero(out) == 1


def test_single_rank_communicator_and_argument_errors():
    with gradwire.Communicator.init_rank(1, gradwire.get_unique_id(), 0, timeout_s=30) as comm:
        assert (comm.rank, comm.size) == (0, 1)
        x = np.arange(70000, dtype=np.float32)
        y = comm.allreduce(x.copy(), op="avg")
        assert np.array_equal(x, y)
        with pytest.raises(gradwire.GradwireError) as e:
            comm.allreduce(np.ones(1 << 15, dtype=np.float16), codec="qsgd:bits=8", algo="scatter_reduce")
        assert e.value.code == 3 and "compressed all-reduce takes float32, not float16" in e.value.message
        with pytest.raises(gradwire.GradwireError) as e:
            comm.allreduce(x, ef=gradwire.ErrorFeedback(3), codec="sign")
        assert "ef holds 3 elements" in e.value.message
        f64 = np.full(4, 0.5, dtype=np.float64)  # dense calls take every dtype
        comm.allreduce(f64, op="max")
        assert np.array_equal(f64, np.full(4, 0.5))
        with pytest.raises(gradwire.GradwireError) as e:
            comm.allreduce(np.ones(4, dtype=np.complex64))
        assert "complex64" in e.value.message
        with pytest.raises(gradwire.GradwireError) as e:
            comm.allreduce(np.ones(1 << 15, dtype=np.float32), op="max", codec="topk:ratio=0.01")
        assert e.value.code == 1 and "op max runs dense only" in e.value.message
        with pytest.raises(gradwire.GradwireError):
            comm.allreduce(np.ones((4, 4), dtype=np.float32)[:, ::2])  # not contiguous
        assert comm.async_error() is None  # argument errors do not break a communicator
        r = comm.iallreduce(np.ones(100000, dtype=np.float32), codec="topk:ratio=0.01")
        r.wait()
        assert r.test()
    with pytest.raises(gradwire.GradwireError):
        gradwire.Communicator.init_rank(2, b"\0" * 128, 0)  # not an id the library made


def test_library_from_environment_variable():
    """GRADWIRE_LIB names the library; a wrong path fails at import with a clear message."""
    env = child_env({"GRADWIRE_LIB": "/nonexistent/libgradwire.so"})
    p = subprocess.run([sys.executable, "-c", "import gradwire"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "GRADWIRE_LIB" in p.stderr and "/nonexistent/libgradwire.so" in p.stderr
    env = child_env({"GRADWIRE_LIB": gradwire.library_path})
    p = subprocess.run([sys.executable, "-c", "import gradwire; print(gradwire.library_path)"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and os.path.samefile(p.stdout.strip(), gradwire.library_path)


def test_four_ranks_from_launcher_environment():
    """4 processes, Communicator.from_env() (GW_RANK/GW_SIZE/GW_ROOT), numpy buffers."""
    res = run_ranks("core", nranks=4, timeout=90)
    for r, x in enumerate(res):
        assert (x["rank"], x["size"]) == (r, 4)
        assert x["dense_sum_exact"] and x["fp16_avg_exact"]
        assert x["iallreduce_ok"] and x["broadcast_ok"]
        assert x["allgather"] == [v for k in range(4) for v in (k, 10 * k)]
        assert x["fp16_lossy_error"][0] == 3 and "takes float32" in x["fp16_lossy_error"][1]
        assert x["bad_spec_error"][0] == 1 and "ratio=2 is out of range" in x["bad_spec_error"][1]
        assert x["usable_after_errors"]
        c = x["codecs"]
        assert c["none"]["rel_err"] == 0 and c["none"]["algo"] == "rabenseifner"  # dense, 4 ranks
        assert c["fp16"]["rel_err"] < 1e-3 and c["qsgd:bits=8"]["rel_err"] < 0.05
        assert c["topk:ratio=0.01"]["algo"] == "sparse_allgather"
        for spec in ("qsgd:bits=8", "sign", "topk:ratio=0.01", "dgc:ratio=0.001"):
            assert c[spec]["ef_step"] == 1 and c[spec]["residual_norm"] > 0
    for spec in res[0]["codecs"]:  # every rank ends with the same bits
        assert len({x["codecs"][spec]["digest"] for x in res}) == 1, spec


def test_topology_and_hierarchical_allreduce():
    """4 processes as 2 nodes x 2 ranks: Comm.topology() and hierarchical all-reduces."""
    res = run_ranks("topology", nranks=4, timeout=90)
    for r, x in enumerate(res):
        assert x["topology"] == {"node_count": 2, "node": r // 2, "local_rank": r % 2, "local_size": 2}, x
        assert x["dense_algo"] == "hierarchical" and x["dense_exact"]
        assert x["algo_calls"] == {"hierarchical": 6}, x["algo_calls"]  # 1 dense + 5 top-k, counted by algorithm
        assert x["topk_algo"] == "hierarchical" and x["topk_conserved_err"] < 1e-5, x
    assert len({x["digest"] for x in res}) == 1


def test_a_dead_rank_is_shrunk_away():
    """4 processes; rank 3 dies without a goodbye. The others' call fails with GW_ERR_REMOTE,
    Communicator.shrink() gives them a 3-rank communicator within 2 s, sums over it are exact,
    the EF residual filled over 4 ranks carries over and its mass is kept, and a revoke on the
    new communicator fails every rank's next call with GW_ERR_REVOKED."""
    res = run_ranks("shrink", nranks=4, timeout=90)
    assert res[3] == {"died": True}
    for r, x in enumerate(res[:3]):
        assert x["failed_code"] == gradwire_lib.GW_ERR_REMOTE, x
        assert x["shrink_s"] < 2.0, x
        assert (x["size"], x["rank"]) == (3, r), x
        assert not x["old_still_works"]
        assert x["dense_exact"], x
        assert x["residual_carried"] and x["ef_err"] < 1e-5, x
        assert x["after_revoke"] == gradwire_lib.GW_ERR_REVOKED, x


def test_allgather_on_a_compressed_wire():
    """3 processes: Communicator.allgather(codec=...) gives every rank the same bits, each block
    being the decode of its rank's message (int8 blockwise and bf16 of float32; int8 and fp16 of
    bfloat16 in place through iallgather); bad arguments raise before any call."""
    res = run_ranks("allgather_compressed", nranks=3, timeout=90)
    for x in res:
        assert x["blocks_are_decodes"], x
        assert x["max_err"]["qsgd:bits=8,rounding=nearest,bucket=256/torch.float32"] < 0.03, x
        assert 0 < x["max_err"]["bf16/torch.float32"] < 0.05, x
        assert x["errors"]["out_size"] == gradwire_lib.GW_ERR_INVALID_ARGUMENT, x
        assert x["errors"]["int32"] == gradwire_lib.GW_ERR_UNSUPPORTED, x
        assert x["errors"]["bad_spec"] == gradwire_lib.GW_ERR_INVALID_ARGUMENT, x
    assert len({str(x["digests"]) for x in res}) == 1, res


def test_reduce_scatter_blocks_of_any_size_raw_and_compressed():
    """3 processes: Communicator.reduce_scatter with uneven blocks (one may be empty), exact
    raw float64 sums and int32 max, bfloat16 through codec "none" summed in float32 (256 + 1
    + 1 = 258, which bfloat16 partial sums lose), qsgd 4-bit + EF through ireduce_scatter
    losing nothing across 5 steps, and bad arguments raising GW_ERR_INVALID_ARGUMENT."""
    res = run_ranks("reduce_scatter", nranks=3, timeout=90)
    for x in res:
        assert x["raw_exact"] and x["max_exact"], x
        assert x["bf16_f32_sum"], x
        assert x["ef_err"] < 1e-4 and x["own_residual_zero"], x
        assert set(x["errors"].values()) == {gradwire_lib.GW_ERR_INVALID_ARGUMENT}, x
