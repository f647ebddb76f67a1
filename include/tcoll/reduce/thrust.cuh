#pragma once
/// \file
/// `thrust_reducer`: the reducer contract through `thrust::transform` on a stream, the
/// reference device implementation the hand-written `cuda_reducer` is checked and
/// benchmarked against. Same element types, ops and conversions as `cuda_reducer` (it reuses
/// its device load/store helpers); the fused k-source form is k-1 pairwise transforms.
///
/// The execution policy is `thrust::cuda::par_nosync.on(stream)`: the same stream ordering
/// as `thrust::cuda::par.on(stream)` without the host synchronisation `par` adds after each
/// algorithm, so a reduce is as asynchronous as the kernel reducer's and `synchronize()`
/// (bounded, like every tcoll wait) is the only host wait.
#include <thrust/copy.h>
#include <thrust/execution_policy.h>
#include <thrust/transform.h>

#include <span>

#include "cuda.cuh"

namespace tcoll {

namespace detail::thrust_fn {
template <class Op, class T>
struct apply {
  Op op;
  __host__ __device__ T operator()(T a, T b) const {
#ifdef __CUDA_ARCH__
    using A = accumulator_t<T>;
    return cuda::from_acc<T>(static_cast<A>(op(cuda::to_acc(a), cuda::to_acc(b))));
#else
    return apply_op(op, a, b);
#endif
  }
};
template <class Op, class T>
struct finalize {
  Op op;
  int nranks;
  __host__ __device__ T operator()(T a) const {
#ifdef __CUDA_ARCH__
    using A = accumulator_t<T>;
    return cuda::from_acc<T>(static_cast<A>(op.finalize(cuda::to_acc(a), nranks)));
#else
    return finalize_op(op, a, nranks);
#endif
  }
};
} // namespace detail::thrust_fn

/// Thrust reducer; all work is ordered on `stream`.
struct thrust_reducer {
  template <class T>
  using buffer = device_buffer<T>;

  template <class Op, class T>
  static constexpr bool supports = cuda_reducer::supports<Op, T>;

  cudaStream_t stream = nullptr;
  /// Deadline of `synchronize()`.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);

  /// The execution policy every call uses.
  auto policy() const { return thrust::cuda::par_nosync.on(stream); }

  /// dst[i] = op(a[i], b[i]); dst may be a or b (exactly), otherwise no overlap.
  template <class Op, class T>
  void reduce(const Op& op, T* dst, const T* a, const T* b, std::size_t n) const {
    if (n == 0) return;
    thrust::transform(policy(), a, a + n, b, dst, detail::thrust_fn::apply<Op, T>{op});
    detail::cuda::check(cudaGetLastError(), "thrust_reducer::reduce");
  }

  /// dst = fold of the sources, as k-1 pairwise transforms (rounded after each).
  template <class Op, class T>
  void reduce_many(const Op& op, T* dst, std::span<const T* const> srcs, std::size_t n) const {
    if (n == 0) return;
    if (srcs.empty()) throw invalid_argument("thrust_reducer::reduce_many: no sources");
    if (srcs.size() == 1) return copy(dst, srcs[0], n);
    // dst may equal a source that is read after the first write: fold into scratch then
    bool late_alias = false;
    for (std::size_t j = 2; j < srcs.size(); ++j) late_alias = late_alias || srcs[j] == dst;
    device_buffer<T> tmp = allocate<T>(late_alias ? n : 0);
    T* acc = late_alias ? tmp.data() : dst;
    reduce(op, acc, srcs[0], srcs[1], n);
    for (std::size_t j = 2; j < srcs.size(); ++j) reduce(op, acc, acc, srcs[j], n);
    if (late_alias) copy(dst, acc, n);
  }

  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    if (n == 0 || dst == src) return;
    thrust::copy(policy(), src, src + n, dst);
    detail::cuda::check(cudaGetLastError(), "thrust_reducer::copy");
  }

  /// Host <-> device copies on `stream`, as `cuda_reducer`'s (`host_device_copies`).
  template <class T>
  void copy_from_host(T* dst, const T* host_src, std::size_t n) const {
    cuda_reducer{stream}.copy_from_host(dst, host_src, n);
  }
  template <class T>
  void copy_to_host(T* host_dst, const T* src, std::size_t n) const {
    cuda_reducer{stream}.copy_to_host(host_dst, src, n);
  }

  /// dst[0..n) = all-zero bytes (cudaMemsetAsync on `stream`).
  template <class T>
  void zero(T* dst, std::size_t n) const {
    if (n == 0) return;
    detail::cuda::check(cudaMemsetAsync(dst, 0, n * sizeof(T), stream),
                        "thrust_reducer::zero (cudaMemsetAsync)");
  }

  template <class Op, class T>
  void finalize(const Op& op, T* dst, std::size_t n, int nranks) const {
    if constexpr (finalizing_op<Op>) {
      if (n == 0) return;
      thrust::transform(policy(), dst, dst + n, dst,
                        detail::thrust_fn::finalize<Op, T>{op, nranks});
      detail::cuda::check(cudaGetLastError(), "thrust_reducer::finalize");
    }
  }

  template <class To, class From>
  void convert(To* dst, const From* src, std::size_t n, float scale = 1.0f) const {
    cuda_reducer{stream}.convert(dst, src, n, scale);
  }

  template <class T>
  device_buffer<T> allocate(std::size_t n) const {
    return device_buffer<T>(n, stream);
  }

  void synchronize() const {
    detail::cuda::synchronize(stream, clock::now() + timeout, "thrust_reducer::synchronize");
  }
};

static_assert(check_reducer<thrust_reducer>());

} // namespace tcoll
