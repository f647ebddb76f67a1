#pragma once
/// \file
/// WFBP (MG-WFBP Sec. II-C, Poseidon 3.1): every tensor is allreduced alone as soon as
/// backward produces it.

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// Wait-free backpropagation: one bucket per tensor.
struct layerwise_planner {
  static constexpr std::string_view name = "layerwise";

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost&) const {
    return detail::plan_from_closings(w.size(), [](std::size_t) { return true; });
  }
};

} // namespace tcoll::plan
