#!/usr/bin/env bash
# Step time of FSDP2 training on emulated links: examples/fsdp_train.py (the byte-level
# transformer, every block and the root sharded) with one rank per network namespace
# (scripts/cluster/lib.sh), every link limited by tbf, UCX over TCP; each configuration runs
# the same steps of the same data with no validation, one after the other, at each rate. Then
# `examples/fsdp_train.py --report` writes the table (median step, against gradwire dense and
# FSDP2-over-gloo, bytes per step). The namespaces are removed on exit, failure or Ctrl-C.
#
# usage: scripts/bench-fsdp-emulated.sh [-n RANKS] [-r "RATES"] [-S STEPS] [-c "CONFIGS"]
#          [-R 0|1] [-H HOSTS] [-o OUT] [-P PYTHON]
#   defaults: 4 ranks, rates "1gbit 200mbit", 60 steps (the median leaves the first 6 out),
#   configurations "gloo none bf16:rounding=stochastic qsgd:bits=8 qsgd:bits=4 topk:ratio=0.01"
#   (gloo: FSDP2's own reduce-scatter on a gloo group; default: FSDP2's own on the gradwire
#   backend; none: gradwire's dense reduce-scatter; anything else a gradwire codec, with error
#   feedback except bf16/fp16), -R 1: FSDP2's reshard_after_forward (0: parameters all-gathered
#   once a step), PYTHON .venv/bin/python, OUT build/training/fsdp-emulated-DATE.
#   A configuration CODEC+w=WSPEC also sends the parameters' all-gathers on gradwire's
#   compressed wire with the weight codec WSPEC (--param-codec; CODEC a gradwire one, none
#   included), e.g. "none qsgd:bits=8+w=qsgd:bits=8,rounding=nearest,bucket=256
#   bf16:rounding=stochastic+w=bf16" (int8 weights, bf16 weights); without it FSDP2's own
#   all-gathers run.
#   -H HOSTS: HSDP across HOSTS emulated hosts of RANKS / HOSTS ranks each (shared memory
#   inside a host, the shaped link between hosts): FSDP shards inside a host and the replicas
#   (one per host) average over the link; gloo and default run FSDP2's own HSDP (a 2-D mesh),
#   gradwire configurations compress the replicas' all-reduce (the reduce-scatter inside a
#   host stays dense).
# Needs root, and libgradwire.so in build/ (scripts/build.sh), GW_BUILD_DIR, or GRADWIRE_LIB.
# The namespaces are named $GW_NETNS_PREFIX-* (default gwfsdp, subnet 10.79.0), apart from
# the other benchmarks' (gwns).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export GW_NETNS_PREFIX=${GW_NETNS_PREFIX:-gwfsdp}
export GW_NETNS_SUBNET=${GW_NETNS_SUBNET:-10.79.0}
. "$root/scripts/cluster/lib.sh"
np=4 rates="1gbit 200mbit" steps=60 reshard=1 hosts=0 out="" py=$root/.venv/bin/python
configs="gloo none bf16:rounding=stochastic qsgd:bits=8 qsgd:bits=4 topk:ratio=0.01"
while getopts "n:r:S:c:R:H:o:P:h" opt; do
  case "$opt" in
    n) np=$OPTARG ;;
    r) rates=$OPTARG ;;
    S) steps=$OPTARG ;;
    c) configs=$OPTARG ;;
    R) reshard=$OPTARG ;;
    H) hosts=$OPTARG ;;
    o) out=$OPTARG ;;
    P) py=$OPTARG ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-fsdp-emulated: needs root (ip netns)" >&2; exit 1; }
lib=${GRADWIRE_LIB:-${GW_BUILD_DIR:-$root/build}/libgradwire.so}
[ -f "$lib" ] || { echo "bench-fsdp-emulated: $lib is missing: run scripts/build.sh (or set GRADWIRE_LIB)" >&2; exit 1; }
[ -x "$py" ] || { echo "bench-fsdp-emulated: no Python at $py (scripts/setup-torch.sh, or -P)" >&2; exit 1; }
out=${out:-$root/build/training/fsdp-emulated-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
trap 'netns_run_kill; netns_down' EXIT
trap 'echo "bench-fsdp-emulated: interrupted" >&2; exit 130' INT TERM

hsdp=()
if [ "$hosts" != 0 ]; then
  [ $((np % hosts)) = 0 ] || { echo "bench-fsdp-emulated: -H $hosts does not divide $np ranks" >&2; exit 2; }
  hsdp=(--hsdp "$hosts")
fi
for rate in $rates; do
  if [ "$hosts" != 0 ]; then netns_up "$hosts" "$rate"; else netns_up "$np" "$rate"; fi
  for cfg in $configs; do
    name=$(echo "$cfg" | tr ':=,.+' '_____')
    codec=${cfg%%+w=*} wcodec=none
    case "$cfg" in *+w=*) wcodec=${cfg#*+w=} ;; esac
    case "$codec" in
      gloo | default | none | bf16* | fp16*) ef=--no-ef ;;
      *) ef=--ef ;;
    esac
    echo "-- $rate $cfg" >&2
    # UCX over TCP only: across namespaces UCX would otherwise find shared memory and pass the
    # links by. gloo on the namespaces' interface. With -H the ranks of one host share a
    # namespace and a boot id (netns_run_grid): UCX uses shared memory between them only.
    cmd=(env GLOO_SOCKET_IFNAME=eth0 GW_DEBUG=WARN GRADWIRE_LIB="$lib" OMP_NUM_THREADS=1
      "$py" -W ignore "$root/examples/fsdp_train.py" --codec "$codec" --param-codec "$wcodec" $ef
      --steps "$steps" --no-eval
      --reshard-after-forward "$reshard" "${hsdp[@]}" --json "$out/$rate-$name.json")
    if [ "$hosts" != 0 ]; then
      netns_run_grid "$hosts" $((np / hosts)) env UCX_NET_DEVICES=eth0 "${cmd[@]}" >/dev/null
    else
      netns_run "$np" env UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 "${cmd[@]}" >/dev/null
    fi
  done
  netns_down
done

"$py" "$root/examples/fsdp_train.py" --report "$out" | tee "$out/report.md"
