"""torch's own distributed backend test suite (DistributedTest._DistTestBase, shipped in the wheel
as torch/testing/_internal/distributed/distributed_test.py) bound to one backend.

This module is imported twice over: by the worker of run_distributed_test.py, which runs the
tests, and by every rank the suite spawns (multiprocessing "spawn" unpickles
GradwireDistTest._run by module and name, so each rank imports this module afresh). Everything
here therefore depends on the environment only, which the ranks inherit from the worker:

  BACKEND              gradwire (registered by `import gradwire.torch`) or a built-in one (gloo)
  WORLD_SIZE, TEMP_DIR what distributed_test.py reads at import time
  GW_SUITE_FEATURES    DistTestCases.backend_feature sets the backend joins (comma separated)
  GW_SUITE_SKIP_COLLECTIVES  DistTestCases.skip_collective sets it joins (what it refuses by design)
  GW_SUITE_UNLOCK      tests to run although torch gates them by backend name (see below)
  GW_SUITE_REASONS     folder where a rank writes why it skipped a test (the suite itself only
                       says "look at subprocess log")

"Unlocking": distributed_test.py runs several CPU test bodies only for the backends that were
known to implement them when the test was written (all_to_all: "Only MPI supports ...";
object collectives: gloo/nccl/ucc/xccl). An unlocked test runs the unchanged test body; only the
backend-name gate is dropped. The curated lists name which tests are unlocked and why.
"""
import functools
import os
import sys
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
if os.path.join(_REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(_REPO, "python"))

BACKEND = os.environ["BACKEND"]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if BACKEND == "gradwire":
    import gradwire.torch  # noqa: E402,F401  (registers the backend)
    from gradwire import _backend  # noqa: E402

    if not _backend.available():
        raise ImportError(_backend.unavailable_reason())
    if not hasattr(dist.Backend, BACKEND.upper()):
        raise ImportError("import gradwire.torch did not register the backend %r" % BACKEND)

from torch.testing._internal.common_distributed import DistTestCases, TEST_SKIPS  # noqa: E402

_BUILTIN = {"gloo", "nccl", "mpi", "ucc", "xccl"}
FEATURES = [f for f in os.environ.get("GW_SUITE_FEATURES", "").split(",") if f]
if BACKEND not in _BUILTIN:
    for _feature in ["plugin"] + FEATURES:
        DistTestCases.backend_feature.setdefault(_feature, set()).add(BACKEND)

# Collectives the backend refuses by design (DistTestCases.skip_collective keys: "sendrecv
# anysource", "allgather_coalesced", "reduce", "cpu barrier"); the suite skips their tests.
SKIP_COLLECTIVES = [c for c in os.environ.get("GW_SUITE_SKIP_COLLECTIVES", "").split(",") if c]
for _collective in SKIP_COLLECTIVES:
    DistTestCases.skip_collective.setdefault(_collective, set()).add(BACKEND)

# Imported only now: its skip decorators read BACKEND and backend_feature at import time.
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

UNLOCK = [t for t in os.environ.get("GW_SUITE_UNLOCK", "").split(",") if t]


class GradwireDistTest(TestDistBackend, DistributedTest._DistTestBase):
    """What test/distributed/test_distributed_spawn.py builds for gloo/nccl/ucc: each test
    spawns WORLD_SIZE ranks that init_process_group(BACKEND) over a file store."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def _spawn_processes(self):
        # spawn is what torch's runner does: every rank imports torch afresh (about 6 s for two
        # ranks on two cores). forkserver forks each rank from a server that imported this
        # module once; a forked rank does not see the environment of the moment (setUp gives
        # each test a new TEMP_DIR and INIT_METHOD), so the ranks get it as an argument.
        method = os.environ.get("GW_SUITE_START", "spawn")
        if method == "spawn":
            return super()._spawn_processes()
        ctx = torch.multiprocessing.get_context(method)
        ctx.set_forkserver_preload([__name__])
        self.processes = []
        for rank in range(int(self.world_size)):
            parent_conn, child_conn = torch.multiprocessing.Pipe()
            p = ctx.Process(target=type(self)._run_in_env, name="process %d" % rank,
                            args=(dict(os.environ), rank, self._current_test_name(), self.file_name, child_conn))
            p.start()
            self.pid_to_pipe[p.pid] = parent_conn
            self.processes.append(p)

    @classmethod
    def _run_in_env(cls, environ, rank, test_name, file_name, pipe):
        os.environ.clear()
        os.environ.update(environ)
        cls._run(rank, test_name, file_name, pipe)

    def run_test(self, test_name, parent_pipe):
        # In a rank: note the reason of a skip raised inside the test body, then let the suite
        # turn it into its generic skip exit code as usual.
        fn = getattr(self, test_name)

        @functools.wraps(fn)
        def noted():
            try:
                return fn()
            except unittest.SkipTest as e:
                folder = os.environ.get("GW_SUITE_REASONS")
                if folder:
                    with open(os.path.join(folder, "%s.rank%d" % (test_name, self.rank)), "w") as f:
                        f.write(str(e))
                raise

        setattr(self, test_name, noted)
        super().run_test(test_name, parent_pipe)


def _unlocked(name):
    body = getattr(DistributedTest._DistTestBase, name)

    def test(self):
        return body(self)

    test.__name__ = test.__qualname__ = name
    test.__doc__ = "unlocked: torch gates this test to other backends by name (%s)" % getattr(
        body, "__unittest_skip_why__", "no gate")
    return test


for _name in UNLOCK:
    if not hasattr(DistributedTest._DistTestBase, _name):
        raise AttributeError("GW_SUITE_UNLOCK: no test %s in distributed_test.py" % _name)
    setattr(GradwireDistTest, _name, _unlocked(_name))


def skip_message(exit_code):
    for skip in TEST_SKIPS.values():
        if skip.exit_code == exit_code:
            return skip.message
    return None


GENERIC_SKIP = TEST_SKIPS["generic"].message
