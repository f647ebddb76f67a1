#pragma once
/// \file
/// Byte-threshold fusion: GradientFlow's lazy allreduce (Sec. 3.1: wait until the
/// waited tensors exceed a threshold theta) and Horovod's fusion buffer of capacity Q
/// with a cycle-time timeout as OSF models it (Eq. 12-14).

#include <cstdint>

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// How the threshold closes a bucket.
enum class threshold_rule {
  /// GradientFlow lazy allreduce: add the tensor, send once the bucket holds at least
  /// threshold_bytes. Buckets may exceed the threshold by their last tensor.
  close_at_threshold,
  /// Horovod fusion buffer (OSF Eq. 12-13): a bucket never grows past threshold_bytes
  /// (Q); it is sent when the next tensor would not fit. A tensor larger than Q
  /// travels alone.
  never_exceed,
};

/// Tuning knobs of the threshold planner. Defaults are Horovod 0.20's (the version OSF
/// measured): 64 MiB fusion buffer, 5 ms cycle time.
struct threshold_options {
  std::uint64_t threshold_bytes = 64ull << 20;
  threshold_rule rule = threshold_rule::never_exceed;
  /// OSF's timeout: a bucket is also sent when the next tensor's backward takes longer
  /// than this. <= 0 disables it.
  double timeout_us = 5000.0;
  /// Charge the buffer's waiting time of OSF Eq. 14 as a dispatch delay: `timeout_us`
  /// when the timeout fired, the next tensor's backward time when the buffer was full.
  bool charge_wait = true;
};

/// Fusion by byte threshold with optional timeout.
struct threshold_planner {
  static constexpr std::string_view name = "threshold";
  threshold_options options{};

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost&) const {
    const std::size_t n = w.size();
    const bool has_timeout = options.timeout_us > 0;
    bucket_plan result;
    std::uint64_t buffered = 0; // B of OSF Eq. 12
    for (std::size_t k = 0; k < n; ++k) {
      buffered += w.bytes[k];
      if (k + 1 == n) {
        result.ends.push_back(n);
        result.dispatch_delay_us.push_back(0.0);
        break;
      }
      // Eq. 13, with ">" for the timeout in both Eq. 12 and 13 so that the two agree.
      const bool timed_out = has_timeout && w.backward_us[k + 1] > options.timeout_us;
      const bool full = options.rule == threshold_rule::never_exceed
                            ? buffered + w.bytes[k + 1] > options.threshold_bytes
                            : buffered >= options.threshold_bytes;
      if (timed_out || full) {
        double wait = 0.0; // Eq. 14
        if (options.charge_wait) {
          if (timed_out)
            wait = options.timeout_us;
          else if (options.rule == threshold_rule::never_exceed)
            wait = w.backward_us[k + 1];
        }
        result.ends.push_back(k + 1);
        result.dispatch_delay_us.push_back(wait);
        buffered = 0;
      }
    }
    return result;
  }
};

} // namespace tcoll::plan
