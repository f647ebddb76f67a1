#pragma once
/// \file
/// Element-wise casts between element types where the data lives: the reducer's own
/// kernel when it has one (`red.convert`, device memory), a host loop otherwise. Used by
/// the mixed-precision wire (compress/mixed_precision.hpp) and by the overlap scheduler.
#include <cstddef>

namespace tcoll {

namespace detail {
/// dst[i] = To(float(src[i]) * scale) on the host.
template <class To, class From>
void convert_host(To* dst, const From* src, std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = To(static_cast<float>(src[i]) * scale);
}
/// Casts with the reducer's own kernel if it has one (device memory), else a host loop.
template <class R, class To, class From>
void convert(R& red, To* dst, const From* src, std::size_t n, float scale) {
  if constexpr (requires { red.convert(dst, src, n, scale); })
    red.convert(dst, src, n, scale);
  else
    convert_host(dst, src, n, scale);
}
} // namespace detail

} // namespace tcoll
