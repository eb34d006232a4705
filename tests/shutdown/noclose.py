"""A rank that never calls close(): `noclose.py SCENARIO [SLEEP_S]`. plain: one communicator;
cycle: one in a reference cycle; two: two communicators; request: a finished iallreduce
request left unwaited. Rank 1 sleeps SLEEP_S before leaving, so the ranks exit at different
times."""
import sys
import time

import numpy as np

import gradwire

scenario = sys.argv[1]
comm = gradwire.Communicator.from_env()
if scenario == "cycle":
    comm.me = comm
other = gradwire.Communicator.from_env() if scenario == "two" else None
x = np.ones(1000, dtype=np.float32)
comm.allreduce(x)
assert (x == comm.size).all()
if scenario == "request":
    req = comm.iallreduce(x)
if other is not None:
    other.allreduce(x)
if comm.rank == 1 and len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
print("rank %d: leaving without close()" % comm.rank)
