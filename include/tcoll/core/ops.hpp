#pragma once
/// \file
/// Reduction operations. An op is a stateless functor over the accumulator type with a
/// `commutative` trait; algorithms that reorder operands reject non-commutative ops at
/// compile time (see `commutative_op`).
#include <algorithm>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "types.hpp"

namespace tcoll {

namespace detail {
/// Integer addition/multiplication that wraps instead of invoking signed-overflow UB.
template <class A>
constexpr A wrapping_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A>
constexpr A wrapping_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    // promote narrow unsigned types to unsigned int so the product cannot overflow int
    using U = std::common_type_t<std::make_unsigned_t<A>, unsigned>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
} // namespace detail

/// Element-wise sum.
struct sum_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "sum";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return detail::wrapping_add(a, b);
  }
};

/// Element-wise product.
struct prod_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "prod";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return detail::wrapping_mul(a, b);
  }
};

/// Element-wise minimum.
struct min_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "min";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return b < a ? b : a;
  }
};

/// Element-wise maximum.
struct max_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "max";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return a < b ? b : a;
  }
};

/// Average: summed during the reduction, divided by the rank count once at the end
/// (integer types divide with truncation toward zero, as NCCL's ncclAvg).
struct avg_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "avg";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return detail::wrapping_add(a, b);
  }
  template <class A>
  constexpr A finalize(A a, int nranks) const {
    return static_cast<A>(a / static_cast<A>(nranks));
  }
};

/// Bitwise AND (MPI_BAND, torch's ReduceOp.BAND), for integer types.
struct band_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "band";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return static_cast<A>(a & b);
  }
};
/// Bitwise OR (MPI_BOR).
struct bor_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "bor";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return static_cast<A>(a | b);
  }
};
/// Bitwise XOR (MPI_BXOR).
struct bxor_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "bxor";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return static_cast<A>(a ^ b);
  }
};
/// Logical AND (MPI_LAND): 1 if both are non-zero, else 0.
struct land_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "land";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return static_cast<A>((a != 0) && (b != 0));
  }
};
/// Logical OR (MPI_LOR).
struct lor_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "lor";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return static_cast<A>((a != 0) || (b != 0));
  }
};
/// Logical XOR (MPI_LXOR).
struct lxor_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "lxor";
  template <class A>
  constexpr A operator()(A a, A b) const {
    return static_cast<A>((a != 0) != (b != 0));
  }
};

/// Wraps a user callable `A(A, A)` as an op with an explicit commutativity trait.
template <class F, bool Commutative>
struct user_op : F {
  static constexpr bool commutative = Commutative;
  static constexpr std::string_view name = "user";
  constexpr user_op() = default;
  constexpr explicit user_op(F f) : F(std::move(f)) {}
};

/// Makes a user op: `auto op = tcoll::make_op<false>([](auto a, auto b) { return 2 * a + b; });`
template <bool Commutative, class F>
constexpr user_op<F, Commutative> make_op(F f) {
  return user_op<F, Commutative>(std::move(f));
}

/// An op whose result depends only on the multiset of operands.
template <class Op>
concept commutative_op = requires {
  Op::commutative;
}
&&(Op::commutative == true);

/// Ops with a final division step (avg).
template <class Op>
concept finalizing_op = requires(const Op& op, float x) {
  op.finalize(x, 2);
};

/// An op that reduces whole arrays itself (`runtime_op`, whose element type is known only
/// at run time): reducers and transports hand it `reduce_arrays(dst, a, b, n)` instead of
/// applying it element by element.
template <class Op>
concept array_op = requires(const Op& op, void* dst, const void* src, std::size_t n) {
  op.reduce_arrays(dst, src, src, n);
};

/// Applies `op` to two stored elements, accumulating in `accumulator_t<T>`.
template <class Op, class T>
constexpr T apply_op(const Op& op, T a, T b) {
  using A = accumulator_t<T>;
  if constexpr (std::is_same_v<A, T>) {
    return static_cast<T>(op(a, b));
  } else {
    return T(static_cast<float>(op(static_cast<A>(a), static_cast<A>(b))));
  }
}

/// Applies the final step of `op` (division for avg) to a stored element.
template <class Op, class T>
constexpr T finalize_op(const Op& op, T a, int nranks) {
  using A = accumulator_t<T>;
  if constexpr (std::is_same_v<A, T>) {
    return op.finalize(a, nranks);
  } else {
    return T(static_cast<float>(op.finalize(static_cast<A>(a), nranks)));
  }
}

} // namespace tcoll
