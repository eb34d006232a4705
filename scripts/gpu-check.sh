#!/usr/bin/env bash
# The GPU check on a machine that has both a GPU and the build tools (nvcc, CMake, GoogleTest,
# UCX, patchelf, python3 with torch): it picks a toolkit the driver can run, builds the GPU
# bundle with it (scripts/gpu-bundle.sh) and runs the bundle's runner (run.sh: every step,
# a summary table last; docs/gpu.md). A GPU machine without build tools takes a bundle built
# elsewhere instead, as the device runs of docs/gpu.md do.
#
# It prints the driver's version and the CUDA version it supports, picks a toolkit that
# driver can run (CUDACXX, nvcc on the PATH, /usr/local/cuda, /usr/local/cuda-*: the newest
# not newer than the driver), or says why none fits and exits 3.
#
# usage: scripts/gpu-check.sh [--toolkit-only] [OUTDIR]     (default $OUT, else build-gpu/out)
# --toolkit-only: print the driver, the toolkits and the choice, then stop.
# $GW_GPU_BUILD: the build directory (default build-gpu).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
toolkit_only=0
if [ "${1:-}" = --toolkit-only ]; then toolkit_only=1; shift; fi
build=${GW_GPU_BUILD:-$root/build-gpu}
out=${1:-${OUT:-$build/out}}
info=$build/check-info  # this script's own notes; $out holds the runner's eight files
mkdir -p "$out" "$info"

# ---- The GPU and its driver.
gpus=0
driver=none
driver_cuda=
if ! command -v nvidia-smi >/dev/null; then
  :
elif ! nvidia-smi -L > "$info/gpus.txt" 2>&1 && ! grep -q 'No devices were found' "$info/gpus.txt"; then
  # Installed but failing (driver not loaded, device lost): a GPU machine that cannot run GPU
  # code, so the tests are required to run, and fail, rather than allowed to skip.
  echo "nvidia-smi is installed but failed: $(head -n 2 "$info/gpus.txt")" | tee "$info/driver.txt"
  gpus=1
elif grep -q '^GPU ' "$info/gpus.txt"; then
  gpus=$(grep -c '^GPU ' "$info/gpus.txt")
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$info/gpu.txt" || true
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
  # The newest CUDA the driver runs; nvidia-smi prints it in its banner only.
  driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1 || true)
fi
if [ "$driver" != none ]; then
  echo "GPUs seen by nvidia-smi: $gpus; driver $driver, supports CUDA ${driver_cuda:-(unknown)}" | tee "$info/driver.txt"
elif [ "$gpus" = 0 ]; then
  echo "no GPU seen by nvidia-smi: the GPU tests will skip and nothing here is a GPU result" | tee "$info/driver.txt"
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
}" | tee "$info/toolkits.txt"
if [ -z "$nvcc_path" ] && [ -n "$minor_path" ]; then
  nvcc_path=$minor_path
  nvcc_ver=$minor_ver
  echo "note: CUDA $nvcc_ver is newer than the driver's $driver_cuda, same major version: it runs by CUDA's minor" \
    "version compatibility (sm_80/sm_90 code is in the binary; a GPU that needs PTX JIT would refuse it)" | tee -a "$info/toolkits.txt"
fi
if [ -z "$nvcc_path" ]; then
  if [ -z "$listed" ]; then
    echo "gpu-check: no nvcc found (set CUDACXX)" | tee -a "$info/toolkits.txt" >&2
  else
    echo "gpu-check: CANNOT BUILD FOR THIS GPU: the driver ($driver) runs CUDA ${driver_cuda:-?} at most and gradwire" \
      "needs 12.0 or newer; none of the toolkits above is in between (nor of the driver's major version)." \
      "Install a CUDA toolkit from 12.0 to ${driver_cuda:-?} (point CUDACXX at its nvcc) or a newer driver." \
      | tee -a "$info/toolkits.txt" >&2
  fi
  exit 3
fi
if [ -n "${CUDACXX:-}" ] && [ "$nvcc_path" != "$CUDACXX" ]; then
  echo "CUDACXX=$CUDACXX does not fit the driver (CUDA $driver_cuda); using $nvcc_path instead" | tee -a "$info/toolkits.txt"
fi
echo "toolkit: $nvcc_path (CUDA $nvcc_ver; the runtime is linked statically, so the runtime version is $nvcc_ver)" \
  | tee -a "$info/toolkits.txt"
cuda_root=$(cd "$(dirname "$nvcc_path")/.." && pwd)
[ "$toolkit_only" = 0 ] || exit 0

# The bundle, built with the chosen toolkit, and its runner; without a GPU the runner expects
# none (the tests skip, and the summary says nothing there is a GPU result).
CUDACXX=$nvcc_path "$root/scripts/gpu-bundle.sh" --build-dir "$build" --out "$build/bundle"
expect=()
[ "$gpus" -gt 0 ] || expect=(--expect-no-gpu)
OUT=$out "$build/bundle/gradwire-gpu/run.sh" "${expect[@]}"
