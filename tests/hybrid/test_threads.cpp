// The hybrid adaptor on the threads transport (suite 'hybrid'): sufficient-factor allreduce
// against exact and dense references for random shapes on 1-16 ranks, bitwise identity
// across ranks, avg, the non-blocking path, bad input, and the host GEMM's fixed order.
#include <doctest/doctest.h>

#include <tcoll/hybrid/calibrate_gemm.hpp>

#include <thread>

#include "cases.hpp"

using namespace hybrid_test;
using namespace std::chrono_literals;

namespace {
template <class F>
void on_team(int P, F&& f) {
  tcoll::thread_team(P, 30s).run(f);
}
std::vector<int> rank_counts() {
  if (quick()) return {1, 2, 3, 5, 8, 16};
  std::vector<int> all;
  for (int P = 1; P <= 16; ++P) all.push_back(P);
  return all;
}
} // namespace

TEST_CASE("SFB equals the exact sum for integer-valued factors, random shapes, 1-16 ranks") {
  const int shapes_per_p = quick() ? 1 : 3;
  for (int P : rank_counts())
    for (int c = 0; c < shapes_per_p; ++c) {
      const std::uint64_t seed = 100 * static_cast<std::uint64_t>(P) + c;
      const shape s = random_shape(seed, 48, 12);
      CAPTURE(P);
      CAPTURE(s.K);
      CAPTURE(s.M);
      CAPTURE(s.N);
      on_team(P, [&](tcoll::thread_transport& t) {
        exact_case<float>(t, seed, s);
        exact_case<double>(t, seed, s);
        if ((P & (P - 1)) == 0) exact_case<float>(t, seed, s, true); // exact division
      });
    }
}

TEST_CASE("SFB with fractional factors: identical bits on every rank, within the "
          "reassociation bound of the exact sum and of a dense allreduce") {
  const int shapes_per_p = quick() ? 1 : 3;
  for (int P : rank_counts())
    for (int c = 0; c < shapes_per_p; ++c) {
      const std::uint64_t seed = 7000 + 100 * static_cast<std::uint64_t>(P) + c;
      const shape s = random_shape(seed, 48, 12);
      CAPTURE(P);
      CAPTURE(s.K);
      CAPTURE(s.M);
      CAPTURE(s.N);
      on_team(P, [&](tcoll::thread_transport& t) {
        fractional_case<float>(t, seed, s);
        fractional_case<float>(t, seed, s, true);
        fractional_case<double>(t, seed, s);
        average_is_sum_over_p_case<float>(t, seed, s);
      });
    }
}

TEST_CASE("SFB on a larger layer (several GEMM tiles in both directions)") {
  const shape s = quick() ? shape{4, 70, 600} : shape{16, 300, 1100};
  for (int P : {2, 4}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      exact_case<float>(t, 31, s);
      fractional_case<float>(t, 32, s);
    });
  }
}

TEST_CASE("isfb_allreduce: per-layer jobs in flight with dense bias allreduces, same bits "
          "as the blocking call") {
  for (int P : {1, 2, 3, 6}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      nonblocking_case<float>(t, 900);
      nonblocking_case<double>(t, 901);
    });
  }
}

TEST_CASE("bad input: every rank throws invalid_argument naming the rank and argument; the "
          "transport stays usable") {
  for (int P : {1, 2, 4}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) { bad_input_case(t); });
  }
}

TEST_CASE("SFB and hybrid_scheduler on a device-only transport (NCCL's rule) with a device "
          "reducer: records and factors travel in device memory too; same bits as the host "
          "path") {
  for (int P : {1, 2, 3, 5}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      device_only_case<float>(t, 1200 + P, {3, 17, 9});
      device_only_case<double>(t, 1300 + P, {1, 5, 40});
      // the scheduler too: factor buffers and the plan check in device memory
      scheduler_case<float, tcoll::ring, pretend_device_reducer>(t, 1400 + P, false, 2);
      scheduler_case<float, tcoll::automatic, pretend_device_reducer>(t, 1500 + P, true, 1);
    });
  }
}

TEST_CASE("hybrid_scheduler: per-tensor jobs during backward (Poseidon Algorithm 2) give the "
          "blocking calls' bits, any mark order, fused or not, 1-16 ranks") {
  for (int P : quick() ? std::vector<int>{1, 2, 5} : std::vector<int>{1, 2, 3, 4, 7, 16}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      for (int order = 0; order < 3; ++order) {
        scheduler_case<float>(t, 40 + order, false, order);
        scheduler_case<float>(t, 50 + order, true, order);
      }
      scheduler_case<double>(t, 60, false, 1, tcoll::recursive_doubling{});
      scheduler_case<float>(t, 61, true, 2, tcoll::automatic{});
    });
  }
}

TEST_CASE("SFB and hybrid_scheduler over a hierarchical machine (groups of 2 and 3): the flat "
          "transport's bits on integer-valued data") {
  using tcoll::hybrid::scheme;
  for (int group : {2, 3})
    on_team(6, [&](tcoll::thread_transport& t) {
      CAPTURE(group);
      auto v = tcoll::split_groups(t, group);
      tcoll::hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
      const int r = t.rank();
      const std::size_t K = 4;
      auto same = [](const std::vector<double>& a, std::span<const double> b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 8) == 0;
      };
      { // blocking SFB through the hierarchy (its gathers are allreduces) equals the flat one
        const auto f = make_factors<double>(7, r, K, 9, 13, true);
        std::vector<double> flat(9 * 13), hier(9 * 13, -1.0);
        tcoll::hybrid::sfb_allreduce(t, f.u.data(), f.v.data(), K, 9, 13, flat.data());
        tcoll::hybrid::sfb_allreduce(h, f.u.data(), f.v.data(), K, 9, 13, hier.data());
        CHECK(same(flat, hier));
      }
      // Poseidon's scheduler on the hierarchy: SFB and dense tensors
      tcoll::hybrid::hybrid_plan plan;
      plan.batch = K;
      plan.tensors = {
          {scheme::sfb, 12, 7}, {scheme::dense, 0, 0}, {scheme::sfb, 9, 30}, {scheme::dense, 0, 0}};
      tcoll::gradient_pool<double> pool(std::vector<std::size_t>{12 * 7, 12, 9 * 30, 37});
      tcoll::hybrid::hybrid_scheduler<decltype(h), double, tcoll::avg_op> sched(pool, h, plan);
      for (int it = 0; it < 2; ++it) {
        const auto f0 = make_factors<double>(20 + it, r, K, 12, 7, true);
        const auto f2 = make_factors<double>(30 + it, r, K, 9, 30, true);
        auto d1 = make_factors<double>(40 + it, r, 1, 12, 1, true).u;
        auto d3 = make_factors<double>(50 + it, r, 1, 37, 1, true).u;
        std::copy(d1.begin(), d1.end(), pool.tensor(1).begin());
        std::copy(d3.begin(), d3.end(), pool.tensor(3).begin());
        sched.mark_ready(3);
        sched.mark_factors_ready(2, f2.u.data(), f2.v.data(), K);
        sched.mark_ready(1);
        sched.mark_factors_ready(0, f0.u.data(), f0.v.data(), K);
        sched.finish();
        std::vector<double> w0(12 * 7), w2(9 * 30);
        tcoll::hybrid::sfb_allreduce(t, f0.u.data(), f0.v.data(), K, 12, 7, w0.data(),
                                     tcoll::avg_op{});
        tcoll::hybrid::sfb_allreduce(t, f2.u.data(), f2.v.data(), K, 9, 30, w2.data(),
                                     tcoll::avg_op{});
        tcoll::allreduce(t, std::span<double>(d1), tcoll::avg_op{}, tcoll::ring{});
        tcoll::allreduce(t, std::span<double>(d3), tcoll::avg_op{}, tcoll::ring{});
        CHECK(same(w0, pool.tensor(0)));
        CHECK(same(d1, pool.tensor(1)));
        CHECK(same(w2, pool.tensor(2)));
        CHECK(same(d3, pool.tensor(3)));
      }
    });
}

TEST_CASE("hybrid_scheduler with a fusion planner's buckets (dense_buckets): dense tensors "
          "fuse within a bucket, SFB tensors split it; the blocking calls' bits") {
  for (int P : quick() ? std::vector<int>{1, 3} : std::vector<int>{1, 2, 3, 5}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      scheduler_buckets_case<float>(t, 2000, 0);
      scheduler_buckets_case<double>(t, 2100, 2, tcoll::recursive_doubling{});
    });
  }
}

TEST_CASE("hybrid_scheduler autotune: re-plans the dense buckets from measurements after 2 "
          "iterations, rank 0's plan on every rank; the blocking calls' bits throughout") {
  for (int P : {1, 2, 3}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      scheduler_autotune_case<float>(t, 3000, tcoll::plan::single_planner{}, 4);
      scheduler_autotune_case<double>(t, 3100, tcoll::plan::layerwise_planner{}, 7);
      scheduler_autotune_case<float>(t, 3200, tcoll::plan::optimal_planner{}, 0);
    });
  }
}

TEST_CASE("hybrid_scheduler: bad use names the tensor; an unmarked tensor fails every rank") {
  make_plan_case();
  for (int P : {1, 2, 3}) {
    CAPTURE(P);
    tcoll::thread_team(P, 5s).run([](tcoll::thread_transport& t) { scheduler_bad_use_case(t); });
  }
}

TEST_CASE("hybrid_scheduler on a broken transport: marks return, finish() throws the cause") {
  for (int P : {1, 3})
    tcoll::thread_team(P, 5s).run([](tcoll::thread_transport& t) { broken_transport_case(t); });
}

TEST_CASE("host_gemm sums every element in sample order, whatever the tile sizes") {
  const std::size_t rows = 37, M = 45, N = 70;
  const auto f = make_factors<float>(3, 0, rows, M, N, false);
  // the documented order: (((0 + u0 v0) + u1 v1) + ...)
  std::vector<float> want(M * N);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < rows; ++k) {
        const float p = f.u[k * M + i] * f.v[k * N + j];
        acc = acc + p;
      }
      want[i * N + j] = acc;
    }
  for (const auto& tile :
       {std::pair<std::size_t, std::size_t>{32, 512}, {1, 1}, {3, 7}, {0, 0}, {1000, 1000}}) {
    const std::size_t tr = tile.first, tc = tile.second;
    CAPTURE(tr);
    CAPTURE(tc);
    std::vector<float> g(M * N, 123.0f);
    tcoll::hybrid::host_gemm{tr, tc}.sum_outer_products(f.u.data(), f.v.data(), rows, M, N,
                                                        g.data());
    CHECK(same_bits(g, want));
  }
}

namespace {
/// A GEMM that also sleeps `delay` per call (one rank slower than the others).
struct sleepy_gemm {
  std::chrono::microseconds delay{0};
  template <class T>
  void sum_outer_products(const T* U, const T* V, std::size_t rows, std::size_t M, std::size_t N,
                          T* G) const {
    tcoll::hybrid::host_gemm{}.sum_outer_products(U, V, rows, M, N, G);
    std::this_thread::sleep_for(delay);
  }
};
} // namespace

TEST_CASE("calibrate_gemm_us: the slowest rank's cost per multiply-add, the same bits on every "
          "rank; bad input names the argument and the rank") {
  for (int P : {1, 2, 4}) {
    CAPTURE(P);
    std::vector<double> got(static_cast<std::size_t>(P));
    on_team(P, [&](tcoll::thread_transport& t) {
      // the last rank sleeps 20 ms per GEMM of 4 x 10 x 25 = 1000 multiply-adds: >= 20 us each
      const auto slow =
          t.rank() == P - 1 ? std::chrono::microseconds(20000) : std::chrono::microseconds(0);
      const tcoll::hybrid::gemm_calibration c{4, 10, 25, 3};
      got[static_cast<std::size_t>(t.rank())] =
          tcoll::hybrid::calibrate_gemm_us(t, sleepy_gemm{slow}, c);
      for (auto bad : {tcoll::hybrid::gemm_calibration{0, 10, 25, 3},
                       tcoll::hybrid::gemm_calibration{4, 0, 25, 3},
                       tcoll::hybrid::gemm_calibration{4, 10, 0, 3},
                       tcoll::hybrid::gemm_calibration{4, 10, 25, 0}}) {
        try {
          (void)tcoll::hybrid::calibrate_gemm_us(t, tcoll::hybrid::host_gemm{}, bad);
          FAIL("no error for a bad calibration shape");
        } catch (const tcoll::invalid_argument& e) {
          const std::string what = e.what();
          CHECK(what.find("calibrate_gemm_us") != std::string::npos);
          CHECK(what.find("rank " + std::to_string(t.rank())) != std::string::npos);
          CHECK((what.find(bad.rows == 0 ? "rows"
                           : bad.M == 0  ? "M"
                           : bad.N == 0  ? "N"
                                         : "repetitions") != std::string::npos));
        }
      }
      // still usable: a real GEMM gives a positive, finite figure
      const double us = tcoll::hybrid::calibrate_gemm_us(t);
      CHECK(us > 0.0);
      CHECK(std::isfinite(us));
    });
    for (double v : got) {
      CHECK(v >= 20.0); // the sleeping rank's figure, on every rank
      CHECK(std::memcmp(&v, &got[0], sizeof v) == 0);
    }
  }
}
