#!/usr/bin/env bash
# Cost of the call check (every collective's descriptor exchange): a 1 MiB float all-reduce
# timed with allreduce_perf from two builds, alternated round by round so that machine noise
# falls on both alike. BASE is a build of a commit before the check (e.g. 1833247), NEW one
# after it. Prints the median time of each and their ratio per (transport, ranks). Ranks
# (NPS, default 2) beyond the cores only measure the scheduler.
#   scripts/bench-call-check.sh BASE_BUILD_DIR NEW_BUILD_DIR [rounds]
set -euo pipefail
base=$1 new=$2 rounds=${3:-15} iters=${ITERS:-1000} nps=${NPS:-2}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# The UCX settings that later builds default to (ucx_transport.cpp, apply_defaults), set for
# both builds so that only the check differs.
export UCX_ZCOPY_THRESH=${UCX_ZCOPY_THRESH:-inf} UCX_TCP_TX_SEG_SIZE=${UCX_TCP_TX_SEG_SIZE:-32k}
export UCX_RESOLVE_REMOTE_EP_ID=${UCX_RESOLVE_REMOTE_EP_ID:-y}
time_of() {  # build tls np -> time(us) of the 1 MiB row
  UCX_TLS=$2,self GW_TUNE=0 "$1/perf/allreduce_perf" --np "$3" -b 1M -e 1M -n "$iters" -w 50 -c 0 2>/dev/null |
    awk '$1 == 1048576 {print $6}'
}
printf '%-5s %3s %12s %12s %8s\n' tls np base_us new_us ratio
for tls in sm tcp; do
  for np in $nps; do
    b=() n=()
    for ((i = 0; i < rounds; ++i)); do
      b+=("$(time_of "$base" "$tls" "$np")")
      n+=("$(time_of "$new" "$tls" "$np")")
    done
    mb=$(printf '%s\n' "${b[@]}" | median) mn=$(printf '%s\n' "${n[@]}" | median)
    printf '%-5s %3s %12.1f %12.1f %8.3f\n' "$tls" "$np" "$mb" "$mn" "$(echo "$mn / $mb" | bc -l)"
  done
done
