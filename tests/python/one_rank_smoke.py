"""One rank with no transport between processes (scripts/test.sh --sanitize runs it against
build-noucx/, a GW_WITH_UCX=OFF library, through GRADWIRE_LIB): a dense all-reduce is exact and
a compressed one with error feedback succeeds with a finite result near its input."""
import numpy as np

import gradwire

with gradwire.Communicator.init_rank(1, gradwire.get_unique_id(), 0, timeout_s=10) as comm:
    g = np.random.default_rng(7).standard_normal(100003).astype(np.float32)
    x = g.copy()
    comm.allreduce(x, op="avg")
    assert np.array_equal(x, g), "a one-rank dense average changed its input"
    x = g.copy()
    comm.allreduce(x, op="avg", codec="qsgd:bits=8", ef=gradwire.ErrorFeedback(g.size))
    assert np.isfinite(x).all() and np.abs(x - g).max() < 0.1 * np.abs(g).max(), "qsgd 8-bit result is off"
print("one_rank_smoke: ok (%s)" % gradwire._lib.path)
