#!/usr/bin/env bash
# Builds the torch.distributed backend "gradwire" (torch_backend/) for one Python's PyTorch.
#
#   scripts/build-torch-backend.sh [PYTHON]      default: .venv/bin/python of this tree
#   scripts/build-torch-backend.sh /usr/bin/python3   (Debian's torch 1.13; needs libtorch-dev)
#
# The module is named for the torch it was built against, _torch_backend_<major>_<minor>, and
# lands in build-torch/<that name>/<that name>.so, where python/gradwire/_backend.py looks
# (or set GRADWIRE_TORCH_BACKEND to the .so). It links to no libgradwire: _backend.py hands it
# the path python/gradwire/_lib.py loaded and it opens that one (dlopen).
# python/gradwire/_build_torch.py does the work (every torch_backend/*.cpp, with CUDA when torch
# has it and a CUDA toolkit is found; GRADWIRE_TORCH_NO_CUDA=1: CPU-only); pip install and the
# first import of gradwire.torch build the same way. MAX_JOBS=N: compile jobs. VERBOSE=1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${1:-$ROOT/.venv/bin/python}
exec "$PY" "$ROOT/python/gradwire/_build_torch.py" --src "$ROOT"
