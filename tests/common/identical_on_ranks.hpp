#pragma once
/// \file
/// Whether a result is bitwise identical on every rank: each rank hashes its bytes
/// (FNV-1a) and the hashes are allgathered over the transport under test.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <tcoll/tcoll.hpp>

namespace tcoll_test {

/// FNV-1a over `n` raw bytes at `p`.
inline std::uint64_t hash_bytes(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/// True when the `n` bytes at `p` hash the same on every rank of `t` (a blocking allgather
/// of the hashes on `t`).
template <class Tr>
bool identical_on_all_ranks(Tr& t, const void* p, std::size_t n) {
  const std::uint64_t mine = hash_bytes(p, n);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(t.size()));
  tcoll::allgather(t, &mine, all.data(), 1);
  return std::all_of(all.begin(), all.end(), [&](std::uint64_t h) { return h == mine; });
}

} // namespace tcoll_test
