#pragma once
/// \file
/// Shared rank-level test bodies, topic: Small utilities.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "buffers.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Small utilities.

/// splitmix64: a cheap, well-mixed hash for deterministic inputs.
constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// FNV-1a style fingerprint over 8-byte words (then the tail bytes): cheap enough for
/// 2^20-element outputs on every rank.
inline std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return mix(h ^ bytes);
}

template <class T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// A printable value of any element type.
template <class T>
std::string show(const T& v) {
  std::ostringstream s;
  if constexpr (is_reduced_precision_v<T>)
    s << static_cast<float>(v) << " (0x" << std::hex << v.bits << ")";
  else if constexpr (std::is_same_v<T, symbolic::rank_set>)
    s << "rank_set{0x" << std::hex << v.bits << "}";
  else if constexpr (sizeof(T) == 1 && std::is_integral_v<T>)
    s << static_cast<int>(v);
  else if constexpr (std::is_arithmetic_v<T>)
    s << +v;
  else
    s << "?";
  return s.str();
}

/// Identifies one test case in failure messages.
struct case_id {
  std::string algorithm;
  std::string_view type;
  std::string_view op;
  std::size_t count = 0;
  int nranks = 0;
  int rank = 0;
  bool in_place = false;
  std::string str() const {
    std::ostringstream s;
    s << algorithm << " " << type << " " << op << " count=" << count << " P=" << nranks
      << " rank=" << rank << (in_place ? " in-place" : " out-of-place");
    return s.str();
  }
};

/// Compares `got` with `want` bitwise; reports the first mismatch and how many there are.
template <class T>
void check_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  std::size_t bad = 0, first = 0;
  const std::size_t n = std::min(got.size(), want.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!same_bytes(got[i], want[i]) && bad++ == 0) first = i;
  if (bad == 0 && got.size() == want.size()) {
    CHECK(true);
    return;
  }
  std::ostringstream s;
  s << what << ": " << bad << " of " << n << " elements wrong";
  if (bad)
    s << "; first at [" << first << "]: got " << show(got[first]) << ", want " << show(want[first]);
  if (got.size() != want.size()) s << "; size " << got.size() << " != " << want.size();
  FAIL_CHECK(s.str());
}

/// The message of the `invalid_argument` that `call()` throws, or "" when it throws none.
template <class Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// Tag of the test's own side-channel messages (distinct from detail::collective_tag).
inline constexpr int identity_tag = 0x7e57;

/// Every rank passes its output bytes; rank 0 receives every other rank's fingerprint by
/// plain isend/irecv and checks they equal its own. Collective over all ranks of `t`.
template <transport Tr>
void check_identical_across_ranks(Tr& t, const void* data, std::size_t bytes,
                                  const std::string& what) {
  const int P = t.size();
  if (P == 1) return;
  const std::uint64_t mine[2] = {fingerprint(data, bytes), bytes};
  const deadline when = clock::now() + t.timeout();
  if (t.rank() != 0) {
    auto req = t.isend(0, mine, sizeof mine, identity_tag);
    t.wait(req, when);
    return;
  }
  std::vector<std::uint64_t> theirs(2 * static_cast<std::size_t>(P));
  std::vector<typename Tr::request> reqs;
  reqs.reserve(P);
  for (int r = 1; r < P; ++r)
    reqs.push_back(t.irecv(r, theirs.data() + 2 * r, 2 * sizeof(std::uint64_t), identity_tag));
  for (auto& q : reqs) t.wait(q, when);
  for (int r = 1; r < P; ++r) {
    const bool same = theirs[2 * r] == mine[0] && theirs[2 * r + 1] == mine[1];
    if (same)
      CHECK(true);
    else
      FAIL_CHECK(what << ": rank " << r << "'s output differs from rank 0's (fingerprint "
                      << std::hex << theirs[2 * r] << " vs " << mine[0] << ")");
  }
}

} // namespace tcoll::testing
