#!/usr/bin/env bash
# Cluster in a box: gradwire against its peers on emulated links, in one run.
#
# For each link rate it builds N network namespaces joined by tbf-limited veth links
# (scripts/cluster/lib.sh), runs one rank per namespace of, in turn,
#   gloo          torch.distributed gloo all_reduce (perf/gloo_allreduce_perf.py)
#   mpi_default   OpenMPI MPI_Allreduce, its default algorithm choice
#   mpi_ring      OpenMPI MPI_Allreduce, ring (coll_tuned_allreduce_algorithm 4)
#   gw_dense      gradwire dense ring (--codec none)
#   gw_auto       gradwire with each codec, default policy (measures, may choose dense)
#   gw_forced     gradwire with each codec, always compressed (GW_TUNE=0: static policy)
# on the same sizes, writes one JSON file per system under OUT/<rate>/, tears the
# namespaces down (always: on success, failure or Ctrl-C), and renders OUT/report.md and
# the plots with scripts/cluster/report.py.
#
# usage: scripts/bench-emulated.sh [options]
#   -n N          ranks, one per namespace (4)
#   -r "RATES"    link rates, tbf syntax (default "1gbit 10gbit"; "none" = unshaped veth)
#   -b MIN -e MAX -f F   sizes, as the perf tools take them (1M 64M 4)
#   -i ITERS -w WARMUP   timed and warm-up calls per size (5 2)
#   -R ROUNDS     repeat every system this many times (3); the report keeps each one's median
#   -c "CODECS"   gradwire codec specs (default below)
#   -s "SYSTEMS"  subset of the systems above
#   -o OUT        output directory (default build/bench/emulated-<date>)
#   -p DIR        where report.py puts the plots (default OUT/plots)
#   -u            also pass the hand tuning older versions needed (UCX_RNDV_THRESH=inf, TCP
#                 segment sizes), for comparison; by default gradwire runs as a user gets it
# Needs root (ip netns), OpenMPI, /usr/bin/python3 with torch, and a build in build/
# (scripts/build.sh; GW_BUILD_DIR overrides).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/cluster/lib.sh"

np=4
rates="1gbit 10gbit"
bmin=1M bmax=64M factor=4
iters=5 warmup=2 rounds=3
codecs="fp16 qsgd:bits=8 qsgd:bits=4 topk:ratio=0.01,ef=1 dgc:ratio=0.001,ef=1"
systems="gloo mpi_default mpi_ring gw_dense gw_auto gw_forced"
out=""
plots=""
hand_tuned=0
while getopts "n:r:b:e:f:i:w:R:c:s:o:p:uh" opt; do
  case "$opt" in
    n) np=$OPTARG ;;
    r) rates=$OPTARG ;;
    b) bmin=$OPTARG ;;
    e) bmax=$OPTARG ;;
    f) factor=$OPTARG ;;
    i) iters=$OPTARG ;;
    w) warmup=$OPTARG ;;
    R) rounds=$OPTARG ;;
    c) codecs=$OPTARG ;;
    s) systems=$OPTARG ;;
    o) out=$OPTARG ;;
    p) plots=$OPTARG ;;
    u) hand_tuned=1 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-emulated: needs root (ip netns)" >&2; exit 1; }
build=${GW_BUILD_DIR:-$root/build}
for bin in allreduce_perf mpi_allreduce_perf; do
  [ -x "$build/perf/$bin" ] || { echo "bench-emulated: $build/perf/$bin is missing: run scripts/build.sh" >&2; exit 1; }
done
out=${out:-$build/bench/emulated-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
logdir="$out/logs"
mkdir -p "$logdir"

cleanup() {
  netns_run_kill
  netns_down
}
trap cleanup EXIT
trap 'echo "bench-emulated: interrupted" >&2; exit 130' INT TERM

codec_args=()
for c in $codecs; do codec_args+=(--codec "$c"); done
sizes=(-b "$bmin" -e "$bmax" -f "$factor")
# UCX over TCP, kept off shared memory (which crosses namespaces) and off loopback: the
# only UCX variables set. The library picks its own transport settings (docs/configuration.md).
gw_env=(env UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 GW_DEBUG=WARN)
if [ "$hand_tuned" = 1 ]; then
  gw_env+=(UCX_RNDV_THRESH=inf UCX_TCP_TX_SEG_SIZE=64K UCX_TCP_RX_SEG_SIZE=256K)
fi
mpi_args=(--mca btl self,tcp --mca pml ob1 -x MALLOC_MMAP_THRESHOLD_=4294967296)

run_system() {  # system json
  local sys=$1 json=$2
  case "$sys" in
    gloo)
      netns_run "$np" env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 "$root/perf/gloo_allreduce_perf.py" \
        "${sizes[@]}" -n "$iters" -w "$warmup" -J "$json" ;;
    mpi_default)
      netns_mpirun "$np" "${mpi_args[@]}" "$build/perf/mpi_allreduce_perf" "${sizes[@]}" -n "$iters" -w "$warmup" -J "$json" ;;
    mpi_ring)
      netns_mpirun "$np" "${mpi_args[@]}" --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 \
        "$build/perf/mpi_allreduce_perf" "${sizes[@]}" -n "$iters" -w "$warmup" -J "$json" ;;
    gw_dense)
      netns_run "$np" "${gw_env[@]}" "$build/perf/allreduce_perf" "${sizes[@]}" -n "$iters" -w "$warmup" \
        --codec none -J "$json" ;;
    gw_auto)
      netns_run "$np" "${gw_env[@]}" "$build/perf/allreduce_perf" "${sizes[@]}" -n "$iters" -w "$warmup" \
        "${codec_args[@]}" --no-dense-reference --ef-steps 0 -J "$json" ;;
    gw_forced)
      netns_run "$np" "${gw_env[@]}" GW_TUNE=0 "$build/perf/allreduce_perf" "${sizes[@]}" -n "$iters" -w "$warmup" \
        "${codec_args[@]}" --no-dense-reference -J "$json" ;;
    *) echo "bench-emulated: unknown system $sys" >&2; return 2 ;;
  esac
}

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "ranks: $np; rates: $rates; sizes: $bmin..$bmax x$factor; iters $iters, warmup $warmup, rounds $rounds"
  echo "systems: $systems"
  echo "gradwire environment: ${gw_env[*]:1}"
  echo "codecs: $codecs"
  echo "ucx: $(ucx_info -v 2>/dev/null | awk '/Version/ {print $3}'); openmpi: $(ompi_info --version 2>/dev/null | awk '/Open MPI/ {print $NF; exit}'); torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$out/meta.txt"

for rate in $rates; do
  mkdir -p "$out/$rate"
  echo "== $rate: $np namespaces"
  netns_up "$np" "$rate"
  for ((round = 1; round <= rounds; ++round)); do
    for sys in $systems; do
      json="$out/$rate/$sys.r$round.json"
      echo "-- $rate round $round: $sys (load $(cut -d' ' -f1 /proc/loadavg))"
      if ! GW_NETNS_LOGDIR=$logdir run_system "$sys" "$json" 2>&1 | tee "$logdir/$rate-$sys-r$round.txt"; then
        echo "bench-emulated: $sys failed at $rate (logs in $logdir)" >&2
        exit 1
      fi
    done
  done
  netns_down
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/meta.txt"

/usr/bin/python3 "$root/scripts/cluster/report.py" "$out" --ranks "$np" ${plots:+--plots "$plots"} | tee "$out/report.md"
