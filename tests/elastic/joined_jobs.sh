#!/usr/bin/env bash
# Elastic averaging across separately started MPI jobs (MXNET-MPI: every client its own
# mpirun): one server job of 1 process and two client jobs of CLIENT_NP processes each,
# joined by tcoll::elastic::accept_clients / join_server through an MPI port, with Open MPI's
# ompi-server as the name server that lets two mpiruns connect.
#   joined_jobs.sh MPIRUN CLIENT_NP PROGRAM [ARGS...]
# PROGRAM runs in every job with TCOLL_ELASTIC_JOIN=server:PORTFILE or client:PORTFILE, and
# with @ROLE@ and @PORT@ in ARGS replaced by the role and the port file.
# Exit status: 0 when all three jobs exit 0, 77 (skip) without ompi-server, else 1.
set -u
mpirun=$1 client_np=$2
shift 2
program=("$@")
server_bin=$(dirname "$(command -v "$mpirun")")/ompi-server
[ -x "$server_bin" ] || server_bin=$(command -v ompi-server || true)
if [ -z "$server_bin" ] || [ ! -x "$server_bin" ]; then
  echo "SKIP: no ompi-server next to $mpirun (Open MPI's name server joins two mpiruns)"
  exit 77
fi
dir=$(mktemp -d /tmp/tcoll_joined.XXXXXX)
"$server_bin" --no-daemonize --report-uri "$dir/uri" &
name_server=$!
cleanup() {
  kill "$name_server" 2>/dev/null
  wait "$name_server" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -s "$dir/uri" ] && break; sleep 0.1; done
[ -s "$dir/uri" ] || { echo "ompi-server did not report its URI"; exit 1; }
launch() { # role, np, log
  local args=("${program[@]//@ROLE@/$1}")
  args=("${args[@]//@PORT@/$dir/port}")
  # a process that ends after elastic::finalize_joined (no MPI_Finalize) is no failure
  timeout 180 "$mpirun" --allow-run-as-root --oversubscribe --ompi-server "file:$dir/uri" \
    --mca btl self,vader,tcp --mca orte_allowed_exit_without_sync 1 \
    -x "TCOLL_ELASTIC_JOIN=$1:$dir/port" -np "$2" "${args[@]}" >"$3" 2>&1
}
launch server 1 "$dir/server.log" &
server=$!
launch client "$client_np" "$dir/client0.log" &
client0=$!
launch client "$client_np" "$dir/client1.log" &
client1=$!
status=0
for job in server:$server client0:$client0 client1:$client1; do
  wait "${job#*:}"
  rc=$?
  echo "=== ${job%%:*} job: exit $rc"
  cat "$dir/${job%%:*}.log"
  [ $rc -eq 0 ] || status=1
done
exit $status
