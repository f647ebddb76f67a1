// Planners on hand-worked examples, every planner on every profile, and the compile-time
// ResNet-50 plan.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>

#include "tcoll/plan.hpp"
#include "tcoll/plan/embedded/resnet50.hpp"

using namespace tcoll::plan;
using tcoll::algorithm_id;
using ends_t = std::vector<std::size_t>;

namespace {
workload make(std::vector<std::uint64_t> bytes, std::vector<double> backward, double forward = 0) {
  return workload{std::move(bytes), std::move(backward), forward};
}
constexpr linear_cost unit_cost{10.0, 1.0}; // T(M) = 10 + M
} // namespace

TEST_CASE("layerwise and single") {
  const auto w = make({5, 6, 7, 8}, {1, 1, 1, 1});
  CHECK(layerwise_planner{}.plan(w, unit_cost).ends == ends_t{1, 2, 3, 4});
  CHECK(single_planner{}.plan(w, unit_cost).ends == ends_t{4});
}

TEST_CASE("threshold: Horovod capacity rule (OSF Eq. 12-14) by hand") {
  const auto w = make({4, 4, 4, 10, 1}, {1, 2, 3, 4, 5});
  threshold_options o{8, threshold_rule::never_exceed, 0.0, true};
  const auto p = threshold_planner{o}.plan(w, unit_cost);
  // [4,4] (next 4 would make 12 > 8), [4] (10 would not fit), [10] (alone), [1]
  CHECK(p.ends == ends_t{2, 3, 4, 5});
  // Eq. 14: a full buffer waited for the next tensor's backward
  CHECK(p.dispatch_delay_us == std::vector<double>{3, 4, 5, 0});
  o.charge_wait = false;
  CHECK(threshold_planner{o}.plan(w, unit_cost).dispatch_delay_us ==
        std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("threshold: lazy allreduce rule (GradientFlow 3.1) by hand") {
  const auto w = make({4, 4, 4, 10, 1}, {1, 1, 1, 1, 1});
  const auto p =
      threshold_planner{{8, threshold_rule::close_at_threshold, 0.0, true}}.plan(w, unit_cost);
  CHECK(p.ends == ends_t{2, 4, 5}); // 4+4 reaches 8; 4+10 passes it; the rest
  CHECK(p.dispatch_delay_us == std::vector<double>{0, 0, 0});
}

TEST_CASE("threshold: timeout (OSF Eq. 13-14) by hand") {
  const auto w = make({1, 1, 1, 1, 1}, {1, 1, 100, 1, 1});
  const auto p =
      threshold_planner{{1000, threshold_rule::never_exceed, 50.0, true}}.plan(w, unit_cost);
  // tensor 2's backward (100) exceeds the timeout: the buffer goes after tensor 1
  CHECK(p.ends == ends_t{2, 5});
  CHECK(p.dispatch_delay_us == std::vector<double>{50, 0});
}

TEST_CASE("ddp: 1 MiB first bucket, then 25 MiB, closed once reached") {
  constexpr std::uint64_t MiB = 1 << 20;
  const auto w = make({MiB / 2, MiB * 6 / 10, 10 * MiB, 20 * MiB, MiB, 30 * MiB, 3},
                      std::vector<double>(7, 1.0));
  CHECK(ddp_planner{}.plan(w, unit_cost).ends == ends_t{2, 4, 6, 7});
}

TEST_CASE("mgwfbp: Algorithm 1 worked by hand") {
  SUBCASE("fast backward: everything merges") {
    // layers 3,2,1 = tensors 0,1,2; T = 10 + M; tau_b = [3, 2, 1, 0] for layers 0..3;
    // tau_c[3] = 1 and tau_b[1] - tau_c[3] = 1 < 10: merge 3 into 2; then tau_c[2] = 2 and
    // tau_b[0] - tau_c[2] = 1 < 10: merge 2 into 1.
    CHECK(mgwfbp_planner{}.plan(make({5, 5, 5}, {1, 1, 1}), unit_cost).ends == ends_t{3});
  }
  SUBCASE("slow backward: nothing merges") {
    // tau_b = [300, 200, 100, 0], tau_c[3] = 100, tau_c[2] = 200: both gaps are 100 >= 10
    CHECK(mgwfbp_planner{}.plan(make({5, 5, 5}, {100, 100, 100}), unit_cost).ends ==
          ends_t{1, 2, 3});
  }
  SUBCASE("mixed") {
    // tau_b = [102, 101, 1, 0]; tau_c[3] = 1, tau_c[2] = max(16, 101) = 101;
    // l = 3: 101 - 1 >= 10 keep; l = 2: 102 - 101 < 10 merge layer 2 into layer 1
    CHECK(mgwfbp_planner{}.plan(make({5, 5, 5}, {1, 100, 1}), unit_cost).ends == ends_t{1, 3});
  }
  SUBCASE("the startup knob overrides T(0)") {
    CHECK(mgwfbp_planner{{0.5}}.plan(make({5, 5, 5}, {1, 100, 1}), unit_cost).ends ==
          ends_t{1, 2, 3});
  }
}

TEST_CASE("mgwfbp is not optimal: a three-layer counterexample worked by hand") {
  // T = 10 + M; tensors (layers 3, 2, 1) of 8, 3, 1 bytes with backward 1, 8, 9 us.
  // tau_b[3..0] = 0, 1, 9, 18; tc = 18, 13, 11; tau_c[3] = 1, tau_c[2] = 19.
  // l = 3: tau_b[1] - tau_c[3] = 8 < 10, merge; now tau_c[2] = max(1, 9) = 9.
  // l = 2: tau_b[0] - tau_c[2] = 9 < 10, merge. One bucket: 18 + T(12) = 40 us.
  // Sending layer 3 alone (1 -> 19) and layers 2+1 together (19 -> 33) takes 33 us.
  const auto w = make({8, 3, 1}, {1, 8, 9});
  const auto mg = mgwfbp_planner{}.plan(w, unit_cost);
  CHECK(mg.ends == ends_t{3});
  CHECK(iteration_time_us(w, unit_cost, mg) == doctest::Approx(40.0));
  CHECK(iteration_time_us(w, unit_cost, bucket_plan{{1, 3}, {}}) == doctest::Approx(33.0));
  CHECK(iteration_time_us(w, unit_cost, optimal_planner{}.plan(w, unit_cost)) ==
        doctest::Approx(33.0));
  CHECK(iteration_time_us(w, unit_cost, layerwise_planner{}.plan(w, unit_cost)) ==
        doctest::Approx(43.0));
}

TEST_CASE("mgwfbp: the O(L) planner returns the listing's O(L^2) result") {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int merged_some = 0;
  for (int round = 0; round < 300; ++round) {
    workload w;
    w.forward_us = 100 * unit(rng);
    const std::size_t L = 1 + rng() % 120;
    for (std::size_t k = 0; k < L; ++k) {
      w.bytes.push_back(static_cast<std::uint64_t>(std::pow(10.0, 1 + 6 * unit(rng))));
      w.backward_us.push_back(std::pow(10.0, 3 * unit(rng)));
    }
    const linear_cost cost{2000 * unit(rng), 1e-3 * unit(rng)};
    const auto fast = mgwfbp_planner{}.plan(w, cost);
    CHECK(fast == tcoll::plan::detail::mgwfbp_algorithm1(w, cost, cost.startup_us, false));
    if (fast.bucket_count() > 1 && fast.bucket_count() < L) ++merged_some;
  }
  CHECK(merged_some > 30); // the comparison covered plans between the extremes
}

TEST_CASE("adafusion: Eq. 17 worked by hand") {
  // i = 1: T(10) + 1 = 21 < T(5) + T(5) = 30: fuse. i = 2: T(15) + 100 = 125 > T(10) + T(5) = 35
  CHECK(adafusion_planner{}.plan(make({5, 5, 5}, {1, 1, 100}), unit_cost).ends == ends_t{2, 3});
  // with the piecewise model: below the threshold fusing two 8-byte tensors costs
  // 1*log2(16) + 10 = 14 + wait 1 < 2 * (3 + 10) = 26
  const piecewise_cost pw{1.0, 10.0, 0.0, 1000.0, 1024.0};
  CHECK(adafusion_planner{}.plan(make({8, 8}, {0, 1}), pw).ends == ends_t{2});
}

TEST_CASE("optimal on a hand example") {
  // forward 0, backward [1, 1, 100], 5 bytes each, T = 10 + M.
  // fuse the first two (ready 2, finish 2 + 20 = 22 < 102) then the last alone:
  // 102 + 15 = 117. Any bucket containing tensor 2 and more costs >= 102 + 20.
  const auto w = make({5, 5, 5}, {1, 1, 100});
  const auto p = optimal_planner{}.plan(w, unit_cost);
  CHECK(iteration_time_us(w, unit_cost, p) == doctest::Approx(117.0));
  CHECK(p.ends.back() == 3);
  CHECK(p.ends.size() >= 2);
}

TEST_CASE("every planner returns a valid plan for every profile; optimal is never slower") {
  for (const char* model :
       {"resnet50", "vgg16", "alexnet", "googlenet", "bert_base", "gpt2_small", "resnet152"}) {
    const auto prof = load_profile(std::string(TCOLL_PROFILE_DIR) + "/" + model + ".csv");
    const auto w = make_workload(prof, compute_model{});
    for (int ranks : {3, 16, 1000}) {
      const auto cost =
          flat_allreduce(algorithm_id::recursive_halving_doubling, ranks, {20, 1e-3, 1e-5});
      const double best = iteration_time_us(w, cost, optimal_planner{}.plan(w, cost));
      for (auto name :
           {"layerwise", "single", "threshold", "ddp", "mgwfbp", "adafusion", "optimal"}) {
        CAPTURE(model);
        CAPTURE(ranks);
        CAPTURE(name);
        const auto p = make_plan(*planner_by_name(name), w, cost);
        REQUIRE(is_valid(p, w.size()));
        CHECK(best <= iteration_time_us(w, cost, p) * (1 + 1e-12));
      }
    }
  }
  CHECK_FALSE(planner_by_name("nope").has_value());
}

namespace {
constexpr auto resnet50_workload() {
  return make_workload(embedded::resnet50, compute_model{15.7e12, 0.5, 32, 4});
}
constexpr auto ten_gbe_64 = flat_allreduce(algorithm_id::ring, 64, {45.26, 8.0 / 10e3, 1e-5});

template <class Planner>
constexpr double compile_time_iteration_us(Planner planner) {
  const auto w = resnet50_workload();
  return iteration_time_us(w, ten_gbe_64, planner.plan(w, ten_gbe_64));
}
constexpr std::size_t compile_time_bucket_count(auto planner) {
  const auto w = resnet50_workload();
  return planner.plan(w, ten_gbe_64).bucket_count();
}
} // namespace

// Computed by the compiler: plans of the embedded ResNet-50.
static_assert(compile_time_bucket_count(layerwise_planner{}) == 161);
static_assert(compile_time_bucket_count(single_planner{}) == 1);
static_assert(compile_time_iteration_us(optimal_planner{}) <=
              compile_time_iteration_us(mgwfbp_planner{}));
static_assert(compile_time_iteration_us(optimal_planner{}) <=
              compile_time_iteration_us(layerwise_planner{}));
static_assert(compile_time_iteration_us(optimal_planner{}) <=
              compile_time_iteration_us(single_planner{}));
static_assert(compile_time_iteration_us(optimal_planner{}) <=
              compile_time_iteration_us(ddp_planner{}));
// With 126 startups of 2*63*45.26 us each, WFBP cannot beat one fused allreduce here.
static_assert(compile_time_iteration_us(single_planner{}) <
              compile_time_iteration_us(layerwise_planner{}));

TEST_CASE("compile-time plans agree with run-time plans") {
  constexpr double at_compile_time = compile_time_iteration_us(optimal_planner{});
  const auto w = resnet50_workload();
  CHECK(iteration_time_us(w, ten_gbe_64, optimal_planner{}.plan(w, ten_gbe_64)) == at_compile_time);
}
