#pragma once
/// \file
/// Model profiles: the gradient tensors of a network in the order backward produces
/// them, with element counts and forward FLOPs per sample, and the conversion to a
/// `workload` (bytes and backward time per tensor) that planners and the simulator
/// consume. Profiles come from data files (data/profiles/*.csv, parsed at run time
/// with line-numbered errors) or are embedded in code as constexpr arrays of
/// tensor_spec (include/tcoll/plan/embedded/).

#include <charconv>
#include <cstdint>
#include <fstream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tcoll/core/error.hpp"
#include "tcoll/plan/interface.hpp"
namespace tcoll::plan {

/// One gradient tensor as embedded in code (no allocation, usable in constant expressions).
struct tensor_spec {
  std::string_view name;
  std::uint64_t elements = 0;
  std::uint64_t forward_flops = 0; ///< forward FLOPs per sample of the work attributed to it
};

/// One gradient tensor as loaded from a file.
struct tensor_info {
  std::string name;
  std::uint64_t elements = 0;
  std::uint64_t forward_flops = 0;
};

/// A network: its tensors in backward order.
struct profile {
  std::string model;
  std::vector<tensor_info> tensors;

  /// Total number of parameters (sum of element counts).
  std::uint64_t parameter_count() const noexcept {
    std::uint64_t total = 0;
    for (const auto& t : tensors) total += t.elements;
    return total;
  }
};

/// Sum of element counts of an embedded profile.
constexpr std::uint64_t parameter_count(std::span<const tensor_spec> tensors) noexcept {
  std::uint64_t total = 0;
  for (const auto& t : tensors) total += t.elements;
  return total;
}

/// Thrown for malformed profile or timing files; what() is "tcoll: source:line: reason".
/// A `tcoll::invalid_argument`, like every other error of the planner.
struct profile_error : tcoll::invalid_argument {
  explicit profile_error(const std::string& what) : tcoll::invalid_argument(what) {}
};

/// How fast one worker computes: OSF Eq. 5-6 (pi, c, M).
struct compute_model {
  double peak_flops = 15.7e12;         ///< pi, FLOP/s of the accelerator (V100 FP32 by default)
  double utilization = 0.4;            ///< c, fraction of the peak the layers reach
  int batch_size = 32;                 ///< M, samples per worker per iteration
  std::uint32_t bytes_per_element = 4; ///< s, bytes per gradient element (FP32)
};

/// Build a workload from tensors with `.elements` and `.forward_flops` using OSF
/// Eq. 6: t_backward = 2 M C / (c pi) and t_forward = M C / (c pi).
template <class TensorRange>
constexpr workload make_workload(const TensorRange& tensors, compute_model compute) {
  workload w;
  const double flops_per_us = compute.peak_flops * compute.utilization / 1e6;
  for (const auto& t : tensors) {
    const double forward = compute.batch_size * static_cast<double>(t.forward_flops) / flops_per_us;
    w.bytes.push_back(t.elements * compute.bytes_per_element);
    w.backward_us.push_back(2.0 * forward);
    w.forward_us += forward;
  }
  return w;
}

constexpr workload make_workload(const profile& p, compute_model compute) {
  return make_workload(p.tensors, compute);
}

namespace detail {

inline std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

inline std::vector<std::string_view> split_commas(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(
        trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

[[noreturn]] inline void fail(std::string_view source, std::size_t line, const std::string& why) {
  throw profile_error(std::string(source) + ":" + std::to_string(line) + ": " + why);
}

inline std::uint64_t parse_count(std::string_view text, std::string_view what,
                                 std::string_view source, std::size_t line) {
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end)
    fail(source, line,
         std::string(what) + " '" + std::string(text) + "' is not a non-negative integer");
  if (ec == std::errc::result_out_of_range)
    fail(source, line, std::string(what) + " '" + std::string(text) + "' is too large");
  return value;
}

inline double parse_time(std::string_view text, std::string_view what, std::string_view source,
                         std::size_t line) {
  double value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || !(value >= 0) || value > 1e15)
    fail(source, line,
         std::string(what) + " '" + std::string(text) + "' is not a finite time >= 0");
  return value;
}

/// Calls row(fields, line_number) for every data row after checking the header line.
template <class RowHandler>
void for_each_csv_row(std::string_view text, std::string_view source,
                      std::span<const std::string_view> accepted_headers, RowHandler&& row) {
  bool seen_header = false;
  std::size_t line_number = 0;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line_number;
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.find('\0') != std::string_view::npos) fail(source, line_number, "NUL byte in line");
    if (!seen_header) {
      bool known = false;
      for (auto h : accepted_headers) known = known || line == h;
      if (!known) {
        std::string expected;
        for (auto h : accepted_headers)
          expected += (expected.empty() ? "'" : " or '") + std::string(h) + "'";
        fail(source, line_number,
             "expected header " + expected + ", got '" + std::string(line.substr(0, 80)) + "'");
      }
      seen_header = true;
      continue;
    }
    row(split_commas(line), line_number);
  }
  if (!seen_header) fail(source, line_number, "no header line (file empty or only comments)");
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw profile_error(path + ": cannot open file");
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

inline std::string stem(const std::string& path) {
  const auto slash = path.find_last_of("/\\");
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = name.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

} // namespace detail

/// Parse a profile file's text: '#' comments, the header `name,elements,forward_flops`,
/// then one row per tensor in backward order. Names must be non-empty and unique,
/// elements > 0. Throws profile_error naming `source` and the line.
inline profile parse_profile(std::string_view text, std::string model,
                             std::string_view source = "<profile>") {
  static constexpr std::string_view headers[] = {"name,elements,forward_flops"};
  profile result{std::move(model), {}};
  std::unordered_map<std::string, std::size_t> seen;
  detail::for_each_csv_row(
      text, source, headers, [&](const std::vector<std::string_view>& f, std::size_t line) {
        if (f.size() != 3)
          detail::fail(source, line,
                       "expected 3 comma-separated fields, got " + std::to_string(f.size()));
        if (f[0].empty()) detail::fail(source, line, "empty tensor name");
        tensor_info t{std::string(f[0]), detail::parse_count(f[1], "elements", source, line),
                      detail::parse_count(f[2], "forward_flops", source, line)};
        if (t.elements == 0) detail::fail(source, line, "tensor '" + t.name + "' has 0 elements");
        if (t.elements > (std::uint64_t{1} << 48))
          detail::fail(source, line, "tensor '" + t.name + "' has implausibly many elements");
        if (auto [it, fresh] = seen.emplace(t.name, line); !fresh)
          detail::fail(source, line,
                       "duplicate tensor '" + t.name + "' (first on line " +
                           std::to_string(it->second) + ")");
        result.tensors.push_back(std::move(t));
      });
  if (result.tensors.empty()) detail::fail(source, 0, "profile lists no tensors");
  return result;
}

/// Load data/profiles/<model>.csv style files; the model name is the file's stem.
inline profile load_profile(const std::string& path) {
  return parse_profile(detail::read_file(path), detail::stem(path), path);
}

/// Measured per-tensor times, e.g. from a profiler run: header `name,backward_us` or
/// `name,backward_us,forward_us`.
struct layer_timings {
  struct entry {
    double backward_us = 0;
    double forward_us = -1; ///< negative: not measured
  };
  std::unordered_map<std::string, entry> by_name;
};

inline layer_timings parse_layer_timings(std::string_view text,
                                         std::string_view source = "<timings>") {
  static constexpr std::string_view headers[] = {"name,backward_us", "name,backward_us,forward_us"};
  layer_timings result;
  detail::for_each_csv_row(
      text, source, headers, [&](const std::vector<std::string_view>& f, std::size_t line) {
        if (f.size() != 2 && f.size() != 3)
          detail::fail(source, line,
                       "expected 2 or 3 comma-separated fields, got " + std::to_string(f.size()));
        if (f[0].empty()) detail::fail(source, line, "empty tensor name");
        layer_timings::entry e{detail::parse_time(f[1], "backward_us", source, line), -1};
        if (f.size() == 3) e.forward_us = detail::parse_time(f[2], "forward_us", source, line);
        if (!result.by_name.emplace(std::string(f[0]), e).second)
          detail::fail(source, line, "duplicate tensor '" + std::string(f[0]) + "'");
      });
  return result;
}

inline layer_timings load_layer_timings(const std::string& path) {
  return parse_layer_timings(detail::read_file(path), path);
}

/// Workload from measured timings instead of FLOPs. Every profile tensor must have a
/// timing; a missing forward time is taken as half the backward time (OSF Eq. 6).
inline workload make_workload(const profile& p, const layer_timings& timings,
                              std::uint32_t bytes_per_element = 4) {
  workload w;
  for (const auto& t : p.tensors) {
    const auto it = timings.by_name.find(t.name);
    if (it == timings.by_name.end())
      throw profile_error("timings: no entry for tensor '" + t.name + "' of model " + p.model);
    w.bytes.push_back(t.elements * bytes_per_element);
    w.backward_us.push_back(it->second.backward_us);
    w.forward_us += it->second.forward_us >= 0 ? it->second.forward_us : it->second.backward_us / 2;
  }
  return w;
}

} // namespace tcoll::plan
