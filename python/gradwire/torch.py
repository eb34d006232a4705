"""PyTorch glue: a communicator built over a torch.distributed process group, and a
DistributedDataParallel comm hook that all-reduces gradient buckets through gradwire, with a
codec and an error-feedback state per bucket.

    import torch.distributed as dist
    import gradwire.torch as gwt
    dist.init_process_group("gloo")                  # DDP still needs its process group
    comm = gwt.init_communicator(dense_threshold_bytes=0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = gwt.HookState(comm, codec="topk:ratio=0.01", warmup_steps=100, model=model)
    ddp.register_comm_hook(state, gwt.comm_hook)

CUDA buckets are all-reduced on the device, ordered on the current CUDA stream, with their EF
states in device memory; comm.enable_nccl() (every rank) sends the dense ones through NCCL.

gradwire runs its own communicator beside torch.distributed's process group (its own
connections and progress thread), so whatever else the model does with torch.distributed
(buffers broadcast by DDP, its own all_reduce or barrier calls, other DDP models) keeps working.
"""
import fnmatch
import queue
import threading

import torch
import torch.distributed as dist

from . import _lib
from ._lib import DTYPES
from .core import Codec, Communicator, ErrorFeedback, get_unique_id

__all__ = ["HookState", "comm_hook", "init_communicator"]


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

    comm: a gradwire Communicator over the same ranks as DDP's process group.
    codec: spec (or None / "none" for dense) for buckets that compress.
    param_codecs: [(pattern, spec)] by parameter name (fnmatch, e.g. "encoder.*.weight");
      the first rule that matches any parameter of a bucket gives that bucket's codec
      (spec None or "none": dense). Needs model= (the module DDP wraps).
    min_size: buckets with fewer elements go dense, as do buckets whose parameters are all
      one-dimensional (biases, norms) when dense_1d is set.
    warmup_steps: the first optimizer steps go dense (DGC's warm-up), then compression starts.
    ef: keep an error-feedback state per bucket (keyed by bucket index) for lossy codecs.
    algo: gradwire algorithm name for compressed buckets, or "auto" for the library's policy.
      The policy sends dense any all-reduce under the communicator's dense_threshold_bytes
      (64 KiB by default: make the communicator with dense_threshold_bytes=0 to let min_size
      alone decide), and a library that tunes its choice by timing (GW_TUNE) may pick the
      dense ring where compression does not pay; name an algorithm to always compress.
    process_group: torch.distributed group for buckets gradwire cannot carry (float64):
      those are averaged there, as DDP would do without the hook.

    stats: {"dense": buckets sent dense, "compressed": buckets sent compressed,
      "algos": {bucket index: algorithm}, "wire_bytes": bytes of the messages (the codec's
      encoded size for compressed buckets, 4 bytes an element for dense ones),
      "dense_bytes": what the same buckets weigh dense}, summed over every call.
    step: the number of optimizer steps seen (buckets flagged is_last()).
    """

    def __init__(self, comm, codec="qsgd:bits=8", param_codecs=None, min_size=1024,
                 warmup_steps=0, ef=True, algo="auto", model=None, dense_1d=True,
                 process_group=None):
        if not isinstance(comm, Communicator):
            raise TypeError("comm must be a gradwire.Communicator, not %s" % type(comm).__name__)
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
        self._pending = queue.Queue()
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
        # One state per bucket index. DDP rebuilds its buckets after the first iteration (and
        # a bucket's spec may change): a state only carries on while spec, size and parameters
        # are those it was made for, so a residual is never added to the wrong gradients.
        index = bucket.index()
        layout = tuple(id(p) for p in bucket.parameters())
        entry = self._ef.get(index)
        device = tensor_device(bucket.buffer())
        if (entry is None or entry[0] != spec or entry[1] != layout or entry[2].count != count
                or entry[2].device != device):
            entry = (spec, layout, ErrorFeedback(count, device=device))
            self._ef[index] = entry
        return entry[2]

    def _complete(self):
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, fut, tensor = item
            try:
                request.wait()
            except Exception as e:  # the trainer sees it when DDP waits on the future
                fut.set_exception(e)
            else:
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


def tensor_device(tensor):
    """None for a CPU tensor, else its CUDA device (where its EF state must live)."""
    return None if tensor.device.type == "cpu" else tensor.device


def _carried(tensor):
    """Whether gradwire carries this bucket: float32/16/bf16 on the CPU, or on a CUDA device
    when the library has the device collectives."""
    if str(tensor.dtype).replace("torch.", "") not in DTYPES:
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
        state._check_size()
        is_last = bucket.is_last()
        if not _carried(tensor):
            if is_last:
                state.step += 1
            return _fallback(state, tensor)
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
        request = state.comm.iallreduce(tensor, op="avg", codec=codec, ef=ef, algo=algo)
        if is_last:
            state.step += 1
    except Exception as e:
        fut.set_exception(e)
        return fut
    state._pending.put((request, fut, tensor))
    return fut
