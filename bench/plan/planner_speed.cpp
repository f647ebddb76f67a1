// planner_speed: wall time of every planner on a synthetic L = 1000 tensor network,
// in a communication-bound (64 ranks, 10 GbE) and a compute-bound (8 ranks, 100 Gb IB)
// setting. Target: under 1 ms per plan. Median of repeated runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tcoll/plan.hpp"

using namespace tcoll::plan;

int main(int argc, char** argv) {
  const std::size_t L = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0, 1);
  workload w;
  w.forward_us = 20000;
  for (std::size_t k = 0; k < L; ++k) {
    w.bytes.push_back(
        static_cast<std::uint64_t>(std::pow(10.0, 2 + 5 * unit(rng)))); // 100 B .. 10 MB
    w.backward_us.push_back(20 + 200 * unit(rng));
  }
  struct setting {
    const char* name;
    allreduce_cost cost;
  };
  const setting settings[] = {
      {"64 ranks 10GbE", flat_allreduce(tcoll::algorithm_id::ring, 64, {45.26, 8e-4, 1e-5})},
      {"8 ranks 100GbIB", flat_allreduce(tcoll::algorithm_id::ring, 8, {1.5, 8e-5, 1e-5})},
  };
  const char* names[] = {"layerwise", "single",    "threshold", "ddp",
                         "mgwfbp",    "adafusion", "optimal"};
  std::printf("# planner wall time, L = %zu tensors, median of 21 runs (target < 1000 us)\n", L);
  std::printf("%-18s %-10s %12s %8s\n", "setting", "planner", "time_us", "buckets");
  bool all_fast = true;
  for (const auto& s : settings) {
    for (const char* name : names) {
      const auto planner = *planner_by_name(name);
      std::vector<double> times;
      std::size_t buckets = 0;
      for (int rep = 0; rep < 21; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        const auto plan = make_plan(planner, w, s.cost);
        const auto stop = std::chrono::steady_clock::now();
        buckets = plan.bucket_count();
        times.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      all_fast = all_fast && med < 1000.0;
      std::printf("%-18s %-10s %12.1f %8zu\n", s.name, name, med, buckets);
    }
  }
  // a cost model without an affine form: the optimal planner's general O(L^2) path
  const piecewise_cost piecewise{8.0, 600.0, 1.6e-3, 700.0, 113000.0};
  for (const char* name : names) {
    const auto planner = *planner_by_name(name);
    std::vector<double> times;
    std::size_t buckets = 0;
    for (int rep = 0; rep < 21; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      const auto plan = make_plan(planner, w, piecewise);
      const auto stop = std::chrono::steady_clock::now();
      buckets = plan.bucket_count();
      times.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    all_fast = all_fast && med < 1000.0;
    std::printf("%-18s %-10s %12.1f %8zu\n", "piecewise model", name, med, buckets);
  }
  std::printf("all planners under 1 ms: %s\n", all_fast ? "yes" : "no");
  return 0;
}
