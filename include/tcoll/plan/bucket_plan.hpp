#pragma once
/// \file
/// The result every fusion planner returns: bucket boundaries over the tensor sequence
/// (backward order), plus the optional per-bucket dispatch delay of planners that model
/// a fusion buffer waiting before it sends (OSF Eq. 14).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tcoll/plan/cost_model.hpp"
#include "tcoll/plan/profile.hpp"

namespace tcoll::plan {

/// Buckets over tensors 0..L-1 in backward order. Bucket k holds tensors
/// [begin(k), ends[k]); ends is strictly increasing and ends.back() == L.
struct bucket_plan {
  std::vector<std::size_t> ends;
  /// Empty, or one entry per bucket: time the bucket waits after its last tensor is
  /// ready before it may start (the fusion buffer's t_wait of OSF Eq. 14).
  std::vector<double> dispatch_delay_us;

  constexpr std::size_t bucket_count() const noexcept { return ends.size(); }
  constexpr std::size_t begin(std::size_t bucket) const noexcept {
    return bucket == 0 ? 0 : ends[bucket - 1];
  }
  constexpr std::size_t end(std::size_t bucket) const noexcept { return ends[bucket]; }
  constexpr double delay_us(std::size_t bucket) const noexcept {
    return dispatch_delay_us.empty() ? 0.0 : dispatch_delay_us[bucket];
  }
  constexpr bool operator==(const bucket_plan&) const = default;
};

/// True if `plan` partitions `tensor_count` tensors into non-empty contiguous buckets.
constexpr bool is_valid(const bucket_plan& plan, std::size_t tensor_count) noexcept {
  if (plan.ends.empty() || plan.ends.back() != tensor_count) return false;
  if (!plan.dispatch_delay_us.empty() && plan.dispatch_delay_us.size() != plan.ends.size())
    return false;
  std::size_t previous = 0;
  for (std::size_t end : plan.ends) {
    if (end <= previous) return false;
    previous = end;
  }
  for (double d : plan.dispatch_delay_us)
    if (!(d >= 0)) return false;
  return true;
}

/// Bytes of bucket `bucket`.
constexpr std::uint64_t bucket_bytes(const workload& w, const bucket_plan& plan,
                                     std::size_t bucket) noexcept {
  std::uint64_t total = 0;
  for (std::size_t i = plan.begin(bucket); i < plan.end(bucket); ++i) total += w.bytes[i];
  return total;
}

/// A fusion planner: given the workload and the cost model of one allreduce, returns
/// the buckets. Every planner is an aggregate of its tuning knobs with a `name`.
template <class P, class Cost>
concept fusion_planner = cost_model<Cost> &&
    requires(const P& planner, const workload& w, const Cost& cost) {
  { planner.plan(w, cost) } -> std::same_as<bucket_plan>;
  { P::name } -> std::convertible_to<std::string_view>;
};

namespace detail {

/// Plan from a "close a bucket after tensor k" predicate evaluated left to right.
template <class CloseAfter>
constexpr bucket_plan plan_from_closings(std::size_t tensor_count, CloseAfter&& close_after) {
  bucket_plan plan;
  for (std::size_t k = 0; k < tensor_count; ++k)
    if (k + 1 == tensor_count || close_after(k)) plan.ends.push_back(k + 1);
  return plan;
}

} // namespace detail
} // namespace tcoll::plan
