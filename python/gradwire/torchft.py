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

Plain c10d calls through it (torchft's own DDP hook included) are exact and dense, as on the
"gradwire" backend. Compression: DistributedDataParallel(manager, model, codec=..., ef=...)
below, torchft's DDP with managed_comm_hook, which keeps Manager.allreduce's rules and sends
each bucket compressed, with a per-bucket error-feedback state, on the current quorum's
communicator (pg.communicator()).
"""
import ctypes
from datetime import timedelta

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torchft.process_group import ProcessGroupWrapper

from . import _backend
from .core import Codec, Communicator, ErrorFeedback, GradwireError

__all__ = ["DistributedDataParallel", "ManagedHookState", "ProcessGroupGradwire", "managed_comm_hook"]


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
        comm = Communicator(ctypes.c_void_p(_backend._ext.comm_handle(backend)))
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


class ManagedHookState:
    """What gradwire's DDP hook under a torchft Manager keeps: the codec and an error-feedback
    state per gradient bucket (by bucket index). The states belong to this replica and outlive
    quorum changes: every bucket is all-reduced on the current quorum's communicator
    (pg.communicator()) with the same residuals. A replica that healed from a peer starts with
    none (a peer's residual is that peer's unsent gradient; taking it would count it twice).

    codec: a spec ("qsgd:bits=8", "topk:ratio=0.01", ...) or None for dense; ef: keep residuals;
    algo: gradwire's algorithm for compressed buckets ("auto": the policy, which sends buckets
    under the communicator's dense threshold, 64 KiB by default, dense)."""

    def __init__(self, manager, codec="qsgd:bits=8", ef=True, algo="auto"):
        self.manager = manager
        self.codec = Codec(codec) if codec not in (None, "none") else None
        self.use_ef = bool(ef) and self.codec is not None
        self.algo = algo
        self.efs = {}
        self.stats = {"buckets": 0, "skipped": 0, "errors": 0}

    def state_dict(self):
        """The residuals for this replica's own checkpoints (torch.save), by bucket index. Keep
        them out of the Manager's state_dict callback: a replica healing from a peer loads
        that, and must not take the peer's residuals."""
        return {"version": 1, "codec": self.codec.spec if self.codec is not None else None,
                "buckets": {i: {"count": ef.count, "ef": ef.save()} for i, ef in self.efs.items()}}

    def load_state_dict(self, state):
        """Restores state_dict() (a resumed replica goes on with its residuals)."""
        if not isinstance(state, dict) or state.get("version") != 1:
            raise ValueError("not a gradwire ManagedHookState state_dict (version 1)")
        mine = self.codec.spec if self.codec is not None else None
        if state["codec"] != mine:
            raise ValueError("the checkpoint's residuals are for codec %r, this hook's is %r" % (state["codec"], mine))
        efs = {}
        for i, b in state["buckets"].items():
            ef = ErrorFeedback(int(b["count"]))
            ef.load(b["ef"])
            efs[int(i)] = ef
        self.efs = efs

    def ef_for(self, index, numel):
        if not self.use_ef:
            return None
        ef = self.efs.get(index)
        if ef is None or ef.count != numel:
            ef = self.efs[index] = ErrorFeedback(numel)
        return ef


def managed_comm_hook(state, bucket):
    """DDP comm hook: Manager.allreduce's semantics (a no-op once the step errored, zeros from
    a replica that is not participating, the sum divided by the participants, errors reported
    to the manager rather than raised) over gradwire's compressed all-reduce with error
    feedback on the current quorum's communicator."""
    manager = state.manager
    tensor = bucket.buffer()
    fut = torch.futures.Future()
    if manager.errored() is not None:
        state.stats["skipped"] += 1
        fut.set_result(tensor)
        return fut
    manager.wait_quorum()
    participants = manager.num_participants()
    if not manager.is_participating():
        tensor.zero_()
    try:
        comm = manager._pg.communicator()
        if comm is None:
            raise RuntimeError("the torchft Manager's process group is not a configured ProcessGroupGradwire")
        ef = state.ef_for(bucket.index(), tensor.numel())
        comm.iallreduce(tensor, op="sum", codec=state.codec, ef=ef, algo=state.algo).wait()
        tensor.div_(participants)
        state.stats["buckets"] += 1
    except Exception as e:  # noqa: BLE001 - torchft's contract: report, do not raise
        state.stats["errors"] += 1
        manager.report_error(e)
    fut.set_result(tensor)
    return fut


def DistributedDataParallel(manager, module, codec="qsgd:bits=8", ef=True, algo="auto", **kwargs):
    """torchft's DistributedDataParallel with gradwire's compressed hook instead of its dense
    one: DDP over a dummy group (torchft's way: the Manager syncs the replicas' state), buckets
    never rebuilt, every bucket through managed_comm_hook. Returns the module; its hook state is
    module.gradwire_state."""
    from torch.nn import parallel
    from torchft.process_group import ProcessGroupDummy
    ddp = parallel.DistributedDataParallel(module, process_group=ProcessGroupDummy(0, 1),
                                           find_unused_parameters=True, **kwargs)
    state = ManagedHookState(manager, codec=codec, ef=ef, algo=algo)
    ddp.register_comm_hook(state, managed_comm_hook)
    ddp.gradwire_state = state
    return ddp
