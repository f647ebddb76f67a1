#pragma once
/// \file
/// constexpr replacements for the <cmath> functions the planner needs: std::log2 and
/// std::sqrt are not constexpr in C++20, and plans must be computable at compile time.

#include <cstdint>
#include <limits>

#include "tcoll/core/traffic.hpp"

namespace tcoll::plan::detail {

/// Natural log of 2, to double precision.
inline constexpr double ln2 = 0.693147180559945309417232121458176568;

constexpr double abs(double x) noexcept {
  return x < 0 ? -x : x;
}

/// log2(x) for x > 0 to about 1 ulp. Splits x = m * 2^e with m in [1, 2), then
/// ln(m) = 2 atanh((m-1)/(m+1)); the atanh series argument is at most 1/3, so it
/// converges to double precision in ~20 terms.
constexpr double log2(double x) noexcept {
  if (!(x > 0)) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  int exponent = 0;
  while (x >= 2.0) {
    x *= 0.5;
    ++exponent;
  }
  while (x < 1.0) {
    x *= 2.0;
    --exponent;
  }
  const double z = (x - 1.0) / (x + 1.0);
  const double z2 = z * z;
  double term = z;
  double sum = 0.0;
  for (int k = 1; k < 60; k += 2) {
    const double next = sum + term / k;
    if (next == sum) break;
    sum = next;
    term *= z2;
  }
  return exponent + 2.0 * sum / ln2;
}

/// Square root by Newton iteration (for fit errors computed in constant expressions).
constexpr double sqrt(double x) noexcept {
  if (!(x > 0)) return 0.0;
  double guess = x > 1 ? x : 1.0;
  for (int i = 0; i < 200; ++i) {
    const double next = 0.5 * (guess + x / guess);
    if (next == guess) break;
    guess = next;
  }
  return guess;
}

// The integer logarithms the traffic formulas use (core/traffic.hpp), under this namespace's
// name as well.
using tcoll::detail::ceil_log2;
using tcoll::detail::floor_log2;
using tcoll::detail::is_power_of_two;

} // namespace tcoll::plan::detail
