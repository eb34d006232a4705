#!/usr/bin/env bash
# The GPU check, run from an unpacked bundle (scripts/gpu-bundle.sh makes it; this file is its
# run.sh). Nothing is compiled here: the library, the GPU test binaries, UCX's runtime and the
# Python package all come in the bundle; torch, pytest, NCCL (torch's wheel) and
# compute-sanitizer come from the machine.
#
# usage: run.sh [--expect-no-gpu] [--steps a,b,...] [--budget SECONDS]
#   --expect-no-gpu  for a machine without a GPU (this one's proof that the bundle runs):
#                    GW_REQUIRE_GPU is left unset, so the GPU tests skip, and a step passes
#                    when it ran and failed nothing. Without it every skip is a failure.
#   --steps          run only these (env always runs): codecs, collectives, nccl, ucx,
#                    python, bench, sanitizer; and torch (the torch backend on CUDA tensors,
#                    built for the machine's torch first), which runs only when named here
#   --budget         wall-clock seconds for the whole run (default 330): each step's time
#                    limit is cut to what is left, and a step with no time left is NOT RUN.
# Logs go to $OUT (default ./out), eight files at most: summary.md env.log cxx.log python.log
# sanitizer.log kernel_bench.log kernel_bench.json junit.tgz. The summary table is printed
# last, also when a step fails, times out or the run is interrupted.
# Environment: GW_PYTHON (default python3), GW_TEST_2POW31=1 (the 2^31-element codec case,
# about 9 GB of device memory and minutes of host time), GW_TEST_SEED (repeat a codec run).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
expect_gpu=1
only=""
budget=330
while [ $# -gt 0 ]; do
  case "$1" in
    --expect-no-gpu) expect_gpu=0 ;;
    --steps) only=",$2,"; shift ;;
    --budget) budget=$2; shift ;;
    *) echo "usage: $0 [--expect-no-gpu] [--steps a,b] [--budget S]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
py=${GW_PYTHON:-python3}
work=$(mktemp -d /tmp/gw-gpu-check.XXXXXX)
mkdir -p "$work/junit"
start=$(date +%s)
deadline=$((start + budget))
reserve=8  # seconds kept for the summary

summary=$out/summary.md
envlog=$out/env.log
: > "$envlog"
for f in cxx.log python.log sanitizer.log kernel_bench.log; do : > "$out/$f"; done
rows=()
failed=()
header=()

row() {  # step result passed failed skipped seconds log note
  rows+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 | $8 |")
  case "$2" in PASS|N/A) ;; *) failed+=("$1") ;; esac
}

print_summary() {
  trap - EXIT INT TERM
  {
    echo
    echo "== gradwire GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - start )) s"
    for h in "${header[@]}"; do echo "$h"; done
    echo
    echo "| step | result | passed | failed | skipped | time (s) | log | note |"
    echo "|---|---|---:|---:|---:|---:|---|---|"
    for r in "${rows[@]}"; do echo "$r"; done
    echo
    if [ ${#failed[@]} -eq 0 ]; then
      echo "gpu-check: PASS (${#rows[@]} steps)$([ $expect_gpu = 0 ] && echo '; no GPU expected: nothing here is a GPU result')"
    else
      echo "gpu-check: FAILED: $(IFS=';'; echo "${failed[*]}" | sed 's/;/; /g')$([ $expect_gpu = 0 ] && echo '; no GPU expected: nothing here is a GPU result')"
    fi
  } > "$summary.tmp"
  mv "$summary.tmp" "$summary"
  (cd "$work" && tar czf "$out/junit.tgz" junit 2>/dev/null)
  cat "$summary"
  rm -rf "$work"
  [ ${#failed[@]} -eq 0 ]
  exit $?
}
interrupted() {
  row "(interrupted)" "FAIL" "" "" "" "" "" "the run was stopped by a signal"
  print_summary
}
trap print_summary EXIT
trap interrupted INT TERM

want() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
named() { [[ "$only" == *",$1,"* ]]; }  # steps that run only when --steps names them
left() { echo $((deadline - reserve - $(date +%s))); }
limit() {  # the step's own limit, cut to what is left
  local l; l=$(left)
  [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}

# Counts from JUnit files (gtest's and pytest's): "tests failures skipped", summed.
junit_counts() {
  "$py" - "$@" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
t = f = s = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except Exception:
        continue
    for case in root.iter("testcase"):
        t += 1
        if case.find("failure") is not None or case.find("error") is not None:
            f += 1
        elif case.find("skipped") is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
            s += 1
print(t - f - s, f, s)
PYEOF
}

# Runs one step: name, log, limit, junit files (space separated, may be ""), command...
# Result: PASS when the command exits 0 and, where a GPU is expected, nothing was skipped.
run_step() {
  local name=$1 log=$2 lim=$3 junit=$4; shift 4
  local l; l=$(limit "$lim")
  if [ "$l" -lt 5 ]; then
    row "$name" "NOT RUN" "" "" "" 0 "$(basename "$log")" "no time left in the ${budget} s budget"
    return
  fi
  echo "==== $name: $* (limit ${l} s)" >> "$log"
  local t0 rc t
  t0=$(date +%s)
  timeout -k 5 "$l" "$@" >> "$log" 2>&1
  rc=$?
  t=$(( $(date +%s) - t0 ))
  echo "==== $name: exit $rc after $t s" >> "$log"
  local p="" f="" s=""
  if [ -n "$junit" ]; then
    # shellcheck disable=SC2086
    read -r p f s <<< "$(junit_counts $junit)"
  fi
  local result=PASS note=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    result=TIMEOUT; note="killed at its ${l} s limit"
  elif [ $rc -ne 0 ]; then
    result=FAIL; note="exit $rc"
    [ $rc -gt 128 ] && note="exit $rc (signal $((rc - 128)))"
  elif [ -n "$junit" ] && [ "${p:-0}" = 0 ] && [ "${f:-0}" = 0 ] && [ "${s:-0}" = 0 ]; then
    result=FAIL; note="no test ran"
  elif [ $expect_gpu = 1 ] && [ "${s:-0}" != 0 ]; then
    result=FAIL; note="$s skipped on a GPU machine"
  fi
  row "$name" "$result" "$p" "$f" "$s" "$t" "$(basename "$log")" "$note"
}

gtest() {  # step name, binary, limit, gtest filter, extra env...
  local name=$1 bin=$2 lim=$3 filter=$4; shift 4
  local xml=$work/junit/$bin.xml
  if [ ! -x "$here/bin/$bin" ]; then
    row "$name" "FAIL" "" "" "" 0 cxx.log "bin/$bin is not in the bundle"
    return
  fi
  run_step "$name" "$out/cxx.log" "$lim" "$xml" env "$@" "$here/bin/$bin" --gtest_color=no \
    --gtest_filter="$filter" --gtest_output="xml:$xml"
}

# ---- The machine, the GPU, and the bundle's libraries.
{
  echo "== bundle"
  cat "$here/MANIFEST.txt" 2>/dev/null || echo "(no MANIFEST.txt)"
  echo "== uname"; uname -a
  echo "== nvidia-smi"
  nvidia-smi 2>&1 || echo "(nvidia-smi failed or is missing)"
} >> "$envlog"
smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
torch_info=$("$py" - 2>>"$envlog" <<'PYEOF'
import torch
line = "torch %s (CUDA %s)" % (torch.__version__, torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    line += "; %s, %d SMs, compute capability %d.%d, %.0f MiB" % (
        p.name, p.multi_processor_count, p.major, p.minor, p.total_memory / 2**20)
    line += "; torch's CUDA devices: %d" % torch.cuda.device_count()
else:
    line += "; torch sees no CUDA device"
print(line)
PYEOF
)
# NCCL from torch's wheel (nvidia-nccl-cu13): its folder goes on the loader path, so the
# library's own search ("libnccl.so.2") finds it with no GW_NCCL_LIBRARY.
nccl_dir=$("$py" - 2>/dev/null <<'PYEOF'
import glob, os, sys
found = []
try:
    import nvidia.nccl as m
    found += [os.path.join(d, "lib") for d in m.__path__]
except ImportError:
    pass
for d in sys.path:  # any nvidia-nccl wheel's layout
    found += [os.path.dirname(p) for p in glob.glob(os.path.join(d, "nvidia", "*nccl*", "lib", "libnccl.so.2"))]
print(next((d for d in found if os.path.exists(os.path.join(d, "libnccl.so.2"))), ""))
PYEOF
)
unset GW_NCCL_LIBRARY
export LD_LIBRARY_PATH="$here/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
header+=("bundle: $(sed -n 's/^bundle: //p' "$here/MANIFEST.txt" 2>/dev/null)")
header+=("GPU (nvidia-smi): ${smi:-none}; driver's CUDA: ${driver_cuda:-none}")
header+=("${torch_info:-torch: not importable}")
header+=("NCCL: ${nccl_dir:-not found (no nvidia.nccl wheel)}")
{
  echo "== torch: $torch_info"
  echo "== NCCL folder: ${nccl_dir:-none}"
  echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} >> "$envlog"
run_step "env and libraries" "$envlog" 30 "" "$here/check-libs.sh"

require=()
if [ $expect_gpu = 1 ]; then
  require=(GW_REQUIRE_GPU=1)
  [ -n "$nccl_dir" ] && require+=(GW_REQUIRE_NCCL=1)
fi
huge_filter="-*Beyond2Pow31*"
[ "${GW_TEST_2POW31:-0}" = 1 ] && huge_filter="*"
ucx_env=(UCX_WARN_UNUSED_ENV_VARS=n)

# ---- Correctness: device against host, bit for bit.
want codecs && gtest "device codecs vs host" test_device_codecs 150 "$huge_filter" "${require[@]}"
want collectives && gtest "device collectives, ranks as threads" test_device_collectives_gpu 100 "*" "${require[@]}"
want nccl && gtest "NCCL from torch's wheel" test_nccl_library 60 "*" "${require[@]}" \
  GW_FAKE_OLD_NCCL="$here/bin/libgw_fake_old_nccl.so"
want ucx && gtest "device collectives, processes over UCX" test_device_over_ucx_gpu 90 "*" "${require[@]}" \
  "${ucx_env[@]}"
if want python; then
  run_step "python: CUDA tensors, hook" "$out/python.log" 120 "$work/junit/python.xml" \
    env "${require[@]}" "${ucx_env[@]}" GRADWIRE_LIB="$here/lib/libgradwire.so" PYTHONPATH="$here/python" \
    PYTHONUNBUFFERED=1 "$py" -m pytest -q -rs -p no:cacheprovider --junitxml="$work/junit/python.xml" \
    "$here/tests/python/test_cuda.py" "$here/tests/python/test_cuda_procs.py"
fi

# ---- The torch backend on CUDA tensors (--steps torch only: it compiles the extension for
# this machine's torch first, a minute or two): stream order on torch's streams, NCCL, DDP.
if named torch; then
  run_step "torch backend: CUDA streams, NCCL, DDP" "$out/python.log" 420 "$work/junit/torch.xml" \
    env "${require[@]}" "${ucx_env[@]}" GRADWIRE_LIB="$here/lib/libgradwire.so" PYTHONPATH="$here/python" \
    PATH="$here/bin:$PATH" GRADWIRE_TORCH_BACKEND_CACHE="$work/torch-backend" PYTHONUNBUFFERED=1 \
    "$py" -m pytest -q -rs -s -p no:cacheprovider --junitxml="$work/junit/torch.xml" "$here/tests/python/test_torch_cuda.py"
fi

# ---- Speed: kernels against copy bandwidth and torch, fixed seed, rows as they finish.
if want bench; then
  if [ $expect_gpu = 1 ]; then
    run_step "kernel_bench" "$out/kernel_bench.log" 120 "" env PYTHONUNBUFFERED=1 "$py" "$here/perf/kernel_bench.py" \
      --lib "$here/lib/libgradwire.so" --seed 1234 --json "$out/kernel_bench.json"
  else
    run_step "kernel_bench (no GPU: must refuse cleanly)" "$out/kernel_bench.log" 60 "" \
      bash -c '! "$@"' _ "$py" "$here/perf/kernel_bench.py" --lib "$here/lib/libgradwire.so" --seed 1234
  fi
fi

# ---- compute-sanitizer on the short subsets.
if want sanitizer; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
    /opt/nvidia/*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
  if [ $expect_gpu = 0 ]; then
    row "compute-sanitizer" "N/A" "" "" "" 0 sanitizer.log "no GPU: nothing to sanitize"
  elif [ -z "$cs" ]; then
    row "compute-sanitizer" "FAIL" "" "" "" 0 sanitizer.log "compute-sanitizer not found"
  else
    for tool in memcheck racecheck; do
      for bin in test_device_codecs test_device_collectives_gpu; do
        xml=$work/junit/sanitizer-$tool-$bin.xml
        run_step "$tool: $bin Quick*" "$out/sanitizer.log" 60 "$xml" env "${require[@]}" \
          "$cs" --tool "$tool" --error-exitcode 99 --print-limit 20 "$here/bin/$bin" --gtest_color=no \
          --gtest_filter='*Quick*' --gtest_output="xml:$xml"
      done
    done
  fi
fi
if [ -s "$out/kernel_bench.log" ]; then
  echo
  echo "== kernel_bench (also kernel_bench.log)"
  grep -E '^\||^GPU|^kernel_bench' "$out/kernel_bench.log" | tail -n 20
fi
