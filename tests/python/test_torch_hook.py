"""gradwire.torch: the DDP comm hook, across 4 real processes (gloo + gradwire over UCX)."""
import warnings

import pytest

torch = pytest.importorskip("torch")

import gradwire  # noqa: E402
import gradwire.torch as gwt  # noqa: E402
from ranks import run_ranks  # noqa: E402


@pytest.fixture(scope="module")
def solo_comm():
    comm = gradwire.Communicator.init_rank(1, gradwire.get_unique_id(), 0, timeout_s=30)
    yield comm
    comm.close()


def test_bad_spec_in_hook_state_raises_the_library_message(solo_comm):
    with pytest.raises(gradwire.GradwireError) as e:
        gwt.HookState(solo_comm, codec="topk:ratio=7")
    assert e.value.code == 1 and "ratio=7 is out of range" in e.value.message
    model = torch.nn.Linear(4, 4)
    with pytest.raises(gradwire.GradwireError) as e:
        gwt.HookState(solo_comm, codec="sign", param_codecs=[("*.weight", "qsgd:bits=5")], model=model)
    assert "bits=5 is out of range" in e.value.message
    with pytest.raises(ValueError):
        gwt.HookState(solo_comm, codec="sign", param_codecs=[("*.weight", "fp16")])  # no model
    state = gwt.HookState(solo_comm, codec="none")
    state.close()
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="momentum must be in"):
            gwt.HookState(solo_comm, codec="sign", momentum=bad)


def test_randomk_with_error_feedback_warns(solo_comm):
    with pytest.warns(UserWarning, match="randomk with error feedback"):
        gwt.HookState(solo_comm, codec="randomk:ratio=0.01", ef=True).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gwt.HookState(solo_comm, codec="randomk:ratio=0.01", ef=False).close()
        gwt.HookState(solo_comm, codec="topk:ratio=0.01", ef=True).close()


def test_take_momentum_from_moves_sgd_momentum_into_the_hook(solo_comm):
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    state = gwt.HookState(solo_comm, codec="sign")
    assert state.take_momentum_from(opt) == 0.9
    assert state.momentum == 0.9 and opt.param_groups[0]["momentum"] == 0.0
    state.close()
    for kwargs, err in (({"momentum": 0.9, "nesterov": True}, "no Nesterov"),
                        ({"momentum": 0.9, "dampening": 0.1}, "no dampening")):
        state = gwt.HookState(solo_comm, codec="sign")
        with pytest.raises(ValueError, match=err):
            state.take_momentum_from(torch.optim.SGD(model.parameters(), lr=0.1, **kwargs))
        state.close()
    two = torch.optim.SGD([{"params": [model.weight], "momentum": 0.9}, {"params": [model.bias], "momentum": 0.5}],
                          lr=0.1)
    state = gwt.HookState(solo_comm, codec="sign")
    with pytest.raises(ValueError, match="different momenta"):
        state.take_momentum_from(two)
    with pytest.raises(TypeError, match="torch.optim.SGD"):
        state.take_momentum_from(torch.optim.Adam(model.parameters()))
    state.close()
    state = gwt.HookState(solo_comm, codec="sign", momentum=0.5)
    with pytest.raises(ValueError, match="already has momentum"):
        state.take_momentum_from(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    state.close()


def test_hook_momentum_equals_optimizer_momentum():
    """The momentum moved into the hook (before compression) gives plain momentum SGD's
    updates when nothing is compressed, across DDP's bucket rebuild and a checkpoint."""
    res = run_ranks("momentum", nranks=3, timeout=120)
    for r in res:
        assert r["velocities_saved"] == r["params"] == 6
        assert r["fresh_has_velocity"] == 0
        assert max(r["diffs"]) < 1e-5, r["diffs"]
        assert r["in_sync"]


def test_hook_with_codec_none_equals_plain_allreduce():
    """DDP + hook(codec none) against DDP's own gloo all-reduce, 4 ranks, 4 steps, 2 buckets.

    On dyadic data every sum is exact in fp32 (the worker checks that against float64), so
    gradients and parameters must be bit-identical at every step. On random data the two
    differ only by summation order."""
    res = run_ranks("exact", nranks=4, timeout=120)
    for r in res:
        d = r["dyadic"]
        for s in d["steps"]:
            assert s["plain_is_exact"], "the test data should make fp32 sums exact"
            assert s["grads_equal"] and s["hook_is_exact"] and s["params_equal"], s
        assert d["params_equal"] and d["in_sync"]
        assert d["hook_steps"] == 4 and d["stats"]["compressed"] == 0
        assert d["stats"]["dense"] == 7  # one bucket on step 1, two after DDP's rebuild
        rnd = r["random"]
        for s in rnd["steps"]:
            assert s["max_abs_diff"] <= 1e-6 * max(1.0, s["max_abs"]), s
        assert rnd["in_sync"]


def test_error_feedback_codecs_converge():
    """Least squares through DDP: sign, top-1% and 2-bit QSGD with EF reach the dense run's
    loss; top-1% without EF stalls far above it."""
    res = run_ranks("converge", nranks=4, timeout=120)
    r = res[0]
    dense = r["dense"]["final_loss"]
    assert dense < 0.01 * r["dense"]["first_loss"]
    for name in ("sign_ef", "topk_ef", "qsgd2_ef"):
        assert r[name]["compressed"] == 300
        assert r[name]["final_loss"] < 2 * dense + 1e-3, (name, r[name], dense)
        assert r[name]["dist_to_opt"] < 0.15, (name, r[name])
    assert r["topk_noef"]["final_loss"] > 20 * dense, r["topk_noef"]
    assert r["topk_ef"]["algos"] == ["sparse_allgather"] and r["sign_ef"]["algos"] == ["scatter_reduce"]
    for x in res:
        assert all(v["in_sync"] for v in x.values()), "every rank must hold the same model"
        assert all(x[k]["final_loss"] == res[0][k]["final_loss"] for k in x)


def test_hook_survives_model_using_torch_distributed():
    """A model with its own collectives in forward, DDP buffer broadcasts, barrier /
    broadcast_object_list / all_gather_object in the loop, a second DDP model on gloo,
    no_sync accumulation, unused parameters, a per-parameter codec rule and warm-up."""
    res = run_ranks("torch_collectives", nranks=4, timeout=120)
    for r in res:
        assert r["ddp_in_sync"] and r["other_in_sync"]
        assert r["opt_steps"] == 16 and r["hook_steps"] == 16  # no_sync batches are not steps
        assert r["seen"] == 24.0
        assert r["stats"]["dense"] == 4  # two warm-up steps, two buckets each
        assert r["stats"]["compressed"] == 28
        assert r["bucket_specs"] == {"0": "fp16", "1": "topk:ratio=0.05"}
        assert r["stats"]["algos"] == ["scatter_reduce", "sparse_allgather"]
        assert r["losses"][-1] < r["losses"][0]
    assert len({tuple(r["losses"]) for r in res}) == 1


class _FakeBucket:
    """What the hook reads of a GradBucket: its index, parameters and buffer."""

    def __init__(self, index, params):
        self._index, self._params = index, params
        self._buffer = torch.zeros(sum(p.numel() for p in params))

    def index(self):
        return self._index

    def parameters(self):
        return self._params

    def buffer(self):
        return self._buffer


def test_rebuilt_buckets_carry_each_parameters_own_residual_without_model(solo_comm):
    """Without model= parameters have no names, and two biases of one shape in different
    buckets must still keep their own residual slices when DDP rebuilds the buckets (the
    carry once matched them by shape, handing one bias the other's residual)."""
    import numpy as np
    a, b, c = torch.nn.Parameter(torch.zeros(512)), torch.nn.Parameter(torch.zeros(512)), torch.nn.Parameter(torch.zeros(10))
    state = gwt.HookState(solo_comm, codec="topk:ratio=0.1", min_size=0)
    spec = "topk:ratio=0.1"
    first = state._ef_state(_FakeBucket(0, [a, c]), spec, 522)
    first.set_residual(np.concatenate([np.full(512, 1, np.float32), np.full(10, 3, np.float32)]))
    second = state._ef_state(_FakeBucket(1, [b]), spec, 512)
    second.set_residual(np.full(512, 2, np.float32))
    # The rebuild swaps them: bucket 0 now holds b, bucket 1 holds a and c.
    b_state = state._ef_state(_FakeBucket(0, [b]), spec, 512)
    assert (b_state.residual() == 2).all(), "b took another parameter's residual"
    ac_state = state._ef_state(_FakeBucket(1, [a, c]), spec, 522)
    r = ac_state.residual()
    assert (r[:512] == 1).all() and (r[512:] == 3).all(), "a or c lost its residual"
    state.close()
