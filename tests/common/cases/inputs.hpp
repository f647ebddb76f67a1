#pragma once
/// \file
/// Shared rank-level test bodies, topic: Inputs with exactly known results.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "types.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Inputs with exactly known results.

/// Largest integer magnitude every partial sum may reach and stay exact in T.
template <class T>
constexpr std::int64_t exact_bound() {
  if constexpr (std::is_same_v<T, half>)
    return 2048;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return 256;
  else if constexpr (std::is_floating_point_v<T>)
    return std::int64_t{1} << 24;
  else if constexpr (sizeof(T) <= 2)
    return static_cast<std::int64_t>(std::numeric_limits<T>::max());
  else
    return std::int64_t{1} << 24;
}

template <class T>
constexpr bool is_signed_element = is_reduced_precision_v<T> || std::is_signed_v<T>;

/// Converts an exact integer to T.
template <class T>
T from_int(std::int64_t v) {
  if constexpr (is_reduced_precision_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

/// x(r, i) = u(i) + v(r) with |sums over any subset of ranks| <= exact_bound<T>().
template <class T>
struct additive_inputs {
  int P;
  std::uint64_t salt;
  std::int64_t a; // amplitude of u and v
  std::int64_t vsum = 0, vmin = 0, vmax = 0;

  additive_inputs(int nranks, std::uint64_t s)
      : P(nranks), salt(s), a(std::clamp<std::int64_t>(exact_bound<T>() / (2 * nranks), 1, 1000)) {
    vmin = std::numeric_limits<std::int64_t>::max();
    vmax = std::numeric_limits<std::int64_t>::min();
    for (int r = 0; r < P; ++r) {
      vsum += v(r);
      vmin = std::min(vmin, v(r));
      vmax = std::max(vmax, v(r));
    }
  }
  std::int64_t u(std::size_t i) const {
    const auto h =
        static_cast<std::int64_t>(mix(i ^ (salt << 40)) % static_cast<std::uint64_t>(2 * a + 1));
    return is_signed_element<T> ? h - a : h / 2; // unsigned: [0, a]
  }
  std::int64_t v(int r) const {
    return 1 + static_cast<std::int64_t>(mix(static_cast<std::uint64_t>(r) + salt * 977) %
                                         static_cast<std::uint64_t>(a));
  }
  T x(int r, std::size_t i) const { return from_int<T>(u(i) + v(r)); }
};

/// prod inputs: 2 (or -1 for signed types without room for 2^P) where (i + r) % 3 == 0.
template <class T>
constexpr bool prod_uses_sign() {
  return std::is_same_v<T, half> || (std::is_integral_v<T> && std::is_signed_v<T>);
}
template <class T>
T prod_input(int r, std::size_t i) {
  const bool special = (i + static_cast<std::size_t>(r)) % 3 == 0;
  return from_int<T>(special ? (prod_uses_sign<T>() ? -1 : 2) : 1);
}
template <class T>
T prod_expected(int P, std::size_t i) {
  // number of ranks r in [0, P) with (i + r) % 3 == 0
  const int r0 = static_cast<int>((3 - i % 3) % 3);
  const int k = r0 < P ? (P - 1 - r0) / 3 + 1 : 0;
  if constexpr (prod_uses_sign<T>()) {
    return from_int<T>(k % 2 ? -1 : 1);
  } else if constexpr (std::is_integral_v<T>) {
    std::uint64_t p = 1; // 2^k with the wrap of T's width
    for (int j = 0; j < k; ++j) p = static_cast<std::uint64_t>(static_cast<T>(p * 2));
    return static_cast<T>(p);
  } else {
    return T(static_cast<accumulator_t<T>>(std::ldexp(1.0, k)));
  }
}

/// Full-width pseudo-random integers for the non-commutative op.
template <class T>
T random_input(int r, std::size_t i, std::uint64_t salt) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(
      static_cast<U>(mix((static_cast<std::uint64_t>(r) << 48) ^ i ^ (salt << 32))));
}

/// Inputs and expected output of one (op, type, P, count) case.
template <class T>
struct case_data {
  std::vector<T> input;
  std::vector<T> expected;
};

template <class T>
case_data<T> make_case(op_kind k, int P, int rank, std::size_t n, std::uint64_t salt) {
  case_data<T> d;
  d.input.resize(n);
  d.expected.resize(n);
  switch (k) {
  case op_kind::sum:
  case op_kind::avg:
  case op_kind::min:
  case op_kind::max: {
    const additive_inputs<T> in(P, salt);
    const std::int64_t vr = in.v(rank);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t u = in.u(i);
      d.input[i] = from_int<T>(u + vr);
      if (k == op_kind::sum) {
        d.expected[i] = from_int<T>(P * u + in.vsum);
      } else if (k == op_kind::min) {
        d.expected[i] = from_int<T>(u + in.vmin);
      } else if (k == op_kind::max) {
        d.expected[i] = from_int<T>(u + in.vmax);
      } else { // avg: exact sum, then one division in the accumulator type
        using A = accumulator_t<T>;
        const std::int64_t s = P * u + in.vsum;
        if constexpr (std::is_integral_v<T>)
          d.expected[i] = static_cast<T>(s / P); // truncation toward zero, as ncclAvg
        else
          d.expected[i] = T(static_cast<A>(static_cast<A>(s) / static_cast<A>(P)));
      }
    }
    break;
  }
  case op_kind::prod:
    for (std::size_t i = 0; i < n; ++i) {
      d.input[i] = prod_input<T>(rank, i);
      d.expected[i] = prod_expected<T>(P, i);
    }
    break;
  case op_kind::noncommutative:
    if constexpr (std::is_integral_v<T>) {
      std::vector<T> xs(P);
      for (std::size_t i = 0; i < n; ++i) {
        for (int r = 0; r < P; ++r) xs[r] = random_input<T>(r, i, salt);
        d.input[i] = xs[rank];
        d.expected[i] = affine_fold_reference(xs);
      }
    }
    break;
  }
  return d;
}

} // namespace tcoll::testing
