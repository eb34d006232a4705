"""One rank's training loop: DDP over a gloo process group, gradients averaged as --codec
says (averaging.py), evaluated every --eval-every steps and at the end. The clock counts
training only: evaluations are timed apart, between barriers, and left out."""
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import tasks
from .averaging import Averaging, uses_ef


def _sync_buffers(model, size):
    """Batch-norm statistics are kept per rank (broadcast_buffers=False); evaluation uses
    their mean over ranks."""
    for b in model.buffers():
        if b.dtype.is_floating_point:
            dist.all_reduce(b)
            b.div_(size)


def _in_sync(model, size):
    """Every rank must hold the same parameters: compares a float64 checksum."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    sums = [torch.zeros(1, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(sums, flat.double().sum().reshape(1))
    return all(torch.equal(sums[0], x) for x in sums)


def train(args):
    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=size)
    torch.manual_seed(args.seed)
    task = tasks.make(args.task, args, rank, size)
    model = task.model
    nparams = sum(p.numel() for p in model.parameters())
    # DDP's buckets: the first one is sized by this module-level knob, the rest by bucket_cap_mb.
    dist._DEFAULT_FIRST_BUCKET_BYTES = args.bucket_kb * 1024
    ddp = DDP(model, bucket_cap_mb=args.bucket_kb / 1024, broadcast_buffers=False)
    warmup_steps = args.warmup_steps + args.warmup_epochs * task.steps_per_epoch
    avg = Averaging(args, ddp, model, warmup_steps)
    opt, sched = task.optimizer(ddp.parameters())

    curve, losses, step_times = [], [], []
    train_s = 0.0
    loss_sum = torch.zeros(2, dtype=torch.float64)

    def evaluate(step):
        nonlocal loss_sum
        ddp.eval()
        _sync_buffers(model, size)
        m = task.evaluate(model)
        dist.all_reduce(loss_sum)
        clock = torch.tensor([train_s], dtype=torch.float64)
        dist.all_reduce(clock, op=dist.ReduceOp.MAX)
        point = {"step": step, "epoch": step / task.steps_per_epoch, "train_s": float(clock),
                 "train_loss": float(loss_sum[0] / loss_sum[1]) if loss_sum[1] else None}
        point.update(m)
        curve.append(point)
        loss_sum = torch.zeros(2, dtype=torch.float64)
        ddp.train()
        if rank == 0 and args.progress:
            print(json.dumps(point), flush=True)
        return point

    dist.barrier()
    ddp.train()
    for step in range(task.total_steps):
        x, y = task.batch(step)
        t0 = time.perf_counter()
        loss = task.loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        dt = time.perf_counter() - t0
        train_s += dt
        if step >= min(50, task.total_steps // 10):  # the first steps warm caches and connections up
            step_times.append(dt)
        lv = float(loss.detach())
        if not np.isfinite(lv):
            losses.append(lv)
            break  # diverged: the result says so
        losses.append(lv)
        loss_sum += torch.tensor([lv, 1.0], dtype=torch.float64)
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < task.total_steps:
            if evaluate(step + 1)["train_s"] >= args.max_train_s > 0:
                break
    final = evaluate(len(losses))

    t = torch.tensor([float(np.median(step_times)) if step_times else 0.0, float(np.mean(step_times or [0]))],
                     dtype=torch.float64)
    dist.all_reduce(t)
    t /= size
    # The mean training loss over the last tenth of the steps, averaged over ranks.
    tail = losses[-max(1, len(losses) // 10):]
    tl = torch.tensor([float(np.mean(tail))], dtype=torch.float64)
    dist.all_reduce(tl)
    result = {
        "task": args.task, "codec": args.codec, "ef": uses_ef(args), "hook_momentum": bool(args.hook_momentum), "warmup_steps": warmup_steps,
        "ranks": size, "seed": args.seed, "steps": len(losses), "planned_steps": task.total_steps,
        "global_batch": args.batch * size, "params": nparams, "data": task.about, "metric": task.metric,
        "final": final, "curve": curve, "final_train_loss": float(tl) / size,
        "diverged": not np.isfinite(losses[-1]) if losses else False,
        "step_ms_median": 1e3 * float(t[0]), "step_ms_mean": 1e3 * float(t[1]),
        "train_s": final["train_s"], "in_sync": _in_sync(model, size), "torch": torch.__version__,
    }
    if rank == 0 and args.loss_trace:
        result["loss_trace"] = losses
    result.update(avg.stats())
    avg.close()
    if rank == 0:
        line = json.dumps(result)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
        else:
            print(line, flush=True)
    dist.destroy_process_group()
