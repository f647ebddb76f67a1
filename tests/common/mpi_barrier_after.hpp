#pragma once
/// \file
/// For MPI test cases that make collectives fail on purpose: run one rank's part, then meet
/// the other ranks even when that part threw. A rank that left a test case by an exception
/// and skipped its barrier would leave the others waiting in it (or in the next test
/// case's collective) until the runner kills the job: a hang that hides the failure.
#include <doctest/doctest.h>
#include <mpi.h>

#include <exception>

namespace tcoll_test {

/// Runs `part()`; a `std::exception` it throws fails the test case here (with its message);
/// `MPI_Barrier(comm)` runs on every path.
template <class F>
void barrier_after(MPI_Comm comm, F&& part) {
  try {
    part();
  } catch (const std::exception& e) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    FAIL_CHECK("rank " << rank << " left the case by an exception: " << e.what());
  } catch (...) {
    MPI_Barrier(comm); // a failed REQUIRE (doctest's own exception) ends the case after it
    throw;
  }
  MPI_Barrier(comm);
}

} // namespace tcoll_test
