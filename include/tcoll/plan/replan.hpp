#pragma once
/// \file
/// The planning side of autotune: `replan_with(planner)` makes the re-plan callback that the
/// execution layer's iteration driver calls once it has measured its iterations. The
/// callback fits a cost line to the measured jobs (`fit_autotune_cost`) and runs the
/// planner on the measured workload.
#include <span>
#include <stdexcept>

#include "tcoll/plan/any_planner.hpp"
#include "tcoll/plan/calibrate.hpp"
#include "tcoll/plan/interface.hpp"

namespace tcoll::plan {

/// Autotune's cost line: a least-squares fit of the measured (bytes, us) samples, or with
/// a single size a line through the origin; both parts clamped to >= 0.
inline linear_cost fit_autotune_cost(std::span<const sample> samples) {
  linear_cost cost{};
  try {
    cost = fit_linear(samples);
  } catch (const tcoll::invalid_argument&) { // one size only: a line through the origin
    double bytes = 0, us = 0;
    for (const auto& s : samples) bytes += s.bytes, us += s.time_us;
    cost = {0.0, bytes > 0 ? us / bytes : 0.0};
  }
  cost.startup_us = std::max(0.0, cost.startup_us);
  cost.per_byte_us = std::max(0.0, cost.per_byte_us);
  return cost;
}

/// The re-plan callback of autotune (`scheduler_options::autotune_replan` and the adaptors'
/// options): fits `fit_autotune_cost` to the measured jobs and plans the measured workload
/// with `planner` (any of tcoll's planners; `optimal_planner` by default).
inline replan_function replan_with(any_planner planner = optimal_planner{}) {
  return [planner = std::move(planner)](const measured_iterations& m) {
    const linear_cost cost = fit_autotune_cost(m.comm);
    return replan_result{make_plan(planner, m.work, cost), cost};
  };
}

} // namespace tcoll::plan
