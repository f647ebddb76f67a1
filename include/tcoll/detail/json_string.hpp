#pragma once
/// \file
/// A JSON string literal writer, shared by the simulator's trace (plan/trace.hpp) and the
/// execution layer's real trace (schedule/trace.hpp), which must not include each other.
#include <ostream>
#include <string_view>

namespace tcoll::detail {

/// Writes `s` as a quoted JSON string, escaping quotes, backslashes and control characters.
inline void write_json_string(std::ostream& out, std::string_view s) {
  out << '"';
  for (char c : s) {
    switch (c) {
    case '"':
      out << "\\\"";
      break;
    case '\\':
      out << "\\\\";
      break;
    case '\n':
      out << "\\n";
      break;
    case '\t':
      out << "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        static constexpr char hex[] = "0123456789abcdef";
        out << "\\u00" << hex[(c >> 4) & 0xf] << hex[c & 0xf];
      } else {
        out << c;
      }
    }
  }
  out << '"';
}

} // namespace tcoll::detail
