"""One rank of a DDP-over-the-gradwire-backend scenario: `python ddp_worker.py SCENARIO OUTDIR`.

The default process group is gradwire's torch backend (init_process_group("gradwire")); a
gloo group of the same ranks is the reference. Real processes, real torch DDP, real UCX.
"""
import io
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import profiler

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])


def setup():
    torch.set_num_threads(1)
    import gradwire.torch as gwt
    dist.init_process_group("gradwire", rank=RANK, world_size=SIZE)
    return gwt, dist.new_group(backend="gloo")


class Net(torch.nn.Module):
    """Two layers and a branch that only some steps use (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.side = torch.nn.Linear(16, 4)
        for p in self.parameters():  # dyadic weights: every sum below is exact in fp32
            with torch.no_grad():
                p.copy_(torch.round(p * 8) / 8)

    def forward(self, x, use_side=True):
        y = self.fc2(torch.relu(self.fc1(x)))
        return y + self.side(x) if use_side else y


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randint(-4, 5, (8, 16), generator=g).float()
    t = torch.randint(-4, 5, (8, 4), generator=g).float()
    return x, t


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(ddp, steps, lr=1.0 / 16, use_side=lambda s: True, no_sync_every=0, start=0, opt=None):
    opt = opt or torch.optim.SGD(ddp.parameters(), lr=lr)
    for s in range(start, start + steps):
        x, t = batch(s, RANK)
        ctx = ddp.no_sync() if no_sync_every and s % no_sync_every == 0 else _null()
        with ctx:
            loss = ((ddp(x, use_side(s)) - t) ** 2).sum() / 64
            loss.backward()
        if not (no_sync_every and s % no_sync_every == 0):
            opt.step()
            opt.zero_grad()
    return opt


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def same_everywhere(t, group):
    parts = [torch.empty_like(t) for _ in range(SIZE)]
    dist.all_gather(parts, t, group=group)
    return all(torch.equal(parts[0], p) for p in parts[1:])


def compare(a, b, gloo):
    return {"diff": float((flat(a.module) - flat(b.module)).abs().max()),
            "in_sync": same_everywhere(flat(a.module), gloo),
            "moved": bool(not torch.equal(flat(a.module), flat(Net())))}


def scenario_ddp():
    """DDP on gradwire against DDP on gloo in the configurations trainers use."""
    gwt, gloo = setup()
    r = {}
    configs = {
        "plain": dict(),
        "find_unused": dict(find_unused_parameters=True),
        "static_graph": dict(static_graph=True),
    }
    for name, kw in configs.items():
        side = (lambda s: s % 2 == 0) if name == "find_unused" else (lambda s: True)
        a = torch.nn.parallel.DistributedDataParallel(Net(), **kw)
        b = torch.nn.parallel.DistributedDataParallel(Net(), process_group=gloo, **kw)
        train(a, 4, use_side=side, no_sync_every=3 if name == "plain" else 0)
        train(b, 4, use_side=side, no_sync_every=3 if name == "plain" else 0)
        r[name] = compare(a, b, gloo)
    # The comm hook on the backend's own communicator (no second connection set), dense.
    a = torch.nn.parallel.DistributedDataParallel(Net())
    state = gwt.HookState(codec=None)
    a.register_comm_hook(state, gwt.comm_hook)
    b = torch.nn.parallel.DistributedDataParallel(Net(), process_group=gloo)
    train(a, 4)
    train(b, 4)
    r["hook_dense"] = compare(a, b, gloo)
    r["hook_dense"].update({"same_comm": state.comm._h.value == gwt.get_communicator()._h.value,
                            "dense": state.stats["dense"], "compressed": state.stats["compressed"]})
    # Both kinds of call in torch.profiler: the hook's (with codec and algorithm) and c10d's.
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        train(a, 1, start=10)
        dist.all_reduce(torch.ones(3))
    names = [e.name for e in prof.events()]
    r["profiled_hook"] = any(n.startswith("gradwire:all_reduce bucket=") and "codec=none" in n for n in names)
    r["profiled_c10d"] = any(n == "gradwire:all_reduce" for n in names)
    state.close()
    # Exact c10d calls beside compressed buckets: a loss all-reduced with MAX stays exact.
    v = torch.tensor([float(RANK) + 0.125])
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    r["max_exact"] = v.item() == SIZE - 1 + 0.125
    dist.destroy_process_group()
    return r


def make(gwt, spec):
    model = Net()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = gwt.HookState(codec=spec, model=model, min_size=0, dense_1d=False, algo="sparse_allgather")
    ddp.register_comm_hook(state, gwt.comm_hook)
    return ddp, state


def scenario_resume():
    """Top-k + EF through the hook: 6 steps straight against 3 steps, a checkpoint (model,
    optimizer, hook state with its residuals) into a fresh DDP, and 3 more steps."""
    gwt, gloo = setup()
    spec = "topk:ratio=0.05"
    a, sa = make(gwt, spec)
    train(a, 6)
    straight = flat(a.module)

    b, sb = make(gwt, spec)
    opt = train(b, 3)
    buf = io.BytesIO()
    torch.save({"model": b.module.state_dict(), "opt": opt.state_dict(), "hook": sb.state_dict()}, buf)
    residual_norm = sum(float(sb.ef_state(i).residual().__abs__().sum()) for i in sb._ef)
    sb.close()
    buf.seek(0)
    ck = torch.load(buf, weights_only=False)
    c, sc = make(gwt, spec)
    c.module.load_state_dict(ck["model"])
    opt_c = torch.optim.SGD(c.parameters(), lr=1.0 / 16)
    opt_c.load_state_dict(ck["opt"])
    sc.load_state_dict(ck["hook"])
    train(c, 3, start=3, opt=opt_c)
    resumed = flat(c.module)

    # The same without restoring the hook state: residuals lost, the run differs.
    d, sd = make(gwt, spec)
    d.module.load_state_dict(ck["model"])
    opt_d = torch.optim.SGD(d.parameters(), lr=1.0 / 16)
    opt_d.load_state_dict(ck["opt"])
    train(d, 3, start=3, opt=opt_d)
    r = {"resumed_equal": bool(torch.equal(straight, resumed)),
         "max_diff": float((straight - resumed).abs().max()),
         "without_state_differs": bool(not torch.equal(straight, flat(d.module))),
         "residual_norm": residual_norm, "hook_step": sc.step,
         "compressed": sc.stats["compressed"], "in_sync": same_everywhere(resumed, gloo)}
    for s in (sa, sc, sd):
        s.close()
    dist.destroy_process_group()
    return r


def main():
    scenario, out = sys.argv[1], sys.argv[2]
    result = globals()["scenario_" + scenario]()
    with open(os.path.join(out, "rank%d.json" % RANK), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
