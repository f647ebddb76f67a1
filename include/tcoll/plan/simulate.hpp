#pragma once
/// \file
/// The WFBP iteration timeline (MG-WFBP Eq. 6-8, OSF Eq. 8-16) for a bucket plan:
/// forward from 0 to t_f, then backward tensor by tensor; a bucket's allreduce starts
/// when its last tensor is ready (plus its dispatch delay) and the previous bucket's
/// allreduce has finished, and takes T(bucket bytes). One allreduce runs at a time.

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tcoll/core/error.hpp"
#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// One bucket's allreduce in the timeline.
struct bucket_event {
  std::size_t first_tensor = 0; ///< first tensor index (backward order)
  std::size_t end_tensor = 0;   ///< one past the last tensor
  std::uint64_t bytes = 0;
  double ready_us = 0; ///< backward of its last tensor finished
  double start_us = 0;
  double end_us = 0;
  constexpr double wait_us() const noexcept { return start_us - ready_us; }
  constexpr double duration_us() const noexcept { return end_us - start_us; }
};

/// The simulated iteration.
struct timeline {
  double forward_us = 0;
  std::vector<double> backward_start_us; ///< per tensor (MG-WFBP tau_b)
  std::vector<double> backward_end_us;
  std::vector<bucket_event> buckets; ///< in start order
  double compute_us = 0;             ///< t_f + t_b (OSF T_comp)
  double communication_us = 0;       ///< sum of allreduce durations
  double iteration_us = 0;      ///< end of the last allreduce or of backward, whichever is later
  double non_overlapped_us = 0; ///< t_c^no = iteration - compute
  double scaling_factor = 0;    ///< OSF Eq. 3 / 11: T_comp / (T_comp + T_update - T_overlap)
  double total_wait_us = 0;     ///< sum over buckets of start - ready
};

/// Simulate one iteration. Throws `tcoll::invalid_argument` for a plan that does not
/// partition the workload's tensors.
template <cost_model Cost>
constexpr timeline simulate(const workload& w, const Cost& cost, const bucket_plan& plan) {
  if (w.backward_us.size() != w.bytes.size())
    throw tcoll::invalid_argument("simulate: workload sizes differ");
  if (!is_valid(plan, w.size()))
    throw tcoll::invalid_argument("simulate: plan does not partition the tensors");
  timeline t;
  t.forward_us = w.forward_us;
  double clock = w.forward_us;
  for (std::size_t k = 0; k < w.size(); ++k) {
    t.backward_start_us.push_back(clock);
    clock += w.backward_us[k];
    t.backward_end_us.push_back(clock);
  }
  t.compute_us = clock;
  double channel_free = 0.0;
  for (std::size_t b = 0; b < plan.bucket_count(); ++b) {
    bucket_event e;
    e.first_tensor = plan.begin(b);
    e.end_tensor = plan.end(b);
    e.bytes = bucket_bytes(w, plan, b);
    e.ready_us = t.backward_end_us[e.end_tensor - 1];
    const double earliest = e.ready_us + plan.delay_us(b);
    e.start_us = earliest > channel_free ? earliest : channel_free;
    e.end_us = e.start_us + static_cast<double>(cost(static_cast<double>(e.bytes)));
    channel_free = e.end_us;
    t.communication_us += e.duration_us();
    t.total_wait_us += e.wait_us();
    t.buckets.push_back(e);
  }
  t.iteration_us = channel_free > t.compute_us ? channel_free : t.compute_us;
  t.non_overlapped_us = t.iteration_us - t.compute_us;
  t.scaling_factor = t.iteration_us > 0 ? t.compute_us / t.iteration_us : 1.0;
  return t;
}

/// Iteration time only (what the optimal planner minimizes).
template <cost_model Cost>
constexpr double iteration_time_us(const workload& w, const Cost& cost, const bucket_plan& plan) {
  return simulate(w, cost, plan).iteration_us;
}

} // namespace tcoll::plan
