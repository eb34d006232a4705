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


def main():
    scenario, out = sys.argv[1], sys.argv[2]
    result = globals()["scenario_" + scenario]()
    with open(os.path.join(out, "rank%d.json" % RANK), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
