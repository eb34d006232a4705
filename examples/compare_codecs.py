#!/usr/bin/env python3
"""Trains one task (examples/train.py) on 4 local ranks once per configuration and seed:
plain DDP over gloo, gradwire's dense ring, then gradwire's hook with each codec, with and
without error feedback; prints a markdown table (and writes it to --markdown).

    examples/compare_codecs.py --task fashion                  # every row, seeds 0, 1, 2
    examples/compare_codecs.py --task lm --seeds 0
    examples/compare_codecs.py --task fashion --only topk      # rows whose name contains "topk"
    examples/compare_codecs.py --task fashion --quick          # CI: a few hundred steps, checks
                                                               # that EF rows track dense loss

Every run of a row uses the same seeds, data order, model initialisation and hyperparameters;
only the way gradients are averaged differs. Each run's result is kept in --results
(one JSON file per row and seed), and a run whose file exists is not run again: delete the
directory to start over.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DGC_WARMUP = {"fashion": 100, "lm": 50, "digits": 66}  # dense steps before DGC compresses (~10%)

CODECS = [  # name, codec spec, extra arguments
    ("qsgd 8-bit", "qsgd:bits=8", []),
    ("qsgd 4-bit", "qsgd:bits=4", []),
    ("sign", "sign", []),
    ("topk 1%", "topk:ratio=0.01", []),
    ("topk 0.1%", "topk:ratio=0.001", []),
    ("dgc 0.1%, warm-up", "dgc:ratio=0.001", ["--warmup-steps", "{dgc_warmup}"]),
    ("randomk 1%", "randomk:ratio=0.01", []),
]


def configs(task):
    rows = [("DDP all-reduce (gloo)", ["--codec", "gloo"]),
            ("gradwire dense (none)", ["--codec", "none"]),
            ("fp16", ["--codec", "fp16", "--no-ef"])]
    rows += [(n + " + EF", ["--codec", c, "--ef"] + x) for n, c, x in CODECS]
    rows += [(n + ", no EF", ["--codec", c, "--no-ef"] + x) for n, c, x in CODECS]
    if task != "lm":  # SGD tasks: the momentum moved into the hook, before compression
        rows += [(n + " + EF, hook momentum", ["--codec", c, "--ef", "--hook-momentum"] + x) for n, c, x in CODECS]
    # Plain-PyTorch references (examples/gwtrain/reference_hooks.py), with error feedback.
    rows += [("reference topk 1%, PyTorch with EF", ["--codec", "ref_topk:ratio=0.01"]),
             ("reference topk 0.1%, PyTorch with EF", ["--codec", "ref_topk:ratio=0.001"]),
             ("reference sign, PyTorch with EF", ["--codec", "ref_sign"])]
    return [(n, [a.format(dgc_warmup=DGC_WARMUP[task]) for a in args]) for n, args in rows]


QUICK = [("DDP all-reduce (gloo)", ["--codec", "gloo"]),
         ("qsgd 4-bit + EF", ["--codec", "qsgd:bits=4", "--ef"]),
         ("sign + EF, hook momentum", ["--codec", "sign", "--ef", "--hook-momentum"]),
         ("topk 1% + EF, hook momentum", ["--codec", "topk:ratio=0.01", "--ef", "--hook-momentum"])]


def slug(name, seed):
    keep = "".join(c if c.isalnum() else "_" for c in name)
    return "%s-seed%d.json" % (keep, seed)


def run(task, name, extra, seed, args):
    path = os.path.join(args.results, slug(name, seed))
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    if args.cached:
        return None
    cmd = [sys.executable, os.path.join(HERE, "train.py"), "--task", task, "--launch", str(args.ranks),
           "--seed", str(seed), "--timeout", str(args.timeout), "--json", path + ".tmp"] + args.common + extra
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 and "gloo" in extra:
        # The DDP baseline runs torch alone (gradwire is not loaded): a crash there is torch's
        # (seen once: torch 2.15's gloo aborting a rank, "terminate called without an active
        # exception"), so it runs once more, saying so. gradwire's runs are never retried.
        print(p.stdout[-4000:], file=sys.stderr)
        print("%s seed %d: torch's own run failed (exit %d); running it once more" % (name, seed, p.returncode),
              file=sys.stderr, flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        print(p.stdout[-4000:], file=sys.stderr)
        return {"name": name, "seed": seed, "failed": True, "wall_s": wall}
    with open(path + ".tmp") as f:
        r = json.load(f)
    r.update({"name": name, "wall_s": wall, "args": extra, "command": " ".join(cmd[1:])})
    with open(path, "w") as f:
        json.dump(r, f)
    os.unlink(path + ".tmp")
    return r


def summarize(name, runs):
    """One row from the runs of every seed."""
    ok = [r for r in runs if not r.get("failed")]
    row = {"name": name, "failed": len(ok) < len(runs), "runs": runs}
    if not ok:
        return row
    metric = ok[0]["metric"]
    vals = [r["final"][metric] for r in ok]
    scale = 100.0 if metric == "test_accuracy" else 1.0
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    row.update({"metric": metric, "value": scale * mean(vals), "values": [scale * v for v in vals],
                "spread": scale * (max(vals) - min(vals)), "train_loss": mean([r["final_train_loss"] for r in ok]),
                "step_ms": mean([r["step_ms_median"] for r in ok]), "ef": ok[0]["ef"], "codec": ok[0]["codec"],
                "wire": mean([r["wire_fraction"] for r in ok]) if "wire_fraction" in ok[0] else None,
                "algos": ok[0].get("algos"), "in_sync": all(r["in_sync"] for r in ok),
                "diverged": any(r.get("diverged") for r in ok), "first": ok[0]})
    if metric == "test_accuracy":
        row["other"] = mean([r["final"]["test_loss"] for r in ok])
    else:
        row["other"] = mean([r["final"]["val_bits_per_byte"] for r in ok])
    return row


def table(rows, base):
    acc = rows and rows[0].get("metric", "test_accuracy") == "test_accuracy"
    head = ("| run | EF | test accuracy, mean | vs DDP | spread | per seed | final train loss | test loss "
            "| ms / step | bytes sent / dense | algorithm |") if acc else (
            "| run | EF | validation loss, mean | vs DDP | spread | per seed | final train loss | bits / byte "
            "| ms / step | bytes sent / dense | algorithm |")
    out = [head, "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    fmt = "%.2f %%" if acc else "%.4f"
    for r in rows:
        if "value" not in r:
            out.append("| %s | | failed | | | | | | | | |" % r["name"])
            continue
        algo = ", ".join(r["algos"] or (["gloo"] if r["codec"] == "gloo" or r["codec"].startswith("ref_")
                                        else ["ring"]))
        note = " (diverged)" if r["diverged"] else (" (a seed failed)" if r["failed"] else "")
        if not r["in_sync"]:
            note += " (ranks out of sync!)"
        out.append("| %s%s | %s | %s | %s | %s | %s | %.4f | %.4f | %.1f | %s | %s |" % (
            r["name"], note, "yes" if r["ef"] else "no", fmt % r["value"],
            ("%+.2f" if acc else "%+.4f") % (r["value"] - base) if base is not None else "-",
            ("%.2f" if acc else "%.4f") % r["spread"],
            " / ".join(("%.2f" if acc else "%.3f") % v for v in r["values"]), r["train_loss"], r["other"],
            r["step_ms"], "%.3f" % r["wire"] if r["wire"] is not None else "1", algo))
    return "\n".join(out)


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    import torch
    return "%s, %d cores; Linux %s; Python %s, torch %s; UCX_TLS=%s" % (
        cpu, os.cpu_count(), platform.release(), platform.python_version(), torch.__version__,
        os.environ.get("UCX_TLS", "tcp,self"))


def check_quick(rows):
    """--quick: every EF row's final training loss within 25% (+0.05) of DDP's, and finite."""
    base = rows[0]
    if "value" not in base:
        return ["DDP's baseline failed: nothing to compare with"]
    bad = []
    for r in rows[1:]:
        if "value" not in r or r["diverged"] or not r["in_sync"]:
            bad.append("%s: failed, diverged or out of sync" % r["name"])
        elif r["train_loss"] > 1.25 * base["train_loss"] + 0.05:
            bad.append("%s: final train loss %.4f against DDP's %.4f" % (r["name"], r["train_loss"], base["train_loss"]))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="fashion", choices=["fashion", "lm", "digits"])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated; every configuration runs once per seed")
    ap.add_argument("--timeout", type=float, default=1800, help="per run")
    ap.add_argument("--only", help="run only the rows whose name contains one of these ('|' between them, "
                    "'=NAME' for exactly NAME; DDP's row always runs)")
    ap.add_argument("--quick", action="store_true", help="a few hundred steps of four rows; fails when an EF "
                    "row's loss does not track DDP's")
    ap.add_argument("--results", help="directory of per-run results (default build/training/TASK[-quick])")
    ap.add_argument("--markdown", help="also write the table here")
    ap.add_argument("--cached", action="store_true", help="run nothing: the table of the results kept so far")
    ap.add_argument("train_args", nargs="*", help="after --: more examples/train.py arguments for every run")
    args = ap.parse_args()
    args.common = args.train_args
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    rows_cfg = configs(args.task)
    if args.quick:
        rows_cfg, seeds = QUICK, seeds[:1]
        args.common = ["--steps", "300"] + args.common
    args.results = args.results or os.path.join(ROOT, "build", "training", args.task + ("-quick" if args.quick else ""))
    os.makedirs(args.results, exist_ok=True)

    t0 = time.monotonic()
    rows = []
    for name, extra in rows_cfg:
        if args.only and not any(name == o[1:] if o.startswith("=") else o in name for o in args.only.split("|")) \
                and extra[1] != "gloo":
            continue
        runs = []
        for seed in seeds:
            r = run(args.task, name, extra, seed, args)
            if r is None:  # --cached, and not run yet
                continue
            runs.append(r)
            if r.get("failed"):
                print("%-36s seed %d FAILED" % (name, seed), flush=True)
            else:
                print("%-36s seed %d  %s %.4f  train loss %.4f  %.1f ms/step  (%.0f s)" % (
                    name, seed, r["metric"], r["final"][r["metric"]], r["final_train_loss"], r["step_ms_median"],
                    r.get("wall_s", 0)), flush=True)
        if runs:
            rows.append(summarize(name, runs))
    base = rows[0]["value"] if rows and rows[0].get("codec") == "gloo" and "value" in rows[0] else None
    first = next((r["first"] for r in rows if "first" in r), {})
    text = "%s; %s parameters; %s ranks, global batch %s, %s steps; seeds %s; %s; %s (%.1f min)\n\n%s\n" % (
        first.get("data", "?"), first.get("params", "?"), args.ranks, first.get("global_batch", "?"),
        first.get("planned_steps", "?"), ", ".join(map(str, seeds)) + (" where run" if args.cached else ""), machine(),
        datetime.date.today().isoformat(), (time.monotonic() - t0) / 60, table(rows, base))
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    failed = [r["name"] for r in rows if r["failed"]]
    if args.quick:
        bad = check_quick(rows)
        for b in bad:
            print("quick check failed: " + b, file=sys.stderr)
        return 1 if bad else 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
