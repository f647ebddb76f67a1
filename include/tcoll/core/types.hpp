#pragma once
/// \file
/// Element types: the built-in integers and floats plus host-side `half` and `bfloat16`
/// (IEEE binary16 and bfloat16 storage types that accumulate in float).
#include <bit>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tcoll {

/// IEEE 754 binary16 storage type. Arithmetic happens in float (see `accumulator_t`).
struct half {
  std::uint16_t bits = 0;

  constexpr half() = default;
  constexpr explicit half(float f) : bits(from_float(f)) {}
  constexpr explicit operator float() const { return to_float(bits); }
  friend constexpr bool operator==(half a, half b) { return a.bits == b.bits; }

  /// Round-to-nearest-even conversion from float.
  static constexpr std::uint16_t from_float(float f) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) // inf or nan
      return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) // rounds to >= 65520 -> inf
      return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (abs < 0x38800000u) {                                          // subnormal half or zero
      if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign); // < 2^-25 -> 0
      const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      const int shift = 126 - static_cast<int>(abs >> 23); // 14..24 more than normal
      const std::uint32_t q = mant >> (shift);
      const std::uint32_t rem = mant & ((1u << shift) - 1u);
      const std::uint32_t halfway = 1u << (shift - 1);
      std::uint32_t r = q;
      if (rem > halfway || (rem == halfway && (q & 1u))) ++r;
      return static_cast<std::uint16_t>(sign | r);
    }
    // normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits
    std::uint32_t r = (abs - 0x38000000u) >> 13;
    const std::uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  static constexpr float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    std::uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return std::bit_cast<float>(sign);
      int e = -1; // normalise the subnormal
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      return std::bit_cast<float>(sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13));
    }
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

/// bfloat16 storage type (upper 16 bits of a float). Arithmetic happens in float.
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() = default;
  constexpr explicit bfloat16(float f) : bits(from_float(f)) {}
  constexpr explicit operator float() const {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  friend constexpr bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }

  /// Round-to-nearest-even conversion from float; NaN stays NaN.
  static constexpr std::uint16_t from_float(float f) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>((x + rounding) >> 16);
  }
};

/// Type used to accumulate an element: float for the 16-bit floats, the type itself otherwise.
template <class T>
struct accumulator {
  using type = T;
};
template <>
struct accumulator<half> {
  using type = float;
};
template <>
struct accumulator<bfloat16> {
  using type = float;
};
template <class T>
using accumulator_t = typename accumulator<T>::type;

/// True for the 16-bit float storage types.
template <class T>
inline constexpr bool is_reduced_precision_v =
    std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// Element types every reducer must support.
template <class T>
concept arithmetic_element =
    (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || is_reduced_precision_v<T>;

/// Any element a transport can move: trivially copyable bytes.
template <class T>
concept element = std::is_trivially_copyable_v<T>;

/// nccl-tests style short name of an element type ("float", "half", "int32", ...).
template <class T>
constexpr std::string_view type_name() {
  if constexpr (std::is_same_v<T, half>)
    return "half";
  else if constexpr (std::is_same_v<T, bfloat16>)
    return "bfloat16";
  else if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return "int8";
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return "uint8";
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return "int16";
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return "uint16";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "int32";
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return "uint32";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "int64";
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return "uint64";
  else
    return "custom";
}

} // namespace tcoll
