#pragma once
// Helpers shared by the MPI test files.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <tcoll/transport/mpi.hpp>
#include <vector>

#include "../common/identical_on_ranks.hpp"

namespace mpi_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// A transport for one test case. Short timeout: a broken test fails in seconds on every
/// rank instead of hanging the suite. Each test case makes its own, so messages a failed
/// case left behind live in that case's (freed) communicator only.
inline tcoll::mpi_transport make(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  return tcoll::mpi_transport(MPI_COMM_WORLD, timeout);
}

using tcoll_test::hash_bytes;

/// True when `bytes` at `p` hash the same on every rank (bitwise-identical replicas).
inline bool identical_on_all_ranks(const void* p, std::size_t n) {
  const std::uint64_t mine = hash_bytes(p, n);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world_size()));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (auto h : all)
    if (h != mine) return false;
  return true;
}

/// Logical AND over ranks (so every rank takes the same branch after a local check).
inline bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

} // namespace mpi_test
