#pragma once
/// \file
/// Chrome trace JSON (chrome://tracing, Perfetto) of a simulated timeline: one track
/// for computation (FORWARD, one BACKWARD slice per tensor), one for communication
/// (one ALLREDUCE slice per bucket). Bucket index, bytes, tensor range and the time the
/// bucket waited between being ready and starting (wait_us) are in the slices' args;
/// waits are not drawn as slices because queued buckets overlap each other and the
/// running allreduce, which one trace track cannot show.

#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "tcoll/detail/json_string.hpp"
#include "tcoll/plan/simulate.hpp"

namespace tcoll::plan {

namespace detail {

using tcoll::detail::write_json_string;

inline void write_slice(std::ostream& out, bool& first, std::string_view name, int tid,
                        double start, double duration, const std::string& args_json) {
  out << (first ? "\n  " : ",\n  ");
  first = false;
  out << "{\"name\":";
  write_json_string(out, name);
  out << ",\"ph\":\"X\",\"pid\":0,\"tid\":" << tid << ",\"ts\":" << start
      << ",\"dur\":" << duration;
  if (!args_json.empty()) out << ",\"args\":" << args_json;
  out << '}';
}

} // namespace detail

/// Write `t` as a Chrome trace. `tensor_names` (backward order) labels the BACKWARD
/// slices and the buckets' first/last tensor; it may be empty.
inline void write_chrome_trace(std::ostream& out, const timeline& t,
                               std::span<const std::string> tensor_names = {}) {
  auto name_of = [&](std::size_t k) {
    return k < tensor_names.size() ? tensor_names[k] : "tensor " + std::to_string(k);
  };
  auto quoted = [](const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') r += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) r += c;
    }
    return r + "\"";
  };
  const auto old_precision = out.precision(12);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  out << "\n  "
         "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":"
         "\"compute\"}}";
  out << ",\n  "
         "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":1,\"args\":{\"name\":"
         "\"communication\"}}";
  first = false;
  detail::write_slice(out, first, "FORWARD", 0, 0.0, t.forward_us, "");
  for (std::size_t k = 0; k < t.backward_start_us.size(); ++k)
    detail::write_slice(out, first, "BACKWARD", 0, t.backward_start_us[k],
                        t.backward_end_us[k] - t.backward_start_us[k],
                        "{\"tensor\":" + quoted(name_of(k)) + "}");
  for (std::size_t b = 0; b < t.buckets.size(); ++b) {
    const auto& e = t.buckets[b];
    const std::string args = "{\"bucket\":" + std::to_string(b) +
                             ",\"bytes\":" + std::to_string(e.bytes) +
                             ",\"tensors\":" + std::to_string(e.end_tensor - e.first_tensor) +
                             ",\"first\":" + quoted(name_of(e.first_tensor)) +
                             ",\"last\":" + quoted(name_of(e.end_tensor - 1)) +
                             ",\"wait_us\":" + std::to_string(e.wait_us()) + "}";
    detail::write_slice(out, first, "ALLREDUCE", 1, e.start_us, e.duration_us(), args);
  }
  out << "\n]}\n";
  out.precision(old_precision);
}

} // namespace tcoll::plan
