"""FSDP2 (fully_shard) over the gradwire backend with gradwire's reduce-scatter
(gradwire.torch.compress_fsdp / ReduceScatter / ReplicateAllReduce), real processes
(fsdp_worker.py): dense equals FSDP2's own reduce-scatter; exact parameters stay exact next to
compressed ones in one module; compressed + EF trains; the residuals go through a
torch.distributed.checkpoint and back into new processes; HSDP's all-reduce between replicas
through the hook (2 replicas x 2 shards); world size 3; the parameters' all-gather on a
compressed wire (compress_fsdp(param_codec=...), gradwire.fsdp.AllGather). Every parameter's
first dimension is padded by FSDP (not a multiple of the world size)."""
import os

import pytest

torch = pytest.importorskip("torch")
import gradwire._backend  # noqa: E402

if not gradwire._backend.available():  # not built for this torch: scripts/build-torch-backend.sh
    pytest.skip("gradwire's torch backend is not built for torch %s: %s"
                % (torch.__version__, gradwire._backend.unavailable_reason()), allow_module_level=True)
try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401
except Exception:
    pytest.skip("torch %s has no FSDP2 (fully_shard)" % torch.__version__, allow_module_level=True)

from ranks import run_ranks  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp_worker.py")
# The test buffers are a few KiB: the library's policy must not send them dense.
ENV = {"GW_DENSE_THRESHOLD": "0"}


def _run(scenario, nranks=4, env=None):
    e = dict(ENV)
    e.update(env or {})
    return run_ranks(scenario, nranks=nranks, timeout=120, env=e, worker=WORKER)


def test_fsdp_dense_exact_columns_and_compressed_training():
    results = _run("fsdp")
    for r in results:
        # Dense: the parameters FSDP2's own reduce-scatter gives (on the gradwire backend and on
        # gloo), bit for bit where every sum is exact (dyadic data), else to float32 rounding:
        # the sums run in another order (gradwire's in rank order, the backend's ring and gloo's
        # in theirs).
        assert r["mlp"]["equal_gradwire"] and r["mlp"]["equal_gloo"] and r["mlp"]["moved"], r["mlp"]
        net = r["net"]
        assert net["diff_gradwire"] <= 1e-6 and net["diff_gloo"] <= 1e-6 and net["moved"], net
        d = r["custom_dense_stats"]
        assert d["compressed_elements"] == 0 and d["wire_bytes"] == d["dense_bytes"] > 0, d
        # One module mixing exact (embedding, biases) and compressed (weights) parameters: 2-bit
        # QSGD without EF changes every compressed gradient and no exact one.
        assert r["exact_names"] == ["emb.weight", "fc1.bias", "fc2.bias"], r
        assert r["exact_equal"] and all(r["exact_equal"].values()), r["exact_equal"]
        assert r["compressed_differ"] and all(r["compressed_differ"].values()), r["compressed_differ"]
        m = r["mixed_stats"]
        assert m["compressed_elements"] > 0 and m["exact_elements"] > 0 and m["wire_bytes"] < m["dense_bytes"], m
        # FSDP's gradient divide factor (PREMUL_SUM) is honoured.
        assert r["premul_sum_ok"]
        # qsgd 8-bit + EF tracks dense training on the same data.
        dense, q = r["losses"]["dense"], r["losses"]["qsgd:bits=8"]
        assert q[1] < q[0] and abs(q[1] - dense[1]) <= 0.05 * dense[1], r["losses"]
        assert r["ef_residual_norm"] > 0, r
        st = r["ef_stats"]
        assert st["compressed_elements"] > 0 and st["wire_bytes"] < 0.6 * st["dense_bytes"], st
        # ReduceScatter alone, async_op=True: within QSGD 8-bit's error of the exact average.
        assert 0 < r["async_rel_err"] < 0.05, r
    # Each rank keeps its own residuals.
    assert len({r["ef_residual_norm"] for r in results}) == len(results)


def test_fsdp_residuals_survive_a_distributed_checkpoint(tmp_path):
    env = {"FSDP_TEST_DIR": str(tmp_path), "FSDP_TEST_CODECS": "topk:ratio=0.05 qsgd:bits=8"}
    saved = _run("dcp_save", env=env)
    loaded = _run("dcp_load", env=env)
    for codec in env["FSDP_TEST_CODECS"].split():
        digests = [s[codec]["residuals"] for s in saved]
        assert all(s[codec]["residual_norm"] > 0 for s in saved), codec
        # Rank-local: every rank's residuals differ from every other's, and come back to it.
        assert len({tuple(d) for d in digests}) == len(saved), codec
        for s, ld in zip(saved, loaded):
            assert ld[codec]["residuals"] == s[codec]["residuals"], codec
            # The next step after the restore equals the next step of the run that saved.
            assert ld[codec]["after"] == s[codec]["after"], codec
            # Without the residuals it does not (the restore is what made it equal).
            assert ld[codec]["after_without_ef"] != s[codec]["after"], codec


def test_hsdp_all_reduce_between_replicas():
    for r in _run("hsdp"):
        # Dense: FSDP over each shard pair plus the hook's average over replicas equals FSDP
        # over all four ranks.
        assert r["dense_diff"] <= 1e-6 and r["dense_moved"], r
        # qsgd 8-bit + EF on both legs: trains, and both replicas of a shard stay identical.
        assert r["losses"][1] < r["losses"][0], r
        assert r["replicas_identical"], r
        assert r["hook_residual_norm"] > 0, r
        st = r["hook_stats"]
        assert st["compressed_elements"] > 0 and st["exact_elements"] > 0, st


def test_fsdp_world_size_3():
    for r in _run("world3", nranks=3):
        assert r["dense_diff"] <= 1e-6, r
        assert r["dense"][0] == r["default"][0], r
        q, d = r["qsgd8"], r["dense"]
        assert q[1] < q[0] and abs(q[1] - d[1]) <= 0.05 * d[1], r


# The parameters' all-gather: which parameters stay exact by default_param_exact (min_size=64:
# the norms, biases; the embedding and every weight matrix are quantized).
PARAM_EXACT = ["blocks.0.fc1.bias", "blocks.0.fc2.bias", "blocks.0.ln.bias", "blocks.0.ln.weight",
               "blocks.1.fc1.bias", "blocks.1.fc2.bias", "blocks.1.ln.bias", "blocks.1.ln.weight",
               "head.bias", "ln.bias", "ln.weight"]


def _check_gather(g, codec):
    assert g["exact_names"] == PARAM_EXACT and "emb.weight" in g["compressed_names"], g
    # The sharded (optimizer's) parameters are not touched by the all-gather; an async
    # unshard gives the blocking one's bits.
    assert g["master_unchanged"] and g["async_equal"], g
    # Every unsharded parameter is what the codec makes of each rank's block of the padded
    # shards (this checks the column layout), exact ones bit for bit the true values.
    assert all(g["equal_expected"].values()), g["equal_expected"]
    assert g["exact_equal_true"] and all(g["exact_equal_true"].values()), g["exact_equal_true"]
    st = g["stats"]
    assert st["compressed_elements"] > 0 and st["exact_elements"] > 0, st
    assert 0 < st["measured_bytes"] <= st["wire_bytes"] < st["dense_bytes"], st
    if codec == "int8":
        assert 0 < g["max_err"] <= g["int8_bound"], g
        assert st["wire_bytes"] < 0.45 * st["dense_bytes"], st
    else:  # bf16: torch's rounding of the true values
        assert g["equal_torch_bf16"], g


def test_fsdp_param_allgather():
    results = _run("allgather")
    for r in results:
        # param_codec=None installs nothing: FSDP2's own all-gather, which gives the true
        # parameters; gradwire's raw AllGather gives the same bits.
        assert r["none_installs_nothing"] and r["own_equals_true"] and r["raw_equals_own"], r
        _check_gather(r["int8"], "int8")
        _check_gather(r["bf16"], "bf16")
        # Training on int8 weights tracks dense; reshard_after_forward True, False and 2 (the
        # backward's re-gather over the post-forward mesh goes raw) train alike, and the
        # backward sees the bits the forward ran with.
        d = r["losses"]["dense"]
        for label in ("int8_reshard", "int8_keep", "int8_reshard2"):
            q = r["losses"][label]
            assert q[1] < q[0] and abs(q[1] - d[1]) <= 0.02 * d[1], r["losses"]
        assert all(r["fwd_bwd_same"].values()), r["fwd_bwd_same"]
        # Three FSDP modules: all-gathered again in backward unless reshard_after_forward=False.
        assert r["gathers_per_step"] == {"dense": None, "int8_reshard": 6.0, "int8_keep": 3.0,
                                         "int8_reshard2": 6.0}, r["gathers_per_step"]
        # Mixed precision: the all-gather in bf16, int8 on the wire.
        b = r["bf16_params"]
        assert b["dtype"] == "torch.bfloat16" and b["exact_equal"] and 0 < b["max_err"] <= b["bound"], b
        assert b["stats"]["wire_bytes"] < b["stats"]["dense_bytes"], b
        # AllGather alone: in place, async gives the blocking call's bits; a uint8 buffer
        # (FSDP's for mixed dtypes) goes raw; a tensor off the host is refused by name.
        assert r["alone_async_equal"] and 0 < r["alone_rel_err"] < 0.02, r
        assert r["uint8_raw"], r
        assert r["meta_error"] and "host tensors" in r["meta_error"] and "meta" in r["meta_error"], r
    # Every rank holds the same unsharded parameters.
    for key in (("int8", "digest"), ("bf16", "digest"), ("bf16_params", "digest")):
        assert len({r[key[0]][key[1]] for r in results}) == 1, key
    assert len({r["alone_digest"] for r in results}) == 1


def test_fsdp_param_allgather_world_size_3():
    results = _run("allgather_world3", nranks=3)
    for r in results:
        _check_gather(r["int8"], "int8")
        # qsgd 8-bit + EF gradients with int8 weights tracks the same without.
        q, d = r["loss_int8"], r["loss_dense"]
        assert q[1] < q[0] and abs(q[1] - d[1]) <= 0.03 * d[1], r
    assert len({r["int8"]["digest"] for r in results}) == 1


def test_param_codec_refused_at_setup():
    import torch.nn as nn
    import gradwire.fsdp as gwf
    from gradwire import GradwireError
    # A bad spec, and a codec that drops values, fail when compress_fsdp runs, not at the
    # first forward.
    with pytest.raises(GradwireError):
        gwf.compress_fsdp(nn.Linear(4, 4), codec=None, param_codec="qsgd:bits=99")
    for spec in ("topk:ratio=0.01", "sign"):
        with pytest.raises(GradwireError, match="keep every value"):
            gwf.AllGather(spec)
    assert gwf.AllGather(None).codec is None and gwf.AllGather("none").codec is None
