#!/bin/sh
# OpenMPI's "rsh agent" for the cluster in a box (mpirun --mca plm_rsh_agent THIS): where ssh
# would log in to HOST, this enters the network namespace HOST (and a UTS namespace where the
# hostname is HOST) and runs the command there.
# usage (by mpirun): rsh-agent.sh [ssh-style options] HOST COMMAND...
while [ $# -gt 0 ]; do
  case "$1" in
    -x|-t|-T|-n|-a|-q) shift ;;
    -o|-p|-l) shift 2 ;;
    *) break ;;
  esac
done
host=$1
shift
case "$host" in
  *[!A-Za-z0-9._-]*|'') echo "rsh-agent: bad host '$host'" >&2; exit 2 ;;
esac
# A UTS namespace too, named after the host: OpenMPI tells nodes apart by hostname (its
# session directories and routing would collide otherwise).
exec ip netns exec "$host" unshare --uts sh -c "hostname '$host' && exec $*"
