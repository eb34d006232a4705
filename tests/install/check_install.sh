#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer project
# through find_package(gradwire) and through pkg-config: codecs from C and C++, and every
# collective from the installed C++ headers on real processes (Communicator::from_env under
# GW_RANK/GW_SIZE, and init_rank with a unique id). Also runs the installed perf tool.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
libdir=$(ls -d "$work"/prefix/lib*/ | head -1)
test -e "$libdir/libgradwire.so.0" || { echo "no SONAME link libgradwire.so.0"; exit 1; }
for h in gradwire.h communicator.hpp codec.hpp ef_state.hpp status.hpp export.h version.h; do
  test -e "$work/prefix/include/gradwire/$h" || { echo "header $h not installed"; exit 1; }
done
for t in allreduce_perf sparse_allgather_perf codec_bench; do
  test -x "$work/prefix/bin/$t" || { echo "perf tool $t not installed in bin/"; exit 1; }
done
cmake -S "$src/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
LD_LIBRARY_PATH=$libdir "$work/consumer/consumer_c"
LD_LIBRARY_PATH=$libdir "$work/consumer/consumer_cpp"
PKG_CONFIG_PATH=$libdir/pkgconfig cc -std=c99 "$src/consumer/consumer.c" -o "$work/pc_consumer" \
  $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs gradwire)
LD_LIBRARY_PATH=$libdir "$work/pc_consumer"

# Every collective on 2 ranks made by init_rank, then on 3 ranks from GW_RANK/GW_SIZE alone
# (one host is assumed). Nothing may reach stderr.
export UCX_TLS=${UCX_TLS:-tcp,self} GW_DEBUG=WARN
LD_LIBRARY_PATH=$libdir "$work/consumer/consumer_collectives" --np 2 2> "$work/np2.err"
test ! -s "$work/np2.err" || { echo "init_rank ranks wrote to stderr:"; cat "$work/np2.err"; exit 1; }
job=install-$$-$RANDOM
pids=()
for r in 0 1 2; do
  GW_RANK=$r GW_SIZE=3 GW_JOB_ID=$job LD_LIBRARY_PATH=$libdir \
    "$work/consumer/consumer_collectives" > "$work/env$r.out" 2> "$work/env$r.err" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for r in 0 1 2; do
  if [ "$status" != 0 ] || [ -s "$work/env$r.err" ]; then
    echo "from_env rank $r (exit status $status):"; cat "$work/env$r.out" "$work/env$r.err"; status=1
  fi
done
[ "$status" = 0 ] || exit 1
cat "$work/env0.out"
# The installed perf tool finds the installed library by itself (RPATH $ORIGIN/../lib).
"$work/prefix/bin/allreduce_perf" --np 2 -b 4K -e 4K -n 2 -w 1 --ef-steps 0 > "$work/perf.out"
grep -q "Avg bus bandwidth" "$work/perf.out" || { echo "installed allreduce_perf:"; cat "$work/perf.out"; exit 1; }
echo "install_consumer: ok"
