#!/usr/bin/env bash
# Removes every namespace of the cluster in a box (prefix $GW_NETNS_PREFIX, default gwns).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
netns_down
