#pragma once
/// \file
/// Shared rank-level test bodies, topic: Element types and ops.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "utilities.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Element types and ops.

// type_tag<T> is tcoll's own (core/scalar_type.hpp).

/// Calls f(type_tag<T>{}) for every element type whose name is in `names` (all if empty).
/// The sanitizer builds (scripts/test.sh defines TCOLL_TEST_FEW_TYPES) and the CUDA compile
/// check (meson.build's cuda_check_args) compile seven of the twelve types, every width and
/// kind once (uint8, int32, int64, float, double, half, bfloat16): there the typed matrices
/// look for memory and thread errors, or only have to compile, and the other five cost about
/// a third of those builds' compile time. A name that is not compiled runs nothing.
template <class F>
void for_each_type(const std::vector<std::string>& names, F&& f) {
  auto one = [&]<class T>(type_tag<T> tag) {
    if (names.empty() || std::find(names.begin(), names.end(), type_name<T>()) != names.end())
      f(tag);
  };
#ifndef TCOLL_TEST_FEW_TYPES
  one(type_tag<std::int8_t>{});
#endif
  one(type_tag<std::uint8_t>{});
#ifndef TCOLL_TEST_FEW_TYPES
  one(type_tag<std::int16_t>{});
  one(type_tag<std::uint16_t>{});
#endif
  one(type_tag<std::int32_t>{});
#ifndef TCOLL_TEST_FEW_TYPES
  one(type_tag<std::uint32_t>{});
#endif
  one(type_tag<std::int64_t>{});
#ifndef TCOLL_TEST_FEW_TYPES
  one(type_tag<std::uint64_t>{});
#endif
  one(type_tag<float>{});
  one(type_tag<double>{});
  one(type_tag<half>{});
  one(type_tag<bfloat16>{});
}

/// Composition of affine maps packed into an integer: the high half of the bits is the
/// multiplier m, the low half the offset c (both mod 2^h); (a . b)(x) = b(a(x)), i.e.
/// m = m_a m_b, c = m_b c_a + c_b. Associative, not commutative; wraps (no UB).
struct affine_compose_fn {
  template <class A>
  constexpr A operator()(A a, A b) const {
    static_assert(std::is_integral_v<A>, "affine_compose works on integers");
    using U = std::make_unsigned_t<A>;
    using W = std::common_type_t<U, unsigned>; // no promotion to signed int
    constexpr int h = static_cast<int>(sizeof(U)) * 4;
    constexpr W mask = (W{1} << h) - 1;
    const W ua = static_cast<U>(a), ub = static_cast<U>(b);
    const W am = ua >> h, ac = ua & mask, bm = ub >> h, bc = ub & mask;
    const W m = (am * bm) & mask, c = (bm * ac + bc) & mask;
    return static_cast<A>(static_cast<U>((m << h) | c));
  }
};

/// The non-commutative user op of the tests.
inline constexpr auto noncommutative_op = make_op<false>(affine_compose_fn{});

/// Reference for `noncommutative_op`, written on separate (m, c) pairs in 64-bit arithmetic:
/// the rank-order fold of `xs`.
template <class T>
T affine_fold_reference(const std::vector<T>& xs) {
  using U = std::make_unsigned_t<T>;
  const int h = static_cast<int>(sizeof(U)) * 4;
  const std::uint64_t mask = (std::uint64_t{1} << h) - 1;
  std::uint64_t m = 1, c = 0; // identity map
  for (T x : xs) {
    const std::uint64_t u = static_cast<U>(x);
    const std::uint64_t xm = (u >> h) & mask, xc = u & mask;
    // apply the accumulated map, then x: x(acc(v)) = xm (m v + c) + xc
    m = (xm * m) & mask;
    c = (xm * c + xc) & mask;
  }
  return static_cast<T>(static_cast<U>((m << h) | c));
}

enum class op_kind { sum, prod, min, max, avg, noncommutative };

constexpr std::string_view op_name(op_kind k) {
  switch (k) {
  case op_kind::sum:
    return "sum";
  case op_kind::prod:
    return "prod";
  case op_kind::min:
    return "min";
  case op_kind::max:
    return "max";
  case op_kind::avg:
    return "avg";
  case op_kind::noncommutative:
    return "noncommutative";
  }
  return "?";
}

/// Calls f(op_object, op_kind) for each op in `names` (all if empty). The non-commutative op
/// only where `WithNoncommutative` (order-keeping algorithms, integer types).
template <bool WithNoncommutative, class F>
void for_each_op(const std::vector<std::string>& names, F&& f) {
  auto want = [&](op_kind k) {
    return names.empty() || std::find(names.begin(), names.end(), op_name(k)) != names.end();
  };
  if (want(op_kind::sum)) f(sum_op{}, op_kind::sum);
  if (want(op_kind::prod)) f(prod_op{}, op_kind::prod);
  if (want(op_kind::min)) f(min_op{}, op_kind::min);
  if (want(op_kind::max)) f(max_op{}, op_kind::max);
  if (want(op_kind::avg)) f(avg_op{}, op_kind::avg);
  if constexpr (WithNoncommutative)
    if (want(op_kind::noncommutative)) f(noncommutative_op, op_kind::noncommutative);
}

} // namespace tcoll::testing
