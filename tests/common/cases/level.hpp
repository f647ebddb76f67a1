#pragma once
/// \file
/// Shared rank-level test bodies, topic: Test level: how much of the matrix to run.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <doctest/doctest.h>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tcoll/tcoll.hpp>
#include <tcoll/transport/counting.hpp>
#include <type_traits>
#include <vector>

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Test level: how much of the matrix to run.

/// quick: sanitizer builds (chosen automatically) or TCOLL_TEST_LEVEL=quick;
/// normal: the default; long: TCOLL_TEST_LEVEL=long (meson option long_tests).
enum class test_level { quick, normal, long_sweep };

/// True when compiled with AddressSanitizer or ThreadSanitizer (GCC and Clang spellings).
constexpr bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

/// The level from TCOLL_TEST_LEVEL (quick|normal|long), defaulting to quick under a
/// sanitizer and normal otherwise.
inline test_level level() {
  if (const char* env = std::getenv("TCOLL_TEST_LEVEL")) {
    const std::string_view v(env);
    if (v == "quick") return test_level::quick;
    if (v == "long") return test_level::long_sweep;
    if (v == "normal") return test_level::normal;
  }
  return under_sanitizer() ? test_level::quick : test_level::normal;
}

} // namespace tcoll::testing
