#!/usr/bin/env bash
# Training time per step on emulated links: examples/train_digits.py, one rank per network
# namespace (scripts/cluster/lib.sh), DDP over gloo against gradwire's comm hook with each
# codec, on the same tbf-limited links in one run. Prints a markdown table; the namespaces
# are removed on exit, failure or Ctrl-C.
#
# usage: scripts/bench-training-emulated.sh [-n RANKS] [-r RATE] [-E EPOCHS] [-c "CODECS"] [-o OUT]
#   defaults: 4 ranks, 1gbit, 3 epochs, codecs "gloo none topk:ratio=0.01 dgc:ratio=0.01 qsgd:bits=8 qsgd:bits=4"
# Needs root, /usr/bin/python3 with torch and sklearn, and a build in build/ (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/cluster/lib.sh"
np=4 rate=1gbit epochs=3 out=""
codecs="gloo none topk:ratio=0.01 dgc:ratio=0.01 qsgd:bits=8 qsgd:bits=4"
while getopts "n:r:E:c:o:h" opt; do
  case "$opt" in
    n) np=$OPTARG ;;
    r) rate=$OPTARG ;;
    E) epochs=$OPTARG ;;
    c) codecs=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-training-emulated: needs root (ip netns)" >&2; exit 1; }
lib=${GW_BUILD_DIR:-$root/build}/libgradwire.so
[ -f "$lib" ] || { echo "bench-training-emulated: $lib is missing: run scripts/build.sh" >&2; exit 1; }
out=${out:-$root/build/bench/training-$rate-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
trap 'netns_run_kill; netns_down' EXIT
trap 'echo "bench-training-emulated: interrupted" >&2; exit 130' INT TERM

netns_up "$np" "$rate"
for codec in $codecs; do
  name=$(echo "$codec" | tr ':=,.' '____')
  echo "-- $codec" >&2
  netns_run "$np" env GLOO_SOCKET_IFNAME=eth0 UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 GW_DEBUG=WARN GRADWIRE_LIB="$lib" \
    /usr/bin/python3 "$root/examples/train_digits.py" --codec "$codec" --epochs "$epochs" --json "$out/$name.json" >/dev/null
done
netns_down

/usr/bin/python3 - "$out" "$np" "$rate" "$epochs" $codecs <<'PY'
import json, os, sys
out, np_, rate, epochs, codecs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
rows = []
for c in codecs:
    with open(os.path.join(out, c.translate(str.maketrans(":=,.", "____")) + ".json")) as f:
        rows.append(json.load(f))
base = rows[0]["step_ms_median"] if rows and rows[0]["codec"] == "gloo" else None
print("%s ranks, %s links, %s epochs (%d steps), %d parameters\n" % (np_, rate, epochs, rows[0]["steps"], rows[0]["params"]))
print("| codec | EF | algorithms | wire / dense | step (median) | step (mean) | vs DDP gloo | test accuracy |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    dense = r["codec"] == "gloo"
    print("| %s | %s | %s | %s | %.1f ms | %.1f ms | %s | %.3f |" % (
        "DDP over gloo" if dense else r["codec"], "-" if dense or r["codec"] == "none" else ("yes" if r["ef"] else "no"),
        "-" if dense else (", ".join(r.get("algos") or ["ring"])),
        "1.00" if dense else "%.2f" % r.get("wire_fraction", 1.0), r["step_ms_median"], r["step_ms_mean"],
        "%.2fx" % (base / r["step_ms_median"]) if base else "-", r["test_accuracy"]))
PY
