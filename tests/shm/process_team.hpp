#pragma once
/// \file
/// The team of a test started by process_team_main.cpp: this process's rank, the team's
/// size, and a store every rank reaches. `bootstrap(label)` makes the set-up channel of one
/// transport; every rank calls it in the same order (each call gets its own key prefix).
#include <cstdlib>
#include <memory>
#include <string>

#include <tcoll/transport/bootstrap.hpp>

namespace tcoll::testing::process_team {

inline int rank() {
  return std::atoi(std::getenv("TCOLL_TEST_RANK"));
}
inline int size() {
  return std::atoi(std::getenv("TCOLL_TEST_NP"));
}
inline tcoll::file_store& store() {
  static tcoll::file_store s(std::getenv("TCOLL_TEST_STORE"), std::chrono::seconds(30));
  return s;
}
/// A bootstrap of the whole team under a fresh prefix (the same on every rank).
inline std::unique_ptr<tcoll::bootstrap> bootstrap() {
  static int made = 0;
  return std::make_unique<tcoll::store_bootstrap<tcoll::file_store>>(
      store(), rank(), size(), "team" + std::to_string(made++));
}

} // namespace tcoll::testing::process_team
