#!/usr/bin/env bash
# Dense all-reduce, gradwire over UCX tcp against OpenMPI's MPI_Allreduce over its tcp BTL,
# on the same ranks and sizes, one after the other in one run. Both get their best settings:
# buffers allocated once and first-touched, and MALLOC_MMAP_THRESHOLD_ raised for OpenMPI
# (its per-call temporaries otherwise pay page faults). Prints both tables and the ratio.
# usage: scripts/bench-allreduce-vs-mpi.sh [np] [size] [iters]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-4}
size=${2:-64M}
iters=${3:-10}
build=${GW_BUILD_DIR:-$root/build}
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np" --bind-to none)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_mpi() {  # label, extra mpirun args...
  local label=$1; shift
  "${mpirun[@]}" --mca btl self,tcp --mca pml ob1 -x MALLOC_MMAP_THRESHOLD_=4294967296 "$@" \
    "$build/perf/mpi_allreduce_perf" -b "$size" -e "$size" -n "$iters" -w 3 | tee "$out/$label"
}
run_gw() {
  "${mpirun[@]}" -x UCX_TLS=tcp,self -x GW_DEBUG=WARN \
    "$build/perf/allreduce_perf" -b "$size" -e "$size" -n "$iters" -w 3 --codec none --algo ring | tee "$out/gw"
}

for round in 1 2; do
  echo "== round $round"
  run_mpi mpi_default
  run_mpi mpi_ring --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
  run_gw
  t_gw=$(awk '!/^#/ && NF {print $6}' "$out/gw" | tail -1)
  t_def=$(awk '!/^#/ && NF {print $3}' "$out/mpi_default" | tail -1)
  t_ring=$(awk '!/^#/ && NF {print $3}' "$out/mpi_ring" | tail -1)
  best=$(awk -v a="$t_def" -v b="$t_ring" 'BEGIN {print (a < b) ? a : b}')
  awk -v g="$t_gw" -v d="$t_def" -v r="$t_ring" -v b="$best" 'BEGIN {
    printf "round summary: gradwire %.0f us, OpenMPI default %.0f us, OpenMPI ring %.0f us; gradwire / best OpenMPI = %.3f\n", g, d, r, g / b }'
done
