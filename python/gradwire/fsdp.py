"""FSDP2 (torch.distributed.fsdp.fully_shard) with gradwire's compressed reduce-scatter.

FSDP2 averages each module's gradients with one reduce-scatter of a flat buffer laid out as
[rank 0's block | rank 1's block | ...], a block being the padded shards of the module's
parameters one after the other. ReduceScatter runs that call on gradwire: dense and exact, or
with a codec and an error-feedback state per buffer size, kept across steps. compress_fsdp
installs one on every FSDP module of a model, keeps chosen parameters exact (embeddings and
norms by default), and for HSDP adds the all-reduce between replicas as a hook:

    import gradwire.torch as gwt
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    gw = gwt.compress_fsdp(model, codec="qsgd:bits=8")       # EF on, embeddings and norms exact
    ...
    dcp.save({"model": model.state_dict(), "gradwire": gw}, checkpoint_id=path)   # residuals too

Exact parameters inside a module that also holds compressed ones stay exact: the buffer is
viewed as [world, block], the compressed parameters' columns go through the compressed call
and the exact ones through a dense call, and both results are put back in place.

Error feedback costs memory: a rank's residual covers everything it sends, i.e. the whole
(padded) gradient of the module's compressed parameters in fp32, world times its shard.

The parameters' all-gathers (forward, and backward again with reshard_after_forward) carry
twice the reduce-scatter's bytes. compress_fsdp(param_codec=...) installs an AllGather that
sends them quantized (ZeRO++'s qwZ), e.g. "qsgd:bits=8,rounding=nearest,bucket=256": every
rank encodes its block of the sharded parameters once and every rank decodes every block, its
own too, so the unsharded parameters that forward and backward use are the same bits on every
rank. Only those unsharded copies are quantized: the sharded parameters the optimizer updates
(FSDP copies them into the all-gather buffer first) stay exact, and each all-gather quantizes
them afresh (no error feedback: nothing accumulates). Norms and parameters under two
dimensions stay exact there (default_param_exact), going through a raw all-gather.

The communicator is the group's own when FSDP's group is a gradwire process group
(init_process_group("gradwire")), else one made over the group with
gradwire.torch.init_communicator (every rank of the group must then call compress_fsdp, or the
first reduce-scatter, at the same point).
"""
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed import ReduceOp

try:  # FSDP2 (torch 2.6 and later); on older torch importing gradwire.torch still works
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _FSDPReduceScatter
except Exception:  # torch without FSDP2 (Debian's 1.13 even fails importing its FSDP1 under Python 3.11)
    FSDPModule = None
    _FSDPReduceScatter = object
try:  # the custom all-gather (set_custom_all_gather) came with the custom reduce-scatter
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _FSDPAllGather
except Exception:
    _FSDPAllGather = object

from . import _lib
from ._backend import available, get_communicator, is_gradwire_group
from ._lib import GradwireError
from .core import Codec, Communicator, ErrorFeedback

__all__ = ["AllGather", "FSDPCompression", "ReduceScatter", "ReplicateAllReduce", "compress_fsdp", "default_exact",
           "default_param_exact"]

_STATE_VERSION = 1

# Modules whose parameters compress_fsdp keeps exact by default: a lookup table (an embedding
# row is only touched by the tokens that use it, and its error would wait in the residual for
# as long) and the norms' scales (few values, each one scaling a whole channel).
_NORM_MODULES = (nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm,
                 nn.modules.batchnorm._NormBase) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())
_EXACT_MODULES = (nn.Embedding, nn.EmbeddingBag) + _NORM_MODULES

# Codecs that keep every value of a weight (an all-gather's output is the weights forward uses:
# a sparsifier or a sign would zero or flatten most of them).
_WEIGHT_CODECS = ("qsgd", "bf16", "fp16")
_GATHER_DTYPES = ("float32", "float16", "bfloat16")  # what the compressed all-gather takes


def default_exact(name, param, module=None):
    """compress_fsdp's default rule: exact for parameters of embeddings and norms (module),
    and for every parameter of fewer than two dimensions (biases, scales)."""
    if module is not None and isinstance(module, _EXACT_MODULES):
        return True
    return param.dim() < 2


def default_param_exact(name, param, module=None):
    """compress_fsdp's default rule for the parameters' all-gather (param_codec): exact for the
    parameters of norms (module) and every parameter under two dimensions (biases, norms'
    scales: few bytes, each value shifting or scaling a whole channel). Embeddings are quantized
    like every other matrix, as ZeRO++ quantizes all weights: unlike a gradient's error, a
    weight's does not wait in a residual for the rows a batch touches; each all-gather
    quantizes the exact sharded weights afresh."""
    if module is not None and isinstance(module, _NORM_MODULES):
        return True
    return param.dim() < 2


def _gradwire_op(op):
    """(gradwire op, factor to multiply the input by first, or None) for FSDP's reduce op."""
    kind = getattr(op, "op", op)  # a ReduceOp object (PREMUL_SUM carries its factor) or its type
    if kind == ReduceOp.AVG:
        return "avg", None
    if kind == ReduceOp.SUM:
        return "sum", None
    if kind == ReduceOp.PREMUL_SUM:
        return "sum", float(op.factor)
    raise GradwireError(_lib.GW_ERR_UNSUPPORTED, "gradwire's FSDP reduce-scatter takes sum, avg and premul_sum, "
                        "not %s" % (kind,))


def _torch_op(op):
    return ReduceOp.AVG if op == "avg" else ReduceOp.SUM


def _codec(codec):
    if codec is None or codec == "none":
        return None
    if isinstance(codec, str):
        return Codec(codec)
    if isinstance(codec, Codec):
        return codec
    raise TypeError("codec must be a spec string, a gradwire.Codec or None, not %s" % type(codec).__name__)


def _weight_codec(codec):
    """A codec for the parameters' all-gather, checked now (compress_fsdp's time, not the first
    forward's)."""
    c = _codec(codec)
    if c is None:
        return None
    if c.name not in _WEIGHT_CODECS:
        raise GradwireError(_lib.GW_ERR_INVALID_ARGUMENT, "param_codec %r: a weight codec must keep every value "
                            "(qsgd with rounding=nearest, bf16 or fp16), not %s, whose decode is the weights "
                            "forward runs on" % (c.spec, c.name))
    if not _lib.has("gw_allgather_compressed") or not _lib.has("gw_iallgather_compressed"):
        raise GradwireError(_lib.GW_ERR_UNSUPPORTED, "this libgradwire has no compressed all-gather "
                            "(gw_allgather_compressed): param_codec needs a newer library")
    return c


def _make_communicator(group):
    """(communicator for the group's ranks, whether we made it and must close it)."""
    if available() and dist.is_initialized() and is_gradwire_group(group):
        return get_communicator(group), False
    from .torch import init_communicator  # gradwire.torch imports this module
    return init_communicator(group), True


def _ef_device(tensor):
    return tensor.device if tensor.is_cuda else None


class _Columns:
    """Which columns of a [world, block] buffer go compressed and which exact."""

    def __init__(self, widths, exact):
        self.block = sum(widths)
        comp, ex, off = [], [], 0
        for w, e in zip(widths, exact):
            (ex if e else comp).extend(range(off, off + w))
            off += w
        self.n_compressed, self.n_exact = len(comp), len(ex)
        self.compressed = torch.tensor(comp, dtype=torch.long)
        self.exact = torch.tensor(ex, dtype=torch.long)
        self._on = {}

    def index(self, which, device):
        """The column indices (compressed or exact) on device."""
        key = (which, str(device))
        t = self._on.get(key)
        if t is None:
            t = self._on[key] = getattr(self, which).to(device)
        return t


class _Layout:
    """Which parameters (and so which columns of a block) one FSDP parameter group's
    reduce-scatter carries, and which of them stay exact.

    FSDP reduces only the parameters that got a gradient this step; it passes them to the
    group's _prepare_reduce_scatter_inputs right before the reduce-scatter, so that function
    is wrapped here to learn the layout of the call that follows. Without it (another torch),
    a block of the size of all parameters is taken to hold all of them."""

    def __init__(self, param_group, exact_flags, names):
        self.param_group = param_group
        self.exact = exact_flags  # FSDPParam -> bool, by identity
        self.names = names        # FSDPParam -> parameter name
        self.world = param_group.mesh_info.shard_mesh_size
        self._last = None
        self._cache = {}
        orig = getattr(param_group, "_gradwire_prepare_orig", None) or param_group._prepare_reduce_scatter_inputs
        param_group._gradwire_prepare_orig = orig

        def prepare(fsdp_params, unsharded_grads, world_size):
            sizes = orig(fsdp_params, unsharded_grads, world_size)
            self._last = [(p, s.numel() // world_size) for p, s in zip(fsdp_params, sizes)]
            return sizes

        param_group._prepare_reduce_scatter_inputs = prepare

    def _full(self):
        return [(p, p.padded_sharded_param_size.numel()) for p in self.param_group.fsdp_params
                if p.sharded_param.requires_grad]

    def full_compressed_columns(self):
        """Compressed columns of a block when every parameter has a gradient."""
        return sum(w for p, w in self._full() if not self.exact[p])

    def columns(self, block):
        """(_Columns, None) for a block of this many elements that mixes exact and compressed
        parameters, else (None, whether all of it is exact)."""
        # The layout FSDP announced for this step (the reduce-scatter and the replicas' hook
        # that follows it both read it), else all parameters.
        entries = self._last if self._last is not None and sum(w for _, w in self._last) == block else None
        if entries is None:
            entries = self._full()
            if sum(w for _, w in entries) != block:
                kinds = {self.exact[p] for p, _ in entries}
                if len(kinds) == 1:
                    return None, kinds.pop()
                raise RuntimeError("gradwire FSDP: a reduce-scatter block of %d elements matches no layout of "
                                   "the module's parameters; cannot tell exact columns from compressed ones" % block)
        flags = tuple(self.exact[p] for p, _ in entries)
        if len(set(flags)) == 1:
            return None, flags[0]
        key = (tuple(w for _, w in entries), flags)
        cols = self._cache.get(key)
        if cols is None:
            cols = self._cache[key] = _Columns([w for _, w in entries], flags)
        return cols, None


class _GatherLayout:
    """Which columns of one FSDP parameter group's all-gather block are compressed and which
    exact. FSDP2 gathers every parameter of the group (with a gradient or not), its all-gather
    input being each parameter's padded shard one after the other (foreach_all_gather's
    copy-in), the same columns as the reduce-scatter's when every parameter has a gradient.
    Where the block is not that (a tensor subclass's fsdp_pre_all_gather, another torch), or the
    call is the backward's re-gather over a post-forward mesh (reshard_after_forward=N), the
    all-gather goes raw: the post-forward shards are already the forward's decoded bits, which a
    raw all-gather gives back unchanged, where a second quantization would move them."""

    def __init__(self, param_group, exact_flags):
        self.param_group = param_group
        self.exact = exact_flags  # FSDPParam -> bool, by identity
        self.world = param_group.mesh_info.shard_mesh_size
        self._cache = {}
        self.mismatch = None  # why the last unexpected block went raw

    def widths(self):
        return [fp.padded_sharded_param_size.numel() for fp in self.param_group.fsdp_params]

    def post_forward(self, world):
        """Whether this call is the re-gather over the post-forward mesh."""
        return bool(getattr(self.param_group, "is_sharded_post_forward", False)) or world != self.world

    def columns(self, block, world):
        """(_Columns, None) for a block that mixes exact and compressed parameters, else (None,
        whether all of it goes raw)."""
        pg = self.param_group
        if self.post_forward(world):
            return None, True
        fps = pg.fsdp_params
        if any(hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather") for fp in fps):
            return None, True
        widths = self.widths()
        if sum(widths) != block:
            self.mismatch = ("an all-gather block of %d elements is not the %d of the parameters' padded shards"
                             % (block, sum(widths)))
            return None, True
        flags = tuple(self.exact[fp] for fp in fps)
        if len(set(flags)) == 1:
            return None, flags[0]
        key = (tuple(widths), flags)
        cols = self._cache.get(key)
        if cols is None:
            cols = self._cache[key] = _Columns(widths, flags)
        return cols, None


class _EFBook:
    """Error-feedback states by buffer size, saved and restored as rank-local blobs."""

    def __init__(self):
        self.states = {}     # element count -> ErrorFeedback
        self._restored = {}  # element count -> blob not yet claimed

    def get(self, count, like):
        ef = self.states.get(count)
        device = _ef_device(like)
        if ef is None or ef.device != device:
            # A state made on the host for a checkpoint template (ensure) moves to the buffer's
            # device with whatever it holds.
            blob = ef.save() if ef is not None else self._restored.pop(count, None)
            ef = self.states[count] = ErrorFeedback(count, device=device)
            if blob is not None:
                ef.load(blob)
        return ef

    def ensure(self, count):
        """Makes the (host) state of this size now, so a checkpoint template lists it."""
        if count > 0 and count not in self.states:
            self.states[count] = ErrorFeedback(count)
            blob = self._restored.pop(count, None)
            if blob is not None:
                self.states[count].load(blob)

    def state_dict(self):
        out = {str(n): blob for n, blob in self._restored.items()}
        out.update({str(n): ef.save() for n, ef in self.states.items()})
        return out

    def load_state_dict(self, blobs):
        self._restored = {}
        for n, blob in blobs.items():
            n = int(n)
            if n in self.states:
                self.states[n].load(blob)
            else:
                self._restored[n] = blob

    def residual_norm(self):
        return sum(float((ef.residual().astype("float64") ** 2).sum()) for ef in self.states.values()) ** 0.5


class _Work(dist.Work):
    """A reduce-scatter or all-gather in flight (async_op=True): wait() finishes it, columns
    included."""

    def __init__(self, requests, finish):
        super().__init__()
        self._requests = requests
        self._finish = finish
        self._done = False

    def wait(self, timeout=None):
        if not self._done:
            for r in self._requests:
                r.wait()
            self._done = True
            self._finish()
        return True

    def is_completed(self):
        return self._done or all(r.test() for r in self._requests)


class _DistRequest:
    def __init__(self, work):
        self._work = work

    def wait(self):
        self._work.wait()

    def test(self):
        return self._work.is_completed()


class _Stats:
    def __init__(self):
        self.calls = 0              # reduce-scatters (or all-reduces) run
        self.compressed_elements = 0
        self.exact_elements = 0
        self.wire_bytes = 0         # what this rank sends, by the codec's encoded size
        self.dense_bytes = 0        # what a dense exchange of the same buffers sends
        self.measured_bytes = 0     # bytes_sent of the communicator during the blocking calls

    def as_dict(self):
        return dict(vars(self))


class _Base:
    def __init__(self, codec, ef, comm, name):
        self.codec = _codec(codec)
        self.use_ef = bool(ef) and self.codec is not None
        self.comm = comm
        self._owns_comm = False
        self.name = name
        self.layout = None
        self.ef = _EFBook()
        self.stats = _Stats()

    def _comm_for(self, group):
        if self.comm is None:
            self.comm, self._owns_comm = _make_communicator(group)
        return self.comm

    def _parts(self, block):
        """(columns or None, codec of a uniform buffer)."""
        if self.codec is None:
            return None, None
        if self.layout is None:
            return None, self.codec
        cols, all_exact = self.layout.columns(block)
        if cols is None:
            return None, (None if all_exact else self.codec)
        return cols, self.codec

    def _account(self, n_compressed, n_exact, codec, esize, world, dtype):
        s = self.stats
        s.calls += 1
        s.compressed_elements += n_compressed
        s.exact_elements += n_exact
        s.dense_bytes += int(self._msgs(world) * (n_compressed + n_exact) * esize)
        wire = n_exact * esize
        if n_compressed:
            wire += codec.max_encoded_bytes(n_compressed, dtype) if codec is not None else n_compressed * esize
        s.wire_bytes += int(self._msgs(world) * wire)

    @staticmethod
    def _bytes_before(comm, async_op):
        """The communicator's bytes sent before a blocking call (its wire bytes are then
        measured); None for a non-blocking one, whose bytes other calls may mix with."""
        return comm.stats() if not async_op and hasattr(comm, "stats") else None

    def _complete(self, comm, before, requests, finish, async_op):
        """Ends a call: the bytes it sent (blocking calls), then a _Work over its requests that
        runs finish when waited for, or finish now."""
        if before is not None:
            after = comm.stats()
            if after is not None:
                self.stats.measured_bytes += after["bytes_sent"] - before["bytes_sent"]
        if async_op:
            return _Work(requests, finish)
        finish()
        return None

    def state_dict(self):
        return {"rank%d" % dist.get_rank(): self.ef.state_dict()}

    def load_state_dict(self, state):
        mine = state.get("rank%d" % dist.get_rank())
        if mine is None:
            raise ValueError("gradwire FSDP %s: the checkpoint has no error-feedback state for rank %d (saved with "
                             "another world size?)" % (type(self).__name__, dist.get_rank()))
        self.ef.load_state_dict(mine)

    def close(self):
        if self._owns_comm and self.comm is not None:
            self.comm.close()
        self.comm = None


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


class ReduceScatter(_Base, _FSDPReduceScatter):
    """FSDP2's ReduceScatter on gradwire (module.set_custom_reduce_scatter(rs)).

    codec: None (dense, exact, in the buffer's dtype), a spec ("qsgd:bits=8", "topk:ratio=0.01",
      "bf16:rounding=stochastic", ...) or a gradwire.Codec. ef: keep an error-feedback state per
      buffer size (for a lossy codec). comm: the gradwire Communicator to run on (None: the
      group's own when FSDP's group is a gradwire group, else one made over the group at the
      first call; every rank of the group reaches that call together). name: for messages.

    Alone it compresses the whole buffer; compress_fsdp binds it to the module's parameters so
    that exact ones stay exact. state_dict()/load_state_dict(): the residuals, rank-local (one
    key per rank), for torch.distributed.checkpoint. stats: calls, elements and bytes.
    """

    def __init__(self, codec=None, ef=True, comm=None, name=""):
        _Base.__init__(self, codec, ef, comm, name)
        if comm is not None and not isinstance(comm, Communicator):
            raise TypeError("comm must be a gradwire.Communicator, not %s" % type(comm).__name__)

    @staticmethod
    def _msgs(world):
        return world - 1  # each rank's contribution to each other rank's block

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def _one(self, comm, group, x, out, op, codec, async_op):
        ef = self.ef.get(x.numel(), x) if codec is not None and self.use_ef else None
        if hasattr(comm, "reduce_scatter"):
            if async_op:
                return comm.ireduce_scatter(x, out, op=op, codec=codec, ef=ef)
            comm.reduce_scatter(x, out, op=op, codec=codec, ef=ef)
            return None
        if codec is not None:
            raise GradwireError(_lib.GW_ERR_UNSUPPORTED, "this gradwire has no compressed reduce-scatter "
                                "(Communicator.reduce_scatter): FSDP can only run dense here")
        work = dist.reduce_scatter_tensor(out, x, op=_torch_op(op), group=group, async_op=async_op)
        return _DistRequest(work) if async_op else None

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        comm = self._comm_for(group)
        world = group.size() if group is not None else dist.get_world_size()
        x, out = input_tensor, output_tensor
        block = out.numel()
        if x.numel() != world * block:
            raise GradwireError(_lib.GW_ERR_INVALID_ARGUMENT, "reduce-scatter input of %d elements for %d ranks of "
                                "%d" % (x.numel(), world, block))
        gop, factor = _gradwire_op(op)
        if factor is not None and factor != 1.0:
            x.mul_(factor)  # FSDP's own buffer, made for this call
        cols, codec = self._parts(block)
        before = self._bytes_before(comm, async_op)
        if cols is None:
            n_c, n_e = (block, 0) if codec is not None else (0, block)
            self._account(n_c, n_e, codec, x.element_size(), world, _dtype_name(x))
            req = self._one(comm, group, x, out, gop, codec, async_op)
            requests, finish = ([req] if req is not None else []), (lambda: None)
        else:
            x2 = x.view(world, block)
            ci, ei = cols.index("compressed", x.device), cols.index("exact", x.device)
            xc = x2.index_select(1, ci).reshape(-1)
            xe = x2.index_select(1, ei).reshape(-1)
            oc = out.new_empty(cols.n_compressed)
            oe = out.new_empty(cols.n_exact)
            self._account(cols.n_compressed, cols.n_exact, codec, x.element_size(), world, _dtype_name(x))
            # Every rank makes the two calls in this order.
            requests = [r for r in (self._one(comm, group, xc, oc, gop, codec, async_op),
                                    self._one(comm, group, xe, oe, gop, None, async_op)) if r is not None]

            def finish():
                out.index_copy_(0, ci, oc)
                out.index_copy_(0, ei, oe)
        return self._complete(comm, before, requests, finish, async_op)

    def __repr__(self):
        return "gradwire.torch.ReduceScatter(%r, codec=%r, ef=%r)" % (
            self.name, self.codec.spec if self.codec is not None else None, self.use_ef)


class AllGather(_Base, _FSDPAllGather):
    """FSDP2's parameter AllGather on gradwire (module.set_custom_all_gather(ag)), on a
    compressed wire: codec (a weight codec: "qsgd:bits=8,rounding=nearest,bucket=256", "bf16",
    "fp16", or a gradwire.Codec; None: a raw all-gather) quantizes every rank's block once and
    every rank decodes every block, its own too, so that all ranks hold the same unsharded
    parameters. FSDP's all-gather input is a copy of the sharded parameters in the output's own
    block (in place): the sharded parameters themselves are never touched. comm, name: as
    ReduceScatter's.

    Alone it compresses the whole float32/float16/bfloat16 buffer; compress_fsdp binds it to the
    module's parameters so that exact ones (default_param_exact) go through a raw all-gather.
    A buffer of another dtype (FSDP gathers mixed dtypes as uint8) goes raw. Host tensors only
    with a codec (the library's device path, float32 on a stream, is not wired to FSDP's
    all-gather streams here). stats: as ReduceScatter's (world - 1 messages of its block per
    rank)."""

    def __init__(self, codec=None, comm=None, name=""):
        _Base.__init__(self, _weight_codec(codec), False, comm, name)
        if comm is not None and not isinstance(comm, Communicator):
            raise TypeError("comm must be a gradwire.Communicator, not %s" % type(comm).__name__)

    @staticmethod
    def _msgs(world):
        return world - 1  # its block to every other rank

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def _gather_parts(self, block, world, dtype):
        """(columns or None, codec of a uniform buffer or None for raw)."""
        if self.codec is None or dtype not in _GATHER_DTYPES:
            return None, None
        if self.layout is None:
            return None, self.codec
        cols, all_exact = self.layout.columns(block, world)
        if self.layout.mismatch is not None:
            warnings.warn("gradwire FSDP all-gather %r: %s; it goes raw"
                          % (self.name or "<root>", self.layout.mismatch), stacklevel=3)
            self.layout.mismatch = None
        if cols is None:
            return None, (None if all_exact else self.codec)
        return cols, self.codec

    @staticmethod
    def _one(comm, group, x, out, codec, async_op):
        if codec is None and _dtype_name(x) not in _lib.DTYPES:  # float8 and the like: torch's own
            work = dist.all_gather_into_tensor(out, x, group=group, async_op=async_op)
            return _DistRequest(work) if async_op else None
        if async_op:
            return comm.iallgather(x, out, codec=codec)
        comm.allgather(x, out, codec=codec)
        return None

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        world = group.size() if group is not None else dist.get_world_size()
        x, out = input_tensor, output_tensor
        block = x.numel()
        if out.numel() != world * block or out.dtype != x.dtype:
            raise GradwireError(_lib.GW_ERR_INVALID_ARGUMENT, "all-gather output of %d %s elements for %d ranks "
                                "of %d %s" % (out.numel(), out.dtype, world, block, x.dtype))
        if (self.layout is not None and self.layout.post_forward(world)) or \
                (self.comm is not None and self.comm.size != world):
            # The backward's re-gather over a post-forward mesh (reshard_after_forward=N): another
            # group, whose shards already hold the forward's decoded bits. torch's raw all-gather
            # on that group gives them back unchanged.
            self._account(0, block, None, x.element_size(), world, _dtype_name(x))
            return dist.all_gather_into_tensor(out, x, group=group, async_op=async_op) if async_op else \
                dist.all_gather_into_tensor(out, x, group=group)
        comm = self._comm_for(group)
        cols, codec = self._gather_parts(block, world, _dtype_name(x))
        if (cols is not None or codec is not None) and (x.device.type != "cpu" or out.device.type != "cpu"):
            raise GradwireError(_lib.GW_ERR_UNSUPPORTED, "gradwire FSDP all-gather %r: gradwire.fsdp compresses "
                                "the all-gather of host tensors only, this one is on %s (param_codec works with "
                                "FSDP on the CPU; pass param_codec=None to keep FSDP's own all-gather)"
                                % (self.name or "<root>", x.device))
        before = self._bytes_before(comm, async_op)
        if cols is None:
            n_c, n_e = (block, 0) if codec is not None else (0, block)
            self._account(n_c, n_e, codec, x.element_size(), world, _dtype_name(x))
            req = self._one(comm, group, x, out, codec, async_op)
            requests, finish = ([req] if req is not None else []), (lambda: None)
        else:
            ci, ei = cols.index("compressed", x.device), cols.index("exact", x.device)
            # x is out's own block: both parts are copied out of it before anything lands there.
            xc, xe = x.index_select(0, ci), x.index_select(0, ei)
            oc = out.new_empty(world * cols.n_compressed)
            oe = out.new_empty(world * cols.n_exact)
            self._account(cols.n_compressed, cols.n_exact, codec, x.element_size(), world, _dtype_name(x))
            # Every rank makes the two calls in this order.
            requests = [r for r in (self._one(comm, group, xc, oc, codec, async_op),
                                    self._one(comm, group, xe, oe, None, async_op)) if r is not None]

            def finish():
                o2 = out.view(world, block)
                o2.index_copy_(1, ci, oc.view(world, cols.n_compressed))
                o2.index_copy_(1, ei, oe.view(world, cols.n_exact))
        return self._complete(comm, before, requests, finish, async_op)

    def __repr__(self):
        return "gradwire.fsdp.AllGather(%r, codec=%r)" % (self.name,
                                                          self.codec.spec if self.codec is not None else None)


class ReplicateAllReduce(_Base):
    """HSDP's all-reduce between replicas as an FSDP all-reduce hook
    (module.set_all_reduce_hook(hook)), for FSDP sharded over a 1-D mesh of the shard group: FSDP
    hands the hook its reduce-scatter output (this rank's averaged block), which the hook
    averages (op="avg", or "sum") over group, the replicas' ranks of the same shard, through
    gradwire's all-reduce with codec and an error-feedback state per size. Exact columns of a
    bound module go through a dense all-reduce, as in ReduceScatter."""

    def __init__(self, group, codec=None, ef=True, comm=None, op="avg", name=""):
        _Base.__init__(self, codec, ef, comm, name)
        if op not in ("avg", "sum"):
            raise ValueError("op must be 'avg' or 'sum', not %r" % (op,))
        self.group = group
        self.op = op

    @staticmethod
    def _msgs(world):
        return 2.0 * (world - 1) / world  # an all-reduce sends (world - 1) / world of the buffer twice

    def _allreduce(self, comm, x, codec):
        ef = self.ef.get(x.numel(), x) if codec is not None and self.use_ef else None
        comm.allreduce(x, op=self.op, codec=codec, ef=ef)

    def __call__(self, reduce_output):
        comm = self._comm_for(self.group)
        world = comm.size
        x = reduce_output
        if world == 1:
            return
        if not x.is_contiguous():
            raise GradwireError(_lib.GW_ERR_INVALID_ARGUMENT, "the reduce-scatter output is not contiguous")
        cols, codec = self._parts(x.numel())
        before = self._bytes_before(comm, False)
        if cols is None:
            self._account(x.numel() if codec is not None else 0, 0 if codec is not None else x.numel(), codec,
                          x.element_size(), world, _dtype_name(x))
            self._allreduce(comm, x, codec)
        else:
            ci, ei = cols.index("compressed", x.device), cols.index("exact", x.device)
            xc, xe = x.index_select(0, ci), x.index_select(0, ei)
            self._account(cols.n_compressed, cols.n_exact, codec, x.element_size(), world, _dtype_name(x))
            self._allreduce(comm, xc, codec)
            self._allreduce(comm, xe, None)
            x.index_copy_(0, ci, xc)
            x.index_copy_(0, ei, xe)
        self._complete(comm, before, [], lambda: None, False)


class FSDPCompression:
    """What compress_fsdp installed, by FSDP module name ("" is the root): reduce_scatters
    (ReduceScatter), all_reduces (ReplicateAllReduce, HSDP only) and all_gathers (AllGather,
    with param_codec only; they keep no state). A Stateful for
    torch.distributed.checkpoint: state_dict() holds every residual under a key of this rank
    (rank-local state; a plain tensor under one key for all ranks would be saved once, by
    rank 0), and load_state_dict() puts them back."""

    def __init__(self):
        self.reduce_scatters = {}
        self.all_reduces = {}
        self.all_gathers = {}
        self.exact = {}        # parameter name -> True when its gradient stays exact
        self.param_exact = {}  # parameter name -> True when its all-gather stays exact (param_codec only)

    @staticmethod
    def _key(name):
        return name or "<root>"

    def state_dict(self):
        return {"version": _STATE_VERSION, "world": dist.get_world_size(),
                "reduce_scatter": {self._key(n): rs.state_dict() for n, rs in self.reduce_scatters.items()},
                "all_reduce": {self._key(n): h.state_dict() for n, h in self.all_reduces.items()}}

    def load_state_dict(self, state):
        if state.get("version") != _STATE_VERSION:
            raise ValueError("not a gradwire FSDPCompression state (version %d)" % _STATE_VERSION)
        if int(state["world"]) != dist.get_world_size():
            raise ValueError("the gradwire state was saved by %d ranks, this job has %d: residuals are per rank"
                             % (int(state["world"]), dist.get_world_size()))
        for part, objs in (("reduce_scatter", self.reduce_scatters), ("all_reduce", self.all_reduces)):
            saved = state.get(part, {})
            for n, obj in objs.items():
                if self._key(n) in saved:
                    obj.load_state_dict(saved[self._key(n)])

    def stats(self):
        """Totals over every module: {"reduce_scatter": {...}, "all_reduce": {...},
        "all_gather": {...}} (all_gather: the parameters' all-gathers, with param_codec)."""
        out = {}
        for part, objs in (("reduce_scatter", self.reduce_scatters), ("all_reduce", self.all_reduces),
                           ("all_gather", self.all_gathers)):
            tot = _Stats().as_dict()
            for obj in objs.values():
                for k, v in obj.stats.as_dict().items():
                    tot[k] += v
            out[part] = tot
        return out

    def residual_norm(self):
        """The 2-norm of every residual of this rank (reduce-scatters and all-reduces)."""
        objs = list(self.reduce_scatters.values()) + list(self.all_reduces.values())
        return sum(o.ef.residual_norm() ** 2 for o in objs) ** 0.5

    def close(self):
        """Closes the communicators compress_fsdp made (never a process group's own)."""
        for obj in self._objects():
            obj.close()

    def _objects(self):
        return list(self.reduce_scatters.values()) + list(self.all_reduces.values()) + list(self.all_gathers.values())


def _param_group(module):
    groups = module._get_fsdp_state()._fsdp_param_groups
    if len(groups) > 1:
        raise ValueError("gradwire FSDP: a module with several FSDP parameter groups (shard_placement_fn "
                         "meshes) cannot take one custom reduce-scatter")
    return groups[0] if groups else None


def compress_fsdp(model, codec="qsgd:bits=8", ef=True, exact=None, min_size=1024, replicate_group=None,
                  replicate_codec="same", replicate_ef=None, comm=None, replicate_comm=None, param_codec=None,
                  param_exact=None):
    """Installs gradwire's reduce-scatter on every FSDP module of model (after fully_shard, before
    the first backward), and with param_codec its parameter all-gather (before the first
    forward); returns the FSDPCompression (save it with the model's checkpoint).

    codec: the lossy codec of compressed parameters (None: everything dense and exact).
    ef: error feedback for them. exact: predicate (name, param) -> True for parameters to keep
      exact; None: default_exact (embeddings, norms, every parameter under two dimensions).
    min_size: parameters with fewer elements stay exact too.
    replicate_group: HSDP with FSDP sharded over a 1-D mesh of the shard ranks: the group of
      this rank's replicas (the same shard on every replica); gradients are then averaged over
      it after the reduce-scatter by a ReplicateAllReduce hook with replicate_codec ("same":
      codec) and replicate_ef (None: ef), exact parameters dense there too.
    comm / replicate_comm: gradwire Communicators to use instead of the groups' own (or, for
      groups of another backend, instead of new ones made here, collectively, over them).
    param_codec: None keeps FSDP's own parameter all-gathers; a weight codec ("qsgd:bits=8,
      rounding=nearest,bucket=256": int8 blocks, ~3.9x fewer bytes than float32; "bf16";
      "fp16") installs an AllGather on every FSDP module that sends the sharded parameters
      quantized: the unsharded copies forward and backward use are the decode (the same bits on
      every rank), the sharded parameters the optimizer updates stay exact. FSDP on the CPU
      only (host tensors). A bad spec or a codec that drops values (topk, sign, ...) raises here.
    param_exact: predicate (name, param) -> True for parameters whose all-gather stays raw;
      None: default_param_exact (norms, every parameter under two dimensions; embeddings are
      quantized). Parameters under min_size elements stay exact too."""
    if FSDPModule is None:
        raise RuntimeError("gradwire.compress_fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard), which torch %s "
                           "lacks" % torch.__version__)
    if not isinstance(model, nn.Module):
        raise TypeError("model must be an nn.Module")
    if replicate_codec == "same":
        replicate_codec = codec
    replicate_ef = ef if replicate_ef is None else replicate_ef
    pcodec = _weight_codec(param_codec)
    names = {id(p): n for n, p in model.named_parameters()}
    result = FSDPCompression()
    made = {}  # process group -> (communicator, owned), shared by the modules on one group

    def comm_of(group, given):
        if given is not None:
            return given
        for g, (c, _) in made.items():
            if g is group:
                return c
        c, owned = _make_communicator(group)
        made[group] = (c, owned)
        return c

    for mname, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        pg = _param_group(module)
        if pg is None:
            continue
        if pcodec is not None and pg.device.type != "cpu":
            raise GradwireError(_lib.GW_ERR_UNSUPPORTED, "gradwire.compress_fsdp: param_codec %r: module %r runs on "
                                "%s, and gradwire.fsdp compresses the all-gather of host tensors only (FSDP on the "
                                "CPU); pass param_codec=None" % (pcodec.spec, mname or "<root>", pg.device))
        flags, pnames, pflags = {}, {}, {}
        for fp in pg.fsdp_params:
            p = fp.sharded_param
            pname = names.get(id(p)) or getattr(fp, "_param_fqn", None) or fp._module_info.param_name
            owner = fp._module_info.module
            keep = bool(exact(pname, p)) if exact is not None else default_exact(pname, p, owner)
            keep = keep or p.numel() < min_size
            flags[fp], pnames[fp] = keep, pname
            result.exact[pname] = keep
            if pcodec is not None:
                pkeep = bool(param_exact(pname, p)) if param_exact is not None else default_param_exact(pname, p, owner)
                pflags[fp] = pkeep or p.numel() < min_size
                result.param_exact[pname] = pflags[fp]
        if replicate_group is not None and getattr(pg.mesh_info, "replicate_mesh_dim", None) is not None:
            raise ValueError("gradwire.compress_fsdp: module %r is sharded over a 2-D (HSDP) mesh, whose replicas FSDP "
                             "all-reduces itself; for gradwire's replica all-reduce shard over the 1-D shard mesh "
                             "(mesh['shard']) and pass replicate_group" % (mname or "<root>"))
        layout = _Layout(pg, flags, pnames)
        shard_group = pg.mesh_info.shard_process_group
        rs = ReduceScatter(codec, ef=ef, comm=comm_of(shard_group, comm), name=mname)
        rs.layout = layout
        if rs.use_ef:
            rs.ef.ensure(layout.world * layout.full_compressed_columns())
        module.set_custom_reduce_scatter(rs)
        result.reduce_scatters[mname] = rs
        if replicate_group is not None:
            hook = ReplicateAllReduce(replicate_group, replicate_codec, ef=replicate_ef,
                                      comm=comm_of(replicate_group, replicate_comm), name=mname)
            hook.layout = layout
            if hook.use_ef:
                hook.ef.ensure(layout.full_compressed_columns())
            module.set_all_reduce_hook(hook)
            result.all_reduces[mname] = hook
        if pcodec is not None:
            ag = AllGather(param_codec, comm=comm_of(shard_group, comm), name=mname)  # a codec of its own
            ag.layout = _GatherLayout(pg, pflags)
            module.set_custom_all_gather(ag)
            result.all_gathers[mname] = ag
    if not result.reduce_scatters:
        warnings.warn("gradwire.compress_fsdp: the model has no FSDP module (call fully_shard first)", stacklevel=2)
    # The communicators made here belong to the result: the first module's object closes them.
    for c, owned in made.values():
        if owned:
            for obj in result._objects():
                if obj.comm is c:
                    obj._owns_comm = True
                    break
    return result
