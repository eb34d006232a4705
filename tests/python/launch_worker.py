"""A trainer's script as torchrun or mpirun starts it: init_process_group("gradwire") from the
launcher's environment, collectives and a DDP step, then OUTDIR/rank<r>.json (OUTDIR: the first argument)."""
import json
import os
import sys

import torch
import torch.distributed as dist

import gradwire.torch as gwt

if "RANK" not in os.environ:  # mpirun, srun
    gwt.launcher_env()
torch.set_num_threads(1)
dist.init_process_group("gradwire")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
ok = bool(torch.all(t == size * (size + 1) / 2))
parts = [torch.empty(3, dtype=torch.int64) for _ in range(size)]
dist.all_gather(parts, torch.arange(3) + 10 * rank)
ok = ok and all(torch.equal(p, torch.arange(3) + 10 * r) for r, p in enumerate(parts))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
model(torch.randn(5, 4)).sum().backward()
grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
gathered = [torch.empty_like(grads) for _ in range(size)]
dist.all_gather(gathered, grads)
ok = ok and all(torch.equal(gathered[0], g) for g in gathered)
# A file per rank: the launchers' merged stdout can interleave the ranks' lines.
with open(os.path.join(sys.argv[1], "rank%d.json" % rank), "w") as f:
    json.dump({"rank": rank, "size": size, "ok": ok, "backend": dist.get_backend()}, f)
dist.destroy_process_group()
