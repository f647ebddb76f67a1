#!/usr/bin/env bash
# Emulated cluster: runs an MPI program inside a fresh Linux network namespace whose loopback
# is rate-limited with a tbf qdisc, over OpenMPI's TCP transport only. Each MPI process plays
# one node (threads inside it play the node's devices); every byte between processes crosses
# the shaped loopback. The namespace is removed on exit, also on error or Ctrl-C.
#
#   scripts/emulated_cluster.sh [--rate 10gbit] [--burst 512kb] [--latency 50ms] [--np 2]
#                               [--name NS] [--no-mpi] [--] program [args...]
#
# --no-mpi runs the program itself in the namespace (not under mpirun): a program that
# starts its own processes and talks TCP over the loopback (bench/torch/ddp_speed.py).
#
# Notes:
#  - Needs root (ip netns, tc). Where namespaces or tbf are unavailable it prints why and
#    exits 77 (the "skipped" code of meson test).
#  - tbf on lo shapes the *sum* of all traffic between processes (every packet leaves through
#    lo), i.e. a shared medium of the given rate, not a full-duplex link per node.
#  - TCP over loopback adds ~10 us of latency per message on its own; this kernel has no
#    netem, so latency cannot be added here (use tcoll::shaped for latency-bound regimes).
set -euo pipefail

rate=10gbit burst=512kb latency=50ms np=2 name="tcoll-emu-$$" mpi=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    --help|-h) sed -n '2,20p' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) echo "emulated_cluster: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "emulated_cluster: no program given (see --help)" >&2; exit 2; }

skip() { echo "emulated_cluster: SKIP: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns / tc"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"
command -v tc >/dev/null || skip "tc not installed"
[ "$mpi" = 0 ] || command -v mpirun >/dev/null || skip "mpirun not found"

created=0
cleanup() { if [ "$created" = 1 ]; then ip netns del "$name" 2>/dev/null || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$name" 2>/dev/null || skip "ip netns add is not permitted here"
created=1
ip netns exec "$name" ip link set lo up || skip "cannot bring up lo in the namespace"
ip netns exec "$name" tc qdisc add dev lo root tbf rate "$rate" burst "$burst" latency "$latency" \
  2>/dev/null || skip "tc tbf is not available in this kernel"
status=0
if [ "$mpi" = 0 ]; then
  echo "emulated_cluster: namespace $name, lo shaped to $rate (burst $burst): $*" >&2
  ip netns exec "$name" "$@" || status=$?
  exit $status
fi
echo "emulated_cluster: namespace $name, lo shaped to $rate (burst $burst), $np processes" >&2
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  ip netns exec "$name" mpirun --allow-run-as-root --oversubscribe -np "$np" \
  --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  --mca pml ob1 --bind-to none "$@" || status=$?
exit $status
