# shellcheck shell=bash
# Cluster in a box: N network namespaces, each one "host" with one link (a veth pair) to a
# switch namespace that holds a bridge. Every link is limited by tc tbf in both directions
# (host -> switch on the host's eth0, switch -> host on the switch's port), so each host has
# a full-duplex link of the chosen rate, as behind a top-of-rack switch. Nothing is created
# in the root namespace: traffic never leaves these namespaces.
#
# Sourced by the scripts next to it. Names: $GW_NETNS_PREFIX-sw, $GW_NETNS_PREFIX-h0 ...
# Host i has address 10.77.0.(11 + i)/24 on eth0.

GW_NETNS_PREFIX=${GW_NETNS_PREFIX:-gwns}
GW_NETNS_SUBNET=${GW_NETNS_SUBNET:-10.77.0}
GW_NETNS_QUEUE=${GW_NETNS_QUEUE:-20ms}  # tbf latency: how long a packet may wait in a link's queue

netns_host() { echo "$GW_NETNS_PREFIX-h$1"; }
netns_addr() { echo "$GW_NETNS_SUBNET.$((11 + $1))"; }
netns_cidr() { echo "$GW_NETNS_SUBNET.0/24"; }

# Every namespace of ours that exists now.
netns_list() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${GW_NETNS_PREFIX}-(sw|h[0-9]+)\$" || true
}

# Deletes every namespace of ours (which deletes their veths and qdiscs). Idempotent.
netns_down() {
  local ns
  for ns in $(netns_list); do
    # Processes left in a namespace keep it alive as a mount but not its links; kill ours.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then kill $pids 2>/dev/null || true; sleep 0.2; kill -9 $pids 2>/dev/null || true; fi
    ip netns delete "$ns" 2>/dev/null || true
  done
}

# tbf for one device: rate like 1gbit, 10gbit, 25gbit. The bucket must hold at least one
# GSO super-packet (64 KiB) and about 1 ms of traffic, else fast links lose throughput.
netns_shape() {  # ns dev rate
  local ns=$1 dev=$2 rate=$3 bits burst
  bits=$(netns_rate_bits "$rate")
  burst=$((bits / 8 / 1000))             # 1 ms of traffic, bytes
  [ "$burst" -lt 262144 ] && burst=262144
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency "$GW_NETNS_QUEUE"
}

netns_rate_bits() {  # 1gbit | 10gbit | 500mbit | 25gbit -> bits per second
  local r=${1,,}
  case "$r" in
    *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
    *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
    *kbit) echo $(( ${r%kbit} * 1000 )) ;;
    *) echo "netns: rate '$1' is not N{k,m,g}bit" >&2; return 1 ;;
  esac
}

# Creates the switch and n hosts with links of the given rate ("none": unshaped veth).
netns_up() {  # n rate
  local n=$1 rate=$2 i sw host
  if [ -n "$(netns_list)" ]; then
    echo "netns: namespaces with prefix $GW_NETNS_PREFIX exist already (another run?): $(netns_list | tr '\n' ' ')" >&2
    echo "netns: remove them with scripts/cluster/netns-down.sh if they are stale" >&2
    return 1
  fi
  sw="$GW_NETNS_PREFIX-sw"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 0; i < n; ++i)); do
    host=$(netns_host "$i")
    ip netns add "$host"
    ip -n "$host" link set lo up
    # Create the pair inside the switch, then move one end to the host.
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$host"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$host" addr add "$(netns_addr "$i")/24" dev eth0
    ip -n "$host" link set eth0 up
    if [ "$rate" != none ]; then
      netns_shape "$host" eth0 "$rate"
      netns_shape "$sw" "p$i" "$rate"
    fi
  done
  # Bridge ports forward at once (no STP); wait until every link reports up.
  local tries
  for ((i = 0; i < n; ++i)); do
    for ((tries = 0; tries < 50; ++tries)); do
      ip -n "$(netns_host "$i")" -o link show eth0 | grep -q "state UP" && break
      sleep 0.1
    done
  done
}

# Runs a command in host i's namespace.
netns_exec() {  # i cmd...
  local i=$1; shift
  ip netns exec "$(netns_host "$i")" "$@"
}

# Runs one rank of a command in each of the first n hosts, torchrun-style: RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (host 0), MASTER_PORT, and GW_TOKEN
# (the exported one, else 16 random bytes per run: gradwire refuses a job of several ranks
# that has neither a token nor a launcher job id). Rank 0's output goes to stdout; rank i's
# to $GW_NETNS_LOGDIR/rank<i>.log (default: discarded unless it fails). Returns the first non-zero exit status; on failure, or when the caller is
# interrupted, the other ranks are killed so that nothing hangs.
# Environment for the ranks: whatever is exported, plus the variables above.
netns_run() {  # n cmd...
  local n=$1; shift
  netns_run_grid "$n" 1 "$@"
}

# netns_run with m ranks in each of the first n hosts (rank = host * m + local rank). Each
# host's ranks run in a mount namespace of their own whose /proc/sys/kernel/random/boot_id
# is the host's own, as on separate machines: UCX (which tells hosts apart by boot id) then
# uses shared memory only between ranks of one host and TCP through the links between hosts,
# whatever UCX_TLS allows, and gradwire's host identity sees n hosts.
netns_run_grid() {  # n m cmd...
  local n=$1 m=$2; shift 2
  local port=${MASTER_PORT:-$((20000 + RANDOM % 20000))}
  local token=${GW_TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
  local logdir=${GW_NETNS_LOGDIR:-$(mktemp -d)}
  local bootdir
  bootdir=$(mktemp -d)
  local pids=() i j r rc=0 status np=$((n * m))
  for ((i = 0; i < n; ++i)); do
    cat /proc/sys/kernel/random/uuid >"$bootdir/h$i"
    for ((j = 0; j < m; ++j)); do
      r=$((i * m + j))
      # shellcheck disable=SC2016
      local launch=(ip netns exec "$(netns_host "$i")" unshare -m sh -c
        'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"' "$bootdir/h$i"
        env RANK=$r WORLD_SIZE=$np LOCAL_RANK=$j LOCAL_WORLD_SIZE=$m
        MASTER_ADDR="$(netns_addr 0)" MASTER_PORT=$port GW_TOKEN="$token")
      if [ "$r" = 0 ]; then
        "${launch[@]}" "$@" &
      else
        "${launch[@]}" "$@" >"$logdir/rank$r.log" 2>&1 &
      fi
      pids+=($!)
    done
  done
  NETNS_RUN_PIDS="${pids[*]}"
  # Poll the ranks; at the first failure, stop the others.
  local done_=() left=$np
  while [ "$left" -gt 0 ]; do
    for ((i = 0; i < np; ++i)); do
      [ -n "${done_[$i]:-}" ] && continue
      kill -0 "${pids[$i]}" 2>/dev/null && continue
      status=0
      wait "${pids[$i]}" || status=$?
      done_[$i]=1
      left=$((left - 1))
      if [ "$status" != 0 ] && [ "$rc" = 0 ]; then
        rc=$status
        kill "${pids[@]}" 2>/dev/null || true
      fi
    done
    [ "$left" -gt 0 ] && sleep 0.1
  done
  if [ "$rc" != 0 ]; then
    for ((i = 1; i < np; ++i)); do
      [ -s "$logdir/rank$i.log" ] && { echo "--- rank $i:"; tail -20 "$logdir/rank$i.log"; } >&2
    done
  fi
  [ -z "${GW_NETNS_LOGDIR:-}" ] && rm -rf "$logdir"
  rm -rf "$bootdir"
  NETNS_RUN_PIDS=
  return "$rc"
}

# Kills what netns_run started (for traps).
netns_run_kill() {
  [ -n "${NETNS_RUN_PIDS:-}" ] && kill $NETNS_RUN_PIDS 2>/dev/null || true
}

# mpirun with one rank in each of the first n hosts (GW_NETNS_PER_HOST ranks each when set,
# consecutive ranks on one host): mpirun itself runs in host 0 (so that its out-of-band
# channel is on the cluster's subnet) and starts each host's ranks through rsh-agent.sh; the
# TCP BTL and the OOB are kept on the cluster's subnet. GW_NETNS_TIMEOUT (seconds) bounds it.
netns_mpirun() {  # n mpirun-args...
  local n=$1; shift
  local m=${GW_NETNS_PER_HOST:-1}
  local here hostfile i
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  hostfile=$(mktemp)
  for ((i = 0; i < n; ++i)); do echo "$(netns_host "$i") slots=$m"; done >"$hostfile"
  local rc=0 map=node
  [ "$m" -gt 1 ] && map=slot
  local limit=()
  [ -n "${GW_NETNS_TIMEOUT:-}" ] && limit=(timeout "$GW_NETNS_TIMEOUT")
  ip netns exec "$(netns_host 0)" "${limit[@]}" mpirun --allow-run-as-root -np "$((n * m))" --hostfile "$hostfile" --map-by "$map" \
    --bind-to none --mca plm_rsh_agent "$here/rsh-agent.sh" \
    --mca btl_tcp_if_include "$(netns_cidr)" --mca oob_tcp_if_include "$(netns_cidr)" "$@" || rc=$?
  rm -f "$hostfile"
  return "$rc"
}
