# Sourced by the preload benchmarks: the MPI that libtcoll_mpi.so ($lib) was built against
# (-Dmpi_impl), read from the library's own dependencies, and how to compile for it and
# launch under it, each at its defaults:
#   mpi_family        openmpi or mpich
#   mpi_cc            its C compiler wrapper
#   mpi_run           its launcher (an array; MPI_ARGS adds options)
#   preload_args      launcher options that preload $lib into the ranks
#   forward_env NAME  launcher options that hand the variable NAME to the ranks
if ldd "$lib" | grep -q 'libmpich\.so'; then
  mpi_family=mpich
  mpi_cc=mpicc.mpich
  # Hydra passes the whole environment and allows more ranks than cores
  mpi_run=(mpiexec.mpich)
  preload_args=(-genv LD_PRELOAD "$lib")
  forward_env() { echo -genv "$1" "${!1}"; }
else
  mpi_family=openmpi
  mpi_cc=mpicc
  command -v mpicc.openmpi >/dev/null && mpi_cc=mpicc.openmpi
  mpi_run=(mpirun --oversubscribe)
  command -v mpirun.openmpi >/dev/null && mpi_run=(mpirun.openmpi --oversubscribe)
  preload_args=(-x "LD_PRELOAD=$lib")
  forward_env() { echo -x "$1"; }
fi
read -r -a mpi_extra_args <<< "${MPI_ARGS:-}"
mpi_run+=("${mpi_extra_args[@]}")
