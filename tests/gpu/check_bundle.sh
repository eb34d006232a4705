#!/usr/bin/env bash
# The GPU bundle, proven on a machine without a GPU (ctest "gpu_bundle"): it is packed from
# this build tree, unpacked from its tarball, and its runner must reach the summary with every
# step passing as "no GPU" runs (the tests skip, kernel_bench refuses cleanly) while the
# system's UCX and libnuma are hidden (a private mount namespace binds /dev/null over them and
# an empty folder over UCX's module folder), so the bundle cannot lean on them. Also: at most
# eight files come back in $OUT, and the summary table is printed last.
# usage: check_bundle.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$build/gpu-bundle-check
rm -rf "$work"
mkdir -p "$work"
"$src/scripts/gpu-bundle.sh" --build-dir "$build" --out "$work/bundle" --no-build --max-mib 0
mkdir -p "$work/unpacked"
tar -C "$work/unpacked" -xJf "$work/bundle/gradwire-gpu.tar.xz"
run=$work/unpacked/gradwire-gpu/run.sh
out=$work/out
# The current-torch venv of scripts/setup-torch.sh when there is one: its torch wheel brings
# NCCL (nvidia-nccl), which the runner must find as it will on a GPU machine.
py=$src/.venv/bin/python
[ -x "$py" ] || py=/usr/bin/python3
[ -x "$py" ] || py=python3

hide=""
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  libdir=/usr/lib/x86_64-linux-gnu
  hide='for f in '"$libdir"'/libucp.so.0 '"$libdir"'/libuct.so.0 '"$libdir"'/libucs.so.0 '"$libdir"'/libucm.so.0 '"$libdir"'/libnuma.so.1; do
    if [ -e "$f" ]; then mount --bind /dev/null "$(readlink -f "$f")" || exit 90; fi
  done
  if [ -d '"$libdir"'/ucx ]; then mount -t tmpfs none '"$libdir"'/ucx || exit 90; fi
  # The hiding works: the build tree'"'"'s own library no longer loads.
  if "'"$py"'" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "'"$build"'/libgradwire.so" 2>/dev/null; then
    echo "check_bundle: the system UCX is still visible" >&2; exit 91
  fi
  echo "check_bundle: system UCX and libnuma hidden"'
else
  echo "check_bundle: not root or no unshare: the system UCX stays visible (check-libs.sh still insists on the bundle's)"
fi

set +e
if [ -n "$hide" ]; then
  unshare -m bash -c "$hide"'
    OUT="$1" GW_PYTHON="$2" "$3" --expect-no-gpu --budget 300' _ "$out" "$py" "$run" > "$work/run.log" 2>&1
else
  OUT="$out" GW_PYTHON="$py" "$run" --expect-no-gpu --budget 300 > "$work/run.log" 2>&1
fi
rc=$?
set -e
cat "$work/run.log"
fail() { echo "check_bundle: FAILED: $*" >&2; exit 1; }
[ $rc = 0 ] || fail "run.sh exited $rc"
tail -n 1 "$work/run.log" | grep -q '^gpu-check: PASS' || fail "the last line is not the summary's verdict"
grep -q '^| step | result' "$work/run.log" || fail "no summary table"
for step in "device codecs vs host" "device collectives, ranks as threads" "NCCL from torch's wheel" \
  "device collectives, processes over UCX" "python: CUDA tensors, hook" "kernel_bench"; do
  grep -q "^| $step" "$work/run.log" || fail "the summary has no row for '$step'"
done
n=$(find "$out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in \$OUT, at most 8 come back from a GPU machine"
grep -q "check-libs: every library resolves inside the bundle" "$out/env.log" || fail "check-libs.sh did not pass"
echo "check_bundle: ok ($n files in \$OUT)"
