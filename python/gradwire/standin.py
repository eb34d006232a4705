"""gradwire's stand-in accelerator (include/gradwire/standin.h), from Python: streams that run
their work later, on a thread of their own, after a random delay, and "device memory" that is
host memory the library knows. With it, the stream order of the torch backend and the DDP
hook (every wait they must make) is tested on machines without a GPU: a missing wait reads a
value the stream has not written yet.

    from gradwire import standin
    s = standin.Stream()
    with standin.stream(s):            # like torch.cuda.stream(s): this thread's current stream
        s.enqueue(lambda: t.fill_(1))  # runs later, in s's order
        work = dist.all_reduce(t, async_op=True)   # ordered after the fill, on a stand-in group
        work.wait()                    # s waits for the all-reduce; the host does not
        s.enqueue(lambda: seen.append(t.clone()))
    s.synchronize()

A stand-in process group: init_process_group("gradwire", pg_options=BackendOptions(standin=True));
its ops take the device path for tensors in stand-in memory (use_for_cpu_tensors() makes every
CPU tensor allocated afterwards stand-in memory). Not for training: it is slow by design.
"""
import contextlib
import ctypes
import threading

from . import _lib
from ._lib import check, lib

__all__ = ["Stream", "stream", "current_stream", "use_for_cpu_tensors", "live_bytes"]

_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _need():
    if not _lib.has("gw_standin_stream_create"):
        raise RuntimeError("this libgradwire has no stand-in accelerator (gradwire/standin.h)")


class Stream:
    """A stand-in stream. handle is what gradwire's device calls take as their stream."""

    def __init__(self, max_delay_us=300, seed=0, handle=None):
        _need()
        self._owned = handle is None
        self._callbacks = {}
        self._lock = threading.Lock()
        self._next = 0
        if handle is None:
            h = ctypes.c_void_p()
            check(lib.gw_standin_stream_create(int(max_delay_us), int(seed), ctypes.byref(h)))
            handle = h.value
        self.handle = handle

    def enqueue(self, fn):
        """Runs fn() on the stream's thread after everything enqueued before it."""
        with self._lock:
            key = self._next
            self._next += 1

        def run(_):
            try:
                fn()
            finally:
                with self._lock:
                    self._callbacks.pop(key, None)

        cb = _FN(run)
        with self._lock:
            self._callbacks[key] = cb  # alive until it has run
        check(lib.gw_standin_stream_enqueue(self.handle, ctypes.cast(cb, ctypes.c_void_p), None))

    def synchronize(self):
        check(lib.gw_standin_stream_synchronize(self.handle))

    def query(self):
        idle = ctypes.c_int()
        check(lib.gw_standin_stream_query(self.handle, ctypes.byref(idle)))
        return bool(idle.value)

    def record(self):
        """An event: this stream's position now."""
        e = ctypes.c_uint64()
        check(lib.gw_standin_event_record(self.handle, ctypes.byref(e)))
        return e.value

    def wait_event(self, other, event):
        """This stream waits (in its order) until stream other reached event."""
        check(lib.gw_standin_stream_wait_event(self.handle, other.handle, int(event)))

    def wait_stream(self, other):
        self.wait_event(other, other.record())

    def close(self):
        if self._owned and self.handle is not None:
            check(lib.gw_standin_stream_destroy(self.handle))
            self.handle = None


def current_stream():
    """This thread's current stand-in stream (None: none set; the default stream, with the
    host's order for torch's own ops)."""
    _need()
    h = ctypes.c_void_p()
    check(lib.gw_standin_current_stream(ctypes.byref(h)))
    return Stream(handle=h.value) if h.value else None


@contextlib.contextmanager
def stream(s):
    """Makes s this thread's current stand-in stream inside the block."""
    _need()
    before = ctypes.c_void_p()
    check(lib.gw_standin_current_stream(ctypes.byref(before)))
    check(lib.gw_standin_set_current_stream(s.handle if s is not None else None))
    try:
        yield s
    finally:
        check(lib.gw_standin_set_current_stream(before.value))


def use_for_cpu_tensors():
    """Every CPU tensor torch allocates from now on is stand-in device memory (needs the torch
    backend's extension). For tests: plain torch code, DDP included, then runs on the stand-in."""
    from . import _backend
    if _backend._ext is None:
        raise RuntimeError(_backend._why_not)
    _backend._ext.use_standin_for_cpu_tensors()


def live_bytes():
    """Bytes of stand-in memory allocated now, process-wide."""
    n = ctypes.c_size_t()
    check(lib.gw_standin_live_bytes(ctypes.byref(n)))
    return n.value
