#!/usr/bin/env bash
# Runs the CUDA kernels in kernels/*.cu on the CPU (tools/kernel_emulator) and compares them
# with the host codecs byte for byte; needs no GPU. Uses the host library from a normal build
# (scripts/build.sh, or $GW_BUILD_DIR) and builds into build/kernel-emulator (or $GW_EMU_OUT).
# usage: scripts/emulate-kernels.sh [--full]   (quick by default; exits non-zero on any failure)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GW_BUILD_DIR:-$root/build}
out=${GW_EMU_OUT:-$root/build/kernel-emulator}
tool=$root/tools/kernel_emulator
mode=quick
case "${1:-}" in
  "") ;;
  --full) mode=full ;;
  *) echo "usage: $0 [--full]" >&2; exit 2 ;;
esac

lib=$build/libgw_internal_archive.a
# Codecs register themselves from their own files, which nothing references: link those objects
# directly (a plain archive link would drop them).
codecs=("$build"/compressors/CMakeFiles/gw_compressors.dir/*.o)
if [[ ! -f $lib ]]; then
  echo "emulate-kernels: $lib is missing; run scripts/build.sh first" >&2
  exit 2
fi
if [[ ! -d $build/include ]]; then
  echo "emulate-kernels: $build/include is missing; run scripts/build.sh first" >&2
  exit 2
fi

mkdir -p "$out/gen" "$out/obj"
CXX=${CXX:-g++}
# -ffp-contract=off matches the host build (the byte-identity contract depends on it).
# Sanitizers catch out-of-bounds and misaligned accesses the GPU would fault on or ignore.
flags=(-std=c++17 -O1 -g -ffp-contract=off -DGW_KERNEL_EMULATOR -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -include "$tool/runtime/emu.hpp" -I"$tool/runtime/include" -I"$tool/runtime" -I"$root" -I"$root/include"
       -I"$build/include" -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas)

compile() {  # compile SRC OBJ, unless OBJ is newer than this script and every file it was built from
  local src=$1 obj=$2 dep=${2%.o}.d f stale=0
  if [[ -f $obj && -f $dep && $obj -nt $0 ]]; then
    for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$dep"); do
      if [[ $f -nt $obj ]]; then stale=1; break; fi
    done
  else
    stale=1
  fi
  [[ $stale == 1 ]] || return 0
  echo "  c++ $(basename "$src")"
  nice -n 19 "$CXX" "${flags[@]}" -MMD -MF "$dep" -c "$src" -o "$obj"
}

start=$SECONDS
echo "emulate-kernels: building into $out"
for k in dense_kernels qsgd_kernels sign_kernels radix_select topk_kernels dgc_kernels randomk_kernels sparse_kernels \
         header_kernel collective_kernels; do
  gen=$out/gen/$k.cpp
  # Replaced only on change, so an unchanged kernel keeps its object.
  python3 "$tool/transform.py" "$root/kernels/$k.cu" "$gen.new"
  if [[ -f $gen ]] && cmp -s "$gen" "$gen.new"; then rm "$gen.new"; else mv "$gen.new" "$gen"; fi
  compile "$gen" "$out/obj/$k.o"
done
# The host side of the device path compiles directly against the emulated runtime; the CUDA
# backend without GW_HAVE_NCCL (no NCCL here).
for src in "$tool/runtime/emu.cpp" "$root/kernels/device_scratch.cpp" "$root/kernels/device_codec.cpp" \
           "$root/collectives/algorithms/device/cuda_backend.cpp" "$tool/quant_harness.cpp" "$tool/sparse_harness.cpp" \
           "$tool/collectives_harness.cpp"; do
  compile "$src" "$out/obj/$(basename "$src" .cpp).o"
done
common=("$out/obj/emu.o" "$out/obj/device_scratch.o")
quant=("$out/obj/dense_kernels.o" "$out/obj/qsgd_kernels.o" "$out/obj/sign_kernels.o")
sparse=("$out/obj/radix_select.o" "$out/obj/topk_kernels.o" "$out/obj/dgc_kernels.o" "$out/obj/randomk_kernels.o"
        "$out/obj/sparse_kernels.o")
device=("$out/obj/cuda_backend.o" "$out/obj/device_codec.o" "$out/obj/header_kernel.o" "$out/obj/collective_kernels.o")
# The emulated objects come first, so the archive's own (CUDA) kernel objects are never pulled in;
# -lcudart is not on the line, so one that were pulled in would fail the link.
nice -n 19 "$CXX" -fsanitize=address,undefined -o "$out/quant_harness" "$out/obj/quant_harness.o" "${quant[@]}" "${common[@]}" "${codecs[@]}" "$lib" -lpthread
nice -n 19 "$CXX" -fsanitize=address,undefined -o "$out/sparse_harness" "$out/obj/sparse_harness.o" "${sparse[@]}" "${common[@]}" "${codecs[@]}" "$lib" -lpthread
nice -n 19 "$CXX" -fsanitize=address,undefined -o "$out/collectives_harness" "$out/obj/collectives_harness.o" "${device[@]}" \
  "${quant[@]}" "${sparse[@]}" "${common[@]}" "${codecs[@]}" "$lib" -lpthread
echo "emulate-kernels: built in $((SECONDS - start)) s; running ($mode)"

arg=quick
[[ $mode == full ]] && arg=
status=0
# Deferred streams (tools/kernel_emulator/README.md): stream work runs as late as CUDA allows,
# so a missing wait reads stale data and fails a comparison. EMU_DEFER_STREAMS=0 runs every
# call to completion before it returns, as the emulator did first.
export EMU_DEFER_STREAMS=${EMU_DEFER_STREAMS:-1}
echo "emulate-kernels: deferred streams $([[ $EMU_DEFER_STREAMS != 0 ]] && echo on || echo off)"
for h in quant_harness sparse_harness collectives_harness; do
  t=$SECONDS
  if nice -n 19 "$out/$h" $arg > "$out/$h.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
  echo "  $h: $r in $((SECONDS - t)) s: $(tail -n 1 "$out/$h.log")"
  [[ $r == ok ]] || { grep -m 20 -E "FAIL|EMU|ERROR|runtime error" "$out/$h.log" || tail -n 20 "$out/$h.log"; }
done
echo "emulate-kernels: $([[ $status == 0 ]] && echo passed || echo FAILED) in $((SECONDS - start)) s (logs in $out)"
exit $status
