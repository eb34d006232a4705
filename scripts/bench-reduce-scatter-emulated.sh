#!/usr/bin/env bash
# The reduce-scatter on emulated links: reduce_scatter_perf (the ring reduce-scatter FSDP calls
# by default as the reference row, then gw_reduce_scatterv with each codec) on N network
# namespaces joined by tbf-limited links (scripts/cluster/lib.sh), one rank per namespace,
# for each link rate; the namespaces are torn down whatever happens. -A: FSDP's other
# collective instead, the parameter all-gather: allgather_compressed_perf (the raw all-gather
# as the reference row, then gw_allgather_compressed with each weight codec).
#
# usage: scripts/bench-reduce-scatter-emulated.sh [-A] [-n N] [-r "RATES"] [-b MIN -e MAX -f F]
#          [-i ITERS] [-w WARMUP] [-d DTYPE] [-c "CODECS"] [-o OUT]
# Defaults: 4 ranks, "1gbit 200mbit", 4M..64M x4, 5 iters, 2 warm-up, float, the codecs below
# (-A: int8 blockwise, bf16).
# Needs root (ip netns) and a build (GW_BUILD_DIR, default build-cpu). GW_NETNS_PREFIX and
# GW_NETNS_SUBNET (lib.sh) let it run beside another emulated run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/cluster/lib.sh"

np=4 rates="1gbit 200mbit" bmin=4M bmax=64M factor=4 iters=5 warmup=2 dtype=float
codecs=""
out="" tool=reduce_scatter_perf
while getopts "An:r:b:e:f:i:w:d:c:o:" opt; do
  case "$opt" in
    A) tool=allgather_compressed_perf ;;
    n) np=$OPTARG ;; r) rates=$OPTARG ;; b) bmin=$OPTARG ;; e) bmax=$OPTARG ;; f) factor=$OPTARG ;;
    i) iters=$OPTARG ;; w) warmup=$OPTARG ;; d) dtype=$OPTARG ;; c) codecs=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done
if [ -z "$codecs" ] && [ "$tool" = reduce_scatter_perf ]; then
  codecs="bf16:rounding=stochastic qsgd:bits=8,ef=1 qsgd:bits=4,ef=1 topk:ratio=0.01,ef=1"
elif [ -z "$codecs" ]; then
  codecs="qsgd:bits=8,rounding=nearest,bucket=256 bf16"
fi
build=${GW_BUILD_DIR:-$root/build-cpu}
[ -x "$build/perf/$tool" ] || { echo "no $build/perf/$tool: build first" >&2; exit 1; }
out=${out:-$root/build/bench/${tool%_perf}-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
trap netns_down EXIT INT TERM
codec_args=()
for c in $codecs; do codec_args+=(--codec "$c"); done
for rate in $rates; do
  netns_up "$np" "$rate"
  echo "== $rate, $np ranks" | tee -a "$out/report.txt"
  netns_run "$np" env UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 GW_DEBUG=WARN "$build/perf/$tool" \
    -b "$bmin" -e "$bmax" -f "$factor" -n "$iters" -w "$warmup" -d "$dtype" --ef-steps 0 "${codec_args[@]}" \
    -J "$out/$rate.json" | tee -a "$out/report.txt"
  netns_down
done
echo "report: $out/report.txt"
