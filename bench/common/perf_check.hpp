#pragma once
/// \file
/// Inputs and independently computed expectations for allreduce_perf's bit-exact check
/// (nccl-tests style): every input is a small integer, so every partial result is exact
/// in every element type and any summation order gives the same bits; the expectation is
/// folded here in 64-bit integer arithmetic, not with tcoll's ops.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <tcoll/core/ops.hpp>
#include <tcoll/core/scalar_type.hpp>
#include <tcoll/core/types.hpp>

namespace tcoll::bench {

/// Input of `rank` at element `i`: 1..4 (sums stay exact in bfloat16 up to 64 ranks),
/// 1 or 2 for prod (powers of two).
template <class Op>
inline long long input_value(int rank, std::size_t i) {
  if constexpr (std::is_same_v<Op, prod_op>)
    return (static_cast<std::size_t>(rank) + i) % 5 == 0 ? 2 : 1;
  else
    return static_cast<long long>((static_cast<std::size_t>(rank) * 3 + i) % 4) + 1;
}

template <class T>
inline T from_integer(long long v) {
  if constexpr (is_reduced_precision_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

/// The allreduce result at element i over `nranks` ranks.
template <class T, class Op>
inline T expected_value(int nranks, std::size_t i) {
  if constexpr (std::is_same_v<Op, min_op> || std::is_same_v<Op, max_op>) {
    long long m = input_value<Op>(0, i);
    for (int r = 1; r < nranks; ++r)
      m = std::is_same_v<Op, min_op> ? std::min(m, input_value<Op>(r, i))
                                     : std::max(m, input_value<Op>(r, i));
    return from_integer<T>(m);
  } else if constexpr (std::is_same_v<Op, prod_op>) {
    std::uint64_t p = 1;
    for (int r = 0; r < nranks; ++r) p *= static_cast<std::uint64_t>(input_value<Op>(r, i));
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(p); // wraps modulo 2^bits like the op
    else
      return from_integer<T>(static_cast<long long>(p));
  } else {
    long long s = 0;
    for (int r = 0; r < nranks; ++r) s += input_value<Op>(r, i);
    if constexpr (std::is_same_v<Op, avg_op>) {
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(s / nranks);
      else if constexpr (std::is_same_v<T, double>)
        return static_cast<double>(s) / nranks;
      else // float, half, bfloat16: the division happens in float
        return T(static_cast<float>(s) / static_cast<float>(nranks));
    } else {
      return from_integer<T>(s);
    }
  }
}

/// Fills `data[0..n)` with this rank's inputs.
template <class T, class Op>
inline void fill_input(T* data, std::size_t n, int rank) {
  for (std::size_t i = 0; i < n; ++i) data[i] = from_integer<T>(input_value<Op>(rank, i));
}

/// Number of elements of `data` whose bits differ from the expectation.
template <class T, class Op>
inline std::size_t count_wrong(const T* data, std::size_t n, int nranks) {
  // Inputs repeat with period 4 (prod: 5) in i, so the expectation repeats every 20.
  constexpr std::size_t period = 20;
  T table[period];
  for (std::size_t i = 0; i < period; ++i) table[i] = expected_value<T, Op>(nranks, i);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    wrong += std::memcmp(&data[i], &table[i % period], sizeof(T)) != 0;
  return wrong;
}

/// `fill_input` for a type and op named at run time (`parse_op` admits sum, prod, min, max
/// and avg: the ops the expectation models).
inline void fill_input(scalar_type type, reduce_kind kind, void* data, std::size_t n, int rank) {
  visit_scalar_type(type, [&]<class T>(type_tag<T>) {
    visit_reduce_kind(kind,
                      [&]<class Op>(Op) { fill_input<T, Op>(static_cast<T*>(data), n, rank); });
  });
}

/// `count_wrong` for a type and op named at run time.
inline std::size_t count_wrong(scalar_type type, reduce_kind kind, const void* data, std::size_t n,
                               int nranks) {
  return visit_scalar_type(type, [&]<class T>(type_tag<T>) {
    return visit_reduce_kind(kind, [&]<class Op>(Op) {
      return count_wrong<T, Op>(static_cast<const T*>(data), n, nranks);
    });
  });
}

} // namespace tcoll::bench
