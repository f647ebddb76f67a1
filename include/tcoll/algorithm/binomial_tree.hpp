#pragma once
/// \file
/// Binomial tree: reduce to a root in ceil(log2 P) rounds (a rank receives from children at
/// distance 1, 2, 4, ... and then sends to its parent), broadcast back down the same tree.
/// With root 0 the lower-ranked subtree is always the left operand, so operand order is
/// kept. Cost of the allreduce: 2 ceil(log2 P) (alpha + n beta) + ceil(log2 P) n gamma
/// (MG-WFBP Table II "binary tree").
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/traffic.hpp"
#include "../detail/schedule.hpp"

namespace tcoll {

/// Binomial-tree reduce + broadcast.
struct binomial_tree {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "binomial_tree";
  static constexpr bool keeps_operand_order = true;

  /// The busiest rank's traffic (core/traffic.hpp) as `c` of `bytes` (the vector), ceil(lg
  /// P) rounds for any P, nothing overlapped. broadcast: the root sends the vector ceil(lg P)
  /// times, every other rank receives it once; reduce: the mirror image, the root reducing
  /// what it receives; allreduce: the reduce, then the broadcast (the root's sums).
  static constexpr rank_traffic traffic(collective c, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double rounds = detail::ceil_log2(static_cast<std::uint64_t>(ranks));
    if (c == collective::broadcast) return {rounds, 1.0, rounds * bytes, bytes, 0.0, 0.0, 0.0};
    if (c == collective::reduce)
      return {1.0, rounds, bytes, rounds * bytes, rounds * bytes, 0.0, 0.0};
    return {rounds, rounds, rounds * bytes, rounds * bytes, rounds * bytes, 0.0, 0.0};
  }

  template <class Sink>
  void allreduce(Sink& s, const detail::layout& L) const {
    using namespace detail;
    s.reserve(0, L.count);
    reduce_steps(s, L, 0, buffer_id::output);
    broadcast_steps(s, L, 0);
  }

  /// Reduce to `L.root`; non-root ranks accumulate in scratch (their output is unused).
  /// With a root other than 0 the tree is rotated, so the op must be commutative; the
  /// entry point routes non-commutative ops through root 0.
  template <class Sink>
  void reduce(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const bool root = L.rank == L.root;
    s.reserve(root ? 0 : L.count, L.count);
    reduce_steps(s, L, L.root, root ? buffer_id::output : buffer_id::scratch);
  }

  /// Broadcast of the output buffer from `L.root`.
  template <class Sink>
  void broadcast(Sink& s, const detail::layout& L) const {
    s.reserve(0, 0);
    broadcast_steps(s, L, L.root);
  }

  template <class Sink>
  static void reduce_steps(Sink& s, const detail::layout& L, int root, detail::buffer_id acc) {
    using namespace detail;
    const int P = L.size;
    const std::size_t n = L.count;
    const int vr = mod(L.rank - root, P);
    buffer_id cur = buffer_id::input;
    for (int mask = 1; mask < P; mask <<= 1) {
      s.round_begin();
      if (vr & mask) {
        s.send(mod(vr - mask + root, P), region{cur, 0, n});
        s.round_end();
        return;
      }
      if (vr + mask < P) {
        s.recv_reduce(mod(vr + mask + root, P), region{acc, 0, n}, region{cur, 0, n}, false);
        cur = acc;
      }
      s.round_end();
    }
    // the root: make sure the result is in acc (P == 1, or out of place with no child)
    s.round_begin();
    s.copy(region{acc, 0, n}, region{cur, 0, n});
    s.finalize(region{acc, 0, n});
    s.round_end();
  }

  template <class Sink>
  static void broadcast_steps(Sink& s, const detail::layout& L, int root) {
    using namespace detail;
    const int P = L.size;
    const region all{buffer_id::output, 0, L.count};
    const int vr = mod(L.rank - root, P);
    int mask = 1;
    while (mask < P) {
      if (vr & mask) {
        s.round_begin();
        s.recv(mod(vr - mask + root, P), all);
        s.round_end();
        break;
      }
      mask <<= 1;
    }
    s.round_begin();
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (vr + mask < P) s.send(mod(vr + mask + root, P), all);
    s.round_end();
  }
};

} // namespace tcoll
