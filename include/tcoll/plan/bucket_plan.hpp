#pragma once
/// \file
/// What every fusion planner returns (`bucket_plan`, defined in interface.hpp): bucket boundaries
/// over the tensor sequence (backward order), plus the optional per-bucket dispatch delay of
/// planners that model a fusion buffer waiting before it sends (OSF Eq. 14).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tcoll/plan/cost_model.hpp"
#include "tcoll/plan/interface.hpp"
#include "tcoll/plan/profile.hpp"

namespace tcoll::plan {

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
