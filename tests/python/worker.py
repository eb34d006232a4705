"""One rank of a multi-process test scenario: `python3 worker.py SCENARIO OUTDIR`.

ranks.run_ranks() starts these with RANK/WORLD_SIZE/MASTER_* (torch.distributed, gloo) and
GW_RANK/GW_SIZE/GW_ROOT (gradwire's launcher path) set. Each scenario writes what it saw to
OUTDIR/rank<r>.json; the pytest side makes the assertions. Nothing here is mocked: real
processes, real gloo, real libgradwire over UCX.
"""
import hashlib
import json
import os
import sys
import time

import numpy as np

import gradwire

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])


def digest(x):
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


# ---------------------------------------------------------------- numpy only (no torch)

def scenario_core():
    """Communicator from the launcher environment; numpy all-reduce, codecs, EF, errors."""
    r = {}
    comm = gradwire.Communicator.from_env(dense_threshold_bytes=0)
    r["rank"], r["size"] = comm.rank, comm.size

    # Dense sums of small integers are exact in any order.
    n = 100003
    x = (np.arange(n, dtype=np.float32) % 97) * (RANK + 1)
    y = np.empty_like(x)
    comm.allreduce(x, out=y)
    want = (np.arange(n, dtype=np.float32) % 97) * (SIZE * (SIZE + 1) // 2)
    r["dense_sum_exact"] = bool(np.array_equal(y, want))
    h = (np.arange(1000) % 7).astype(np.float16) * (RANK + 1)
    comm.allreduce(h, op="avg")
    r["fp16_avg_exact"] = bool(np.array_equal(h, ((np.arange(1000) % 7) * ((SIZE + 1) / 2)).astype(np.float16)))

    # Lossy codecs with EF: every rank ends with the same bits, close to the true mean.
    rng = np.random.default_rng(1000 + RANK)
    g = rng.standard_normal(1 << 16).astype(np.float32)
    true_mean = np.zeros_like(g)
    comm.allreduce(g.copy(), out=true_mean, op="avg")
    r["codecs"] = {}
    for spec in ["none", "fp16", "qsgd:bits=8", "sign", "topk:ratio=0.01", "dgc:ratio=0.001"]:
        ef = gradwire.ErrorFeedback(g.size)
        out = g.copy()
        comm.allreduce(out, op="avg", codec=spec, ef=ef)
        rel = float(np.linalg.norm(out - true_mean) / np.linalg.norm(true_mean))
        r["codecs"][spec] = {"digest": digest(out), "rel_err": rel, "algo": comm.algo_for(g, spec),
                             "ef_step": ef.step, "residual_norm": float(np.linalg.norm(ef.residual()))}

    # Several non-blocking all-reduces in flight at once, completed in any order.
    bufs = [np.full(5000 + i, float(RANK + i), dtype=np.float32) for i in range(4)]
    reqs = [comm.iallreduce(b, op="sum", codec="none") for b in bufs]
    for q in reversed(reqs):
        q.wait()
    r["iallreduce_ok"] = all(np.all(b == sum(k + i for k in range(SIZE))) for i, b in enumerate(bufs))

    b = np.full(10, float(RANK), dtype=np.float32)
    comm.broadcast(b, root=SIZE - 1)
    r["broadcast_ok"] = bool(np.all(b == SIZE - 1))
    mine = np.array([RANK, RANK * 10], dtype=np.int32)
    everyone = np.zeros(2 * SIZE, dtype=np.int32)
    comm.allgather(mine, everyone)
    r["allgather"] = everyone.tolist()
    comm.barrier()

    # Argument errors carry the library's message and leave the communicator usable.
    try:
        comm.allreduce(np.ones(1 << 15, dtype=np.float16), codec="qsgd:bits=8", algo="scatter_reduce")
        r["fp16_lossy_error"] = None
    except gradwire.GradwireError as e:
        r["fp16_lossy_error"] = [e.code, e.message]
    try:
        comm.allreduce(np.ones(10, dtype=np.float32), codec="topk:ratio=2")
        r["bad_spec_error"] = None
    except gradwire.GradwireError as e:
        r["bad_spec_error"] = [e.code, e.message]
    ok = np.ones(7, dtype=np.float32)
    comm.allreduce(ok)
    r["usable_after_errors"] = bool(np.all(ok == SIZE)) and comm.async_error() is None
    comm.close()
    return r


# ---------------------------------------------------------------- torch

def torch_setup():
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=RANK, world_size=SIZE)
    import gradwire.torch as gwt
    return torch, dist, gwt


def flat_params(model):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def flat_grads(model):
    import torch
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])


def same_on_all_ranks(dist, t):
    """True when t has the same bits on every rank (gathered through gloo)."""
    import torch
    parts = [torch.empty_like(t) for _ in range(SIZE)]
    dist.all_gather(parts, t.contiguous())
    return all(torch.equal(parts[0], p) for p in parts[1:])


def scenario_topology():
    """Ranks 2 to a node (GW_HOST_ID, as distinct machines would give): the topology the
    communicator learned, and hierarchical all-reduces that are exact (dense) and lose
    nothing (top-k with EF: outputs plus residuals add up to the inputs)."""
    per = 2
    os.environ["GW_HOST_ID"] = "node%d" % (RANK // per)
    os.environ["GW_LOCAL_RANK"], os.environ["GW_LOCAL_SIZE"] = str(RANK % per), str(per)
    r = {}
    comm = gradwire.Communicator.from_env(dense_threshold_bytes=0)
    r["topology"] = comm.topology()
    n = 30011
    x = (np.arange(n, dtype=np.float32) % 89) * (RANK + 1)
    y = comm.allreduce(x.copy(), algo="hierarchical")
    r["dense_algo"] = comm.stats()["last_algo"]
    r["dense_exact"] = bool(np.array_equal(y, (np.arange(n, dtype=np.float32) % 89) * (SIZE * (SIZE + 1) // 2)))
    g = np.random.default_rng(7 + RANK).standard_normal(n).astype(np.float32)
    ef = gradwire.ErrorFeedback(n)
    total = np.zeros(n, dtype=np.float64)
    for _ in range(5):
        total += comm.allreduce(g.copy(), codec="topk:ratio=0.02", ef=ef, algo="hierarchical")
    r["topk_algo"] = comm.stats()["last_algo"]
    r["algo_calls"] = comm.stats()["algo_calls"]
    rest = comm.allreduce(ef.residual().copy())  # what EF still holds, sent dense
    want = comm.allreduce(g.astype(np.float32).copy()).astype(np.float64) * 5
    r["topk_conserved_err"] = float(np.max(np.abs(total + rest - want)) / np.max(np.abs(want)))
    r["digest"] = digest(total)
    comm.close()
    return r


def scenario_exact():
    """DDP + gradwire hook with codec none against plain DDP (gloo all-reduce), step by step.

    Dyadic data (small integers, weights in eighths, lr 1/16, 4 ranks) make every sum exact
    in fp32 whatever the order, so the averaged gradients must agree bit for bit; the run
    checks that claim against a float64 reference. A second pair on ordinary random data
    shows how close they are when sums round."""
    torch, dist, gwt = torch_setup()
    from torch.nn.parallel import DistributedDataParallel as DDP
    comm = gwt.init_communicator(dense_threshold_bytes=0)
    r = {"rank": comm.rank}

    def make(dyadic):
        torch.manual_seed(7)
        # 269k parameters: two DDP buckets (the first is capped at 1 MiB).
        m = torch.nn.Sequential(torch.nn.Linear(8, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 4))
        if dyadic:
            with torch.no_grad():
                for p in m.parameters():
                    p.copy_(torch.randint(-4, 5, p.shape).float() / 8)
        return m

    for kind in ("dyadic", "random"):
        dyadic = kind == "dyadic"
        plain = DDP(make(dyadic))
        hooked = DDP(make(dyadic))
        state = gwt.HookState(comm, codec="none", min_size=0)
        hooked.register_comm_hook(state, gwt.comm_hook)
        opt_p = torch.optim.SGD(plain.parameters(), lr=1 / 16)
        opt_h = torch.optim.SGD(hooked.parameters(), lr=1 / 16)
        g = torch.Generator().manual_seed(100 + RANK)
        steps = []
        for step in range(4):
            if dyadic:
                x = torch.randint(-3, 4, (16, 8), generator=g).float()
                c = torch.randint(-2, 3, (16, 4), generator=g).float()
            else:
                x = torch.randn(16, 8, generator=g)
                c = torch.randn(16, 4, generator=g)
            # Local float64 gradients, for the reference average.
            ref = make(dyadic).double()
            with torch.no_grad():
                for a, b in zip(ref.parameters(), plain.module.parameters()):
                    a.copy_(b.double())
            (ref(x.double()) * c.double()).sum().backward()
            local = flat_grads(ref)
            parts = [torch.empty_like(local) for _ in range(SIZE)]
            dist.all_gather(parts, local)
            ref_avg = sum(parts) / SIZE

            for model, opt in ((plain, opt_p), (hooked, opt_h)):
                opt.zero_grad()
                (model(x) * c).sum().backward()
            gp, gh = flat_grads(plain.module), flat_grads(hooked.module)
            steps.append({
                "grads_equal": bool(torch.equal(gp, gh)),
                "max_abs_diff": float((gp - gh).abs().max()),
                "max_abs": float(gp.abs().max()),
                "plain_is_exact": bool(torch.equal(gp.double(), ref_avg)),
                "hook_is_exact": bool(torch.equal(gh.double(), ref_avg)),
            })
            opt_p.step()
            opt_h.step()
            steps[-1]["params_equal"] = bool(torch.equal(flat_params(plain.module), flat_params(hooked.module)))
            if dyadic:
                # Back onto a grid of 1/8 in [-2, 2] (the same op on both models), so that
                # the next step's sums are exact again.
                with torch.no_grad():
                    for m in (plain.module, hooked.module):
                        for p in m.parameters():
                            p.copy_(torch.clamp(torch.round(p * 8) / 8, -2, 2))
        pp, ph = flat_params(plain.module), flat_params(hooked.module)
        r[kind] = {"steps": steps, "params_equal": bool(torch.equal(pp, ph)),
                   "params_max_diff": float((pp - ph).abs().max()),
                   "hook_steps": state.step,
                   "stats": {"dense": state.stats["dense"],
                                                       "compressed": state.stats["compressed"]},
                   "in_sync": same_on_all_ranks(dist, ph)}
        state.close()
    comm.close()
    dist.destroy_process_group()
    return r


def scenario_converge():
    """Least squares on synthetic data (each rank its own rows): SGD through DDP with lossy
    codecs, with and without error feedback, and dense for reference."""
    torch, dist, gwt = torch_setup()
    from torch.nn.parallel import DistributedDataParallel as DDP
    comm = gwt.init_communicator(dense_threshold_bytes=0)
    g = torch.Generator().manual_seed(5)
    w_true = torch.randn(16, 256, generator=g) / 16
    g = torch.Generator().manual_seed(50 + RANK)
    X = torch.randn(512, 256, generator=g)
    Y = X @ w_true.t()
    r = {}
    configs = [("dense", "none", True), ("sign_ef", "sign", True), ("topk_ef", "topk:ratio=0.01", True),
               ("qsgd2_ef", "qsgd:bits=2", True), ("topk_noef", "topk:ratio=0.01", False)]
    for name, spec, ef in configs:
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(256, 16, bias=False))
        state = gwt.HookState(comm, codec=spec, min_size=0, ef=ef)
        model.register_comm_hook(state, gwt.comm_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step in range(300):
            idx = torch.randint(0, 512, (64,), generator=g)
            loss = ((model(X[idx]) - Y[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        w = model.module.weight.detach()
        full = float(((X @ w.t() - Y) ** 2).mean())
        t = torch.tensor([full])
        dist.all_reduce(t)
        r[name] = {"first_loss": losses[0], "final_loss": float(t) / SIZE,
                   "dist_to_opt": float((w - w_true).norm() / w_true.norm()),
                   "in_sync": same_on_all_ranks(dist, w.contiguous()),
                   "compressed": state.stats["compressed"], "algos": sorted(set(state.stats["algos"].values()))}
        state.close()
    comm.close()
    dist.destroy_process_group()
    return r


def scenario_momentum():
    """HookState(momentum=0.9) with codec none and SGD without momentum, against plain DDP
    with SGD(momentum=0.9): the same updates (the hook's mean of local velocities is the
    velocity of the mean gradient). After 3 steps the hook's state goes through
    state_dict() into a new HookState on a new DDP wrapper, which goes on for 3 more steps."""
    torch, dist, gwt = torch_setup()
    from torch.nn.parallel import DistributedDataParallel as DDP
    comm = gwt.init_communicator(dense_threshold_bytes=0)

    def make():
        torch.manual_seed(7)
        return torch.nn.Sequential(torch.nn.Linear(8, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                   torch.nn.ReLU(), torch.nn.Linear(512, 4))

    plain = DDP(make())
    hooked = DDP(make())
    state = gwt.HookState(comm, codec="none", min_size=0, momentum=0.9, model=hooked)
    hooked.register_comm_hook(state, gwt.comm_hook)
    opt_p = torch.optim.SGD(plain.parameters(), lr=0.05, momentum=0.9)
    opt_h = torch.optim.SGD(hooked.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + RANK)
    diffs = []
    for step in range(6):
        if step == 3:
            saved = state.state_dict()
            state.close()
            hooked = DDP(hooked.module)
            state = gwt.HookState(comm, codec="none", min_size=0, momentum=0.9, model=hooked)
            state.load_state_dict(saved)
            hooked.register_comm_hook(state, gwt.comm_hook)
        x = torch.randn(16, 8, generator=g)
        c = torch.randn(16, 4, generator=g)
        for model, opt in ((plain, opt_p), (hooked, opt_h)):
            opt.zero_grad()
            (model(x) * c).sum().backward()
            opt.step()
        pp, ph = flat_params(plain.module), flat_params(hooked.module)
        diffs.append(float((pp - ph).abs().max() / pp.abs().max()))
    # Without the restored velocities the second half would differ: a fresh hook's first
    # step sends the bare gradient.
    fresh = gwt.HookState(comm, codec="none", min_size=0, momentum=0.9, model=hooked)
    r = {"diffs": diffs, "in_sync": same_on_all_ranks(dist, flat_params(hooked.module)),
         "velocities_saved": len(saved["velocity"]), "params": len(list(hooked.module.parameters())),
         "fresh_has_velocity": len(fresh._velocity)}
    fresh.close()
    state.close()
    comm.close()
    dist.destroy_process_group()
    return r


def scenario_torch_collectives():
    """A model that uses torch.distributed itself (collectives inside forward, DDP buffer
    broadcasts, barrier/all_gather/broadcast in the loop, a second DDP model on plain gloo,
    no_sync accumulation, unused parameters) with the gradwire hook compressing next to it."""
    torch, dist, gwt = torch_setup()
    from torch.nn.parallel import DistributedDataParallel as DDP
    comm = gwt.init_communicator(dense_threshold_bytes=0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # 360k parameters: two DDP buckets, [unused, head, body.3] and [body.1, body.0].
            self.body = torch.nn.Sequential(torch.nn.Linear(32, 1024), torch.nn.BatchNorm1d(1024), torch.nn.ReLU(),
                                            torch.nn.Linear(1024, 256), torch.nn.ReLU())
            self.head = torch.nn.Linear(256, 10)
            self.unused = torch.nn.Linear(256, 256)  # never in the graph: find_unused_parameters
            self.register_buffer("seen", torch.zeros(1))

        def forward(self, x):
            h = self.body(x)
            # The model's own collective inside forward (like SyncBatchNorm's statistics).
            with torch.no_grad():
                m = h.mean(0)
                dist.all_reduce(m)
                self.seen += 1
            return self.head(h)

    torch.manual_seed(3)
    net = Net()
    ddp = DDP(net, find_unused_parameters=True, broadcast_buffers=True)
    state = gwt.HookState(comm, codec="topk:ratio=0.05", param_codecs=[("head.*", "fp16")], min_size=256,
                          warmup_steps=2, model=net)
    ddp.register_comm_hook(state, gwt.comm_hook)
    other = DDP(torch.nn.Linear(32, 10))  # a second model on DDP's own all-reduce
    opt = torch.optim.SGD(list(ddp.parameters()) + list(other.parameters()), lr=0.05)
    g = torch.Generator().manual_seed(RANK)
    W = torch.randn(10, 32, generator=torch.Generator().manual_seed(1))
    losses, steps = [], 0
    for it in range(24):
        x = torch.randn(32, 32, generator=g)
        y = (x @ W.t()).argmax(1)
        accumulate = it % 3 == 0  # every third batch accumulates locally first
        if accumulate:
            with ddp.no_sync(), other.no_sync():
                (torch.nn.functional.cross_entropy(ddp(x), y) +
                 torch.nn.functional.cross_entropy(other(x), y)).backward()
            continue
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss2 = torch.nn.functional.cross_entropy(other(x), y)
        (loss + loss2).backward()
        opt.step()
        opt.zero_grad()
        steps += 1
        # The training loop's own collectives, between steps.
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(float(t) / SIZE)
        if it % 4 == 1:
            dist.barrier()
            box = [{"rank": RANK, "it": it}]
            dist.broadcast_object_list(box, src=0)
            gathered = [None] * SIZE
            dist.all_gather_object(gathered, it)
            assert gathered == [it] * SIZE and box[0]["it"] == it
        # and gradwire's communicator used directly too
        v = torch.full((8,), float(RANK))
        comm.allreduce(v)
        assert torch.all(v == sum(range(SIZE)))
    r = {"losses": losses, "hook_steps": state.step, "opt_steps": steps,
         "stats": {"dense": state.stats["dense"], "compressed": state.stats["compressed"],
                   "algos": sorted(set(state.stats["algos"].values()))},
         "bucket_specs": {str(i): e[0] for i, e in state._ef.items()},
         "specs": sorted(s for s in state._codecs),
         "ddp_in_sync": same_on_all_ranks(dist, flat_params(net)),
         "other_in_sync": same_on_all_ranks(dist, flat_params(other.module)),
         "seen": float(net.seen), "ef_states": len(state._ef)}
    state.close()
    comm.close()
    dist.destroy_process_group()
    return r


def scenario_shrink():
    """Rank SIZE-1 dies (os._exit, no goodbye) after a warm-up; the others see a remote error,
    shrink, and go on over SIZE-1 ranks: exact dense sums, the EF residual carried over and its
    mass kept element by element (top-k; test_shrink.cpp checks owner-side residuals), and a
    revoke that reaches every rank."""
    r = {}
    comm = gradwire.Communicator.from_env(timeout_s=20)
    n = 10007
    ef = gradwire.ErrorFeedback(n)
    g = np.random.default_rng(3 + RANK).standard_normal(n).astype(np.float32)
    comm.allreduce(g.copy(), codec="topk:ratio=0.01", ef=ef, algo="sparse_allgather")
    comm.barrier()
    if RANK == SIZE - 1:
        with open(os.path.join(sys.argv[2], "rank%d.json" % RANK), "w") as f:
            json.dump({"died": True}, f)
        time.sleep(0.2)  # the barrier's last messages reach the others first
        os._exit(0)
    try:
        comm.allreduce(np.ones(1 << 20, dtype=np.float32))
        r["failed_code"] = 0
    except gradwire.GradwireError as e:
        r["failed_code"] = e.code
    t0 = time.monotonic()
    new = comm.shrink()
    r["shrink_s"] = time.monotonic() - t0
    r["size"], r["rank"] = new.size, new.rank
    try:
        comm.barrier()
        r["old_still_works"] = True
    except gradwire.GradwireError:
        r["old_still_works"] = False
    comm.close()
    x = (np.arange(n, dtype=np.float32) % 13) * (RANK + 1)
    y = new.allreduce(x.copy())
    survivors = sum(k + 1 for k in range(SIZE - 1))
    r["dense_exact"] = bool(np.array_equal(y, (np.arange(n, dtype=np.float32) % 13) * survivors))
    before = g.astype(np.float64) + ef.residual()
    r["residual_carried"] = bool(np.any(ef.residual() != 0))
    out = new.allreduce(g.copy(), codec="topk:ratio=0.01", ef=ef, algo="sparse_allgather")
    kept = new.allreduce((before - ef.residual()).astype(np.float32))  # in - kept, summed
    r["ef_err"] = float(np.max(np.abs(kept - out)) / max(1e-9, float(np.max(np.abs(out)))))
    if new.rank == 0:
        new.revoke()
    try:
        new.allreduce(np.ones(100, dtype=np.float32))
        r["after_revoke"] = 0
    except gradwire.GradwireError as e:
        r["after_revoke"] = e.code
    new.close()
    return r


def scenario_allgather_compressed():
    """Communicator.allgather / iallgather with a codec: every rank's block is the decode of
    its rank's own message (a local encode at the same size gives the same bits for a
    deterministic codec), the same bits on every rank, in place too, float32 and bfloat16;
    argument errors raised before any call."""
    import torch
    r = {}
    comm = gradwire.Communicator.from_env(timeout_s=20)
    n = 3001 + 17 * 0  # every rank passes the same count (a prime)
    digests = {}
    ok = True
    for spec, dtype in [("qsgd:bits=8,rounding=nearest,bucket=256", torch.float32), ("bf16", torch.float32),
                        ("qsgd:bits=8,rounding=nearest", torch.bfloat16), ("fp16", torch.bfloat16)]:
        xs = [torch.from_numpy(np.random.default_rng(k).standard_normal(n).astype(np.float32)).to(dtype)
              for k in range(SIZE)]
        out = torch.zeros(SIZE * n, dtype=dtype)
        in_place = dtype == torch.bfloat16
        if in_place:
            out[RANK * n:(RANK + 1) * n] = xs[RANK]
            comm.iallgather(out[RANK * n:(RANK + 1) * n], out, codec=spec).wait()
        else:
            comm.allgather(xs[RANK], out, codec=spec)
        codec = gradwire.Codec(spec)
        for k in range(SIZE):
            # What rank k's block must be: its message decoded (in float32, rounded to dtype).
            want = torch.zeros(n, dtype=torch.float32)
            gradwire.decode(codec.encode(xs[k].float() if dtype != torch.float32 else xs[k], rank=k), want)
            ok &= bool(torch.equal(out[k * n:(k + 1) * n], want.to(dtype)))
        err = float((out.float() - torch.cat(xs).float()).abs().max())
        r.setdefault("max_err", {})[spec + "/" + str(dtype)] = err
        digests[spec + str(dtype)] = out.view(torch.uint8 if dtype == torch.float32 else torch.int16).sum().item()
    r["blocks_are_decodes"] = ok
    r["digests"] = digests
    errors = {}
    x = np.zeros(5, dtype=np.float32)
    for name, call in [("out_size", lambda: comm.allgather(x, np.zeros(5 * SIZE + 1, dtype=np.float32), codec="bf16")),
                       ("int32", lambda: comm.allgather(np.zeros(5, dtype=np.int32),
                                                        np.zeros(5 * SIZE, dtype=np.int32), codec="bf16")),
                       ("bad_spec", lambda: comm.allgather(x, np.zeros(5 * SIZE, dtype=np.float32),
                                                           codec="qsgd:bits=3"))]:
        try:
            call()
            errors[name] = 0
        except gradwire.GradwireError as e:
            errors[name] = e.code
    r["errors"] = errors
    comm.barrier()
    comm.close()
    return r


def scenario_reduce_scatter():
    """Communicator.reduce_scatter / ireduce_scatter with blocks of different sizes: raw and
    exact (float64, int32 max), codec "none" on bfloat16 summed in float32, qsgd with an
    ErrorFeedback that loses nothing over steps, and argument errors raised before any call."""
    import torch
    r = {}
    comm = gradwire.Communicator.from_env(timeout_s=20)
    counts = [(7 * k + 3) % 11 for k in range(SIZE)]  # 3, 10, 6, ...: uneven, maybe one empty
    n = sum(counts)
    start = sum(counts[:RANK])
    i = np.arange(n)
    x = ((i * 7 + RANK * 3) % 5 + 1).astype(np.float64)
    out = np.zeros(counts[RANK], dtype=np.float64)
    comm.reduce_scatter(x, out, counts=counts)
    want = sum(((i * 7 + k * 3) % 5 + 1) for k in range(SIZE)).astype(np.float64)[start:start + counts[RANK]]
    r["raw_exact"] = bool(np.array_equal(out, want))
    xi = ((i * 7 + RANK * 3) % 5).astype(np.int32)
    oi = np.zeros(counts[RANK], dtype=np.int32)
    comm.reduce_scatter(xi, oi, op="max", counts=counts)
    r["max_exact"] = bool(np.array_equal(oi, np.max([((i * 7 + k * 3) % 5) for k in range(SIZE)], axis=0)
                                         [start:start + counts[RANK]].astype(np.int32)))
    # bfloat16: 256 + 1 + 1 is 258 in float32, but 256 in bfloat16 partial sums.
    xb = torch.full((n,), 256.0 if RANK == 0 else 1.0, dtype=torch.bfloat16)
    ob = torch.zeros(counts[RANK], dtype=torch.bfloat16)
    comm.reduce_scatter(xb, ob, codec="none", counts=counts)
    r["bf16_f32_sum"] = bool(torch.equal(ob, torch.full_like(ob, 256.0 + (SIZE - 1))))
    # qsgd + EF, equal blocks, non-blocking: received + residuals == inputs, element by element.
    m = 4099
    ef = gradwire.ErrorFeedback(m * SIZE)
    got = np.zeros(m, dtype=np.float64)
    sent = np.zeros(m * SIZE, dtype=np.float64)
    o = np.zeros(m, dtype=np.float32)
    for step in range(5):
        g = np.random.default_rng(100 * step + RANK).standard_normal(m * SIZE).astype(np.float32)
        sent += g
        comm.ireduce_scatter(g, o, codec="qsgd:bits=4", ef=ef).wait()
        got += o
    allsent = np.zeros((SIZE, m * SIZE), dtype=np.float64)
    allres = np.zeros((SIZE, m * SIZE), dtype=np.float32)
    comm.allgather(sent, allsent)
    comm.allgather(ef.residual(), allres)
    block = slice(RANK * m, (RANK + 1) * m)
    err = got + allres[:, block].sum(axis=0) - allsent[:, block].sum(axis=0)
    r["ef_err"] = float(np.max(np.abs(err)))
    r["own_residual_zero"] = bool(np.all(ef.residual()[block] == 0))
    errors = {}
    for name, call in [("counts_len", lambda: comm.reduce_scatter(x, out, counts=counts[:-1] + [1, 1])),
                       ("counts_sum", lambda: comm.reduce_scatter(x, out, counts=[c + 1 for c in counts])),
                       ("equal_blocks", lambda: comm.reduce_scatter(np.zeros(SIZE * 3 + 1), np.zeros(3))),
                       ("ef_size", lambda: comm.reduce_scatter(g, o, codec="qsgd:bits=4",
                                                               ef=gradwire.ErrorFeedback(5))),
                       ("max_codec", lambda: comm.reduce_scatter(g, o, op="max", codec="qsgd:bits=4"))]:
        try:
            call()
            errors[name] = 0
        except gradwire.GradwireError as e:
            errors[name] = e.code
    r["errors"] = errors
    comm.barrier()
    comm.close()
    return r


def main():
    scenario, out = sys.argv[1], sys.argv[2]
    result = globals()["scenario_" + scenario]()
    with open(os.path.join(out, "rank%d.json" % RANK), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
