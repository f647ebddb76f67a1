#pragma once
/// \file
/// Pipelined chain broadcast (Open MPI's `pipeline`, tuned bcast algorithm 3): the ranks form
/// a chain from the root (virtual rank v = rank - root mod P passes to v + 1), and the vector
/// travels down it in segments of `segment_bytes`, so that while rank v forwards segment s,
/// rank v + 1 forwards segment s - 1. Every rank but the last sends the vector once and
/// every rank but the root receives it once: with S segments the broadcast takes S + P - 2
/// rounds of one segment, about n beta for long vectors whatever P (the binomial tree's root
/// sends ceil(log2 P) n, scatter_allgather moves 2 (P - 1)/P n), at P - 2 more rounds of
/// latency than segments. For short vectors the P - 1 hops lose to the tree.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/traffic.hpp"
#include "../detail/schedule.hpp"

namespace tcoll {

/// Pipelined chain broadcast. Tuning knobs are the members.
struct chain {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "chain";
  static constexpr bool keeps_operand_order = true; // reduces nothing

  /// The default segment: at least one element; the last segment may be shorter.
  static constexpr std::size_t default_segment_bytes = std::size_t{1} << 20;
  /// Bytes per message down the chain.
  std::size_t segment_bytes = default_segment_bytes;

  /// The busiest rank's traffic (core/traffic.hpp) as a broadcast of `bytes` in segments of
  /// `default_segment_bytes`: S = ceil(bytes / segment) messages each way on a rank inside
  /// the chain, the vector once each way, S - 1 rounds that receive one segment while
  /// sending the previous one. Exact when the segment is a whole number of elements. The
  /// P - 2 rounds that fill the pipeline are on the last rank's path, not the busiest rank's,
  /// so for short vectors on many ranks the formula is below the chain's latency.
  static constexpr rank_traffic traffic(collective, double bytes, int ranks) noexcept {
    if (ranks <= 1 || bytes <= 0) return {};
    const double segment = static_cast<double>(default_segment_bytes);
    const double whole = static_cast<double>(static_cast<std::uint64_t>(bytes / segment));
    const double segments = whole * segment < bytes ? whole + 1 : whole; // ceil, constexpr
    if (ranks == 2) return {segments, segments, bytes, bytes, 0.0, 0.0, 0.0};
    return {segments, segments, bytes, bytes, 0.0, segments - 1, bytes - std::min(bytes, segment)};
  }

  /// Broadcast of the output buffer from `L.root`.
  template <class Sink>
  void broadcast(Sink& s, const detail::layout& L) const {
    using namespace detail;
    s.reserve(0, 0);
    const int P = L.size;
    const std::size_t n = L.count;
    if (P == 1 || n == 0) return;
    const std::size_t per =
        std::max<std::size_t>(1, segment_bytes / std::max<std::size_t>(1, L.elem_bytes));
    const auto S = static_cast<long>((n + per - 1) / per);
    const auto segment = [&](long k) {
      const std::size_t lo = static_cast<std::size_t>(k) * per;
      return region{buffer_id::output, lo, std::min(per, n - lo)};
    };
    const int v = mod(L.rank - L.root, P);
    const int next = mod(L.rank + 1, P), prev = mod(L.rank - 1, P);
    const bool sends = v < P - 1;
    const bool receives = v > 0;
    // round t: send segment t - v on, receive segment t - v + 1; each forwarded segment
    // arrived in an earlier round (a round's steps complete at its end)
    const long first = receives ? v - 1 : v, last = sends ? v + S - 1 : v + S - 2;
    for (long t = first; t <= last; ++t) {
      s.round_begin();
      if (const long k = t - v; sends && k >= 0 && k < S) s.send(next, segment(k));
      if (const long k = t - v + 1; receives && k >= 0 && k < S) s.recv(prev, segment(k));
      s.round_end();
    }
  }
};

} // namespace tcoll
