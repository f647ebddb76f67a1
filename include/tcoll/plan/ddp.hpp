#pragma once
/// \file
/// PyTorch DistributedDataParallel's default bucketing (Reducer,
/// compute_bucket_assignment_by_size): tensors in reverse registration order (the
/// backward order of our profiles) fill a bucket until it holds at least the current
/// cap; the first bucket's cap is 1 MiB so communication starts early, later caps are
/// bucket_cap_mb = 25 MiB.

#include <cstdint>

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// DDP's bucket caps.
struct ddp_options {
  std::uint64_t first_bucket_bytes = 1ull << 20; ///< torch.distributed _DEFAULT_FIRST_BUCKET_BYTES
  std::uint64_t bucket_bytes = 25ull << 20;      ///< bucket_cap_mb = 25
};

/// PyTorch DDP default buckets.
struct ddp_planner {
  static constexpr std::string_view name = "ddp";
  ddp_options options{};

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost&) const {
    bucket_plan result;
    std::uint64_t filled = 0;
    std::uint64_t cap = options.first_bucket_bytes;
    for (std::size_t k = 0; k < w.size(); ++k) {
      filled += w.bytes[k];
      if (k + 1 == w.size() || filled >= cap) {
        result.ends.push_back(k + 1);
        filled = 0;
        cap = options.bucket_bytes;
      }
    }
    return result;
  }
};

} // namespace tcoll::plan
