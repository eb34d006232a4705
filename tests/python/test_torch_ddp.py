"""DDP on the gradwire torch backend (init_process_group("gradwire")), 4 real processes (a power
of two, so that DDP's division by the world size keeps the dyadic test data exact):
equal (to the last bits) to DDP on gloo with no_sync, find_unused_parameters and static_graph; the comm
hook on the backend's own communicator; a checkpoint of the hook's EF state that resumes
exactly."""
import os

import pytest

torch = pytest.importorskip("torch")
import gradwire._backend  # noqa: E402

if not gradwire._backend.available():  # not built for this torch: scripts/build-torch-backend.sh
    pytest.skip("gradwire's torch backend is not built for torch %s: %s"
                % (torch.__version__, gradwire._backend.unavailable_reason()), allow_module_level=True)

from ranks import run_ranks  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_worker.py")


def test_ddp_on_gradwire_equals_ddp_on_gloo():
    for r in run_ranks("ddp", nranks=4, timeout=180, worker=WORKER):
        # Summation order differs from gloo's: equal to the last bits (a lost or doubled
        # gradient would be off by 1e-2).
        for name in ("plain", "find_unused", "static_graph", "hook_dense"):
            assert r[name]["diff"] <= 1e-6 and r[name]["in_sync"] and r[name]["moved"], (name, r[name])
        h = r["hook_dense"]
        assert h["same_comm"] and h["compressed"] == 0 and h["dense"] > 0, h
        assert r["profiled_hook"] and r["profiled_c10d"], r
        assert r["max_exact"]


def test_hook_checkpoint_resumes_with_the_same_residuals():
    for r in run_ranks("resume", nranks=4, timeout=180, worker=WORKER):
        assert r["compressed"] > 0 and r["residual_norm"] > 0, r
        assert r["resumed_equal"], r
        assert r["without_state_differs"], r
        assert r["in_sync"] and r["hook_step"] == 6, r
