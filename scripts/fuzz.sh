#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp) with clang, ASan and UBSan into
# build-fuzz/ (or $GW_FUZZ_BUILD_DIR) and runs each one for a bounded time over a copy of its
# seed corpus (tests/fuzz/corpus/<name>/, empty if missing); nothing is written into the repo.
# Fails on any crash, leak, timeout, out-of-memory or sanitizer report; the input that
# triggered it is kept under the build directory, in fuzz-artifacts/.
# Needs clang and libclang-rt-14-dev (scripts/install-deps.sh installs them).
# usage: scripts/fuzz.sh [--seconds N] [harness...]   (default 30 s each, every harness)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GW_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=30
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds)
      [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || { echo "fuzz: --seconds needs a positive integer" >&2; exit 2; }
      seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    -*) echo "usage: $0 [--seconds N] [harness...]" >&2; exit 2 ;;
    *) only+=("${1#fuzz_}"); shift ;;
  esac
done

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found; run scripts/install-deps.sh" >&2; exit 2; }
done

harnesses=()
for src in "$root"/tests/fuzz/fuzz_*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  name=${name#fuzz_}
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " == *" $name "* ]]; then continue; fi
  harnesses+=("$name")
done
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "fuzz: no harness to run (tests/fuzz/fuzz_*.cpp${only:+, filtered by: ${only[*]}})" >&2
  exit 2
fi

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGW_FUZZ=ON -DGW_SANITIZE=address,undefined -DGW_WITH_CUDA=OFF -DGW_BUILD_PERF=OFF \
  -DGW_WERROR=ON >/dev/null
targets=()
for name in "${harnesses[@]}"; do targets+=(--target "fuzz_$name"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/gw-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"

failed=0
summary=()
for name in "${harnesses[@]}"; do
  corpus=$work/$name/corpus
  mkdir -p "$corpus" "$work/$name/crash"
  if [ -d "$root/tests/fuzz/corpus/$name" ]; then
    cp -R "$root/tests/fuzz/corpus/$name/." "$corpus/"
  fi
  log=$work/$name/log
  rc=0
  # -fno-sanitize-recover (GW_SANITIZE) makes every UBSan report fatal; leaks are checked by
  # libFuzzer itself after each input that allocates more than it frees.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/$name/crash/" "$corpus" >"$log" 2>&1 || rc=$?

  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | grep -o '[0-9]*$' || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n1 | grep -o '[0-9]*$' || true)
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc)"
  elif grep -qE 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$log"; then
    result="FAILED (sanitizer report)"
  fi
  if [ "$result" != ok ]; then
    failed=1
    mkdir -p "$artifacts/$name"
    cp "$log" "$artifacts/$name/log"
    cp -R "$work/$name/crash/." "$artifacts/$name/" 2>/dev/null || true
    echo "---- fuzz_$name: last lines of the log (full log and inputs in $artifacts/$name) ----" >&2
    tail -n 40 "$log" >&2
  fi
  summary+=("$(printf 'fuzz_%-22s runs=%-10s cov=%-6s ft=%-6s %s' "$name" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$result")")
done

echo "---- fuzz summary (${seconds}s each) ----"
printf '%s\n' "${summary[@]}"
exit "$failed"
