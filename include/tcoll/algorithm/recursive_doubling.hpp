#pragma once
/// \file
/// Recursive doubling allreduce (Thakur, Rabenseifner & Gropp 2005): in log2(P) steps each
/// rank exchanges its whole buffer with the partner at distance 1, 2, 4, ... and combines.
/// Non-powers of two fold the first 2r ranks pairwise before and after (MPICH).
/// The lower-ranked group is always the left operand, so every rank computes the same
/// expression and operand order is kept (non-commutative ops are allowed).
/// Cost: log2(P) (alpha + n beta + n gamma), plus 2 (alpha + n beta) + n gamma if P is not
/// a power of two.
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/traffic.hpp"
#include "../detail/schedule.hpp"
#include "detail/fold.hpp"

namespace tcoll {

/// Recursive doubling allreduce (latency-optimal for small messages).
struct recursive_doubling {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "recursive_doubling";
  static constexpr bool keeps_operand_order = true;

  /// The busiest rank's traffic (core/traffic.hpp) as an allreduce of `bytes`: lg P'
  /// full-duplex exchanges of the whole vector on the core P' = 2^floor(lg P), each reduced,
  /// plus the fold (`detail::fold_traffic`).
  static constexpr rank_traffic traffic(collective, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double rounds = detail::floor_log2(static_cast<std::uint64_t>(ranks));
    const rank_traffic core{rounds,         rounds, rounds * bytes, rounds * bytes,
                            rounds * bytes, rounds, rounds * bytes};
    return core + detail::fold_traffic(bytes, ranks);
  }

  template <class Sink>
  void allreduce(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const std::size_t n = L.count;
    const fold f(L.rank, L.size);
    // Ping-pong between output and scratch so no rank writes what a partner is reading;
    // start so the last write lands in the output. In place, the first write must not hit
    // the input a partner is reading, so an odd count ends with a copy out of scratch.
    const int writes = f.core_steps() + (f.folded_receiver() ? 1 : 0);
    const bool copy_out = L.in_place && writes % 2 == 1;
    // scratch is needed only when results ping-pong (two or more writes) or end in it
    if (L.size == 1 || n == 0) return local_allreduce(s, n);
    s.reserve(writes >= 2 || copy_out ? n : 0, n);
    buffer_id cur = buffer_id::input;
    buffer_id next = writes % 2 == 1 && !copy_out ? buffer_id::output : buffer_id::scratch;
    auto whole = [n](buffer_id b) { return region{b, 0, n}; };
    auto advance = [&] {
      cur = next;
      next = next == buffer_id::output ? buffer_id::scratch : buffer_id::output;
    };
    if (f.folded_sender()) return f.sender_steps(s, n);
    if (f.folded_receiver()) {
      s.round_begin();
      s.recv_reduce(f.fold_partner(), whole(next), whole(cur), true); // partner is lower
      s.round_end();
      advance();
    }
    for (int mask = 1; mask < f.core_size(); mask <<= 1) {
      const int partner_new = f.new_rank() ^ mask;
      const int partner = f.old_rank(partner_new);
      s.round_begin();
      s.send(partner, whole(cur));
      s.recv_reduce(partner, whole(next), whole(cur), partner_new < f.new_rank());
      s.round_end();
      advance();
    }
    s.round_begin();
    if (copy_out) s.copy(whole(buffer_id::output), whole(buffer_id::scratch));
    s.finalize(whole(buffer_id::output));
    s.round_end();
    if (f.folded_receiver()) {
      s.round_begin();
      s.send(f.fold_partner(), whole(buffer_id::output));
      s.round_end();
    }
  }
};

} // namespace tcoll
