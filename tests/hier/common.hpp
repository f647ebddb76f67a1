#pragma once
// Shared helpers of the hierarchical / multi-ring / tensor tests: independent expectations
// (integer-valued float sums computed in double), a counting decorator that separates
// traffic inside a group from traffic across groups, and byte-wise comparisons.
#include <atomic>
#include <cstring>
#include <mutex>
#include <span>
#include <vector>

#include <tcoll/core/concepts.hpp>

namespace hier_test {

/// Integer-valued input of world rank r at element i: sums stay exact in float.
inline float value(int r, std::size_t i) {
  return static_cast<float>((r + 1) * (1 + int(i % 13)));
}
/// The exact sum over `P` ranks of `value`, computed without tcoll.
inline float expected_sum(int P, std::size_t i) {
  double s = 0;
  for (int r = 0; r < P; ++r) s += value(r, i);
  return static_cast<float>(s);
}

/// Message and byte counters of one traffic class.
struct traffic {
  std::atomic<long> messages{0};
  std::atomic<long> bytes{0};
};

/// Counts every send of the decorated transport as intra (same group) or inter traffic.
template <class Tr>
class classify {
public:
  static constexpr bool zero_copy = tcoll::transport_is_zero_copy<Tr>();
  using request = typename Tr::request;
  classify(Tr& t, std::span<const int> group_of, traffic& intra, traffic& inter)
      : t_(&t), group_of_(group_of), intra_(&intra), inter_(&inter) {}
  int rank() const { return t_->rank(); }
  int size() const { return t_->size(); }
  std::chrono::milliseconds timeout() const { return t_->timeout(); }
  request isend(int peer, const void* p, std::size_t n, int tag) {
    auto& c = group_of_[peer] == group_of_[rank()] ? *intra_ : *inter_;
    c.messages += 1;
    c.bytes += static_cast<long>(n);
    return t_->isend(peer, p, n, tag);
  }
  request irecv(int peer, void* p, std::size_t n, int tag) { return t_->irecv(peer, p, n, tag); }
  request irecv_consume(int peer, std::size_t n, int tag, tcoll::consumer c, void* s) {
    return t_->irecv_consume(peer, n, tag, c, s);
  }
  bool test(request& r) { return t_->test(r); }
  void wait(request& r, tcoll::deadline d) { t_->wait(r, d); }
  void abort() noexcept { t_->abort(); }

private:
  Tr* t_;
  std::span<const int> group_of_;
  traffic* intra_;
  traffic* inter_;
};

/// Per-rank result slots compared bytewise after the team joined.
template <class T>
struct results {
  explicit results(int P) : per_rank(static_cast<std::size_t>(P)) {}
  std::vector<std::vector<T>> per_rank;
  bool identical() const {
    for (const auto& v : per_rank)
      if (v.size() != per_rank[0].size() ||
          (v.size() && std::memcmp(v.data(), per_rank[0].data(), v.size() * sizeof(T)) != 0))
        return false;
    return true;
  }
};

/// A machine shape: group id per rank.
struct shape_case {
  const char* name;
  std::vector<int> group_of;
};

/// Consecutive groups of `g` (last one smaller).
inline std::vector<int> consecutive(int P, int g) {
  std::vector<int> v(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) v[static_cast<std::size_t>(r)] = r / g;
  return v;
}

} // namespace hier_test
