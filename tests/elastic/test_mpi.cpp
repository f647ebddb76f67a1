// Elastic averaging on MPI ranks (suite 'elastic', under mpirun): the rank-level bodies of
// the threads suite. Every process is single-threaded (no engine), so plain MPI_Init
// suffices. Cases that need a rank count the job does not have are skipped visibly.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <sstream>
#include <tcoll/transport/mpi.hpp>

#include "cases.hpp"

using namespace elastic_test;
using namespace std::chrono_literals;

namespace {
tcoll::mpi_transport make() {
  return tcoll::mpi_transport(MPI_COMM_WORLD, 30s);
}
void report(failures& bad) {
  for (const auto& s : bad.list) FAIL_CHECK(s);
  CHECK(bad.list.empty());
}
int world_size() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
void skipped(const char* what) {
  if (world_rank() == 0) MESSAGE("skipped at np " << world_size() << ": " << std::string(what));
}
} // namespace

TEST_CASE("mpi: Eq. 2 and 3 by hand, asynchronous, fixed arrival order") {
  if (world_size() % 2 == 0) return skipped("needs an odd rank count");
  auto t = make();
  for (auto reply : {el::center_reply::before_update, el::center_reply::after_update}) {
    failures bad;
    hand_async_case(t, reply, bad);
    report(bad);
  }
}

TEST_CASE("mpi: Eq. 3 by hand, synchronous") {
  if (world_size() % 2 != 0) return skipped("needs an even rank count");
  auto t = make();
  failures bad;
  hand_sync_case(t, bad);
  report(bad);
}

TEST_CASE("mpi: the center converges to the mean of constant client parameters") {
  auto t = make();
  failures bad;
  convergence_case(t, t.size() - 1, 200, 0.02, bad);
  report(bad);
}

TEST_CASE("mpi: a client that stops answering is dropped after the timeout") {
  if (world_size() < 3) return skipped("needs 3 ranks");
  for (bool raw : {false, true}) {
    auto t = make();
    failures bad;
    log_lines notices;
    dropped_client_case(t, 400ms, raw, bad, notices);
    report(bad);
    if (t.rank() == 0) {
      REQUIRE(notices.lines.size() == 1);
      CHECK(notices.lines[0].find("dropped client 1") != std::string::npos);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("mpi: a slow client does not hold up the others") {
  if (world_size() < 3) return skipped("needs 3 ranks");
  auto t = make();
  failures bad;
  slow_client_case(t, bad);
  report(bad);
}

TEST_CASE("mpi: a silent server gives every client rank a timeout_error") {
  auto t = make();
  failures bad;
  silent_server_case(t, bad);
  report(bad);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("mpi: bad input names the argument and the rank") {
  auto t = make();
  failures bad;
  bad_input_case(t, bad);
  report(bad);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rank = world_rank();
  // rank 0 reports, the others only when they saw a failure
  std::ostringstream captured;
  int result = 0;
  {
    doctest::Context context;
    context.setOption("no-colors", true);
    context.applyCommandLine(argc, argv);
    if (rank != 0) context.setCout(&captured);
    result = context.run();
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
