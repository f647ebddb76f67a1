#pragma once
/// \file
/// Argument checks shared by the entry points. Each names the argument and the rank.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "../core/error.hpp"

namespace tcoll::detail {

inline void check_count(std::size_t count, std::size_t multiplier, std::size_t elem_bytes,
                        const char* what, int rank) {
  const std::size_t limit =
      static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / elem_bytes;
  if (multiplier != 0 && count > limit / multiplier)
    throw invalid_argument(std::string(what) + ": count " + std::to_string(count) +
                               (multiplier > 1 ? " x " + std::to_string(multiplier) : "") +
                               " elements of " + std::to_string(elem_bytes) +
                               " bytes overflows the address space",
                           rank);
}

inline void check_pointer(const void* p, std::size_t count, const char* arg, const char* what,
                          int rank) {
  if (p == nullptr && count != 0)
    throw invalid_argument(
        std::string(what) + ": " + arg + " is null but count is " + std::to_string(count), rank);
}

/// Rejects a send range that overlaps the receive range unless the send range starts exactly
/// at `in_place_at` (the in-place form: same start for allreduce, own block for allgather).
inline void check_overlap(const void* send, std::size_t send_bytes, const void* recv,
                          std::size_t recv_bytes, const void* in_place_at, const char* what,
                          int rank) {
  if (!send || !recv || send_bytes == 0 || recv_bytes == 0 || send == in_place_at) return;
  const auto is = reinterpret_cast<std::uintptr_t>(send);
  const auto ir = reinterpret_cast<std::uintptr_t>(recv);
  if (is < ir + recv_bytes && ir < is + send_bytes)
    throw invalid_argument(std::string(what) +
                               ": sendbuf and recvbuf overlap but are not the in-place "
                               "arrangement (pass the same pointer for in place)",
                           rank);
}

inline void check_root(int root, int size, const char* what, int rank) {
  if (root < 0 || root >= size)
    throw invalid_argument(std::string(what) + ": root " + std::to_string(root) +
                               " is outside [0, " + std::to_string(size) + ")",
                           rank);
}

} // namespace tcoll::detail
