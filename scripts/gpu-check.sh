#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one go: build with CUDA (sm_80 and sm_90), run the
# GPU tests (ctest -L "gpu|nccl": device codecs and collectives against the host, bit for bit), run the
# kernel benchmark against PyTorch on the same GPU, and print a summary. The GPU tests include
# the device collectives with the CUDA backend, and NCCL when one can be loaded (PyTorch's
# bundled NCCL is used when the toolkit has none).
#
# usage: scripts/gpu-check.sh [OUTDIR]     (default $OUT, else build-gpu/out)
# Needs nvcc, CMake, python3 with torch. GoogleTest: the system's, or a source tree in
# .gpu-deps/googletest (scripts/gpu-deps.sh copies Debian's there, for machines without one).
# UCX is used when pkg-config finds it; the GPU tests do not need it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/build-gpu/out}}
mkdir -p "$out"
build=$root/build-gpu
jobs=$(nproc)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt" || true
nvcc --version | tail -2

prefix_args=()
if [ -d "$root/.gpu-deps/googletest" ] && ! [ -f /usr/lib/x86_64-linux-gnu/libgtest.a ] && ! [ -f /usr/local/lib/libgtest.a ]; then
  cmake -S "$root/.gpu-deps/googletest" -B /tmp/gw-gtest-build -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gw-gtest >/dev/null
  cmake --build /tmp/gw-gtest-build -j "$jobs" >/dev/null
  cmake --install /tmp/gw-gtest-build >/dev/null
  prefix_args=(-DCMAKE_PREFIX_PATH=/tmp/gw-gtest)
fi
# NCCL: the toolkit's header if it has one, else PyTorch's wheel's (nvidia/nccl), else the copy
# in .gpu-deps; the library is loaded at run time ($GW_NCCL_LIBRARY, else the loader's path).
nccl_args=()
torch_nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
if ! [ -f /usr/local/cuda/include/nccl.h ]; then
  if [ -n "$torch_nccl" ] && [ -f "$torch_nccl/include/nccl.h" ]; then
    nccl_args=(-DGW_NCCL_INCLUDE_DIR="$torch_nccl/include")
  elif [ -f "$root/.gpu-deps/nccl/include/nccl.h" ]; then
    nccl_args=(-DGW_NCCL_INCLUDE_DIR="$root/.gpu-deps/nccl/include")
  fi
fi
if [ -z "${GW_NCCL_LIBRARY:-}" ] && [ -n "$torch_nccl" ] && [ -f "$torch_nccl/lib/libnccl.so.2" ]; then
  export GW_NCCL_LIBRARY="$torch_nccl/lib/libnccl.so.2"
fi
echo "NCCL: header ${nccl_args[*]:-from the toolkit}, library ${GW_NCCL_LIBRARY:-from the loader path}" | tee "$out/nccl.txt"

ucx=OFF
if pkg-config --exists ucx 2>/dev/null; then ucx=ON; fi

gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGW_WITH_CUDA=ON -DGW_WITH_UCX=$ucx \
  -DGW_WERROR=ON -DGW_BUILD_PERF=OFF "${prefix_args[@]}" "${nccl_args[@]}" | tail -3
cmake --build "$build" -j "$jobs" 2>&1 | tail -5

set +e
ctest --test-dir "$build" -L 'gpu|nccl' --output-on-failure --timeout 1800 2>&1 | tee "$out/ctest-gpu.txt"
tests_rc=${PIPESTATUS[0]}
# CUDA tensors through the Python package (skipped when torch has no CUDA or no pytest).
if python3 -c "import pytest" 2>/dev/null; then
  GRADWIRE_LIB="$build/libgradwire.so" PYTHONPATH="$root/python" python3 -m pytest -q -rs -p no:cacheprovider \
    "$root/tests/python/test_cuda.py" 2>&1 | tee "$out/python-cuda.txt"
  py_rc=${PIPESTATUS[0]}
else
  echo "python CUDA test not run: no pytest" | tee "$out/python-cuda.txt"
  py_rc=0
fi
PYTHONUNBUFFERED=1 python3 "$root/perf/kernel_bench.py" --lib "$build/libgradwire.so" --json "$out/kernel_bench.json" \
  2>&1 | tee "$out/kernel_bench.md"
bench_rc=${PIPESTATUS[0]}
set -e

echo
echo "== summary"
grep -E "tests passed|tests failed|Skipped" "$out/ctest-gpu.txt" | tail -3
echo "GPU tests: exit $tests_rc; python CUDA test: exit $py_rc; kernel benchmark: exit $bench_rc (table above, also $out/kernel_bench.md)"
[ "$tests_rc" = 0 ] && [ "$py_rc" = 0 ] && [ "$bench_rc" = 0 ]
