#pragma once
/// \file
/// Helpers of the threads suite: run a body on a `thread_team` of P ranks with a test timeout.
#include <chrono>
#include <cstddef>
#include <vector>

#include <tcoll/transport/threads.hpp>

#include "collective_cases.hpp"

namespace tcoll::testing {

/// Timeout of every blocking wait in the threads suite: long enough for sanitizer builds on
/// two cores, short enough that a hang fails the test instead of the CI job.
inline constexpr std::chrono::milliseconds team_timeout{30000};

/// Runs `f(thread_transport&)` on P rank threads.
template <class F>
void on_team(int P, F&& f) {
  thread_team(P, team_timeout).run(f);
}

/// The nccl-tests style count list of the foundation issue for P ranks.
inline std::vector<std::size_t> issue_counts(int P, bool with_large) {
  std::vector<std::size_t> c = {
      0, 1, std::size_t(P > 1 ? P - 1 : 2), std::size_t(P), std::size_t(P + 1), 1000};
  if (with_large) c.push_back((std::size_t{1} << 20) + 3);
  return c;
}

} // namespace tcoll::testing
