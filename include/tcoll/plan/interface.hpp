#pragma once
/// \file
/// What the execution layer sees of the planning layer: plain data, no planner. A plan's
/// buckets (`bucket_plan`), the workload and samples that autotune measures, the cost line
/// it fits, and the re-plan callback through which it reaches a planner
/// (`plan::replan_with(planner)` in `replan.hpp` makes one). `schedule/` includes this header
/// and nothing else of `plan/`, so it knows what a plan is but not how one is made.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

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

/// Per-tensor bytes and backward time (microseconds) in backward order, plus the forward
/// time: what planners and the simulator consume.
struct workload {
  std::vector<std::uint64_t> bytes;
  std::vector<double> backward_us;
  double forward_us = 0.0;

  constexpr std::size_t size() const noexcept { return bytes.size(); }
  /// t_f + t_b: the computation of one iteration (OSF T_comp).
  constexpr double compute_us() const noexcept {
    double total = forward_us;
    for (double t : backward_us) total += t;
    return total;
  }
};

/// One measurement.
struct sample {
  double bytes = 0;
  double time_us = 0;
};

/// MG-WFBP Eq. 9: T(M) = a + b M.
struct linear_cost {
  double startup_us = 0.0;  ///< a
  double per_byte_us = 0.0; ///< b
  constexpr double operator()(double bytes) const noexcept {
    return startup_us + per_byte_us * bytes;
  }
  /// Models affine in the size expose their a + b M form (planners use it for speed).
  constexpr linear_cost affine() const noexcept { return *this; }
  /// True when T does not decrease with the size (b >= 0).
  constexpr bool nondecreasing() const noexcept { return per_byte_us >= 0.0; }
};

/// What autotune measured over its iterations, handed to the re-plan callback.
struct measured_iterations {
  /// Per tensor: bytes on the wire and the median time backward took to produce it.
  workload work;
  /// Per measured job and iteration: its bytes and its communication time.
  std::vector<sample> comm;
};

/// A re-plan: the buckets, and the cost line they were planned with.
struct replan_result {
  bucket_plan plan;
  linear_cost cost;
};

/// Autotune's way to a planner: measurements in, buckets out (`plan::replan_with`).
using replan_function = std::function<replan_result(const measured_iterations&)>;

} // namespace tcoll::plan
