"""torch.distributed backend "gradwire": every c10d collective runs on a gradwire communicator.

    import torch.distributed as dist
    import gradwire.torch                      # registers the backend (this module)
    dist.init_process_group("gradwire", init_method="tcp://host:port", rank=r, world_size=n,
                            pg_options=gradwire.torch.BackendOptions(codec="qsgd:bits=8"))
    dist.all_reduce(t)                         # dense and exact: c10d calls never compress
    comm = gradwire.torch.get_communicator()   # the group's own communicator, for the comm hook

The backend is a C++ extension (torch_backend/, built by gradwire._build_torch for the PyTorch
of the Python that runs it) that opens the libgradwire this package loaded (gradwire._lib.path).
It bootstraps through the process group's Store (no extra port), takes the group's timeout as
the communicator's timeout_s, and returns asynchronous Works whose futures complete on a thread
of the backend's own.

Where the extension comes from, first match wins: $GRADWIRE_TORCH_BACKEND (path to the .so),
build-torch/_torch_backend_<major>_<minor>/ of this source tree (scripts/build-torch-backend.sh),
the copy `pip install` built inside the package when torch was importable there, the per-user
cache (~/.cache/gradwire/torch_backend, or $GRADWIRE_TORCH_BACKEND_CACHE); else it is compiled
into that cache on first import, once (ranks importing together wait for one build), unless
GRADWIRE_TORCH_BACKEND_NO_BUILD=1. When it cannot be had (no compiler, no ninja, a failed
build), available() is False and init_process_group("gradwire") fails with unavailable_reason().
"""
import atexit
import ctypes
import datetime
import importlib.util
import inspect
import os

import torch
import torch.distributed as dist

from . import _build_torch, _lib
from .core import Codec, Communicator

__all__ = ["BackendOptions", "available", "get_communicator", "get_options", "is_gradwire_group", "register",
           "unavailable_reason"]

NAME = "gradwire"
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))


def _module_name():
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return "_torch_backend_%d_%d" % (major, minor)


def _load():
    """(module, None) or (None, why not)."""
    name = _module_name()
    path, why = _build_torch.find_or_build(name, _HERE, tree_root=_ROOT)
    if path is None:
        return None, why
    # The file's module name is fixed at build time; a module built for another torch would not
    # import cleanly, so the name (which carries the torch version) must match.
    file_name = os.path.basename(path).split(".")[0]
    spec = importlib.util.spec_from_file_location(file_name, path)
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except ImportError as e:
        return None, "cannot import the gradwire torch backend %s: %s" % (path, e)
    if (mod.TORCH_VERSION_MAJOR, mod.TORCH_VERSION_MINOR) != tuple(int(x) for x in name.split("_")[-2:]):
        return None, "%s was built for torch %d.%d, this is torch %s" % (
            path, mod.TORCH_VERSION_MAJOR, mod.TORCH_VERSION_MINOR, torch.__version__)
    mod.load_library(_lib.path)  # the very library gradwire.core uses
    return mod, None


_ext, _why_not = _load()

# Close every gradwire group while Python is still whole: pending work gets a short grace,
# then fails. Left to interpreter finalisation, the backend's completion thread could need the
# GIL when no thread may take it any more, and peers would see endpoint timeouts.
_EXIT_GRACE_S = 2.0
if _ext is not None and hasattr(_ext, "shutdown_all"):
    atexit.register(_ext.shutdown_all, _EXIT_GRACE_S)


def available():
    """Whether the backend's extension is built and loaded for this torch."""
    return _ext is not None


def unavailable_reason():
    """Why available() is False (None when it is True)."""
    return _why_not


class BackendOptions:
    """Options of a gradwire process group: init_process_group("gradwire", pg_options=...)
    (torch 2.x; torch 1.13 passes them the same way). Read them back with get_options(group).

    codec: the default codec spec of the gradient buckets the DDP comm hook sends on the
      group's communicator (gradwire.torch.HookState takes it when given no codec); None: the
      hook's own default; "none": dense buckets. Checked here. Dense c10d calls
      (dist.all_reduce and the rest) never compress, whatever this says.
    ef: whether compressed all-reduces keep an error-feedback state per buffer.
    standin: the group's device path runs on gradwire's stand-in accelerator (gradwire.standin):
      tensors in stand-in memory take it, with stand-in streams; for tests without a GPU.
    extra: more string settings for tools that read them back (get_options(group).extra).
    """

    def __init__(self, codec=None, ef=True, standin=False, **extra):
        if codec is not None and not isinstance(codec, str):
            raise TypeError("codec must be a spec string or None, not %s" % type(codec).__name__)
        if codec:
            Codec(codec).close()  # a bad spec fails now, with the library's message
        self.codec = codec
        self.ef = bool(ef)
        self.standin = bool(standin)
        self.extra = {str(k): str(v) for k, v in extra.items()}

    def to_dict(self):
        d = dict(self.extra)
        d.update({"codec": self.codec or "", "ef": "1" if self.ef else "0", "standin": "1" if self.standin else "0"})
        return d

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        codec = d.pop("codec", "") or None
        ef = d.pop("ef", "1") == "1"
        standin = d.pop("standin", "0") == "1"
        return cls(codec=codec, ef=ef, standin=standin, **d)

    def __eq__(self, other):
        return isinstance(other, BackendOptions) and self.to_dict() == other.to_dict()

    def __repr__(self):
        extra = "".join(", %s=%r" % kv for kv in sorted(self.extra.items()))
        return "BackendOptions(codec=%r, ef=%r, standin=%r%s)" % (self.codec, self.ef, self.standin, extra)


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if hasattr(timeout, "total_seconds"):
        return timeout.total_seconds()
    return float(timeout)


def _create(dist_opts, backend_options):
    """register_backend's creator (extended API): one communicator per process group."""
    if _ext is None:
        raise RuntimeError(_why_not)
    opts = backend_options if backend_options is not None else BackendOptions()
    if not isinstance(opts, BackendOptions):
        raise TypeError("a gradwire process group takes gradwire.torch.BackendOptions as pg_options, not %s"
                        % type(opts).__name__)
    return _ext.create_backend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                               _seconds(dist_opts.timeout), str(dist_opts.group_id), opts.to_dict())


def register():
    """Registers "gradwire" with torch.distributed (idempotent); import does it."""
    if NAME.upper() in dist.Backend._plugins:
        return
    kwargs = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu", "cuda"]  # CUDA tensors take the device path (NCCL, device codecs)
    dist.Backend.register_backend(NAME, _create, extended_api=True, **kwargs)


def _backend_of(group):
    if _ext is None:
        raise RuntimeError(_why_not)
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu")) if hasattr(pg, "_get_backend") else pg
    if not _ext.is_gradwire(backend):
        raise ValueError("the group's backend is %s, not gradwire" % backend.name())
    return backend


def get_communicator(group=None):
    """A gradwire.Communicator over the group's own communicator (default: the default group):
    the same ranks, connections, progress thread and call order as the group's c10d calls.
    It is borrowed: closing it does not destroy the communicator, and it keeps the group's
    backend alive while it exists."""
    backend = _backend_of(group)
    comm = Communicator(ctypes.c_void_p(_ext.comm_handle(backend)))
    comm._owner = backend  # core.Communicator.close() leaves owned handles alone
    comm._standin = _ext.backend_options(backend).get("standin") == "1"
    return comm


def device_path(group=None):
    """What the group's ops on device tensors run on (a sentence): NCCL and the device codecs,
    the device path over gradwire's transport (and why not NCCL), or the stand-in."""
    return _ext.device_path(_backend_of(group))


def nccl_enabled(group=None):
    """Whether the group's dense CUDA ops run on NCCL."""
    return bool(_ext.nccl_enabled(_backend_of(group)))


def trim(group=None):
    """Gives back the device scratch and pinned staging gradwire keeps between the group's
    device ops (the next op allocates again)."""
    _ext.trim(_backend_of(group))


def is_gradwire_group(group=None):
    """Whether the group (default: the default group) runs on the gradwire backend."""
    if _ext is None or not dist.is_initialized():
        return False
    try:
        _backend_of(group)
    except (ValueError, RuntimeError):
        return False
    return True


def get_options(group=None):
    """The BackendOptions the group was created with."""
    return BackendOptions.from_dict(_ext.backend_options(_backend_of(group)))


if dist.is_available():
    register()
