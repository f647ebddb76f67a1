#pragma once
/// \file
/// The `main` of an MPI test suite (doctest_ranks.hpp's driver on every rank of
/// MPI_COMM_WORLD). The file that includes this defines DOCTEST_CONFIG_IMPLEMENT before
/// doctest.
#include <mpi.h>

#include <cstdio>

#include "doctest_ranks.hpp"

namespace tcoll_test {

/// The largest of every rank's `result` on `comm`: a failure on any rank fails the job.
inline int worst_over_ranks(int result, MPI_Comm comm) {
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, comm);
  return worst;
}

/// The `main` of an MPI suite: MPI initialised (tcoll never does), the cases run on every
/// rank of MPI_COMM_WORLD, the largest exit code over ranks returned. With
/// `thread_multiple` (suites whose engine runs collectives from its own thread) an MPI
/// without MPI_THREAD_MULTIPLE skips the suite visibly (exit code 77, meson's skip).
inline int mpi_doctest_main(int argc, char** argv, bool thread_multiple) {
  int provided = 0;
  if (thread_multiple)
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  else
    MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (thread_multiple && provided != MPI_THREAD_MULTIPLE) {
    if (rank == 0)
      std::printf("SKIP: this MPI does not provide MPI_THREAD_MULTIPLE (got level %d)\n", provided);
    MPI_Finalize();
    return 77;
  }
  bool should_exit = false;
  const int result = run_doctest_as_rank(argc, argv, rank, &should_exit);
  const int worst = should_exit ? result : worst_over_ranks(result, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
} // namespace tcoll_test
