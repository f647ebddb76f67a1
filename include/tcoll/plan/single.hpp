#pragma once
/// \file
/// SyncEASGD (You et al., as MG-WFBP Sec. I describes it): all gradients in one
/// allreduce after backward finishes.

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// One bucket holding every tensor; communication starts when backward ends.
struct single_planner {
  static constexpr std::string_view name = "single";

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost&) const {
    return detail::plan_from_closings(w.size(), [](std::size_t) { return false; });
  }
};

} // namespace tcoll::plan
