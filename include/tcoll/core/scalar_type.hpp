#pragma once
/// \file
/// Element types and reductions named at run time (NCCL's `ncclDataType_t` and
/// `ncclRedOp_t`, MPI's predefined datatypes and ops), for callers whose types arrive as
/// values: the MPI preload, the PyTorch backend, benchmarks taking `-d float -o sum`. The
/// runtime-typed entry points (`reduce/runtime.hpp`, `collectives.hpp`) run every algorithm
/// once per element *size* on `raw_element<N>` and reduce through kernels compiled once per
/// (type, op), instead of instantiating every algorithm for every (type, op).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "error.hpp"
#include "ops.hpp"
#include "types.hpp"

namespace tcoll {

/// An element type named at run time.
enum class scalar_type : std::uint8_t {
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float16, ///< tcoll::half
  bfloat16,
  float32,
  float64,
  long_double, ///< the C `long double` (MPI_LONG_DOUBLE)
};
inline constexpr int scalar_type_count = 13;

/// A reduction named at run time. `avg` is a sum divided once by the rank count.
enum class reduce_kind : std::uint8_t {
  sum,
  prod,
  min,
  max,
  avg,
  band,
  bor,
  bxor,
  land,
  lor,
  lxor
};
inline constexpr int reduce_kind_count = 11;

/// Bytes per element of `t`.
constexpr std::size_t size_of(scalar_type t) {
  switch (t) {
  case scalar_type::int8:
  case scalar_type::uint8:
    return 1;
  case scalar_type::int16:
  case scalar_type::uint16:
  case scalar_type::float16:
  case scalar_type::bfloat16:
    return 2;
  case scalar_type::int32:
  case scalar_type::uint32:
  case scalar_type::float32:
    return 4;
  case scalar_type::int64:
  case scalar_type::uint64:
  case scalar_type::float64:
    return 8;
  case scalar_type::long_double:
    return sizeof(long double);
  }
  return 0;
}

/// Is `t` a floating-point type (bitwise and logical reductions do not apply)?
constexpr bool is_floating(scalar_type t) {
  return t >= scalar_type::float16;
}

/// nccl-tests style name of `t`, the same as `type_name<T>()` ("float", "half", "int32").
constexpr std::string_view name_of(scalar_type t) {
  constexpr std::string_view names[scalar_type_count] = {
      "int8",   "uint8", "int16",    "uint16", "int32",  "uint32",     "int64",
      "uint64", "half",  "bfloat16", "float",  "double", "long_double"};
  return names[static_cast<int>(t)];
}

/// Name of `k`, the same as the tcoll op's `name` ("sum", "band", ...).
constexpr std::string_view name_of(reduce_kind k) {
  constexpr std::string_view names[reduce_kind_count] = {
      "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "land", "lor", "lxor"};
  return names[static_cast<int>(k)];
}

/// Does reduction `k` apply to elements of type `t`? (All of them on integers; sum, prod,
/// min, max and avg on floating types, as in MPI and NCCL.)
constexpr bool reduces(scalar_type t, reduce_kind k) {
  return !is_floating(t) || k <= reduce_kind::avg;
}

/// The scalar type of the C++ element type `T` (integers by width and signedness).
template <class T>
constexpr scalar_type scalar_type_of() {
  if constexpr (std::is_same_v<T, half>)
    return scalar_type::float16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return scalar_type::bfloat16;
  else if constexpr (std::is_same_v<T, float>)
    return scalar_type::float32;
  else if constexpr (std::is_same_v<T, double>)
    return scalar_type::float64;
  else if constexpr (std::is_same_v<T, long double>)
    return scalar_type::long_double;
  else {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) <= 8,
                  "tcoll: no scalar_type for this element type");
    constexpr int width = sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 2 : sizeof(T) == 4 ? 4 : 6;
    return static_cast<scalar_type>(width + (std::is_unsigned_v<T> ? 1 : 0));
  }
}

/// A type as a value, for visitors (`visit_scalar_type`, `visit_element_size`).
template <class T>
struct type_tag {
  using type = T;
};

/// Calls `f(type_tag<T>{})` with the C++ element type of `t`.
template <class F>
decltype(auto) visit_scalar_type(scalar_type t, F&& f) {
  switch (t) {
  case scalar_type::int8:
    return f(type_tag<std::int8_t>{});
  case scalar_type::uint8:
    return f(type_tag<std::uint8_t>{});
  case scalar_type::int16:
    return f(type_tag<std::int16_t>{});
  case scalar_type::uint16:
    return f(type_tag<std::uint16_t>{});
  case scalar_type::int32:
    return f(type_tag<std::int32_t>{});
  case scalar_type::uint32:
    return f(type_tag<std::uint32_t>{});
  case scalar_type::int64:
    return f(type_tag<std::int64_t>{});
  case scalar_type::uint64:
    return f(type_tag<std::uint64_t>{});
  case scalar_type::float16:
    return f(type_tag<half>{});
  case scalar_type::bfloat16:
    return f(type_tag<bfloat16>{});
  case scalar_type::float32:
    return f(type_tag<float>{});
  case scalar_type::float64:
    return f(type_tag<double>{});
  default:
    return f(type_tag<long double>{});
  }
}

/// Calls `f(op)` with tcoll's op of `kind` (`sum_op`, ..., `lxor_op`).
template <class F>
decltype(auto) visit_reduce_kind(reduce_kind kind, F&& f) {
  switch (kind) {
  case reduce_kind::sum:
    return f(sum_op{});
  case reduce_kind::prod:
    return f(prod_op{});
  case reduce_kind::min:
    return f(min_op{});
  case reduce_kind::max:
    return f(max_op{});
  case reduce_kind::avg:
    return f(avg_op{});
  case reduce_kind::band:
    return f(band_op{});
  case reduce_kind::bor:
    return f(bor_op{});
  case reduce_kind::bxor:
    return f(bxor_op{});
  case reduce_kind::land:
    return f(land_op{});
  case reduce_kind::lor:
    return f(lor_op{});
  default:
    return f(lxor_op{});
  }
}

/// The reduce_kind of tcoll's op `Op` (the inverse of `visit_reduce_kind`).
template <class Op>
constexpr reduce_kind reduce_kind_of() {
  using K = reduce_kind;
  if constexpr (std::is_same_v<Op, sum_op>)
    return K::sum;
  else if constexpr (std::is_same_v<Op, prod_op>)
    return K::prod;
  else if constexpr (std::is_same_v<Op, min_op>)
    return K::min;
  else if constexpr (std::is_same_v<Op, max_op>)
    return K::max;
  else if constexpr (std::is_same_v<Op, avg_op>)
    return K::avg;
  else if constexpr (std::is_same_v<Op, band_op>)
    return K::band;
  else if constexpr (std::is_same_v<Op, bor_op>)
    return K::bor;
  else if constexpr (std::is_same_v<Op, bxor_op>)
    return K::bxor;
  else if constexpr (std::is_same_v<Op, land_op>)
    return K::land;
  else if constexpr (std::is_same_v<Op, lor_op>)
    return K::lor;
  else {
    static_assert(std::is_same_v<Op, lxor_op>, "tcoll: no reduce_kind for this op");
    return K::lxor;
  }
}

/// Is `Op` one of tcoll's predefined ops (`sum_op` ... `lxor_op`), the ones with a
/// `reduce_kind`?
template <class Op>
inline constexpr bool is_predefined_op =
    std::is_same_v<Op, sum_op> || std::is_same_v<Op, prod_op> || std::is_same_v<Op, min_op> ||
    std::is_same_v<Op, max_op> || std::is_same_v<Op, avg_op> || std::is_same_v<Op, band_op> ||
    std::is_same_v<Op, bor_op> || std::is_same_v<Op, bxor_op> || std::is_same_v<Op, land_op> ||
    std::is_same_v<Op, lor_op> || std::is_same_v<Op, lxor_op>;

/// Is `T` the C++ type `visit_scalar_type` gives a `scalar_type` other than `long_double`
/// (whose padding bytes no two copies need to agree on)? Exactly that type: `long long`
/// beside a 64-bit `long` (std::int64_t) is not.
template <class T>
inline constexpr bool is_scalar_element =
    std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t> ||
    std::is_same_v<T, std::int16_t> || std::is_same_v<T, std::uint16_t> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::uint32_t> ||
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t> ||
    std::is_same_v<T, half> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float> ||
    std::is_same_v<T, double>;

/// An op that says its element type and kind at run time (`runtime_op`): a transport with a
/// vendor collective maps them to its own (MPI_FLOAT and MPI_SUM, ncclFloat and ncclSum).
template <class Op>
concept described_op = requires(const Op& op) {
  { op.type() } -> std::same_as<scalar_type>;
  { op.kind() } -> std::same_as<reduce_kind>;
};

/// `N` bytes of one element whose type is known only at run time: what the algorithms move
/// and chunk on the runtime-typed path (a reduction reaches the bytes through `runtime_op`).
template <std::size_t N>
struct raw_element {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16, "tcoll: element size");
  alignas(N) std::byte bytes[N];
};

/// The unsigned integer as wide as `T` where `T` is a `raw_element` of 1-8 bytes (for code that
/// needs arithmetic on the bits, such as adding zeros), `T` itself otherwise.
template <class T>
struct raw_bits {
  using type = T;
};
template <std::size_t N>
requires(N <= 8) struct raw_bits<raw_element<N>> {
  using type = std::conditional_t<
      N == 1, std::uint8_t,
      std::conditional_t<N == 2, std::uint16_t,
                         std::conditional_t<N == 4, std::uint32_t, std::uint64_t>>>;
};

/// Calls `f(type_tag<raw_element<N>>{})` for the element size `bytes` (1, 2, 4, 8 or 16).
template <class F>
decltype(auto) visit_element_size(std::size_t bytes, F&& f) {
  switch (bytes) {
  case 1:
    return f(type_tag<raw_element<1>>{});
  case 2:
    return f(type_tag<raw_element<2>>{});
  case 4:
    return f(type_tag<raw_element<4>>{});
  case 8:
    return f(type_tag<raw_element<8>>{});
  case 16:
    return f(type_tag<raw_element<16>>{});
  default:
    throw invalid_argument("element size " + std::to_string(bytes) +
                           " bytes (the runtime-typed path takes 1, 2, 4, 8 or 16)");
  }
}

} // namespace tcoll
