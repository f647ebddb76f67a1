// The shared rank-level bodies of tests/common/collective_cases.hpp on mpi_transport (the
// same bodies the threads and GPU suites run): value matrix, reduced precision, the
// non-commutative fold, the other collectives, the symbolic proof, traffic closed forms,
// bad input and an absent peer. Counts stay modest: 8 oversubscribed ranks on 2 cores.
#include <doctest/doctest.h>

#include <chrono>

#include "../common/collective_cases.hpp"
#include "mpi_util.hpp"

using namespace tcoll::testing;
using namespace std::chrono_literals;

namespace {
std::vector<std::size_t> counts_for(int P) {
  return {0, 1, std::size_t(P > 1 ? P - 1 : 2), std::size_t(P), std::size_t(P + 1), 1000};
}
} // namespace

TEST_CASE("shared: allreduce float sum, every algorithm and count") {
  auto t = mpi_test::make();
  matrix_options opt;
  opt.types = {"float"};
  opt.ops = {"sum"};
  opt.counts = counts_for(t.size());
  allreduce_matrix(t, opt);
  if (level() != test_level::quick) {
    opt.counts = {(std::size_t{1} << 18) + 3}; // several ring segments per chunk at P <= 4
    opt.ring_segment_bytes = 64 << 10;
    allreduce_matrix(t, opt);
  }
}

TEST_CASE("shared: allreduce every type x op at a few counts") {
  auto t = mpi_test::make();
  matrix_options opt;
  opt.counts = {std::size_t(t.size() + 1), 257};
  allreduce_matrix(t, opt);
}

TEST_CASE("shared: half/bfloat16 rounding on fractional inputs") {
  auto t = mpi_test::make();
  reduced_precision_rounding(t, {1, std::size_t(t.size() + 1), 1000});
}

TEST_CASE("shared: non-commutative op keeps rank order") {
  auto t = mpi_test::make();
  noncommutative_cases(t, {1, std::size_t(t.size() + 1), 257});
}

TEST_CASE("shared: reduce_scatter, allgather, broadcast, reduce values") {
  auto t = mpi_test::make();
  const int P = t.size();
  collectives_values(t, {1, std::size_t(P + 1), 1000});
  collectives_values(t, {std::size_t(P + 2), 41}, 8); // ring with 2-element segments
}

TEST_CASE("shared: alltoall, alltoallv values") {
  auto t = mpi_test::make();
  alltoall_values(t, {0, 1, std::size_t(t.size() + 1), 1000});
}

TEST_CASE("shared: reduce_scatterv, allgatherv values") {
  auto t = mpi_test::make();
  uneven_block_values(t, {0, 1, std::size_t(t.size() + 1), 1000});
}

TEST_CASE("shared: barrier waits for every rank") {
  auto t = mpi_test::make();
  barrier_waits_for_every_rank(t);
}

TEST_CASE("shared: gather, gatherv, scatter, scatterv values") {
  auto t = mpi_test::make();
  gather_scatter_values(t, {0, 1, std::size_t(t.size() + 1), 1000});
}

TEST_CASE("shared: symbolic proof, every algorithm and collective") {
  auto t = mpi_test::make();
  const int P = t.size();
  for (std::size_t n : {std::size_t{1}, std::size_t(P + 1), std::size_t(2 * P + 3)})
    symbolic_all(t, n);
}

TEST_CASE("shared: message and byte counts match the closed forms") {
  auto t = mpi_test::make();
  traffic_cases(t, {1, std::size_t(t.size() + 1), 1000});
}

TEST_CASE("shared: bad input is invalid_argument naming argument and rank") {
  auto t = mpi_test::make(10s);
  bad_input_cases(t);
  // still usable afterwards
  matrix_options opt;
  opt.counts = {5};
  opt.types = {"float"};
  opt.ops = {"sum"};
  allreduce_matrix(t, opt);
}

TEST_CASE("shared: an absent peer makes every other rank time out, input untouched") {
  const int P = mpi_test::world_size();
  if (P < 2) return;
  auto run = [&](auto algo) {
    for (int absent : {0, P - 1}) {
      {
        tcoll::mpi_transport t(MPI_COMM_WORLD, 300ms);
        absent_peer_case(t, absent, algo);
        // every rank meets on the user's communicator before the transport goes away
        MPI_Barrier(MPI_COMM_WORLD);
      }
    }
  };
  run(tcoll::ring{});
  run(tcoll::recursive_doubling{});
  run(tcoll::recursive_halving_doubling{});
  run(tcoll::binomial_tree{});
}
