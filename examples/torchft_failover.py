"""Fault-tolerant training with torchft, with and without gradwire, with a replica killed.

torchft's lighthouse (in this process) and three replica groups of one rank each (separate
processes, one CPU thread each) train the Fashion-MNIST ResNet of docs/training.md
(examples/gwtrain: models.resnet, data.fashion, the cosine schedule of tasks) with torchft's
Manager and DDP, in three modes:

  gloo           torchft's own ProcessGroupGloo, dense (torchft's DDP hook*)
  gradwire       gradwire.torchft.ProcessGroupGradwire, dense (torchft's DDP hook*)
  gradwire-qsgd8 ProcessGroupGradwire with gradwire's compressed hook
                 (gradwire.torchft.DistributedDataParallel, qsgd 8-bit with error feedback)

* torchft 0.2.0's DDP hook cannot survive an all-reduce that fails (see _torchft_ddp): the
  dense modes use torchft's DistributedDataParallel with that hook mended, nothing else changed.

Each mode runs twice with the same seed: uninterrupted, and with one replica SIGKILLed at
about a third of the training, in the all-reduce of that step (the victim, entering the
step's first bucket all-reduce, writes the time and sends itself SIGKILL, so its peers wait
in that all-reduce for its data), and restarted by this script at once. The survivors go on
without it once the lighthouse has dropped it; the restarted replica heals from a live one
and rejoins. Every replica evaluates the full 10,000-image test set at the end.

    .venv/bin/python examples/torchft_failover.py --out build/training/torchft_failover.json
    .venv/bin/python examples/torchft_failover.py --quick --out /tmp/quick.json   # smoke

Per run: each replica's final test accuracy, the time from the kill to the survivors' next
committed step (in a quorum without the dead replica), the time from the kill to the restarted
replica's first committed step, the steps each replica committed, the wall time; a markdown
table on stdout and everything as JSON in --out. Needs torchft (pip install torchft), the
gradwire torch backend and dataset-fashion-mnist; GRADWIRE_LIB names the libgradwire.so.
"""
import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYDIR = os.path.join(ROOT, "python")
for _p in (PYDIR, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

MODES = {
    "gloo": "torchft ProcessGroupGloo, dense",
    "gradwire": "ProcessGroupGradwire, dense",
    "gradwire-qsgd8": "ProcessGroupGradwire + gradwire hook, qsgd 8-bit + EF",
}
CODEC = "qsgd:bits=8"
FULL_WIDTHS = "24,48,96,192"


# ---------------------------------------------------------------- replica side

def _die_with_parent():
    """A replica must not outlive this script, however the script ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(1)


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _arm_kill(cfg, manager, log):
    """The victim dies in the all-reduce of step cfg['die_at']: as it enters the step's first
    bucket all-reduce, it writes the time and SIGKILLs itself, so its peers, in that all-reduce
    too, wait for data that never comes (killed just after posting, a small bucket's all-reduce
    can complete before the signal lands, and the peers then see nothing wrong). torchft's hook
    all-reduces through manager.allreduce, gradwire's through Communicator.iallreduce: the one
    the mode uses is wrapped."""
    die_at = cfg["die_at"]

    def maybe_die():
        if manager.current_step() == die_at and not manager.errored():
            t = time.time()
            log.flush()
            _write_json(cfg["kill_file"], {"t": t, "step": die_at, "pid": os.getpid()})
            os.kill(os.getpid(), signal.SIGKILL)

    if cfg["mode"] == "gradwire-qsgd8":
        from gradwire.core import Communicator
        posted = Communicator.iallreduce

        def iallreduce(self, *args, **kwargs):
            maybe_die()
            return posted(self, *args, **kwargs)
        Communicator.iallreduce = iallreduce
    else:
        posted_m = manager.allreduce

        def allreduce(*args, **kwargs):
            maybe_die()
            return posted_m(*args, **kwargs)
        manager.allreduce = allreduce  # torchft's hook calls state.allreduce, state = manager


def _torchft_ddp():
    """torchft's DistributedDataParallel, its comm hook mended for an all-reduce that fails.
    torchft 0.2.0's hook returns `work.get_future()._fut`. When the all-reduce's wait() raises
    (a peer died in it: gloo and gradwire both raise there), _ManagedWork.wait reports the error
    to the manager but never builds its future chain, so `_fut` is None and the hook's assert
    ends the backward pass, and the survivor with it; once the step has errored,
    Manager.allreduce returns a _DummyWork whose plain future has no `_fut` at all
    (AttributeError on the next bucket). Here both hand DDP the bucket back: the manager already
    knows the step failed, and should_commit() says no."""
    import torch
    from torchft import DistributedDataParallel

    class MendedDistributedDataParallel(DistributedDataParallel):
        @staticmethod
        def _comm_hook(state, bucket):
            work = state.allreduce(bucket.buffer())
            work.wait()  # a failure is reported to the manager, not raised
            fut = work.get_future()
            inner = getattr(fut, "_fut", fut)  # _ManagedFuture: its torch future; _DummyWork's: itself
            if inner is None:  # the all-reduce failed
                inner = torch.futures.Future()
                inner.set_result(bucket.buffer())
            return inner

    return MendedDistributedDataParallel


def replica_main(cfg):
    """One replica group of one rank: Manager + DDP + SGD, trained to cfg['steps'] committed
    steps; one JSON line per iteration in cfg['log'], the final result in cfg['result']."""
    _die_with_parent()
    t_start = time.time()
    from datetime import timedelta

    import torch
    import torch.nn.functional as F
    from torch.distributed import TCPStore
    from torchft import Manager
    from torchft import Optimizer as OptimizerWrapper

    from gwtrain import data, models
    from gwtrain.tasks import _cosine
    if cfg["mode"] != "gloo":
        import gradwire.torchft  # noqa: F401 - loads libgradwire and the torch extension

    torch.set_num_threads(1)
    r, n, seed = cfg["replica"], cfg["replicas"], cfg["seed"]
    phases = {"start": t_start, "imported": time.time()}

    Xtr, Xte, ytr, yte = data.fashion()
    Xtr, Xte, ytr, yte = map(torch.from_numpy, (Xtr, Xte, ytr, yte))
    if cfg["train_subset"]:
        keep = torch.randperm(len(Xtr), generator=torch.Generator().manual_seed(seed))[:cfg["train_subset"]]
        Xtr, ytr = Xtr[keep], ytr[keep]
    if cfg["test_subset"]:
        Xte, yte = Xte[:cfg["test_subset"]], yte[:cfg["test_subset"]]
    phases["data"] = time.time()
    batch = cfg["batch"]
    per_replica = len(Xtr) // n
    steps_per_epoch = per_replica // batch
    total = cfg["steps"]
    warm = min(100, total // 20)

    shares = {}

    def batch_of(step):
        """Replica r's batch of a step: its share of the epoch's permutation, the same in every
        run of one seed (a step a replica retries takes the same batch)."""
        epoch, s = divmod(step, steps_per_epoch)
        if epoch not in shares:
            perm = torch.randperm(len(Xtr), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
            shares.clear()
            shares[epoch] = perm[r * per_replica:(r + 1) * per_replica]
        idx = shares[epoch][s * batch:(s + 1) * batch]
        return Xtr[idx], ytr[idx]

    torch.manual_seed(seed)  # the same initial parameters on every replica (init_sync=False)
    model = models.resnet(tuple(int(w) for w in cfg["widths"].split(",")))
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4)

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    phases["model"] = time.time()
    store = TCPStore("127.0.0.1", cfg["store_port"], is_master=True, wait_for_workers=False)  # noqa: F841
    pg_timeout = timedelta(seconds=cfg["pg_timeout_s"])
    if cfg["mode"] == "gloo":
        from torchft.process_group import ProcessGroupGloo
        pg = ProcessGroupGloo(timeout=pg_timeout)
    else:
        from gradwire.torchft import ProcessGroupGradwire
        pg = ProcessGroupGradwire(timeout=pg_timeout)
    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=str(r), store_addr="127.0.0.1", store_port=cfg["store_port"], rank=0, world_size=1,
                      lighthouse_addr=cfg["lighthouse"], port=0, timeout=timedelta(seconds=30), init_sync=False)
    phases["manager"] = time.time()
    if cfg["mode"] == "gradwire-qsgd8":
        import gradwire.torchft as gwft
        # scatter_reduce: every bucket compressed (the policy would send one under its dense
        # threshold dense; the --quick model's are).
        ddp = gwft.DistributedDataParallel(manager, model, codec=CODEC, ef=True, algo="scatter_reduce")
    else:
        ddp = _torchft_ddp()(manager, model)
    optimizer = OptimizerWrapper(manager, opt)

    log = open(cfg["log"], "a", buffering=1)
    if cfg["die_at"] >= 0:
        _arm_kill(cfg, manager, log)
    t_ready = time.time()
    phases["ready"] = t_ready
    _write_json(cfg["ready_file"], {"t": t_ready, "pid": os.getpid(), "phases": phases})
    while not os.path.exists(cfg["go_file"]):  # all replicas heartbeating before the first quorum
        time.sleep(0.005)

    ddp.train()
    floor = cfg["min_step_ms"] / 1e3
    while manager.current_step() < total:
        t0 = time.time()
        step = manager.current_step()
        x, y = batch_of(step)
        optimizer.zero_grad()  # torchft: start_quorum (asynchronous) and zero the gradients
        loss = F.cross_entropy(ddp(x), y)
        manager.wait_quorum()  # the hook would wait here anyway; timed apart
        tq = time.time()
        loss.backward()  # the all-reduce, in DDP's hook
        tb = time.time()
        # torchft.Optimizer.step, keeping the answer: step only if the replicas commit.
        committed = manager.should_commit()
        if committed:
            for g in opt.param_groups:  # the schedule follows the committed step (a healed replica too)
                g["lr"] = cfg["lr"] * _cosine(manager.current_step() - 1, total, warm)
            opt.step()
        t1 = time.time()
        err = manager.errored()
        log.write(json.dumps({"t0": t0, "tq": tq, "tb": tb, "t1": t1, "step": step, "after": manager.current_step(),
                              "committed": bool(committed), "participants": manager.num_participants(),
                              "error": None if err is None else str(err)[:300],
                              "loss": float(loss.detach())}) + "\n")
        if floor and time.time() - t0 < floor:
            time.sleep(floor - (time.time() - t0))
    t_done = time.time()
    # Leave the quorums before evaluating: a peer that still needs a step must not wait for us.
    manager.shutdown(wait=False)

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(Xte), 500):
            correct += int((model(Xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum())
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    hook = getattr(ddp, "gradwire_state", None)
    _write_json(cfg["result"], {
        "replica": r, "step": manager.current_step(), "test_accuracy": correct / len(Xte), "test_images": len(Xte),
        "params_sha256": h.hexdigest(), "params": sum(p.numel() for p in model.parameters()),
        "t_start": t_start, "t_ready": t_ready, "t_done": t_done, "t_end": time.time(),
        "hook": hook.stats if hook is not None else None})
    log.close()


# ---------------------------------------------------------------- orchestration

def free_ports(k):
    socks, ports = [], []
    try:
        for _ in range(k):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _read_jsonl(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass  # the last line of a killed replica may be cut
    return rows


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


class RunFailed(RuntimeError):
    pass


class Run:
    """One run: a lighthouse and the replicas, every child killed on the way out."""

    def __init__(self, args, mode, killed, workdir):
        self.args, self.mode, self.killed = args, mode, killed
        self.dir = os.path.join(workdir, "%s-%s" % (mode, "killed" if killed else "plain"))
        os.makedirs(self.dir, exist_ok=True)
        self.procs, self.logs, self.lighthouse = {}, [], None
        self.ports = free_ports(args.replicas)
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([PYDIR, HERE] + [p for p in [self.env.get("PYTHONPATH")] if p])
        for k, v in (("UCX_TLS", "tcp,self"), ("RUST_LOG", "warn"), ("OMP_NUM_THREADS", "1"), ("GW_DEBUG", "WARN")):
            self.env.setdefault(k, v)

    def path(self, name):
        return os.path.join(self.dir, name)

    def cfg(self, r, incarnation, die_at):
        a = self.args
        return {"replica": r, "replicas": a.replicas, "mode": self.mode, "seed": a.seed, "steps": a.steps,
                "batch": a.batch, "lr": a.lr, "widths": a.widths, "train_subset": a.train_subset,
                "test_subset": a.test_subset, "min_step_ms": a.min_step_ms, "pg_timeout_s": a.pg_timeout_s,
                "lighthouse": self.lighthouse.address(), "store_port": self.ports[r], "die_at": die_at,
                "kill_file": self.path("kill.json"), "go_file": self.path("go"),
                "ready_file": self.path("ready%d.%d" % (r, incarnation)),
                "log": self.path("replica%d.%d.jsonl" % (r, incarnation)),
                "result": self.path("result%d.json" % r)}

    def start(self, r, incarnation, die_at=-1):
        cfg = self.cfg(r, incarnation, die_at)
        log = open(self.path("replica%d.%d.log" % (r, incarnation)), "w")
        self.logs.append(log)
        t = time.time()
        self.procs[r] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--replica", json.dumps(cfg)],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return t

    def tails(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(self.path(name), errors="replace") as f:
                    out.append("---- %s ----\n%s" % (name, f.read()[-3000:]))
        return "\n".join(out)

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in self.logs:
            log.close()
        if self.lighthouse is not None:
            self.lighthouse.shutdown()
            self.lighthouse = None

    def execute(self):
        from torchft._torchft import LighthouseServer
        a = self.args
        t_begin = time.time()
        self.lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=a.join_timeout_ms,
                                           heartbeat_timeout_ms=a.heartbeat_timeout_ms)
        victim = a.victim if self.killed else -1
        die_at = a.kill_step if self.killed else -1
        for r in range(a.replicas):
            self.start(r, 0, die_at if r == victim else -1)
        deadline = time.monotonic() + a.run_timeout_s
        while not all(os.path.exists(self.path("ready%d.0" % r)) for r in range(a.replicas)):
            for r, p in self.procs.items():
                if p.poll() is not None:
                    raise RunFailed("replica %d exited (%s) before training\n%s" % (r, p.returncode, self.tails()))
            if time.monotonic() > deadline:
                raise RunFailed("replicas not ready in time\n" + self.tails())
            time.sleep(0.01)
        open(self.path("go"), "w").close()
        t_go = time.time()
        restart = None
        done = set()
        while len(done) < a.replicas:
            for r, p in list(self.procs.items()):
                if r in done or p.poll() is None:
                    continue
                if r == victim and restart is None and p.returncode == -signal.SIGKILL:
                    seen = time.time()
                    restart = {"seen_dead": seen, "launched": self.start(r, 1)}  # at once
                elif p.returncode == 0:
                    done.add(r)
                else:
                    raise RunFailed("replica %d exited with %s\n%s" % (r, p.returncode, self.tails()))
            if time.monotonic() > deadline:
                raise RunFailed("run did not finish in %d s\n%s" % (a.run_timeout_s, self.tails()))
            time.sleep(0.005)
        t_end = time.time()
        if self.killed and restart is None:
            raise RunFailed("the victim never died (did training reach step %d?)\n%s"
                            % (a.kill_step, self.tails()))
        return self.summarize(t_begin, t_go, t_end, restart, victim)

    def summarize(self, t_begin, t_go, t_end, restart, victim):
        a = self.args
        n = a.replicas
        results = [_read_json(self.path("result%d.json" % r)) for r in range(n)]
        logs = {r: _read_jsonl(self.path("replica%d.0.jsonl" % r)) for r in range(n)}
        row = {"mode": self.mode, "mode_about": MODES[self.mode], "killed": self.killed, "wall_s": t_end - t_begin,
               "train_wall_s": t_end - t_go,
               "test_accuracy": [res["test_accuracy"] for res in results],
               "final_step": [res["step"] for res in results],
               "in_sync": len({res["params_sha256"] for res in results}) == 1,
               "committed": [sum(e["committed"] for e in logs[r]) for r in range(n)],
               "failed_iterations": [sum(not e["committed"] for e in logs[r]) for r in range(n)],
               "hook": [res["hook"] for res in results] if results[0]["hook"] else None,
               "dir": self.dir}
        row["mean_accuracy"] = sum(row["test_accuracy"]) / n
        if not self.killed:
            return row
        kill = _read_json(self.path("kill.json"))
        tk = kill["t"]
        after = _read_jsonl(self.path("replica%d.1.jsonl" % victim))
        row["committed_before_kill"] = row["committed"][victim]
        row["committed_after_restart"] = sum(e["committed"] for e in after)
        row["committed"][victim] += row["committed_after_restart"]
        row["failed_iterations"][victim] += sum(not e["committed"] for e in after)
        survivors = [r for r in range(n) if r != victim]
        surv = {}
        for r in survivors:
            later = [e for e in logs[r] if e["t1"] > tk]
            failed = next((e for e in later if not e["committed"]), None)
            first = next((e for e in later if e["committed"] and e["participants"] < n), None)
            surv[r] = {
                # the survivor's step that failed: its all-reduce ends (tb) when the failure is seen
                "failed_step_s": failed["tb"] - tk if failed else None,
                "failed_error": failed["error"] if failed else None,
                # the retried step: waiting for the lighthouse's new quorum (and the group's configure)
                "quorum_wait_s": first["tq"] - first["t0"] if first else None,
                "commit_s": first["t1"] - tk if first else None,
                "commit_step": first["after"] if first else None,
            }
        row["survivors"] = surv
        row["kill"] = {"step": kill["step"], "t": tk}
        row["victim"] = victim
        commits = [s["commit_s"] for s in surv.values()]
        row["kill_to_survivor_commit_s"] = max(commits) if None not in commits else None
        ready = _read_json(self.path("ready%d.1" % victim))
        first = next((e for e in after if e["committed"]), None)
        res = results[victim]
        row["rejoin"] = {
            "seen_dead_s": restart["seen_dead"] - tk,
            "process_start_to_ready_s": ready["t"] - restart["launched"] if ready else None,
            # launch -> python running -> torch, torchft, gradwire imported -> data -> model ->
            # Manager (lighthouse connection) -> DDP: seconds from the launch to each
            "startup_phases_s": {k: v - restart["launched"] for k, v in ready["phases"].items()} if ready else None,
            "first_quorum_s": after[0]["tq"] - tk if after else None,  # includes the heal
            "heal_iteration_s": after[0]["t1"] - after[0]["t0"] if after else None,
            "first_commit_step": first["after"] if first else None,  # the step it committed
        }
        row["kill_to_rejoin_commit_s"] = first["t1"] - tk if first else None
        row["restarted_result_step"] = res["step"]
        return row


def run_one(args, mode, killed, workdir):
    run = Run(args, mode, killed, workdir)
    try:
        return run.execute()
    finally:
        run.close()


def fmt(x, spec="%.2f"):
    return "—" if x is None else spec % x


def table(rows):
    plain = {r["mode"]: r for r in rows if not r["killed"]}
    lines = ["| mode | run | test accuracy per replica | mean | vs uninterrupted | kill → survivors' commit | "
             "kill → rejoined replica's commit | steps committed per replica | params identical | wall |",
             "|---|---|---|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        base = plain.get(r["mode"])
        vs = None if base is None or not r["killed"] else 100 * (r["mean_accuracy"] - base["mean_accuracy"])
        committed = " / ".join(str(c) for c in r["committed"])
        if r["killed"]:
            committed += " (killed one: %d + %d)" % (r["committed_before_kill"], r["committed_after_restart"])
        lines.append("| %s | %s | %s | %.2f %% | %s | %s | %s | %s | %s | %.0f s |" % (
            r["mode_about"], "replica %d killed at step %d" % (r["victim"], r["kill"]["step"]) if r["killed"]
            else "uninterrupted",
            " / ".join("%.2f" % (100 * a) for a in r["test_accuracy"]), 100 * r["mean_accuracy"],
            fmt(vs, "%+.2f"), fmt(r.get("kill_to_survivor_commit_s"), "%.2f s"),
            fmt(r.get("kill_to_rejoin_commit_s"), "%.2f s"), committed, "yes" if r["in_sync"] else "NO", r["wall_s"]))
    detail = ["", "| mode | survivors' failed step ends (after the kill) | survivors' wait for the new quorum | "
              "restarted process: launch → ready | its first quorum (heal included) | failed iterations per replica |",
              "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if not r["killed"]:
            continue
        s = list(r["survivors"].values())
        fs = [x["failed_step_s"] for x in s if x["failed_step_s"] is not None]
        qw = [x["quorum_wait_s"] for x in s if x["quorum_wait_s"] is not None]
        detail.append("| %s | %s | %s | %s | %s | %s |" % (
            r["mode_about"], " / ".join("%.3f s" % x for x in fs) or "—", " / ".join("%.2f s" % x for x in qw) or "—",
            fmt(r["rejoin"]["process_start_to_ready_s"], "%.2f s"), fmt(r["rejoin"]["first_quorum_s"], "%.2f s"),
            " / ".join(str(c) for c in r["failed_iterations"])))
    return "\n".join(lines + (detail if len(detail) > 3 else []))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON results")
    p.add_argument("--modes", default=None, help="comma-separated, of: %s (default: all)" % ", ".join(MODES))
    p.add_argument("--runs", default=None, help="plain, killed or both (default: both)")
    p.add_argument("--quick", action="store_true",
                   help="smoke: widths 8,8,16,16, 6,000 training and 1,000 test images, 200 steps of 16 paced "
                        "at 80 ms, kill at step 20; modes gradwire and gradwire-qsgd8, killed only")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--victim", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=0, help="committed steps (overrides --epochs)")
    p.add_argument("--batch", type=int, default=32, help="per replica")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--widths", default=FULL_WIDTHS,
                   help="the ResNet's four widths (docs/training.md's: %s)" % FULL_WIDTHS)
    p.add_argument("--train-subset", type=int, default=0, help="train on this many images (0: all 60,000)")
    p.add_argument("--test-subset", type=int, default=0, help="test on this many images (0: all 10,000)")
    p.add_argument("--kill-at", type=float, default=1 / 3, help="kill at this fraction of the steps")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=2000, help="the lighthouse's")
    p.add_argument("--join-timeout-ms", type=int, default=60000,
                   help="the lighthouse's wait for stragglers (torchft's default; above the heartbeat timeout, "
                        "so the survivors' new quorum waits for the dead replica's heartbeat to expire)")
    p.add_argument("--pg-timeout-s", type=float, default=10.0, help="the process groups' timeout")
    p.add_argument("--min-step-ms", type=float, default=0.0, help="pace the iterations (the --quick runs)")
    p.add_argument("--run-timeout-s", type=float, default=900.0, help="per run")
    p.add_argument("--workdir", default=None, help="logs (default: a fresh temporary folder)")
    args = p.parse_args(argv)
    if args.quick:
        args.modes = args.modes or "gradwire,gradwire-qsgd8"
        args.runs = args.runs or "killed"
        args.widths = "8,8,16,16"
        args.train_subset = args.train_subset or 6000
        args.test_subset = args.test_subset or 1000
        args.batch = 16
        args.steps = args.steps or 200
        args.min_step_ms = args.min_step_ms or 80
        args.kill_at = 0.1
        args.run_timeout_s = min(args.run_timeout_s, 100)
    args.modes = args.modes or ",".join(MODES)
    args.runs = args.runs or "plain,killed"
    for m in args.modes.split(","):
        if m not in MODES:
            p.error("unknown mode %r" % m)
    if not set(args.runs.split(",")) <= {"plain", "killed"}:
        p.error("--runs: plain, killed")
    if not 0 <= args.victim < args.replicas or args.replicas < 2:
        p.error("--victim must name one of at least 2 replicas")
    n_train = args.train_subset or 60000
    steps_per_epoch = n_train // args.replicas // args.batch
    args.steps = args.steps or max(1, int(round(args.epochs * steps_per_epoch)))
    args.kill_step = max(1, int(args.steps * args.kill_at))
    return args


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("RUST_LOG", "warn")  # the lighthouse (in this process) logs every quorum at info
    try:
        import torchft  # noqa: F401
    except ImportError:
        raise SystemExit("torchft is not installed (pip install torchft)")

    def on_term(signum, frame):
        raise SystemExit(128 + signum)  # unwinds through every run's close()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even where started with it ignored

    workdir = args.workdir or tempfile.mkdtemp(prefix="gw-torchft-failover-")
    config = {k: v for k, v in vars(args).items() if k not in ("out", "workdir")}
    print("torchft failover: %d replicas, %d steps of batch %d each (kill: replica %d at step %d), widths %s, "
          "heartbeat timeout %d ms; logs in %s" % (args.replicas, args.steps, args.batch, args.victim, args.kill_step,
                                                   args.widths, args.heartbeat_timeout_ms, workdir), flush=True)
    rows, t0 = [], time.time()
    out = {"config": config, "runs": rows, "goal_points": 0.5}
    for mode in args.modes.split(","):
        for kind in args.runs.split(","):
            r0 = time.time()
            row = run_one(args, mode, kind == "killed", workdir)
            rows.append(row)
            print("%s %s: accuracy %s, %.0f s%s" % (
                mode, kind, " / ".join("%.2f" % (100 * a) for a in row["test_accuracy"]), time.time() - r0,
                "" if kind == "plain" else ", survivors commit %s s and the restarted replica %s s after the kill" % (
                    fmt(row["kill_to_survivor_commit_s"]), fmt(row["kill_to_rejoin_commit_s"]))), flush=True)
            out["total_wall_s"] = time.time() - t0
            _write_json(args.out, out)
    plain = {r["mode"]: r for r in rows if not r["killed"]}
    for r in rows:
        if r["killed"] and r["mode"] in plain:
            r["vs_uninterrupted_points"] = 100 * (r["mean_accuracy"] - plain[r["mode"]]["mean_accuracy"])
            r["within_goal"] = abs(r["vs_uninterrupted_points"]) <= out["goal_points"]
    out["total_wall_s"] = time.time() - t0
    _write_json(args.out, out)
    print()
    print(table(rows))
    print()
    print("total %.0f s; JSON in %s" % (out["total_wall_s"], args.out))
    return out


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--replica":
        replica_main(json.loads(sys.argv[2]))
    else:
        main()
