"""PyTorch glue: the torch.distributed backend "gradwire", and a DistributedDataParallel comm
hook that all-reduces gradient buckets through gradwire, with a codec and an error-feedback
state per bucket.

    import torch.distributed as dist
    import gradwire.torch as gwt                     # registers the "gradwire" backend
    dist.init_process_group("gradwire")              # every c10d call goes through gradwire, exact
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = gwt.HookState(codec="topk:ratio=0.01", warmup_steps=100, model=model)
    ddp.register_comm_hook(state, gwt.comm_hook)     # gradient buckets compressed, on the same connections

The backend's process group can carry the default codec of its gradient buckets
(gwt.BackendOptions(codec=..., ef=...), passed as pg_options); plain c10d calls
(dist.all_reduce of a loss, batch-norm statistics, metrics) are never compressed.
gwt.all_reduce(tensor, codec=..., ef=...) asks for compression explicitly.

With another backend (gloo, nccl), gwt.init_communicator() builds a gradwire communicator
beside it and the hook takes it as comm=.

CUDA buckets are all-reduced on the device, ordered on the current CUDA stream, with their EF
states in device memory; comm.enable_nccl() (every rank) sends the dense ones through NCCL.
"""
import fnmatch
import queue
import threading
import warnings

import torch
import torch.distributed as dist

from . import _lib
from .core import Codec, Communicator, ErrorFeedback, get_unique_id

# Importing _backend registers the "gradwire" backend with torch.distributed. Without the
# built extension init_process_group("gradwire") says how to build it, and the hook still
# works over init_communicator().
from ._backend import BackendOptions, available, device_path, get_communicator, is_gradwire_group, nccl_enabled, trim
from ._backend import unavailable_reason
from ._backend import get_options as backend_options
from .fsdp import (AllGather, FSDPCompression, ReduceScatter, ReplicateAllReduce, compress_fsdp, default_exact,
                   default_param_exact)

__all__ = ["AllGather", "BackendOptions", "FSDPCompression", "HookState", "ReduceScatter", "ReplicateAllReduce",
           "all_reduce", "available", "backend_options", "comm_hook", "compress_fsdp", "default_exact",
           "default_param_exact", "device_path",
           "get_communicator", "init_communicator", "launcher_env", "nccl_enabled", "trim"]

# Bucket dtypes the hook sends through gradwire (float32 may be compressed; the rest go dense).
_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_DEFAULT_CODEC = "qsgd:bits=8"


def _group_communicator(group):
    """The gradwire communicator of a gradwire process group (None for other backends)."""
    if not available() or not dist.is_initialized() or not is_gradwire_group(group):
        return None
    return get_communicator(group)


def launcher_env():
    """Fills torch.distributed's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)
    from OpenMPI's or Slurm's when torchrun's are absent, and MASTER_ADDR / MASTER_PORT with
    127.0.0.1:29500 when unset (one host; on several, export MASTER_ADDR yourself). Returns
    (rank, world_size). Call it before init_process_group("gradwire") under mpirun or srun."""
    import os
    env = os.environ
    pairs = [("RANK", ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")),
             ("WORLD_SIZE", ("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")),
             ("LOCAL_RANK", ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")),
             ("LOCAL_WORLD_SIZE", ("OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"))]
    for name, sources in pairs:
        if name not in env:
            for src in sources:
                if src in env:
                    env[name] = env[src]
                    break
    if "RANK" not in env or "WORLD_SIZE" not in env:
        raise RuntimeError("no launcher found: RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_* (mpirun) or "
                           "SLURM_PROCID/SLURM_NTASKS (srun) must be set")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    return int(env["RANK"]), int(env["WORLD_SIZE"])


def all_reduce(tensor, op="sum", codec=None, ef=None, algo="auto", group=None, async_op=False):
    """All-reduce tensor in place over a gradwire process group, compressed with codec (a spec
    or a gradwire.Codec; None: dense and exact) and, optionally, an ErrorFeedback state of
    tensor.numel() elements. It runs on the group's own communicator, in order with the
    group's other calls. async_op=True returns a gradwire Request (wait() / test())."""
    comm = _group_communicator(group)
    if comm is None:
        raise RuntimeError("gradwire.torch.all_reduce needs a process group of the gradwire backend "
                           "(init_process_group('gradwire'))" +
                           ("" if available() else "; the backend is not built: %s" % unavailable_reason()))
    if isinstance(codec, str):
        codec = Codec(codec)
    name = "gradwire:all_reduce numel=%d dtype=%s codec=%s algo=%s" % (
        tensor.numel(), str(tensor.dtype).replace("torch.", ""), codec.spec if codec is not None else "none", algo)
    with torch.autograd.profiler.record_function(name):
        if async_op:
            return comm.iallreduce(tensor, op=op, codec=codec, ef=ef, algo=algo)
        comm.allreduce(tensor, op=op, codec=codec, ef=ef, algo=algo)
    return None


def init_communicator(group=None, **config):
    """A gradwire Communicator over the ranks of a torch.distributed group (default: WORLD),
    with the same rank numbering. The group's rank 0 creates a unique id and broadcasts it
    through the group. Collective: every rank of the group must call it. config goes to
    Communicator.init_rank (timeout_s, chunk_bytes, dense_threshold_bytes)."""
    if not dist.is_initialized():
        raise RuntimeError("init_communicator needs torch.distributed.init_process_group() first")
    rank = dist.get_rank(group)
    size = dist.get_world_size(group)
    src = dist.get_global_rank(group, 0) if group is not None else 0
    box = [get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=src, group=group)
    return Communicator.init_rank(size, box[0], rank, **config)


class HookState:
    """What the hook keeps between calls.

    comm: a gradwire Communicator over the same ranks as DDP's process group; None (the
      default) takes the communicator of process_group (or the default group) when that is a
      gradwire group: no second set of connections.
    codec: spec (or None / "none" for dense) for buckets that compress; "default" takes the
      process group's BackendOptions codec, else qsgd:bits=8.
    param_codecs: [(pattern, spec)] by parameter name (fnmatch, e.g. "encoder.*.weight");
      the first rule that matches any parameter of a bucket gives that bucket's codec
      (spec None or "none": dense). Needs model= (the module DDP wraps).
    min_size: buckets with fewer elements go dense, as do buckets whose parameters are all
      one-dimensional (biases, norms) when dense_1d is set.
    warmup_steps: the first optimizer steps go dense (DGC's warm-up), then compression starts.
    ef: keep an error-feedback state per bucket (keyed by bucket index) for lossy codecs.
    momentum: 0 (default), or the optimizer's momentum moved into the hook (DGC's momentum
      correction): each rank keeps a velocity u = momentum * u + g per bucket and sends u, so
      compression and error feedback act on the velocity; the result is the averaged
      velocity, so the optimizer must then run WITHOUT momentum (SGD(momentum=0); Nesterov
      is not supported). Use it with error feedback: momentum applied after a compressed
      all-reduce re-sends the delayed residual through the momentum for many steps, and that
      made sign + EF diverge on a CNN (docs/training.md). take_momentum_from(optimizer)
      does both halves at once for torch.optim.SGD.
    algo: gradwire algorithm name for compressed buckets, or "auto" for the library's policy.
      The policy sends dense any all-reduce under the communicator's dense_threshold_bytes
      (64 KiB by default: make the communicator with dense_threshold_bytes=0 to let min_size
      alone decide), and a library that tunes its choice by timing (GW_TUNE) may pick the
      dense ring where compression does not pay; name an algorithm to always compress.
    process_group: DDP's process group (None: the default group). Buckets gradwire cannot
      carry (integer dtypes) are averaged there, as DDP would do without the hook.

    state_dict() / load_state_dict() save and restore the step, the statistics and every
    bucket's error-feedback state (residuals included), so a resumed job goes on with the
    same residuals.

    stats: {"dense": buckets sent dense, "compressed": buckets sent compressed,
      "algos": {bucket index: algorithm}, "wire_bytes": bytes of the messages (the codec's
      encoded size for compressed buckets, 4 bytes an element for dense ones),
      "dense_bytes": what the same buckets weigh dense}, summed over every call.
    step: the number of optimizer steps seen (buckets flagged is_last()).
    """

    def __init__(self, comm=None, codec="default", param_codecs=None, min_size=1024,
                 warmup_steps=0, ef="default", algo="auto", model=None, dense_1d=True,
                 process_group=None, momentum=0.0):
        momentum = float(momentum)
        if not 0.0 <= momentum < 1.0:
            raise ValueError("momentum must be in [0, 1), not %r" % momentum)
        options = None
        if comm is None:
            comm = _group_communicator(process_group)
            if comm is None:
                raise ValueError("comm=None needs a gradwire process group (init_process_group('gradwire')); "
                                 "with another backend pass comm=gradwire.torch.init_communicator()" +
                                 ("" if available() else " (the backend is not built: %s)" % unavailable_reason()))
            options = backend_options(process_group)
        if not isinstance(comm, Communicator):
            raise TypeError("comm must be a gradwire.Communicator, not %s" % type(comm).__name__)
        if codec == "default":
            codec = options.codec if options is not None and options.codec is not None else _DEFAULT_CODEC
        if ef == "default":
            ef = options.ef if options is not None else True
        self.comm = comm
        self.default_spec = None if codec in (None, "none") else codec
        self.rules = [(p, None if s in (None, "none") else s) for p, s in (param_codecs or [])]
        if self.rules and model is None:
            raise ValueError("param_codecs needs model= to know the parameters' names")
        if model is not None and isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        self.names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        self.min_size = int(min_size)
        self.warmup_steps = int(warmup_steps)
        self.use_ef = bool(ef)
        self.algo = algo
        self.dense_1d = bool(dense_1d)
        self.process_group = process_group
        self.step = 0
        self.momentum = momentum
        self._velocity = {}  # id(parameter) -> its velocity (flat), with momentum
        self.stats = {"dense": 0, "compressed": 0, "algos": {}, "wire_bytes": 0, "dense_bytes": 0}
        self._encoded_size = {}
        self._codecs = {}
        self._ef = {}
        self._checked_size = False
        # Every spec is checked now, so a typo fails here with the library's message rather
        # than inside the backward pass.
        for spec in [self.default_spec] + [s for _, s in self.rules]:
            if spec is not None:
                self._codec(spec)
                if self.use_ef and spec.split(":")[0] == "randomk":
                    # Random-k keeps k/n of the energy: under EF each element waits about
                    # n/k steps in the residual, and SGD at an ordinary learning rate diverged.
                    warnings.warn("gradwire: randomk with error feedback sends each element about once every "
                                  "1/ratio steps; on Fashion-MNIST it diverged at the learning rate dense SGD "
                                  "used (docs/training.md). Prefer topk/dgc with EF, or randomk without EF.",
                                  stacklevel=2)
        self._params_by_id = {}
        self._retired = []   # states DDP's rebuild replaced, until their slices are taken
        self._claimed = set()  # (source, parameter) slices already carried into a new state
        self._restored = {}  # bucket index -> saved state, from load_state_dict
        self._restored_velocity = {}  # parameter key -> velocity, from load_state_dict
        self._pending = queue.Queue()
        self._async_error = None  # a failure of a bucket whose future completed on its stream
        self._waiter = threading.Thread(target=self._complete, name="gradwire-hook", daemon=True)
        self._waiter.start()

    def codec_for(self, bucket):
        """The spec a bucket is sent with this step, or None for dense."""
        if self.step < self.warmup_steps:
            return None
        tensor = bucket.buffer()
        if tensor.dtype != torch.float32 or tensor.numel() < self.min_size:
            return None
        params = bucket.parameters()
        if self.dense_1d and params and all(p.dim() <= 1 for p in params):
            return None
        spec = self.default_spec
        for pattern, rule_spec in self.rules:
            if any(fnmatch.fnmatchcase(self.names.get(id(p), ""), pattern) for p in params):
                spec = rule_spec
                break
        return spec

    def _codec(self, spec):
        c = self._codecs.get(spec)
        if c is None:
            c = self._codecs[spec] = Codec(spec)
        return c

    def ef_state(self, index):
        """The EF state of bucket index (None before its first compressed step)."""
        entry = self._ef.get(index)
        return entry[2] if entry else None

    def _ef_state(self, bucket, spec, count):
        # One state per bucket index, carried on while spec, size and parameters are those it
        # was made for. When DDP rebuilds its buckets (after the first iteration) or a job
        # resumes from a checkpoint, a new state takes each parameter's slice of residual from
        # wherever that parameter was (never another parameter's), so no gradient is lost.
        index = bucket.index()
        params = list(bucket.parameters())
        layout = tuple(id(p) for p in params)
        entry = self._ef.get(index)
        device = self._ef_device(bucket.buffer())
        if (entry is not None and entry[0] == spec and entry[1] == layout and entry[2].count == count
                and entry[2].device == device):
            return entry[2]
        for p in params:
            self._params_by_id[id(p)] = p
        ef = ErrorFeedback(count, device=device)
        key = self._param_key(params)
        saved = self._restored.get(index)
        untouched = saved is not None and not any((("restored", index), n) in self._claimed for n in saved["params"])
        if untouched and saved["spec"] == spec and saved["count"] == count and saved["params"] == key:
            ef.load(saved["ef"])  # the same bucket: everything, owner-side residual included
            self._claimed.update((("restored", index), name) for name in key)
        else:
            self._carry_residual(ef, spec, params, key)
        if entry is not None:
            self._retired.append(entry)
        self._ef[index] = (spec, layout, ef)
        return ef

    def _ef_device(self, tensor):
        """Where the EF state of a bucket on this tensor's memory lives: None (host), its CUDA
        device, or "standin" (the stand-in accelerator's memory)."""
        if tensor.is_cuda:
            return tensor.device
        if getattr(self.comm, "_standin", False) and _in_standin(tensor):
            return "standin"
        return None

    def take_momentum_from(self, optimizer):
        """Moves a torch.optim.SGD's momentum into the hook: the hook then keeps the velocity
        (before compression) and the optimizer's momentum becomes 0. Call it before the first
        step. Needs the same momentum in every parameter group, no Nesterov, no dampening."""
        if not isinstance(optimizer, torch.optim.SGD):
            raise TypeError("take_momentum_from needs a torch.optim.SGD, not %s" % type(optimizer).__name__)
        if self.step or self._velocity:
            raise RuntimeError("take_momentum_from must come before the first step")
        groups = optimizer.param_groups
        momenta = {float(g.get("momentum", 0.0)) for g in groups}
        if len(momenta) != 1:
            raise ValueError("the optimizer's parameter groups have different momenta %s" % sorted(momenta))
        if any(g.get("nesterov") for g in groups) or any(float(g.get("dampening", 0.0)) for g in groups):
            raise ValueError("the hook's momentum is plain heavy-ball: no Nesterov, no dampening")
        momentum = momenta.pop()
        if not 0.0 <= momentum < 1.0:
            raise ValueError("momentum must be in [0, 1), not %r" % momentum)
        if self.momentum and momentum:
            raise ValueError("the hook already has momentum %r and the optimizer %r" % (self.momentum, momentum))
        self.momentum = self.momentum or momentum
        for g in groups:
            g["momentum"] = 0.0
        return self.momentum

    def _apply_momentum(self, bucket, tensor):
        """u = momentum * u + g, then the bucket carries u. The velocity is kept per parameter,
        so it follows a parameter into whatever bucket DDP puts it (DDP rebuilds its buckets
        after the first step) and into a checkpoint."""
        params = bucket.parameters()
        if sum(p.numel() for p in params) != tensor.numel():
            raise RuntimeError("bucket %d holds %d elements but its parameters %d: the hook cannot place the "
                               "momentum" % (bucket.index(), tensor.numel(), sum(p.numel() for p in params)))
        grads, vels, off = [], [], 0
        for p in params:
            g = tensor[off:off + p.numel()]
            off += p.numel()
            u = self._velocity.get(id(p))
            if u is None or u.numel() != g.numel() or u.device != g.device:
                u = torch.zeros_like(g)
                saved = self._restored_velocity.pop(self._param_key([p])[0], None)
                if saved is not None and saved.numel() == u.numel():
                    u.copy_(saved.reshape(-1))
                self._velocity[id(p)] = u
                self._params_by_id[id(p)] = p
            grads.append(g)
            vels.append(u)
        torch._foreach_mul_(vels, self.momentum)
        torch._foreach_add_(vels, grads)
        for g, u in zip(grads, vels):
            g.copy_(u)

    def _carry_residual(self, ef, spec, params, key):
        """Fills a new state's residual from the slices its parameters had in older states of
        the same spec: live and replaced ones of this process, matched by parameter identity
        (two parameters of one shape are still two parameters, and a state made this step for
        another bucket, whose all-reduce may be in flight, never holds one of ours), then
        restored ones, matched by name (by shape without model=). Each slice is taken once (a
        parameter that moved to another bucket leaves its old bucket, which DDP then rebuilds
        too)."""
        import numpy as np
        wanted = {id(p) for p in params}
        by_id, by_name, step = {}, {}, 0
        for old_spec, old_layout, old in list(self._ef.values()) + self._retired:
            if old_spec != spec:
                continue
            src, r, off = id(old), None, 0
            for pid in old_layout:
                n = self._params_by_id[pid].numel()
                if pid in wanted and pid not in by_id and (src, pid) not in self._claimed:
                    r = old.residual() if r is None else r
                    by_id[pid] = r[off:off + n]
                    self._claimed.add((src, pid))
                    step = max(step, old.step)
                off += n
        names = {name for p, name in zip(params, key) if id(p) not in by_id}
        for index, saved in self._restored.items():
            if saved["spec"] != spec:
                continue
            full, off = None, 0
            for name, n in zip(saved["params"], saved["numels"]):
                src = ("restored", index)
                if name in names and name not in by_name and (src, name) not in self._claimed:
                    if full is None:
                        loaded = ErrorFeedback(saved["count"])
                        loaded.load(saved["ef"])
                        full, step = loaded.residual(), max(step, loaded.step)
                    by_name[name] = full[off:off + n]
                    self._claimed.add((src, name))
                off += n
        if not by_id and not by_name:
            return
        res = np.zeros(ef.count, dtype=np.float32)
        off = 0
        for p, name in zip(params, key):
            got = by_id.get(id(p))
            if got is None:
                got = by_name.pop(name, None)
            if got is not None and len(got) == p.numel():
                res[off:off + p.numel()] = got
            off += p.numel()
        ef.set_residual(res)
        ef.step = step

    def _param_key(self, params):
        """What identifies parameters across processes: names when the model is known, else
        shapes (then two parameters of one shape share a key: give model= to resume exactly)."""
        return [self.names.get(id(p)) or tuple(p.shape) for p in params]

    def state_dict(self):
        """The hook's state for a checkpoint: step, statistics and every bucket's EF state."""
        buckets = {}
        for index, saved in self._restored.items():  # restored but not used again yet
            buckets[index] = saved
        for index, (spec, layout, ef) in self._ef.items():
            params = [self._params_by_id[pid] for pid in layout]
            buckets[index] = {"spec": spec, "count": ef.count, "ef": ef.save(),
                              "params": self._param_key(params), "numels": [p.numel() for p in params]}
        stats = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.stats.items()}
        velocity = [(self._param_key([self._params_by_id[pid]])[0], u.detach().cpu().clone())
                    for pid, u in self._velocity.items()]
        return {"version": 1, "step": self.step, "stats": stats, "buckets": buckets, "momentum": self.momentum,
                "velocity": velocity}

    def load_state_dict(self, state):
        """Restores state_dict(). A bucket of the same index, codec, size and parameters gets
        its whole saved state back; other buckets take their parameters' residual slices."""
        if not isinstance(state, dict) or state.get("version") != 1:
            raise ValueError("not a gradwire HookState state_dict (version 1)")
        self.step = int(state["step"])
        self.stats = {k: (dict(v) if isinstance(v, dict) else v) for k, v in state["stats"].items()}
        if float(state.get("momentum", 0.0)) != self.momentum:
            raise ValueError("the checkpoint's hook momentum is %r but this HookState's is %r"
                             % (state.get("momentum", 0.0), self.momentum))
        self._velocity = {}
        self._restored_velocity = {tuple(k) if isinstance(k, list) else k: v for k, v in state.get("velocity", [])}
        self._ef = {}
        self._retired = []
        self._claimed = set()
        self._restored = {}
        for i, b in state["buckets"].items():
            b = dict(b)
            b["params"] = [tuple(n) if isinstance(n, list) else n for n in b["params"]]
            self._restored[int(i)] = b

    def _complete(self):
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, fut, tensor = item
            try:
                request.wait()
            except Exception as e:  # the trainer sees it when DDP waits on the future
                if fut is None:  # completed on the stream already: the next hook call raises it
                    self._async_error = self._async_error or e
                else:
                    fut.set_exception(e)
            else:
                if fut is not None:
                    fut.set_result(tensor)

    def _check_size(self):
        if self._checked_size:
            return
        self._checked_size = True
        if dist.is_initialized():
            n = dist.get_world_size(self.process_group)
            if n != self.comm.size:
                raise RuntimeError("the gradwire communicator has %d ranks but DDP's process group has %d"
                                   % (self.comm.size, n))

    def close(self):
        """Stops the completion thread (after requests already queued); the communicator stays."""
        if self._waiter.is_alive():
            self._pending.put(None)
            self._waiter.join()


def _in_standin(tensor):
    from .core import _in_standin as inside
    return inside(tensor)


def tensor_device(tensor):
    """None for a CPU tensor, else its CUDA device (where its EF state must live)."""
    return None if tensor.device.type == "cpu" else tensor.device


def _carried(tensor):
    """Whether gradwire carries this bucket: a floating-point one on the CPU, or on a CUDA
    device when the library has the device collectives."""
    if str(tensor.dtype).replace("torch.", "") not in _FLOAT_DTYPES:
        return False
    if tensor.device.type == "cpu":
        return True
    return tensor.device.type == "cuda" and _lib.has("gw_iallreduce_device")


def _fallback(state, tensor):
    """What DDP does without a hook: divide, then sum over its process group."""
    group = state.process_group
    tensor.div_(dist.get_world_size(group))
    work = dist.all_reduce(tensor, group=group, async_op=True)
    return work.get_future().then(lambda f: f.value()[0])


def comm_hook(state, bucket):
    """DDP comm hook: averages the bucket over ranks through gradwire; returns a Future that
    completes with the averaged bucket."""
    tensor = bucket.buffer()
    # A future that completes with a CUDA tensor must name its device (torch checks it).
    fut = torch.futures.Future(devices=[tensor.device]) if tensor.is_cuda else torch.futures.Future()
    try:
        if state._async_error is not None:
            raise RuntimeError("gradwire: an earlier bucket's all-reduce failed after its future completed on the "
                               "stream: %s" % state._async_error)
        state._check_size()
        is_last = bucket.is_last()
        if not _carried(tensor):
            if is_last:
                state.step += 1
            return _fallback(state, tensor)
        if state.momentum:
            state._apply_momentum(bucket, tensor)
        spec = state.codec_for(bucket)
        codec = state._codec(spec) if spec is not None else None
        n = tensor.numel()
        dense_bytes = n * tensor.element_size()
        stats = state.stats
        if codec is not None:
            # "auto" goes to the library as is: its policy decides (what it reports for these
            # arguments is what the stats record).
            algo = state.algo
            ran = algo if algo != "auto" else state.comm.algo_for(tensor, codec)
            stats["algos"][bucket.index()] = ran
            ef = state._ef_state(bucket, spec, n) if state.use_ef else None
            if ran != "ring":
                stats["compressed"] += 1
                key = (spec, n)
                if key not in state._encoded_size:
                    state._encoded_size[key] = codec.max_encoded_bytes(n)
                stats["wire_bytes"] += state._encoded_size[key]
            else:  # the library's dense threshold sent it dense
                stats["dense"] += 1
                stats["wire_bytes"] += dense_bytes
        else:
            algo, ef = "auto", None
            stats["dense"] += 1
            stats["wire_bytes"] += dense_bytes
        stats["dense_bytes"] += dense_bytes
        # Visible in torch.profiler, named with what the call carries.
        with torch.autograd.profiler.record_function(
                "gradwire:all_reduce bucket=%d numel=%d dtype=%s codec=%s algo=%s"
                % (bucket.index(), n, str(tensor.dtype).replace("torch.", ""), spec or "none",
                   stats["algos"].get(bucket.index(), "ring") if codec is not None else "ring")):
            request = state.comm.iallreduce(tensor, op="avg", codec=codec, ef=ef, algo=algo)
        if is_last:
            state.step += 1
        if tensor.is_cuda:
            # As ProcessGroupNCCL's futures: the current stream waits for the all-reduce on the
            # device (no host wait), and the future completes at once on that stream, so DDP's
            # backward goes on and its later work is ordered after the bucket's result.
            request.stream_wait(torch.cuda.current_stream(tensor.device).cuda_stream)
            fut.set_result(tensor)
            state._pending.put((request, None, tensor))  # reaped there; an error is raised next call
            return fut
    except Exception as e:
        fut.set_exception(e)
        return fut
    state._pending.put((request, fut, tensor))
    return fut
