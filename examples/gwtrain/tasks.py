"""What each task trains and how it is scored. A task gives the model, the optimizer and its
schedule, this rank's batch for a step, and an evaluation that every rank takes part in (each
scores a disjoint share of the held-out data; the counts are summed over ranks)."""
import math

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import data, models

# Per task: defaults for the command line (epochs or steps, per-rank batch, learning rate).
DEFAULTS = {
    "digits": {"epochs": 12, "batch": 16, "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0, "schedule": "constant"},
    "fashion": {"epochs": 2, "batch": 32, "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4, "schedule": "cosine"},
    "lm": {"steps": 400, "batch": 8, "lr": 2e-3, "weight_decay": 0.01, "schedule": "cosine"},
}


def _my_share(n, rank, size):
    """This rank's [lo, hi) of n held-out items: disjoint shares, summed over ranks later."""
    return rank * n // size, (rank + 1) * n // size


def _cosine(step, total, warmup):
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


class ImageTask:
    metric = "test_accuracy"

    def __init__(self, name, args, rank, size):
        self.name, self.args, self.rank, self.size = name, args, rank, size
        if name == "digits":
            Xtr, Xte, ytr, yte = data.digits(args.seed)
            self.model = models.digits_cnn()  # made after the caller seeds torch
        else:
            Xtr, Xte, ytr, yte = data.fashion()
            self.model = models.resnet()
        self.Xtr, self.Xte, self.ytr, self.yte = map(torch.from_numpy, (Xtr, Xte, ytr, yte))
        self.per_rank = len(Xtr) // size
        self.steps_per_epoch = self.per_rank // args.batch
        self.total_steps = args.steps or self.steps_per_epoch * args.epochs
        self.gen = torch.Generator().manual_seed(args.seed)
        self.mine = None
        self.about = "%s: %d training and %d test images" % (name, len(Xtr), len(Xte))

    def optimizer(self, params):
        a = self.args
        # With --hook-momentum the hook keeps the velocity (before compression) and the
        # optimizer must not apply momentum a second time.
        momentum = 0.0 if getattr(a, "hook_momentum", False) else a.momentum
        opt = torch.optim.SGD(params, lr=a.lr, momentum=momentum, weight_decay=a.weight_decay)
        if a.schedule == "constant":
            return opt, None
        warm = min(100, self.total_steps // 20)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _cosine(s, self.total_steps, warm))

    def batch(self, step):
        s = step % self.steps_per_epoch
        if s == 0:  # a new epoch: the same permutation on every rank, each takes its share
            perm = torch.randperm(len(self.Xtr), generator=self.gen)
            self.mine = perm[self.rank * self.per_rank:(self.rank + 1) * self.per_rank]
        idx = self.mine[s * self.args.batch:(s + 1) * self.args.batch]
        return self.Xtr[idx], self.ytr[idx]

    def loss(self, out, target):
        return F.cross_entropy(out, target)

    def evaluate(self, model):
        """Accuracy and mean loss over the whole test set."""
        lo, hi = _my_share(len(self.Xte), self.rank, self.size)
        sums = torch.zeros(3, dtype=torch.float64)
        with torch.no_grad():
            for i in range(lo, hi, 500):
                j = min(hi, i + 500)
                out = model(self.Xte[i:j])
                sums[0] += float((out.argmax(1) == self.yte[i:j]).sum())
                sums[1] += float(F.cross_entropy(out, self.yte[i:j], reduction="sum"))
                sums[2] += j - i
        dist.all_reduce(sums)
        return {"test_accuracy": float(sums[0] / sums[2]), "test_loss": float(sums[1] / sums[2])}


class TextTask:
    metric = "val_loss"

    def __init__(self, name, args, rank, size):
        self.args, self.rank, self.size = args, rank, size
        self.train, self.val, self.about = data.text()
        self.context = args.context
        self.model = models.ByteTransformer(d=args.width, layers=args.layers, heads=4, context=args.context)
        self.total_steps = args.steps or 300
        self.steps_per_epoch = self.total_steps  # no epochs: windows are drawn at random
        # The validation windows: disjoint, evenly spread over the validation text.
        w = self.context + 1
        count = min(args.val_windows, len(self.val) // w)
        starts = np.linspace(0, len(self.val) - w, count).astype(np.int64)
        self.val_windows = torch.from_numpy(np.stack([self.val[s:s + w] for s in starts]).astype(np.int64))

    def optimizer(self, params):
        a = self.args
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=a.weight_decay)
        warm = min(30, self.total_steps // 10)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _cosine(s, self.total_steps, warm))

    def batch(self, step):
        # Every (seed, step, rank) draws its own windows, the same in every configuration.
        g = np.random.default_rng([self.args.seed, step, self.rank])
        starts = g.integers(0, len(self.train) - self.context - 1, size=self.args.batch)
        w = torch.from_numpy(np.stack([self.train[s:s + self.context + 1] for s in starts]).astype(np.int64))
        return w[:, :-1], w[:, 1:]

    def loss(self, out, target):
        return F.cross_entropy(out.reshape(-1, 256), target.reshape(-1))

    def evaluate(self, model):
        """Mean validation loss per byte (nats) and bits per byte."""
        lo, hi = _my_share(len(self.val_windows), self.rank, self.size)
        sums = torch.zeros(2, dtype=torch.float64)
        with torch.no_grad():
            for i in range(lo, hi, 32):
                w = self.val_windows[i:min(hi, i + 32)]
                out = model(w[:, :-1])
                sums[0] += float(F.cross_entropy(out.reshape(-1, 256), w[:, 1:].reshape(-1), reduction="sum"))
                sums[1] += w[:, 1:].numel()
        dist.all_reduce(sums)
        loss = float(sums[0] / sums[1])
        return {"val_loss": loss, "val_bits_per_byte": loss / math.log(2), "val_perplexity": math.exp(loss)}


def make(name, args, rank, size):
    return TextTask(name, args, rank, size) if name == "lm" else ImageTask(name, args, rank, size)
