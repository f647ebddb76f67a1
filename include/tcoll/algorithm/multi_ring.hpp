#pragma once
/// \file
/// Multi-ring allreduce (MXNET-MPI Sec. 6.3.2 and Figure 9): the buffer is split into K
/// parts and each part is allreduced by its own ring; the K rings advance together, step i
/// of every ring in one round. Within a round the transfers of all rings are in flight at
/// once, so the receiver reduces ring 0's chunk while ring 1's chunk is still on the wire,
/// which a single ring cannot do (its next step depends on the reduction it just did).
/// Ring k may run in the opposite direction (r -> r-1), which puts both directions of every
/// full-duplex link to work.
/// Cost: 2(P-1) alpha_K + 2(P-1)/P n beta + (P-1)/P n gamma / K (only the last ring's
/// reduction of each step is exposed), with alpha_K = alpha + (K-1) alpha_overhead.
#include <algorithm>
#include <cstddef>
#include <string_view>

#include "../core/collective_table.hpp"
#include "../detail/schedule.hpp"
#include "ring.hpp"

namespace tcoll {

/// Direction of the rings of a `multi_ring`.
enum class ring_order {
  forward,   ///< every ring sends r -> r+1
  alternate, ///< even rings r -> r+1, odd rings r -> r-1
};

/// K rings over K parts of the buffer. Tuning knobs are the members.
struct multi_ring {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "multi_ring";
  /// Rings reorder operands like ring: commutative ops only.
  static constexpr bool keeps_operand_order = false;

  /// Number of rings K (>= 1; 1 is the plain ring).
  int rings = 2;
  /// Directions of the rings.
  ring_order order = ring_order::alternate;
  /// Largest message; a chunk larger than this travels as several segments.
  std::size_t max_segment_bytes = ring{}.max_segment_bytes;

  template <class Sink>
  void allreduce(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const int P = L.size, K = std::max(1, rings);
    const std::size_t n = L.count;
    if (P == 1 || n == 0) return local_allreduce(s, n);
    const std::size_t seg = ring{max_segment_bytes}.segment_elems(L);
    // staging: one round receives the largest chunk of every ring
    std::size_t staging = 0;
    for (int k = 0; k < K; ++k) staging += chunk_size(chunk_size(n, K, k), P, 0);
    s.reserve(0, staging);

    auto geometry = [&](int k) {
      const bool reverse = order == ring_order::alternate && k % 2 == 1;
      return ring_geometry{P, reverse ? mod(-L.rank, P) : L.rank, reverse, chunk_begin(n, K, k),
                           chunk_size(n, K, k)};
    };
    // Reduce-scatter: step i of ring k sends chunk q-i-1 and reduces chunk q-i-2 (q = this
    // rank's position on ring k); step 0 reads the input.
    for (int i = 0; i < P - 1; ++i) {
      s.round_begin();
      for (int k = 0; k < K; ++k) {
        const ring_geometry g = geometry(k);
        const buffer_id from = i == 0 ? buffer_id::input : buffer_id::output;
        ring::segments(g.chunk(from, g.q - i - 1), seg, [&](region r) { s.send(g.right(), r); });
      }
      for (int k = 0; k < K; ++k) {
        const ring_geometry g = geometry(k);
        ring::segments(g.chunk(buffer_id::output, g.q - i - 2), seg, [&](region r) {
          s.recv_reduce(g.left(), r, region{buffer_id::input, r.offset, r.count}, true);
        });
      }
      if (i == P - 2)
        for (int k = 0; k < K; ++k) s.finalize(geometry(k).chunk(buffer_id::output, geometry(k).q));
      s.round_end();
    }
    // Allgather: step i of ring k sends chunk q-i and receives chunk q-i-1.
    for (int i = 0; i < P - 1; ++i) {
      s.round_begin();
      for (int k = 0; k < K; ++k) {
        const ring_geometry g = geometry(k);
        ring::segments(g.chunk(buffer_id::output, g.q - i), seg,
                       [&](region r) { s.send(g.right(), r); });
      }
      for (int k = 0; k < K; ++k) {
        const ring_geometry g = geometry(k);
        ring::segments(g.chunk(buffer_id::output, g.q - i - 1), seg,
                       [&](region r) { s.recv(g.left(), r); });
      }
      s.round_end();
    }
  }

private:
  /// One ring: this rank's position q, the direction, and the part of the buffer it owns.
  struct ring_geometry {
    int P;
    int q;
    bool reverse;
    std::size_t offset;
    std::size_t count;
    int rank_at(int position) const {
      const int p = detail::mod(position, P);
      return reverse ? detail::mod(-p, P) : p;
    }
    int right() const { return rank_at(q + 1); }
    int left() const { return rank_at(q - 1); }
    detail::region chunk(detail::buffer_id b, int c) const {
      const int cc = detail::mod(c, P);
      return {b, offset + detail::chunk_begin(count, P, cc), detail::chunk_size(count, P, cc)};
    }
  };
};

} // namespace tcoll
