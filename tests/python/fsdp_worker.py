"""One rank of an FSDP2-over-gradwire scenario: `python fsdp_worker.py SCENARIO OUTDIR`.

The default process group is gradwire's torch backend; FSDP2 (fully_shard) shards a small model
whose parameters' first dimensions are not multiples of the world size (FSDP pads them), with
an embedding, layer norms and biases (exact by compress_fsdp's default) beside linear weights
(compressed). Inputs and initial weights are dyadic (multiples of 1/8), so that the gradients
and their sums are exact in float32 whatever the order of the sums: dense runs can then be
compared bit for bit. FSDP_TEST_DIR is where the checkpoint scenarios meet.
"""
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])


def setup():
    torch.set_num_threads(1)
    import gradwire.torch as gwt
    dist.init_process_group("gradwire", rank=RANK, world_size=SIZE)
    return gwt


class Block(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)  # hidden rows: not a multiple of 3 or 4
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.ln(x))))


class Net(nn.Module):
    """Embedding (13 rows) -> two blocks -> layer norm -> head (7 outputs)."""

    def __init__(self, d=12, hidden=37, vocab=13, out=7):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(Block(d, hidden), Block(d, hidden))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, out)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.round(p * 8) / 8)
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):  # plain scales: layer norm's division is not dyadic
                    m.weight.fill_(1.0)
                    m.bias.zero_()

    def forward(self, idx):
        return self.head(self.ln(self.blocks(self.emb(idx)))).sum(1)


class Mlp(nn.Module):
    """No normalisation (its division is never exact): every gradient is dyadic."""

    def __init__(self, d=10, hidden=33, out=7):
        super().__init__()
        torch.manual_seed(1)
        self.emb = nn.Embedding(13, d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, out)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.round(p * 8) / 8)

    def forward(self, idx):
        return self.fc2(torch.relu(self.fc1(self.emb(idx)))).sum(1)


def batch(step, rank, vocab=13, out=7):
    g = torch.Generator().manual_seed(1000 * step + rank)
    idx = torch.randint(0, vocab, (4, 3), generator=g)
    target = torch.randint(-4, 5, (4, out), generator=g).float()
    return idx, target


def shard(model, mesh, units=("blocks.0", "blocks.1")):
    from torch.distributed.fsdp import fully_shard
    for name in units:
        fully_shard(model.get_submodule(name), mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def step(model, opt, s, scale=1.0 / 64):
    idx, t = batch(s, RANK)
    loss = ((model(idx) - t) ** 2).sum() * scale
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()
    return float(loss)


def full_params(model):
    """Every parameter, unsharded (a collective), as one flat float64 tensor."""
    from torch.distributed.tensor import DTensor
    out = []
    for _, p in model.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out.append(t.detach().reshape(-1).double())
    return torch.cat(out)


def grads(model):
    """This rank's sharded gradients by name (local tensors)."""
    return {n: p.grad.to_local().clone() for n, p in model.named_parameters() if p.grad is not None}


def world_mesh():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (SIZE,))


def gloo_mesh():
    from torch.distributed.device_mesh import DeviceMesh
    return DeviceMesh.from_group(dist.new_group(backend="gloo"), "cpu")


def scenario_fsdp():
    """Dense equality, exactness of exact columns, compressed + EF training, op variants, async."""
    gwt = setup()
    r = {}
    mesh, gmesh = world_mesh(), gloo_mesh()
    # Dense: FSDP2's own reduce-scatter (gradwire backend, and gloo) against gradwire's custom one.
    # Net, 4 SGD steps: the parameters agree to rounding (the sums run in another order);
    # Mlp, the first backward (dyadic values of few bits: every sum exact in any order): the
    # sharded gradients agree bit for bit.
    for label, make, units, steps in (("net", Net, ("blocks.0", "blocks.1"), 4), ("mlp", Mlp, (), 1)):
        runs = {}
        for name, m, custom in (("default_gradwire", mesh, False), ("default_gloo", gmesh, False),
                                ("custom_dense", mesh, True)):
            model = shard(make(), m, units)
            gw = gwt.compress_fsdp(model, codec=None) if custom else None
            opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16) if steps > 1 else None
            for s in range(steps):
                step(model, opt, s)
            runs[name] = full_params(model) if steps > 1 else torch.cat([g.reshape(-1) for g in grads(model).values()])
            if gw is not None:
                r["custom_dense_stats"] = gw.stats()["reduce_scatter"]
        r[label] = {"diff_gradwire": float((runs["custom_dense"] - runs["default_gradwire"]).abs().max()),
                    "diff_gloo": float((runs["custom_dense"] - runs["default_gloo"]).abs().max()),
                    "equal_gradwire": bool(torch.equal(runs["custom_dense"], runs["default_gradwire"])),
                    "equal_gloo": bool(torch.equal(runs["custom_dense"], runs["default_gloo"])),
                    "moved": bool(runs["custom_dense"].abs().sum() > 0) if steps == 1 else
                    bool(not torch.equal(runs["custom_dense"], full_params(shard(make(), mesh, units))))}

    # Exact columns in a mixed unit: a lossy codec without EF on the linear weights; the
    # embedding and biases are exact. One module only (no sub-units), so one buffer mixes them.
    def one_step_grads(codec, divide=None):
        model = shard(Mlp(), mesh, units=())
        gw = gwt.compress_fsdp(model, codec=codec, ef=False, min_size=64)
        if divide is not None:
            model.set_gradient_divide_factor(divide)
        step(model, None, 0)
        return grads(model), gw

    dense, _ = one_step_grads(None)
    lossy, gw = one_step_grads("qsgd:bits=2,bucket=64")
    r["exact_names"] = sorted(n for n, e in gw.exact.items() if e)
    r["exact_equal"] = {n: bool(torch.equal(dense[n], lossy[n])) for n in dense if gw.exact[n]}
    r["compressed_differ"] = {n: bool(not torch.equal(dense[n], lossy[n])) for n in dense if not gw.exact[n]}
    st = gw.stats()["reduce_scatter"]
    r["mixed_stats"] = st
    # FSDP's gradient divide factor arrives as PREMUL_SUM(1/f): f = 8 halves the average of 4 ranks.
    halved, _ = one_step_grads(None, divide=2.0 * SIZE)
    r["premul_sum_ok"] = all(torch.equal(halved[n], dense[n] / 2) for n in dense)

    # Compressed + EF trains (qsgd 8-bit), next to dense, on the same data.
    losses = {}
    for codec in (None, "qsgd:bits=8"):
        model = shard(Net(), mesh)
        gw = gwt.compress_fsdp(model, codec=codec, min_size=64)
        opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16)
        trace = [step(model, opt, s % 6) for s in range(30)]
        losses[codec or "dense"] = trace
        if codec:
            r["ef_residual_norm"] = gw.residual_norm()
            r["ef_stats"] = gw.stats()["reduce_scatter"]
    r["losses"] = {k: [v[0], sum(v[-6:]) / 6] for k, v in losses.items()}

    # ReduceScatter alone (no layout: all of it compressed), async_op=True, against the dense sum.
    rs = gwt.ReduceScatter("qsgd:bits=8", ef=True)
    x = torch.randn(SIZE * 1001, generator=torch.Generator().manual_seed(RANK))
    exact = torch.zeros(1001)
    dist.reduce_scatter_tensor(exact, x.clone(), op=dist.ReduceOp.AVG)
    out = torch.empty(1001)
    work = rs(out, x.clone(), None, dist.ReduceOp.AVG, async_op=True)
    work.wait()
    r["async_rel_err"] = float((out - exact).norm() / exact.norm())
    dist.destroy_process_group()
    return r


def _digest(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def _residual_digest(gw):
    parts = []
    for objs in (gw.reduce_scatters, gw.all_reduces):
        for name in sorted(objs):
            for n in sorted(objs[name].ef.states):
                parts.append("%s/%d:%s" % (name, n, _digest(torch.from_numpy(objs[name].ef.states[n].residual()))))
    return parts


def _train_state(gwt, codec):
    model = shard(Net(), world_mesh())
    gw = gwt.compress_fsdp(model, codec=codec, min_size=64)
    opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16, momentum=0.9)
    return model, gw, opt


def _checkpoint(model, opt, gw):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, "gradwire": gw}


def scenario_dcp_save():
    """Trains 3 steps per codec, saves a DCP checkpoint, then trains a 4th step (the result a
    resumed run must reproduce)."""
    import torch.distributed.checkpoint as dcp
    gwt = setup()
    base = os.environ["FSDP_TEST_DIR"]
    r = {}
    for codec in os.environ["FSDP_TEST_CODECS"].split():
        model, gw, opt = _train_state(gwt, codec)
        for s in range(3):
            step(model, opt, s)
        path = os.path.join(base, codec.replace(":", "_").replace("=", "_"))
        dcp.save(_checkpoint(model, opt, gw), checkpoint_id=path)
        res = _residual_digest(gw)
        step(model, opt, 3)
        r[codec] = {"residuals": res, "residual_norm": gw.residual_norm(), "after": _digest(full_params(model))}
    dist.destroy_process_group()
    return r


def scenario_dcp_load():
    """New processes: restore the checkpoint (model, optimizer, residuals) and train step 4; and
    the same without the residuals, which must differ."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict
    gwt = setup()
    base = os.environ["FSDP_TEST_DIR"]
    r = {}
    for codec in os.environ["FSDP_TEST_CODECS"].split():
        path = os.path.join(base, codec.replace(":", "_").replace("=", "_"))
        out = {}
        for restore_ef in (True, False):
            model, gw, opt = _train_state(gwt, codec)
            state = _checkpoint(model, opt, gw)
            if not restore_ef:
                del state["gradwire"]
            dcp.load(state, checkpoint_id=path)
            set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            if restore_ef:
                out["residuals"] = _residual_digest(gw)
            step(model, opt, 3)
            out["after" if restore_ef else "after_without_ef"] = _digest(full_params(model))
        r[codec] = out
    dist.destroy_process_group()
    return r


def scenario_hsdp():
    """2 replicas x 2 shards: FSDP over the shard pair, the replicas averaged by gradwire's hook.
    Dense it equals FSDP over all 4 ranks; compressed (qsgd 8-bit + EF both ways) it trains and
    the replicas hold the same parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    gwt = setup()
    r = {}
    mesh2 = init_device_mesh("cpu", (2, SIZE // 2), mesh_dim_names=("replicate", "shard"))
    shard_mesh, rep_group = mesh2["shard"], mesh2["replicate"].get_group()
    flat = {}
    for name, m, codec in (("fsdp4", world_mesh(), None), ("hsdp_dense", shard_mesh, None),
                           ("hsdp_qsgd8", shard_mesh, "qsgd:bits=8")):
        model = shard(Net(), m)
        if name != "fsdp4":
            gw = gwt.compress_fsdp(model, codec=codec, min_size=64, replicate_group=rep_group)
        opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16)
        trace = [step(model, opt, s % 6) for s in range(12 if codec else 4)]
        flat[name] = full_params(model)
        if codec:
            r["losses"] = [trace[0], sum(trace[-6:]) / 6]
            r["hook_stats"] = gw.stats()["all_reduce"]
            r["hook_residual_norm"] = sum(h.ef.residual_norm() for h in gw.all_reduces.values())
            # Ranks r and r + 2 hold the same shard: their local parameters must be identical.
            local = torch.cat([p.to_local().detach().reshape(-1) for p in model.parameters()])
            other = torch.empty_like(local)
            peer = (RANK + SIZE // 2) % SIZE
            ops = [dist.P2POp(dist.isend, local, peer), dist.P2POp(dist.irecv, other, peer)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            r["replicas_identical"] = bool(torch.equal(local, other))
    r["dense_diff"] = float((flat["hsdp_dense"] - flat["fsdp4"]).abs().max())
    r["dense_moved"] = bool(not torch.equal(flat["hsdp_dense"], full_params(shard(Net(), world_mesh()))))
    dist.destroy_process_group()
    return r


def scenario_world3():
    """Three ranks (every first dimension padded): dense equals FSDP2's own reduce-scatter;
    qsgd 8-bit + EF trains."""
    gwt = setup()
    mesh = world_mesh()
    r, runs = {}, {}
    for name, codec in (("default", "default"), ("dense", None), ("qsgd8", "qsgd:bits=8")):
        model = shard(Net(), mesh)
        if codec != "default":
            gwt.compress_fsdp(model, codec=codec, min_size=64)
        opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16)
        trace = [step(model, opt, s % 6, scale=1.0 / 48) for s in range(12)]
        runs[name] = full_params(model)
        r[name] = [trace[0], sum(trace[-6:]) / 6]
    # Averaging over 3 divides by 3 (not dyadic): equal to FSDP's own to rounding.
    r["dense_diff"] = float((runs["dense"] - runs["default"]).abs().max())
    dist.destroy_process_group()
    return r


# ---- the parameters' all-gather (compress_fsdp(param_codec=...), gradwire.fsdp.AllGather) ----

WEIGHT8 = "qsgd:bits=8,rounding=nearest,bucket=256"


def perturbed_net(seed=5):
    """Net with weights off the 1/8 grid (a quantization moves them) and norms off 1 and 0."""
    model = Net()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def fsdp_groups(model):
    """(name, FSDP module, its parameter group) for every FSDP module of model."""
    from torch.distributed.fsdp import FSDPModule
    out = []
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            pg = m._get_fsdp_state()._fsdp_param_group
            if pg is not None:
                out.append((name, m, pg))
    return out


def local_shards(model):
    """This rank's sharded parameters (the optimizer's), flat."""
    return torch.cat([p.to_local().detach().reshape(-1).clone() for p in model.parameters()])


def fsdp_param_names(model):
    names = {id(p): n for n, p in model.named_parameters()}
    return {fp: names[id(fp.sharded_param)] for _, _, pg in fsdp_groups(model) for fp in pg.fsdp_params}


def unsharded(model, async_op=False):
    """Every parameter as the modules' all-gathers give it: each FSDP module unshards (its
    all-gather, custom or FSDP's own), its unsharded parameters are copied, and it reshards."""
    names, out = fsdp_param_names(model), {}
    for _, m, pg in fsdp_groups(model):
        handle = m.unshard(async_op=async_op)
        if handle is not None:
            handle.wait()
        for fp in pg.fsdp_params:
            out[names[fp]] = fp.unsharded_param.detach().clone()
        m.reshard()
    return out


def true_params(model):
    """The exact unsharded parameters (the sharded ones gathered by DTensor, not by FSDP)."""
    return {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}


def expected_gather(model, spec, exact):
    """What a compressed all-gather must give, built independently of gradwire.fsdp: per FSDP
    module and rank, the compressed parameters' padded shards (dim 0 padded with zeros to a
    multiple of the world size, SIZE rows of [world, shard]) one after the other are encoded
    and decoded by the codec (the test blocks fit one chunk), exact parameters are their true
    values."""
    from gradwire.core import Codec, decode
    codec, names, full = Codec(spec), fsdp_param_names(model), true_params(model)
    out = {}
    for _, _, pg in fsdp_groups(model):
        rows, comp = [], []
        for fp in pg.fsdp_params:
            t = full[names[fp]]
            per = -(-t.shape[0] // SIZE)
            padded = torch.zeros((per * SIZE,) + tuple(t.shape[1:]), dtype=t.dtype)
            padded[:t.shape[0]] = t
            rows.append(padded.reshape(SIZE, -1))
            if not exact[names[fp]]:
                comp.append(len(rows) - 1)
        if comp:
            block = torch.cat([rows[i] for i in comp], 1)
            dec = torch.empty_like(block)
            for r in range(SIZE):
                decode(codec.encode(block[r].contiguous()), dec[r])
            off = 0
            for i in comp:
                w = rows[i].shape[1]
                rows[i] = dec[:, off:off + w]
                off += w
        for fp, r in zip(pg.fsdp_params, rows):
            t = full[names[fp]]
            out[names[fp]] = r.reshape((-1,) + tuple(t.shape[1:]))[:t.shape[0]]
    return out


def gather_check(gwt, spec, steps=2):
    """Trains a few steps with param_codec=spec (so that the weights are the optimizer's, not
    the initial ones), then checks one all-gather of every module: against the codec applied
    to each rank's block (bit for bit), exact parameters bit for bit against the true values,
    the error of compressed ones against the int8 bound, the sharded parameters untouched."""
    model = shard(perturbed_net(), world_mesh())
    gw = gwt.compress_fsdp(model, codec=None, min_size=64, param_codec=spec)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for s in range(steps):
        step(model, opt, s)
    before = local_shards(model)
    got = unsharded(model)
    got_async = unsharded(model, async_op=True)  # FSDP's async_op=True: the AllGather's _Work
    after = local_shards(model)
    want, full = expected_gather(model, spec, gw.param_exact), true_params(model)
    r = {"exact_names": sorted(n for n, e in gw.param_exact.items() if e),
         "compressed_names": sorted(n for n, e in gw.param_exact.items() if not e),
         "master_unchanged": bool(torch.equal(before, after)),
         "async_equal": all(torch.equal(got[n], got_async[n]) for n in got),
         "equal_expected": {n: bool(torch.equal(got[n], want[n])) for n in got},
         "exact_equal_true": {n: bool(torch.equal(got[n], full[n])) for n in got if gw.param_exact[n]},
         "digest": _digest(torch.cat([got[n].reshape(-1) for n in sorted(got)])),
         "stats": gw.stats()["all_gather"]}
    errs = {n: float((got[n] - full[n]).abs().max()) for n in got if not gw.param_exact[n]}
    # int8, nearest: at most half a step of a bucket, whose range is at most the range of the
    # rank's compressed values (padding zeros included).
    lo = min(min(float(full[n].min()), 0.0) for n in errs)
    hi = max(max(float(full[n].max()), 0.0) for n in errs)
    r["max_err"], r["int8_bound"] = max(errs.values()), 0.5 * (hi - lo) / 255 * (1 + 1e-5)
    # bf16: torch's own rounding of the true values (round to nearest even).
    r["equal_torch_bf16"] = all(torch.equal(got[n], full[n].bfloat16().float()) for n in errs)
    gw.close()
    return r


def scenario_allgather():
    """The parameters' all-gather: param_codec None leaves FSDP's own; AllGather(None) equals it
    bit for bit; int8 and bf16 weights against the codec applied to every block; training with
    reshard_after_forward True, False and 2 (a post-forward mesh); the backward's re-gather
    gives the forward's bits; AllGather alone, async and on a uint8 buffer; its errors."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather
    import gradwire.fsdp as gwf
    from gradwire import GradwireError
    gwt = setup()
    mesh = world_mesh()
    r = {}
    # (a) None: nothing installed, FSDP's own all-gather; a raw AllGather gives the same bits.
    model = shard(perturbed_net(), mesh)
    gw = gwt.compress_fsdp(model, codec=None, min_size=64)
    r["none_installs_nothing"] = (not gw.all_gathers and
                                  all(type(pg._all_gather_comm) is DefaultAllGather for _, _, pg in fsdp_groups(model)))
    step(model, None, 0)
    own = unsharded(model)
    for _, m, _ in fsdp_groups(model):
        m.set_custom_all_gather(gwf.AllGather(None))
    raw = unsharded(model)
    full = true_params(model)
    r["raw_equals_own"] = all(torch.equal(raw[n], own[n]) for n in own)
    r["own_equals_true"] = all(torch.equal(own[n], full[n]) for n in own)

    # (b) int8 weights, (e) bf16 weights.
    r["int8"] = gather_check(gwt, WEIGHT8)
    r["bf16"] = gather_check(gwt, "bf16")

    # (c) Training: int8 weights (dense reduce-scatter) next to dense, reshard_after_forward
    # True, False and 2; every Linear and Embedding records the weight it runs forward with and
    # the one its backward sees.
    from torch.distributed.fsdp import fully_shard
    losses, consistent, calls = {}, {}, {}
    for label, spec, reshard in (("dense", None, True), ("int8_reshard", WEIGHT8, True),
                                 ("int8_keep", WEIGHT8, False), ("int8_reshard2", WEIGHT8, 2)):
        model = perturbed_net()
        for b in model.blocks:
            fully_shard(b, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        gw = gwt.compress_fsdp(model, codec=None, min_size=64, param_codec=spec)
        seen = {"fwd": {}, "bwd": {}}

        def record(mod, inp, out, name):
            seen["fwd"][name] = mod.weight.detach().clone()
            out.register_hook(lambda g: seen["bwd"].__setitem__(name, mod.weight.detach().clone()))

        for n, m in model.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.register_forward_hook(lambda mod, inp, out, n=n: record(mod, inp, out, n))
        opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16)
        trace, same = [], True
        for s in range(24):
            trace.append(step(model, opt, s % 6))
            same = same and seen["fwd"].keys() == seen["bwd"].keys() and \
                all(torch.equal(seen["fwd"][n], seen["bwd"][n]) for n in seen["fwd"])
        losses[label] = [trace[0], sum(trace[-6:]) / 6]
        consistent[label] = bool(same)
        calls[label] = gw.stats()["all_gather"]["calls"] / 24 if spec else None
        gw.close()
    r.update(losses=losses, fwd_bwd_same=consistent, gathers_per_step=calls)

    # Mixed precision (parameters all-gathered in bf16): int8 on the wire, decoded to bf16;
    # identical across ranks, within the int8 bound plus bf16's rounding.
    from torch.distributed.fsdp import MixedPrecisionPolicy
    model = perturbed_net()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    gw = gwt.compress_fsdp(model, codec=None, min_size=64, param_codec=WEIGHT8)
    step(model, torch.optim.SGD(model.parameters(), lr=1.0 / 16), 0)
    got, full = unsharded(model), true_params(model)
    comp = [n for n, e in gw.param_exact.items() if not e]
    lo, hi = min(min(float(full[n].min()), 0.0) for n in comp), max(max(float(full[n].max()), 0.0) for n in comp)
    r["bf16_params"] = {
        "dtype": str(got[comp[0]].dtype),
        "digest": _digest(torch.cat([got[n].float().reshape(-1) for n in sorted(got)])),
        "max_err": max(float((got[n].float() - full[n]).abs().max()) for n in comp),
        "bound": 0.5 * (hi - lo) / 255 + 2.0 ** -8 * max(hi, -lo),
        "exact_equal": all(torch.equal(got[n], full[n].bfloat16()) for n, e in gw.param_exact.items() if e),
        "stats": gw.stats()["all_gather"]}
    gw.close()

    # AllGather alone (no layout: all of it compressed), in place as FSDP calls it; async
    # gives the sync call's bits; a uint8 buffer (FSDP's for mixed dtypes) goes raw.
    ag = gwf.AllGather(WEIGHT8)
    n = 1001
    src = torch.randn(n, generator=torch.Generator().manual_seed(RANK))
    outs = []
    for async_op in (False, True):
        out = torch.empty(SIZE * n)
        x = out.narrow(0, RANK * n, n)
        x.copy_(src)
        w = ag(out, x, None, async_op=async_op)
        if w is not None:
            w.wait()
        outs.append(out)
    exact = torch.empty(SIZE * n)
    dist.all_gather_into_tensor(exact, src)
    r["alone_async_equal"] = bool(torch.equal(outs[0], outs[1]))
    r["alone_rel_err"] = float((outs[0] - exact).norm() / exact.norm())
    r["alone_digest"] = _digest(outs[0])
    u8 = torch.empty(SIZE * 40, dtype=torch.uint8)
    u8.narrow(0, RANK * 40, 40).copy_(torch.arange(40, dtype=torch.uint8) + RANK)
    ag(u8, u8.narrow(0, RANK * 40, 40), None)
    r["uint8_raw"] = bool(torch.equal(u8, torch.cat([torch.arange(40, dtype=torch.uint8) + q for q in range(SIZE)])))
    r["uint8_stats"] = ag.stats.as_dict()
    # Errors: a tensor off the host (meta stands for cuda here).
    try:
        ag(torch.empty(SIZE * 8, device="meta"), torch.empty(8, device="meta"), None)
        r["meta_error"] = None
    except GradwireError as e:
        r["meta_error"] = str(e)
    dist.destroy_process_group()
    return r


def scenario_allgather_world3():
    """Three ranks (every first dimension padded, odd blocks): int8 weights against the codec
    applied to every block, and training next to dense."""
    gwt = setup()
    r = {"int8": gather_check(gwt, WEIGHT8)}
    for label, spec in (("dense", None), ("int8", WEIGHT8)):
        model = shard(perturbed_net(), world_mesh())
        gw = gwt.compress_fsdp(model, codec="qsgd:bits=8", min_size=64, param_codec=spec)
        opt = torch.optim.SGD(model.parameters(), lr=1.0 / 16)
        trace = [step(model, opt, s % 6, scale=1.0 / 48) for s in range(12)]
        r["loss_" + label] = [trace[0], sum(trace[-6:]) / 6]
        gw.close()
    dist.destroy_process_group()
    return r


def main():
    scenario, out = sys.argv[1], sys.argv[2]
    result = globals()["scenario_" + scenario]()
    with open(os.path.join(out, "rank%d.json" % RANK), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
