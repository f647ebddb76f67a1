#pragma once
/// \file
/// The op a phase of a composed algorithm (hierarchical, tensor) runs with. A composed
/// algorithm runs inner collectives over sub-transports whose `size()` is not the total
/// rank count, so a finalizing op (avg) must only accumulate inside them and be finalized
/// once with the true count at the end. avg accumulates with sum, so it maps to `sum_op`
/// (which every reducer supports); other finalizing ops are wrapped.
#include <string_view>
#include <type_traits>

#include "../../core/ops.hpp"

namespace tcoll::detail {

/// `Op` without its finalize step.
template <class Op>
struct accumulate_only {
  Op op;
  static constexpr bool commutative = commutative_op<Op>;
  static constexpr std::string_view name = Op::name;
  template <class A>
  constexpr A operator()(A a, A b) const {
    return op(a, b);
  }
};

/// The accumulate-only form of `op`: `op` itself unless it finalizes.
template <class Op>
constexpr auto phase_op(const Op& op) {
  if constexpr (!finalizing_op<Op>)
    return op;
  else if constexpr (std::is_same_v<Op, avg_op>)
    return sum_op{};
  else
    return accumulate_only<Op>{op};
}

template <class Op>
using phase_op_t = decltype(phase_op(std::declval<const Op&>()));

} // namespace tcoll::detail
