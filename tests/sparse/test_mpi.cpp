// The sparse-chunk adaptor on MPI (suite 'sparse', under mpirun): the rank-level bodies of
// the threads suite on mpi_transport (the engine needs MPI_THREAD_MULTIPLE; exit 77 skips).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <tcoll/transport/mpi.hpp>

#include "../common/mpi_barrier_after.hpp"
#include "../common/mpi_doctest_main.hpp"
#include "cases.hpp"

using namespace sparse_test;
using namespace std::chrono_literals;

namespace {
tcoll::mpi_transport make(std::chrono::milliseconds timeout = 30s) {
  return tcoll::mpi_transport(MPI_COMM_WORLD, timeout);
}
bool power_of_two(int P) {
  return (P & (P - 1)) == 0;
}
} // namespace

TEST_CASE("mpi: selection identical on every rank, ties, norm division") {
  auto t = make();
  for (std::uint32_t seed : {11u, 12u, 13u}) identical_selection_case(t, seed);
  for (std::size_t keep : {std::size_t{0}, std::size_t{4}, std::size_t{9}}) ties_case(t, keep);
  if (power_of_two(t.size())) norm_division_case(t);
}

TEST_CASE("mpi: Algorithm 1, conservation, warm-up") {
  auto t = make();
  if (t.size() == 2) hand_computation_case(t);
  conservation_case(t, sp::residual_rule::error_feedback);
  conservation_case(t, sp::residual_rule::momentum_scaled);
  warmup_case(t);
}

TEST_CASE("mpi: important chunks equal a dense allreduce (ring, automatic, passthrough)") {
  auto t = make();
  for (std::size_t theta : {std::size_t{0}, std::size_t{2000}, std::size_t{1} << 30}) {
    matches_dense_case(t, tcoll::sum_op{}, tcoll::ring{}, theta);
    matches_dense_case(t, tcoll::avg_op{}, tcoll::automatic{}, theta);
    matches_dense_case(t, tcoll::sum_op{}, tcoll::passthrough{}, theta);
    matches_dense_case(t, tcoll::sum_op{}, tcoll::ring{}, theta, 1024);
  }
}

TEST_CASE("mpi: bytes against counting<>, overlap, threads, bitwise identity") {
  auto t = make();
  bytes_case<tcoll::mpi_transport, float>(t);
  bytes_case<tcoll::mpi_transport, tcoll::half>(t);
  overlap_case(t);
  threaded_marks_case(t, 3);
  bitwise_case(t, tcoll::ring{});
  bitwise_case(t, tcoll::automatic{});
  bitwise_case(t, tcoll::passthrough{});
}

TEST_CASE("mpi: bad input, pools that differ, a tensor never marked") {
  {
    auto t = make();
    bad_options_case(t);
    if (t.size() >= 2) pool_mismatch_case(t, 1);
  }
  {
    auto t = make(2s);
    tcoll_test::barrier_after(MPI_COMM_WORLD, [&] { unmarked_case(t); });
  }
}

TEST_CASE("mpi: a broken transport: mark_ready returns, finish() throws the cause") {
  auto t = make();
  broken_transport_case(t);
}

TEST_CASE("mpi: top-k baseline") {
  auto t = make();
  for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{500}})
    topk_case(t, 500, k);
}

TEST_CASE("mpi: DGC momentum correction and masking around top-k") {
  auto t = make();
  for (std::size_t k : {std::size_t{7}, std::size_t{60}}) dgc_case(t, 300, k);
}

int main(int argc, char** argv) {
  return tcoll_test::mpi_doctest_main(argc, argv, /*thread_multiple=*/true);
}
