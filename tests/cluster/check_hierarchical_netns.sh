#!/usr/bin/env bash
# The hierarchical all-reduce in the cluster in a box: 2 and 3 network namespaces (hosts) of
# 2 ranks each, unshaped links, every host its own boot id. The ranks must find the layout
# from their host identities alone (no GW_HOST_ID), run hierarchical with shared memory
# inside a host and TCP between hosts, and get exact sums (allreduce_perf's #wrong).
# Skipped (exit 77) when not root or without `ip netns`.
# usage: check_hierarchical_netns.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root for network namespaces"; exit 77; }
ip netns list >/dev/null 2>&1 || { echo "skipped: no 'ip netns' here"; exit 77; }
export GW_NETNS_PREFIX=gwt$$ GW_NETNS_SUBNET=10.79.$(( $$ % 200 ))
. "$here/../../scripts/cluster/lib.sh"
trap 'netns_run_kill; netns_down' EXIT
out=$(mktemp -d)
export MALLOC_MMAP_THRESHOLD_=4294967296
for hosts in 2 3; do
  netns_up "$hosts" none
  for codec in none qsgd:bits=8 topk:ratio=0.01,ef=1; do
    json="$out/h$hosts-$codec.json"
    GW_NETNS_LOGDIR=$out netns_run_grid "$hosts" 2 env UCX_NET_DEVICES=eth0 GW_DEBUG=WARN GW_TUNE=0 \
      "$build/perf/allreduce_perf" -b 4M -e 4M -n 2 -w 1 --codec "$codec" --no-dense-reference --ef-steps 0 -J "$json" \
      >"$out/h$hosts-$codec.txt" 2>&1 || { cat "$out/h$hosts-$codec.txt"; exit 1; }
    /usr/bin/python3 - "$json" "$codec" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
bad = [r for r in rows if r["algo"] != "hier" or (sys.argv[2] == "none" and r["wrong"] != 0)]
if not rows or bad:
    sys.exit("not hierarchical or wrong: %s" % (bad or rows))
print("ok: %s %s: %.1f ms" % (sys.argv[1].split("/")[-1], rows[0]["algo"], rows[0]["time_us"] / 1e3))
PY
  done
  netns_down
done
rm -rf "$out"
