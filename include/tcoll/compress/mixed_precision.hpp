#pragma once
/// \file
/// Mixed-precision communication (GradientFlow Sec. 2.5): float gradients travel as half or
/// bfloat16 — half the bytes on the wire — and come back as float for the update. The
/// adaptor casts (optionally scaled) into a wire buffer allocated by the reducer, runs any
/// allreduce algorithm in place on the wire type, and casts back into the float output.
/// The reduction itself still accumulates each step in float (core rule for 16-bit types);
/// only the stored partial results are rounded to the wire type.
///
/// The error it introduces is reported, not hidden: `allreduce_mixed` returns a
/// `mixed_precision_report` whose `bound(sum_abs)` is a first-order bound on
/// |result - exact| for an element whose inputs have sum of magnitudes `sum_abs`: every
/// input is rounded once when cast, each of the P-1 combining steps rounds its result once,
/// and avg's final division rounds once more, so at most P+1 roundings of relative size u
/// (2^-11 for half, 2^-8 for bfloat16) each, plus an absolute underflow term per rounding.
/// Values beyond the wire type's range become infinities (half: |x * scale| >= 65520);
/// pick `scale` to keep them in range. Scales that are powers of two add no error.
#include <cmath>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "../collectives.hpp"
#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../reduce/convert.hpp"

namespace tcoll {

/// Knobs of the mixed-precision adaptor.
struct mixed_precision {
  /// Inputs are multiplied by `scale` before the cast and results divided by it after
  /// (a power of two is exact); use it to keep small gradients out of the subnormal range.
  float scale = 1.0f;
};

/// What a mixed-precision allreduce may have cost in accuracy.
struct mixed_precision_report {
  std::string_view wire;    ///< "half" or "bfloat16"
  double unit_roundoff = 0; ///< u of the wire type
  double underflow = 0;     ///< absolute error of one rounding near zero, in input units
  int roundings = 0;        ///< roundings on any element's path (P + 1, or 1 for min/max)
  /// First-order bound on |result - exact| for an element with sum over ranks of |x| equal
  /// to `sum_abs` (for avg, pass the sum of |x| divided by P).
  double bound(double sum_abs) const { return roundings * (unit_roundoff * sum_abs + underflow); }
};

/// Allreduce of float data communicated as `Wire` (half or bfloat16). Same arguments and
/// argument checks as `allreduce`; `sendbuf == recvbuf` is allowed. The input is only read.
template <class Wire = half, transport Tr, class Op = sum_op, class Algo = automatic,
          reducer R = cpu_reducer>
mixed_precision_report allreduce_mixed(Tr& t, const float* sendbuf, float* recvbuf,
                                       std::size_t count, const Op& op = {}, const Algo& algo = {},
                                       R red = {}, mixed_precision knobs = {}) {
  static_assert(is_reduced_precision_v<Wire>, "tcoll: the wire type must be half or bfloat16");
  const int rank = t.rank();
  detail::check_count(count, 1, sizeof(float), "allreduce_mixed", rank);
  detail::check_pointer(sendbuf, count, "sendbuf", "allreduce_mixed", rank);
  detail::check_pointer(recvbuf, count, "recvbuf", "allreduce_mixed", rank);
  detail::check_overlap(sendbuf, count * sizeof(float), recvbuf, count * sizeof(float), recvbuf,
                        "allreduce_mixed", rank);
  if (!(knobs.scale > 0.0f) || !std::isfinite(knobs.scale))
    throw invalid_argument("allreduce_mixed: scale must be a positive finite number, got " +
                               std::to_string(knobs.scale),
                           rank);
  auto wire = red.template allocate<Wire>(count);
  detail::convert(red, wire.data(), sendbuf, count, knobs.scale);
  allreduce(t, wire.data(), wire.data(), count, op, algo, red);
  detail::convert(red, recvbuf, wire.data(), count, 1.0f / knobs.scale);
  red.synchronize();

  mixed_precision_report rep;
  constexpr bool is_half = std::is_same_v<Wire, half>;
  rep.wire = is_half ? "half" : "bfloat16";
  rep.unit_roundoff = is_half ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  // half: subnormal spacing 2^-24 (error <= 2^-25); bfloat16 keeps float's range
  rep.underflow = (is_half ? std::ldexp(1.0, -25) : std::ldexp(1.0, -134)) / knobs.scale;
  const bool selects = std::is_same_v<Op, min_op> || std::is_same_v<Op, max_op>;
  rep.roundings = selects ? 1 : t.size() + 1;
  return rep;
}

} // namespace tcoll
