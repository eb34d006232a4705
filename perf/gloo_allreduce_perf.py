#!/usr/bin/python3
"""torch.distributed all_reduce (float32, sum) through a backend: the Gloo baseline, or
gradwire's own torch backend (--backend gradwire, which imports gradwire.torch), timed as
allreduce_perf times gradwire: tensors allocated once and first-touched, warm-up calls, then
the mean time per call of the slowest rank, one row per size.

Launch it like torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; OpenMPI's
OMPI_COMM_WORLD_RANK/SIZE also work). Inside a network namespace set GLOO_SOCKET_IFNAME
(e.g. eth0), or gloo binds to the loopback device. Runs with any torch (Debian's 1.13 under
/usr/bin/python3, or the project's .venv/bin/python).

usage: gloo_allreduce_perf.py [--backend gloo|gradwire] [-b bytes] [-e bytes] [-f factor]
                              [-n iters] [-w warmup] [-c 0|1] [-J file.json]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip()
    if s and s[-1].lower() in mult:
        return int(float(s[:-1]) * mult[s[-1].lower()])
    return int(float(s))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="gloo", help="torch.distributed backend: gloo or gradwire")
    ap.add_argument("-b", default="32M", help="smallest size in bytes (K, M, G suffixes)")
    ap.add_argument("-e", default="32M", help="largest size in bytes")
    ap.add_argument("-f", type=float, default=2.0, help="size factor between rows")
    ap.add_argument("-n", type=int, default=20, help="timed calls per size")
    ap.add_argument("-w", type=int, default=5, help="warm-up calls per size")
    ap.add_argument("-c", type=int, default=1, help="check the result of one call (1) or not (0)")
    ap.add_argument("-J", default="", help="also write the rows as JSON to this file (rank 0)")
    a = ap.parse_args()

    env = os.environ
    rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", "0")))
    world = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1")))
    if a.backend == "gradwire":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
        import gradwire.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=world)

    lo, hi = parse_size(a.b), parse_size(a.e)
    max_count = hi // 4
    idx = torch.arange(max_count, dtype=torch.int64)

    def pattern(r):  # small integers, as the other tools send: exact sums
        return (((idx * 7 + r * 13) % 41) - 20).to(torch.float32)

    mine = pattern(rank)
    buf = mine.clone()  # allocated and touched once
    if rank == 0:
        print(f"# {a.backend} all_reduce (torch {torch.__version__}): {world} ranks, float, sum, iters {a.n}, "
              f"warmup {a.w}, GLOO_SOCKET_IFNAME={env.get('GLOO_SOCKET_IFNAME', '(unset)')}")
        print("#\n# %12s %12s %12s %8s %8s %8s" % ("size(B)", "count", "time(us)", "algbw", "busbw", "#wrong"))
        sys.stdout.flush()
    rows = []
    size = float(lo)
    while size <= hi * 1.0000001:
        count = int(size) // 4
        t = buf[:count]
        for _ in range(a.w):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.n):
            dist.all_reduce(t)  # values grow; their size does not change the time
        local = (time.perf_counter() - t0) / a.n
        slowest = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        tmax = slowest.item()
        wrong = -1
        if a.c:
            t.copy_(mine[:count])
            dist.all_reduce(t)
            expect = sum(pattern(r)[:count] for r in range(world))
            bad = torch.tensor([int((t != expect).sum().item())], dtype=torch.int64)
            dist.all_reduce(bad)
            wrong = int(bad.item())
        algbw = count * 4 / tmax / 1e9 if tmax > 0 else 0.0
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print("  %12d %12d %12.1f %8.3f %8.3f %8d" % (count * 4, count, tmax * 1e6, algbw, busbw, wrong))
            sys.stdout.flush()
        rows.append({"bytes": count * 4, "count": count, "type": "float", "codec": "none", "time_us": tmax * 1e6,
                     "algbw": algbw, "busbw": busbw, "wrong": wrong})
        if lo == 0 and size == 0:
            size = 4 / a.f
        size *= a.f
    if rank == 0 and a.J:
        with open(a.J, "w") as f:
            json.dump({"tool": "gloo_allreduce_perf", "backend": a.backend, "nranks": world, "iters": a.n, "warmup": a.w,
                       "torch": torch.__version__, "bus_factor": 2 * (world - 1) / world, "results": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
