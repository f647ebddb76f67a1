// Elastic averaging on MPI ranks (suite 'elastic', under mpirun): the rank-level bodies of
// the threads suite. Every process is single-threaded (no engine), so plain MPI_Init
// suffices. Cases that need a rank count the job does not have are skipped visibly.
//
// With TCOLL_ELASTIC_JOIN=server:FILE (in the server's job) or client:FILE (in each client
// job) the same cases run on the world that `elastic::accept_clients` / `join_server` make of
// separately started jobs (tests/elastic/joined_jobs.sh), server's job first.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tcoll/elastic/mpi_join.hpp>
#include <tcoll/transport/mpi.hpp>

#include "../common/mpi_doctest_main.hpp"
#include "cases.hpp"

using namespace elastic_test;
using namespace std::chrono_literals;

namespace {
MPI_Comm world = MPI_COMM_WORLD; // or the joined jobs' communicator
el::joined_world joined;         // filled in joined mode (joined.comm == world)
tcoll::mpi_transport make() {
  return tcoll::mpi_transport(world, 30s);
}
void report(failures& bad) {
  for (const auto& s : bad.list) FAIL_CHECK(s);
  CHECK(bad.list.empty());
}
int world_size() {
  int p = 0;
  MPI_Comm_size(world, &p);
  return p;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(world, &r);
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
    MPI_Barrier(world);
  }
}

TEST_CASE("mpi: a client gone before a large reply is dropped; the transport stays usable") {
  // The 1 MiB reply to the client that left goes by rendezvous: MPI cannot complete or
  // cancel it. The server keeps it going (mpi_transport::abandon) instead of destroying it,
  // which broke the transport and failed every other client.
  if (world_size() < 3) return skipped("needs 3 ranks");
  auto t = make();
  failures bad;
  log_lines notices;
  dropped_client_case(t, 400ms, true, bad, notices, std::size_t{1} << 18);
  report(bad);
  if (t.rank() == 0) {
    REQUIRE(notices.lines.size() == 1);
    CHECK(notices.lines[0].find("dropped client 1") != std::string::npos);
  }
  MPI_Barrier(world);
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
  MPI_Barrier(world);
}

TEST_CASE("mpi: bad input names the argument and the rank") {
  auto t = make();
  failures bad;
  bad_input_case(t, bad);
  report(bad);
}

TEST_CASE("mpi: separately started jobs join in order, server's job first") {
  if (joined.comm == MPI_COMM_NULL) return skipped("not started as joined jobs");
  int own_rank = 0, own_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &own_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &own_size);
  REQUIRE(joined.job_sizes.size() == static_cast<std::size_t>(joined.clients) + 1);
  CHECK(joined.job_sizes[static_cast<std::size_t>(joined.job)] == own_size);
  CHECK(joined.job_first[static_cast<std::size_t>(joined.clients)] == 0); // the server's job
  // jobs are contiguous and keep their own rank order
  CHECK(world_rank() == joined.job_first[static_cast<std::size_t>(joined.job)] + own_rank);
  int total = 0;
  for (int s : joined.job_sizes) total += s;
  CHECK(total == world_size());
  // every process sees the same job table
  std::vector<int> mine(joined.job_first), root(joined.job_first);
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_INT, 0, world);
  CHECK(root == mine);
}

TEST_CASE("mpi: joining jobs, bad input and a server that never appears") {
  if (joined.comm != MPI_COMM_NULL) return skipped("runs in a plain job");
  const std::string missing = "/nonexistent-tcoll-dir/port";
  // every rank of the job throws the same error, naming its rank
  try {
    (void)el::accept_clients(MPI_COMM_WORLD, missing, 0);
    FAIL("clients = 0 accepted");
  } catch (const tcoll::invalid_argument& e) {
    CHECK(std::string(e.what()).find("clients = 0") != std::string::npos);
    CHECK(e.rank() == world_rank());
  }
  try {
    (void)el::accept_clients(MPI_COMM_WORLD, missing, 2);
    FAIL("an unwritable port file accepted");
  } catch (const tcoll::invalid_argument& e) {
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)el::join_server(MPI_COMM_WORLD, missing, {.timeout = 300ms});
    FAIL("joined a server that does not exist");
  } catch (const tcoll::timeout_error& e) {
    CHECK(std::string(e.what()).find("did not appear within 300 ms") != std::string::npos);
    CHECK(e.rank() == world_rank());
  }
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  // joined mode runs the elastic server's engine-free loop, but the join's watchdog may call
  // MPI_Abort from its own thread: ask for MPI_THREAD_MULTIPLE
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (const char* spec = std::getenv("TCOLL_ELASTIC_JOIN")) {
    const std::string s(spec);
    const el::join_options o{.timeout = 60s, .server_last = false};
    if (s.rfind("server:", 0) == 0)
      joined = el::accept_clients(MPI_COMM_WORLD, s.substr(7), 2, o);
    else if (s.rfind("client:", 0) == 0)
      joined = el::join_server(MPI_COMM_WORLD, s.substr(7), o);
    else {
      std::fprintf(stderr, "TCOLL_ELASTIC_JOIN: expected server:FILE or client:FILE, got '%s'\n",
                   spec);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    world = joined.comm;
    // the jobs end in no agreed order after finalize_joined's barrier: a late write of Open
    // MPI's to a peer job that already exited must not kill this process
    std::signal(SIGPIPE, SIG_IGN);
  }
  const int worst = tcoll_test::worst_over_ranks(
      tcoll_test::run_doctest_as_rank(argc, argv, world_rank()), world);
  if (joined.comm != MPI_COMM_NULL)
    el::finalize_joined(joined, worst); // a barrier, then exit without MPI_Finalize
  else
    MPI_Finalize();
  return worst;
}
