"""init_process_group("gradwire") under the launchers trainers use: torchrun (current torch;
Debian's 1.13 torchrun crashes under Python 3.11 before it starts a worker) and OpenMPI's
mpirun (gradwire.torch.launcher_env maps its variables)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import gradwire._backend  # noqa: E402

if not gradwire._backend.available():
    pytest.skip("gradwire's torch backend is not built for torch %s: %s"
                % (torch.__version__, gradwire._backend.unavailable_reason()), allow_module_level=True)

from ranks import PYDIR, child_env, free_ports  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_worker.py")


def check(res, n, out):
    assert res.returncode == 0, res.stdout + res.stderr
    got = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            got.append(json.load(f))
    got.sort(key=lambda r: r["rank"])
    assert [r["rank"] for r in got] == list(range(n)), res.stdout + res.stderr
    assert all(r["ok"] and r["size"] == n and r["backend"] == "gradwire" for r in got), got


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="torch 1.13's torchrun fails under Python 3.11")
def test_torchrun(tmp_path):
    port = free_ports(1)[0]
    env = child_env()
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
                          "--master-addr", "127.0.0.1", "--master-port", str(port), SCRIPT, str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=240)
    check(res, 3, tmp_path)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun (openmpi-bin)")
def test_mpirun(tmp_path):
    port = free_ports(1)[0]
    env = child_env({"MASTER_PORT": str(port)})
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    res = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", "--mca", "btl", "self,tcp",
                          "-x", "PYTHONPATH=" + PYDIR, "-x", "MASTER_PORT", "-x", "GRADWIRE_LIB", "-x", "UCX_TLS",
                          "-x", "OMP_NUM_THREADS", sys.executable, SCRIPT, str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=240)
    check(res, 3, tmp_path)
