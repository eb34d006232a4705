#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one go: build with CUDA (sm_80 and sm_90), run the
# GPU tests (ctest -L "gpu|nccl": device codecs and collectives against the host, bit for bit), run the
# kernel benchmark against PyTorch on the same GPU, and print a summary. The GPU tests include
# the device collectives with the CUDA backend, and NCCL when one can be loaded (PyTorch's
# bundled NCCL is used when the toolkit has none).
#
# When nvidia-smi sees a GPU, nothing may pass by skipping: the GPU tests run with
# GW_REQUIRE_GPU=1 (a test that finds no usable device fails instead of skipping), and any
# test that still reports itself skipped or not run (ctest's JUnit file and log, pytest's
# JUnit file) fails the check. It prints the driver's version and the CUDA version it
# supports, picks a toolkit that driver can run (CUDACXX, nvcc on the PATH, /usr/local/cuda,
# /usr/local/cuda-*: the newest not newer than the driver), or says why none fits and exits 3.
#
# usage: scripts/gpu-check.sh [--toolkit-only] [OUTDIR]     (default $OUT, else build-gpu/out)
# --toolkit-only: print the driver, the toolkits and the choice, then stop.
# $GW_GPU_BUILD: the build directory (default build-gpu).
# Needs nvcc, CMake, python3 with torch. GoogleTest: the system's, or a source tree in
# .gpu-deps/googletest (scripts/gpu-deps.sh copies Debian's there, for machines without one).
# UCX is used when pkg-config finds it; the GPU tests do not need it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
toolkit_only=0
if [ "${1:-}" = --toolkit-only ]; then toolkit_only=1; shift; fi
build=${GW_GPU_BUILD:-$root/build-gpu}
out=${1:-${OUT:-$build/out}}
mkdir -p "$out"
jobs=$(nproc)

# ---- The GPU and its driver.
gpus=0
driver=none
driver_cuda=
if ! command -v nvidia-smi >/dev/null; then
  :
elif ! nvidia-smi -L > "$out/gpus.txt" 2>&1 && ! grep -q 'No devices were found' "$out/gpus.txt"; then
  # Installed but failing (driver not loaded, device lost): a GPU machine that cannot run GPU
  # code, so the tests are required to run, and fail, rather than allowed to skip.
  echo "nvidia-smi is installed but failed: $(head -n 2 "$out/gpus.txt")" | tee "$out/driver.txt"
  gpus=1
elif grep -q '^GPU ' "$out/gpus.txt"; then
  gpus=$(grep -c '^GPU ' "$out/gpus.txt")
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt" || true
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
  # The newest CUDA the driver runs; nvidia-smi prints it in its banner only.
  driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1 || true)
fi
if [ "$driver" != none ]; then
  echo "GPUs seen by nvidia-smi: $gpus; driver $driver, supports CUDA ${driver_cuda:-(unknown)}" | tee "$out/driver.txt"
elif [ "$gpus" = 0 ]; then
  echo "no GPU seen by nvidia-smi: the GPU tests will skip and nothing here is a GPU result" | tee "$out/driver.txt"
fi

# ---- A toolkit the driver can run.
nvcc_release() { "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1; }
not_newer() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$2" ]; }  # $1 <= $2
candidates=()
[ -n "${CUDACXX:-}" ] && candidates+=("$CUDACXX")
command -v nvcc >/dev/null && candidates+=("$(command -v nvcc)")
[ -x /usr/local/cuda/bin/nvcc ] && candidates+=(/usr/local/cuda/bin/nvcc)
while IFS= read -r c; do candidates+=("$c"); done < <(ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -V -r)
major() { echo "${1%%.*}"; }
# Without a driver to ask, the first found (CUDACXX, the PATH, /usr/local/cuda). With one: the
# user's CUDACXX if the driver runs it, else the newest toolkit not newer than the driver,
# else the newest of the driver's major version (CUDA's minor version compatibility: this
# build carries sm_80 and sm_90 code, so only GPUs that need PTX JIT would be refused).
nvcc_path=
nvcc_ver=
minor_path=
minor_ver=
listed=
seen=" "
for c in "${candidates[@]}"; do
  real=$(readlink -f "$c" 2>/dev/null || echo "$c")
  case "$seen" in *" $real "*) continue ;; esac
  seen+="$real "
  v=$(nvcc_release "$c" || true)
  [ -n "$v" ] || continue
  if ! not_newer 12.0 "$v"; then listed+="  $c: CUDA $v (too old: gradwire needs 12.0 or newer)"$'\n'; continue; fi
  listed+="  $c: CUDA $v"$'\n'
  if [ -z "$driver_cuda" ]; then
    [ -n "$nvcc_path" ] || { nvcc_path=$c; nvcc_ver=$v; }
  elif not_newer "$v" "$driver_cuda"; then
    if [ "$c" = "${CUDACXX:-}" ]; then user_fits=1; nvcc_path=$c; nvcc_ver=$v; fi
    if [ -z "${user_fits:-}" ] && { [ -z "$nvcc_path" ] || ! not_newer "$v" "$nvcc_ver"; }; then nvcc_path=$c; nvcc_ver=$v; fi
  elif [ "$(major "$v")" = "$(major "$driver_cuda")" ]; then
    if [ -z "$minor_path" ] || ! not_newer "$v" "$minor_ver"; then minor_path=$c; minor_ver=$v; fi
  fi
done
printf 'toolkits found:\n%s' "${listed:-  none
}" | tee "$out/toolkits.txt"
if [ -z "$nvcc_path" ] && [ -n "$minor_path" ]; then
  nvcc_path=$minor_path
  nvcc_ver=$minor_ver
  echo "note: CUDA $nvcc_ver is newer than the driver's $driver_cuda, same major version: it runs by CUDA's minor" \
    "version compatibility (sm_80/sm_90 code is in the binary; a GPU that needs PTX JIT would refuse it)" | tee -a "$out/toolkits.txt"
fi
if [ -z "$nvcc_path" ]; then
  if [ -z "$listed" ]; then
    echo "gpu-check: no nvcc found (set CUDACXX)" | tee -a "$out/toolkits.txt" >&2
  else
    echo "gpu-check: CANNOT BUILD FOR THIS GPU: the driver ($driver) runs CUDA ${driver_cuda:-?} at most and gradwire" \
      "needs 12.0 or newer; none of the toolkits above is in between (nor of the driver's major version)." \
      "Install a CUDA toolkit from 12.0 to ${driver_cuda:-?} (point CUDACXX at its nvcc) or a newer driver." \
      | tee -a "$out/toolkits.txt" >&2
  fi
  exit 3
fi
if [ -n "${CUDACXX:-}" ] && [ "$nvcc_path" != "$CUDACXX" ]; then
  echo "CUDACXX=$CUDACXX does not fit the driver (CUDA $driver_cuda); using $nvcc_path instead" | tee -a "$out/toolkits.txt"
fi
echo "toolkit: $nvcc_path (CUDA $nvcc_ver; the runtime is linked statically, so the runtime version is $nvcc_ver)" \
  | tee -a "$out/toolkits.txt"
cuda_root=$(cd "$(dirname "$nvcc_path")/.." && pwd)
[ "$toolkit_only" = 0 ] || exit 0

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
if ! [ -f "$cuda_root/include/nccl.h" ]; then
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
fresh=()  # a build directory configured with another compiler starts over
if [ -f "$build/CMakeCache.txt" ] && ! grep -qx "CMAKE_CUDA_COMPILER:[A-Z]*=$nvcc_path" "$build/CMakeCache.txt"; then
  fresh=(--fresh)
fi
cmake "${fresh[@]}" -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGW_WITH_CUDA=ON -DGW_WITH_UCX=$ucx \
  -DCMAKE_CUDA_COMPILER="$nvcc_path" -DCUDAToolkit_ROOT="$cuda_root" \
  -DGW_WERROR=ON -DGW_BUILD_PERF=OFF "${prefix_args[@]}" "${nccl_args[@]}" | tail -3
cmake --build "$build" -j "$jobs" 2>&1 | tail -5

# GW_REQUIRE_GPU=0 lets the tests skip again (to see what they say); the skips still fail the check.
require=()
[ "$gpus" -gt 0 ] && require=(GW_REQUIRE_GPU="${GW_REQUIRE_GPU-1}")
set +e
rm -f "$out/ctest-gpu.xml" "$out/python-cuda.xml"
env "${require[@]}" ctest --test-dir "$build" -L 'gpu|nccl' --no-tests=error --output-on-failure --timeout 1800 \
  --output-junit "$out/ctest-gpu.xml" 2>&1 | tee "$out/ctest-gpu.txt"
tests_rc=${PIPESTATUS[0]}
# CUDA tensors through the Python package (skipped when torch has no CUDA or no pytest).
py_ran=0
if python3 -c "import pytest" 2>/dev/null; then
  env "${require[@]}" GRADWIRE_LIB="$build/libgradwire.so" PYTHONPATH="$root/python" python3 -m pytest -q -rs \
    -p no:cacheprovider --junitxml="$out/python-cuda.xml" "$root/tests/python/test_cuda.py" 2>&1 | tee "$out/python-cuda.txt"
  py_rc=${PIPESTATUS[0]}
  py_ran=1
else
  echo "python CUDA test not run: no pytest" | tee "$out/python-cuda.txt"
  py_rc=0
fi
PYTHONUNBUFFERED=1 python3 "$root/perf/kernel_bench.py" --lib "$build/libgradwire.so" --json "$out/kernel_bench.json" \
  2>&1 | tee "$out/kernel_bench.md"
bench_rc=${PIPESTATUS[0]}
set -e

# Skips, counted from what ctest and pytest wrote (JUnit) and from ctest's log, whichever
# sees more: a format change in one cannot hide them.
count() { grep -c -E "$1" "$2" 2>/dev/null || true; }
skipped_xml=$(count '<skipped' "$out/ctest-gpu.xml")
skipped_log=$(count '\*\*\*(Skipped|Not Run)' "$out/ctest-gpu.txt")
skipped=$(( skipped_xml > skipped_log ? skipped_xml : skipped_log ))
py_skipped=0
if [ "$py_ran" = 1 ]; then py_skipped=$(count '<skipped' "$out/python-cuda.xml"); fi

echo
echo "== summary"
echo "driver: $driver (CUDA ${driver_cuda:-none}); toolkit and static runtime: CUDA $nvcc_ver ($nvcc_path)"
grep -E "tests passed|tests failed" "$out/ctest-gpu.txt" | tail -1 || true
py_note=""
[ "$py_ran" = 1 ] || py_note=" (not run: no pytest)"
echo "GPU tests: exit $tests_rc, $skipped skipped; python CUDA test: exit $py_rc, $py_skipped skipped$py_note; kernel benchmark: exit $bench_rc (table above, also $out/kernel_bench.md)"
status=0
[ "$tests_rc" = 0 ] && [ "$py_rc" = 0 ] && [ "$bench_rc" = 0 ] || status=1
if [ "$gpus" -gt 0 ]; then
  why=()
  [ "$skipped" -gt 0 ] && why+=("$skipped GPU test(s) skipped")
  [ "$py_skipped" -gt 0 ] && why+=("$py_skipped python CUDA test(s) skipped")
  [ "$py_ran" = 1 ] || why+=("the python CUDA test did not run (no pytest)")
  if [ ${#why[@]} -gt 0 ]; then
    echo "gpu-check: FAILED: nvidia-smi sees $gpus GPU(s), but: $(IFS=';'; echo "${why[*]}" | sed 's/;/; /g')." \
      "Nothing may pass on a GPU machine without running."
    grep -E '\*\*\*Skipped|\(Skipped\)|Not Run' "$out/ctest-gpu.txt" | head -n 10 || true
    status=1
  fi
else
  echo "gpu-check: no GPU seen: $skipped GPU tests skipped as expected; this run is not a GPU result"
fi
exit $status
