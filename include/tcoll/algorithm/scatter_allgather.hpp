#pragma once
/// \file
/// Scatter-allgather broadcast (van de Geijn; MPICH's broadcast of long messages): the root's
/// vector is cut into P pieces, scattered down a binomial tree (each rank receives the
/// pieces of its subtree once), then every rank's piece goes round a ring (P - 1 rounds of
/// one piece each way). The root sends about n bytes instead of the binomial tree's
/// ceil(log2 P) n, every rank receives about n: for long vectors on many ranks it moves
/// less through the busiest link, at ceil(log2 P) + P - 1 messages' latency. Piece v (of
/// virtual rank v = rank - root mod P) holds elements [v c, (v + 1) c) with c = ceil(n / P);
/// pieces past the end are empty and move nothing.
#include <algorithm>
#include <cstddef>
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/traffic.hpp"
#include "../detail/schedule.hpp"

namespace tcoll {

/// Binomial scatter + ring allgather broadcast.
struct scatter_allgather {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "scatter_allgather";
  static constexpr bool keeps_operand_order = true; // reduces nothing

  /// The busiest rank's traffic (core/traffic.hpp) as a broadcast of `bytes`: the root sends
  /// ceil(lg P) scatter messages and P - 1 ring messages, (P - 1)/P n bytes each way; every
  /// other rank receives its subtree's pieces once (the most: max over v of min(lowest bit
  /// of v, P - v)) and P - 1 ring pieces. Exact when P divides the vector's elements.
  static constexpr rank_traffic traffic(collective, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double p = ranks, piece = bytes / p;
    const double rounds = detail::ceil_log2(static_cast<std::uint64_t>(ranks));
    int most_pieces = 0; // of one rank's subtree, received in the scatter
    for (int v = 1; v < ranks; ++v)
      most_pieces = std::max(most_pieces, std::min(v & -v, ranks - v));
    return {rounds + p - 1, p, 2.0 * (p - 1) * piece, (most_pieces + p - 1) * piece, 0.0, p - 1,
            (p - 1) * piece};
  }

  /// Broadcast of the output buffer from `L.root`.
  template <class Sink>
  void broadcast(Sink& s, const detail::layout& L) const {
    using namespace detail;
    s.reserve(0, 0);
    const int P = L.size;
    if (P == 1) return;
    const std::size_t n = L.count, piece = (n + static_cast<std::size_t>(P) - 1) / P;
    // pieces [first, last) of virtual ranks, as one region of the vector
    const auto pieces = [&](int first, int last) {
      const std::size_t lo = std::min(n, static_cast<std::size_t>(first) * piece),
                        hi = std::min(n, static_cast<std::size_t>(last) * piece);
      return region{buffer_id::output, lo, hi - lo};
    };
    const int vr = mod(L.rank - L.root, P);
    const auto real = [&](int v) { return mod(v + L.root, P); };
    // scatter: receive the pieces of this rank's subtree [vr, vr + mask) from its parent,
    // then hand each child its subtree's pieces, the largest first
    int mask = 1;
    while (mask < P) {
      if (vr & mask) {
        s.round_begin();
        s.recv(real(vr - mask), pieces(vr, std::min(vr + mask, P)));
        s.round_end();
        break;
      }
      mask <<= 1;
    }
    s.round_begin();
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (vr + mask < P) s.send(real(vr + mask), pieces(vr + mask, std::min(vr + 2 * mask, P)));
    s.round_end();
    // allgather round the ring: in round k, pass on piece vr - k, receive piece vr - k - 1
    const int next = real(vr + 1), prev = real(vr - 1);
    for (int k = 0; k < P - 1; ++k) {
      const int out = mod(vr - k, P), in = mod(vr - k - 1, P);
      s.round_begin();
      s.send(next, pieces(out, out + 1));
      s.recv(prev, pieces(in, in + 1));
      s.round_end();
    }
  }
};

} // namespace tcoll
