// doctest driver for the MPI suite: the test owns MPI_Init/MPI_Finalize (tcoll never does).
// Every rank runs every test case in the same order; only rank 0 prints its report, other
// ranks print theirs (prefixed with the rank) only when they saw a failure. The exit code
// is the maximum over ranks, so a failure on any rank fails the meson test.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../common/mpi_doctest_main.hpp"

int main(int argc, char** argv) {
  return tcoll_test::mpi_doctest_main(argc, argv, /*thread_multiple=*/false);
}
