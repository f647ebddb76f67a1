#pragma once
/// \file
/// What the shared-memory transport may have left in /dev/shm (its segments are named
/// tcoll-shm-*): the suites check that nothing is.
#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>

namespace tcoll::testing {

inline std::size_t tcoll_files_in_dev_shm() {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind("tcoll-shm-", 0) == 0) ++n;
  return n;
}

} // namespace tcoll::testing
