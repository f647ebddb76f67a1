#pragma once
/// \file
/// adaFusion (OSF Sec. 4.2, Eq. 17): walking backward order, tensor i joins the current
/// buffer B only if
///   t_update(B + D_i) + t_wait_i < t_update(B) + t_update(D_i),
/// i.e. fusing saves more allreduce time than the buffer spends waiting for tensor i.
/// OSF pairs it with the piecewise model of Eq. 18 (`piecewise_cost`), but any cost
/// model works. t_wait_i is the backward time of tensor i: the buffer could have been
/// sent when the previous tensor was ready and must now wait until tensor i is.

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// Tuning knob: a multiplier on the waiting time in Eq. 17 (1 = as published).
struct adafusion_options {
  double wait_weight = 1.0;
};

/// OSF adaptive tensor fusion.
struct adafusion_planner {
  static constexpr std::string_view name = "adafusion";
  adafusion_options options{};

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost& cost) const {
    bucket_plan result;
    if (w.size() == 0) return result;
    double buffered = static_cast<double>(w.bytes[0]);
    for (std::size_t i = 1; i < w.size(); ++i) {
      const double d = static_cast<double>(w.bytes[i]);
      const double fused =
          static_cast<double>(cost(buffered + d)) + options.wait_weight * w.backward_us[i];
      const double separate = static_cast<double>(cost(buffered)) + static_cast<double>(cost(d));
      if (fused < separate) {
        buffered += d;
      } else {
        result.ends.push_back(i);
        buffered = d;
      }
    }
    result.ends.push_back(w.size());
    return result;
  }
};

} // namespace tcoll::plan
