#!/usr/bin/python3
"""Why sign + error feedback diverged on the digits CNN: the same training as
`examples/train.py --task digits` (4 ranks, global batch 64, lr 0.05, momentum 0.9, 12 epochs,
DDP's two buckets: the linear layers and the convolutions), with the four ranks simulated in
one process in plain PyTorch, no gradwire, so that one change at a time can be tried:

  dense          exact average: the reference
  ef             EF-signSGD as published: each rank sends C(g + e), keeps e = g + e - C(.),
                 the update is the mean of the C(.); then SGD with momentum
  ef-two-stage   what gradwire's scatter-reduce computes: each rank's chunk goes to its owner
                 compressed (the owner's own part exact), the owner compresses the mean again
                 with an owner-side residual
  no-ef          the mean of C(g)
  ef-block32     ef with the scale taken per 32 elements instead of 512
  ef-per-tensor  ef with blocks that never straddle two parameters
  ef-lr0.02      ef at lr 0.02
  ef-no-momentum ef with momentum 0 and lr 0.5 (the same step size as lr 0.05 / (1 - 0.9))
  ef-warmup      ef after 2 dense epochs
  ef-hook-momentum  the momentum moved before compression (gradwire.torch.HookState(momentum=)):
                 each rank sends C(u + e) with u = 0.9 u + g, SGD without momentum

C(x) is gradwire's sign: sign(x) times the block's mean magnitude. Prints one line per
variant: final test accuracy and training loss, and the residual's norm (rank 0, the
convolutions' bucket) after the first and the last epoch.

    examples/sign_ef_study.py [VARIANT ...]      (all by default; about a minute each)
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gwtrain import data, models  # noqa: E402

VARIANTS = ["dense", "ef", "ef-two-stage", "no-ef", "ef-block32", "ef-per-tensor", "ef-lr0.02",
            "ef-no-momentum", "ef-warmup", "ef-hook-momentum"]
RANKS, BATCH, EPOCHS = 4, 16, 12


def sign(x, block, bounds=None):
    """gradwire's sign codec, decoded: per block, sign(x) * mean |x| (a zero counts as +)."""
    out = torch.empty_like(x)
    for lo0, hi0 in bounds or [(0, x.numel())]:
        for lo in range(lo0, hi0, block):
            seg = x[lo:min(lo + block, hi0)]
            out[lo:lo + seg.numel()] = torch.where(seg < 0, -1.0, 1.0) * seg.abs().mean()
    return out


def run(variant):
    lr, momentum, block = 0.05, 0.9, 512
    if variant == "ef-lr0.02":
        lr = 0.02
    if variant == "ef-no-momentum":
        lr, momentum = 0.5, 0.0
    if variant == "ef-block32":
        block = 32
    hook_momentum = variant == "ef-hook-momentum"
    Xtr, Xte, ytr, yte = map(torch.from_numpy, data.digits(0))
    torch.manual_seed(0)
    model = models.digits_cnn()
    rev = list(model.parameters())[::-1]  # DDP fills buckets in reverse order
    buckets = [rev[:4], rev[4:]]          # the linear layers; the convolutions
    sizes = [sum(p.numel() for p in b) for b in buckets]
    bounds = []
    for b in buckets:
        offs = np.cumsum([0] + [p.numel() for p in b])
        bounds.append(list(zip(offs[:-1], offs[1:])) if variant == "ef-per-tensor" else None)
    residual = [[torch.zeros(n) for n in sizes] for _ in range(RANKS)]
    owner_residual = [torch.zeros(n) for n in sizes]
    velocity = [[torch.zeros(n) for n in sizes] for _ in range(RANKS)]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0 if hook_momentum else momentum)
    n = len(Xtr)
    per = n // RANKS
    steps = per // BATCH
    gen = torch.Generator().manual_seed(0)
    lossf = torch.nn.CrossEntropyLoss()
    norms = []
    for epoch in range(EPOCHS):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for s in range(steps):
            grads = []
            for r in range(RANKS):
                idx = perm[r * per:(r + 1) * per][s * BATCH:(s + 1) * BATCH]
                model.zero_grad()
                loss = lossf(model(Xtr[idx]), ytr[idx])
                loss.backward()
                total += float(loss)
                grads.append([torch.cat([p.grad.reshape(-1) for p in b]) for b in buckets])
            for bi, b in enumerate(buckets):
                gs = [grads[r][bi] for r in range(RANKS)]
                C = lambda x: sign(x, block, bounds[bi])  # noqa: E731
                if variant == "dense" or (variant == "ef-warmup" and epoch < 2):
                    avg = sum(gs) / RANKS
                elif variant == "no-ef":
                    avg = sum(C(g) for g in gs) / RANKS
                elif variant == "ef-two-stage":
                    avg = torch.empty(sizes[bi])
                    ps = [gs[r] + residual[r][bi] for r in range(RANKS)]
                    edges = [sizes[bi] * o // RANKS for o in range(RANKS + 1)]
                    for o in range(RANKS):
                        lo, hi = edges[o], edges[o + 1]
                        total_chunk = torch.zeros(hi - lo)
                        for r in range(RANKS):
                            if r == o:
                                total_chunk += ps[r][lo:hi]
                                residual[r][bi][lo:hi] = 0
                            else:
                                c = sign(ps[r][lo:hi], block)
                                total_chunk += c
                                residual[r][bi][lo:hi] = ps[r][lo:hi] - c
                        x = total_chunk / RANKS + owner_residual[bi][lo:hi]
                        out = sign(x, block)
                        owner_residual[bi][lo:hi] = x - out
                        avg[lo:hi] = out
                else:
                    sent = []
                    for r in range(RANKS):
                        g = gs[r]
                        if hook_momentum:
                            velocity[r][bi].mul_(momentum).add_(g)
                            g = velocity[r][bi]
                        p = g + residual[r][bi]
                        c = C(p)
                        residual[r][bi] = p - c
                        sent.append(c)
                    avg = sum(sent) / RANKS
                off = 0
                for p in b:
                    p.grad = avg[off:off + p.numel()].view_as(p).clone()
                    off += p.numel()
            opt.step()
        norms.append(float(residual[0][1].norm()))
        train_loss = total / (steps * RANKS)
        if not np.isfinite(train_loss):
            break
    with torch.no_grad():
        acc = float((model(Xte).argmax(1) == yte).float().mean())
    return acc, train_loss, norms


def main():
    torch.set_num_threads(1)
    variants = sys.argv[1:] or VARIANTS
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit("unknown variant(s) %s; choose from %s" % (unknown, " ".join(VARIANTS)))
    print("| variant | test accuracy | final train loss | residual norm, epoch 1 | residual norm, last epoch |")
    print("|---|---:|---:|---:|---:|")
    for v in variants:
        acc, loss, norms = run(v)
        print("| %s | %.2f %% | %.4f | %.2f | %.2f |" % (v, 100 * acc, loss, norms[0], norms[-1]), flush=True)


if __name__ == "__main__":
    main()
