"""examples/compare_codecs.py --quick: a ResNet on Fashion-MNIST, 4 real ranks, 300 steps of
DDP over gloo against gradwire's hook with qsgd 4-bit, sign and top-k 1% with error feedback
(the last two with the momentum in the hook); each must end near DDP's training loss. Runs under current torch only (Debian's torch 1.13 has
a slow BLAS: the same run takes several times as long) and needs dataset-fashion-mnist."""
import importlib.util
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def _compare():
    spec = importlib.util.spec_from_file_location("compare_codecs", os.path.join(EXAMPLES, "compare_codecs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_check_fails_a_row_that_does_not_track_dense():
    check = _compare().check_quick
    base = {"name": "DDP", "value": 80.0, "train_loss": 0.40, "diverged": False, "in_sync": True}
    good = dict(base, name="good", train_loss=0.52)
    assert check([base, good]) == []
    bad = dict(base, name="bad", train_loss=0.60)
    assert check([base, bad]) == ["bad: final train loss 0.6000 against DDP's 0.4000"]
    for broken in (dict(base, name="nan", diverged=True), dict(base, name="split", in_sync=False),
                   {"name": "failed", "failed": True}):
        assert check([base, broken]) == ["%s: failed, diverged or out of sync" % broken["name"]]


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="runs under current torch only")
@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="needs dataset-fashion-mnist")
def test_quick_training_tracks_dense(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "compare_codecs.py"), "--task", "fashion",
                        "--quick", "--results", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:]
    for row in ("qsgd 4-bit + EF", "sign + EF, hook momentum", "topk 1% + EF, hook momentum"):
        assert row in p.stdout
