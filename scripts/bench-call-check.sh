#!/usr/bin/env bash
# Cost of the call check (every collective's descriptor exchange): a 1 MiB float all-reduce
# over 2 ranks timed with allreduce_perf from several builds, alternated round by round so
# that machine noise falls on all alike, each rank pinned to a core of its own (unpinned, the
# run-to-run swing on a 2-core VM is larger than the effect). BASE is a build with the check
# switched off (a one-line local patch: `if (c.size > 1 && false)` in
# CommunicatorImpl::collective); the others are compared with it. Prints, per transport, each
# build's median and best time and the median over rounds of its time / BASE's in that round.
#   scripts/bench-call-check.sh BASE_BUILD_DIR BUILD_DIR... [-- rounds]
set -euo pipefail
builds=() rounds=15
while (($#)); do
  if [[ $1 == -- ]]; then rounds=$2; break; fi
  builds+=("$1"); shift
done
((${#builds[@]} >= 2)) || { echo "usage: $0 BASE_BUILD_DIR BUILD_DIR... [-- rounds]" >&2; exit 2; }
iters=${ITERS:-1000} port=$((29700 + RANDOM % 200))
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
time_of() {  # build tls -> time(us) of the 1 MiB row
  port=$((port + 1))
  local env=(GW_TOKEN="$token" GW_SIZE=2 GW_ROOT=127.0.0.1:$port UCX_TLS=$2,self GW_TUNE=0)
  env "${env[@]}" GW_RANK=1 taskset -c 1 "$1/perf/allreduce_perf" -b 1M -e 1M -n "$iters" -w 50 -c 0 >/dev/null 2>&1 &
  env "${env[@]}" GW_RANK=0 taskset -c 0 "$1/perf/allreduce_perf" -b 1M -e 1M -n "$iters" -w 50 -c 0 2>/dev/null |
    awk '$1 == 1048576 {print $6}'
  wait
}
for tls in ${TLS_LIST:-sm tcp}; do
  declare -a times=() ratios=()
  for ((i = 0; i < rounds; ++i)); do
    base=""
    for j in "${!builds[@]}"; do
      t=$(time_of "${builds[$j]}" "$tls")
      times[j]+="$t "
      if ((j == 0)); then base=$t; else ratios[j]+="$(echo "$t / $base" | bc -l) "; fi
    done
  done
  for j in "${!builds[@]}"; do
    m=$(echo ${times[j]} | tr ' ' '\n' | median) lo=$(echo ${times[j]} | tr ' ' '\n' | sort -g | head -1)
    if ((j == 0)); then
      printf '%-4s %-40s median %8.1f us  best %8.1f us (base)\n' "$tls" "${builds[j]}" "$m" "$lo"
    else
      r=$(echo ${ratios[j]} | tr ' ' '\n' | median)
      printf '%-4s %-40s median %8.1f us  best %8.1f us  paired median %+.1f%%\n' "$tls" "${builds[j]}" "$m" "$lo" \
        "$(echo "($r - 1) * 100" | bc -l)"
    fi
    echo "     rounds: ${times[j]}"
  done
  unset times ratios
done
