#pragma once
/// \file
/// Shared rank-level test bodies, topic: Algorithms.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "inputs.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Algorithms.

/// The allreduce algorithms of the matrix, by name.
inline const std::vector<std::string>& all_algorithms() {
  static const std::vector<std::string> names = {
      "ring", "recursive_doubling", "recursive_halving_doubling", "binomial_tree", "automatic"};
  return names;
}

/// Calls f(algorithm_object) for the algorithm `name`; a non-zero `ring_segment_bytes`
/// overrides ring's (and automatic's ring's) max_segment_bytes.
template <class F>
void with_algorithm(std::string_view name, std::size_t ring_segment_bytes, F&& f) {
  ring rg{};
  if (ring_segment_bytes) rg.max_segment_bytes = ring_segment_bytes;
  if (name == "ring") {
    f(rg);
  } else if (name == "recursive_doubling") {
    f(recursive_doubling{});
  } else if (name == "recursive_halving_doubling") {
    f(recursive_halving_doubling{});
  } else if (name == "binomial_tree") {
    f(binomial_tree{});
  } else if (name == "in_segment") {
    f(in_segment{});
  } else if (name == "automatic") {
    automatic a{};
    a.ring_knobs = rg;
    f(a);
  } else {
    FAIL("unknown algorithm name in test options: " << name);
  }
}

/// Does the algorithm accept non-commutative ops? (automatic routes them to one that does.)
template <class Algo>
constexpr bool accepts_noncommutative() {
  if constexpr (requires { Algo::keeps_operand_order; })
    return Algo::keeps_operand_order;
  else
    return true;
}

template <class Algo>
std::string algorithm_label(const Algo&, std::size_t ring_segment_bytes) {
  std::string s(Algo::name);
  if (ring_segment_bytes && (std::is_same_v<Algo, ring> || std::is_same_v<Algo, automatic>))
    s += "{seg=" + std::to_string(ring_segment_bytes) + "B}";
  return s;
}

} // namespace tcoll::testing
