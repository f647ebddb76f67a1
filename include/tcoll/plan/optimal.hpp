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
/// For a cost model that does not decrease with the size the scan over i, from j-1
/// downward, stops once ready(j) + T(S(j) - S(i)) reaches the best value found: every
/// earlier i gives a bucket at least that large, so it cannot do better. Which models
/// get that shortcut: see `optimal_options::cost_is_monotone`. A model that drops (the
/// piecewise model of OSF Eq. 18 can drop at its threshold) is scanned in full.
///
/// For an affine model T = a + b M with b >= 0 (every allreduce algorithm's model) the
/// DP runs in O(L): F is then nondecreasing in j, so the i with F(i) <= ready(j) form a
/// prefix whose best member is its last, p(j); for i > p(j) the candidate is
/// (F(i) - b S(i)) + a + b S(j), and a monotone queue keeps the minimum of F(i) - b S(i)
/// over the window p(j) < i < j, whose ends only move right.

#include <optional>
#include <vector>

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// Tuning knob of the optimal planner.
struct optimal_options {
  /// Whether the shortcuts that are exact only for cost models nondecreasing in size
  /// may be used. nullopt (the default): ask the model. A model with `nondecreasing()`
  /// (all of tcoll's models) gets the shortcuts exactly when it says yes; a model that
  /// cannot say (a lambda) is scanned in full. true: the caller vouches for models that
  /// cannot say (a model that says no is still scanned in full). false: never.
  std::optional<bool> cost_is_monotone{};
};

/// Minimizes the simulated iteration time over all contiguous bucketings.
struct optimal_planner {
  static constexpr std::string_view name = "optimal";
  optimal_options options{};

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost& cost) const {
    if constexpr (affine_cost_model<Cost>) {
      const linear_cost line = cost.affine();
      if (shortcuts_allowed(cost) && line.per_byte_us >= 0) return plan_affine(w, line);
    }
    return plan_general(w, cost);
  }

  /// Whether the monotone shortcuts are exact for `cost` under these options.
  template <cost_model Cost>
  constexpr bool shortcuts_allowed(const Cost& cost) const {
    if (options.cost_is_monotone == false) return false;
    if constexpr (monotonicity_reporting_cost_model<Cost>)
      return static_cast<bool>(cost.nondecreasing());
    else
      return options.cost_is_monotone.value_or(false);
  }

  /// The O(L^2) dynamic program for any cost model (used directly by tests).
  template <cost_model Cost>
  constexpr bucket_plan plan_general(const workload& w, const Cost& cost) const {
    const std::size_t L = w.size();
    if (L == 0) return {};
    const auto s = prefixes(w);
    std::vector<double> finish(L + 1, 0.0);
    std::vector<std::size_t> previous_end(L + 1, 0);
    const bool monotone = shortcuts_allowed(cost);
    for (std::size_t j = 1; j <= L; ++j) {
      double best = 0.0;
      std::size_t best_i = j;
      for (std::size_t i = j; i-- > 0;) {
        const double bucket_cost = static_cast<double>(cost(s.bytes[j] - s.bytes[i]));
        if (monotone && best_i != j && s.ready[j] + bucket_cost >= best) break;
        const double start = finish[i] > s.ready[j] ? finish[i] : s.ready[j];
        const double candidate = start + bucket_cost;
        if (best_i == j || candidate < best) {
          best = candidate;
          best_i = i;
        }
      }
      finish[j] = best;
      previous_end[j] = best_i;
    }
    return from_choices(previous_end);
  }

private:
  struct prefix_sums {
    std::vector<double> ready; ///< ready[j]: backward of tensors 0..j-1 done
    std::vector<double> bytes; ///< bytes[j]: S(j)
  };

  static constexpr prefix_sums prefixes(const workload& w) {
    const std::size_t L = w.size();
    prefix_sums s{std::vector<double>(L + 1, w.forward_us), std::vector<double>(L + 1, 0.0)};
    for (std::size_t j = 1; j <= L; ++j) {
      s.ready[j] = s.ready[j - 1] + w.backward_us[j - 1];
      s.bytes[j] = s.bytes[j - 1] + static_cast<double>(w.bytes[j - 1]);
    }
    return s;
  }

  /// Walk the choices back from L to recover the bucket ends in order.
  static constexpr bucket_plan from_choices(const std::vector<std::size_t>& previous_end) {
    bucket_plan result;
    const std::size_t L = previous_end.size() - 1;
    std::size_t count = 0;
    for (std::size_t j = L; j > 0; j = previous_end[j]) ++count;
    result.ends.assign(count, 0);
    for (std::size_t j = L; j > 0; j = previous_end[j]) result.ends[--count] = j;
    return result;
  }

  static constexpr bucket_plan plan_affine(const workload& w, linear_cost line) {
    const std::size_t L = w.size();
    if (L == 0) return {};
    const auto s = prefixes(w);
    const double a = line.startup_us, b = line.per_byte_us;
    std::vector<double> finish(L + 1, 0.0), key(L + 1, 0.0); // key(i) = F(i) - b S(i)
    std::vector<std::size_t> previous_end(L + 1, 0);
    std::vector<std::size_t> queue; // window indices with increasing keys, from queue_head
    queue.reserve(L);
    std::size_t queue_head = 0;
    std::size_t last_idle = 0; // p(j): the last i with F(i) <= ready(j)
    for (std::size_t j = 1; j <= L; ++j) {
      key[j - 1] = finish[j - 1] - b * s.bytes[j - 1];
      while (queue.size() > queue_head && key[queue.back()] >= key[j - 1]) queue.pop_back();
      queue.push_back(j - 1);
      while (last_idle + 1 < j && finish[last_idle + 1] <= s.ready[j]) ++last_idle;
      while (queue_head < queue.size() && queue[queue_head] <= last_idle) ++queue_head;
      double best = s.ready[j] + a + b * (s.bytes[j] - s.bytes[last_idle]);
      std::size_t best_i = last_idle;
      if (queue_head < queue.size()) {
        const std::size_t i = queue[queue_head];
        const double candidate = key[i] + a + b * s.bytes[j];
        if (candidate < best) {
          best = candidate;
          best_i = i;
        }
      }
      finish[j] = best;
      previous_end[j] = best_i;
    }
    return from_choices(previous_end);
  }
};

} // namespace tcoll::plan
