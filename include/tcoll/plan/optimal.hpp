#pragma once
/// \file
/// The optimal contiguous bucketing for the WFBP timeline.
///
/// Let ready(j) be the time backward has produced tensors 0..j-1 and S(j) their total
/// bytes. A bucket holding tensors i..j-1 that follows a bucket finishing at F(i)
/// finishes at max(F(i), ready(j)) + T(S(j) - S(i)). That expression is nondecreasing
/// in F(i), so the earliest finish over all bucketings of the first j tensors is
///   F(0) = 0,  F(j) = min_{0 <= i < j} max(F(i), ready(j)) + T(S(j) - S(i)),
/// and F(L) is the minimal iteration time: an exact O(L^2) dynamic program for any cost
/// model (tests/plan checks it against brute force over all 2^(L-1) bucketings).
///
/// For a cost model that does not decrease with the size (every model in this folder)
/// the scan over i, from j-1 downward, stops once ready(j) + T(S(j) - S(i)) reaches the
/// best value found: every earlier i gives a bucket at least that large, so it cannot
/// do better. That bound makes typical plans much cheaper than L^2/2 cost evaluations.

#include <vector>

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// Tuning knob of the optimal planner.
struct optimal_options {
  /// Allow the early exit that is exact only for cost models nondecreasing in size.
  bool cost_is_monotone = true;
};

/// Minimizes the simulated iteration time over all contiguous bucketings.
struct optimal_planner {
  static constexpr std::string_view name = "optimal";
  optimal_options options{};

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost& cost) const {
    const std::size_t L = w.size();
    bucket_plan result;
    if (L == 0) return result;
    std::vector<double> ready(L + 1, w.forward_us);
    std::vector<double> prefix_bytes(L + 1, 0.0);
    for (std::size_t j = 1; j <= L; ++j) {
      ready[j] = ready[j - 1] + w.backward_us[j - 1];
      prefix_bytes[j] = prefix_bytes[j - 1] + static_cast<double>(w.bytes[j - 1]);
    }
    std::vector<double> finish(L + 1, 0.0);
    std::vector<std::size_t> previous_end(L + 1, 0);
    for (std::size_t j = 1; j <= L; ++j) {
      double best = 0.0;
      std::size_t best_i = j;
      for (std::size_t i = j; i-- > 0;) {
        const double bucket_cost = static_cast<double>(cost(prefix_bytes[j] - prefix_bytes[i]));
        if (options.cost_is_monotone && best_i != j && ready[j] + bucket_cost >= best) break;
        const double start = finish[i] > ready[j] ? finish[i] : ready[j];
        const double candidate = start + bucket_cost;
        if (best_i == j || candidate < best) {
          best = candidate;
          best_i = i;
        }
      }
      finish[j] = best;
      previous_end[j] = best_i;
    }
    // Walk the choices back from L to recover the bucket ends in order.
    std::size_t count = 0;
    for (std::size_t j = L; j > 0; j = previous_end[j]) ++count;
    result.ends.assign(count, 0);
    for (std::size_t j = L; j > 0; j = previous_end[j]) result.ends[--count] = j;
    return result;
  }
};

} // namespace tcoll::plan
