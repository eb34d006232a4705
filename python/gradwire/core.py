"""Codecs, error-feedback states and communicators over the C ABI.

Buffers are contiguous numpy arrays or contiguous torch tensors of float32, float16 or
(torch only) bfloat16. The communicator's collectives also take CUDA tensors: they run on the
device, ordered on the tensor's current CUDA stream (gw_*_device); their EF states are
ErrorFeedback(count, device=...). Every failed library call raises GradwireError with the
library's own message (gw_get_last_error()).
"""
import atexit
import ctypes
import threading
import weakref

from . import _lib
from ._lib import (ALGOS, CODEC_IDS, DECODE_MODES, DTYPES, OPS, GradwireError,
                   MessageInfo, UniqueId, check, lib, make_config)

_INVALID = _lib.GW_ERR_INVALID_ARGUMENT
_UNSUPPORTED = _lib.GW_ERR_UNSUPPORTED

# Communicators this module made and has not closed, oldest first. At interpreter exit they are
# closed newest first while Python is still whole: left to finalisation, __del__ may run after
# this module's globals are gone (and then cannot close), or not at all, and the peers would
# see a dropped connection. (The library's own exit handler closes whatever is still open
# after that; the torch backend's groups are closed by gradwire._backend's handler, which runs
# before this one.)
_open = []
_open_lock = threading.Lock()


def _track(comm):
    with _open_lock:
        _open[:] = [r for r in _open if r() is not None]
        _open.append(weakref.ref(comm))
    return comm


def _close_open_at_exit():
    while True:
        with _open_lock:
            if not _open:
                return
            comm = _open.pop()()
        if comm is not None:
            comm.close()


atexit.register(_close_open_at_exit)


def _cuda(x):
    """Whether x is a CUDA tensor."""
    return type(x).__module__.startswith("torch") and x.device.type == "cuda"


def _stream(x):
    """The current CUDA stream of x's device, as the C ABI's void*."""
    import torch
    return torch.cuda.current_stream(x.device).cuda_stream


def _in_standin(x):
    """Whether tensor x lies in stand-in device memory (gradwire.standin)."""
    if not type(x).__module__.startswith("torch") or x.device.type != "cpu" or x.numel() == 0:
        return False
    if not _lib.has("gw_standin_contains"):
        return False
    yes = ctypes.c_int()
    check(lib.gw_standin_contains(x.data_ptr(), x.numel() * x.element_size(), ctypes.byref(yes)))
    return bool(yes.value)


def _buffer(x, what="buffer", device_ok=False):
    """(pointer, element count, gradwire dtype name) of a contiguous numpy array or CPU tensor
    (or CUDA tensor, where device_ok)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        if x.device.type != "cpu" and not (device_ok and x.device.type == "cuda"):
            raise GradwireError(_UNSUPPORTED, "%s is on %s: this call takes host memory" % (what, x.device))
        if not x.is_contiguous():
            raise GradwireError(_INVALID, "%s is not contiguous" % what)
        name = str(x.dtype).replace("torch.", "")
        if name == "bool":
            name = "uint8"
        if name not in DTYPES:
            raise GradwireError(_INVALID, "%s dtype %s is not one gradwire carries (%s, bool)"
                                % (what, name, ", ".join(DTYPES)))
        return x.data_ptr(), x.numel(), name
    if mod.startswith("numpy"):
        if not x.flags["C_CONTIGUOUS"]:
            raise GradwireError(_INVALID, "%s is not C-contiguous" % what)
        if not x.flags["WRITEABLE"]:
            raise GradwireError(_INVALID, "%s is read-only" % what)
        name = "uint8" if str(x.dtype) == "bool" else str(x.dtype)
        if name not in DTYPES:
            raise GradwireError(_INVALID, "%s dtype %s is not one gradwire carries (%s, bool)"
                                % (what, name, ", ".join(DTYPES)))
        return x.ctypes.data, x.size, name
    raise GradwireError(_INVALID, "%s: expected a numpy array or a torch tensor, got %s" % (what, type(x).__name__))


def _nbytes(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.numel() * x.element_size()
    return x.nbytes


def _raw(x, what="buffer"):
    """(pointer, bytes) of any contiguous numpy array or torch tensor (for byte-moving calls)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        if x.device.type not in ("cpu", "cuda"):
            raise GradwireError(_UNSUPPORTED, "%s is on %s: gradwire takes host or CUDA memory" % (what, x.device))
        if not x.is_contiguous():
            raise GradwireError(_INVALID, "%s is not contiguous" % what)
        return x.data_ptr(), _nbytes(x)
    if mod.startswith("numpy"):
        if not x.flags["C_CONTIGUOUS"]:
            raise GradwireError(_INVALID, "%s is not C-contiguous" % what)
        return x.ctypes.data, x.nbytes
    raise GradwireError(_INVALID, "%s: expected a numpy array or a torch tensor, got %s" % (what, type(x).__name__))


class Codec:
    """A codec from a spec string such as 'qsgd:bits=4,bucket=512' (see the README).

    A bad spec raises GradwireError with the library's message. A codec holds scratch memory:
    do not use one codec from two threads at once (collectives on one communicator all run
    on its progress thread, so sharing a codec between the buffers of one communicator is fine).
    """

    def __init__(self, spec):
        if not isinstance(spec, str):
            raise GradwireError(_INVALID, "codec spec must be a string, not %s" % type(spec).__name__)
        self._h = ctypes.c_void_p()
        check(lib.gw_codec_create(spec.encode(), ctypes.byref(self._h)))

    @property
    def spec(self):
        """The canonical spec string (every key spelled out)."""
        buf = ctypes.create_string_buffer(1024)
        check(lib.gw_codec_spec(self._h, buf, len(buf)))
        return buf.value.decode()

    @property
    def name(self):
        """The codec's name: one of gradwire._lib.CODEC_IDS ('none', 'fp16', 'qsgd', ...)."""
        i = ctypes.c_int()
        check(lib.gw_codec_id(self._h, ctypes.byref(i)))
        return CODEC_IDS.get(i.value, "codec %d" % i.value)

    def max_encoded_bytes(self, count, dtype="float32"):
        if dtype not in DTYPES:
            raise GradwireError(_INVALID, "dtype must be one of %s, not %r" % (sorted(DTYPES), dtype))
        n = ctypes.c_size_t()
        check(lib.gw_codec_max_encoded_bytes(self._h, int(count), DTYPES[dtype], ctypes.byref(n)))
        return n.value

    def encode(self, x, step=0, rank=0, ef=None):
        """The message (bytes) for x; with ef, encodes x + residual and updates the residual."""
        ptr, n, dtype = _buffer(x, "input")
        if ef is not None and ef.count != n:
            raise GradwireError(_INVALID, "ef holds %d elements but the input has %d" % (ef.count, n))
        cap = self.max_encoded_bytes(n, dtype)
        out = ctypes.create_string_buffer(max(cap, 1))
        written = ctypes.c_size_t()
        check(lib.gw_encode(self._h, ptr, n, DTYPES[dtype], int(step), int(rank),
                            ef._h if ef is not None else None, out, cap, ctypes.byref(written)))
        return out.raw[:written.value]

    def __repr__(self):
        return "Codec(%r)" % (self.spec if self._h else "<closed>")

    def close(self):
        if getattr(self, "_h", None) and lib is not None:
            lib.gw_codec_destroy(self._h)
        self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def decode(msg, out, mode="overwrite"):
    """Decodes a message (bytes) into out (numpy array or CPU tensor); mode is 'overwrite',
    'accumulate' or 'subtract'. The message is untrusted: the library checks it first."""
    if mode not in DECODE_MODES:
        raise GradwireError(_INVALID, "mode must be one of %s, not %r" % (sorted(DECODE_MODES), mode))
    msg = bytes(msg)
    ptr, n, dtype = _buffer(out, "out")
    check(lib.gw_decode(msg, len(msg), ptr, n, DTYPES[dtype], DECODE_MODES[mode]))
    return out


def message_info(msg):
    """What a message's header says: dict of codec, dtype, count, nnz, total_bytes."""
    msg = bytes(msg)
    info = MessageInfo()
    check(lib.gw_message_info(msg, len(msg), ctypes.byref(info)))
    dtypes = {v: k for k, v in DTYPES.items()}
    return {"codec": CODEC_IDS.get(info.codec, info.codec), "dtype": dtypes.get(info.dtype, info.dtype),
            "count": info.count, "nnz": info.nnz, "total_bytes": info.total_bytes}


class ErrorFeedback:
    """The fp32 residual of one gradient buffer of count elements, and its step counter.

    device: None for host memory (host buffers), or a CUDA device (index, torch.device or
    'cuda:N') whose memory holds the residual (for CUDA tensors on that device).
    An EF state passed to an all-reduce belongs to it until the call (or request) finishes:
    read residual() only between calls."""

    def __init__(self, count, device=None):
        self._h = ctypes.c_void_p()
        self.count = int(count)
        self.device = device
        if self.count < 0:
            raise GradwireError(_INVALID, "count %d is negative" % self.count)
        if device is None:
            check(lib.gw_ef_state_create(self.count, ctypes.byref(self._h)))
            return
        if device == "standin":  # the stand-in accelerator's (gradwire.standin)
            check(lib.gw_standin_ef_state_create(self.count, ctypes.byref(self._h)))
            return
        if not _lib.has("gw_ef_state_create_device"):
            raise GradwireError(_UNSUPPORTED, "this libgradwire has no device EF states")
        import torch
        with torch.cuda.device(device):
            check(lib.gw_ef_state_create_device(self.count, ctypes.byref(self._h)))

    @property
    def step(self):
        s = ctypes.c_uint64()
        check(lib.gw_ef_state_step(self._h, ctypes.byref(s)))
        return s.value

    def residual(self):
        """A copy of the residual (numpy float32 array of count elements)."""
        import numpy as np
        out = np.empty(self.count, dtype=np.float32)
        check(lib.gw_ef_state_get_residual(self._h, out.ctypes.data, self.count))
        return out

    @step.setter
    def step(self, value):
        check(lib.gw_ef_state_set_step(self._h, int(value)))

    def set_residual(self, values):
        """Overwrites the residual with count float32 values (a numpy array or CPU tensor)."""
        ptr, n, dtype = _buffer(values, "residual")
        if dtype != "float32":
            raise GradwireError(_INVALID, "residual must be float32, not %s" % dtype)
        check(lib.gw_ef_state_set_residual(self._h, ptr, n))

    def save(self):
        """The whole state (residual, owner-side residual, step) as bytes, for a checkpoint."""
        need = ctypes.c_size_t()
        check(lib.gw_ef_state_save(self._h, None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        check(lib.gw_ef_state_save(self._h, buf, need.value, ctypes.byref(need)))
        return buf.raw[:need.value]

    def load(self, blob):
        """Restores what save() returned (from a state of the same count, host or device)."""
        if not isinstance(blob, (bytes, bytearray)):
            raise GradwireError(_INVALID, "blob must be the bytes save() returned, not %s" % type(blob).__name__)
        data = bytes(blob)
        check(lib.gw_ef_state_load(self._h, data, len(data)))

    def reset(self):
        check(lib.gw_ef_state_reset(self._h))

    def __repr__(self):
        return "ErrorFeedback(%d)" % self.count

    def close(self):
        if getattr(self, "_h", None) and lib is not None:
            lib.gw_ef_state_destroy(self._h)
        self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def get_unique_id():
    """A new unique id (128 bytes): starts the rendezvous service in this process, which must
    then stay alive until every rank has called Communicator.init_rank."""
    uid = UniqueId()
    check(lib.gw_get_unique_id(ctypes.byref(uid)))
    # Not bytes(uid.internal): a c_char array field reads as bytes cut at the first NUL.
    return ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))


class Request:
    """A non-blocking all-reduce in flight; keeps its buffers, codec and EF state alive until
    it has completed (test() returned True or wait() returned)."""

    def __init__(self, handle, keep):
        self._h = handle
        self._keep = keep
        self._lock = threading.Lock()
        self._done = False

    def test(self):
        """True once the all-reduce has finished; raises GradwireError if it failed."""
        with self._lock:
            if self._done:
                return True
            done = ctypes.c_int(0)
            result = lib.gw_test(self._h, ctypes.byref(done))
            if done.value:  # gw_test freed the request (failed or not)
                self._done = True
                self._keep = None
            check(result)
            return bool(done.value)

    def stream_wait(self, stream):
        """Makes stream (a cudaStream_t as an int, or a stand-in stream handle; None: the
        default stream) wait on the device until this request has finished; the host does not
        wait. Call it before test() or wait() report the request finished."""
        with self._lock:
            if self._done:
                return
            check(lib.gw_request_stream_wait(self._h, stream))

    def wait(self):
        """Blocks until the all-reduce has finished; raises GradwireError if it failed."""
        with self._lock:
            if self._done:
                return
            result = lib.gw_wait(self._h)  # releases the GIL while it blocks
            self._done = True
            self._keep = None  # only now may the buffers, codec and EF state go
            check(result)

    def __del__(self):
        # A request dropped unwaited still owns memory the progress thread writes: wait.
        try:
            if not self._done and lib is not None:
                self.wait()
        except Exception:
            pass


class Communicator:
    """A group of ranks. Build it with from_env() (torchrun, mpirun, srun, GW_RANK/GW_SIZE with GW_TOKEN)
    or with init_rank() and a unique id; gradwire.torch.init_communicator() does the latter
    over a torch.distributed process group.

    Options (None: the library's default or its environment variable): timeout_s (bound on
    every wait, GW_TIMEOUT_S), chunk_bytes (GW_CHUNK_BYTES), dense_threshold_bytes (all-reduces
    smaller than this go dense, GW_DENSE_THRESHOLD, default 64 KiB; 0 compresses every size).
    """

    def __init__(self, handle, owner=None):
        self._h = handle
        # A borrowed handle (owner is what keeps it alive, e.g. the torch backend) is never
        # destroyed here.
        self._owner = owner

    @classmethod
    def borrow(cls, handle, owner):
        """A Communicator over a gw_comm_t (an integer address) that owner keeps alive and
        destroys; close() only forgets it."""
        if not handle:
            raise GradwireError(_INVALID, "handle is null")
        return cls(ctypes.c_void_p(int(handle)), owner=owner)

    @classmethod
    def from_env(cls, timeout_s=None, chunk_bytes=None, dense_threshold_bytes=None):
        cfg = make_config(timeout_s, chunk_bytes, dense_threshold_bytes)
        h = ctypes.c_void_p()
        check(lib.gw_comm_init_from_env(ctypes.byref(h), ctypes.byref(cfg) if cfg is not None else None))
        return _track(cls(h))

    @classmethod
    def init_rank(cls, nranks, unique_id, rank, timeout_s=None, chunk_bytes=None, dense_threshold_bytes=None):
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != 128:
            raise GradwireError(_INVALID, "unique_id must be the 128 bytes get_unique_id() returned")
        cfg = make_config(timeout_s, chunk_bytes, dense_threshold_bytes)
        # Not memmove(uid.internal, ...): that field reads as a bytes copy, not the struct's memory.
        uid = UniqueId.from_buffer_copy(bytes(unique_id))
        h = ctypes.c_void_p()
        check(lib.gw_comm_init_rank(ctypes.byref(h), int(nranks), uid, int(rank),
                                    ctypes.byref(cfg) if cfg is not None else None))
        return _track(cls(h))

    def _handle(self):
        if not self._h:
            raise GradwireError(_INVALID, "the communicator is closed")
        return self._h

    @property
    def rank(self):
        r = ctypes.c_int()
        check(lib.gw_comm_rank(self._handle(), ctypes.byref(r)))
        return r.value

    @property
    def size(self):
        s = ctypes.c_int()
        check(lib.gw_comm_size(self._handle(), ctypes.byref(s)))
        return s.value

    def topology(self):
        """Which ranks share a node: dict(node_count, node, local_rank, local_size)."""
        v = [ctypes.c_int() for _ in range(4)]
        check(lib.gw_comm_topology(self._handle(), *[ctypes.byref(x) for x in v]))
        return dict(zip(("node_count", "node", "local_rank", "local_size"), (x.value for x in v)))

    def async_error(self):
        """None while healthy, else a GradwireError naming what broke the communicator."""
        e = ctypes.c_int()
        check(lib.gw_comm_get_async_error(self._handle(), ctypes.byref(e)))
        if e.value == _lib.GW_SUCCESS:
            return None
        return GradwireError(e.value, "the communicator is broken")

    def stats(self):
        """What this communicator's collectives did so far (dict), from gw_comm_get_stats;
        None when the loaded library is too old to have it."""
        if not _lib.has("gw_comm_get_stats"):
            return None
        st = _lib.CommStats()
        st.size = ctypes.sizeof(st)
        check(lib.gw_comm_get_stats(self._handle(), ctypes.byref(st)))
        out = {name: getattr(st, name) for name, _ in st._fields_ if name != "size"}
        names = {v: k for k, v in ALGOS.items()}
        out["last_algo"] = names.get(st.last_algo, st.last_algo)
        # All-reduces by the algorithm they ran (only those that ran), e.g. {"ring": 3}.
        out["algo_calls"] = {names.get(a, a): int(n) for a, n in enumerate(st.algo_calls) if n > 0}
        return out

    def reset_stats(self):
        if _lib.has("gw_comm_reset_stats"):
            check(lib.gw_comm_reset_stats(self._handle()))

    _standin = False  # the device calls run on the stand-in accelerator (use_standin)

    def use_standin(self, max_delay_us=300, seed=0):
        """From now on this communicator's device calls run on gradwire's stand-in accelerator
        (gradwire.standin): tensors in stand-in memory are its device buffers. Every rank calls it."""
        check(lib.gw_comm_use_standin(self._handle(), int(max_delay_us), int(seed)))
        self._standin = True

    def _on_device(self, x):
        return _cuda(x) or (self._standin and _in_standin(x))

    def _device_stream(self, x):
        """The caller's current stream for x's device, as the C ABI's void*."""
        if _cuda(x):
            return _stream(x)
        h = ctypes.c_void_p()
        check(lib.gw_standin_current_stream(ctypes.byref(h)))
        return h.value

    def trim(self):
        """Gives back the device scratch and pinned staging kept between device calls."""
        check(lib.gw_comm_trim(self._handle()))

    def _args(self, x, out, op, codec, ef, algo):
        ptr, n, dtype = _buffer(x, "input", device_ok=True)
        optr = ptr
        if out is not None:
            optr, on, odtype = _buffer(out, "out", device_ok=True)
            if on != n or odtype != dtype:
                raise GradwireError(_INVALID, "out must match the input's size and dtype")
            if _cuda(out) != _cuda(x) or (_cuda(x) and out.device != x.device):
                raise GradwireError(_INVALID, "out must be on the input's device (%s)" % x.device)
        if op not in OPS:
            raise GradwireError(_INVALID, "op must be 'sum' or 'avg', not %r" % (op,))
        if algo not in ALGOS:
            raise GradwireError(_INVALID, "algo must be one of %s, not %r" % (sorted(ALGOS), algo))
        codec, ef = self._codec_and_ef(x, n, codec, ef)
        return (ptr, optr, n, DTYPES[dtype], OPS[op], codec, ef, ALGOS[algo])

    def _codec_and_ef(self, x, n, codec, ef):
        """codec as a Codec (or None) and ef checked against a call on x of n elements."""
        if isinstance(codec, str):
            codec = Codec(codec)
        elif codec is not None and not isinstance(codec, Codec):
            raise GradwireError(_INVALID, "codec must be a spec string or a Codec, not %s" % type(codec).__name__)
        if ef is not None:
            if not isinstance(ef, ErrorFeedback):
                raise GradwireError(_INVALID, "ef must be an ErrorFeedback, not %s" % type(ef).__name__)
            if ef.count != n:
                raise GradwireError(_INVALID, "ef holds %d elements but the buffer has %d" % (ef.count, n))
            if (ef.device is not None) != self._on_device(x):
                raise GradwireError(_INVALID, "ef lives in %s memory but the buffer is on %s"
                                    % ("host" if ef.device is None else "device", x.device))
        return codec, ef

    def allreduce(self, x, out=None, op="sum", codec=None, ef=None, algo="auto"):
        """Sums (or averages, op='avg') x over ranks into out (default: in place); returns it.

        codec: None or a spec or Codec ('none' is dense); ef: an ErrorFeedback of x's size."""
        ptr, optr, n, dt, o, codec, ef, a = self._args(x, out, op, codec, ef, algo)
        if self._on_device(x):
            check(lib.gw_allreduce_device(self._handle(), ptr, optr, n, dt, o, codec._h if codec else None,
                                          ef._h if ef else None, a, self._device_stream(x)))
        else:
            check(lib.gw_allreduce_ex(self._handle(), ptr, optr, n, dt, o, codec._h if codec else None,
                                      ef._h if ef else None, a))
        return x if out is None else out

    def iallreduce(self, x, out=None, op="sum", codec=None, ef=None, algo="auto"):
        """Non-blocking allreduce; returns a Request. x, out, codec and ef must not be touched
        until the request has completed."""
        ptr, optr, n, dt, o, codec, ef, a = self._args(x, out, op, codec, ef, algo)
        req = ctypes.c_void_p()
        if self._on_device(x):
            check(lib.gw_iallreduce_device(self._handle(), ptr, optr, n, dt, o, codec._h if codec else None,
                                           ef._h if ef else None, a, self._device_stream(x), ctypes.byref(req)))
        else:
            check(lib.gw_iallreduce(self._handle(), ptr, optr, n, dt, o, codec._h if codec else None,
                                    ef._h if ef else None, a, ctypes.byref(req)))
        return Request(req, (x, out, codec, ef))

    def _scatter_args(self, x, out, op, codec, ef, counts):
        ptr, n, dtype = _buffer(x, "input", device_ok=True)
        optr, on, odtype = _buffer(out, "out", device_ok=True)
        if odtype != dtype:
            raise GradwireError(_INVALID, "out is %s but the input is %s" % (odtype, dtype))
        if self._on_device(out) != self._on_device(x):
            raise GradwireError(_INVALID, "out and the input must both be on the device or both in host memory")
        size = self.size
        if counts is None:
            if n != on * size:
                raise GradwireError(_INVALID, "the input holds %d elements, not size() * out's %d = %d (pass counts "
                                    "for blocks of different sizes)" % (n, on, on * size))
            counts = [on] * size
        else:
            counts = [int(c) for c in counts]
            if len(counts) != size:
                raise GradwireError(_INVALID, "counts has %d entries, not size() = %d" % (len(counts), size))
            if any(c < 0 for c in counts):
                raise GradwireError(_INVALID, "counts has a negative entry")
            if sum(counts) != n:
                raise GradwireError(_INVALID, "counts add up to %d but the input holds %d elements" % (sum(counts), n))
            if counts[self.rank] != on:
                raise GradwireError(_INVALID, "out holds %d elements but counts[%d] (this rank's block) is %d"
                                    % (on, self.rank, counts[self.rank]))
        if op not in OPS:
            raise GradwireError(_INVALID, "op must be one of %s, not %r" % (sorted(OPS), op))
        codec, ef = self._codec_and_ef(x, n, codec, ef)
        arr = (ctypes.c_size_t * size)(*counts)
        return (ptr, optr, arr, DTYPES[dtype], OPS[op], codec, ef)

    def reduce_scatter(self, x, out, op="sum", codec=None, ef=None, counts=None):
        """out = block rank() of op over ranks of x; returns out. x holds every rank's block
        in rank order: counts[r] elements for rank r (None: equal blocks of out's size).

        codec None: exact, in x's dtype, any op. A codec (a spec or Codec; 'none' too): sum or
        avg of float32, float16 or bfloat16; each rank's contribution to each block is encoded
        once and the owner adds them in float32. ef: an ErrorFeedback of x's size, the
        sender-side residual for every block this rank sends (kept across calls)."""
        ptr, optr, arr, dt, o, codec, ef = self._scatter_args(x, out, op, codec, ef, counts)
        h = codec._h if codec else None
        e = ef._h if ef else None
        if self._on_device(x):
            check(lib.gw_reduce_scatterv_device(self._handle(), ptr, optr, arr, dt, o, h, e, self._device_stream(x)))
        else:
            check(lib.gw_reduce_scatterv(self._handle(), ptr, optr, arr, dt, o, h, e))
        return out

    def ireduce_scatter(self, x, out, op="sum", codec=None, ef=None, counts=None):
        """Non-blocking reduce_scatter; returns a Request. x, out, codec and ef must not be
        touched until the request has completed."""
        ptr, optr, arr, dt, o, codec, ef = self._scatter_args(x, out, op, codec, ef, counts)
        h = codec._h if codec else None
        e = ef._h if ef else None
        req = ctypes.c_void_p()
        if self._on_device(x):
            check(lib.gw_ireduce_scatterv_device(self._handle(), ptr, optr, arr, dt, o, h, e, self._device_stream(x),
                                                 ctypes.byref(req)))
        else:
            check(lib.gw_ireduce_scatterv(self._handle(), ptr, optr, arr, dt, o, h, e, ctypes.byref(req)))
        return Request(req, (x, out, codec, ef))

    def algo_for(self, x, codec=None):
        """The algorithm an all-reduce of x with codec runs under this communicator's policy
        (for a CUDA tensor, the device all-reduce's: gw_allreduce_algo_device)."""
        _, n, dtype = _buffer(x, "input", device_ok=True)
        if isinstance(codec, str):
            codec = Codec(codec)
        a = ctypes.c_int()
        on_device = type(x).__module__.startswith("torch") and x.device.type == "cuda"
        query = lib.gw_allreduce_algo_device if on_device and _lib.has("gw_allreduce_algo_device") \
            else lib.gw_allreduce_algo
        check(query(self._handle(), n, DTYPES[dtype], codec._h if codec else None, ctypes.byref(a)))
        return {v: k for k, v in ALGOS.items()}[a.value]

    def _allgather_compressed_args(self, x, out, codec):
        ptr, n, dtype = _buffer(x, "input", device_ok=True)
        optr, on, odtype = _buffer(out, "out", device_ok=True)
        if odtype != dtype:
            raise GradwireError(_INVALID, "out is %s but the input is %s" % (odtype, dtype))
        if on != n * self.size:
            raise GradwireError(_INVALID, "out holds %d elements, not size() * %d" % (on, n))
        if isinstance(codec, str):
            codec = Codec(codec)
        return ptr, optr, n, DTYPES[dtype], codec

    def allgather(self, x, out, codec=None):
        """out (size() times x's bytes) = every rank's x in rank order; returns out. x may be
        out's own block (in place).

        codec (a spec or Codec): the all-gather on a compressed wire, for float32, float16 or
        bfloat16 host tensors, float32 CUDA tensors (on the current stream), e.g. quantized
        weights ("qsgd:bits=8,rounding=nearest"): every rank's block is encoded once and every
        rank decodes every block, its own too, so out holds the same bits on every rank and its
        own block is the decode of x."""
        if codec is not None:
            ptr, optr, n, dt, codec = self._allgather_compressed_args(x, out, codec)
            if self._on_device(x):
                check(lib.gw_allgather_compressed_device(self._handle(), ptr, optr, n, dt, codec._h,
                                                         self._device_stream(x)))
            else:
                check(lib.gw_allgather_compressed(self._handle(), ptr, optr, n, dt, codec._h))
            return out
        ptr, nbytes = _raw(x, "input")
        optr, obytes = _raw(out, "out")
        if obytes != nbytes * self.size:
            raise GradwireError(_INVALID, "out holds %d bytes, not size() * %d" % (obytes, nbytes))
        if self._on_device(x):
            check(lib.gw_allgather_device(self._handle(), ptr, optr, nbytes, self._device_stream(x)))
        else:
            check(lib.gw_allgather(self._handle(), ptr, optr, nbytes))
        return out

    def iallgather(self, x, out, codec=None):
        """Non-blocking allgather (raw, or with codec); returns a Request. x, out and codec must
        not be touched until it has completed."""
        ptr, optr, n, dt, codec = self._allgather_compressed_args(x, out, codec)
        req = ctypes.c_void_p()
        h = codec._h if codec else None
        if self._on_device(x):
            check(lib.gw_iallgather_compressed_device(self._handle(), ptr, optr, n, dt, h, self._device_stream(x),
                                                      ctypes.byref(req)))
        else:
            check(lib.gw_iallgather_compressed(self._handle(), ptr, optr, n, dt, h, ctypes.byref(req)))
        return Request(req, (x, out, codec))

    def broadcast(self, x, root=0):
        """x on every rank = x on root (in place); returns x."""
        ptr, nbytes = _raw(x, "buffer")
        if self._on_device(x):
            check(lib.gw_broadcast_device(self._handle(), ptr, nbytes, int(root), self._device_stream(x)))
        else:
            check(lib.gw_broadcast(self._handle(), ptr, nbytes, int(root)))
        return x

    def enable_nccl(self):
        """Collective: brings up NCCL on every rank's current CUDA device, for dense device
        collectives. Raises GradwireError (GW_ERR_UNSUPPORTED, with the reason) on every rank
        when any rank cannot; the communicator then works on without it."""
        check(lib.gw_comm_enable_nccl(self._handle()))

    @property
    def nccl_enabled(self):
        if not _lib.has("gw_comm_nccl_enabled"):
            return False
        e = ctypes.c_int()
        check(lib.gw_comm_nccl_enabled(self._handle(), ctypes.byref(e)))
        return bool(e.value)

    def barrier(self):
        check(lib.gw_barrier(self._handle()))

    def abort(self):
        """Fails every pending and future call (GW_ERR_ABORTED); from any thread."""
        check(lib.gw_comm_abort(self._handle()))

    def revoke(self):
        """Fails every pending and future call here and on every reachable rank with
        GW_ERR_REVOKED (ULFM's revoke); from any thread. Survivors then call shrink()."""
        if not _lib.has("gw_comm_revoke"):
            raise GradwireError(_UNSUPPORTED, "this libgradwire has no gw_comm_revoke")
        check(lib.gw_comm_revoke(self._handle()))

    def shrink(self):
        """After a failure, every survivor calls it: they agree on who is alive and each gets
        a new Communicator over them (same transport, no new rendezvous), ranks renumbered in
        the old order. This one stays broken: close it. Raises GradwireError (code
        GW_ERR_REMOTE when this rank was left out or a survivor died meanwhile: shrink again)."""
        if not _lib.has("gw_comm_shrink"):
            raise GradwireError(_UNSUPPORTED, "this libgradwire has no gw_comm_shrink")
        h = ctypes.c_void_p()
        check(lib.gw_comm_shrink(self._handle(), ctypes.byref(h)))
        return Communicator(h.value)

    def close(self):
        """Finishes queued work and frees the communicator (idempotent)."""
        h = getattr(self, "_h", None)
        self._h = None
        if h and lib is not None and getattr(self, "_owner", None) is None:
            lib.gw_comm_destroy(h)
        self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


__all__ = ["Codec", "Communicator", "ErrorFeedback", "Request", "decode", "get_unique_id", "message_info"]
