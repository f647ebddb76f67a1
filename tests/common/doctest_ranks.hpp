#pragma once
/// \file
/// The doctest drivers of the suites whose every rank runs every test case (MPI jobs, the
/// process team): rank 0 reports, the others print their report (each line prefixed with
/// the rank) on stderr only when they saw a failure, so a job's log reads as one run's.
/// `mpi_doctest_main` (mpi_doctest_main.hpp) is the whole `main` of an MPI suite. The file
/// that includes this defines DOCTEST_CONFIG_IMPLEMENT before doctest.
#include <doctest/doctest.h>

#include <cstdio>
#include <sstream>
#include <string>

namespace tcoll_test {

/// doctest's result of this rank's run of the test cases selected by the command line; sets
/// `should_exit` where the command line asked for no run (`--help`, `--list-test-cases`).
inline int run_doctest_as_rank(int argc, char** argv, int rank, bool* should_exit = nullptr) {
  std::ostringstream captured;
  int result = 0;
  {
    doctest::Context context;
    context.setOption("no-colors", true); // meson's logs are not terminals
    context.applyCommandLine(argc, argv);
    if (rank != 0) context.setCout(&captured);
    result = context.run();
    if (should_exit) *should_exit = context.shouldExit();
  }
  if (rank != 0 && result != 0) {
    std::istringstream lines(captured.str());
    std::string line, out;
    while (std::getline(lines, line)) out += "[rank " + std::to_string(rank) + "] " + line + "\n";
    std::fputs(out.c_str(), stderr);
  }
  return result;
}

} // namespace tcoll_test
