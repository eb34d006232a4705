#!/usr/bin/env bash
# Builds, on a machine with nvcc but no GPU, everything a GPU check needs into one folder to
# carry to a GPU machine that has no UCX, no GoogleTest and no network, where nothing is
# compiled: the library and the GPU test binaries (sm_90: H100/H200), Debian's UCX runtime
# with what it needs (libnuma), the Python package and its CUDA tests, kernel_bench.py, and
# the runner (scripts/gpu-bundle-run.sh as run.sh). Binaries find the bundle's libraries
# through $ORIGIN; no path of this machine is needed there.
#
# usage: scripts/gpu-bundle.sh [--build-dir DIR] [--out DIR] [--sm80] [--no-build] [--keep-debug]
#   --build-dir DIR  build tree to use (default build-bundle); a new one is configured
#                    Release, sm_90 only, -Werror, with $CUDACXX when set. CI passes its
#                    normal tree (build/) to check the packaging without a second CUDA build;
#                    that bundle carries that tree's architectures.
#   --out DIR        where the bundle goes (default .gpu-bundle).
#   --sm80           also sm_80 (A100) in a fresh default tree.
#   --no-build       package what the tree already holds.
#   --keep-debug     do not strip the binaries.
#   --max-mib N      fail when the tarball is larger (default 25; 0: no limit).
# Output: .gpu-bundle/gradwire-gpu.tar.xz alone (git-ignored; at most 25 MiB; the folder it
# was packed from is removed, so carrying .gpu-bundle carries only the tarball). On the GPU
# machine (the device tool, carry [".gpu-bundle"]):
#   tar xJf .gpu-bundle/gradwire-gpu.tar.xz -C /tmp && /tmp/gradwire-gpu/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-bundle
out=$root/.gpu-bundle
archs="90-real"
do_build=1
strip=1
max_mib=25
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$(realpath -m "$2"); shift ;;
    --out) out=$(realpath -m "$2"); shift ;;
    --sm80) archs="80-real;90-real" ;;
    --no-build) do_build=0 ;;
    --keep-debug) strip=0 ;;
    --max-mib) max_mib=$2; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--out DIR] [--sm80] [--no-build] [--keep-debug] [--max-mib N]" >&2; exit 2 ;;
  esac
  shift
done
stage=$out/gradwire-gpu
# What the runner runs; test_device_over_ucx_gpu only exists where UCX is built (always here).
bins=(test_device_codecs test_device_collectives_gpu test_device_over_ucx_gpu test_nccl_library)
libs_built=(gw_fake_old_nccl)

if [ $do_build = 1 ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    nvcc=()
    [ -n "${CUDACXX:-}" ] && nvcc=(-DCMAKE_CUDA_COMPILER="$CUDACXX")
    cmake -S "$root" -B "$build" "${gen[@]}" "${nvcc[@]}" -DCMAKE_BUILD_TYPE=Release -DGW_WITH_CUDA=ON -DGW_WITH_UCX=ON \
      -DGW_WERROR=ON -DGW_BUILD_PERF=OFF -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null
  fi
  grep -q '^GW_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "gpu-bundle: $build is not a CUDA build" >&2; exit 1; }
  grep -q '^GW_WITH_UCX:BOOL=ON' "$build/CMakeCache.txt" || { echo "gpu-bundle: $build has no UCX" >&2; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target gradwire "${bins[@]}" "${libs_built[@]}"
fi

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib/ucx" "$stage/python" "$stage/tests/python" "$stage/perf"

# The library: the real file and its two links.
real=$(readlink -f "$build/libgradwire.so")
cp "$real" "$stage/lib/"
soname=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
ln -sf "$(basename "$real")" "$stage/lib/$soname"
ln -sf "$soname" "$stage/lib/libgradwire.so"
for b in "${bins[@]}"; do
  f=$(find "$build" -type f -name "$b" -perm -u+x | head -n 1)
  [ -n "$f" ] || { echo "gpu-bundle: $b was not built in $build" >&2; exit 1; }
  cp "$f" "$stage/bin/"
done
cp "$(find "$build" -name 'libgw_fake_old_nccl.so' | head -n 1)" "$stage/bin/"

# UCX and libnuma as the library resolves them here, under their sonames; UCX's transport
# modules whose own needs the bundle meets (cma; ib and rdmacm need libibverbs, and a
# machine that has InfiniBand has its own UCX).
while read -r name _ path _; do
  case "$name" in
    libucp.so*|libuct.so*|libucs.so*|libucm.so*|libnuma.so*) cp -L "$path" "$stage/lib/$name" ;;
  esac
done < <(ldd "$real" | sed 's/^[[:space:]]*//')
sys_modules=$(dirname "$(ldd "$real" | awk '/libucs.so/ {print $3}')")/ucx
for m in "$sys_modules"/libuct_cma.so.0; do
  [ -e "$m" ] && cp -L "$m" "$stage/lib/ucx/"
done

# $ORIGIN everywhere: the test binaries find lib/, the libraries each other.
for f in "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/ucx/*; do
  [ -L "$f" ] && continue
  case "$f" in
    "$stage"/bin/*) rp='$ORIGIN/../lib' ;;
    "$stage"/lib/ucx/*) rp='$ORIGIN/..' ;;
    *) rp='$ORIGIN' ;;
  esac
  patchelf --set-rpath "$rp" "$f"
  [ $strip = 1 ] && strip --strip-unneeded "$f" 2>/dev/null || true
done

# Python: the package, its CUDA tests with what they import, and the kernel benchmark.
cp -r "$root/python/gradwire" "$stage/python/"
# The torch backend's sources, where gradwire._backend builds it from on first import on the
# GPU machine (its torch and Python are not this machine's), and ninja, which that build needs.
python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from gradwire import _build_torch as b; b.copy_sources(sys.argv[2], sys.argv[3])' \
  "$root/python" "$root" "$stage/python/gradwire/_torch_src"
cp "$(command -v ninja)" "$stage/bin/ninja"
cp "$root"/tests/python/*.py "$stage/tests/python/"
cp "$root/perf/kernel_bench.py" "$stage/perf/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/scripts/gpu-bundle-run.sh" "$stage/run.sh"
cp "$root/scripts/gpu-bundle-check-libs.sh" "$stage/check-libs.sh"
chmod +x "$stage/run.sh" "$stage/check-libs.sh"

commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
built_archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")
{
  echo "bundle: gradwire $commit$dirty, built $(date -u +%Y-%m-%dT%H:%MZ) with $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p') for ${built_archs}, $(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt") $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")"
  echo "ucx: $(ls "$stage/lib" | grep -E '^libuc|^libnuma' | tr '\n' ' ')modules: $(ls "$stage/lib/ucx" | tr '\n' ' ')"
  echo "files:"
  (cd "$stage" && find . -type f | sort | xargs sha256sum | awk '{print "  " $2 "  " $1}')
} > "$stage/MANIFEST.txt"

XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$out" -cJf "$out/gradwire-gpu.tar.xz" gradwire-gpu
size=$(stat -c %s "$out/gradwire-gpu.tar.xz")
mib=$(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}')
echo "gpu-bundle: ${out#"$root"/}/gradwire-gpu.tar.xz, $mib MiB (unpacked $(du -sh "$stage" | cut -f1)), gradwire $commit$dirty, archs $built_archs"
rm -rf "$stage"
if [ "$max_mib" -gt 0 ] && [ "$size" -gt $((max_mib * 1048576)) ]; then
  echo "gpu-bundle: over the $max_mib MiB a GPU call should carry" >&2
  exit 1
fi
echo "gpu-bundle: on the GPU machine: tar xJf .gpu-bundle/gradwire-gpu.tar.xz -C /tmp && /tmp/gradwire-gpu/run.sh"
