#pragma once
/// \file
/// Chunks of a gradient pool and the choice of important chunks (GradientFlow Sec. 3.2,
/// coarse-grained sparse communication, CSC). The pool is cut into equal chunks of C
/// elements regardless of tensor boundaries (the last chunk may be shorter); each
/// iteration a fraction of them (the *density*) is communicated. This header holds the
/// pure, communication-free parts: the chunk layout, the number of chunks kept at a
/// density, the linear warm-up of the sparsity, and the deterministic top-k selection that
/// every rank runs on the same allreduced norm vector.
///
/// Choices where the paper leaves a gap (see docs/sparse.md):
///  - Rounding of `density x chunks`: to nearest (halves up), at least one chunk when the
///    density is positive (`chunks_kept`).
///  - Ties between equal norms: the lower chunk index wins; a NaN norm ranks above every
///    number (the chunk is sent, so a NaN shows on every rank at once instead of hiding in
///    one rank's residual); +inf ties with NaN and is again ordered by index.
///  - Warm-up: sparsity s_t = s * min(1, t / W) for iteration t (0-based), s = 1 - density,
///    so iteration 0 is dense and iteration W the first at the target (`warmup_density`).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"

namespace tcoll::sparse {

/// How a pool of `elements` elements is cut into chunks of `chunk` elements.
struct chunk_layout {
  std::size_t elements = 0; ///< pool elements (padding included)
  std::size_t chunk = 1;    ///< elements per chunk (> 0); the last chunk may be shorter

  /// Number of chunks: ceil(elements / chunk).
  constexpr std::size_t count() const noexcept {
    return chunk ? (elements + chunk - 1) / chunk : 0;
  }
  /// First element of chunk `c`.
  constexpr std::size_t begin(std::size_t c) const noexcept { return c * chunk; }
  /// Elements of chunk `c` (the last one may be shorter).
  constexpr std::size_t size(std::size_t c) const noexcept {
    const std::size_t b = begin(c);
    return b >= elements ? 0 : std::min(chunk, elements - b);
  }
  /// The chunk holding element `i`.
  constexpr std::size_t chunk_of(std::size_t i) const noexcept { return i / chunk; }
};

/// Checks a density: a number in [0, 1] (NaN rejected). `who` names the caller.
inline void check_density(double density, const std::string& who, int rank = -1) {
  if (!(density >= 0.0 && density <= 1.0))
    throw invalid_argument(who + ": density must be in [0, 1], got " + std::to_string(density),
                           rank);
}

/// Chunks (or elements) kept at `density` out of `n`: round(density * n), halves up, at
/// least 1 when density > 0 and n > 0, at most n.
inline std::size_t chunks_kept(double density, std::size_t n) {
  check_density(density, "chunks_kept");
  if (n == 0 || density == 0.0) return 0;
  if (density == 1.0) return n;
  const long double want = static_cast<long double>(density) * static_cast<long double>(n);
  auto k = static_cast<std::size_t>(std::floor(want + 0.5L));
  return std::clamp<std::size_t>(k, 1, n);
}

/// Density of iteration `t` (0-based) under GradientFlow's linear warm-up: the sparsity
/// ramps from 0 at iteration 0 to `1 - target` at iteration `warmup` and stays there
/// (`warmup == 0`: the target from the start).
inline double warmup_density(double target, std::size_t warmup, std::size_t t) {
  check_density(target, "warmup_density");
  if (t >= warmup) return target;
  const double sparsity = (1.0 - target) * static_cast<double>(t) / static_cast<double>(warmup);
  return 1.0 - sparsity;
}

namespace detail {
/// Sort key of a norm: NaN as +inf (see the file comment).
inline float norm_key(float x) noexcept {
  return std::isnan(x) ? std::numeric_limits<float>::infinity() : x;
}
} // namespace detail

/// The `k` chunks with the largest `norms`, ties to the lower index (see the file
/// comment), as a mask (`mask[c] = 1` for a chosen chunk; resized to norms.size()).
/// Deterministic: the same norms give the same mask on every rank.
inline void select_top_chunks(std::span<const float> norms, std::size_t k,
                              std::vector<unsigned char>& mask) {
  const std::size_t n = norms.size();
  mask.assign(n, 0);
  if (k >= n) {
    std::fill(mask.begin(), mask.end(), 1);
    return;
  }
  if (k == 0) return;
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  auto before = [&](std::size_t a, std::size_t b) {
    const float x = detail::norm_key(norms[a]), y = detail::norm_key(norms[b]);
    return x > y || (x == y && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), before);
  for (std::size_t j = 0; j < k; ++j) mask[idx[j]] = 1;
}

/// Same, returning the mask.
inline std::vector<unsigned char> select_top_chunks(std::span<const float> norms, std::size_t k) {
  std::vector<unsigned char> mask;
  select_top_chunks(norms, k, mask);
  return mask;
}

} // namespace tcoll::sparse
