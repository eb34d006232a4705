#!/usr/bin/env bash
# Time to accuracy on emulated links: examples/train.py, one rank per network namespace
# (scripts/cluster/lib.sh), every link limited by tbf, each configuration trained with the
# same data, seed and schedule and evaluated every few steps; one run for every configuration
# and rate. Then examples/plot_time_to_accuracy.py writes the table and the plots (accuracy
# against training time, one line per configuration). The namespaces are removed on exit,
# failure or Ctrl-C.
#
# usage: scripts/bench-training-emulated.sh [-n RANKS] [-r "RATES"] [-t TASK] [-E EPOCHS]
#          [-S STEPS] [-e EVAL_EVERY] [-w WARMUP_STEPS] [-c "CONFIGS"] [-o OUT] [-P PYTHON]
#   defaults: 4 ranks, rates "1gbit 200mbit", task fashion, 1 epoch (-S: that many steps
#   instead), evaluation every 39 steps,
#   100 warm-up steps (PowerSGD's start_powerSGD_iter and DGC's dense steps), configurations
#   "gloo torch_fp16 powersgd:rank=1 powersgd:rank=2 powersgd:rank=4 topk:ratio=0.01 qsgd:bits=4"
#   (gloo: DDP's own all-reduce; torch_fp16 and powersgd:rank=R: torch's hooks; anything else a
#   gradwire codec, with error feedback; "@flag" after a configuration adds --flag to its
#   examples/train.py, e.g. topk:ratio=0.01@hook-momentum), PYTHON .venv/bin/python
#   (scripts/setup-torch.sh).
# Needs root, and a build in build/ (scripts/build.sh) or GW_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/cluster/lib.sh"
np=4 rates="1gbit 200mbit" task=fashion epochs=1 steps=() eval_every=39 warmup=100 out="" py=$root/.venv/bin/python
configs="gloo torch_fp16 powersgd:rank=1 powersgd:rank=2 powersgd:rank=4 topk:ratio=0.01 qsgd:bits=4"
while getopts "n:r:t:E:S:e:w:c:o:P:h" opt; do
  case "$opt" in
    n) np=$OPTARG ;;
    r) rates=$OPTARG ;;
    t) task=$OPTARG ;;
    E) epochs=$OPTARG ;;
    S) steps=(--steps "$OPTARG") ;;
    e) eval_every=$OPTARG ;;
    w) warmup=$OPTARG ;;
    c) configs=$OPTARG ;;
    o) out=$OPTARG ;;
    P) py=$OPTARG ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-training-emulated: needs root (ip netns)" >&2; exit 1; }
lib=${GW_BUILD_DIR:-$root/build}/libgradwire.so
[ -f "$lib" ] || { echo "bench-training-emulated: $lib is missing: run scripts/build.sh" >&2; exit 1; }
[ -x "$py" ] || { echo "bench-training-emulated: no Python at $py (scripts/setup-torch.sh, or -P)" >&2; exit 1; }
out=${out:-$root/build/bench/time-to-accuracy-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
trap 'netns_run_kill; netns_down' EXIT
trap 'echo "bench-training-emulated: interrupted" >&2; exit 130' INT TERM

for rate in $rates; do
  netns_up "$np" "$rate"
  for item in $configs; do
    cfg=${item%%@*}
    name=$(echo "$item" | tr ':=,.@' '_____')
    extra=()
    rest=${item#"$cfg"}
    while [ -n "$rest" ]; do  # @flag@flag...
      rest=${rest#@}
      extra+=("--${rest%%@*}")
      rest=${rest#"${rest%%@*}"}
    done
    case "$cfg" in
      # torch's powerSGD_hook issues its all-reduces from future callbacks; over gloo, with
      # more than one bucket, ranks issued them in different orders and gloo failed ("Received
      # data size doesn't match expected size"). One bucket for the whole model avoids it.
      powersgd*) extra+=(--warmup-steps "$warmup" --bucket-kb 8192) ;;
      dgc*) extra+=(--warmup-steps "$warmup") ;;
    esac
    echo "-- $rate $item" >&2
    # UCX over TCP only: across namespaces UCX would otherwise find shared memory and pass
    # the links by.
    netns_run "$np" env GLOO_SOCKET_IFNAME=eth0 UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 GW_DEBUG=WARN \
      GRADWIRE_LIB="$lib" OMP_NUM_THREADS=1 \
      "$py" -W ignore "$root/examples/train.py" --task "$task" --codec "$cfg" --epochs "$epochs" "${steps[@]}" \
      --eval-every "$eval_every" "${extra[@]}" --json "$out/$rate-$name.json" >/dev/null
  done
  netns_down
done

python3=/usr/bin/python3
"$python3" -c "import matplotlib" 2>/dev/null || python3=$py
"$python3" "$root/examples/plot_time_to_accuracy.py" "$out" | tee "$out/report.md"
