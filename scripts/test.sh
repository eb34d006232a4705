#!/usr/bin/env bash
# Builds (default compiler: GCC on Debian) and runs every test. With --sanitize, builds a
# separate ASan+UBSan tree with clang and runs its tests too, then the libFuzzer harnesses for
# 30 s each (scripts/fuzz.sh; what CI does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    *) echo "usage: $0 [--sanitize]" >&2; exit 2 ;;
  esac
done

# Current torch in .venv and the torch backend built for it (and for Debian's torch), before
# CMake looks for them. GW_SKIP_TORCH_SETUP=1 skips it (the torch tests then run on what exists).
if [ "${GW_SKIP_TORCH_SETUP:-0}" != 1 ]; then "$root/scripts/setup-torch.sh"; fi
# One CUDA architecture is enough to compile every kernel warning-free and to run the tests:
# the GPU's own where there is one, else sm_90 (a third of the three the default build makes,
# and most of the build's time). GW_TEST_CUDA_ARCHS overrides it.
cuda_archs=${GW_TEST_CUDA_ARCHS:-}
if [ -z "$cuda_archs" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then cuda_archs=native; else cuda_archs=90-real; fi
fi
GW_BUILD_DIR=$root/build "$root/scripts/build.sh" -DGW_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda_archs"
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)" --timeout 300
# The CUDA kernels' own sources, run on the CPU against the host codecs (no GPU here).
"$root/scripts/emulate-kernels.sh"

if [ "$sanitize" = 1 ]; then
  # The sanitizer tree is built with clang (the normal one with GCC), so every commit builds
  # warning-free with both compilers and runs its tests under both.
  CC=clang CXX=clang++ GW_BUILD_DIR=$root/build-asan GW_BUILD_TYPE=Debug "$root/scripts/build.sh" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DGW_WERROR=ON -DGW_SANITIZE=address,undefined -DGW_WITH_CUDA=OFF -DGW_BUILD_PERF=OFF
  # The sanitized tree runs every test but the heaviest data-path sweeps over UCX's TCP
  # transport: the same library code runs them over shared memory here and over TCP in the
  # normal tree, and under ASan they took 16 of CI's minutes. Their failure-path twins (killed
  # and frozen peers, mismatched calls) still run over TCP here.
  asan_skip='^(mp_collectives_fork_np[1-4]_tcp|Hierarchical[.](LossyCallsInPiecesKeepEveryProperty'
  asan_skip+='|SwitchingBetweenFlatAndHierarchicalKeepsTheResidual)_tcp|DenseCollectives[.](AllreduceEveryOpAndDtype'
  asan_skip+='|HierarchicalAllreduceEveryLayoutOpAndDtype|ReduceToEveryRoot)_tcp'
  # 1025 threads as ranks: minutes under ASan on two cores; the normal tree runs it.
  asan_skip+='|ManyRanks[.]ACommunicatorOf1025RanksRunsACall)$'
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$(nproc)" --timeout 600 -E "$asan_skip"
  # The library without UCX (what a GPU machine without UCX could build): warning-free with
  # clang, and one rank works on the in-process transport.
  # Unoptimised and without debug info: the check is the warnings, and this halves its time.
  GW_BUILD_DIR=$root/build-noucx GW_BUILD_TYPE=Debug "$root/scripts/build.sh" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGW_WERROR=ON -DGW_WITH_UCX=OFF -DGW_WITH_CUDA=OFF \
    -DGW_BUILD_TESTS=OFF -DGW_BUILD_PERF=OFF -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0
  GRADWIRE_LIB=$root/build-noucx/libgradwire.so PYTHONPATH=$root/python /usr/bin/python3 "$root/tests/python/one_rank_smoke.py"
  "$root/scripts/fuzz.sh" --seconds 30
fi
