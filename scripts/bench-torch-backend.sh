#!/usr/bin/env bash
# torch.distributed all_reduce through the gradwire backend against gloo, in one run, with the
# same torch (the project's .venv) and the same timing code (perf/gloo_allreduce_perf.py):
# on this host (loopback; gradwire's UCX picks shared memory, gloo TCP, as each would for a
# user) and on emulated links (scripts/cluster: one rank per network namespace, tbf-shaped
# veth, UCX kept on TCP). Rounds alternate the backends; the summary takes each one's median.
#
# usage: scripts/bench-torch-backend.sh [-n RANKS] [-r "RATES"] [-b MIN -e MAX -f F] [-i ITERS]
#                                       [-w WARMUP] [-R ROUNDS] [-o OUT]
#   RATES: "local" (this host, no namespaces) and/or tbf rates ("1gbit"); default "local 1gbit".
# Needs scripts/setup-torch.sh (the venv and the backend) and root for the namespaces.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/cluster/lib.sh"

np=4 rates="local 1gbit" bmin=4K bmax=64M factor=16 iters=10 warmup=3 rounds=3 out=""
while getopts "n:r:b:e:f:i:w:R:o:h" opt; do
  case "$opt" in
    n) np=$OPTARG ;; r) rates=$OPTARG ;; b) bmin=$OPTARG ;; e) bmax=$OPTARG ;; f) factor=$OPTARG ;;
    i) iters=$OPTARG ;; w) warmup=$OPTARG ;; R) rounds=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
py=${GW_PYTHON:-$root/.venv/bin/python}
"$py" -c "import sys; sys.path.insert(0, '$root/python'); import gradwire._backend" ||
  { echo "bench-torch-backend: the backend is not built for $py: run scripts/setup-torch.sh" >&2; exit 1; }
out=${out:-$root/build/bench/torch-backend-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/logs"
tool=(perf/gloo_allreduce_perf.py -b "$bmin" -e "$bmax" -f "$factor" -n "$iters" -w "$warmup")
export OMP_NUM_THREADS=1 GW_DEBUG=WARN

run_local() {  # backend json
  local port=$((20000 + RANDOM % 20000)) pids=() i rc=0
  for ((i = 0; i < np; ++i)); do
    env RANK=$i WORLD_SIZE=$np LOCAL_RANK=$i LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$py" "$root/${tool[0]}" "${tool[@]:1}" --backend "$1" -J "$2" >"$out/logs/local-$1-rank$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cat "$out/logs/local-$1-rank0.log"
  return "$rc"
}

run_netns() {  # backend json
  GW_NETNS_LOGDIR=$out/logs netns_run "$np" env GLOO_SOCKET_IFNAME=eth0 UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 \
    "$py" "$root/${tool[0]}" "${tool[@]:1}" --backend "$1" -J "$2"
}

cleanup() { netns_run_kill; netns_down; }
trap cleanup EXIT
{
  echo "date: $(date -Is); host: $(uname -srm), $(nproc --all) cores"
  echo "ranks: $np; rates: $rates; sizes: $bmin..$bmax x$factor; iters $iters, warmup $warmup, rounds $rounds"
  echo "torch: $("$py" -c 'import torch; print(torch.__version__)'); ucx: $(ucx_info -v 2>/dev/null | awk '/Version/ {print $3}')"
} | tee "$out/meta.txt"
for rate in $rates; do
  mkdir -p "$out/$rate"
  [ "$rate" = local ] || { [ "$(id -u)" = 0 ] || { echo "bench-torch-backend: $rate needs root" >&2; exit 1; }; netns_up "$np" "$rate"; }
  for ((round = 1; round <= rounds; ++round)); do
    for backend in gloo gradwire; do
      echo "-- $rate round $round: $backend"
      if [ "$rate" = local ]; then run_local "$backend" "$out/$rate/$backend.r$round.json"
      else run_netns "$backend" "$out/$rate/$backend.r$round.json"; fi
    done
  done
  [ "$rate" = local ] || netns_down
done

"$py" - "$out" $rates <<'PY' | tee "$out/summary.md"
import glob, json, os, statistics, sys
out, rates = sys.argv[1], sys.argv[2:]
print("| link | bytes | gloo (us) | gradwire (us) | gloo / gradwire |")
print("|---|---:|---:|---:|---:|")
for rate in rates:
    med = {}
    for backend in ("gloo", "gradwire"):
        times = {}
        for f in sorted(glob.glob(os.path.join(out, rate, backend + ".r*.json"))):
            for row in json.load(open(f))["results"]:
                assert row["wrong"] in (0, -1), (f, row)
                times.setdefault(row["bytes"], []).append(row["time_us"])
        med[backend] = {b: statistics.median(t) for b, t in times.items()}
    for b in sorted(med["gloo"]):
        g, w = med["gloo"][b], med["gradwire"].get(b)
        if w:
            print("| %s | %d | %.1f | %.1f | %.2fx |" % (rate, b, g, w, g / w))
PY
