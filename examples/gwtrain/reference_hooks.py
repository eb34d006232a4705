"""Plain-PyTorch references of two gradwire codecs with error feedback, as DDP comm hooks that
all-reduce the decoded message densely over the process group: no gradwire code at all. They
answer "is an accuracy gap the algorithm's or gradwire's?": each rank compresses its own
gradient plus residual, and the average of the compressed vectors is the update, which is what
gradwire's sparse all-gather computes for top-k (the scatter-reduce that gradwire runs for sign
compresses the reduced chunk once more, with an owner-side residual).

  ref_topk:ratio=R   exact top-k by magnitude over the bucket
  ref_sign           sign, scaled per block of 512 elements by the block's mean magnitude
"""
import torch
import torch.distributed as dist


def _topk(p, ratio):
    k = max(1, int(p.numel() * ratio))
    idx = p.abs().topk(k, sorted=False).indices
    c = torch.zeros_like(p)
    c[idx] = p[idx]
    return c


def _sign(p, block=512):
    n = p.numel()
    pad = (-n) % block
    x = torch.nn.functional.pad(p, (0, pad)).view(-1, block)
    counts = torch.full((x.shape[0], 1), float(block))
    if pad:
        counts[-1, 0] = block - pad
    scale = x.abs().sum(dim=1, keepdim=True) / counts
    c = torch.where(x < 0, -scale, scale).reshape(-1)[:n]
    return c


class ReferenceEF:
    def __init__(self, codec):
        name, _, opts = codec.partition(":")
        self.ratio = float(opts.partition("=")[2]) if name == "ref_topk" else None
        self.compress = (lambda p: _topk(p, self.ratio)) if name == "ref_topk" else _sign
        self.residual = {}
        self.wire = self.dense = 0

    def hook(self, state, bucket):
        g = bucket.buffer()
        key = bucket.index()
        e = self.residual.get(key)
        if e is None or e.numel() != g.numel():
            e = torch.zeros_like(g)
        p = g + e
        c = self.compress(p)
        self.residual[key] = p - c
        self.dense += g.numel() * 4
        self.wire += (g.numel() // 8 + 4 * ((g.numel() + 511) // 512)) if self.ratio is None else \
            8 * max(1, int(g.numel() * self.ratio))
        c.div_(dist.get_world_size())
        return dist.all_reduce(c, async_op=True).get_future().then(lambda f: f.value()[0])
