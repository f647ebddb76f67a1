#pragma once
/// \file
/// Reader for the machine-readable output of `bench/allreduce_perf --json`: a JSON
/// array of flat objects (algorithm, transport, ranks, dtype, op, bytes, inplace,
/// time_us, algbw_gbs, busbw_gbs, wrong, and whatever fields are added later). Unknown
/// fields are skipped, nested values included. Malformed input throws
/// `tcoll::invalid_argument` with the byte offset.
///
/// Parsing is nlohmann/json's (Debian `nlohmann-json3-dev`, Meson `nlohmann_json`), an
/// optional dependency of the calibration tools only: this header is not part of
/// tcoll/plan.hpp, include it explicitly.

#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tcoll/core/error.hpp"
#include "tcoll/plan/calibrate.hpp"

namespace tcoll::plan {

/// A scalar JSON value (null, bool, number or string).
using json_scalar = std::variant<std::monostate, bool, double, std::string>;
/// One flat object; nested objects/arrays are skipped and not stored.
using json_record = std::map<std::string, json_scalar, std::less<>>;

namespace detail {
/// Deepest nesting the reader accepts (the records are flat; this bounds hostile input).
inline constexpr std::size_t max_json_depth = 64;
} // namespace detail

/// Parse a flat JSON array of flat objects (nlohmann/json underneath). Nested values are
/// skipped; anything that is not an array of objects, malformed text or nesting deeper
/// than 64 throws `tcoll::invalid_argument` (with the byte offset where the parser has one).
inline std::vector<json_record> parse_json_records(std::string_view text) {
  using nlohmann::json;
  json document;
  try {
    const json::parser_callback_t bound_depth = [](int depth, json::parse_event_t event, json&) {
      if ((event == json::parse_event_t::object_start ||
           event == json::parse_event_t::array_start) &&
          static_cast<std::size_t>(depth) >= detail::max_json_depth)
        throw tcoll::invalid_argument("bench json: nesting deeper than " +
                                      std::to_string(detail::max_json_depth));
      return true;
    };
    document = json::parse(text.begin(), text.end(), bound_depth);
  } catch (const json::parse_error& e) { // e.byte: 1-based; report the 0-based offset
    throw tcoll::invalid_argument("bench json: offset " +
                                  std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ": " + e.what());
  } catch (const json::exception& e) {
    throw tcoll::invalid_argument(std::string("bench json: ") + e.what());
  }
  if (!document.is_array())
    throw tcoll::invalid_argument("bench json: expected an array of records");
  std::vector<json_record> records;
  records.reserve(document.size());
  for (std::size_t i = 0; i < document.size(); ++i) {
    const json& object = document[i];
    if (!object.is_object())
      throw tcoll::invalid_argument("bench json: element " + std::to_string(i) +
                                    " is not an object");
    json_record record;
    for (const auto& [key, value] : object.items()) {
      if (value.is_null())
        record[key] = std::monostate{};
      else if (value.is_boolean())
        record[key] = value.get<bool>();
      else if (value.is_number())
        record[key] = value.get<double>();
      else if (value.is_string())
        record[key] = value.get<std::string>();
      // nested objects and arrays: skipped
    }
    records.push_back(std::move(record));
  }
  return records;
}

/// One allreduce_perf measurement.
struct allreduce_record {
  std::string algorithm;
  std::string transport;
  int ranks = 0;
  std::string dtype;
  std::string op;
  double bytes = 0;
  bool inplace = false;
  double time_us = 0;
  double wrong = 0;
};

/// Convert records; algorithm, ranks, bytes and time_us are required, the rest optional.
inline std::vector<allreduce_record> to_allreduce_records(std::span<const json_record> records) {
  std::vector<allreduce_record> out;
  auto number = [](const json_record& r, std::string_view key, std::size_t index,
                   bool required) -> double {
    const auto it = r.find(key);
    if (it == r.end() || std::holds_alternative<std::monostate>(it->second)) {
      if (required)
        throw tcoll::invalid_argument("bench json: record " + std::to_string(index) + " lacks '" +
                                      std::string(key) + "'");
      return 0.0;
    }
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    if (const auto* b = std::get_if<bool>(&it->second)) return *b ? 1.0 : 0.0;
    throw tcoll::invalid_argument("bench json: record " + std::to_string(index) + " field '" +
                                  std::string(key) + "' is not a number");
  };
  auto text = [](const json_record& r, std::string_view key, std::size_t index,
                 bool required) -> std::string {
    const auto it = r.find(key);
    if (it != r.end())
      if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
    if (required)
      throw tcoll::invalid_argument("bench json: record " + std::to_string(index) +
                                    " lacks string '" + std::string(key) + "'");
    return {};
  };
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    allreduce_record a;
    a.algorithm = text(r, "algorithm", i, true);
    a.transport = text(r, "transport", i, false);
    a.dtype = text(r, "dtype", i, false);
    a.op = text(r, "op", i, false);
    a.ranks = static_cast<int>(number(r, "ranks", i, true));
    a.bytes = number(r, "bytes", i, true);
    a.inplace = number(r, "inplace", i, false) != 0;
    a.time_us = number(r, "time_us", i, true);
    a.wrong = number(r, "wrong", i, false);
    if (!(a.time_us >= 0) || !(a.bytes >= 0) || a.ranks < 1)
      throw tcoll::invalid_argument("bench json: record " + std::to_string(i) +
                                    " has a negative size/time or ranks < 1");
    out.push_back(std::move(a));
  }
  return out;
}

/// Which records become calibration samples.
struct record_filter {
  std::string algorithm;  ///< empty: any
  int ranks = 0;          ///< 0: any
  std::string transport;  ///< empty: any
  int inplace = -1;       ///< -1: both, 0: out-of-place, 1: in-place
  bool skip_wrong = true; ///< drop records whose results were wrong
  double min_bytes = 1;   ///< zero-byte records carry no size information
};

inline std::vector<sample> select_samples(std::span<const allreduce_record> records,
                                          const record_filter& f) {
  std::vector<sample> out;
  for (const auto& r : records) {
    if (!f.algorithm.empty() && r.algorithm != f.algorithm) continue;
    if (f.ranks != 0 && r.ranks != f.ranks) continue;
    if (!f.transport.empty() && r.transport != f.transport) continue;
    if (f.inplace >= 0 && r.inplace != (f.inplace == 1)) continue;
    if (f.skip_wrong && r.wrong != 0) continue;
    if (r.bytes < f.min_bytes) continue;
    out.push_back({r.bytes, r.time_us});
  }
  return out;
}

} // namespace tcoll::plan
