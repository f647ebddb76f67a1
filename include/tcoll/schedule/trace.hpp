#pragma once
/// \file
/// Chrome trace (chrome://tracing, Perfetto JSON) of scheduled iterations as they really
/// ran, with Horovod's phase names: per rank (pid = rank) a "compute" track with one
/// BACKWARD slice per tensor (from the previous ready mark to its own) and a
/// "communication" track per bucket phase: WAIT_FOR_DATA (first to last tensor of the
/// bucket ready), QUEUE (ready to the start of its allreduce on the engine) and ALLREDUCE.
/// MEMCPY_IN_FUSION_BUFFER never appears: the pool is the fusion buffer (zero copy).
/// Slices carry bucket, bytes, tensors and algorithm in `args`. `plan::write_chrome_trace`
/// writes the simulator's prediction with the same names, so both open side by side.
#include <chrono>
#include <ostream>
#include <span>
#include <string>

#include "../detail/json_string.hpp"
#include "timing.hpp"

namespace tcoll {

/// One rank's iteration for `write_chrome_trace`.
struct rank_iteration {
  int rank = 0;
  iteration_timing timing;
};

namespace detail {
inline double trace_us(clock::time_point t, clock::time_point origin) {
  return std::chrono::duration<double, std::micro>(t - origin).count();
}
} // namespace detail

/// Writes the iterations of several ranks (one process per rank; pass one element for a
/// per-rank trace). Times are relative to `origin` (e.g. the earliest `timing.begin`).
inline void write_chrome_trace(std::ostream& out, std::span<const rank_iteration> ranks,
                               clock::time_point origin) {
  const auto old_precision = out.precision(12);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    out << (first ? "\n  " : ",\n  ");
    first = false;
  };
  auto slice = [&](std::string_view name, int pid, int tid, clock::time_point a,
                   clock::time_point b, const std::string& args) {
    if (a == clock::time_point{} || b == clock::time_point{} || b < a) return;
    sep();
    out << "{\"name\":";
    detail::write_json_string(out, name);
    out << ",\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << tid
        << ",\"ts\":" << detail::trace_us(a, origin) << ",\"dur\":" << detail::trace_us(b, a);
    if (!args.empty()) out << ",\"args\":" << args;
    out << '}';
  };
  for (const auto& r : ranks) {
    sep();
    out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r.rank
        << ",\"args\":{\"name\":\"rank " << r.rank << "\"}}";
    sep();
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << r.rank
        << ",\"tid\":0,\"args\":{\"name\":\"compute\"}}";
    sep();
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << r.rank
        << ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
    const auto& t = r.timing;
    auto prev = t.begin;
    for (std::size_t i = 0; i < t.tensor_ready.size(); ++i) {
      slice("BACKWARD", r.rank, 0, prev, t.tensor_ready[i],
            "{\"tensor\":" + std::to_string(i) + "}");
      if (t.tensor_ready[i] > prev) prev = t.tensor_ready[i];
    }
    for (const auto& b : t.buckets) {
      std::string args = "{\"bucket\":" + std::to_string(b.bucket) +
                         ",\"bytes\":" + std::to_string(b.bytes) +
                         ",\"tensors\":" + std::to_string(b.end_tensor - b.first_tensor) +
                         ",\"algorithm\":\"" + t.algorithm + "\"}";
      slice("WAIT_FOR_DATA", r.rank, 1, b.first_ready, b.ready, args);
      slice("QUEUE", r.rank, 1, b.ready, b.started, args);
      slice("ALLREDUCE", r.rank, 1, b.started, b.finished, args);
    }
  }
  out << "\n]}\n";
  out.precision(old_precision);
}

} // namespace tcoll
