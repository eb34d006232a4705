#!/usr/bin/env bash
# A small dense all-reduce (4 KiB of float32 by default) as a new user would time it:
# gradwire's allreduce_perf (the policy's choice), OpenMPI's MPI_Allreduce (perf/mpi_allreduce_perf)
# and, with GLOO=1, torch.distributed's gloo, on the same ranks one after the other, over
# shared memory and over TCP, every rank count given. All are launched by mpirun. Prints one
# row per (transport, ranks) with each time per call (the slowest rank's mean) and gradwire /
# OpenMPI.
# usage: scripts/bench-small-allreduce.sh [size] [iters] [ranks...]   (defaults: 4K 2000 2 3 4 8)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size=${1:-4K}
iters=${2:-2000}
shift $(($# > 2 ? 2 : $#))
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 3 4 8)
build=${GW_BUILD_DIR:-$root/build}
warm=$((iters / 10 + 10))
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

time_of() {  # the time column (us) of the last data row: column $1
  awk -v c="$1" '!/^#/ && NF {t = $c} END {print t}'
}

printf "%-4s %5s %14s %14s %14s %8s\n" tls ranks "gradwire_us" "openmpi_us" "gloo_us" "gw/mpi"
for tls in sm tcp; do
  if [ "$tls" = sm ]; then btl=self,vader; ucx=sm,self; else btl=self,tcp; ucx=tcp,self; fi
  for np in "${ranks[@]}"; do
    mpi=$("${mpirun[@]}" -np "$np" --mca btl "$btl" --mca pml ob1 \
      "$build/perf/mpi_allreduce_perf" -b "$size" -e "$size" -n "$iters" -w "$warm" | time_of 3)
    gw=$("${mpirun[@]}" -np "$np" --mca btl "$btl" -x UCX_TLS="$ucx" -x GW_DEBUG=WARN \
      "$build/perf/allreduce_perf" -b "$size" -e "$size" -n "$iters" -w "$warm" | time_of 6)
    gloo=-
    if [ "${GLOO:-0}" = 1 ]; then
      gloo_iters=$((iters / 10 + 10))
      gloo=$("${mpirun[@]}" -np "$np" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$((29500 + np)) \
        /usr/bin/python3 "$root/perf/gloo_allreduce_perf.py" -b "$size" -e "$size" -n "$gloo_iters" -w 5 |
        time_of 3)
    fi
    ratio=$(awk -v g="$gw" -v m="$mpi" 'BEGIN {printf "%.2f", g / m}')
    printf "%-4s %5d %14s %14s %14s %8s\n" "$tls" "$np" "$gw" "$mpi" "$gloo" "$ratio"
  done
done
