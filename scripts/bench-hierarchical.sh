#!/usr/bin/env bash
# Cluster in a box with several ranks per host: gradwire's hierarchical all-reduce against
# its flat paths and its peers, in one run (docs/performance.md, "Hierarchical all-reduce").
#
# N namespaces (hosts) of M ranks each (scripts/cluster/lib.sh, netns_run_grid: each host its
# own boot id, so shared memory stays inside a host), links limited by tbf. Systems, each
# round in turn (rounds interleave the systems; the report keeps each one's median):
#   gloo           torch.distributed gloo all_reduce
#   mpi_default    OpenMPI MPI_Allreduce, default choice (btl self,vader,tcp)
#   mpi_ring       OpenMPI, tuned ring (coll_tuned_allreduce_algorithm 4)
#   mpi_han        OpenMPI, coll/han (its hierarchical all-reduce: coll_han_priority 100);
#                  round 1 only, one timed call (it takes seconds per call here)
#   gw_flat        gradwire flat: dense ring, and each codec with its flat static algorithm
#   gw_hier        gradwire hierarchical: dense, and each codec
#   gw_auto        gradwire's default policy (the tuner times hierarchical, the flat static
#                  choice and the dense ring over the warm-up calls and keeps the fastest)
# gw_flat and gw_hier run with GW_TUNE=0 (the named path, not the tuner's trials).
#
# usage: scripts/bench-hierarchical.sh [-n N] [-m M] [-r "RATES"] [-s SIZE] [-i ITERS]
#                                      [-w WARMUP] [-R ROUNDS] [-c "CODECS"] [-S "SYSTEMS"] [-o OUT]
# defaults: -n 2 -m 2 -r "1gbit 10gbit" -s 64M -i 5 -w 2 -R 3
#           -c "qsgd:bits=8 topk:ratio=0.01,ef=1"
# Needs root (ip netns), OpenMPI, /usr/bin/python3 with torch and matplotlib, and a release
# build (GW_BUILD_DIR, default build-rel; scripts/build.sh). Writes OUT/<rate>/<system>.r<k>.json,
# OUT/report.md and OUT/plots (scripts/cluster/hier_report.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/cluster/lib.sh"

nodes=2 per=2 rates="1gbit 10gbit" size=64M iters=5 warmup=2 rounds=3
codecs="qsgd:bits=8 topk:ratio=0.01,ef=1"
systems="gloo mpi_default mpi_ring mpi_han gw_flat gw_hier gw_auto"
out=""
while getopts "n:m:r:s:i:w:R:c:S:o:h" opt; do
  case "$opt" in
    n) nodes=$OPTARG ;; m) per=$OPTARG ;; r) rates=$OPTARG ;; s) size=$OPTARG ;;
    i) iters=$OPTARG ;; w) warmup=$OPTARG ;; R) rounds=$OPTARG ;; c) codecs=$OPTARG ;;
    S) systems=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-hierarchical: needs root (ip netns)" >&2; exit 1; }
build=${GW_BUILD_DIR:-$root/build-rel}
for bin in allreduce_perf mpi_allreduce_perf; do
  [ -x "$build/perf/$bin" ] || { echo "bench-hierarchical: $build/perf/$bin is missing" >&2; exit 1; }
done
out=${out:-$build/bench/hierarchical-$(date +%Y%m%d-%H%M%S)}
logdir="$out/logs"
mkdir -p "$logdir"
cleanup() { netns_run_kill; netns_down; }
trap cleanup EXIT
trap 'echo "bench-hierarchical: interrupted" >&2; exit 130' INT TERM

export MALLOC_MMAP_THRESHOLD_=4294967296
sizes=(-b "$size" -e "$size")
# UCX: TCP on the hosts' links, shared memory inside a host (each host has its own boot id).
gw_env=(env UCX_NET_DEVICES=eth0 GW_DEBUG=WARN GW_TUNE=0)
mpi_args=(--mca btl self,vader,tcp --mca pml ob1 -x MALLOC_MMAP_THRESHOLD_=4294967296)

# The flat algorithm the static policy gives a codec at this size and rank count.
flat_algo() {
  case "$1" in
    topk*|dgc*|randomk*) echo sparse_allgather ;;
    *) echo scatter_reduce ;;
  esac
}

gw_run() {  # json algo codec-args...
  local json=$1 algo=$2; shift 2
  netns_run_grid "$nodes" "$per" "${gw_env[@]}" "$build/perf/allreduce_perf" "${sizes[@]}" -n "$iters" \
    -w "$warmup" --algo "$algo" --no-dense-reference --ef-steps 0 "$@" -J "$json"
}

gw_auto_run() {  # json codec: the default policy, warmed up past the tuner's first decision (21 trial calls)
  netns_run_grid "$nodes" "$per" env UCX_NET_DEVICES=eth0 GW_DEBUG=WARN "$build/perf/allreduce_perf" "${sizes[@]}" \
    -n "$iters" -w $((warmup + 21)) --no-dense-reference --ef-steps 0 --codec "$2" -J "$1"
}

run_system() {  # system json-prefix
  local sys=$1 j=$2 c
  case "$sys" in
    gloo)
      netns_run_grid "$nodes" "$per" env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 "$root/perf/gloo_allreduce_perf.py" \
        "${sizes[@]}" -n "$iters" -w "$warmup" -J "$j.json" ;;
    mpi_default)
      GW_NETNS_PER_HOST=$per netns_mpirun "$nodes" "${mpi_args[@]}" "$build/perf/mpi_allreduce_perf" "${sizes[@]}" \
        -n "$iters" -w "$warmup" -J "$j.json" ;;
    mpi_ring)
      GW_NETNS_PER_HOST=$per netns_mpirun "$nodes" "${mpi_args[@]}" --mca coll_tuned_use_dynamic_rules 1 \
        --mca coll_tuned_allreduce_algorithm 4 "$build/perf/mpi_allreduce_perf" "${sizes[@]}" -n "$iters" \
        -w "$warmup" -J "$j.json" ;;
    mpi_han)
      # han takes seconds per call at these sizes here (8 MiB: 3.3 s): round 1 only, one
      # call after one warm-up, bounded.
      [ "$round" = 1 ] || return 0
      GW_NETNS_TIMEOUT=${GW_NETNS_HAN_TIMEOUT:-300} GW_NETNS_PER_HOST=$per netns_mpirun "$nodes" "${mpi_args[@]}" \
        --mca coll_han_priority 100 "$build/perf/mpi_allreduce_perf" "${sizes[@]}" -n 1 -w 1 -J "$j.json" ;;
    gw_flat)
      gw_run "$j.none.json" ring --codec none
      for c in $codecs; do gw_run "$j.$c.json" "$(flat_algo "$c")" --codec "$c"; done ;;
    gw_hier)
      gw_run "$j.none.json" hierarchical --codec none
      for c in $codecs; do gw_run "$j.$c.json" hierarchical --codec "$c"; done ;;
    gw_auto)
      for c in $codecs; do gw_auto_run "$j.$c.json" "$c"; done ;;
    *) echo "bench-hierarchical: unknown system $sys" >&2; return 2 ;;
  esac
}

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "layout: $nodes hosts x $per ranks; rates: $rates; size: $size; iters $iters, warmup $warmup, rounds $rounds"
  echo "systems: $systems; codecs: $codecs"
  echo "gradwire environment: ${gw_env[*]:1}; mpi: ${mpi_args[*]}"
  echo "ucx: $(ucx_info -v 2>/dev/null | awk '/Version/ {print $3}'); openmpi: $(ompi_info --version 2>/dev/null | awk '/Open MPI/ {print $NF; exit}'); torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
} | tee "$out/meta.txt"

for rate in $rates; do
  mkdir -p "$out/$rate"
  echo "== $rate: $nodes hosts x $per ranks"
  netns_up "$nodes" "$rate"
  for ((round = 1; round <= rounds; ++round)); do
    for sys in $systems; do
      echo "-- $rate round $round: $sys (load $(cut -d' ' -f1 /proc/loadavg))"
      if ! GW_NETNS_LOGDIR=$logdir run_system "$sys" "$out/$rate/$sys.r$round" >"$logdir/$rate-$sys-r$round.txt" 2>&1; then
        tail -20 "$logdir/$rate-$sys-r$round.txt" >&2
        echo "bench-hierarchical: $sys failed at $rate (logs in $logdir)" >&2
        exit 1
      fi
    done
  done
  netns_down
done
/usr/bin/python3 "$root/scripts/cluster/hier_report.py" "$out" | tee "$out/report.md"
