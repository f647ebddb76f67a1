#pragma once
/// \file
/// Recursive halving-doubling allreduce (Rabenseifner): a reduce-scatter by recursive
/// halving (exchange half the current range with the partner at distance 1, 2, 4, ...),
/// then an allgather by recursive doubling in reverse. Non-powers of two fold the first 2r
/// ranks pairwise before and after (MPICH). The lower-ranked half-group is always the left
/// operand, so operand order is kept and every element is computed once then copied.
/// Cost (P a power of two): 2 log2(P) alpha + 2 (P-1)/P n beta + (P-1)/P n gamma.
#include <string_view>
#include <vector>

#include "../core/collective_table.hpp"
#include "../core/traffic.hpp"
#include "../detail/schedule.hpp"
#include "detail/fold.hpp"

namespace tcoll {

/// Rabenseifner's recursive halving-doubling allreduce (bandwidth-optimal, log latency).
struct recursive_halving_doubling {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "recursive_halving_doubling";
  static constexpr bool keeps_operand_order = true;

  /// The busiest rank's traffic (core/traffic.hpp) as an allreduce of `bytes`: reduce-
  /// scatter by recursive halving then allgather by recursive doubling on the core P' (2 lg
  /// P' full-duplex exchanges moving (P'-1)/P' n each way per phase, the halving's reduced),
  /// plus the fold (`detail::fold_traffic`).
  static constexpr rank_traffic traffic(collective, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const int core_ranks = detail::floor_pow2(ranks);
    const double p = core_ranks;
    const double rounds = 2.0 * detail::floor_log2(static_cast<std::uint64_t>(core_ranks));
    const double half = (p - 1) / p * bytes;
    const rank_traffic core{rounds, rounds, 2 * half, 2 * half, half, rounds, 2 * half};
    return core + detail::fold_traffic(bytes, ranks);
  }

  template <class Sink>
  void allreduce(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const std::size_t n = L.count;
    const fold f(L.rank, L.size);
    if (L.size == 1 || n == 0) return local_allreduce(s, n);
    if (f.folded_sender()) return f.sender_steps(s, n);
    s.reserve(0, n);
    auto whole = [n](buffer_id b) { return region{b, 0, n}; };
    buffer_id cur = buffer_id::input;
    if (f.folded_receiver()) {
      s.round_begin();
      s.recv_reduce(f.fold_partner(), whole(buffer_id::output), whole(buffer_id::input), true);
      s.round_end();
      cur = buffer_id::output;
    }
    struct exchange {
      int partner;
      std::size_t keep_lo, keep_hi, give_lo, give_hi;
    };
    // at most 31 halving steps; a fixed array keeps the executing path allocation-free
    exchange steps[32];
    int nsteps = 0;
    std::size_t lo = 0, hi = n;
    for (int mask = 1; mask < f.core_size(); mask <<= 1) {
      const int me = f.new_rank(), partner_new = me ^ mask;
      const std::size_t mid = lo + (hi - lo) / 2;
      const bool keep_low = (me & mask) == 0;
      exchange e{f.old_rank(partner_new), keep_low ? lo : mid, keep_low ? mid : hi,
                 keep_low ? mid : lo, keep_low ? hi : mid};
      steps[nsteps++] = e;
      s.round_begin();
      s.send(e.partner, region{cur, e.give_lo, e.give_hi - e.give_lo});
      s.recv_reduce(e.partner, region{buffer_id::output, e.keep_lo, e.keep_hi - e.keep_lo},
                    region{cur, e.keep_lo, e.keep_hi - e.keep_lo}, partner_new < me);
      if (mask * 2 == f.core_size())
        s.finalize(region{buffer_id::output, e.keep_lo, e.keep_hi - e.keep_lo});
      s.round_end();
      cur = buffer_id::output;
      lo = e.keep_lo;
      hi = e.keep_hi;
    }
    for (int i = nsteps - 1; i >= 0; --i) {
      const exchange& e = steps[i];
      s.round_begin();
      s.send(e.partner, region{buffer_id::output, e.keep_lo, e.keep_hi - e.keep_lo});
      s.recv(e.partner, region{buffer_id::output, e.give_lo, e.give_hi - e.give_lo});
      s.round_end();
    }
    if (f.folded_receiver()) {
      s.round_begin();
      s.send(f.fold_partner(), whole(buffer_id::output));
      s.round_end();
    }
  }
};

} // namespace tcoll
