#pragma once
// Rank-level bodies of the sparse-chunk suite, written over any transport and instantiated
// on the threads transport (test_threads.cpp). Expectations never come from the code under
// test: hand computations, dense blocking allreduces of copies of the inputs, a reference
// simulation of Algorithm 1 written here with plain loops, the ring closed form of
// tests/common for bytes, and allgathered hashes for identity across ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tcoll/sparse.hpp>
#include <tcoll/tcoll.hpp>
#include <tcoll/transport/counting.hpp>

#include "../common/collective_cases.hpp"
#include "../common/identical_on_ranks.hpp"

namespace sparse_test {

namespace sp = tcoll::sparse;

/// Fractional input of rank r, iteration s, element i (sums round differently in
/// different orders, so they expose drift between ranks).
inline float fractional(int r, int s, std::size_t i) {
  const std::uint32_t h =
      static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(r * 40503 + s * 977);
  return 0.1f + static_cast<float>(h % 100003) / 7919.0f * (r % 2 ? -1.0f : 1.0f) + 0.01f * r;
}
/// Integer-valued input in [-7, 7] (exact in any order for small sums).
inline float integral(int r, int s, std::size_t i) {
  const std::uint32_t h = static_cast<std::uint32_t>((i + 17) * 2654435761u) ^
                          static_cast<std::uint32_t>(r * 7919 + s * 104729);
  return static_cast<float>(static_cast<int>((h >> 7) % 15) - 7);
}

using tcoll_test::identical_on_all_ranks;

/// Writes `f(rank, iteration, element)` into the whole pool.
template <class Pool, class F>
void fill_pool(Pool& pool, int r, int s, F f) {
  for (std::size_t i = 0; i < pool.size(); ++i) pool.data()[i] = f(r, s, i);
}

/// Random tensor sizes (same on every rank for the same seed), some empty; the total is
/// not a multiple of `chunk` unless by chance.
inline std::vector<std::size_t> random_sizes(std::uint32_t seed, std::size_t tensors,
                                             std::size_t max_size) {
  std::mt19937 g(seed);
  std::vector<std::size_t> s(tensors);
  for (auto& x : s) x = g() % 7 == 0 ? 0 : 1 + g() % max_size;
  return s;
}

// ---------------------------------------------------------------------------------------
// Selection.

/// Random pools, densities and chunk sizes: every rank ends each iteration with the same
/// important set, of the size the density asks for, and the same norm vector.
template <class Tr>
void identical_selection_case(Tr& t, std::uint32_t seed) {
  std::mt19937 g(seed); // same on every rank
  const auto sizes = random_sizes(seed, 3 + g() % 6, 900);
  tcoll::gradient_pool<float> pool(sizes);
  sp::csc_options o;
  o.chunk_elements = 17 + g() % 200;
  o.density = static_cast<double>(g() % 101) / 100.0;
  o.warmup_iterations = g() % 3;
  o.threshold_bytes = g() % 2000;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  const std::size_t C = a.chunks().count();
  REQUIRE(C == (pool.size() + o.chunk_elements - 1) / o.chunk_elements);
  for (int it = 0; it < 4; ++it) {
    fill_pool(pool, t.rank(), it, fractional);
    a.mark_all_ready();
    a.finish();
    const auto imp = a.important();
    REQUIRE(imp.size() == C);
    const double d = sp::warmup_density(o.density, o.warmup_iterations, std::size_t(it) + 1);
    CHECK(static_cast<std::size_t>(std::count(imp.begin(), imp.end(), 1)) == sp::chunks_kept(d, C));
    CHECK(identical_on_all_ranks(t, imp.data(), imp.size()));
    CHECK(identical_on_all_ranks(t, a.last_norms().data(), a.last_norms().size_bytes()));
  }
}

/// Ties: all ranks hold the same constant value, so every full chunk has the same norm and
/// the final short chunk a smaller one; the k lowest-index chunks must win.
template <class Tr>
void ties_case(Tr& t, std::size_t keep) {
  const std::size_t chunk = 64, chunks = 9, elements = chunk * (chunks - 1) + 10;
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{100, elements - 100});
  sp::csc_options o;
  o.chunk_elements = chunk;
  o.density = static_cast<double>(keep) / chunks;
  o.warmup_iterations = 0;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  REQUIRE(a.chunks().count() == chunks);
  // iteration 0 is dense, so its norms tie exactly (later ones favour the unsent chunks)
  std::fill(pool.data(), pool.data() + pool.size(), 0.5f);
  a.mark_all_ready();
  a.finish();
  for (std::size_t c = 0; c < chunks; ++c) {
    CAPTURE(c);
    CHECK(a.important()[c] == (c < keep ? 1 : 0));
  }
}

/// Norms: chunk L1 norms over the pool after communication, important ones divided by P
/// before the sum, so a reduced chunk counts once. P a power of two and integer inputs make
/// every step exact.
template <class Tr>
void norm_division_case(Tr& t) {
  const int P = t.size(), r = t.rank();
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{500, 777, 300});
  sp::csc_options o;
  o.chunk_elements = 100;
  o.density = 0.5;
  o.warmup_iterations = 0;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  const auto L = a.chunks();
  auto local_l1 = [&](int rank, int s, std::size_t c) {
    double x = 0;
    for (std::size_t i = L.begin(c); i < L.begin(c) + L.size(c); ++i)
      x += std::fabs(integral(rank, s, i));
    return x;
  };
  auto reduced_l1 = [&](int s, std::size_t c) {
    double x = 0;
    for (std::size_t i = L.begin(c); i < L.begin(c) + L.size(c); ++i) {
      double v = 0;
      for (int q = 0; q < P; ++q) v += integral(q, s, i);
      x += std::fabs(v);
    }
    return x;
  };
  // iteration 0 is dense: every norm is the L1 norm of the reduced chunk
  fill_pool(pool, r, 0, integral);
  a.mark_all_ready();
  a.finish();
  for (std::size_t c = 0; c < L.count(); ++c) {
    CAPTURE(c);
    CHECK(a.last_norms()[c] == static_cast<float>(reduced_l1(0, c)));
  }
  // iteration 1: important chunks as above, the others the sum of the local norms (the
  // residual of iteration 0 is zero: it was dense)
  const std::vector<unsigned char> imp(a.important().begin(), a.important().end());
  fill_pool(pool, r, 1, integral);
  a.mark_all_ready();
  a.finish();
  for (std::size_t c = 0; c < L.count(); ++c) {
    CAPTURE(c);
    double want = 0;
    if (imp[c])
      want = reduced_l1(1, c);
    else
      for (int q = 0; q < P; ++q) want += local_l1(q, 1, c);
    CHECK(a.last_norms()[c] == static_cast<float>(want));
  }
}

// ---------------------------------------------------------------------------------------
// Algorithm 1.

/// Three iterations on 2 ranks computed by hand (see the comments), with the momentum step.
template <class Tr>
void hand_computation_case(Tr& t) {
  REQUIRE(t.size() == 2);
  const int r = t.rank();
  // tensors of 3 and 5 elements, chunks of 4: chunk 0 = [0, 4), chunk 1 = [4, 8)
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{3, 5});
  sp::csc_options o;
  o.chunk_elements = 4;
  o.density = 0.5;
  o.warmup_iterations = 0;
  o.momentum = 0.5;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  std::vector<float> w(8, 10.0f), hu(8, 0.0f);
  const sp::csc_sgd_options sgd{0.25, 0.5, true};
  auto set = [&](std::vector<float> v) { std::copy(v.begin(), v.end(), pool.data()); };
  auto pool_is = [&](std::vector<float> v) { return std::equal(v.begin(), v.end(), pool.data()); };
  auto residual_is = [&](std::vector<float> v) {
    return std::equal(v.begin(), v.end(), a.residual().data());
  };

  // iteration 0, dense: sums [2,2,4,4 | 3,3,3,3]; norms 12 and 12 tie -> chunk 0 next
  set(r == 0 ? std::vector<float>{1, 2, 3, 4, 1, 1, 1, 1}
             : std::vector<float>{1, 0, 1, 0, 2, 2, 2, 2});
  a.mark_ready(1); // the second tensor first: chunk 1 fills before chunk 0
  a.mark_ready(0);
  auto it = a.finish();
  CHECK(it.important_chunks == 2);
  CHECK(pool_is({2, 2, 4, 4, 3, 3, 3, 3}));
  CHECK(residual_is({0, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(a.last_norms()[0] == 12.0f);
  CHECK(a.last_norms()[1] == 12.0f);
  CHECK(a.important()[0] == 1);
  CHECK(a.important()[1] == 0);
  // step: u = 0.25 g, w = 10 - u
  sp::csc_momentum_step(a, std::span<float>(w), std::span<float>(hu), sgd);
  CHECK(hu == std::vector<float>{0.5f, 0.5f, 1, 1, 0.75f, 0.75f, 0.75f, 0.75f});
  CHECK(w == std::vector<float>{9.5f, 9.5f, 9, 9, 9.25f, 9.25f, 9.25f, 9.25f});

  // iteration 1, chunk 0 only: chunk 0 sums to [4,4,4,4]; chunk 1 stays local and its
  // residual is 0.5 g. Norms: chunk 0: 16/2 on each rank -> 16; chunk 1: 10 + 8 = 18 ->
  // chunk 1 next.
  set(r == 0 ? std::vector<float>{1, 1, 1, 1, 4, -4, 2, 0}
             : std::vector<float>{3, 3, 3, 3, 0, 0, 0, 8});
  a.mark_all_ready();
  it = a.finish();
  CHECK(it.density == 0.5);
  CHECK(it.important_chunks == 1);
  CHECK(it.important_elements == 4);
  CHECK(pool_is(r == 0 ? std::vector<float>{4, 4, 4, 4, 4, -4, 2, 0}
                       : std::vector<float>{4, 4, 4, 4, 0, 0, 0, 8}));
  CHECK(residual_is(r == 0 ? std::vector<float>{0, 0, 0, 0, 2, -2, 1, 0}
                           : std::vector<float>{0, 0, 0, 0, 0, 0, 0, 4}));
  CHECK(a.last_norms()[0] == 16.0f);
  CHECK(a.last_norms()[1] == 18.0f);
  CHECK(a.important()[0] == 0);
  CHECK(a.important()[1] == 1);
  // step on chunk 0 only: hu = 0.5 hu + 0.25 * 4; w -= hu; chunk 1 frozen
  sp::csc_momentum_step(a, std::span<float>(w), std::span<float>(hu), sgd);
  CHECK(hu == std::vector<float>{1.25f, 1.25f, 1.5f, 1.5f, 0.75f, 0.75f, 0.75f, 0.75f});
  CHECK(w == std::vector<float>{8.25f, 8.25f, 7.5f, 7.5f, 9.25f, 9.25f, 9.25f, 9.25f});

  // iteration 2, chunk 1 only: chunk 1 sends g + residual: rank 0 [3,-1,2,1], rank 1
  // [1,1,1,5] -> [4,0,3,6]; chunk 0 keeps g, residual 0.5 g.
  set(r == 0 ? std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1}
             : std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1});
  a.mark_all_ready();
  a.finish();
  CHECK(pool_is(r == 0 ? std::vector<float>{1, 1, 1, 1, 4, 0, 3, 6}
                       : std::vector<float>{0, 0, 0, 0, 4, 0, 3, 6}));
  CHECK(residual_is(r == 0 ? std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0, 0, 0, 0}
                           : std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0}));
  // step on chunk 1: hu = 0.5 * 0.75 + 0.25 * [4,0,3,6] = [1.375, 0.375, 1.125, 1.875]
  sp::csc_momentum_step(a, std::span<float>(w), std::span<float>(hu), sgd);
  CHECK(hu == std::vector<float>{1.25f, 1.25f, 1.5f, 1.5f, 1.375f, 0.375f, 1.125f, 1.875f});
  CHECK(w == std::vector<float>{8.25f, 8.25f, 7.5f, 7.5f, 7.875f, 8.875f, 8.125f, 7.375f});
  // the printed sign (descent = false) adds instead
  std::vector<float> w2(8, 0.0f), hu2(8, 0.0f);
  sp::csc_momentum_step(a, std::span<float>(w2), std::span<float>(hu2), {1.0, 0.5, false});
  CHECK(w2 == std::vector<float>{0, 0, 0, 0, 4, 0, 3, 6});
}

/// Error feedback conserves gradient mass exactly (integer inputs): summed over ranks,
/// everything sent plus the residual left is everything computed. The momentum-scaled
/// rule against a reference simulation of Algorithm 1 lines 7-11 written here.
template <class Tr>
void conservation_case(Tr& t, sp::residual_rule rule) {
  const int P = t.size(), r = t.rank();
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{250, 3, 1000, 47});
  sp::csc_options o;
  o.chunk_elements = 50;
  o.density = 0.3;
  o.warmup_iterations = 3;
  o.threshold_bytes = 300;
  o.residual = rule;
  o.momentum = 0.5;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  const std::size_t n = pool.size();
  const auto L = a.chunks();
  std::vector<double> sent(n, 0.0), computed(n, 0.0);
  std::vector<float> ref_residual(n, 0.0f);
  for (int it = 0; it < 8; ++it) {
    const std::vector<unsigned char> imp(a.important().begin(), a.important().end());
    fill_pool(pool, r, it, integral);
    std::vector<float> acc(n);
    for (std::size_t i = 0; i < n; ++i) {
      double all = 0;
      for (int q = 0; q < P; ++q) all += integral(q, it, i);
      computed[i] += all;
      acc[i] = pool.data()[i] + ref_residual[i];
    }
    for (std::size_t i = pool.tensor_count(); i-- > 0;) a.mark_ready(i);
    a.finish();
    for (std::size_t i = 0; i < n; ++i) {
      const bool important = imp[L.chunk_of(i)] != 0;
      if (important) {
        sent[i] += pool.data()[i]; // the reduced chunk: sum over ranks
        ref_residual[i] = 0.0f;
      } else {
        CHECK(pool.data()[i] == acc[i]); // unimportant chunks keep the local value
        ref_residual[i] = rule == sp::residual_rule::error_feedback ? acc[i] : 0.5f * acc[i];
      }
    }
    REQUIRE(std::equal(ref_residual.begin(), ref_residual.end(), a.residual().data()));
  }
  if (rule == sp::residual_rule::error_feedback) {
    std::vector<float> left(a.residual().begin(), a.residual().end());
    tcoll::allreduce(t, std::span<float>(left), tcoll::sum_op{}, tcoll::ring{});
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += sent[i] + left[i] != computed[i];
    CHECK(bad == 0);
  }
}

/// Warm-up: the density ramps linearly from 1 (iteration 0) to the target at iteration W.
template <class Tr>
void warmup_case(Tr& t) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{95});
  sp::csc_options o;
  o.chunk_elements = 10; // 10 chunks, the last one 5 elements
  o.density = 0.2;
  o.warmup_iterations = 4;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  const std::size_t want[] = {10, 8, 6, 4, 2, 2, 2};
  const double dens[] = {1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2};
  for (int it = 0; it < 7; ++it) {
    CAPTURE(it);
    fill_pool(pool, t.rank(), it, fractional);
    a.mark_all_ready();
    const auto& s = a.finish();
    CHECK(s.important_chunks == want[it]);
    CHECK(s.density == doctest::Approx(dens[it]).epsilon(1e-12));
  }
  CHECK(a.last().density == 0.2); // exactly the target once the ramp is over
}

// ---------------------------------------------------------------------------------------
// Communication.

/// Iteration 1 (zero residual after the dense iteration 0): the reduced important chunks
/// equal a dense blocking allreduce of a copy of the pool restricted to them (integer
/// inputs), the other chunks keep the local values; with op `Op` and algorithm `Algo`.
template <class Tr, class Op, class Algo, class Wire = float>
void matches_dense_case(Tr& t, const Op& op, const Algo& algo, std::size_t threshold,
                        std::size_t in_place_min_bytes = 0) {
  const int r = t.rank();
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{333, 1, 2000, 64, 900});
  sp::csc_options o;
  o.chunk_elements = 128;
  o.density = 0.25;
  o.warmup_iterations = 0;
  o.threshold_bytes = threshold;
  o.in_place_min_bytes = in_place_min_bytes;
  sp::csc_allreduce<Tr, float, Op, Algo, tcoll::cpu_reducer, Wire> a(pool, t, o, op, algo);
  // (later iterations add residuals: covered by conservation_case)
  for (int it = 0; it < 2; ++it) {
    CAPTURE(it);
    const std::vector<unsigned char> imp(a.important().begin(), a.important().end());
    fill_pool(pool, r, it, integral);
    const std::vector<float> input(pool.all().begin(), pool.all().end());
    std::vector<float> dense = input;
    tcoll::allreduce(t, std::span<float>(dense), op, algo);
    a.mark_all_ready();
    a.finish();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < pool.size(); ++i) {
      const float want = imp[a.chunks().chunk_of(i)] ? dense[i] : input[i];
      bad += std::memcmp(&want, pool.data() + i, sizeof(float)) != 0;
    }
    CHECK(bad == 0);
  }
}

/// The buffers a closed form says the iteration runs: important chunks in index order, a
/// buffer closes once it holds more than `threshold` bytes.
inline std::vector<std::size_t> expected_buffers(const sp::chunk_layout& L,
                                                 const std::vector<unsigned char>& imp,
                                                 std::size_t elem, std::size_t threshold) {
  std::vector<std::size_t> b;
  std::size_t cur = 0;
  for (std::size_t c = 0; c < L.count(); ++c) {
    if (!imp[c]) continue;
    cur += L.size(c);
    if (cur * elem > threshold) {
      b.push_back(cur);
      cur = 0;
    }
  }
  if (cur) b.push_back(cur);
  return b;
}

/// Bytes: counting<> records what the ring closed form says, per iteration: the ring
/// allreduces of the buffers (wire type) plus the float norm vector; the adaptor reports
/// the same.
template <class Tr, class Wire>
void bytes_case(Tr& t) {
  using namespace tcoll;
  namespace m = tcoll::testing::traffic_model;
  const int P = t.size(), r = t.rank();
  counting<Tr> c(t);
  gradient_pool<float> pool(std::vector<std::size_t>{1000, 37, 4000, 5});
  sp::csc_options o;
  o.chunk_elements = 100; // 51 chunks, the last one 42 elements
  o.density = 0.2;
  o.warmup_iterations = 2;
  o.threshold_bytes = 1000;
  const ring algo{};
  sp::csc_allreduce<counting<Tr>, float, sum_op, ring, cpu_reducer, Wire> a(pool, c, o, {}, algo);
  const auto L = a.chunks();
  for (int it = 0; it < 5; ++it) {
    CAPTURE(it);
    const std::vector<unsigned char> imp(a.important().begin(), a.important().end());
    fill_pool(pool, r, it, integral);
    c.reset();
    a.mark_all_ready();
    const auto& s = a.finish();
    std::size_t want = 0;
    const auto buffers = expected_buffers(L, imp, sizeof(Wire), o.threshold_bytes);
    for (std::size_t n : buffers)
      want += m::ring_allreduce(P, r, n, sizeof(Wire), algo.max_segment_bytes).bytes_sent;
    const double next = sp::warmup_density(o.density, o.warmup_iterations, std::size_t(it) + 1);
    const std::size_t k = sp::chunks_kept(next, L.count());
    const std::size_t norm_bytes =
        k == 0 || k == L.count()
            ? 0
            : m::ring_allreduce(P, r, L.count(), sizeof(float), algo.max_segment_bytes).bytes_sent;
    CHECK(s.buffers == buffers.size());
    CHECK(s.bytes_exact);
    CHECK(s.norm_bytes_sent == norm_bytes);
    CHECK(s.bytes_sent() == want + norm_bytes);
    CHECK(c.counts().bytes_sent == want + norm_bytes);
    CHECK(s.dense_bytes_sent ==
          m::ring_allreduce(P, r, pool.size(), sizeof(Wire), algo.max_segment_bytes).bytes_sent);
  }
}

/// Buffers start during backward: once the tensors holding the first buffer's chunks are
/// ready, its allreduce has been queued (before finish).
template <class Tr>
void overlap_case(Tr& t) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{1000, 1000, 1000, 1000});
  sp::csc_options o;
  o.chunk_elements = 250;
  o.density = 1.0;
  o.threshold_bytes = 999 * sizeof(float); // 4 chunks -> 1000 elements per buffer
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  fill_pool(pool, t.rank(), 0, fractional);
  CHECK(a.buffer_count() == 4);
  CHECK(a.buffers_started() == 0);
  a.mark_ready(1);
  CHECK(a.buffers_started() == 0); // buffer 1 waits for buffer 0 (start order)
  a.mark_ready(0);
  CHECK(a.buffers_started() == 2);
  a.mark_ready(2);
  CHECK(a.buffers_started() == 3);
  a.mark_ready(3);
  CHECK(a.buffers_started() == 4);
  a.finish();
}

/// Every rank ends every iteration with bitwise identical important chunks (fractional
/// inputs, each rank marking its tensors in its own random order).
template <class Tr, class Algo, class Wire = float>
void bitwise_case(Tr& t, const Algo& algo, std::size_t in_place_min_bytes = 0) {
  const int r = t.rank();
  const auto sizes = random_sizes(99, 9, 3000);
  tcoll::gradient_pool<float> pool(sizes);
  sp::csc_options o;
  o.chunk_elements = 256;
  o.density = 0.3;
  o.warmup_iterations = 2;
  o.threshold_bytes = 2048;
  o.in_place_min_bytes = in_place_min_bytes;
  sp::csc_allreduce<Tr, float, tcoll::sum_op, Algo, tcoll::cpu_reducer, Wire> a(pool, t, o, {},
                                                                                algo);
  std::mt19937 g(1234u + static_cast<unsigned>(r));
  std::vector<std::size_t> order(pool.tensor_count());
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (int it = 0; it < 5; ++it) {
    fill_pool(pool, r, it, fractional);
    std::shuffle(order.begin(), order.end(), g);
    for (std::size_t i : order) a.mark_ready(i);
    a.finish();
    std::vector<float> important;
    const auto imp = a.last_important();
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (imp[a.chunks().chunk_of(i)]) important.push_back(pool.data()[i]);
    CHECK(identical_on_all_ranks(t, important.data(), important.size() * sizeof(float)));
    CHECK(identical_on_all_ranks(t, imp.data(), imp.size()));
  }
}

/// mark_ready from several threads of each rank, in an order that differs between ranks
/// and iterations: the pool equals a dense allreduce on the important chunks (integer
/// inputs) and no buffer starts out of order (which would mismatch or hang).
template <class Tr>
void threaded_marks_case(Tr& t, int threads) {
  const int r = t.rank();
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>(24, 97));
  sp::csc_options o;
  o.chunk_elements = 64;
  o.density = 0.5;
  o.warmup_iterations = 0;
  o.threshold_bytes = 600;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  std::mt19937 g(77u + static_cast<unsigned>(r));
  // iterations 0 (dense) and 1 (its residual is zero: iteration 0 sent everything)
  for (int it = 0; it < 2; ++it) {
    const std::vector<unsigned char> imp(a.important().begin(), a.important().end());
    fill_pool(pool, r, it, integral);
    const std::vector<float> input(pool.all().begin(), pool.all().end());
    auto dense = input;
    tcoll::allreduce(t, std::span<float>(dense), tcoll::sum_op{}, tcoll::ring{});
    std::vector<std::size_t> order(pool.tensor_count());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), g);
    std::vector<std::thread> pool_threads;
    for (int j = 0; j < threads; ++j)
      pool_threads.emplace_back([&, j] {
        for (std::size_t k = static_cast<std::size_t>(j); k < order.size();
             k += static_cast<std::size_t>(threads))
          a.mark_ready(order[k]);
      });
    for (auto& th : pool_threads) th.join();
    a.finish();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < pool.size(); ++i)
      bad += pool.data()[i] != (imp[a.chunks().chunk_of(i)] ? dense[i] : input[i]);
    CHECK(bad == 0);
  }
}

/// In-place runs: with every chunk important and one run, a single in-place buffer per
/// threshold split; runs shorter than the minimum are copied (their own buffers).
template <class Tr>
void in_place_layout_case(Tr& t) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{1000});
  sp::csc_options o;
  o.chunk_elements = 100;
  o.density = 1.0;
  o.threshold_bytes = 1 << 20;
  o.in_place_min_bytes = 1;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  CHECK(a.buffer_count() == 1);
  fill_pool(pool, t.rank(), 0, integral);
  std::vector<float> dense(pool.all().begin(), pool.all().end());
  tcoll::allreduce(t, std::span<float>(dense), tcoll::sum_op{}, tcoll::ring{});
  a.mark_all_ready();
  const auto& s = a.finish();
  CHECK(s.buffers == 1);
  CHECK(std::equal(dense.begin(), dense.end(), pool.data()));
  // a half wire cannot reduce in place: copied, same result
  tcoll::gradient_pool<float> pool2(std::vector<std::size_t>{1000});
  sp::csc_allreduce<Tr, float, tcoll::sum_op, tcoll::ring, tcoll::cpu_reducer, tcoll::half> b(pool2,
                                                                                              t, o);
  fill_pool(pool2, t.rank(), 0, integral);
  b.mark_all_ready();
  b.finish();
  CHECK(std::equal(dense.begin(), dense.end(), pool2.data()));
}

// ---------------------------------------------------------------------------------------
// Bad input.

template <class Tr>
void bad_options_case(Tr& t) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{10, 20});
  auto make = [&](sp::csc_options o) { sp::csc_allreduce<Tr, float> a(pool, t, o); };
  sp::csc_options o;
  o.chunk_elements = 0;
  CHECK_THROWS_WITH_AS(make(o), doctest::Contains("chunk_elements must be positive"),
                       tcoll::invalid_argument);
  for (double d : {-0.1, 1.5, std::nan("")}) {
    o = {};
    o.density = d;
    CHECK_THROWS_WITH_AS(make(o), doctest::Contains("density must be in [0, 1]"),
                         tcoll::invalid_argument);
  }
  o = {};
  o.wire_scale = 0.0f;
  CHECK_THROWS_AS(make(o), tcoll::invalid_argument);
  CHECK_THROWS_AS(sp::chunks_kept(2.0, 10), tcoll::invalid_argument);
  CHECK_THROWS_AS(sp::warmup_density(-1.0, 10, 0), tcoll::invalid_argument);
  // marks
  o = {};
  o.chunk_elements = 8;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  CHECK_THROWS_WITH_AS(a.mark_ready(2), doctest::Contains("out of range"), tcoll::invalid_argument);
  a.mark_ready(0);
  CHECK_THROWS_WITH_AS(a.mark_ready(0), doctest::Contains("already marked"),
                       tcoll::invalid_argument);
  a.mark_ready(1);
  a.finish();
  // the step with buffers of the wrong size
  std::vector<float> w(29), hu(30);
  CHECK_THROWS_WITH_AS(
      sp::csc_momentum_step(a, std::span<float>(w), std::span<float>(hu), sp::csc_sgd_options{}),
      doctest::Contains("weights has 29 elements"), tcoll::invalid_argument);
}

/// A pool that differs on one rank: every rank gets a clear error naming that rank.
template <class Tr>
void pool_mismatch_case(Tr& t, int odd) {
  std::vector<std::size_t> sizes{100, 200};
  if (t.rank() == odd) sizes[1] = 201;
  tcoll::gradient_pool<float> pool(sizes);
  sp::csc_options o;
  o.chunk_elements = 64;
  const std::string want = "rank " + std::to_string(odd) + " has a different pool";
  CHECK_THROWS_WITH_AS((sp::csc_allreduce<Tr, float>(pool, t, o)), doctest::Contains(want.c_str()),
                       tcoll::invalid_argument);
  // options that differ are caught the same way
  tcoll::gradient_pool<float> same(std::vector<std::size_t>{100, 200});
  o.density = t.rank() == odd ? 0.5 : 0.15;
  CHECK_THROWS_AS((sp::csc_allreduce<Tr, float>(same, t, o)), tcoll::invalid_argument);
}

/// finish() with a tensor never marked: every rank fails quickly (the transport is broken).
template <class Tr>
void unmarked_case(Tr& t) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{100, 100, 100});
  sp::csc_options o;
  o.chunk_elements = 50;
  o.threshold_bytes = 0;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  a.mark_ready(0);
  if (t.rank() != 1) a.mark_ready(1);
  a.mark_ready(2);
  CHECK_THROWS_AS(a.finish(), tcoll::error);
}

/// A transport broken before the buffers start: `mark_ready` returns normally and
/// `finish()` throws the cause (never a success with buffers left unreduced).
template <class Tr>
void broken_transport_case(Tr& t) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{100, 100, 100});
  sp::csc_options o;
  o.chunk_elements = 50;
  o.threshold_bytes = 0;
  sp::csc_allreduce<Tr, float> a(pool, t, o);
  for (auto& x : pool.all()) x = 0.25f;
  // broken on this rank only (no abort, which would reach peers still constructing)
  tcoll::collective_context* context = tcoll::detail::context_of(t);
  REQUIRE(context != nullptr);
  context->fail(
      std::make_exception_ptr(tcoll::aborted_error("broken on purpose by the test", t.rank())));
  for (std::size_t i = 0; i < 3; ++i) CHECK_NOTHROW(a.mark_ready(i));
  CHECK_THROWS_WITH_AS(a.finish(), doctest::Contains("broken on purpose by the test"),
                       tcoll::aborted_error);
  for (std::size_t i = 0; i < 3; ++i) CHECK_NOTHROW(a.mark_ready(i));
  CHECK_THROWS_AS(a.finish(), tcoll::aborted_error);
}

// ---------------------------------------------------------------------------------------
// Top-k baseline.

/// Each rank's top-k by magnitude (ties to the lower index), summed over ranks; the
/// reference sorts here. Integer inputs: exact. Bytes against counting<>.
template <class Tr>
void topk_case(Tr& t, std::size_t n, std::size_t k) {
  using namespace tcoll;
  const int P = t.size(), r = t.rank();
  counting<Tr> c(t);
  std::vector<float> in(n), out(n), res(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = integral(r, 5, i);
  const auto rep = sp::topk_allreduce(c, in.data(), out.data(), n, k, res.data());
  CHECK(rep.k == k);
  CHECK(rep.bytes_sent == c.counts().bytes_sent);
  CHECK(c.counts().bytes_sent == (P > 1 && k ? std::size_t(P - 1) * k * 8 : 0));
  std::vector<float> want(n, 0.0f);
  for (int q = 0; q < P; ++q) {
    std::vector<std::size_t> idx(n);
    std::iota(idx.begin(), idx.end(), std::size_t{0});
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return std::fabs(integral(q, 5, a)) > std::fabs(integral(q, 5, b));
    });
    for (std::size_t j = 0; j < k; ++j) want[idx[j]] += integral(q, 5, idx[j]);
    if (q == r) {
      std::vector<float> want_res = in;
      for (std::size_t j = 0; j < k; ++j) want_res[idx[j]] = 0.0f;
      CHECK(want_res == res);
    }
  }
  CHECK(want == out);
  CHECK(identical_on_all_ranks(t, out.data(), n * sizeof(float)));
  CHECK_THROWS_AS(sp::topk_allreduce(t, in.data(), out.data(), n, n + 1), invalid_argument);
}

/// DGC's momentum correction with masking (`dgc_allreduce`) against this file's own
/// simulation of every rank, three steps, momentum 0.5 and gradients that are multiples of
/// 1/8 (so every value is exact in float and a wrong operation shows): per rank u = 0.5 u +
/// g, v = v + u, the k largest |v| (stable sort: ties to the lower index) go out and are
/// cleared in u and v; the output is the sum of every rank's sent values.
template <class Tr>
void dgc_case(Tr& t, std::size_t n, std::size_t k) {
  using namespace tcoll;
  const int P = t.size(), r = t.rank();
  auto grad = [](int q, int step, std::size_t i) {
    return integral(q, 40 + step, i) / 8.0f + (i % 3 == 0 ? 0.125f : 0.0f);
  };
  std::vector<std::vector<double>> u(static_cast<std::size_t>(P), std::vector<double>(n, 0.0)),
      v = u;
  std::vector<float> vel(n, 0.0f), acc(n, 0.0f), out(n);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = grad(r, step, i);
    const auto rep = sp::dgc_allreduce(t, g.data(), out.data(), n, k, vel.data(), acc.data(), 0.5);
    CHECK(rep.k == k);
    std::vector<double> want(n, 0.0);
    for (int q = 0; q < P; ++q) {
      auto& uq = u[static_cast<std::size_t>(q)];
      auto& vq = v[static_cast<std::size_t>(q)];
      for (std::size_t i = 0; i < n; ++i) {
        uq[i] = 0.5 * uq[i] + grad(q, step, i);
        vq[i] += uq[i];
      }
      std::vector<std::size_t> idx(n);
      std::iota(idx.begin(), idx.end(), std::size_t{0});
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        return std::fabs(vq[a]) > std::fabs(vq[b]);
      });
      for (std::size_t j = 0; j < k; ++j) {
        want[idx[j]] += vq[idx[j]];
        uq[idx[j]] = 0.0;
        vq[idx[j]] = 0.0;
      }
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      wrong += static_cast<double>(out[i]) != want[i];
      wrong += static_cast<double>(vel[i]) != u[static_cast<std::size_t>(r)][i];
      wrong += static_cast<double>(acc[i]) != v[static_cast<std::size_t>(r)][i];
    }
    CAPTURE(step);
    CHECK(wrong == 0);
    CHECK(identical_on_all_ranks(t, out.data(), n * sizeof(float)));
  }
  std::vector<float> g(n, 1.0f);
  CHECK_THROWS_AS(sp::dgc_allreduce(t, g.data(), out.data(), n, k, vel.data(), acc.data(), 1.0),
                  invalid_argument);
  CHECK_THROWS_AS(sp::dgc_allreduce(t, g.data(), out.data(), n, k, static_cast<float*>(nullptr),
                                    acc.data(), 0.5),
                  invalid_argument);
}

/// `topk_pool_allreduce` over a pool of several tensors (alignment padding between them),
/// each rank marking in its own order, three iterations (five with a warm-up), against this
/// file's simulation of every rank: top-k with a residual (e = g + residual, the k largest
/// |e| go out, the rest is the next residual: as it is, times the momentum 0.5, or dropped)
/// or DGC at momentum 0.5 (as `dgc_case`), then the average. With a warm-up of `warmup`
/// iterations, k follows `warmup_density` and iteration 0 is dense: every rank's e is sent
/// (DGC: velocity + accumulation, nothing masked, the accumulation cleared). Gradients are
/// multiples of 1/8, so every sum is exact and the one division by P is the same float
/// operation here as in the adaptor. Bitwise identical on every rank.
template <class Tr>
void topk_pool_case(Tr& t, sp::topk_scheme scheme, double density,
                    sp::residual_rule rule = sp::residual_rule::error_feedback,
                    std::size_t warmup = 0) {
  const int P = t.size(), r = t.rank();
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{37, 1, 100, 64});
  sp::topk_pool_options o;
  o.scheme = scheme;
  o.density = density;
  o.momentum = 0.5;
  o.residual = rule;
  o.warmup_iterations = warmup;
  sp::topk_pool_allreduce<Tr, float, tcoll::avg_op> a(pool, t, o);
  const std::size_t n = pool.size();
  CHECK(a.k() == sp::topk_count(density, n));
  const bool dgc = scheme == sp::topk_scheme::dgc;
  const bool keeps_residual = !dgc && rule != sp::residual_rule::none;
  CHECK(a.residual().size() == (keeps_residual ? n : 0));
  std::vector<char> is_data(n, 0);
  for (std::size_t i = 0; i < pool.tensor_count(); ++i)
    for (std::size_t j = 0; j < pool.tensor_size(i); ++j) is_data[pool.tensor_offset(i) + j] = 1;
  auto grad = [&](int q, int step, std::size_t i) {
    return is_data[i] ? integral(q, 60 + step, i) / 8.0 + (i % 5 == 0 ? 0.125 : 0.0) : 0.0;
  };
  const auto Pn = static_cast<std::size_t>(P);
  std::vector<std::vector<double>> res(Pn, std::vector<double>(n, 0.0)), u = res, v = res;
  const int steps = warmup ? 5 : 3;
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const std::size_t k =
        sp::topk_count(sp::warmup_density(density, warmup, static_cast<std::size_t>(step)), n);
    const bool dense = warmup > 0 && k == n;
    for (std::size_t i = 0; i < n; ++i) pool.data()[i] = static_cast<float>(grad(r, step, i));
    // rank r marks tensor (j + r) mod L at its j-th mark: every rank in another order
    const std::size_t L = pool.tensor_count();
    for (std::size_t j = 0; j < L; ++j) a.mark_ready((j + static_cast<std::size_t>(r)) % L);
    if (step == 1)
      CHECK_THROWS_WITH_AS(a.mark_ready(0), doctest::Contains("already marked"),
                           tcoll::invalid_argument);
    a.finish();
    std::vector<double> sum(n, 0.0);
    for (std::size_t q = 0; q < Pn; ++q) {
      std::vector<double> e(n);
      for (std::size_t i = 0; i < n; ++i) {
        if (dgc) {
          u[q][i] = 0.5 * u[q][i] + grad(static_cast<int>(q), step, i);
          v[q][i] += u[q][i];
          e[i] = v[q][i];
        } else {
          e[i] = grad(static_cast<int>(q), step, i) + res[q][i];
        }
      }
      if (dense) {
        for (std::size_t i = 0; i < n; ++i) {
          sum[i] += e[i];
          if (dgc) v[q][i] = 0.0; // the velocity is kept: nothing is masked
          res[q][i] = 0.0;
        }
        continue;
      }
      std::vector<std::size_t> idx(n);
      std::iota(idx.begin(), idx.end(), std::size_t{0});
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) {
        return std::fabs(e[x]) > std::fabs(e[y]);
      });
      std::vector<char> taken(n, 0);
      for (std::size_t j = 0; j < k; ++j) taken[idx[j]] = 1;
      for (std::size_t i = 0; i < n; ++i) {
        if (taken[i]) sum[i] += e[i];
        if (dgc) {
          if (taken[i]) u[q][i] = v[q][i] = 0.0;
        } else {
          const double kept = rule == sp::residual_rule::momentum_scaled ? 0.5 * e[i]
                              : rule == sp::residual_rule::none          ? 0.0
                                                                         : e[i];
          res[q][i] = taken[i] ? 0.0 : kept;
        }
      }
    }
    std::size_t wrong = 0;
    const auto mine = static_cast<std::size_t>(r);
    for (std::size_t i = 0; i < n; ++i) {
      wrong += pool.data()[i] != static_cast<float>(sum[i]) / static_cast<float>(P);
      if (dgc) {
        wrong += static_cast<double>(a.velocity()[i]) != u[mine][i];
        wrong += static_cast<double>(a.accumulation()[i]) != v[mine][i];
      } else if (keeps_residual) {
        wrong += static_cast<double>(a.residual()[i]) != res[mine][i];
      }
    }
    CHECK(wrong == 0);
    CHECK(a.last_k() == k);
    CHECK(identical_on_all_ranks(t, pool.data(), n * sizeof(float)));
  }
  CHECK(a.iterations() == static_cast<std::size_t>(steps));
  CHECK(a.last_timing().buckets.size() == 1);
}

/// `topk_pool_allreduce`'s errors: options or pools that differ name the rank; a tensor
/// never marked fails `finish()` on every rank at once (the transport is broken).
template <class Tr>
void topk_pool_errors_case(Tr& t, int odd) {
  tcoll::gradient_pool<float> pool(std::vector<std::size_t>{50, 60});
  sp::topk_pool_options o;
  o.density = t.rank() == odd ? 0.5 : 0.25;
  const std::string want = "rank " + std::to_string(odd) + " has a different pool";
  CHECK_THROWS_WITH_AS((sp::topk_pool_allreduce<Tr, float>(pool, t, o)),
                       doctest::Contains(want.c_str()), tcoll::invalid_argument);
  o.density = 1.5;
  CHECK_THROWS_WITH_AS((sp::topk_pool_allreduce<Tr, float>(pool, t, o)),
                       doctest::Contains("density"), tcoll::invalid_argument);
  o.density = 0.25;
  o.scheme = sp::topk_scheme::dgc;
  o.momentum = 1.0;
  CHECK_THROWS_WITH_AS((sp::topk_pool_allreduce<Tr, float>(pool, t, o)),
                       doctest::Contains("momentum"), tcoll::invalid_argument);
  o.momentum = 0.9;
  sp::topk_pool_allreduce<Tr, float> a(pool, t, o);
  // the construction's agreement is complete on every rank before the failure breaks the
  // transport (a rank done with it may otherwise abort a peer still reading its last message)
  t.barrier();
  if (t.rank() != odd) a.mark_ready(1);
  a.mark_ready(0);
  CHECK_THROWS_AS(a.finish(), tcoll::error);
}

} // namespace sparse_test
