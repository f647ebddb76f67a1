// The sufficient-factor allreduce on MPI ranks (suite 'hybrid', under mpirun): the same
// rank-level bodies as the threads suite. The non-blocking path needs MPI_THREAD_MULTIPLE
// (the engine thread calls MPI), else the program skips (exit 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <tcoll/transport/mpi.hpp>

#include "../common/mpi_doctest_main.hpp"
#include "cases.hpp"

using namespace hybrid_test;
using namespace std::chrono_literals;

namespace {
tcoll::mpi_transport make() {
  return tcoll::mpi_transport(MPI_COMM_WORLD, 30s);
}
} // namespace

TEST_CASE("mpi: SFB against exact and dense references, identical bits on every rank") {
  auto t = make();
  for (std::uint64_t c = 0; c < (quick() ? 2u : 6u); ++c) {
    const shape s = random_shape(300 + c, 48, 12);
    CAPTURE(s.K);
    CAPTURE(s.M);
    CAPTURE(s.N);
    exact_case<float>(t, 300 + c, s);
    fractional_case<float>(t, 400 + c, s);
    fractional_case<float>(t, 400 + c, s, true);
    fractional_case<double>(t, 500 + c, s);
    average_is_sum_over_p_case<float>(t, 600 + c, s);
  }
}

TEST_CASE("mpi: isfb_allreduce per layer with dense bias allreduces, same bits as blocking") {
  auto t = make();
  nonblocking_case<float>(t, 700);
}

TEST_CASE("mpi: SFB and hybrid_scheduler on a device-only transport (NCCL's rule)") {
  auto t = make();
  device_only_case<float>(t, 1400, {3, 17, 9});
  scheduler_case<float, tcoll::ring, pretend_device_reducer>(t, 1410, true, 2);
}

TEST_CASE("mpi: hybrid_scheduler jobs during backward give the blocking calls' bits") {
  auto t = make();
  for (int order = 0; order < 3; ++order) {
    scheduler_case<float>(t, 70 + order, false, order);
    scheduler_case<float>(t, 80 + order, true, order, tcoll::recursive_halving_doubling{});
  }
}

TEST_CASE("mpi: hybrid_scheduler with a fusion planner's buckets (dense_buckets)") {
  auto t = make();
  scheduler_buckets_case<float>(t, 2200, 1);
}

TEST_CASE("mpi: hybrid_scheduler autotune re-plans the dense buckets, rank 0's plan") {
  auto t = make();
  scheduler_autotune_case<float>(t, 3300, tcoll::plan::single_planner{}, 4);
  scheduler_autotune_case<float>(t, 3400, tcoll::plan::mgwfbp_planner{}, 0);
}

TEST_CASE("mpi: hybrid_scheduler bad use names the tensor; an unmarked tensor fails every rank") {
  auto t = tcoll::mpi_transport(MPI_COMM_WORLD, 5s);
  scheduler_bad_use_case(t);
}

TEST_CASE("mpi: hybrid_scheduler on a broken transport: marks return, finish() throws") {
  auto t = make();
  broken_transport_case(t);
}

TEST_CASE("mpi: bad input throws on every rank, naming the rank; transport stays usable") {
  auto t = make();
  bad_input_case(t);
}

int main(int argc, char** argv) {
  return tcoll_test::mpi_doctest_main(argc, argv, /*thread_multiple=*/true);
}
