# Sourced by the preload benchmarks: the MPI that libtcoll_mpi.so ($lib) was built against
# (-Dmpi_impl, or -Dmpi_prefix for a full MPI installed elsewhere, such as the wheels of
# scripts/setup_mpi_wheels.sh, or -Dmpi_abi), read from the library's own dependencies, and
# how to compile for it and launch under it, each at its defaults:
#   mpi_family        openmpi or mpich
#   mpi_label         which one, for file names: openmpi, mpich (Debian's), or the prefix's
#                     directory name (openmpi5, mpich5), with -abi for the standard ABI
#   mpi_cc            its C compiler wrapper
#   mpi_run           its launcher (an array; MPI_ARGS adds options)
#   preload_args      launcher options that preload $lib into the ranks
#   forward_env NAME  launcher options that hand the variable NAME to the ranks
mpi_lib_path=$(ldd "$lib" | awk '/libmpi(ch|_abi)?\.so/ {print $3; exit}')
mpi_prefix=""
# a library under PREFIX/lib (not the system's) with PREFIX/bin/mpicc: that MPI's own tools
case "$mpi_lib_path" in
  /usr/* | /lib/* | "") ;;
  *) candidate=$(cd "$(dirname "$mpi_lib_path")/.." && pwd)
     [ -x "$candidate/bin/mpicc" ] && mpi_prefix=$candidate ;;
esac
# MPICH 5's own library is libmpi.so.12 (Debian's MPICH: libmpich.so.12)
if ldd "$lib" | grep -q 'libmpi\(ch\|_abi\)\.so' ||
  { [ -n "$mpi_prefix" ] && [ -x "$mpi_prefix/bin/mpichversion" ]; }; then
  mpi_family=mpich
  mpi_label=mpich
  mpi_cc=mpicc.mpich
  # Hydra passes the whole environment and allows more ranks than cores
  mpi_run=(mpiexec.mpich)
  if [ -n "$mpi_prefix" ]; then
    mpi_label=$(basename "$mpi_prefix")
    mpi_cc=$mpi_prefix/bin/mpicc
    mpi_run=("$mpi_prefix/bin/mpiexec")
  fi
  if ldd "$lib" | grep -q 'libmpi_abi\.so'; then
    mpi_label+=-abi
    mpi_cc=$mpi_prefix/bin/mpicc_abi
  fi
  preload_args=(-genv LD_PRELOAD "$lib")
  forward_env() { echo -genv "$1" "${!1}"; }
else
  mpi_family=openmpi
  mpi_label=openmpi
  mpi_cc=mpicc
  command -v mpicc.openmpi >/dev/null && mpi_cc=mpicc.openmpi
  mpi_run=(mpirun --oversubscribe)
  command -v mpirun.openmpi >/dev/null && mpi_run=(mpirun.openmpi --oversubscribe)
  if [ -n "$mpi_prefix" ]; then
    mpi_label=$(basename "$mpi_prefix")
    mpi_cc=$mpi_prefix/bin/mpicc
    mpi_run=("$mpi_prefix/bin/mpirun" --oversubscribe)
  fi
  preload_args=(-x "LD_PRELOAD=$lib")
  forward_env() { echo -x "$1"; }
fi
read -r -a mpi_extra_args <<< "${MPI_ARGS:-}"
mpi_run+=("${mpi_extra_args[@]}")
