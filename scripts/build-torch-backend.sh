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
# torch.utils.cpp_extension compiles it (ninja, -O2); one translation unit, a few minutes here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${1:-$ROOT/.venv/bin/python}
exec "$PY" - "$ROOT" <<'PYEOF'
import os
import re
import sys

root = sys.argv[1]
import torch
from torch.utils import cpp_extension

major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
name = "_torch_backend_%d_%d" % (major, minor)
out = os.path.join(root, "build-torch", name)
gen = os.path.join(out, "include", "gradwire")
os.makedirs(gen, exist_ok=True)

# gradwire.h includes the version header CMake generates; make the same one here, so the
# extension builds without a configured libgradwire build directory.
with open(os.path.join(root, "CMakeLists.txt")) as f:
    v = re.search(r"project\(gradwire VERSION (\d+)\.(\d+)\.(\d+)", f.read()).groups()
with open(os.path.join(root, "cmake", "version.h.in")) as f:
    text = f.read()
for key, value in (("PROJECT_VERSION_MAJOR", v[0]), ("PROJECT_VERSION_MINOR", v[1]),
                   ("PROJECT_VERSION_PATCH", v[2]), ("PROJECT_VERSION", ".".join(v))):
    text = text.replace("@%s@" % key, value)
path = os.path.join(gen, "version.h")
if not os.path.exists(path) or open(path).read() != text:
    with open(path, "w") as f:
        f.write(text)

cpp_extension.load(
    name=name,
    sources=[os.path.join(root, "torch_backend", "gradwire_backend.cpp")],
    build_directory=out,
    # torch 1.13's cpp_extension asks for C++14, too old for the source; 2.x picks its own (C++20).
    extra_cflags=["-O2", "-Wall", "-Wno-unused-function"] + (["-std=c++17"] if major < 2 else []),
    extra_include_paths=[os.path.join(root, "include"), os.path.join(out, "include")],
    with_cuda=False,
    verbose=os.environ.get("VERBOSE") == "1",
)
print("built %s for torch %s" % (os.path.join(out, name + ".so"), torch.__version__))
PYEOF
