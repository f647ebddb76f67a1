#pragma once
/// \file
/// Run-time choice of a planner by name ("layerwise", "single", "threshold", "ddp",
/// "mgwfbp", "adafusion", "optimal"), for tools and benchmarks.

#include <optional>
#include <string_view>
#include <variant>

#include "tcoll/plan/adafusion.hpp"
#include "tcoll/plan/ddp.hpp"
#include "tcoll/plan/layerwise.hpp"
#include "tcoll/plan/mgwfbp.hpp"
#include "tcoll/plan/optimal.hpp"
#include "tcoll/plan/single.hpp"
#include "tcoll/plan/threshold.hpp"

namespace tcoll::plan {

/// Any of the library's planners with its options.
using any_planner = std::variant<layerwise_planner, single_planner, threshold_planner, ddp_planner,
                                 mgwfbp_planner, adafusion_planner, optimal_planner>;

/// The planner called `name` with default options, or nullopt.
constexpr std::optional<any_planner> planner_by_name(std::string_view name) {
  if (name == layerwise_planner::name) return layerwise_planner{};
  if (name == single_planner::name) return single_planner{};
  if (name == threshold_planner::name) return threshold_planner{};
  if (name == ddp_planner::name) return ddp_planner{};
  if (name == mgwfbp_planner::name) return mgwfbp_planner{};
  if (name == adafusion_planner::name) return adafusion_planner{};
  if (name == optimal_planner::name) return optimal_planner{};
  return std::nullopt;
}

/// Name of the planner held.
constexpr std::string_view planner_name(const any_planner& p) {
  return std::visit([](const auto& planner) { return std::string_view(planner.name); }, p);
}

/// Plan with whichever planner is held.
template <cost_model Cost>
constexpr bucket_plan make_plan(const any_planner& p, const workload& w, const Cost& cost) {
  return std::visit([&](const auto& planner) { return planner.plan(w, cost); }, p);
}

} // namespace tcoll::plan
