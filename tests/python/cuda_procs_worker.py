"""One rank of tests/python/test_cuda_procs.py: `python cuda_procs_worker.py OUTDIR`.

Started by the test (a fresh interpreter per rank, never a fork of a process that has CUDA)
with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set. Builds a gloo process group, a gradwire
communicator beside it (gradwire.torch.init_communicator), and runs every case twice: once
on CUDA tensors (the device path: gw_allreduce_device / gw_iallreduce_device, device EF
states) and once on CPU tensors (the host path), with the same seeds, comparing the two in
this process. Writes OUTDIR/rank<r>.json; the test makes the assertions.

GRADWIRE_TEST_DEVICE=cpu runs the "device" half on the CPU as well (a check of this script
on a machine without a GPU; the stream case is then left out).
"""
import datetime
import hashlib
import json
import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist

import gradwire

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
DEV = os.environ.get("GRADWIRE_TEST_DEVICE", "cuda")
TIMEOUT_S = 20.0  # the communicator's bound on every wait: a rank whose peer died exits
STEPS = 4  # DDP steps per run
SLEEP_CYCLES = 100_000_000  # torch.cuda._sleep: some 50 ms of a spinning kernel on an H100


def same_bits(a, b):
    """True when a and b (tensors or numpy float32 arrays) hold the same bits."""
    a = torch.as_tensor(a).detach().cpu().contiguous().reshape(-1)
    b = torch.as_tensor(b).detach().cpu().contiguous().reshape(-1)
    if a.dtype != b.dtype or a.numel() != b.numel():
        return False
    if a.dtype == torch.float32:
        return bool(torch.equal(a.view(torch.int32), b.view(torch.int32)))
    return bool(torch.equal(a, b))


def max_diff(a, b):
    a = torch.as_tensor(a).detach().cpu().double().reshape(-1)
    b = torch.as_tensor(b).detach().cpu().double().reshape(-1)
    if a.numel() != b.numel():
        return float("inf")
    return float((a - b).abs().max()) if a.numel() else 0.0


def digest(t):
    return hashlib.sha256(torch.as_tensor(t).detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def dev_ef(n):
    return gradwire.ErrorFeedback(n, device="cuda:0" if DEV == "cuda" else None)


# ---------------------------------------------------------------- comm.allreduce / iallreduce

N = 600_001  # 2.4 MB: three of the communicator's default 1 MiB chunks
CASES = [  # name, codec, algo, error feedback
    ("dense", None, "auto", False),
    ("qsgd4", "qsgd:bits=4", "scatter_reduce", True),
    ("topk", "topk:ratio=0.01", "sparse_allgather", True),
]


def gradient(case, step):
    """This rank's input of a case's step (CPU, float32, heavy-ish tails)."""
    g = torch.Generator().manual_seed(1000 * case + 10 * step + RANK)
    return torch.randn(N, generator=g) * torch.rand(N, generator=g).pow(4) * 1e-2


def run_blocking(comm, case, device, side=None):
    """STEPS all-reduces (op avg) of a case on device; with side (a CUDA stream), each call is
    made with side current while side still holds a long sleep and then the copy that fills
    the input. Returns (outputs on the CPU, residual or None, EF step or None)."""
    name, spec, algo, use_ef = CASES[case]
    ef = (dev_ef(N) if device != "cpu" else gradwire.ErrorFeedback(N)) if use_ef else None
    outs = []
    for s in range(STEPS):
        g = gradient(case, s)
        if device == "cpu":
            x = g.clone()
            comm.allreduce(x, op="avg", codec=spec, ef=ef, algo=algo)
            outs.append(x)
            continue
        g_dev = g.to(device)
        if side is None:
            comm.allreduce(g_dev, op="avg", codec=spec, ef=ef, algo=algo)
            outs.append(g_dev.cpu())
            continue
        # Stale contents (-7) that a call not ordered after the side stream's work would read.
        x = torch.full_like(g_dev, -7.0)
        out = torch.full_like(g_dev, -9.0) if s % 2 else x  # odd steps out of place
        torch.cuda.synchronize()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.copy_(g_dev)
            if s < 2:
                comm.allreduce(x, out=None if out is x else out, op="avg", codec=spec, ef=ef, algo=algo)
            else:
                comm.iallreduce(x, out=None if out is x else out, op="avg", codec=spec, ef=ef, algo=algo).wait()
            outs.append(out.cpu())  # ordered on side
    sync()
    return outs, (ef.residual() if ef is not None else None), (ef.step if ef is not None else None)


def run_in_flight(comm, device):
    """Per step, the qsgd and the topk all-reduce of CASES both in flight (iallreduce), waited
    for in reverse order. Returns {case name: (outputs, residual)}."""
    picked = [1, 2]
    efs = {c: (dev_ef(N) if device != "cpu" else gradwire.ErrorFeedback(N)) for c in picked}
    outs = {c: [] for c in picked}
    for s in range(STEPS):
        bufs, reqs = {}, []
        for c in picked:
            _, spec, algo, _ = CASES[c]
            bufs[c] = gradient(c, s).to(device)
            reqs.append(comm.iallreduce(bufs[c], op="avg", codec=spec, ef=efs[c], algo=algo))
        for q in reversed(reqs):
            q.wait()
        for c in picked:
            outs[c].append(bufs[c].cpu())
    sync()
    return {CASES[c][0]: (outs[c], efs[c].residual()) for c in picked}


def allreduce_part(comm):
    r = {}
    side = torch.cuda.Stream() if DEV == "cuda" else None
    for case, (name, spec, algo, use_ef) in enumerate(CASES):
        host, host_res, host_step = run_blocking(comm, case, "cpu")
        dev, dev_res, dev_step = run_blocking(comm, case, DEV)
        entry = {
            "steps_equal": [same_bits(a, b) for a, b in zip(dev, host)],
            "max_diff": max(max_diff(a, b) for a, b in zip(dev, host)),
            "residual_equal": None if host_res is None else same_bits(dev_res, host_res),
            "residual_norm": None if host_res is None else float(np.linalg.norm(host_res)),
            "ef_steps": [host_step, dev_step],
            "digest": digest(dev[-1]),
            "algo_host": comm.algo_for(torch.zeros(N), spec),
        }
        if DEV == "cuda":
            entry["algo_device"] = comm.algo_for(torch.zeros(N, device=DEV), spec)
        if side is not None:
            st, st_res, _ = run_blocking(comm, case, DEV, side=side)
            entry["stream_steps_equal"] = [same_bits(a, b) for a, b in zip(st, host)]
            entry["stream_residual_equal"] = None if host_res is None else same_bits(st_res, host_res)
        r[name] = entry
    host = run_in_flight(comm, "cpu")
    dev = run_in_flight(comm, DEV)
    r["in_flight"] = {name: {"steps_equal": [same_bits(a, b) for a, b in zip(dev[name][0], host[name][0])],
                             "residual_equal": same_bits(dev[name][1], host[name][1]),
                             "digest": digest(dev[name][0][-1])}
                      for name in host}
    return r


# ---------------------------------------------------------------- comm.reduce_scatter

RS_COUNTS = [300_007, 0, 200_003]  # per rank, padded to the communicator's size below
RS_CASES = [  # name, codec, error feedback
    ("none", "none", False),
    ("qsgd4_ef", "qsgd:bits=4", True),
    ("topk_ef", "topk:ratio=0.01", True),
]


def reduce_scatter_part(comm):
    """comm.reduce_scatter (op avg, uneven blocks, one empty) on device tensors against the same
    calls on CPU tensors, STEPS steps each: outputs and residuals bit for bit (stochastic codecs
    keyed by the EF state's step, so the host and device calls draw the same words); the last
    step through ireduce_scatter."""
    counts = [RS_COUNTS[r % len(RS_COUNTS)] for r in range(SIZE)]
    n = sum(counts)
    r = {}
    for name, spec, use_ef in RS_CASES:
        runs = {}
        for device in ("cpu", DEV):
            ef = (dev_ef(n) if device != "cpu" else gradwire.ErrorFeedback(n)) if use_ef else None
            outs = []
            for s in range(STEPS):
                g = torch.Generator().manual_seed(77 * s + RANK)
                x = (torch.randn(n, generator=g) * 1e-2).to(device)
                out = torch.full((counts[RANK],), -7.0, device=device)
                if s == STEPS - 1:
                    comm.ireduce_scatter(x, out, op="avg", codec=spec, ef=ef, counts=counts).wait()
                else:
                    comm.reduce_scatter(x, out, op="avg", codec=spec, ef=ef, counts=counts)
                outs.append(out.cpu())
            sync()
            runs[device] = (outs, ef.residual() if ef is not None else None)
        host, dev = runs["cpu"], runs[DEV]
        r[name] = {"steps_equal": [same_bits(a, b) for a, b in zip(dev[0], host[0])],
                   "residual_equal": None if host[1] is None else same_bits(dev[1], host[1]),
                   "digest": digest(dev[0][-1])}
    return r


# ---------------------------------------------------------------- comm.allgather(codec=)

AG_CASES = [("int8", "qsgd:bits=8,rounding=nearest,bucket=256"), ("bf16", "bf16"), ("topk", "topk:ratio=0.05")]


def allgather_part(comm):
    """comm.allgather / iallgather with a codec on device tensors against the same calls on CPU
    tensors (deterministic codecs): the gathered blocks bit for bit, in place through
    iallgather too."""
    n = 40961  # several messages, odd
    r = {}
    for name, spec in AG_CASES:
        runs = {}
        for device in ("cpu", DEV):
            g = torch.Generator().manual_seed(99 + RANK)
            x = torch.randn(n, generator=g).to(device)
            out = torch.full((n * SIZE,), -7.0, device=device)
            comm.allgather(x, out, codec=spec)
            inplace = torch.full((n * SIZE,), -7.0, device=device)
            inplace[RANK * n:(RANK + 1) * n] = x
            comm.iallgather(inplace[RANK * n:(RANK + 1) * n], inplace, codec=spec).wait()
            sync()
            runs[device] = (out.cpu(), inplace.cpu())
        host, dev = runs["cpu"], runs[DEV]
        r[name] = {"steps_equal": [same_bits(dev[0], host[0]), same_bits(dev[1], host[1])],
                   "residual_equal": None, "digest": digest(dev[0])}
    return r


# ---------------------------------------------------------------- the DDP comm hook

HOOK_CASES = [  # name, codec, algo
    ("none", "none", "auto"),
    ("topk_ef", "topk:ratio=0.05", "sparse_allgather"),
    ("qsgd4_ef", "qsgd:bits=4", "scatter_reduce"),
]


def make_model(device):
    """8-512-512-4 (269k parameters: one DDP bucket in the first step, two after DDP's
    rebuild, which the hook's EF states must follow) with dyadic weights: eighths in
    [-1/2, 1/2]."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 4))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g).float() / 8)
    return m.to(device)


def batch(step):
    g = torch.Generator().manual_seed(100 + 10 * step + RANK)
    return (torch.randint(-3, 4, (16, 8), generator=g).float(),
            torch.randint(-2, 3, (16, 4), generator=g).float())


def flat(tensors):
    return torch.cat([t.detach().reshape(-1).cpu() for t in tensors])


def local_grads(model, x, c, dtype):
    """This rank's gradient (no averaging) of a CPU copy of model in dtype."""
    m = make_model("cpu").to(dtype)
    with torch.no_grad():
        for a, b in zip(m.parameters(), model.parameters()):
            a.copy_(b.detach().cpu().to(dtype))
    (m(x.to(dtype)) * c.to(dtype)).sum().backward()
    return flat(p.grad for p in m.parameters())


class ReplayBucket:
    """What gradwire.torch.comm_hook reads of a DDP GradBucket, from a recorded call."""

    def __init__(self, rec):
        self._rec = rec
        self._buf = rec["input"].clone()

    def buffer(self):
        return self._buf

    def index(self):
        return self._rec["index"]

    def is_last(self):
        return self._rec["last"]

    def parameters(self):
        return self._rec["params"]


def train(comm, gwt, device, spec, algo):
    """STEPS of DDP (gloo) with the gradwire hook on device. Loss (model(x) * c).sum(), SGD
    lr 1/16, and after each step the weights go back onto the grid of eighths in [-2, 2]:
    every forward and backward sum is then exact in fp32, so the CPU and the CUDA run feed
    the hook the same bits (checked: the CPU run's gradients against float64). Records every
    hook call's bucket before and after the all-reduce."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = make_model(device)
    ddp = DDP(model)
    # model=: EF slices are keyed by parameter name. Without it they are keyed by shape, and
    # this model has two (512,) biases in different buckets: at DDP's bucket rebuild the
    # new bucket 1 would take its bias's residual from the new bucket 0's state while that
    # bucket's all-reduce is still in flight (a race: results differ run to run).
    state = gwt.HookState(comm, codec=spec, min_size=0, dense_1d=False, algo=algo, ef=True, model=model)
    log = []

    def hook(st, bucket):
        rec = {"index": bucket.index(), "last": bucket.is_last(), "params": list(bucket.parameters()),
               "input": bucket.buffer().detach().clone()}
        log.append(rec)
        fut = gwt.comm_hook(st, bucket)

        def keep(f):
            t = f.value()
            rec["output"] = t.detach().clone()
            return t
        return fut.then(keep)

    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1.0 / 16)
    exact, stepped = [], []
    for step in range(STEPS):
        x, c = batch(step)
        if device == "cpu":
            exact.append(same_bits(local_grads(model, x, c, torch.float32).double(),
                                   local_grads(model, x, c, torch.float64)))
        opt.zero_grad()
        (ddp(x.to(device)) * c.to(device)).sum().backward()
        opt.step()
        stepped.append(flat(model.parameters()))  # the hook's result, applied by SGD
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.clamp(torch.round(p * 8) / 8, -2, 2))
    sync()
    for rec in log:
        rec["input"] = rec["input"].cpu()
        rec["output"] = rec["output"].cpu()
    indices = sorted({rec["index"] for rec in log})
    efs = {i: state.ef_state(i) for i in indices if state.ef_state(i) is not None}
    out = {"model": model, "log": log, "exact": exact, "stepped": stepped, "params": flat(model.parameters()),
           "residuals": {i: ef.residual() for i, ef in efs.items()},
           "ef_devices": sorted({str(ef.device) for ef in efs.values()}),
           "stats": {"dense": state.stats["dense"], "compressed": state.stats["compressed"],
                     "algos": sorted(set(state.stats["algos"].values()))}}
    state.close()
    del ddp
    return out


def replay(comm, gwt, spec, algo, model, log):
    """The recorded calls of a run, again, through the hook on CPU tensors (a fresh HookState,
    the same bucket indices and parameters): what the host path gives for those exact inputs."""
    state = gwt.HookState(comm, codec=spec, min_size=0, dense_1d=False, algo=algo, ef=True, model=model)
    outs = []
    for rec in log:
        outs.append(gwt.comm_hook(state, ReplayBucket(rec)).wait().detach().clone())
    indices = sorted({rec["index"] for rec in log})
    residuals = {i: state.ef_state(i).residual() for i in indices if state.ef_state(i) is not None}
    state.close()
    return outs, residuals


def hook_part(comm, gwt):
    r = {"matmul_precision": torch.get_float32_matmul_precision()}
    for name, spec, algo in HOOK_CASES:
        host = train(comm, gwt, "cpu", spec, algo)
        dev = train(comm, gwt, DEV, spec, algo)
        rep_outs, rep_res = replay(comm, gwt, spec, algo, dev["model"], dev["log"])
        hl, dl = host["log"], dev["log"]
        entry = {
            "calls": [len(hl), len(dl)],
            "layout_host": [[rec["index"], rec["input"].numel()] for rec in hl],
            "layout_dev": [[rec["index"], rec["input"].numel()] for rec in dl],
            "exact": host["exact"],
            "inputs_equal": [same_bits(a["input"], b["input"]) for a, b in zip(dl, hl)],
            "outputs_equal": [same_bits(a["output"], b["output"]) for a, b in zip(dl, hl)],
            "outputs_max_diff": max([max_diff(a["output"], b["output"]) for a, b in zip(dl, hl)] or [0.0]),
            "stepped_equal": [same_bits(a, b) for a, b in zip(dev["stepped"], host["stepped"])],
            "params_equal": same_bits(dev["params"], host["params"]),
            "params_max_diff": max_diff(dev["params"], host["params"]),
            "residual_buckets": [sorted(host["residuals"]), sorted(dev["residuals"])],
            "residuals_equal": {str(i): same_bits(dev["residuals"][i], host["residuals"][i])
                                for i in host["residuals"] if i in dev["residuals"]},
            "replay_outputs_equal": [same_bits(a, rec["output"]) for a, rec in zip(rep_outs, dl)],
            "replay_residuals_equal": {str(i): same_bits(dev["residuals"][i], rep_res[i])
                                       for i in rep_res if i in dev["residuals"]},
            "stats_host": host["stats"], "stats_dev": dev["stats"],
            "ef_devices": dev["ef_devices"],
            "params_digest": digest(dev["params"]),
        }
        r[name] = entry
    return r


def main():
    outdir = sys.argv[1]
    if DEV == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("rank %d: torch %s has no CUDA device" % (RANK, torch.__version__))
        torch.cuda.set_device(0)
    torch.set_float32_matmul_precision("highest")  # the default: no TF32 in the GEMMs (exact sums)
    dist.init_process_group("gloo", rank=RANK, world_size=SIZE, timeout=datetime.timedelta(seconds=40))
    import gradwire.torch as gwt
    comm = gwt.init_communicator(timeout_s=TIMEOUT_S, dense_threshold_bytes=0)
    try:
        result = {"rank": comm.rank, "size": comm.size, "device": DEV, "torch": torch.__version__,
                  "library": gradwire.library_path,
                  "allreduce": allreduce_part(comm), "reduce_scatter": reduce_scatter_part(comm),
                  "allgather_compressed": allgather_part(comm),
                  "hook": hook_part(comm, gwt)}
        with open(os.path.join(outdir, "rank%d.json.tmp" % RANK), "w") as f:
            json.dump(result, f)
        os.replace(os.path.join(outdir, "rank%d.json.tmp" % RANK), os.path.join(outdir, "rank%d.json" % RANK))
    except BaseException:
        comm.abort()  # the peer's calls fail now rather than at their timeout
        raise
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # no exit handlers: nothing may wait on a peer that is gone
    sys.stdout.flush()
    os._exit(0)
