// Symbolic proof (rank_set / disjoint_union: every output element holds every rank exactly
// once), the non-commutative op (rank-order fold through every order-keeping algorithm and
// reduce to every root), and value checks of reduce_scatter/allgather/broadcast/reduce.
#include <doctest/doctest.h>

#include "common/collective_cases.hpp"
#include "common/threads_team.hpp"

using namespace tcoll::testing;

namespace {
std::vector<int> ranks_1_to_16() {
  if (level() == test_level::quick) return {1, 2, 3, 5, 6, 8, 11, 16};
  std::vector<int> p;
  for (int i = 1; i <= 16; ++i) p.push_back(i);
  return p;
}
} // namespace

TEST_CASE("symbolic: every algorithm and collective delivers every rank exactly once") {
  for (int P : ranks_1_to_16()) {
    CAPTURE(P);
    std::vector<std::size_t> counts = {1, std::size_t(P + 1), std::size_t(2 * P + 3), 100};
    if (P > 2) counts.push_back(std::size_t(P / 2)); // fewer elements than ranks
    if (P > 1) counts.push_back(std::size_t(P - 1));
    if (level() == test_level::long_sweep) counts.push_back(1000);
    on_team(P, [&](tcoll::thread_transport& t) {
      for (std::size_t n : counts) symbolic_all(t, n);
    });
  }
}

TEST_CASE("symbolic: the check can fail (a duplicated contribution is detected)") {
  // Guards the guard: if an algorithm reduced one contribution twice, the poison bit would
  // make the comparison with rank_set::all(P) fail.
  using tcoll::symbolic::disjoint_union;
  using tcoll::symbolic::rank_set;
  const disjoint_union u{};
  const rank_set twice = u(u(rank_set::of(0), rank_set::of(1)), rank_set::of(1));
  CHECK(twice.has_duplicate());
  CHECK_FALSE(twice == rank_set::all(2));
  CHECK_FALSE(u(twice, rank_set::of(2)) == rank_set::all(3)); // the poison survives
  CHECK_FALSE(rank_set::of(0) == rank_set::all(2));           // a missing rank is seen
  CHECK(u(rank_set::of(1), rank_set::of(0)) == rank_set::all(2));
}

TEST_CASE("non-commutative op: rank-order fold (allreduce and reduce at every root)") {
  std::vector<int> ps = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16};
  if (level() == test_level::quick) ps = {2, 3, 5, 8};
  for (int P : ps) {
    CAPTURE(P);
    std::vector<std::size_t> counts = {1, std::size_t(P + 1), 257};
    if (P > 2) counts.push_back(std::size_t(P - 1));
    on_team(P, [&](tcoll::thread_transport& t) { noncommutative_cases(t, counts); });
  }
}

TEST_CASE("non-commutative op: the test op really is associative and not commutative") {
  const auto& op = noncommutative_op;
  static_assert(!tcoll::commutative_op<std::remove_cvref_t<decltype(op)>>);
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const auto a = static_cast<std::uint32_t>(mix(i)), b = static_cast<std::uint32_t>(mix(i + 7)),
               c = static_cast<std::uint32_t>(mix(i + 13));
    CHECK(op(op(a, b), c) == op(a, op(b, c)));
    const auto a8 = static_cast<std::int8_t>(mix(i)), b8 = static_cast<std::int8_t>(mix(i + 3)),
               c8 = static_cast<std::int8_t>(mix(i + 5));
    CHECK(op(op(a8, b8), c8) == op(a8, op(b8, c8)));
  }
  // not commutative: x -> 3x + 1 then x -> 5x + 4 is 15x + 9; the other order 15x + 13
  const std::uint32_t f = (3u << 16) | 1u, g = (5u << 16) | 4u;
  CHECK(op(f, g) == ((15u << 16) | 9u));
  CHECK(op(g, f) == ((15u << 16) | 13u));
  CHECK(affine_fold_reference(std::vector<std::uint32_t>{f, g}) == op(f, g));
}

TEST_CASE("reduce_scatter, allgather, broadcast, reduce: values at every P and root") {
  std::vector<int> ps = ranks_1_to_16();
  for (int P : ps) {
    CAPTURE(P);
    std::vector<std::size_t> counts = {0, 1, std::size_t(P + 1), 333};
    on_team(P, [&](tcoll::thread_transport& t) {
      collectives_values(t, counts);
      collectives_values(t, {std::size_t(P + 2), 41}, 8); // ring with 2-element segments
    });
  }
}

// 2046 doubles: blocks of 16368-16392 bytes around pairwise_exchange's all_posted_max_bytes
// (16384), so at P = 3 some ranks post everything at once and others go step by step
TEST_CASE(
    "alltoall, alltoallv: fractional values, uneven blocks, in place, bad input, 1-16 ranks") {
  for (int P : ranks_1_to_16()) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) { alltoall_values(t, {0, 1, 3, 257, 2046}); });
  }
}

namespace {
/// The CPU reducer, counting the bytes its `copy` moves on this rank.
struct copy_counting_reducer : tcoll::cpu_reducer {
  std::size_t* copied = nullptr;
  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    *copied += n * sizeof(T);
    tcoll::cpu_reducer::copy(dst, src, n);
  }
};
} // namespace

// In place, a block must be copied aside only where its place receives before it has left:
// the block for r + k leaves at step k and its place receives at step P - k. Copying the
// whole buffer (what the exchange did before) moved P + 1 blocks per rank.
TEST_CASE("pairwise_exchange in place copies aside only the blocks it would overwrite") {
  for (int P : {1, 2, 3, 4, 5, 8}) {
    for (std::size_t n : {std::size_t(5), std::size_t(3000)}) {
      CAPTURE(P);
      CAPTURE(n);
      const tcoll::pairwise_exchange algo{}; // blocks to 16 KiB all posted at once (P > 2)
      const bool all_posted = P > 2 && n * sizeof(double) <= algo.all_posted_max_bytes;
      const std::size_t aside = all_posted ? std::size_t(P - 1) : std::size_t(P - (P + 1) / 2);
      on_team(P, [&](tcoll::thread_transport& t) {
        const int r = t.rank();
        std::vector<double> buf(n * std::size_t(P)), want(buf.size());
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < n; ++k) {
            buf[std::size_t(q) * n + k] = exchanged_value(r, q, k);
            want[std::size_t(q) * n + k] = exchanged_value(q, r, k);
          }
        std::size_t copied = 0;
        copy_counting_reducer red;
        red.copied = &copied;
        tcoll::alltoall(t, static_cast<const double*>(buf.data()), buf.data(), n, algo, red);
        CHECK(buf == want);
        CHECK(copied == aside * n * sizeof(double));

        // alltoallv in MPI_IN_PLACE's form (one layout): blocks of n + (r + q) % 3 elements
        // with a gap of 1 before each; the same blocks go aside, at their own sizes
        const auto p = std::size_t(P);
        std::vector<std::size_t> counts(p), displs(p);
        std::size_t at = 0, aside_bytes = 0;
        for (int q = 0; q < P; ++q) {
          counts[std::size_t(q)] = n + std::size_t((r + q) % 3);
          displs[std::size_t(q)] = at + 1;
          at += counts[std::size_t(q)] + 1;
        }
        // on more than 2 ranks this rank's largest block has n + 2 elements
        const int first_aside =
            P > 2 && (n + 2) * sizeof(double) <= algo.all_posted_max_bytes ? 1 : (P + 1) / 2;
        for (int k = first_aside; k < P; ++k)
          aside_bytes += counts[std::size_t((r + k) % P)] * sizeof(double);
        std::vector<double> v(at, -2.0), want_v(at, -2.0);
        for (int q = 0; q < P; ++q)
          for (std::size_t e = 0; e < counts[std::size_t(q)]; ++e) {
            v[displs[std::size_t(q)] + e] = exchanged_value(r, q, e);
            want_v[displs[std::size_t(q)] + e] = exchanged_value(q, r, e);
          }
        copied = 0;
        tcoll::alltoallv(t, static_cast<const double*>(v.data()), counts, displs, v.data(), counts,
                         displs, algo, red);
        CHECK(v == want_v);
        CHECK(copied == aside_bytes);
      });
    }
  }
}

TEST_CASE("pairwise_exchange in place refuses a block sent from elsewhere than it lands, "
          "before any message") {
  on_team(3, [&](tcoll::thread_transport& t) {
    std::vector<double> buf(6, 1.5), other(2, 2.5);
    std::vector<tcoll::exchange_block> blocks;
    for (int q = 0; q < 3; ++q) blocks.push_back({buf.data() + 2 * q, 16, buf.data() + 2 * q, 16});
    blocks[1].send = other.data(); // rank 1's block: sent from elsewhere
    tcoll::cpu_reducer red;
    CHECK_THROWS_AS(tcoll::pairwise_exchange{}.exchange_in_place(
                        t, 0, std::span<const tcoll::exchange_block>(blocks), red),
                    tcoll::invalid_argument);
    // nothing was sent: the transport still runs a collective
    std::vector<double> v(3, double(t.rank()) + 0.25), w(3);
    tcoll::alltoall(t, static_cast<const double*>(v.data()), w.data(), 1);
    CHECK(w == std::vector<double>{0.25, 1.25, 2.25});
  });
}

TEST_CASE("gather, gatherv, scatter, scatterv: every root, fractional values, uneven blocks") {
  for (int P : ranks_1_to_16()) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) { gather_scatter_values(t, {0, 1, 3, 257}); });
  }
}

TEST_CASE("reduce_scatterv, allgatherv: uneven and empty blocks, gaps, in place, 1-16 ranks") {
  for (int P : ranks_1_to_16()) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) { uneven_block_values(t, {0, 1, 3, 257}); });
  }
}

TEST_CASE("barrier: no rank leaves before the last arrives, 1-16 ranks") {
  for (int P : ranks_1_to_16()) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) { barrier_waits_for_every_rank(t); });
  }
}
