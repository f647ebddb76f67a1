// The optimal planner against brute force over all 2^(L-1) contiguous bucketings.
#include <doctest/doctest.h>

#include <random>

#include "tcoll/plan.hpp"

using namespace tcoll::plan;

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
      const auto ring = flat_allreduce(allreduce_algorithm::ring, 2 + static_cast<int>(rng() % 200),
                                       {50 * unit(rng), 1e-3 * unit(rng), 1e-5});
      const auto folded =
          flat_allreduce(allreduce_algorithm::recursive_doubling, 3 + static_cast<int>(rng() % 60),
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
    const auto cost = flat_allreduce(allreduce_algorithm::ring, 2 + static_cast<int>(rng() % 1000),
                                     {100 * unit(rng), 1e-3 * unit(rng), 1e-5});
    const double fast = iteration_time_us(w, cost, optimal_planner{}.plan(w, cost));
    const double slow = iteration_time_us(w, cost, optimal_planner{}.plan_general(w, cost));
    const double exhaustive =
        iteration_time_us(w, cost, optimal_planner{{false}}.plan_general(w, cost));
    CHECK(fast == doctest::Approx(exhaustive).epsilon(1e-12));
    CHECK(slow == doctest::Approx(exhaustive).epsilon(1e-12));
  }
}
