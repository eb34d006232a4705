#!/usr/bin/env python3
"""Sharded training with FSDP2 (torch.distributed.fsdp.fully_shard): the byte-level transformer
of docs/training.md on the Python standard library's sources (examples/gwtrain: the same model,
data, AdamW and cosine schedule as `examples/train.py --task lm`), every transformer block and
the root sharded over the ranks, with the gradients reduce-scattered by

  --codec gloo       FSDP2's own reduce-scatter, on a gloo process group (everything on gloo)
  --codec default    FSDP2's own reduce-scatter, on the gradwire backend
  --codec none       gradwire's dense reduce-scatter (gradwire.torch.compress_fsdp(codec=None))
  --codec SPEC       gradwire's compressed reduce-scatter with that codec (qsgd:bits=8,
                     topk:ratio=0.01, bf16:rounding=stochastic, ...), error feedback per --ef;
                     embeddings, norms, biases and parameters under --min-size elements exact

and the parameters all-gathered (forward, and again in backward with --reshard-after-forward 1)
by FSDP2's own all-gather, or with --param-codec SPEC (gradwire codecs only) on gradwire's
compressed all-gather: qsgd:bits=8,rounding=nearest,bucket=256 (int8 weights) or bf16; norms,
biases and parameters under --min-size elements exact, embeddings quantized
(compress_fsdp(param_codec=...)). The optimizer's sharded weights stay exact either way.

One run (4 local ranks):

    examples/fsdp_train.py --launch 4 --codec qsgd:bits=8 --ef

Every row of the comparison, one run per row and seed, kept in --results (a run whose file
exists is not run again), then a markdown table:

    examples/fsdp_train.py --compare --seeds 0,1,2 --only "gloo|none|bf16|qsgd:bits=8"
    examples/fsdp_train.py --compare --seeds 0,1,2 --only "gradwire dense|weights"

Rank 0 prints one JSON line (or writes --json): validation loss (nats per byte) and bits per
byte, the final training loss, ms per step (median after the first tenth of the steps), and
the bytes per step: what the reduce-scatter and the parameters' all-gathers send (the codec's
encoded size, per rank; FSDP2's own: the dense buffer) and, on the gradwire backend, everything
the communicator sent (measured).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

from gwtrain import launch, tasks  # noqa: E402

# Blockwise int8 weights: per 256 values a min and a step, rounded to nearest (deterministic:
# the backward's re-gather gives the forward's weights), ~3.9x fewer bytes than float32.
INT8_WEIGHTS = "qsgd:bits=8,rounding=nearest,bucket=256"

ROWS = [  # name, arguments
    ("FSDP2 reduce-scatter (gloo)", ["--codec", "gloo"]),
    ("gradwire dense", ["--codec", "none"]),
    ("bf16, stochastic rounding", ["--codec", "bf16:rounding=stochastic", "--no-ef"]),
    ("qsgd 8-bit + EF", ["--codec", "qsgd:bits=8", "--ef"]),
    ("qsgd 4-bit + EF", ["--codec", "qsgd:bits=4", "--ef"]),
    ("topk 1% + EF", ["--codec", "topk:ratio=0.01", "--ef"]),
    # The parameters' all-gathers compressed too (they carry two thirds of a step's bytes).
    ("gradwire dense, int8 weights", ["--codec", "none", "--param-codec", INT8_WEIGHTS]),
    ("qsgd 8-bit + EF, int8 weights", ["--codec", "qsgd:bits=8", "--ef", "--param-codec", INT8_WEIGHTS]),
    ("qsgd 4-bit + EF, int8 weights", ["--codec", "qsgd:bits=4", "--ef", "--param-codec", INT8_WEIGHTS]),
    ("bf16 SR, bf16 weights", ["--codec", "bf16:rounding=stochastic", "--no-ef", "--param-codec", "bf16"]),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--codec", default="none", help="gloo, default, none or a gradwire codec spec")
    p.add_argument("--ef", dest="ef", action="store_true", help="error feedback (default)")
    p.add_argument("--no-ef", dest="ef", action="store_false")
    p.set_defaults(ef=True)
    p.add_argument("--param-codec", default="none",
                   help="the parameters' all-gather: none (FSDP2's own) or a gradwire weight codec "
                        "(qsgd:bits=8,rounding=nearest,bucket=256, bf16, fp16); gradwire --codec only")
    p.add_argument("--min-size", type=int, default=1024, help="parameters with fewer elements stay exact")
    p.add_argument("--reshard-after-forward", type=int, default=1, choices=(0, 1),
                   help="FSDP2's reshard_after_forward for the blocks and the root (1: all-gather again in "
                        "backward, FSDP2's default)")
    p.add_argument("--hsdp", type=int, default=0, metavar="R",
                   help="HSDP: R replicas (consecutive ranks form a shard group); FSDP2's own HSDP (a 2-D "
                        "mesh) for gloo and default, else FSDP over the shard group and --codec on the "
                        "replicas' all-reduce (gradwire's hook), --shard-codec on the reduce-scatter")
    p.add_argument("--shard-codec", default="none", help="with --hsdp: the reduce-scatter's codec (none: dense)")
    p.add_argument("--steps", type=int, default=tasks.DEFAULTS["lm"]["steps"])
    p.add_argument("--batch", type=int, default=tasks.DEFAULTS["lm"]["batch"], help="per-rank windows")
    p.add_argument("--lr", type=float, default=tasks.DEFAULTS["lm"]["lr"])
    p.add_argument("--weight-decay", type=float, default=tasks.DEFAULTS["lm"]["weight_decay"])
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--val-windows", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-eval", action="store_true", help="timing runs: no validation at the end")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--progress", action="store_true")
    p.add_argument("--loss-trace", action="store_true", help="rank 0's loss at every step goes into the result")
    p.add_argument("--launch", type=int, default=0, metavar="N", help="spawn N local ranks of this script")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", help="rank 0 writes its result here")
    # The comparison driver.
    p.add_argument("--compare", action="store_true", help="run every row (--only) for every seed (--seeds)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--only", help="rows whose name or codec contains one of these ('|' between them)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--results", default=os.path.join(ROOT, "build", "training", "fsdp"))
    p.add_argument("--cached", action="store_true", help="--compare: run nothing, tabulate what is kept")
    p.add_argument("--markdown", help="--compare: also write the table here")
    p.add_argument("--report", metavar="DIR", help="print the step-time table of scripts/bench-fsdp-emulated.sh's "
                   "runs in DIR (RATE-CONFIG.json)")
    args, rest = p.parse_known_args(argv)
    args.extra = rest  # --compare: passed to every run
    if args.param_codec != "none" and args.codec in ("gloo", "default") and not args.compare:
        p.error("--param-codec needs gradwire's reduce-scatter (--codec none or a codec), not --codec %s" % args.codec)
    if not args.compare and rest:
        p.error("unrecognized arguments: %s" % " ".join(rest))
    args.epochs, args.schedule = 0, "cosine"
    return args


def _wrap(model, reshard, mesh=None):
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=bool(reshard))
    fully_shard(model, mesh=mesh, reshard_after_forward=bool(reshard))
    return model


def _hsdp_mesh(replicas, size):
    """(replicate x shard) mesh: rank r is replica r // (size / replicas), shard r % that."""
    from torch.distributed.device_mesh import init_device_mesh
    if replicas < 1 or size % replicas:
        raise SystemExit("--hsdp %d does not divide %d ranks" % (replicas, size))
    return init_device_mesh("cpu", (replicas, size // replicas), mesh_dim_names=("replicate", "shard"))


def train(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gloo = args.codec == "gloo"
    gw = comm = None
    if gloo:
        dist.init_process_group("gloo", rank=rank, world_size=size)
    else:
        # Every reduce-scatter the codec asks for is compressed: no measured policy, no size under
        # which the library sends dense (the script's --min-size decides per parameter).
        os.environ.setdefault("GW_TUNE", "0")
        os.environ.setdefault("GW_DENSE_THRESHOLD", "0")
        import gradwire.torch as gwt
        dist.init_process_group("gradwire", rank=rank, world_size=size)
        comm = gwt.get_communicator()
    torch.manual_seed(args.seed)
    task = tasks.TextTask("lm", args, rank, size)
    model = task.model
    nparams = sum(p.numel() for p in model.parameters())
    spec = None if args.codec == "none" else args.codec
    param_spec = None if args.param_codec == "none" else args.param_codec
    if args.hsdp:
        mesh = _hsdp_mesh(args.hsdp, size)
        native = args.codec in ("gloo", "default")
        _wrap(model, args.reshard_after_forward, mesh if native else mesh["shard"])
        if not native:
            import gradwire.torch as gwt
            shard_spec = None if args.shard_codec == "none" else args.shard_codec
            gw = gwt.compress_fsdp(model, codec=shard_spec, replicate_codec=spec, ef=args.ef, min_size=args.min_size,
                                   replicate_group=mesh["replicate"].get_group(), param_codec=param_spec)
    else:
        _wrap(model, args.reshard_after_forward)
        if args.codec not in ("gloo", "default"):
            import gradwire.torch as gwt
            gw = gwt.compress_fsdp(model, codec=spec, ef=args.ef, min_size=args.min_size, param_codec=param_spec)
    opt, sched = task.optimizer(model.parameters())

    curve, losses, step_times, sent = [], [], [], []
    ag_train = {"wire_bytes": 0, "dense_bytes": 0, "compressed_elements": 0, "exact_elements": 0}
    train_s = 0.0

    def evaluate(step):
        model.eval()
        m = task.evaluate(model)
        clock = torch.tensor([train_s], dtype=torch.float64)
        dist.all_reduce(clock, op=dist.ReduceOp.MAX)
        point = {"step": step, "train_s": float(clock)}
        point.update(m)
        curve.append(point)
        model.train()
        if rank == 0 and args.progress:
            print(json.dumps(point), flush=True)
        return point

    dist.barrier()
    model.train()
    warm = min(50, args.steps // 10)
    for step in range(args.steps):
        x, y = task.batch(step)
        before = comm.stats()["bytes_sent"] if comm is not None else 0
        ag_before = gw.stats()["all_gather"] if gw is not None and gw.all_gathers else None
        t0 = time.perf_counter()
        loss = task.loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        dt = time.perf_counter() - t0
        if comm is not None:
            sent.append(comm.stats()["bytes_sent"] - before)
        if ag_before is not None:  # the training steps' all-gathers (validation's forwards gather too)
            ag_after = gw.stats()["all_gather"]
            for k in ag_train:
                ag_train[k] += ag_after[k] - ag_before[k]
        train_s += dt
        if step >= warm:
            step_times.append(dt)
        lv = float(loss.detach())
        losses.append(lv)
        if not np.isfinite(lv):
            break
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            evaluate(step + 1)
    final = evaluate(len(losses)) if not args.no_eval else {"step": len(losses)}

    t = torch.tensor([float(np.median(step_times)) if step_times else 0.0, float(np.mean(step_times or [0])),
                      float(np.mean(losses[-max(1, len(losses) // 10):])), float(np.mean(sent[warm:] or [0]))],
                     dtype=torch.float64)
    dist.all_reduce(t)
    t /= size
    # What the reduce-scatter sends per rank and step, by the codec's encoded size; gloo's and
    # FSDP2's own: a ring reduce-scatter of the padded buffer, (world - 1) of world blocks.
    # Bytes a rank sends a step. Reduce-scatter: gradwire's by the codec's encoded size (the
    # library sends exactly that); FSDP2's own: a ring over the padded buffer, (S - 1) blocks of
    # the S ranks of a shard group. HSDP's replica all-reduce: 2 (R - 1) / R of the block.
    # Parameters' all-gathers: every rank's block to the S - 1 others, once a step per FSDP
    # module, twice with reshard_after_forward (the root too: _wrap sets it explicitly); with
    # --param-codec by the codec's encoded size (its AllGather counts the calls it makes).
    shard = size // args.hsdp if args.hsdp else size
    padded = sum(-(-p.shape[0] // shard) * shard * (p.numel() // p.shape[0]) for p in model.parameters())
    block = padded // shard
    steps_run = max(1, len(losses))
    rs_dense = (shard - 1) * block * 4.0
    ar_dense = 2.0 * (args.hsdp - 1) / args.hsdp * block * 4.0 if args.hsdp else 0.0
    ag_dense = (shard - 1) * block * 4.0 * (2 if args.reshard_after_forward else 1)
    rs_bytes, ar_bytes, ag_bytes, compressed_fraction, param_fraction = rs_dense, ar_dense, ag_dense, 0.0, 0.0
    if gw is not None:
        st = gw.stats()
        rs, ar = st["reduce_scatter"], st["all_reduce"]
        rs_bytes, rs_dense = rs["wire_bytes"] / steps_run, rs["dense_bytes"] / steps_run
        if args.hsdp:
            ar_bytes, ar_dense = ar["wire_bytes"] / steps_run, ar["dense_bytes"] / steps_run
        if gw.all_gathers:
            ag = ag_train
            ag_bytes, ag_dense = ag["wire_bytes"] / steps_run, ag["dense_bytes"] / steps_run
            param_fraction = ag["compressed_elements"] / max(1, ag["compressed_elements"] + ag["exact_elements"])
        part = ar if args.hsdp else rs
        compressed_fraction = part["compressed_elements"] / max(1, part["compressed_elements"] + part["exact_elements"])
    result = {
        "codec": args.codec, "ef": bool(args.ef and args.codec not in ("gloo", "default", "none")),
        "param_codec": param_spec,
        "backend": "gloo" if gloo else "gradwire", "ranks": size, "seed": args.seed, "steps": len(losses),
        "planned_steps": args.steps, "global_batch": args.batch * size, "params": nparams, "data": task.about,
        "reshard_after_forward": bool(args.reshard_after_forward), "min_size": args.min_size,
        "hsdp": args.hsdp, "shard_codec": args.shard_codec if args.hsdp else None,
        "final": final, "curve": curve, "final_train_loss": float(t[2]),
        "diverged": not np.isfinite(losses[-1]) if losses else False,
        "step_ms_median": 1e3 * float(t[0]), "step_ms_mean": 1e3 * float(t[1]), "train_s": train_s,
        "rs_bytes_per_step": rs_bytes, "rs_dense_bytes_per_step": rs_dense,
        "replica_ar_bytes_per_step": ar_bytes, "replica_ar_dense_bytes_per_step": ar_dense,
        "compressed_fraction": compressed_fraction,
        "ag_bytes_per_step": ag_bytes, "ag_dense_bytes_per_step": ag_dense, "param_compressed_fraction": param_fraction,
        "total_bytes_per_step": rs_bytes + ar_bytes + ag_bytes,
        "total_dense_bytes_per_step": rs_dense + ar_dense + ag_dense,
        "comm_bytes_per_step": float(t[3]) if comm is not None and not args.hsdp else None,
        "torch": torch.__version__,
    }
    if rank == 0 and args.loss_trace:
        result["loss_trace"] = losses
    if gw is not None:
        result["exact_params"] = sorted(n for n, e in gw.exact.items() if e)
        if gw.all_gathers:
            result["param_exact_params"] = sorted(n for n, e in gw.param_exact.items() if e)
        gw.close()
    if rank == 0:
        line = json.dumps(result)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
        else:
            print(line, flush=True)
    dist.destroy_process_group()


# ---- the comparison ----

def _slug(name, seed):
    return "%s-seed%d.json" % ("".join(c if c.isalnum() else "_" for c in name), seed)


def _run(name, extra, seed, args):
    path = os.path.join(args.results, _slug(name, seed))
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    if args.cached:
        return None
    cmd = [sys.executable, os.path.abspath(__file__), "--launch", str(args.ranks), "--seed", str(seed),
           "--timeout", str(args.timeout), "--json", path + ".tmp"] + args.extra + extra
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r = None
    if os.path.exists(path + ".tmp"):
        with open(path + ".tmp") as f:
            try:
                r = json.load(f)
            except ValueError:
                r = None
    if p.returncode != 0:
        print(p.stdout[-4000:], file=sys.stderr)
        if r is None:
            return {"name": name, "seed": seed, "failed": True}
        # Rank 0 wrote the result after the last collective: a rank that died after that died
        # while exiting (seen with torch 2.15's gloo: "terminate called without an active
        # exception" in one rank's exit). The result stands; the table says so.
        r["exit_failure"] = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "exit code %d" % p.returncode
    r.update({"name": name, "wall_s": time.monotonic() - t0, "command": " ".join(cmd[1:])})
    with open(path, "w") as f:
        json.dump(r, f)
    os.unlink(path + ".tmp")
    return r


def _ag_bytes(r):
    """(all-gather bytes a rank sends a step, dense equivalent); results kept from before
    --param-codec: dense, the reduce-scatter's dense bytes per all-gather."""
    if "ag_bytes_per_step" in r:
        return r["ag_bytes_per_step"], r["ag_dense_bytes_per_step"]
    n = 2 if r.get("reshard_after_forward", True) else 1
    return n * r["rs_dense_bytes_per_step"], n * r["rs_dense_bytes_per_step"]


def _total_bytes(r):
    """(what a rank sends a step, by the codecs' encoded sizes, dense equivalent)."""
    ag, ag_dense = _ag_bytes(r)
    ar, ar_dense = r.get("replica_ar_bytes_per_step", 0.0), r.get("replica_ar_dense_bytes_per_step", 0.0)
    return r["rs_bytes_per_step"] + ar + ag, r["rs_dense_bytes_per_step"] + ar_dense + ag_dense


def _weights(r):
    return r.get("param_codec") or "-"


def table(rows):
    """vs gradwire dense: the mean over a row's seeds of its loss less dense's on the same seed."""
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    dense = {r["seed"]: r["final"]["val_loss"] for _, runs in rows for r in runs
             if r.get("codec") == "none" and not r.get("param_codec") and not r.get("failed")}
    out = ["| run | EF | weights on the wire | validation loss (nats/byte), mean | vs gradwire dense | spread | per seed "
           "| bits / byte | final train loss | ms / step | reduce-scatter bytes / step / rank | all-gather bytes / step "
           "/ rank | total bytes / step / rank | vs dense | all bytes sent / step / rank (measured) |",
           "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, runs in rows:
        ok = [r for r in runs if not r.get("failed")]
        if not ok:
            out.append("| %s | | | failed | | | | | | | | | | | |" % name)
            continue
        vals = [r["final"]["val_loss"] for r in ok]
        v = mean(vals)
        paired = [r["final"]["val_loss"] - dense[r["seed"]] for r in ok if r["seed"] in dense]
        comm = [r["comm_bytes_per_step"] for r in ok if r.get("comm_bytes_per_step")]
        note = " (a seed failed)" if len(ok) < len(runs) else ""
        if any(r.get("exit_failure") for r in ok):
            note += " (a rank crashed while exiting, after the result)"
        totals = [_total_bytes(r) for r in ok]
        out.append("| %s%s | %s | %s | %.4f | %s | %.4f | %s | %.4f | %.4f | %.1f | %s | %s | %s | %.3f | %s |" % (
            name, note, "yes" if ok[0]["ef"] else "no", _weights(ok[0]), v,
            "%+.4f" % mean(paired) if len(paired) == len(ok) else "-", max(vals) - min(vals),
            " / ".join("%.3f" % x for x in vals), mean([r["final"]["val_bits_per_byte"] for r in ok]),
            mean([r["final_train_loss"] for r in ok]), mean([r["step_ms_median"] for r in ok]),
            "%.2f MB" % (mean([r["rs_bytes_per_step"] for r in ok]) / 1e6),
            "%.2f MB" % (mean([_ag_bytes(r)[0] for r in ok]) / 1e6),
            "%.2f MB" % (mean([t for t, _ in totals]) / 1e6), mean([t / d for t, d in totals]),
            "%.2f MB" % (mean(comm) / 1e6) if comm else "-"))
    return "\n".join(out)


def compare(args):
    os.makedirs(args.results, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    rows = []
    for name, extra in ROWS:
        if args.only and not any(o in name or o in " ".join(extra) for o in args.only.split("|")):
            continue
        runs = []
        for seed in seeds:
            r = _run(name, extra, seed, args)
            if r is None:
                continue
            runs.append(r)
            if r.get("failed"):
                print("%-30s seed %d FAILED" % (name, seed), flush=True)
            else:
                print("%-30s seed %d  val loss %.4f  %.1f ms/step  (%.0f s)" % (
                    name, seed, r["final"]["val_loss"], r["step_ms_median"], r.get("wall_s", 0)), flush=True)
        if runs:
            rows.append((name, runs))
    text = table(rows)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 1 if any(r.get("failed") for _, runs in rows for r in runs) else 0


def _label(r):
    c, hsdp = r["codec"], r.get("hsdp")
    if c == "gloo":
        return "FSDP2 %s (gloo)" % ("HSDP, its own all-reduce" if hsdp else "reduce-scatter")
    if c == "default":
        return "FSDP2 %s (gradwire backend)" % ("HSDP, its own all-reduce" if hsdp else "reduce-scatter")
    what = "gradwire dense" if c == "none" else "gradwire %s%s" % (c, " + EF" if r["ef"] else "")
    if hsdp:
        what += " between replicas" + ("" if r.get("shard_codec") in (None, "none") else
                                       ", %s reduce-scatter" % r["shard_codec"])
    if r.get("param_codec"):
        what += ", %s weights" % r["param_codec"]
    return what


def report(directory):
    """Per rate: every configuration's median step, against gradwire dense and gloo, and bytes."""
    import glob
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        rate = os.path.basename(path).split("-", 1)[0]
        with open(path) as f:
            runs.setdefault(rate, []).append(json.load(f))
    order = ["gloo", "default", "none"]
    mb = lambda x: "%.2f MB" % (x / 1e6) if x else "-"  # noqa: E731
    out = []
    for rate in sorted(runs, key=lambda r: -float(r.rstrip("mgbit") or 0) * (1000 if "gbit" in r else 1)):
        rs = sorted(runs[rate], key=lambda r: (order.index(r["codec"]) if r["codec"] in order else 9, r["codec"],
                                               r.get("param_codec") or ""))
        hsdp = any(r.get("hsdp") for r in rs)
        # The references: gradwire dense and gloo with FSDP2's own all-gathers.
        ms = {r["codec"]: r["step_ms_median"] for r in rs if not r.get("param_codec")}
        out.append("### %s%s\n" % (rate, ", HSDP" if hsdp else ""))
        last = ("replicas' all-reduce bytes / step / rank" if hsdp else "all bytes sent / step / rank")
        out.append("| configuration | step (median) | step (mean) | vs gradwire dense | vs gloo | reduce-scatter "
                   "bytes / step / rank | all-gather bytes / step / rank | %s |" % last)
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rs:
            dense, gloo = ms.get("none"), ms.get("gloo")
            out.append("| %s | %.0f ms | %.0f ms | %s | %s | %s | %s | %s |" % (
                _label(r), r["step_ms_median"], r["step_ms_mean"],
                "%.2fx" % (dense / r["step_ms_median"]) if dense else "-",
                "%.2fx" % (gloo / r["step_ms_median"]) if gloo else "-", mb(r["rs_bytes_per_step"]),
                mb(_ag_bytes(r)[0]),
                mb(r.get("replica_ar_bytes_per_step")) if hsdp else mb(r.get("comm_bytes_per_step"))))
        out.append("")
    return "\n".join(out)


def main():
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.report:
        print(report(args.report))
        return
    if args.compare:
        sys.exit(compare(args))
    if args.launch:
        launch.run_ranks(os.path.abspath(__file__), launch.without_option(argv, "--launch"), args.launch,
                         args.timeout, "fsdp_train.py")
    else:
        train(args)


if __name__ == "__main__":
    main()
