#pragma once
/// \file
/// Reader for the machine-readable output of `bench/allreduce_perf --json`: a JSON
/// array of flat objects (algorithm, transport, ranks, dtype, op, bytes, inplace,
/// time_us, algbw_gbs, busbw_gbs, wrong, and whatever fields are added later). Unknown
/// fields are skipped, nested values included. Malformed input throws
/// std::runtime_error with the byte offset.

#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tcoll/plan/calibrate.hpp"

namespace tcoll::plan {

/// A scalar JSON value (null, bool, number or string).
using json_scalar = std::variant<std::monostate, bool, double, std::string>;
/// One flat object; nested objects/arrays are skipped and not stored.
using json_record = std::map<std::string, json_scalar, std::less<>>;

namespace detail {

class flat_json_reader {
public:
  explicit flat_json_reader(std::string_view text) : text_(text) {}

  std::vector<json_record> read_array() {
    std::vector<json_record> records;
    skip_space();
    expect('[');
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return finish(records);
    }
    for (;;) {
      skip_space();
      records.push_back(read_object());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return finish(records);
    }
  }

private:
  static constexpr int max_depth = 64;
  std::string_view text_;
  std::size_t pos_ = 0;

  std::vector<json_record> finish(std::vector<json_record>& records) {
    skip_space();
    if (pos_ != text_.size()) error("trailing characters after the array");
    return std::move(records);
  }
  [[noreturn]] void error(const std::string& why) const {
    throw std::runtime_error("bench json: offset " + std::to_string(pos_) + ": " + why);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void expect(char c) {
    if (peek() != c || pos_ >= text_.size()) error(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }

  json_record read_object() {
    json_record record;
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return record;
    }
    for (;;) {
      skip_space();
      std::string key = read_string();
      skip_space();
      expect(':');
      skip_space();
      if (peek() == '{' || peek() == '[')
        skip_nested(0);
      else
        record[key] = read_scalar();
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return record;
    }
  }

  void skip_nested(int depth) {
    if (depth > max_depth) error("nesting too deep");
    const char close = peek() == '{' ? '}' : ']';
    const bool object = close == '}';
    ++pos_;
    skip_space();
    if (peek() == close) {
      ++pos_;
      return;
    }
    for (;;) {
      skip_space();
      if (object) {
        read_string();
        skip_space();
        expect(':');
        skip_space();
      }
      if (peek() == '{' || peek() == '[')
        skip_nested(depth + 1);
      else
        read_scalar();
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(close);
      return;
    }
  }

  json_scalar read_scalar() {
    const char c = peek();
    if (c == '"') return read_string();
    if (text_.substr(pos_, 4) == "true") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "false") {
      pos_ += 5;
      return false;
    }
    if (text_.substr(pos_, 4) == "null") {
      pos_ += 4;
      return std::monostate{};
    }
    return read_number();
  }

  double read_number() {
    const std::size_t start = pos_;
    if (peek() == '-') ++pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (!digits()) error("expected a value");
    if (peek() == '.') {
      ++pos_;
      if (!digits()) error("digits expected after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digits()) error("digits expected in exponent");
    }
    try {
      return std::stod(std::string(text_.substr(start, pos_ - start)));
    } catch (const std::out_of_range&) {
      error("number out of range");
    }
  }

  std::string read_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        if (pos_ + 4 > text_.size()) error("short \\u escape");
        unsigned code = 0;
        for (int i = 0; i < 4; ++i) {
          const char h = text_[pos_++];
          code <<= 4;
          if (h >= '0' && h <= '9')
            code |= h - '0';
          else if (h >= 'a' && h <= 'f')
            code |= h - 'a' + 10;
          else if (h >= 'A' && h <= 'F')
            code |= h - 'A' + 10;
          else
            error("bad hex digit in \\u escape");
        }
        out += code < 0x80 ? static_cast<char>(code) : '?'; // names are ASCII; keep going otherwise
        break;
      }
      default:
        error("unknown escape");
      }
    }
  }
};

} // namespace detail

/// Parse a flat JSON array of flat objects.
inline std::vector<json_record> parse_json_records(std::string_view text) {
  return detail::flat_json_reader(text).read_array();
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
        throw std::runtime_error("bench json: record " + std::to_string(index) + " lacks '" +
                                 std::string(key) + "'");
      return 0.0;
    }
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    if (const auto* b = std::get_if<bool>(&it->second)) return *b ? 1.0 : 0.0;
    throw std::runtime_error("bench json: record " + std::to_string(index) + " field '" +
                             std::string(key) + "' is not a number");
  };
  auto text = [](const json_record& r, std::string_view key, std::size_t index,
                 bool required) -> std::string {
    const auto it = r.find(key);
    if (it != r.end())
      if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
    if (required)
      throw std::runtime_error("bench json: record " + std::to_string(index) + " lacks string '" +
                               std::string(key) + "'");
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
      throw std::runtime_error("bench json: record " + std::to_string(i) +
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
