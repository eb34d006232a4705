#!/usr/bin/env bash
# Creates a cluster in a box of N hosts with links of RATE (tbf; "none" leaves them
# unshaped) and leaves it up; scripts/cluster/netns-down.sh removes it.
# usage: scripts/cluster/netns-up.sh [N] [RATE]     e.g. 4 1gbit
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)" >&2; exit 1; }
n=${1:-4}
rate=${2:-1gbit}
trap 'rc=$?; if [ $rc != 0 ]; then netns_down; fi' EXIT
netns_up "$n" "$rate"
for ((i = 0; i < n; ++i)); do echo "$(netns_host "$i") $(netns_addr "$i")"; done
