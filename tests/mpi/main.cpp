// doctest driver for the MPI suite: the test owns MPI_Init/MPI_Finalize (tcoll never does).
// Every rank runs every test case in the same order; only rank 0 prints its report, other
// ranks print theirs (prefixed with the rank) only when they saw a failure. The exit code
// is the maximum over ranks, so a failure on any rank fails the meson test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::ostringstream captured;
  int result = 0;
  {
    doctest::Context context;
    context.setOption("no-colors", true); // meson's logs are not terminals
    context.applyCommandLine(argc, argv);
    if (rank != 0) context.setCout(&captured);
    result = context.run();
    if (context.shouldExit()) {
      MPI_Finalize();
      return result;
    }
  }
  if (rank != 0 && result != 0) {
    std::istringstream lines(captured.str());
    std::string line, out;
    while (std::getline(lines, line)) out += "[rank " + std::to_string(rank) + "] " + line + "\n";
    std::fputs(out.c_str(), stderr);
  }
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
