"""examples/torchft_failover.py --quick: torchft's lighthouse and three replica groups, each a
Manager over ProcessGroupGradwire, dense through torchft's DDP hook and compressed (qsgd 8-bit +
EF) through gradwire's; one replica is SIGKILLed in the all-reduce of step 20 of 200 and
restarted at once. The survivors must fail that step (not wait out the group's 10 s timeout)
and commit without it, the restarted replica must heal and commit, every replica must end at
the last step with the same parameters, and the whole smoke must take under 2 minutes. Real
processes, real libgradwire over UCX; skips without torchft, the torch extension or
dataset-fashion-mnist (a 6,000-image subset of it, a ResNet of widths 8-16)."""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "examples", "torchft_failover.py")


def _skip_reason():
    try:
        import torchft  # noqa: F401
    except ImportError:
        return "torchft is not installed (pip install torchft)"
    try:
        from gradwire import _backend
    except Exception as e:  # noqa: BLE001
        return "gradwire does not import: %s" % e
    if not _backend.available():
        return "the torch extension is not built: %s" % _backend.unavailable_reason()
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        return "needs dataset-fashion-mnist"
    return None


def test_quick_failover_survives_a_kill_and_the_replica_rejoins(tmp_path):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    out = tmp_path / "quick.json"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(out), "--workdir", str(tmp_path / "runs")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-6000:]
    res = json.loads(out.read_text())
    steps = res["config"]["steps"]
    rows = {r["mode"]: r for r in res["runs"]}
    assert set(rows) == {"gradwire", "gradwire-qsgd8"} and all(r["killed"] for r in rows.values()), rows.keys()
    for mode, r in rows.items():
        what = "%s: %s" % (mode, json.dumps({k: r[k] for k in ("survivors", "rejoin", "committed", "final_step")}))
        # Survivors: the step the victim died in fails within a few seconds (the broken
        # connection, not the group's 10 s timeout), and they commit without it once the
        # lighthouse has dropped it (its 2 s heartbeat timeout).
        for s in r["survivors"].values():
            assert s["failed_step_s"] is not None and s["failed_step_s"] < 5, what
            assert s["commit_s"] is not None and s["commit_s"] < 15, what
        assert r["kill_to_survivor_commit_s"] < 15, what
        # The restarted replica healed from a peer and committed steps with them.
        assert r["kill_to_rejoin_commit_s"] is not None, what
        assert r["committed_after_restart"] > 0 and r["rejoin"]["first_commit_step"] > r["kill"]["step"], what
        assert r["final_step"] == [steps] * len(r["final_step"]), what
        # The victim committed fewer steps than the survivors (it missed those while it was down).
        assert r["committed"][r["victim"]] < min(c for i, c in enumerate(r["committed"]) if i != r["victim"]), what
        # Every replica ends with the same parameters.
        assert r["in_sync"], what
        if mode == "gradwire-qsgd8":
            hooks = [h for h in r["hook"] if h]
            assert hooks and all(h["buckets"] > 0 for h in hooks), r["hook"]
    assert wall < 120, "the quick run took %.0f s" % wall
