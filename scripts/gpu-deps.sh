#!/usr/bin/env bash
# Copies what scripts/gpu-check.sh needs and a bare GPU machine lacks into .gpu-deps/
# (git-ignored): GoogleTest's source tree from Debian's googletest package, and nccl.h (for
# a toolkit without NCCL's header; the library itself is taken from PyTorch's wheel there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=/usr/src/googletest
[ -d "$src" ] || { echo "gpu-deps: $src is missing (apt-get install googletest)" >&2; exit 1; }
mkdir -p "$root/.gpu-deps"
rm -rf "$root/.gpu-deps/googletest"
cp -r "$src" "$root/.gpu-deps/googletest"
if [ -f /usr/local/cuda/include/nccl.h ]; then
  mkdir -p "$root/.gpu-deps/nccl/include"
  cp /usr/local/cuda/include/nccl.h "$root/.gpu-deps/nccl/include/"
fi
echo "gpu-deps: $(du -sh "$root/.gpu-deps" | cut -f1) in .gpu-deps (carry it: device run carry [\".gpu-deps\"])"
