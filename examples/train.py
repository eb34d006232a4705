#!/usr/bin/python3
"""Data-parallel training under DDP with gradients averaged by DDP itself over gloo, by torch's
own compression hooks, or by gradwire (gradwire.torch.comm_hook); every dataset is found on a
Debian machine without downloads (examples/gwtrain/data.py):

  --task fashion  a ResNet with batch norm (692,674 parameters) on Fashion-MNIST
  --task lm       a byte-level transformer on the Python standard library's sources
  --task digits   a small CNN on scikit-learn's 8x8 digits

One process per rank. Launch 4 ranks on this machine:

    examples/train.py --task fashion --launch 4 --codec topk:ratio=0.01 --ef

or start the ranks yourself with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (what
torchrun sets), plus the same GW_TOKEN on every rank (`export GW_TOKEN=$(openssl rand -hex 16)`)
unless the launcher sets a job id (torchrun's TORCHELASTIC_RUN_ID).

--codec: gloo (plain DDP), torch_fp16 (torch's fp16_compress_hook), powersgd:rank=R (torch's
powerSGD_hook), or a gradwire codec spec ("none" is gradwire's dense ring). Rank 0 prints one
JSON line with the result (or writes it to --json): the final evaluation, the curve of
evaluations against training time, and what was sent.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

from gwtrain import launch, tasks  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(tasks.DEFAULTS), default="fashion")
    p.add_argument("--codec", default="none", help="gloo, torch_fp16, powersgd:rank=R or a gradwire codec spec")
    p.add_argument("--ef", dest="ef", action="store_true", help="error feedback per bucket (default)")
    p.add_argument("--no-ef", dest="ef", action="store_false")
    p.set_defaults(ef=True)
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="dense steps before compression starts (gradwire and PowerSGD)")
    p.add_argument("--warmup-epochs", type=int, default=0, help="dense epochs, added to --warmup-steps")
    p.add_argument("--hook-momentum", action="store_true",
                   help="gradwire: the hook keeps the SGD momentum before compression (DGC's momentum "
                        "correction); the optimizer then runs without momentum")
    p.add_argument("--min-size", type=int, default=1024, help="gradwire sends buckets with fewer elements dense")
    p.add_argument("--bucket-kb", type=int, default=1024, help="DDP bucket size (first bucket too), KiB")
    p.add_argument("--epochs", type=int, help="image tasks: passes over the training set")
    p.add_argument("--steps", type=int, help="optimizer steps (overrides --epochs)")
    p.add_argument("--batch", type=int, help="per-rank batch size")
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--schedule", choices=["constant", "cosine"])
    p.add_argument("--context", type=int, default=64, help="lm: bytes of context")
    p.add_argument("--width", type=int, default=192, help="lm: model width")
    p.add_argument("--layers", type=int, default=4, help="lm: transformer blocks")
    p.add_argument("--val-windows", type=int, default=2048, help="lm: validation windows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algo", default="auto", help="gradwire algorithm for compressed buckets")
    p.add_argument("--tune", action="store_true",
                   help="let the library time its algorithm choice (GW_TUNE) and pick the dense ring "
                        "where compression does not pay; off by default, so every row compresses")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at the end only)")
    p.add_argument("--max-train-s", type=float, default=0,
                   help="stop at the first evaluation past this much training time")
    p.add_argument("--progress", action="store_true", help="rank 0 prints each evaluation")
    p.add_argument("--loss-trace", action="store_true", help="rank 0's loss at every step goes into the result")
    p.add_argument("--launch", type=int, default=0, metavar="N", help="spawn N local ranks of this script")
    p.add_argument("--timeout", type=float, default=1800, help="with --launch: seconds before the ranks are killed")
    p.add_argument("--json", help="rank 0 writes its result here")
    args = p.parse_args(argv)
    if args.hook_momentum and (args.task == "lm" or not args.codec or args.codec in ("gloo", "torch_fp16")
                               or args.codec.startswith(("powersgd", "ref_"))):
        p.error("--hook-momentum needs a gradwire codec and an SGD task (fashion, digits)")
    for k, v in tasks.DEFAULTS[args.task].items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    for k in ("epochs", "momentum"):
        if getattr(args, k, None) is None:
            setattr(args, k, 0)
    if args.batch < 1 or (args.steps is not None and args.steps < 1):
        p.error("--batch and --steps must be positive")
    return args


def main():
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.launch:
        launch.run_ranks(os.path.abspath(__file__), launch.without_option(argv, "--launch"), args.launch,
                         args.timeout, "train.py")
    else:
        from gwtrain import rank
        rank.train(args)


if __name__ == "__main__":
    main()
