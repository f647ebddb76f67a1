#pragma once
/// \file
/// Folding a non-power-of-two rank count onto its largest power of two P' (MPICH): with
/// r = P - P', ranks 0..2r-1 pair up (2i, 2i+1); the even rank hands its data to the odd
/// one and sits out; the survivors are renumbered 0..P'-1 in rank order, so contiguous
/// blocks of new ranks are contiguous blocks of old ranks (operand order is kept).
#include "../../core/traffic.hpp"
#include "../../detail/schedule.hpp"

namespace tcoll::detail {

/// The fold's traffic on its busiest rank (a core rank with an extra partner): it receives
/// the partner's whole vector and reduces it before the core runs, and sends the whole
/// result back afterwards; neither overlaps anything. Nothing for a power of two.
constexpr rank_traffic fold_traffic(double bytes, int ranks) noexcept {
  if (ranks <= 1 || is_power_of_two(static_cast<std::uint64_t>(ranks))) return {};
  return {1.0, 1.0, bytes, bytes, bytes, 0.0, 0.0};
}

class fold {
public:
  constexpr fold(int rank, int size)
      : rank_(rank), size_(size), core_(floor_pow2(size)), extra_(size - core_) {}
  /// P', the number of ranks that run the power-of-two core.
  constexpr int core_size() const { return core_; }
  constexpr int core_steps() const {
    int s = 0;
    for (int m = 1; m < core_; m <<= 1) ++s;
    return s;
  }
  /// An even rank below 2r: sends its data away and receives the result at the end.
  constexpr bool folded_sender() const { return rank_ < 2 * extra_ && rank_ % 2 == 0; }
  /// An odd rank below 2r: absorbs its even partner's data.
  constexpr bool folded_receiver() const { return rank_ < 2 * extra_ && rank_ % 2 == 1; }
  constexpr int fold_partner() const { return rank_ % 2 == 0 ? rank_ + 1 : rank_ - 1; }
  /// Rank within the core (-1 for a folded sender).
  constexpr int new_rank() const {
    if (folded_sender()) return -1;
    return rank_ < 2 * extra_ ? rank_ / 2 : rank_ - extra_;
  }
  /// The original rank of core member `nr`.
  constexpr int old_rank(int nr) const { return nr < extra_ ? nr * 2 + 1 : nr + extra_; }

  /// The whole part of a folded sender: hand the input to the partner, receive the result.
  template <class Sink>
  void sender_steps(Sink& s, std::size_t n) const {
    s.round_begin();
    s.send(fold_partner(), region{buffer_id::input, 0, n});
    s.round_end();
    s.round_begin();
    s.recv(fold_partner(), region{buffer_id::output, 0, n});
    s.round_end();
  }

private:
  int rank_, size_, core_, extra_;
};

} // namespace tcoll::detail
