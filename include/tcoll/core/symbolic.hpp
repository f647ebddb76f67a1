#pragma once
/// \file
/// A symbolic element type for proving algorithms correct: each element holds the set of
/// ranks whose contribution it contains. The reduction is a disjoint union; a contribution
/// arriving twice sets a poison bit that survives every later union, so a final check can
/// tell "every rank exactly once" from "some rank twice" or "some rank missing".
#include <bit>
#include <cstdint>
#include <string_view>

namespace tcoll::symbolic {

/// The set of contributing ranks of one element (ranks 0..62; bit 63 marks a duplicate).
struct rank_set {
  std::uint64_t bits = 0;
  static constexpr std::uint64_t duplicate_bit = std::uint64_t{1} << 63;
  static constexpr int max_ranks = 63;

  /// The contribution of a single rank.
  static constexpr rank_set of(int rank) { return {std::uint64_t{1} << rank}; }
  /// Every rank 0..nranks-1, each once, and no duplicate.
  static constexpr rank_set all(int nranks) {
    return {nranks >= 64 ? ~std::uint64_t{0} >> 1 : (std::uint64_t{1} << nranks) - 1};
  }
  constexpr bool has_duplicate() const { return (bits & duplicate_bit) != 0; }
  constexpr int count() const { return std::popcount(bits & ~duplicate_bit); }
  friend constexpr bool operator==(rank_set a, rank_set b) = default;
};

/// Disjoint union. Commutative and associative, so every algorithm may use it; it still
/// proves operand order is irrelevant only for the set, not for the order of combination.
struct disjoint_union {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "disjoint_union";
  constexpr rank_set operator()(rank_set a, rank_set b) const {
    const std::uint64_t overlap = (a.bits & b.bits) & ~rank_set::duplicate_bit;
    return {a.bits | b.bits | (overlap ? rank_set::duplicate_bit : 0)};
  }
};

} // namespace tcoll::symbolic
