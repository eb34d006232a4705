#!/usr/bin/env bash
# Current PyTorch for gradwire's torch backend: a virtual environment in .venv (seeing the
# system's packages, so Debian's numpy, pytest and matplotlib serve it too) with torch from
# PyPI, then the backend built against that torch (scripts/build-torch-backend.sh). Idempotent:
# torch is installed once; the backend is rebuilt when its sources change.
#
# usage: scripts/setup-torch.sh            # .venv, torch (GW_TORCH_SPEC, default "torch"), backend
# Environment: GW_VENV (default <repo>/.venv), GW_TORCH_SPEC (a pip requirement, default
# "torch>=2"; e.g. torch==2.15.0).
# Afterwards: .venv/bin/python -c 'import gradwire.torch' (with python/ on PYTHONPATH) registers
# the "gradwire" backend.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${GW_VENV:-$root/.venv}
# "torch>=2": the venv sees Debian's packages, and Debian's torch 1.13 must not count as installed.
spec=${GW_TORCH_SPEC:-torch>=2}

if [ ! -x "$venv/bin/python" ]; then
  # Debian's interpreter, so that its packages (pytest, matplotlib) are seen from the venv.
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
py=$venv/bin/python
if ! "$py" -c 'import sys, torch, numpy, pytest, expecttest; sys.exit(int(torch.__version__.split(".")[0]) < 2)' \
    >/dev/null 2>&1; then
  # The wheel pulls CUDA libraries (a few GB) once; pip's cache makes a second setup quick.
  # expecttest: torch's own distributed test suite (tests/torch_suite) imports it.
  "$py" -m pip install --quiet --disable-pip-version-check "$spec" numpy pytest expecttest
fi
# torchft (fault-tolerant training; gradwire.torchft's process group and its tests), without
# letting it move torch: its wheel requires only torch>=2.7.
if ! "$py" -c 'import torchft' >/dev/null 2>&1; then
  "$py" -m pip install --quiet --disable-pip-version-check torchft "$spec" ||
    echo "setup-torch: torchft did not install; gradwire.torchft's tests will skip" >&2
fi
echo "setup-torch: $("$py" -c 'import torch; print("torch", torch.__version__)') in $venv"
"$root/scripts/build-torch-backend.sh" "$py"
# Debian's torch 1.13 too (the same source), when its C++ headers are installed (libtorch-dev).
if [ -x /usr/bin/python3 ] && [ -d /usr/include/torch/csrc ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  "$root/scripts/build-torch-backend.sh" /usr/bin/python3
fi
