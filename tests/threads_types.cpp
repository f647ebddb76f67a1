// half and bfloat16: conversions against known bit patterns (round-to-nearest-even,
// subnormals, overflow, inf/nan), an exhaustive round trip, a sweep against an independent
// reference rounding in double; ops and apply_op/finalize_op in reduced precision; wrapping
// integer ops (no signed-overflow UB under UBSan).
#include <doctest/doctest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>

#include <tcoll/tcoll.hpp>

using tcoll::bfloat16;
using tcoll::half;

namespace {

float f32(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}
std::uint16_t hbits(float f) {
  return half(f).bits;
}
std::uint16_t bbits(float f) {
  return bfloat16(f).bits;
}

/// Independent reference: round x to a binary float with `mant` stored mantissa bits,
/// minimum normal exponent `emin`, largest finite `max` (round-to-nearest-even via
/// std::nearbyint in double, exact for these widths); returns the rounded value.
double reference_round(double x, int mant, int emin, double max) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = std::ilogb(x);
  if (e < emin) e = emin; // subnormal: fixed quantum
  const double q = std::ldexp(1.0, e - mant);
  const double r = std::nearbyint(x / q) * q;
  // overflow: values that round above max (at max's precision) become infinity
  if (std::abs(r) > max) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r == 0 ? std::copysign(0.0, x) : r;
}

} // namespace

TEST_CASE("half: known bit patterns") {
  CHECK(hbits(0.0f) == 0x0000);
  CHECK(hbits(-0.0f) == 0x8000);
  CHECK(hbits(1.0f) == 0x3c00);
  CHECK(hbits(-2.0f) == 0xc000);
  CHECK(hbits(0.5f) == 0x3800);
  CHECK(hbits(0.1f) == 0x2e66);
  CHECK(hbits(65504.0f) == 0x7bff); // largest finite
  CHECK(hbits(65519.0f) == 0x7bff); // below the halfway point to 65536
  CHECK(hbits(65520.0f) == 0x7c00); // halfway rounds to even = infinity
  CHECK(hbits(1e10f) == 0x7c00);
  CHECK(hbits(-1e10f) == 0xfc00);
  CHECK(hbits(std::ldexp(1.0f, -14)) == 0x0400); // smallest normal
  CHECK(hbits(std::ldexp(1.0f, -24)) == 0x0001); // smallest subnormal
  CHECK(hbits(std::ldexp(1023.0f, -24)) == 0x03ff);
  CHECK(hbits(std::ldexp(1.0f, -25)) == 0x0000);        // tie between 0 and 2^-24: even (0)
  CHECK(hbits(std::ldexp(3.0f, -26)) == 0x0001);        // 0.75 ulp rounds up
  CHECK(hbits(std::ldexp(3.0f, -25)) == 0x0002);        // 1.5 ulp: tie -> even (2)
  CHECK(hbits(std::ldexp(5.0f, -25)) == 0x0002);        // 2.5 ulp: tie -> even (2)
  CHECK(hbits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00); // tie -> even
  CHECK(hbits(1.0f + std::ldexp(3.0f, -11)) == 0x3c02); // tie -> even (up)
  CHECK(hbits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01); // above tie
  CHECK(hbits(2049.0f) == 0x6800); // 2048: integers above 2048 step by 2
  CHECK(hbits(2051.0f) == 0x6802); // tie -> even mantissa (2052)
  CHECK(hbits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(hbits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  const std::uint16_t qnan = hbits(std::numeric_limits<float>::quiet_NaN());
  CHECK((qnan & 0x7c00) == 0x7c00);
  CHECK((qnan & 0x03ff) != 0);
  const std::uint16_t snan = hbits(f32(0x7f800001u)); // payload in the low bits only
  CHECK((snan & 0x7c00) == 0x7c00);
  CHECK((snan & 0x03ff) != 0); // must not collapse to infinity

  CHECK(half::to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half::to_float(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(half::to_float(0x0400) == std::ldexp(1.0f, -14));
  CHECK(half::to_float(0x7bff) == 65504.0f);
  CHECK(half::to_float(0xc000) == -2.0f);
  CHECK(std::isinf(half::to_float(0x7c00)));
  CHECK(std::isnan(half::to_float(0x7e00)));
  CHECK(std::signbit(half::to_float(0x8000)));
}

TEST_CASE("half: exhaustive round trip and sweep against an independent reference") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half::to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    if (half::from_float(f) != h) FAIL_CHECK("round trip of 0x" << std::hex << h);
  }
  std::size_t bad = 0;
  for (std::uint64_t x = 0; x < 0x100000000ull; x += 4093) { // ~1M floats of every exponent
    const float f = f32(static_cast<std::uint32_t>(x));
    if (std::isnan(f)) continue;
    const double want = reference_round(f, 10, -14, 65504.0);
    const float got = half::to_float(half::from_float(f));
    if (!(got == want && std::signbit(got) == std::signbit(want)) && bad++ < 5)
      FAIL_CHECK("half(" << f << " = 0x" << std::hex << x << ") = " << got << ", want " << want);
  }
  CHECK(bad == 0);
}

TEST_CASE("bfloat16: known bit patterns") {
  CHECK(bbits(0.0f) == 0x0000);
  CHECK(bbits(-0.0f) == 0x8000);
  CHECK(bbits(1.0f) == 0x3f80);
  CHECK(bbits(-2.0f) == 0xc000);
  CHECK(bbits(3.140625f) == 0x4049);
  CHECK(bbits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80); // tie -> even
  CHECK(bbits(1.0f + std::ldexp(3.0f, -8)) == 0x3f82); // tie -> even (up)
  CHECK(bbits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  CHECK(bbits(257.0f) == 0x4380);                                   // 256: tie -> even
  CHECK(bbits(259.0f) == 0x4382);                                   // 260
  CHECK(bbits(std::numeric_limits<float>::max()) == 0x7f80);        // rounds to infinity
  CHECK(bbits(f32(0x7f7f7fffu)) == 0x7f7f);                         // largest finite
  CHECK(bbits(std::numeric_limits<float>::denorm_min()) == 0x0000); // 2^-149 -> 0
  CHECK(bbits(f32(0x00010000u)) == 0x0001);                         // smallest subnormal
  CHECK(bbits(f32(0x00018000u)) == 0x0002);                         // tie -> even
  CHECK(bbits(f32(0x00008001u)) == 0x0001);                         // above half an ulp
  CHECK(bbits(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bbits(-std::numeric_limits<float>::infinity()) == 0xff80);
  const std::uint16_t nan = bbits(f32(0x7f800001u)); // a NaN whose payload is all rounded off
  CHECK((nan & 0x7f80) == 0x7f80);
  CHECK((nan & 0x007f) != 0);
  CHECK(std::isnan(static_cast<float>(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(static_cast<float>(bfloat16(1.5f)) == 1.5f);
}

TEST_CASE("bfloat16: sweep against an independent reference") {
  std::size_t bad = 0;
  const double max = static_cast<double>(f32(0x7f7f0000u));
  for (std::uint64_t x = 0; x < 0x100000000ull; x += 4093) {
    const float f = f32(static_cast<std::uint32_t>(x));
    if (std::isnan(f)) continue;
    const double want = reference_round(f, 7, -126, max);
    const float got = static_cast<float>(bfloat16(f));
    if (!(got == want && std::signbit(got) == std::signbit(want)) && bad++ < 5)
      FAIL_CHECK("bfloat16(" << f << " = 0x" << std::hex << x << ") = " << got << ", want "
                             << want);
  }
  CHECK(bad == 0);
}

TEST_CASE("ops in reduced precision accumulate in float and round once per op") {
  using tcoll::apply_op;
  static_assert(std::is_same_v<tcoll::accumulator_t<half>, float>);
  static_assert(std::is_same_v<tcoll::accumulator_t<bfloat16>, float>);
  // 2048 + 1 = 2049 is a tie in half -> 2048 (even); 2048 + 3 = 2051 -> 2052
  CHECK(apply_op(tcoll::sum_op{}, half(2048.0f), half(1.0f)).bits == hbits(2048.0f));
  CHECK(apply_op(tcoll::sum_op{}, half(2048.0f), half(3.0f)).bits == hbits(2052.0f));
  CHECK(apply_op(tcoll::sum_op{}, half(0.1f), half(0.2f)).bits ==
        hbits(static_cast<float>(half(0.1f)) + static_cast<float>(half(0.2f))));
  CHECK(apply_op(tcoll::prod_op{}, half(300.0f), half(300.0f)).bits == 0x7c00); // overflow
  CHECK(apply_op(tcoll::prod_op{}, half(0.5f), half(-3.0f)).bits == hbits(-1.5f));
  CHECK(apply_op(tcoll::min_op{}, half(-0.5f), half(0.25f)).bits == hbits(-0.5f));
  CHECK(apply_op(tcoll::max_op{}, half(-0.5f), half(0.25f)).bits == hbits(0.25f));
  CHECK(tcoll::finalize_op(tcoll::avg_op{}, half(3.0f), 2).bits == hbits(1.5f));
  CHECK(tcoll::finalize_op(tcoll::avg_op{}, half(1.0f), 3).bits == hbits(1.0f / 3.0f));
  CHECK(apply_op(tcoll::sum_op{}, bfloat16(256.0f), bfloat16(1.0f)).bits == bbits(256.0f));
  CHECK(apply_op(tcoll::sum_op{}, bfloat16(256.0f), bfloat16(3.0f)).bits == bbits(260.0f));
  CHECK(apply_op(tcoll::max_op{}, bfloat16(-1.0f), bfloat16(-2.0f)).bits == bbits(-1.0f));
  CHECK(tcoll::finalize_op(tcoll::avg_op{}, bfloat16(10.0f), 4).bits == bbits(2.5f));
  // the cpu reducer applies the same rounding element-wise
  half a[3] = {half(2048.0f), half(1.0f), half(-1.0f)}, b[3] = {half(1.0f), half(1.0f), half(1.0f)};
  tcoll::cpu_reducer{}.reduce(tcoll::sum_op{}, a, a, b, 3);
  CHECK(a[0].bits == hbits(2048.0f));
  CHECK(a[1].bits == hbits(2.0f));
  CHECK(a[2].bits == hbits(0.0f));
}

TEST_CASE("integer ops wrap instead of overflowing (checked under UBSan)") {
  using tcoll::apply_op;
  CHECK(apply_op(tcoll::sum_op{}, std::int8_t{127}, std::int8_t{1}) == std::int8_t{-128});
  CHECK(apply_op(tcoll::sum_op{}, std::numeric_limits<std::int64_t>::max(), std::int64_t{1}) ==
        std::numeric_limits<std::int64_t>::min());
  CHECK(apply_op(tcoll::prod_op{}, std::uint8_t{16}, std::uint8_t{16}) == 0);
  CHECK(apply_op(tcoll::prod_op{}, std::uint16_t{65535}, std::uint16_t{65535}) == 1);
  CHECK(apply_op(tcoll::prod_op{}, std::int32_t{1} << 30, std::int32_t{4}) == 0);
  CHECK(apply_op(tcoll::prod_op{}, std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}) ==
        std::numeric_limits<std::int64_t>::min());
  CHECK(tcoll::finalize_op(tcoll::avg_op{}, std::int32_t{-7}, 2) == -3); // toward zero
  CHECK(tcoll::finalize_op(tcoll::avg_op{}, std::uint8_t{255}, 16) == 15);
  CHECK(apply_op(tcoll::min_op{}, std::uint64_t{3}, std::uint64_t{2}) == 2);
  CHECK(apply_op(tcoll::max_op{}, 2.5, -1.0) == 2.5);
}

TEST_CASE("type names follow nccl-tests") {
  CHECK(tcoll::type_name<half>() == "half");
  CHECK(tcoll::type_name<bfloat16>() == "bfloat16");
  CHECK(tcoll::type_name<std::int8_t>() == "int8");
  CHECK(tcoll::type_name<std::uint64_t>() == "uint64");
  CHECK(tcoll::type_name<double>() == "double");
}
