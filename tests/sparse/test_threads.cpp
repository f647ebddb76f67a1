// The sparse-chunk adaptor on the threads transport (suite 'sparse'): selection identical
// on every rank (1-16 ranks, ties, a final short chunk), the norm division, Algorithm 1 by
// hand, conservation of gradient mass, warm-up, equality with a dense allreduce on the
// important chunks for every algorithm, bytes against the ring closed form, overlap,
// bitwise identity across ranks, bad input, and the top-k baseline.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <tcoll/compress/adaptor_options.hpp>
#include <tcoll/transport/subgroup.hpp>

#include "cases.hpp"

using namespace sparse_test;
using namespace std::chrono_literals;
namespace tt = tcoll::testing;

namespace {
template <class F>
void on_team(int P, F&& f, std::chrono::milliseconds timeout = 20s) {
  tcoll::thread_team(P, timeout).run(f);
}
bool quick() {
  return tt::level() == tt::test_level::quick;
}
} // namespace

TEST_CASE("chunk layout, kept counts, warm-up endpoints, top chunks with ties and NaN") {
  const sp::chunk_layout L{1000, 300};
  CHECK(L.count() == 4);
  CHECK(L.size(0) == 300);
  CHECK(L.size(3) == 100); // the final short chunk
  CHECK(L.chunk_of(899) == 2);
  CHECK(L.chunk_of(900) == 3);
  CHECK(sp::chunk_layout{0, 5}.count() == 0);
  CHECK(sp::chunks_kept(0.15, 100) == 15);
  CHECK(sp::chunks_kept(0.1, 1903) == 190);
  CHECK(sp::chunks_kept(0.25, 10) == 3); // 2.5 rounds up
  CHECK(sp::chunks_kept(0.01, 10) == 1); // positive density keeps at least one
  CHECK(sp::chunks_kept(0.0, 10) == 0);
  CHECK(sp::chunks_kept(1.0, 10) == 10);
  CHECK(sp::warmup_density(0.15, 100, 0) == 1.0);
  CHECK(sp::warmup_density(0.15, 100, 50) == doctest::Approx(0.575));
  CHECK(sp::warmup_density(0.15, 100, 100) == 0.15);
  CHECK(sp::warmup_density(0.15, 100, 5000) == 0.15);
  CHECK(sp::warmup_density(0.15, 0, 0) == 0.15);
  const float nan = std::nanf("");
  const std::vector<float> norms{1, 5, 5, nan, 2, 5, 0};
  CHECK(sp::select_top_chunks(norms, 0) == std::vector<unsigned char>{0, 0, 0, 0, 0, 0, 0});
  CHECK(sp::select_top_chunks(norms, 1) == std::vector<unsigned char>{0, 0, 0, 1, 0, 0, 0});
  CHECK(sp::select_top_chunks(norms, 3) == std::vector<unsigned char>{0, 1, 1, 1, 0, 0, 0});
  CHECK(sp::select_top_chunks(norms, 4) == std::vector<unsigned char>{0, 1, 1, 1, 0, 1, 0});
  CHECK(sp::select_top_chunks(norms, 9) == std::vector<unsigned char>{1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("selection: identical important sets on every rank, 1-16 ranks, random pools") {
  std::vector<int> ranks;
  if (quick())
    ranks = {1, 2, 3, 5, 8, 16};
  else
    for (int P = 1; P <= 16; ++P) ranks.push_back(P);
  for (int P : ranks)
    for (std::uint32_t seed : {1u, 2u}) {
      CAPTURE(P);
      CAPTURE(seed);
      on_team(P, [&](tcoll::thread_transport& t) {
        identical_selection_case(t, seed * 100 + static_cast<std::uint32_t>(P));
      });
    }
}

TEST_CASE("selection: ties go to the lower chunk index, the short last chunk loses") {
  for (int P : {1, 3, 4, 7})
    for (std::size_t keep :
         {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{8}, std::size_t{9}}) {
      CAPTURE(P);
      CAPTURE(keep);
      on_team(P, [&](tcoll::thread_transport& t) { ties_case(t, keep); });
    }
}

TEST_CASE("selection: important chunks' norms are divided by the rank count") {
  for (int P : {1, 2, 4, 8}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) { norm_division_case(t); });
  }
}

TEST_CASE("Algorithm 1: three iterations and momentum steps against a hand computation") {
  on_team(2, [](tcoll::thread_transport& t) { hand_computation_case(t); });
}

TEST_CASE("Algorithm 1: residuals conserve gradient mass (error feedback) and follow lines "
          "7-11 (momentum-scaled)") {
  for (int P : {1, 2, 3, 5})
    for (auto rule : {sp::residual_rule::error_feedback, sp::residual_rule::momentum_scaled}) {
      CAPTURE(P);
      CAPTURE(static_cast<int>(rule));
      on_team(P, [&](tcoll::thread_transport& t) { conservation_case(t, rule); });
    }
}

TEST_CASE("warm-up: density ramps linearly from dense to the target") {
  on_team(3, [](tcoll::thread_transport& t) { warmup_case(t); });
}

TEST_CASE("communication: important chunks equal a dense allreduce, others stay local") {
  for (int P : {1, 2, 3, 4, 7}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      for (std::size_t theta : {std::size_t{0}, std::size_t{2000}, std::size_t{1} << 30}) {
        CAPTURE(theta);
        matches_dense_case(t, tcoll::sum_op{}, tcoll::ring{}, theta);
        matches_dense_case(t, tcoll::avg_op{}, tcoll::ring{}, theta);
        matches_dense_case(t, tcoll::sum_op{}, tcoll::recursive_doubling{}, theta);
        matches_dense_case(t, tcoll::sum_op{}, tcoll::recursive_halving_doubling{}, theta);
        matches_dense_case(t, tcoll::sum_op{}, tcoll::binomial_tree{}, theta);
        matches_dense_case(t, tcoll::sum_op{}, tcoll::multi_ring{}, theta);
        matches_dense_case(t, tcoll::avg_op{}, tcoll::automatic{}, theta);
        // runs of >= 2 chunks (1 KiB) reduced in place in the pool, the others copied
        matches_dense_case(t, tcoll::sum_op{}, tcoll::ring{}, theta, 1024);
        matches_dense_case(t, tcoll::avg_op{}, tcoll::recursive_doubling{}, theta, 1);
        // half on the wire: integer sums this small are exact in half
        matches_dense_case<tcoll::thread_transport, tcoll::sum_op, tcoll::ring, tcoll::half>(
            t, tcoll::sum_op{}, tcoll::ring{}, theta);
      }
    });
  }
}

TEST_CASE("communication: over a hierarchical allreduce (groups of 2)") {
  on_team(6, [](tcoll::thread_transport& t) {
    auto v = tcoll::split_groups(t, 2);
    tcoll::hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
    tcoll::gradient_pool<float> pool(std::vector<std::size_t>{700, 1300});
    sp::csc_options o;
    o.chunk_elements = 100;
    o.density = 0.3;
    o.warmup_iterations = 0;
    o.threshold_bytes = 1000;
    sp::csc_allreduce<decltype(h), float> a(pool, h, o);
    for (int it = 0; it < 2; ++it) {
      const std::vector<unsigned char> imp(a.important().begin(), a.important().end());
      fill_pool(pool, t.rank(), it, integral);
      const std::vector<float> input(pool.all().begin(), pool.all().end());
      auto dense = input;
      tcoll::allreduce(t, std::span<float>(dense), tcoll::sum_op{}, tcoll::ring{});
      a.mark_all_ready();
      const auto& s = a.finish();
      CHECK_FALSE(s.bytes_exact); // hierarchical: the ring estimate
      std::size_t bad = 0;
      for (std::size_t i = 0; i < pool.size(); ++i)
        bad += pool.data()[i] != (imp[a.chunks().chunk_of(i)] ? dense[i] : input[i]);
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("bytes: counting<> equals the ring closed form of buffers plus norm vector") {
  for (int P : {1, 2, 3, 4, 6}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      bytes_case<tcoll::thread_transport, float>(t);
      bytes_case<tcoll::thread_transport, tcoll::half>(t);
    });
  }
}

TEST_CASE("overlap: a buffer starts during backward once its chunks are filled, in order") {
  on_team(3, [](tcoll::thread_transport& t) { overlap_case(t); });
}

TEST_CASE("in place: runs of important chunks reduced in the pool") {
  for (int P : {1, 3}) on_team(P, [](tcoll::thread_transport& t) { in_place_layout_case(t); });
}

TEST_CASE("overlap: mark_ready from several threads per rank, orders differing by rank") {
  for (int P : {2, 4})
    for (int threads : {1, 3}) {
      CAPTURE(P);
      CAPTURE(threads);
      on_team(P, [&](tcoll::thread_transport& t) { threaded_marks_case(t, threads); });
    }
}

TEST_CASE("every rank ends every iteration with bitwise identical important chunks") {
  for (int P : quick() ? std::vector<int>{2, 5} : std::vector<int>{2, 3, 5, 8}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      bitwise_case(t, tcoll::ring{});
      bitwise_case(t, tcoll::recursive_halving_doubling{});
      bitwise_case(t, tcoll::automatic{});
      bitwise_case(t, tcoll::ring{}, 2048); // runs of >= 2 chunks in place
      bitwise_case<tcoll::thread_transport, tcoll::ring, tcoll::bfloat16>(t, tcoll::ring{});
    });
  }
}

TEST_CASE("bad input: chunk size 0, density outside [0, 1], bad marks, step sizes") {
  for (int P : {1, 2}) on_team(P, [](tcoll::thread_transport& t) { bad_options_case(t); });
}

TEST_CASE("bad input: a pool or options that differ across ranks give a clear error") {
  on_team(4, [](tcoll::thread_transport& t) { pool_mismatch_case(t, 2); });
  on_team(2, [](tcoll::thread_transport& t) { pool_mismatch_case(t, 1); });
}

TEST_CASE("bad input: finish() with a tensor never marked fails on every rank, fast") {
  const auto start = tcoll::clock::now();
  on_team(
      3, [](tcoll::thread_transport& t) { unmarked_case(t); }, 5s);
  CHECK(tcoll::clock::now() - start < 2s);
}

TEST_CASE("a broken transport: mark_ready returns, finish() throws the cause") {
  for (int P : {1, 3}) on_team(P, [](tcoll::thread_transport& t) { broken_transport_case(t); });
}

TEST_CASE("top-k baseline: per-rank top-k, allgather of pairs, sum; bytes") {
  for (int P : {1, 2, 3, 4, 7}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{500}})
        topk_case(t, 500, k);
    });
  }
}

TEST_CASE("DGC momentum correction and masking around top-k: three steps against a "
          "simulation of every rank") {
  for (int P : {1, 2, 3, 5}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      for (std::size_t k : {std::size_t{0}, std::size_t{7}, std::size_t{60}, std::size_t{300}})
        dgc_case(t, 300, k);
    });
  }
}

TEST_CASE("topk_pool_allreduce: top-k with error feedback and DGC over a pool, driven by "
          "marks in rank-dependent orders, against a simulation of every rank") {
  for (int P : {1, 2, 3, 4}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      for (double density : {0.0, 0.01, 0.3, 1.0}) {
        CAPTURE(density);
        topk_pool_case(t, sp::topk_scheme::topk, density);
        topk_pool_case(t, sp::topk_scheme::dgc, density);
      }
    });
  }
}

TEST_CASE("topk_pool_allreduce: momentum-scaled and no residual, and a warm-up from dense "
          "(iteration 0 one dense allreduce), against the simulation") {
  for (int P : {1, 2, 3, 4}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      topk_pool_case(t, sp::topk_scheme::topk, 0.3, sp::residual_rule::momentum_scaled);
      topk_pool_case(t, sp::topk_scheme::topk, 0.3, sp::residual_rule::none);
      for (std::size_t warmup : {1, 3}) {
        CAPTURE(warmup);
        topk_pool_case(t, sp::topk_scheme::topk, 0.05, sp::residual_rule::error_feedback, warmup);
        topk_pool_case(t, sp::topk_scheme::topk, 0.05, sp::residual_rule::momentum_scaled, warmup);
        topk_pool_case(t, sp::topk_scheme::dgc, 0.05, sp::residual_rule::none, warmup);
      }
    });
  }
}

TEST_CASE("topk_pool_allreduce: differing options, bad knobs, a tensor never marked") {
  const auto start = tcoll::clock::now();
  on_team(
      3, [](tcoll::thread_transport& t) { topk_pool_errors_case(t, 1); }, 5s);
  CHECK(tcoll::clock::now() - start < 3s);
}

TEST_CASE("CSC against top-k at the same density: bytes per rank") {
  const int P = 8;
  const std::size_t n = 64 * 1000; // 64 chunks of 1000
  const double density = 0.125;
  std::vector<std::size_t> csc_bytes(P), topk_bytes(P);
  on_team(P, [&](tcoll::thread_transport& t) {
    tcoll::counting<tcoll::thread_transport> c(t);
    tcoll::gradient_pool<float> pool(std::vector<std::size_t>{n});
    sp::csc_options o;
    o.chunk_elements = 1000;
    o.density = density;
    o.warmup_iterations = 0;
    sp::csc_allreduce<decltype(c), float, tcoll::sum_op, tcoll::ring> a(pool, c, o);
    fill_pool(pool, t.rank(), 0, fractional);
    a.mark_all_ready();
    a.finish(); // dense iteration 0
    fill_pool(pool, t.rank(), 1, fractional);
    c.reset();
    a.mark_all_ready();
    a.finish();
    csc_bytes[static_cast<std::size_t>(t.rank())] = c.counts().bytes_sent;
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = fractional(t.rank(), 1, i);
    c.reset();
    sp::topk_allreduce_density(c, in.data(), out.data(), n, density);
    topk_bytes[static_cast<std::size_t>(t.rank())] = c.counts().bytes_sent;
  });
  // closed forms: CSC ring 2 (P-1)/P k 4 B plus the 64-float norm vector; top-k (P-1) k 8 B
  const std::size_t k = 8000;
  CHECK(csc_bytes[0] == 2 * (P - 1) * k * 4 / P + 2 * (P - 1) * 64 * 4 / P);
  CHECK(topk_bytes[0] == std::size_t(P - 1) * k * 8);
  MESSAGE("P=8, 64000 floats, density 0.125: CSC sends "
          << csc_bytes[0] << " B per rank, top-k " << topk_bytes[0] << " B ("
          << double(topk_bytes[0]) / csc_bytes[0] << "x)");
}

TEST_CASE("host_chunk_ops: the fused residual pass gives the same bits as residual then norm") {
  // fractional values of mixed signs and magnitudes, so the summation order shows in the bits
  std::vector<float> g0(1037), r0(1037);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return static_cast<float>(static_cast<std::int64_t>(x % 2000001) - 1000000) / 7919.0f;
  };
  for (std::size_t i = 0; i < g0.size(); ++i) g0[i] = next(), r0[i] = next() / 3.0f;
  const tcoll::sparse::host_chunk_ops ops;
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{8}, std::size_t{1037}})
    for (bool important : {false, true})
      for (double factor : {0.9, 1.0}) {
        auto g1 = g0, r1 = r0, g2 = g0, r2 = r0;
        ops.accumulate_residual(g1.data(), r1.data(), n, important, factor);
        const double separate = tcoll::sparse::host_chunk_ops::l1_norm(g1.data(), n);
        const double fused = ops.accumulate_residual_l1(g2.data(), r2.data(), n, important, factor);
        CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(&separate, &fused, sizeof(double)) == 0);
        if (n > 8) CHECK(fused > 0);
      }
}

TEST_CASE("compression registry: names, knobs, residual rules, and the adaptors it configures") {
  using tcoll::compression_knob;
  using tcoll::compression_scheme;
  // one name per scheme, read back by the one parser; an unknown name lists every name
  for (const tcoll::compression_description& d : tcoll::compression_registry) {
    CAPTURE(d.name);
    CHECK(tcoll::parse_compression(d.name) == d.id);
    CHECK(&tcoll::describe(d.id) == &d);
    CHECK(!d.title.empty());
  }
  CHECK_THROWS_WITH_AS(tcoll::parse_compression("fp8", 2),
                       doctest::Contains("dense, half, bfloat16, topk, dgc, csc, sfb"),
                       tcoll::invalid_argument);
  CHECK_THROWS_WITH_AS(tcoll::parse_compression("fp8", 2), doctest::Contains("rank 2"),
                       tcoll::invalid_argument);
  for (auto rule : {sp::residual_rule::momentum_scaled, sp::residual_rule::error_feedback,
                    sp::residual_rule::none})
    CHECK(tcoll::parse_residual_rule(sp::to_string(rule)) == rule);
  CHECK_THROWS_AS(tcoll::parse_residual_rule("momentum"), tcoll::invalid_argument);
  // knobs: dgc keeps no residual and has no chunks; the wire formats take only their scale
  CHECK_NOTHROW(tcoll::check_knobs(compression_scheme::csc,
                                   static_cast<std::uint16_t>(compression_knob::chunk_elements),
                                   "test"));
  CHECK_THROWS_WITH_AS(
      tcoll::check_knobs(compression_scheme::dgc,
                         static_cast<std::uint16_t>(compression_knob::residual), "test", 1),
      doctest::Contains("scheme 'dgc' takes no knob 'residual' (its knobs: density, "
                        "warmup_iterations, momentum)"),
      tcoll::invalid_argument);
  CHECK_THROWS_WITH_AS(tcoll::check_knobs(compression_scheme::dense,
                                          static_cast<std::uint16_t>(compression_knob::wire_scale),
                                          "test"),
                       doctest::Contains("(its knobs: none)"), tcoll::invalid_argument);
  CHECK(tcoll::takes_residual(compression_scheme::topk, sp::residual_rule::none));
  CHECK(!tcoll::takes_residual(compression_scheme::dgc, sp::residual_rule::error_feedback));
  // the wire type of the dense family
  std::size_t wire_bytes = 0;
  for (auto s : {compression_scheme::dense, compression_scheme::half, compression_scheme::bfloat16})
    tcoll::visit_wire_type(s,
                           [&](auto tag) { wire_bytes += sizeof(typename decltype(tag)::type); });
  CHECK(wire_bytes == 4 + 2 + 2);
  CHECK_THROWS_AS(tcoll::visit_wire_type(compression_scheme::topk, [](auto) {}),
                  tcoll::invalid_argument);
  // the options it makes run the adaptor with the state its line names, and the result is
  // the one of options set by hand
  on_team(3, [](tcoll::thread_transport& t) {
    for (auto s : {compression_scheme::topk, compression_scheme::dgc}) {
      CAPTURE(tcoll::to_string(s));
      tcoll::compression_options c = tcoll::default_compression_options(s);
      CHECK(c.density == sp::topk_pool_options{}.density);
      c.density = 0.2;
      c.warmup_iterations = 2;
      c.momentum = 0.5;
      c.residual = sp::residual_rule::momentum_scaled;
      const sp::topk_pool_options o = tcoll::to_topk_pool_options(s, c);
      sp::topk_pool_options by_hand;
      by_hand.scheme = s == compression_scheme::dgc ? sp::topk_scheme::dgc : sp::topk_scheme::topk;
      by_hand.density = 0.2;
      by_hand.warmup_iterations = 2;
      by_hand.momentum = 0.5;
      by_hand.residual = s == compression_scheme::dgc ? sp::residual_rule::none
                                                      : sp::residual_rule::momentum_scaled;
      tcoll::gradient_pool<float> pool_a(std::vector<std::size_t>{20, 30}),
          pool_b(std::vector<std::size_t>{20, 30});
      sp::topk_pool_allreduce<tcoll::thread_transport, float> a(pool_a, t, o),
          b(pool_b, t, by_hand);
      std::vector<std::span<float>> state = {a.residual(), a.velocity(), a.accumulation()};
      std::erase_if(state, [](auto x) { return x.empty(); });
      CHECK(state.size() == tcoll::describe(s).state.size());
      for (int step = 0; step < 3; ++step) {
        fill_pool(pool_a, t.rank(), 70 + step, fractional);
        fill_pool(pool_b, t.rank(), 70 + step, fractional);
        a.mark_all_ready();
        a.finish();
        b.mark_all_ready();
        b.finish();
        CHECK(std::memcmp(pool_a.data(), pool_b.data(), pool_a.size() * sizeof(float)) == 0);
      }
    }
    tcoll::compression_options c = tcoll::default_compression_options(compression_scheme::csc);
    CHECK(c.chunk_elements == sp::csc_options{}.chunk_elements);
    c.residual = sp::residual_rule::none;
    CHECK(tcoll::to_csc_options(c).residual == sp::residual_rule::none);
    CHECK_THROWS_AS(tcoll::to_topk_pool_options(compression_scheme::csc, c),
                    tcoll::invalid_argument);
  });
}
