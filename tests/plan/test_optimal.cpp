// The optimal planner against brute force over all 2^(L-1) contiguous bucketings.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tcoll/plan.hpp"

// The planning layer itself needs no JSON library (only plan/bench_records.hpp does).
#ifdef NLOHMANN_JSON_VERSION_MAJOR
#error "tcoll/plan.hpp pulls in nlohmann/json"
#endif

using namespace tcoll::plan;
using tcoll::algorithm_id;

namespace {

/// Simulated iteration time of every bucketing; returns the minimum.
template <class Cost>
double brute_force_best(const workload& w, const Cost& cost) {
  const std::size_t L = w.size();
  double best = -1;
  for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << (L - 1)); ++mask) {
    bucket_plan p; // bit k set: a bucket ends after tensor k
    for (std::size_t k = 0; k + 1 < L; ++k)
      if (mask >> k & 1) p.ends.push_back(k + 1);
    p.ends.push_back(L);
    const double t = iteration_time_us(w, cost, p);
    if (best < 0 || t < best) best = t;
  }
  return best;
}

workload random_workload(std::mt19937_64& rng, std::size_t L) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  workload w;
  w.forward_us = 100 * unit(rng);
  for (std::size_t k = 0; k < L; ++k) {
    // sizes over six decades, times over three: both fusing and overlapping matter
    w.bytes.push_back(static_cast<std::uint64_t>(std::pow(10.0, 1 + 6 * unit(rng))));
    w.backward_us.push_back(std::pow(10.0, 3 * unit(rng)) * (rng() % 5 == 0 ? 0.0 : 1.0));
  }
  return w;
}

} // namespace

TEST_CASE("optimal equals brute force for random profiles, L <= 14") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int cases = 0;
  for (std::size_t L = 1; L <= 14; ++L) {
    for (int repeat = 0; repeat < (L <= 10 ? 12 : 3); ++repeat) {
      const auto w = random_workload(rng, L);
      CAPTURE(L);
      CAPTURE(repeat);
      // monotone models of every shape the library has
      const linear_cost linear{1000 * unit(rng), 1e-3 * unit(rng)};
      const auto ring = flat_allreduce(algorithm_id::ring, 2 + static_cast<int>(rng() % 200),
                                       {50 * unit(rng), 1e-3 * unit(rng), 1e-5});
      const auto folded =
          flat_allreduce(algorithm_id::recursive_doubling, 3 + static_cast<int>(rng() % 60),
                         {50 * unit(rng), 1e-3 * unit(rng), 0});
      const piecewise_cost piecewise{20 * unit(rng), 50 * unit(rng), 1e-3 * unit(rng),
                                     200 + 300 * unit(rng), 45000};
      CHECK(iteration_time_us(w, linear, optimal_planner{}.plan(w, linear)) ==
            doctest::Approx(brute_force_best(w, linear)).epsilon(1e-12));
      CHECK(iteration_time_us(w, ring, optimal_planner{}.plan(w, ring)) ==
            doctest::Approx(brute_force_best(w, ring)).epsilon(1e-12));
      CHECK(iteration_time_us(w, folded, optimal_planner{}.plan(w, folded)) ==
            doctest::Approx(brute_force_best(w, folded)).epsilon(1e-12));
      // the O(L^2) path on an affine model too (plan() takes the O(L) path for those)
      CHECK(iteration_time_us(w, ring, optimal_planner{}.plan_general(w, ring)) ==
            doctest::Approx(brute_force_best(w, ring)).epsilon(1e-12));
      CHECK(iteration_time_us(w, piecewise, optimal_planner{}.plan(w, piecewise)) ==
            doctest::Approx(brute_force_best(w, piecewise)).epsilon(1e-12));
      // A non-monotone model: the exact DP without the monotone early exit still wins.
      auto bumpy = [&](double bytes) {
        return 100.0 + 50.0 * std::sin(bytes / 3e4) + 1e-4 * bytes;
      };
      const optimal_planner exhaustive{{false}};
      CHECK(iteration_time_us(w, bumpy, exhaustive.plan(w, bumpy)) ==
            doctest::Approx(brute_force_best(w, bumpy)).epsilon(1e-12));
      ++cases;
    }
  }
  CHECK(cases > 100);
}

TEST_CASE("brute force itself sees the difference between bucketings") {
  // guards the test above against a brute force that returns one fixed plan: here the
  // best bucketing (two buckets, 117 us) beats both extremes.
  const workload w{{5, 5, 5}, {1, 1, 100}, 0};
  const linear_cost c{10, 1};
  CHECK(brute_force_best(w, c) == doctest::Approx(117.0));
  CHECK(iteration_time_us(w, c, single_planner{}.plan(w, c)) == doctest::Approx(127.0));
}

TEST_CASE("the O(L) affine path and the O(L^2) path agree on long random profiles") {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int round = 0; round < 40; ++round) {
    const auto w = random_workload(rng, 50 + rng() % 400);
    const auto cost = flat_allreduce(algorithm_id::ring, 2 + static_cast<int>(rng() % 1000),
                                     {100 * unit(rng), 1e-3 * unit(rng), 1e-5});
    const double fast = iteration_time_us(w, cost, optimal_planner{}.plan(w, cost));
    const double slow = iteration_time_us(w, cost, optimal_planner{}.plan_general(w, cost));
    const double exhaustive =
        iteration_time_us(w, cost, optimal_planner{{false}}.plan_general(w, cost));
    CHECK(fast == doctest::Approx(exhaustive).epsilon(1e-12));
    CHECK(slow == doctest::Approx(exhaustive).epsilon(1e-12));
  }
}

TEST_CASE("optimal is exact for a piecewise model that drops at its threshold (issue 11)") {
  // OSF Eq. 18 fitted to real data can jump down at D_Thresh: here 100 log2(D) below
  // 4 KiB (up to 1200 us) and 10 us + 1 ns/B from there. A bucket just under the
  // threshold then costs far more than a larger one, so the monotone early exit of the
  // scan would stop before it reaches the cheap large buckets.
  const piecewise_cost drops{100.0, 0.0, 1e-3, 10.0, 4096.0};
  CHECK(drops(4095.0) > drops(4096.0) + 1000.0); // the model really drops
  CHECK_FALSE(drops.nondecreasing());
  // a continuous fit does not: the shortcut stays available for it
  CHECK(piecewise_cost{100.0, 0.0, 1e-3, 1200.0, 4096.0}.nondecreasing());
  CHECK_FALSE(piecewise_cost{-1.0, 0.0, 1e-3, 1e6, 4096.0}.nondecreasing());
  CHECK_FALSE(piecewise_cost{1.0, 0.0, -1e-3, 1e6, 4096.0}.nondecreasing());

  // a hand case: tensors of 2200, 1000, 1000 bytes ready at 0, 1e4, 2e4 us. One bucket
  // of 4200 bytes finishes at 2e4 + 10 + 4.2; any split ends with a bucket of at most
  // 2000 bytes after 2e4 (>= 2e4 + 100 log2(1000)). The scan for the last bucket sees
  // 1000 bytes (997 us), then 2000 bytes (1097 us, worse) and must not stop there.
  const workload three{{2200, 1000, 1000}, {0, 1e4, 1e4}, 0};
  const auto p = optimal_planner{}.plan(three, drops);
  CHECK(p.ends == std::vector<std::size_t>{3});
  CHECK(iteration_time_us(three, drops, p) == doctest::Approx(20014.2));
  // the user's "monotone" assertion does not override a model that reports otherwise
  CHECK(optimal_planner{{true}}.plan(three, drops).ends == std::vector<std::size_t>{3});

  // random profiles with sizes around the threshold, against brute force
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int cases = 0;
  for (std::size_t L = 1; L <= 12; ++L) {
    for (int repeat = 0; repeat < 10; ++repeat) {
      workload w;
      w.forward_us = 50 * unit(rng);
      for (std::size_t k = 0; k < L; ++k) {
        w.bytes.push_back(static_cast<std::uint64_t>(std::pow(10.0, 1.5 + 2.5 * unit(rng))));
        w.backward_us.push_back(std::pow(10.0, 3 * unit(rng)) * (rng() % 4 == 0 ? 0.0 : 1.0));
      }
      const piecewise_cost model{50 + 100 * unit(rng), 100 * unit(rng), 1e-3 * unit(rng),
                                 10 + 50 * unit(rng), 1000 + 8000 * unit(rng)};
      CAPTURE(L);
      CAPTURE(repeat);
      REQUIRE_FALSE(model.nondecreasing());
      CHECK(iteration_time_us(w, model, optimal_planner{}.plan(w, model)) ==
            doctest::Approx(brute_force_best(w, model)).epsilon(1e-12));
      CHECK(iteration_time_us(w, model, optimal_planner{}.plan_general(w, model)) ==
            doctest::Approx(brute_force_best(w, model)).epsilon(1e-12));
      ++cases;
    }
  }
  CHECK(cases == 120);
}

TEST_CASE("optimal: opaque models are scanned in full unless the caller vouches") {
  // A lambda says nothing about its shape: the default is the exact full scan.
  auto cliff = [](double bytes) { return bytes < 4096.0 ? 100.0 * std::log2(bytes) : 10.0; };
  const workload three{{2200, 1000, 1000}, {0, 1e4, 1e4}, 0}; // as in the test above
  CHECK(optimal_planner{}.plan(three, cliff).ends == std::vector<std::size_t>{3});
  CHECK(optimal_planner{{false}}.plan(three, cliff).ends == std::vector<std::size_t>{3});
}
