"""How DDP averages gradients in a run, named by --codec:

- gloo: DDP's own all-reduce (no hook): the baseline.
- torch_fp16: torch's fp16_compress_hook.
- powersgd:rank=R: torch's powerSGD_hook, rank R, with error feedback and warm start; its
  first --warmup-steps steps are plain all-reduces (start_powerSGD_iter).
- ref_topk:ratio=R, ref_sign: plain-PyTorch references of those codecs with error feedback
  (reference_hooks.py), to tell an accuracy gap of the algorithm from one of gradwire.
- anything else: a gradwire codec spec ("none" is gradwire's dense ring), through
  gradwire.torch.comm_hook, with one error-feedback state per bucket when --ef; with --hook-momentum the SGD
  momentum moves into the hook (HookState(momentum=...), DGC's momentum correction) and the
  optimizer runs without it.

Which buckets gradwire compresses is the hook's rule: a bucket goes dense when it holds fewer
than --min-size elements, or when every parameter in it is one-dimensional (biases, norms);
the communicator is made with dense_threshold_bytes=0 and GW_TUNE=0 so that nothing else
sends a bucket dense.
"""
import os

TORCH_PEERS = ("gloo", "torch_fp16")


def is_gradwire(codec):
    return codec not in TORCH_PEERS and not codec.startswith(("powersgd", "ref_"))


def uses_ef(args):
    return bool(args.codec.startswith("ref_") or (args.ef and is_gradwire(args.codec) and args.codec != "none"))


def _powersgd_rank(codec):
    _, _, opts = codec.partition(":")
    rank = 1
    for kv in filter(None, opts.split(",")):
        k, _, v = kv.partition("=")
        if k != "rank":
            raise SystemExit("powersgd takes rank=R, not %r" % kv)
        rank = int(v)
    return rank


class Averaging:
    """Installs the chosen averaging on a DDP module; .stats() and .close() after training."""

    def __init__(self, args, ddp, model, warmup_steps):
        self.codec = args.codec
        self.state = self.comm = self.ref = None
        if args.codec == "gloo":
            return
        if args.codec.startswith("ref_"):
            from .reference_hooks import ReferenceEF
            self.ref = ReferenceEF(args.codec)
            ddp.register_comm_hook(None, self.ref.hook)
            return
        if args.codec == "torch_fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
            return
        if args.codec.startswith("powersgd"):
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
            self.state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=_powersgd_rank(args.codec),
                                            start_powerSGD_iter=max(2, warmup_steps), use_error_feedback=True,
                                            warm_start=True, random_seed=args.seed)
            ddp.register_comm_hook(self.state, psgd.powerSGD_hook)
            return
        import gradwire.torch as gwt
        if not args.tune:
            os.environ.setdefault("GW_TUNE", "0")
        # dense_threshold_bytes=0: the hook's min_size alone decides which buckets go dense.
        self.comm = gwt.init_communicator(dense_threshold_bytes=0)
        self.state = gwt.HookState(self.comm, codec=args.codec, min_size=args.min_size, warmup_steps=warmup_steps,
                                   ef=args.ef, algo=args.algo, model=model,
                                   momentum=args.momentum if args.hook_momentum else 0.0)
        ddp.register_comm_hook(self.state, gwt.comm_hook)

    def stats(self):
        if self.ref is not None:
            return {"wire_fraction": self.ref.wire / self.ref.dense if self.ref.dense else 1.0}
        if self.comm is None:
            return {}
        st = self.state.stats
        return {"dense_buckets": st["dense"], "compressed_buckets": st["compressed"],
                "algos": sorted(set(st["algos"].values())),
                "wire_fraction": st["wire_bytes"] / st["dense_bytes"] if st["dense_bytes"] else 1.0}

    def close(self):
        if self.comm is not None:
            self.state.close()
            self.comm.close()
