#pragma once
/// \file
/// `cuda_chunk_ops`: the per-chunk policy of the sparse-chunk adaptor (`chunk_ops.hpp`) as
/// CUDA kernels over device pointers, for a `gradient_pool` in device memory (a pool over
/// `cuda_reducer` or `thrust_reducer`). Same members as `host_chunk_ops`; needs nvcc.
///
/// Every call is asynchronous on `stream` except `upload`, `download` and `synchronize`,
/// which wait with a deadline (`timeout`, `timeout_error` instead of a hang). Give it the
/// stream the pool's reducer uses (`cuda_chunk_ops::on(reducer)`; on a `device_team` that
/// is the rank's `t.stream()`), so its kernels are ordered with the collectives' work.
///
/// Results, against `host_chunk_ops` on the same data:
///  - `accumulate_residual`, `gather`, `scatter`, `momentum_update`: the same arithmetic in
///    `accumulator_t<T>` with products and sums rounded separately (no FMA contraction), and
///    the same round-to-nearest-even casts to half/bfloat16, so the same bits (as long as the
///    host build does not contract into FMA either, which the default x86-64 target cannot).
///  - `chunk_norms`: one block of `norm_block` threads per chunk; thread j sums elements j,
///    j + norm_block, ... in order in double, then a `cub::BlockReduce` (warp reductions, a
///    fixed tree) adds the per-thread sums. The order is fixed by the chunk size alone, so
///    the same pool gives the same bits on every run, rank and GPU; it differs from the
///    host's order (eight partial sums), so device and host norms agree to a relative
///    ~1e-7 (the float rounding of nearly equal doubles), not bit for bit.
#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/concepts.hpp"
#include "../core/types.hpp"
#include "../detail/cuda.hpp"
#include "../reduce/cuda.cuh"
#include "chunk_ops.hpp"
#include "chunks.hpp"

namespace tcoll::sparse {

namespace detail::cuda_ops {

using tcoll::detail::cuda::from_acc;
using tcoll::detail::cuda::to_acc;

/// a * b, a + b and a - b rounded on their own: the compiler must not fuse a product and a
/// sum into an FMA, which the host loops do not do either.
template <class A>
__device__ __forceinline__ A mul(A a, A b) {
  return a * b;
}
template <>
__device__ __forceinline__ float mul<float>(float a, float b) {
  return __fmul_rn(a, b);
}
template <>
__device__ __forceinline__ double mul<double>(double a, double b) {
  return __dmul_rn(a, b);
}
template <class A>
__device__ __forceinline__ A add(A a, A b) {
  return a + b;
}
template <>
__device__ __forceinline__ float add<float>(float a, float b) {
  return __fadd_rn(a, b);
}
template <>
__device__ __forceinline__ double add<double>(double a, double b) {
  return __dadd_rn(a, b);
}
template <class A>
__device__ __forceinline__ A sub(A a, A b) {
  return a - b;
}
template <>
__device__ __forceinline__ float sub<float>(float a, float b) {
  return __fsub_rn(a, b);
}
template <>
__device__ __forceinline__ double sub<double>(double a, double b) {
  return __dsub_rn(a, b);
}

/// g += residual; residual = important ? 0 : f * g (see host_chunk_ops).
template <class T>
__global__ void accumulate_residual_kernel(T* g, T* residual, std::size_t n, bool important,
                                           accumulator_t<T> f) {
  using A = accumulator_t<T>;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const A v = add<A>(to_acc(g[i]), to_acc(residual[i]));
    const T gt = from_acc<T>(v);
    g[i] = gt;
    residual[i] = important ? T{} : from_acc<T>(mul<A>(f, to_acc(gt)));
  }
}

/// dst[i] = Wire(float(src[i] * scale)).
template <class Wire, class T>
__global__ void gather_kernel(Wire* dst, const T* src, std::size_t n, accumulator_t<T> scale) {
  using A = accumulator_t<T>;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = static_cast<float>(mul<A>(to_acc(src[i]), scale));
    dst[i] = from_acc<Wire>(static_cast<accumulator_t<Wire>>(x));
  }
}

/// dst[i] = T(src[i] * inv_scale) in the wire's accumulator type.
template <class T, class Wire>
__global__ void scatter_kernel(T* dst, const Wire* src, std::size_t n,
                               accumulator_t<Wire> inv_scale) {
  using A = accumulator_t<Wire>;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = from_acc<T>(static_cast<accumulator_t<T>>(mul<A>(to_acc(src[i]), inv_scale)));
}

/// One block per chunk (grid-striding over chunks): the L1 norm in double, in a fixed order
/// (see the file comment), divided like host_chunk_ops and stored as float.
template <int Block, class T>
__global__ void __launch_bounds__(Block)
    chunk_norms_kernel(const T* pool, std::size_t elements, std::size_t chunk, std::size_t count,
                       const unsigned char* important, double divide_important, double divide_all,
                       float* out) {
  using block_reduce = cub::BlockReduce<double, Block, cub::BLOCK_REDUCE_WARP_REDUCTIONS>;
  __shared__ typename block_reduce::TempStorage scratch;
  for (std::size_t c = blockIdx.x; c < count; c += gridDim.x) {
    const std::size_t b = c * chunk;
    const std::size_t m = b >= elements ? 0 : (elements - b < chunk ? elements - b : chunk);
    const T* p = pool + b;
    double s = 0.0;
    for (std::size_t i = threadIdx.x; i < m; i += Block)
      s = __dadd_rn(s, fabs(static_cast<double>(to_acc(p[i]))));
    double total = block_reduce(scratch).Sum(s);
    if (threadIdx.x == 0) {
      if (important[c]) total = __ddiv_rn(total, divide_important);
      total = __ddiv_rn(total, divide_all);
      out[c] = static_cast<float>(total);
    }
    __syncthreads(); // the scratch is reused by the next chunk
  }
}

/// u = momentum * u + lr * g; w = w -+ u (see host_chunk_ops).
template <class T>
__global__ void momentum_update_kernel(T* w, T* u, const T* g, std::size_t n, accumulator_t<T> lr,
                                       accumulator_t<T> momentum, bool descent) {
  using A = accumulator_t<T>;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const A nu = add<A>(mul<A>(momentum, to_acc(u[i])), mul<A>(lr, to_acc(g[i])));
    u[i] = from_acc<T>(nu);
    const A wi = to_acc(w[i]);
    w[i] = from_acc<T>(descent ? sub<A>(wi, nu) : add<A>(wi, nu));
  }
}

} // namespace detail::cuda_ops

/// Device implementation of the per-chunk work (see the file comment and `host_chunk_ops`).
/// Pointers are device (or managed) memory except the `important` mask and the host side of
/// `upload`/`download`. Copyable; holds no device memory between calls.
struct cuda_chunk_ops {
  /// Works on device memory (the adaptor rejects a pageable host pool).
  static constexpr bool host_memory = false;
  /// Threads per block of `chunk_norms` (fixed: it sets the summation order).
  static constexpr int norm_block = 256;

  /// The stream every kernel and copy is ordered on (default: the legacy default stream,
  /// as a default `cuda_reducer`). Use the pool's reducer's stream.
  cudaStream_t stream = nullptr;
  /// Deadline of `upload`, `download` and `synchronize`.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  /// Labels errors (-1: unknown).
  int rank = -1;
  /// Threads per block of the element-wise kernels.
  int block = 256;
  /// Resident blocks per SM the element-wise grids are sized for (grid-stride beyond).
  int blocks_per_sm = 4;

  /// Ops on the reducer's stream with its timeout.
  static cuda_chunk_ops on(const cuda_reducer& red, int rank = -1) {
    cuda_chunk_ops o;
    o.stream = red.stream;
    o.timeout = red.knobs.timeout;
    o.rank = rank;
    return o;
  }

  /// See host_chunk_ops::accumulate_residual.
  template <class T>
  void accumulate_residual(T* g, T* residual, std::size_t n, bool important, double factor) const {
    if (n == 0) return;
    detail::cuda_ops::accumulate_residual_kernel<<<grid(n), block, 0, stream>>>(
        g, residual, n, important, static_cast<accumulator_t<T>>(factor));
    launched("cuda_chunk_ops::accumulate_residual");
  }

  /// See host_chunk_ops::gather (a device-to-device copy when Wire is T and scale is 1).
  template <class Wire, class T>
  void gather(Wire* dst, const T* src, std::size_t n, float scale) const {
    if (n == 0) return;
    if constexpr (std::is_same_v<Wire, T>) {
      if (scale == 1.0f) {
        copy(dst, src, n * sizeof(T), "cuda_chunk_ops::gather (cudaMemcpyAsync)");
        return;
      }
    }
    detail::cuda_ops::gather_kernel<<<grid(n), block, 0, stream>>>(
        dst, src, n, static_cast<accumulator_t<T>>(scale));
    launched("cuda_chunk_ops::gather");
  }

  /// See host_chunk_ops::scatter (a device-to-device copy when Wire is T and inv_scale is 1).
  template <class T, class Wire>
  void scatter(T* dst, const Wire* src, std::size_t n, float inv_scale) const {
    if (n == 0) return;
    if constexpr (std::is_same_v<Wire, T>) {
      if (inv_scale == 1.0f) {
        copy(dst, src, n * sizeof(T), "cuda_chunk_ops::scatter (cudaMemcpyAsync)");
        return;
      }
    }
    detail::cuda_ops::scatter_kernel<<<grid(n), block, 0, stream>>>(
        dst, src, n, static_cast<accumulator_t<Wire>>(inv_scale));
    launched("cuda_chunk_ops::scatter");
  }

  /// See host_chunk_ops::chunk_norms. `important` is a host mask of `chunks.count()` entries;
  /// it is uploaded into stream-ordered scratch (freed in order after the kernel), so the
  /// caller may change it as soon as this returns.
  template <class T>
  void chunk_norms(const T* pool, const chunk_layout& chunks, const unsigned char* important,
                   double divide_important, double divide_all, float* out) const {
    const std::size_t n = chunks.count();
    if (n == 0) return;
    device_buffer<unsigned char> mask(n, stream);
    copy(mask.data(), important, n, "cuda_chunk_ops::chunk_norms (mask upload)");
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(n, std::size_t{1} << 20));
    detail::cuda_ops::chunk_norms_kernel<norm_block><<<blocks, norm_block, 0, stream>>>(
        pool, chunks.elements, chunks.chunk, n, mask.data(), divide_important, divide_all, out);
    launched("cuda_chunk_ops::chunk_norms");
  }

  /// See host_chunk_ops::momentum_update.
  template <class T>
  void momentum_update(T* w, T* u, const T* g, std::size_t n, double lr, double momentum,
                       bool descent) const {
    if (n == 0) return;
    using A = accumulator_t<T>;
    detail::cuda_ops::momentum_update_kernel<<<grid(n), block, 0, stream>>>(
        w, u, g, n, static_cast<A>(lr), static_cast<A>(momentum), descent);
    launched("cuda_chunk_ops::momentum_update");
  }

  /// Copies `n` elements from device memory to `host`, after the work queued before it, and
  /// waits (with the deadline).
  template <class E>
  void download(E* host, const E* src, std::size_t n) const {
    if (n == 0 || host == src) return;
    copy(host, src, n * sizeof(E), "cuda_chunk_ops::download (cudaMemcpyAsync)");
    synchronize();
  }
  /// Copies `n` elements from `host` to device memory and waits (with the deadline).
  template <class E>
  void upload(E* dst, const E* host, std::size_t n) const {
    if (n == 0 || dst == host) return;
    copy(dst, host, n * sizeof(E), "cuda_chunk_ops::upload (cudaMemcpyAsync)");
    synchronize();
  }

  /// Waits for the work queued on `stream`; `timeout_error` after `timeout`.
  void synchronize() const {
    tcoll::detail::cuda::synchronize(stream, clock::now() + timeout, "cuda_chunk_ops::synchronize",
                                     rank);
  }

private:
  unsigned grid(std::size_t n) const {
    const std::size_t b = static_cast<std::size_t>(std::max(1, block));
    const std::size_t cap =
        std::size_t(tcoll::detail::cuda::sm_count()) * std::size_t(std::max(1, blocks_per_sm));
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min((n + b - 1) / b, cap)));
  }
  void copy(void* dst, const void* src, std::size_t bytes, const char* what) const {
    tcoll::detail::cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), what,
                               rank);
  }
  void launched(const char* what) const {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      tcoll::detail::cuda::check(e, (std::string(what) + " (kernel launch)").c_str(), rank);
  }
};

} // namespace tcoll::sparse
