#!/usr/bin/python3
"""Data-parallel training of a small CNN on scikit-learn's digits (8x8 images, 10 classes;
the data ship with Debian's python3-sklearn, nothing is downloaded), with DDP's gradients
all-reduced either by DDP itself over gloo or by gradwire through gradwire.torch.comm_hook.

One process per rank. Launch 4 ranks on this machine:

    examples/train_digits.py --launch 4 --codec topk:ratio=0.01 --ef

or start the ranks yourself with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (what
torchrun sets; Debian's torchrun 1.13 itself fails under Python 3.11 before it starts a worker),
plus the same GW_TOKEN on every rank (`export GW_TOKEN=$(openssl rand -hex 16)`) unless the
launcher sets a job id (torchrun's TORCHELASTIC_RUN_ID).

--codec gloo trains with DDP's own all-reduce (no hook): the baseline. Anything else is a
gradwire codec spec ("none" is gradwire's dense ring). Rank 0 prints one JSON line with the
result (and writes it to --json).
"""
import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--codec", default="none", help="'gloo' (plain DDP) or a gradwire codec spec")
    p.add_argument("--ef", dest="ef", action="store_true", help="error feedback per bucket (default)")
    p.add_argument("--no-ef", dest="ef", action="store_false")
    p.set_defaults(ef=True)
    p.add_argument("--warmup-steps", type=int, default=0, help="dense steps before compression starts")
    p.add_argument("--warmup-epochs", type=int, default=0, help="dense epochs before compression starts "
                   "(added to --warmup-steps)")
    p.add_argument("--min-size", type=int, default=32768, help="buckets with fewer elements go dense "
                   "(32768: the convolutions' bucket goes dense, see docs/training.md)")
    p.add_argument("--bucket-kb", type=int, default=256, help="DDP bucket size (first bucket too), KiB")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch", type=int, default=16, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algo", default="auto", help="gradwire algorithm for compressed buckets")
    p.add_argument("--tune", action="store_true",
                   help="let a library that times its algorithm choice (GW_TUNE) pick the dense ring "
                        "where compression does not pay; off by default, so every row compresses")
    p.add_argument("--launch", type=int, default=0, metavar="N", help="spawn N local ranks of this script")
    p.add_argument("--timeout", type=float, default=600, help="with --launch: seconds before the ranks are killed")
    p.add_argument("--json", help="rank 0 writes its result here")
    p.add_argument("--data", help="the split as an .npz (--launch writes one, so ranks skip sklearn)")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- launcher

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def launch(args, argv):
    """Runs args.launch ranks of this script on this machine; returns rank 0's result."""
    n = args.launch
    child_argv = []
    skip = False
    for a in argv:  # the same arguments, less --launch N
        if skip:
            skip = False
            continue
        if a == "--launch":
            skip = True
            continue
        if a.startswith("--launch="):
            continue
        child_argv.append(a)
    result_path = args.json or os.path.join("/tmp", "gw-digits-%d.json" % os.getpid())
    if "--json" not in " ".join(child_argv):
        child_argv += ["--json", result_path]
    if not args.data:  # split once here; the ranks read it without importing sklearn
        import numpy as np
        data_path = os.path.join("/tmp", "gw-digits-%d.npz" % os.getpid())
        Xtr, Xte, ytr, yte = load_data(args.seed)
        np.savez(data_path, Xtr=Xtr, Xte=Xte, ytr=ytr, yte=yte)
        child_argv += ["--data", data_path]
    port = free_port()
    token = secrets.token_hex(16)  # gradwire's rendezvous lets in only the ranks that know it
    procs = []
    for r in range(n):
        env = dict(os.environ)
        env.update({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(n),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GW_TOKEN": token,
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        env.setdefault("UCX_TLS", "tcp,self")
        env.setdefault("GW_DEBUG", "WARN")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + child_argv, env=env,
                                      start_new_session=True))
    deadline = time.monotonic() + args.timeout
    failed = False
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print("train_digits: ranks ran past --timeout %gs; killing them" % args.timeout, file=sys.stderr)
                failed = True
                break
            if p.returncode != 0:
                failed = True
                break
    finally:
        for p in procs:
            if p.poll() is None:
                # One rank failed: the others wait on it until gradwire's/gloo's timeout.
                # Give them a moment to exit on their own, then kill.
                try:
                    p.wait(timeout=5 if not failed else 1)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    if not args.data:
        os.unlink(data_path)
    if failed or any(p.returncode != 0 for p in procs):
        raise SystemExit("train_digits: a rank failed (exit codes %s)" % [p.returncode for p in procs])
    with open(result_path) as f:
        return json.load(f)


# ----------------------------------------------------------------------------- one rank

def load_data(seed):
    """Digits split 80/20 (stratified, fixed seed), pixels scaled to [0, 1]."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    X = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    return train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)


def make_model():
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 64 x 4 x 4
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10))


def train(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=size)

    if args.data:
        d = np.load(args.data)
        Xtr, Xte, ytr, yte = d["Xtr"], d["Xte"], d["ytr"], d["yte"]
    else:
        Xtr, Xte, ytr, yte = load_data(args.seed)
    Xtr, Xte, ytr, yte = map(torch.from_numpy, (Xtr, Xte, ytr, yte))
    torch.manual_seed(args.seed)
    model = make_model()
    nparams = sum(p.numel() for p in model.parameters())
    # DDP's buckets: the first one is sized by this module-level knob, the rest by bucket_cap_mb.
    dist._DEFAULT_FIRST_BUCKET_BYTES = args.bucket_kb * 1024
    ddp = DDP(model, bucket_cap_mb=args.bucket_kb / 1024)

    n = len(Xtr)
    per_rank = n // size
    steps_per_epoch = per_rank // args.batch
    warmup_steps = args.warmup_steps + args.warmup_epochs * steps_per_epoch

    state = comm = None
    if args.codec != "gloo":
        import gradwire.torch as gwt
        if not args.tune:
            os.environ.setdefault("GW_TUNE", "0")
        # dense_threshold_bytes=0: the hook's min_size alone decides which buckets go dense.
        comm = gwt.init_communicator(dense_threshold_bytes=0)
        state = gwt.HookState(comm, codec=args.codec, min_size=args.min_size, warmup_steps=warmup_steps,
                              ef=args.ef, algo=args.algo, model=model)
        ddp.register_comm_hook(state, gwt.comm_hook)

    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    step_times = []
    epoch_losses = []
    g = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=g)  # the same on every rank
        mine = perm[rank * per_rank:(rank + 1) * per_rank]
        total = torch.zeros(2)
        ddp.train()
        for s in range(steps_per_epoch):
            idx = mine[s * args.batch:(s + 1) * args.batch]
            t0 = time.perf_counter()
            out = ddp(Xtr[idx])
            loss = loss_fn(out, ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if epoch > 0:  # the first epoch warms caches and connections up
                step_times.append(time.perf_counter() - t0)
            total += torch.tensor([float(loss) * len(idx), len(idx)])
        dist.all_reduce(total)
        epoch_losses.append(float(total[0] / total[1]))

    ddp.eval()
    with torch.no_grad():
        out = model(Xte)
        test_loss = float(loss_fn(out, yte))
        acc = float((out.argmax(1) == yte).float().mean())
    # Every rank must hold the same model: check it, cheaply.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    sums = [torch.zeros(1, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(sums, flat.double().sum().reshape(1))
    in_sync = all(torch.equal(sums[0], x) for x in sums)
    t = torch.tensor([float(np.median(step_times)) if step_times else 0.0, float(np.mean(step_times or [0]))],
                     dtype=torch.float64)
    dist.all_reduce(t)
    t /= size

    result = {
        "codec": args.codec, "ef": bool(args.ef and args.codec not in ("gloo", "none")),
        "warmup_steps": warmup_steps, "ranks": size, "epochs": args.epochs, "seed": args.seed,
        "steps": steps_per_epoch * args.epochs, "global_batch": args.batch * size, "params": nparams,
        "test_accuracy": acc, "test_loss": test_loss, "final_train_loss": epoch_losses[-1],
        "train_losses": epoch_losses, "step_ms_median": 1e3 * float(t[0]), "step_ms_mean": 1e3 * float(t[1]),
        "in_sync": bool(in_sync),
    }
    if state is not None:
        st = state.stats
        result.update({"dense_buckets": st["dense"], "compressed_buckets": st["compressed"],
                       "algos": sorted(set(st["algos"].values())),
                       "wire_fraction": st["wire_bytes"] / st["dense_bytes"] if st["dense_bytes"] else 1.0})
        state.close()
    if rank == 0:
        line = json.dumps(result)
        print(line, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    if comm is not None:
        comm.close()
    dist.destroy_process_group()


def main():
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.launch:
        launch(args, argv)  # rank 0 has printed the result
    else:
        train(args)


if __name__ == "__main__":
    main()
