// The execution layer on MPI (suite 'schedule', under mpirun): the same rank-level bodies
// as the threads suite, plus MPI's own rules: the engine needs MPI_THREAD_MULTIPLE, and the
// peers of a failed rank fail within a second through the failure announcement.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <mpi.h>
#include <thread>

#include <tcoll/transport/mpi.hpp>

#include "../common/mpi_barrier_after.hpp"
#include "../common/mpi_doctest_main.hpp"
#include "cases.hpp"

using namespace schedule_test;
using namespace std::chrono_literals;

namespace {
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
tcoll::mpi_transport make(std::chrono::milliseconds timeout = 30s) {
  return tcoll::mpi_transport(MPI_COMM_WORLD, timeout);
}
} // namespace

TEST_CASE("mpi: many non-blocking allreduces in flight, issued from several threads") {
  auto t = make();
  many_in_flight_case(t, 24, 1);
  many_in_flight_case(t, 24, 3);
}

TEST_CASE("mpi: mixed non-blocking collectives, requests, argument errors") {
  auto t = make();
  mixed_collectives_case(t);
  other_nonblocking_collectives_case(t);
  prepared_collectives_case(t);
  destroyed_request_waits_case(t);
  request_released_by_its_completion_case(t);
  prepared_completion_case(t);
  wait_for_case(t);
  nonblocking_bad_arguments_case(t);
}

TEST_CASE("mpi: prepared allreduce, including passthrough to MPI_Allreduce") {
  auto t = make();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{65537}}) {
    prepared_case(t, tcoll::ring{}, n);
    prepared_case(t, tcoll::recursive_doubling{}, n);
    prepared_case(t, tcoll::automatic{}, n);
    prepared_case(t, tcoll::passthrough{}, n);
  }
}

TEST_CASE("mpi: scheduler with random plans, sizes and ready orders, fractional inputs") {
  auto t = make();
  for (unsigned seed = 1; seed <= 4; ++seed) {
    scheduler_random_case(t, tcoll::recursive_doubling{}, seed, false);
    scheduler_random_case(t, tcoll::binomial_tree{}, seed + 100, false);
    scheduler_random_case(t, tcoll::ring{}, seed + 200, false);
    scheduler_random_case(t, tcoll::ring{}, seed + 300, true);
    scheduler_random_case(t, tcoll::passthrough{}, seed + 400, false);
  }
}

TEST_CASE("mpi: scheduler with a mixed-precision wire (half, bfloat16)") {
  auto t = make();
  for (unsigned seed = 1; seed <= 2; ++seed) {
    scheduler_mixed_case<tcoll::half>(t, tcoll::ring{}, seed, 1.0f);
    scheduler_mixed_case<tcoll::bfloat16>(t, tcoll::recursive_doubling{}, seed + 10, 1.0f);
  }
}

TEST_CASE("mpi: scheduler errors and autotune") {
  {
    auto t = make();
    plan_mismatch_case(t);
    bad_marks_case(t);
    autotune_case(t);
  }
  {
    auto t = make(2s);
    tcoll_test::barrier_after(MPI_COMM_WORLD, [&] { finish_early_case(t, 0); });
  }
  {
    auto t = make(500ms);
    tcoll_test::barrier_after(MPI_COMM_WORLD, [&] { silent_peer_case(t, t.size() - 1); });
  }
  {
    auto t = make();
    tcoll_test::barrier_after(MPI_COMM_WORLD, [&] { broken_transport_case(t); });
  }
}

TEST_CASE("mpi: peers of a failed rank fail within a second, not after the timeout") {
  int P = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (P < 2) return;
  {
    auto t = make(20s);
    std::vector<float> v(1000, 0.5f);
    const auto start = tcoll::clock::now();
    tcoll_test::barrier_after(MPI_COMM_WORLD, [&] {
      if (world_rank() == 0) {
        // rank 0's collective fails locally (a bad call on its engine) and breaks the
        // transport
        std::this_thread::sleep_for(200ms);
        t.abort();
      } else {
        auto q = tcoll::iallreduce(t, std::span<float>(v), tcoll::sum_op{}, tcoll::ring{});
        CHECK_THROWS_AS(q.wait(), tcoll::aborted_error);
        CHECK(tcoll::clock::now() - start < 1200ms);
      }
    });
  }
}

TEST_CASE("mpi: threads polling announcements at once all learn the failure, none blocks") {
  // Several threads of a rank poll the control communicator while a peer announces its
  // failure once. With a plain probe-then-receive, two threads could both see the one
  // announcement and the loser would wait in its receive forever (a hang, then the suite's
  // timeout); a matched probe hands the message to one thread.
  int P = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (P < 2) return;
  for (int round = 0; round < 20; ++round) {
    auto t = make(20s);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 5));
      t.abort();
    } else {
      std::atomic<int> finished{0};
      std::vector<std::thread> pollers;
      for (int k = 0; k < 4; ++k)
        pollers.emplace_back([&] {
          const auto until = tcoll::clock::now() + 10s;
          while (tcoll::clock::now() < until && !t.aborted()) t.poll_announcements();
          ++finished;
        });
      for (auto& p : pollers) p.join();
      CHECK(finished.load() == 4);
      CHECK(t.failed_peer() == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  return tcoll_test::mpi_doctest_main(argc, argv, /*thread_multiple=*/true);
}
