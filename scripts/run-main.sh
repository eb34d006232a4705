#!/usr/bin/env bash
# The main job on one machine: installs what is needed (with current PyTorch and gradwire's
# torch backend in .venv), builds, and runs a 4-rank compressed
# all-reduce (64 MB of fp32 per rank) with several codecs over UCX, printing a table.
# Set NP, SIZE or UCX_TLS to vary it; extra arguments go to allreduce_perf.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${GW_SKIP_INSTALL:-0}" != 1 ]; then "$root/scripts/install-deps.sh"; fi
# Current PyTorch in .venv and the torch.distributed backend for it (GW_SKIP_TORCH_SETUP=1: not now).
if [ "${GW_SKIP_TORCH_SETUP:-0}" != 1 ]; then "$root/scripts/setup-torch.sh"; fi
GW_BUILD_DIR=$root/build GW_BUILD_TYPE=Release "$root/scripts/build.sh"
export UCX_TLS=${UCX_TLS:-tcp,self}
exec "$root/build/perf/allreduce_perf" --np "${NP:-4}" -b "${SIZE:-64M}" -e "${SIZE:-64M}" -n 5 -w 2 \
  --codec none --codec fp16 --codec qsgd:bits=8 --codec qsgd:bits=4 --codec sign \
  --codec topk:ratio=0.01 --codec dgc:ratio=0.001 "$@"
