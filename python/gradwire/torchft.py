"""gradwire as a torchft process group (pip install torchft).

torchft's Manager reconfigures its process group on every quorum change: configure() gets a
fresh store prefix, the replica's rank and the new world size, and must build a new group
there; abort() must unblock whatever is pending; errored() says whether the group broke
asynchronously. ProcessGroupGradwire is that group over a gradwire communicator: each
configure() builds a new communicator through the store (no other rendezvous), abort() is
gw_comm_abort (every pending and later call fails at once, on this rank; the peers learn it
from its last words), and errored() is the communicator's asynchronous error.

    from torchft import Manager
    from gradwire.torchft import ProcessGroupGradwire
    pg = ProcessGroupGradwire(timeout=timedelta(seconds=10))
    manager = Manager(pg=pg, ...)

Plain c10d calls through it are exact (dense), as on the "gradwire" backend; BackendOptions
(codec=..., ef=...) set the default codec of the gradient buckets a comm hook sends through
the group's communicator (gradwire.torch.HookState(comm=pg.communicator())).
"""
from datetime import timedelta

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torchft.process_group import ProcessGroupWrapper

from . import _backend
from .core import Communicator, GradwireError

__all__ = ["ProcessGroupGradwire"]


class ProcessGroupGradwire(ProcessGroupWrapper):
    """A reconfigurable gradwire process group for torchft (see the module's text)."""

    def __init__(self, timeout=timedelta(seconds=60), options=None):
        super().__init__(timeout=timeout)
        if not _backend.available():
            raise RuntimeError("gradwire's torch backend is not built: %s" % _backend.unavailable_reason())
        self._options = options if options is not None else _backend.BackendOptions()
        if not isinstance(self._options, _backend.BackendOptions):
            raise TypeError("options must be gradwire.torch.BackendOptions, not %s" % type(options).__name__)
        self._gw = None  # the current configuration's gradwire backend

    def _create_pg(self, store, rank, world_size):
        # The store is already under the quorum's own prefix; the group id, the same on every
        # rank of the quorum, only names it.
        group_id = "torchft_%s" % (self._quorum_id if self._quorum_id is not None else "q")
        backend = _backend._ext.create_backend(store, rank, world_size, self._timeout.total_seconds(), group_id,
                                               self._options.to_dict())
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        pg._register_backend(torch.device("cpu"), BaseProcessGroup.BackendType.CUSTOM, backend)
        if torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), BaseProcessGroup.BackendType.CUSTOM, backend)
        self._gw = backend
        return pg

    def communicator(self):
        """The current configuration's gradwire.Communicator (borrowed; None before configure)."""
        backend = self._gw
        if backend is None:
            return None
        comm = Communicator(_backend.ctypes.c_void_p(_backend._ext.comm_handle(backend)))
        comm._owner = backend
        return comm

    def abort(self, errored=True):
        comm = self.communicator()
        if comm is not None:
            comm.abort()  # pending work fails now (GW_ERR_ABORTED), not at its timeout
        self._gw = None
        super().abort(errored=errored)

    def shutdown(self):
        self._gw = None
        super().shutdown()

    def errored(self):
        comm = self.communicator()
        if comm is None:
            return None
        try:
            return comm.async_error()
        except GradwireError as e:
            return e

    def getBackendName(self):
        return "torchft-gradwire"
