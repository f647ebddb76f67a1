#pragma once
/// \file
/// The per-chunk local work of the sparse-chunk adaptor, in one policy: chunk L1 norms,
/// gathering a chunk into the send buffer (with a cast to the wire type), scattering it
/// back, the residual update of Algorithm 1 and the momentum-SGD update, plus the copies
/// between the policy's memory and the host (`upload`, `download`). `host_chunk_ops` runs
/// them as plain loops on host memory; `cuda_chunk_ops` (`cuda_chunk_ops.cuh`, nvcc only)
/// provides the same members as CUDA kernels over device pointers. Nothing else in
/// `sparse/` touches element data. `host_memory` says which memory a policy works on (the
/// adaptor checks its pool against it at construction).
///
/// Arithmetic happens in `accumulator_t<T>` (float for half and bfloat16); norms are summed
/// in double per chunk and stored as float. Pointers are to the policy's memory except
/// where a member says host (the `important` mask, the host side of `upload`/`download`).
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "../core/types.hpp"
#include "chunks.hpp"

namespace tcoll::sparse {

/// What the residual of an unsent element becomes (Algorithm 1 line 11 or DGC).
enum class residual_rule {
  /// GradientFlow Algorithm 1: hg_t = momentum * g_t (the unsent accumulated gradient is
  /// scaled by the momentum coefficient; a fraction 1 - momentum of it is dropped).
  momentum_scaled,
  /// Plain error feedback (DGC, top-k): hg_t = g_t; nothing is dropped, so sent plus
  /// residual is exactly the accumulated gradient.
  error_feedback,
  /// No residual: what was not sent is dropped (hg_t = 0).
  none,
};

/// The name of `r` in options, command lines and reports ("momentum_scaled",
/// "error_feedback", "none").
constexpr const char* to_string(residual_rule r) {
  switch (r) {
  case residual_rule::momentum_scaled:
    return "momentum_scaled";
  case residual_rule::error_feedback:
    return "error_feedback";
  case residual_rule::none:
    return "none";
  }
  return "?";
}

namespace detail {
/// Does the per-chunk policy work on host memory? (A policy without `host_memory` counts as
/// host; the adaptor checks its pool only against policies that say.)
template <class Ops>
constexpr bool ops_on_host() {
  if constexpr (requires { Ops::host_memory; })
    return Ops::host_memory;
  else
    return true;
}
} // namespace detail

/// Host implementation of the per-chunk work (see the file comment).
struct host_chunk_ops {
  /// Works on host memory (element pointers are host pointers).
  static constexpr bool host_memory = true;

  /// Preprocess of Algorithm 1 (lines 7-11) on `n` elements of one chunk: g += residual;
  /// then residual = 0 if `important`, else `factor * g` (factor: the momentum, or 1 for
  /// error feedback).
  template <class T>
  void accumulate_residual(T* g, T* residual, std::size_t n, bool important, double factor) const {
    using A = accumulator_t<T>;
    const A f = static_cast<A>(factor);
    for (std::size_t i = 0; i < n; ++i) {
      const A v = static_cast<A>(g[i]) + static_cast<A>(residual[i]);
      g[i] = static_cast<T>(v);
      residual[i] = important ? T{} : static_cast<T>(f * static_cast<A>(g[i]));
    }
  }

  /// dst[i] = Wire(src[i] * scale) (scale is only applied when it is not 1).
  template <class Wire, class T>
  void gather(Wire* dst, const T* src, std::size_t n, float scale) const {
    if constexpr (std::is_same_v<Wire, T>) {
      if (scale == 1.0f) {
        if (n) std::memcpy(static_cast<void*>(dst), src, n * sizeof(T));
        return;
      }
    }
    using A = accumulator_t<T>;
    for (std::size_t i = 0; i < n; ++i)
      dst[i] =
          static_cast<Wire>(static_cast<float>(static_cast<A>(src[i]) * static_cast<A>(scale)));
  }

  /// dst[i] = T(src[i] * inv_scale).
  template <class T, class Wire>
  void scatter(T* dst, const Wire* src, std::size_t n, float inv_scale) const {
    if constexpr (std::is_same_v<Wire, T>) {
      if (inv_scale == 1.0f) {
        if (n) std::memcpy(static_cast<void*>(dst), src, n * sizeof(T));
        return;
      }
    }
    using A = accumulator_t<Wire>;
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(static_cast<A>(src[i]) * static_cast<A>(inv_scale));
  }

  /// L1 norm of `m` elements in double: eight partial sums (element i goes to sum i % 8)
  /// combined pairwise, a fixed order, so the same values give the same norm, and the adds
  /// pipeline instead of waiting on one another.
  template <class T>
  static double l1_norm(const T* p, std::size_t m) {
    return eight_lane_sum(m, [p](std::size_t i) {
      return std::fabs(static_cast<double>(static_cast<accumulator_t<T>>(p[i])));
    });
  }

  /// The norm `chunk_norms` stores for an L1 sum `s`: divided by `divide_important` when
  /// the chunk is important, then by `divide_all`, as float.
  static float scaled_norm(double s, bool important, double divide_important, double divide_all) {
    if (important) s /= divide_important;
    s /= divide_all;
    return static_cast<float>(s);
  }

  /// out[c] = L1 norm of chunk c of `pool`, divided by `divide_important` when
  /// `important[c]` (a host mask) and by `divide_all` always (sum in double, stored as
  /// float).
  template <class T>
  void chunk_norms(const T* pool, const chunk_layout& chunks, const unsigned char* important,
                   double divide_important, double divide_all, float* out) const {
    for (std::size_t c = 0, n = chunks.count(); c < n; ++c)
      out[c] = scaled_norm(l1_norm(pool + chunks.begin(c), chunks.size(c)), important[c] != 0,
                           divide_important, divide_all);
  }

  /// `accumulate_residual` and, in the same pass, the `l1_norm` of the updated `g` (bit for
  /// bit the sum `l1_norm` computes afterwards). The adaptor uses it for chunks that are not
  /// sent: their pool values do not change after this, so the norm pass after the
  /// communication skips them (one pass over ~(1 - density) of the pool fewer).
  template <class T>
  double accumulate_residual_l1(T* g, T* residual, std::size_t n, bool important,
                                double factor) const {
    using A = accumulator_t<T>;
    const A f = static_cast<A>(factor);
    return eight_lane_sum(n, [&](std::size_t i) {
      const T v = static_cast<T>(static_cast<A>(g[i]) + static_cast<A>(residual[i]));
      g[i] = v;
      residual[i] = important ? T{} : static_cast<T>(f * static_cast<A>(v));
      return std::fabs(static_cast<double>(static_cast<A>(v)));
    });
  }

private:
  /// The sum of term(0) ... term(n - 1), each evaluated once in index order: term i goes to
  /// partial sum i % 8, and the eight are combined pairwise (the order `l1_norm` promises).
  template <class Term>
  static double eight_lane_sum(std::size_t n, Term&& term) {
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (std::size_t j = 0; j < 8; ++j) part[j] += term(i + j);
    for (; i < n; ++i) part[i % 8] += term(i);
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
  }

public:
  /// Momentum-SGD update of Algorithm 1 (lines 14-15) on `n` elements of important chunks:
  /// u = momentum * u + lr * g; w = w - u (descent) or w + u (the printed sign).
  template <class T>
  void momentum_update(T* w, T* u, const T* g, std::size_t n, double lr, double momentum,
                       bool descent) const {
    using A = accumulator_t<T>;
    const A l = static_cast<A>(lr), m = static_cast<A>(momentum);
    for (std::size_t i = 0; i < n; ++i) {
      const A nu = m * static_cast<A>(u[i]) + l * static_cast<A>(g[i]);
      u[i] = static_cast<T>(nu);
      w[i] = static_cast<T>(descent ? static_cast<A>(w[i]) - nu : static_cast<A>(w[i]) + nu);
    }
  }

  /// Copies `n` elements (the norm vector, the pool check's hashes) from the policy's
  /// memory to host memory (a device version downloads and waits).
  template <class E>
  void download(E* host, const E* src, std::size_t n) const {
    if (n && host != src) std::memcpy(static_cast<void*>(host), src, n * sizeof(E));
  }
  /// Copies `n` elements from host memory to the policy's memory (a device version uploads
  /// and waits).
  template <class E>
  void upload(E* dst, const E* host, std::size_t n) const {
    if (n && dst != host) std::memcpy(static_cast<void*>(dst), host, n * sizeof(E));
  }
  /// Waits for queued work (a device version synchronizes its stream).
  void synchronize() const noexcept {}
};

} // namespace tcoll::sparse
