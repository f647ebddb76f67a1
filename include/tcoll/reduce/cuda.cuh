#pragma once
/// \file
/// `cuda_reducer`: stream-ordered CUDA kernels for `dst = op(a, b)`, a fused k-source form
/// `dst = op(...op(s0, s1)..., s(k-1))`, copy, finalize (avg) and stream-ordered scratch.
///
/// Kernels use every SM (MXNET-MPI Sec. 7.3: one thread block leaves most of the memory
/// bandwidth unused): the grid is sized from the device's SM count and grid-strides over the
/// data. When every pointer of a call has the same offset modulo 16 bytes, the body moves
/// 16-byte vectors (`ld.global.v4`) and only the < 16-byte head and tail go element by
/// element; otherwise the whole call runs element-wise (still coalesced).
///
/// Element types: every type of the core. `tcoll::half` / `tcoll::bfloat16` have the bit
/// layout of `__half` / `__nv_bfloat16` and are converted with the CUDA intrinsics (round to
/// nearest even, as the host types); arithmetic happens in float. Any other trivially
/// copyable type whose op is callable on the device works too (e.g. `symbolic::rank_set`).
///
/// Ops: the core ops are `constexpr`, so device code may call them (compile with
/// `--expt-relaxed-constexpr`). A user op must be device-callable: a functor with a
/// `constexpr` or `__host__ __device__` call operator, or a `__host__ __device__` lambda
/// (needs `--extended-lambda`). A host-only lambda fails to compile inside the kernel.
///
/// Every call is asynchronous on `stream`; `synchronize()` waits with a deadline
/// (`timeout`) and throws `timeout_error` instead of hanging.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../detail/cuda.hpp"

namespace tcoll {

namespace detail::cuda {

/// Load a stored element into its accumulator type (float for the 16-bit floats).
template <class T>
__device__ __forceinline__ accumulator_t<T> to_acc(T x) {
  return x;
}
template <>
__device__ __forceinline__ float to_acc<half>(half x) {
  return __half2float(__ushort_as_half(x.bits));
}
template <>
__device__ __forceinline__ float to_acc<bfloat16>(bfloat16 x) {
  return __bfloat162float(__ushort_as_bfloat16(x.bits));
}

/// Store an accumulator value as element type T (round to nearest even for 16-bit floats).
template <class T>
__device__ __forceinline__ T from_acc(accumulator_t<T> a) {
  return static_cast<T>(a);
}
template <>
__device__ __forceinline__ half from_acc<half>(float a) {
  half h;
  h.bits = __half_as_ushort(__float2half_rn(a));
  return h;
}
template <>
__device__ __forceinline__ bfloat16 from_acc<bfloat16>(float a) {
  bfloat16 h;
  h.bits = __bfloat16_as_ushort(__float2bfloat16_rn(a));
  return h;
}

/// Elements per 16-byte vector, or 1 when T does not tile 16 bytes.
template <class T>
inline constexpr int vec_width = (sizeof(T) <= 16 && 16 % sizeof(T) == 0) ? int(16 / sizeof(T)) : 1;

/// A 16-byte vector of elements (loaded and stored as one uint4).
template <class T, int V>
struct pack {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ pack<T, V> load_pack(const T* p, std::size_t i) {
  static_assert(sizeof(pack<T, V>) == 16);
  const uint4 raw = reinterpret_cast<const uint4*>(p)[i];
  pack<T, V> r;
  memcpy(&r, &raw, 16);
  return r;
}
template <class T, int V>
__device__ __forceinline__ void store_pack(T* p, std::size_t i, const pack<T, V>& x) {
  uint4 raw;
  memcpy(&raw, &x, 16);
  reinterpret_cast<uint4*>(p)[i] = raw;
}

/// Up to `max_sources` source pointers passed by value to the fused kernel.
inline constexpr int max_sources = 8;
template <class T>
struct source_list {
  const T* p[max_sources];
  int k;
};

/// Split of n elements into a scalar head (until 16-byte alignment), `nvec` vectors of V
/// elements, and a scalar tail. Pointers that disagree modulo 16 (or a T that does not tile
/// 16 bytes) make everything scalar (head == n).
struct split {
  std::size_t head = 0, nvec = 0, n = 0;
};

template <class T>
split make_split(bool same_offset, std::uintptr_t first, std::size_t n) {
  constexpr int V = vec_width<T>;
  split s;
  s.n = n;
  if (V == 1 || !same_offset) {
    s.head = n;
    return s;
  }
  const std::uintptr_t mis = first % 16;
  std::size_t head = mis == 0 ? 0 : (16 - mis) / sizeof(T);
  if (mis % sizeof(T) != 0 || head > n) {
    s.head = n;
    return s;
  }
  s.head = head;
  s.nvec = (n - head) / V;
  return s;
}

/// Scalar index `i` of the head+tail space mapped to an element index.
__device__ __forceinline__ std::size_t scalar_index(const split& s, std::size_t i, int V) {
  return i < s.head ? i : s.head + s.nvec * V + (i - s.head);
}

/// dst = fold(op, src[0..K)) in the accumulator type, rounded once. K == 0: runtime k.
template <int K, class Op, class T>
__global__ void fold_kernel(Op op, T* dst, source_list<T> src, split s) {
  constexpr int V = vec_width<T>;
  using A = accumulator_t<T>;
  const int k = K > 0 ? K : src.k;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  if constexpr (V > 1) {
    T* dv = dst + s.head;
    for (std::size_t i = tid; i < s.nvec; i += stride) {
      pack<T, V> x = load_pack<T, V>(src.p[0] + s.head, i);
      A acc[V];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = to_acc(x.v[e]);
#pragma unroll(K > 0 ? K : 1)
      for (int j = 1; j < k; ++j) {
        const pack<T, V> y = load_pack<T, V>(src.p[j] + s.head, i);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = static_cast<A>(op(acc[e], to_acc(y.v[e])));
      }
#pragma unroll
      for (int e = 0; e < V; ++e) x.v[e] = from_acc<T>(acc[e]);
      store_pack<T, V>(dv, i, x);
    }
  }
  const std::size_t scalars = s.n - s.nvec * V;
  for (std::size_t i = tid; i < scalars; i += stride) {
    const std::size_t at = scalar_index(s, i, V);
    A acc = to_acc(src.p[0][at]);
    for (int j = 1; j < k; ++j) acc = static_cast<A>(op(acc, to_acc(src.p[j][at])));
    dst[at] = from_acc<T>(acc);
  }
}

/// dst = finalize(op, dst, nranks) element-wise (avg: divide by the rank count).
template <class Op, class T>
__global__ void finalize_kernel(Op op, T* dst, split s, int nranks) {
  constexpr int V = vec_width<T>;
  using A = accumulator_t<T>;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  if constexpr (V > 1) {
    T* dv = dst + s.head;
    for (std::size_t i = tid; i < s.nvec; i += stride) {
      pack<T, V> x = load_pack<T, V>(dv, i);
#pragma unroll
      for (int e = 0; e < V; ++e)
        x.v[e] = from_acc<T>(static_cast<A>(op.finalize(to_acc(x.v[e]), nranks)));
      store_pack<T, V>(dv, i, x);
    }
  }
  const std::size_t scalars = s.n - s.nvec * V;
  for (std::size_t i = tid; i < scalars; i += stride) {
    const std::size_t at = scalar_index(s, i, V);
    dst[at] = from_acc<T>(static_cast<A>(op.finalize(to_acc(dst[at]), nranks)));
  }
}

/// Elements per step of the cast kernel's vector path: 8 elements are a whole number of
/// 16-byte vectors on both sides for 2-, 4- and 8-byte types (float <-> half: 32 bytes read,
/// 16 written).
inline constexpr int convert_pack = 8;
template <class To, class From>
inline constexpr bool convert_vectorizable = (convert_pack * sizeof(To)) % 16 == 0 &&
                                             (convert_pack * sizeof(From)) % 16 == 0;

/// dst[i] = To(scale * float(src[i])) (mixed-precision casts; float math for every type).
/// Elements [head, head + 8 * npacks) move as 16-byte vectors (both pointers are 16-byte
/// aligned there); the head and the tail go element by element.
template <class To, class From>
__global__ void convert_kernel(To* dst, const From* src, std::size_t n, float scale,
                               std::size_t head, std::size_t npacks) {
  constexpr int E = convert_pack;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  auto cast = [scale](From x) {
    return from_acc<To>(static_cast<accumulator_t<To>>(static_cast<float>(to_acc(x)) * scale));
  };
  if constexpr (convert_vectorizable<To, From>) {
    constexpr int in_vecs = E * sizeof(From) / 16, out_vecs = E * sizeof(To) / 16;
    const uint4* sv = reinterpret_cast<const uint4*>(src + head);
    uint4* dv = reinterpret_cast<uint4*>(dst + head);
    for (std::size_t p = tid; p < npacks; p += stride) {
      uint4 raw[in_vecs];
#pragma unroll
      for (int k = 0; k < in_vecs; ++k) raw[k] = sv[p * in_vecs + k];
      From in[E];
      memcpy(in, raw, sizeof in);
      To out[E];
#pragma unroll
      for (int e = 0; e < E; ++e) out[e] = cast(in[e]);
      uint4 wraw[out_vecs];
      memcpy(wraw, out, sizeof out);
#pragma unroll
      for (int k = 0; k < out_vecs; ++k) dv[p * out_vecs + k] = wraw[k];
    }
  }
  const std::size_t scalars = n - npacks * E;
  for (std::size_t i = tid; i < scalars; i += stride) {
    const std::size_t at = i < head ? i : head + npacks * E + (i - head);
    dst[at] = cast(src[at]);
  }
}

inline std::uintptr_t addr(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

} // namespace detail::cuda

/// Tuning knobs of the CUDA reducer.
struct cuda_reducer_options {
  /// Threads per block.
  int block = 512;
  /// Resident blocks per SM the grid is sized for (grid = SMs x this, fewer for small n).
  int blocks_per_sm = 4;
  /// Deadline of `synchronize()`.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

/// CUDA kernel reducer; all work is ordered on `stream` (pass the transport's stream).
struct cuda_reducer {
  template <class T>
  using buffer = device_buffer<T>;

  /// Every op callable on the device over the element's accumulator type.
  template <class Op, class T>
  static constexpr bool supports = std::is_trivially_copyable_v<T>&&
      std::is_invocable_v<const Op&, accumulator_t<T>, accumulator_t<T>>;

  cudaStream_t stream = nullptr;
  cuda_reducer_options knobs{};

  /// dst[i] = op(a[i], b[i]); dst may be a or b (exactly), otherwise no overlap.
  template <class Op, class T>
  void reduce(const Op& op, T* dst, const T* a, const T* b, std::size_t n) const {
    if (n == 0) return;
    detail::cuda::source_list<T> src{{a, b}, 2};
    launch_fold<2>(op, dst, src, n);
  }

  /// Fused form: dst[i] = op(...op(op(s0[i], s1[i]), s2[i])..., s(k-1)[i]) accumulated in
  /// `accumulator_t<T>` and rounded once per batch of up to 8 sources (a 16-bit float result
  /// may therefore differ in the last bit from k-1 pairwise reduces). dst may equal any
  /// source exactly. k == 1 copies.
  template <class Op, class T>
  void reduce_many(const Op& op, T* dst, std::span<const T* const> srcs, std::size_t n) const {
    if (n == 0) return;
    if (srcs.empty()) throw invalid_argument("cuda_reducer::reduce_many: no sources");
    if (srcs.size() == 1) return copy(dst, srcs[0], n);
    // a batch reads all its sources before writing, but dst must not be a source of a later
    // batch (it is overwritten by the first): fold into scratch then
    bool late_alias = false;
    for (std::size_t j = detail::cuda::max_sources; j < srcs.size(); ++j)
      late_alias = late_alias || srcs[j] == dst;
    device_buffer<T> tmp = allocate<T>(late_alias ? n : 0);
    T* acc = late_alias ? tmp.data() : dst;
    std::size_t next = 0;
    bool first = true;
    while (next < srcs.size()) {
      detail::cuda::source_list<T> list{};
      int k = 0;
      if (!first) list.p[k++] = acc; // carry the partial result in order
      while (k < detail::cuda::max_sources && next < srcs.size()) list.p[k++] = srcs[next++];
      list.k = k;
      if (k > 1) launch_fold<0>(op, acc, list, n);
      first = false;
    }
    if (late_alias) copy(dst, acc, n);
  }

  /// dst[0..n) = src[0..n) (device-to-device or any direction cudaMemcpyDefault handles).
  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    if (n == 0 || dst == src) return;
    detail::cuda::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDefault, stream),
                        "cuda_reducer::copy (cudaMemcpyAsync)");
  }

  /// Host to device: dst (device) [0..n) = host_src[0..n) (cudaMemcpyAsync on `stream`; a
  /// pageable host source may be reused once it returns). `host_device_copies`.
  template <class T>
  void copy_from_host(T* dst, const T* host_src, std::size_t n) const {
    if (n == 0) return;
    detail::cuda::check(
        cudaMemcpyAsync(dst, host_src, n * sizeof(T), cudaMemcpyHostToDevice, stream),
        "cuda_reducer::copy_from_host (cudaMemcpyAsync)");
  }
  /// Device to host: host_dst[0..n) = src (device) [0..n), on `stream`; complete after
  /// `synchronize()`. `host_device_copies`.
  template <class T>
  void copy_to_host(T* host_dst, const T* src, std::size_t n) const {
    if (n == 0) return;
    detail::cuda::check(
        cudaMemcpyAsync(host_dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream),
        "cuda_reducer::copy_to_host (cudaMemcpyAsync)");
  }

  /// dst[0..n) = all-zero bytes (cudaMemsetAsync on `stream`).
  template <class T>
  void zero(T* dst, std::size_t n) const {
    if (n == 0) return;
    detail::cuda::check(cudaMemsetAsync(dst, 0, n * sizeof(T), stream),
                        "cuda_reducer::zero (cudaMemsetAsync)");
  }

  /// Final step of finalizing ops (avg divides by nranks); a no-op for the others.
  template <class Op, class T>
  void finalize(const Op& op, T* dst, std::size_t n, int nranks) const {
    if constexpr (finalizing_op<Op>) {
      if (n == 0) return;
      const auto s = detail::cuda::make_split<T>(true, detail::cuda::addr(dst), n);
      detail::cuda::finalize_kernel<<<grid<T>(s), knobs.block, 0, stream>>>(op, dst, s, nranks);
      detail::cuda::check(cudaGetLastError(), "cuda_reducer::finalize (kernel launch)");
    }
  }

  /// dst[i] = To(scale * float(src[i])): the casts of the mixed-precision adaptor.
  template <class To, class From>
  void convert(To* dst, const From* src, std::size_t n, float scale = 1.0f) const {
    if (n == 0) return;
    // vector path from the first element where both pointers are 16-byte aligned, if any
    std::size_t head = n, npacks = 0;
    if constexpr (detail::cuda::convert_vectorizable<To, From>)
      for (std::size_t h = 0; h < std::min<std::size_t>(n, 16); ++h)
        if ((detail::cuda::addr(src + h) | detail::cuda::addr(dst + h)) % 16 == 0) {
          head = h;
          npacks = (n - h) / detail::cuda::convert_pack;
          break;
        }
    const std::size_t items = npacks + (n - npacks * detail::cuda::convert_pack);
    const unsigned blocks = static_cast<unsigned>(
        std::max<std::size_t>(1, std::min<std::size_t>((items + knobs.block - 1) / knobs.block,
                                                       std::size_t(detail::cuda::sm_count()) *
                                                           std::max(1, knobs.blocks_per_sm))));
    detail::cuda::convert_kernel<<<blocks, knobs.block, 0, stream>>>(dst, src, n, scale, head,
                                                                     npacks);
    detail::cuda::check(cudaGetLastError(), "cuda_reducer::convert (kernel launch)");
  }

  /// Device scratch of n elements, allocated and freed in order on `stream`.
  template <class T>
  device_buffer<T> allocate(std::size_t n) const {
    return device_buffer<T>(n, stream);
  }

  /// Waits for all work enqueued on `stream`, throwing `timeout_error` after `knobs.timeout`.
  void synchronize() const {
    detail::cuda::synchronize(stream, clock::now() + knobs.timeout, "cuda_reducer::synchronize");
  }

private:
  /// Enough blocks for the work, at most `blocks_per_sm` per SM (grid-stride beyond that).
  template <class T>
  unsigned grid(const detail::cuda::split& s) const {
    const std::size_t items = s.nvec + (s.n - s.nvec * detail::cuda::vec_width<T>);
    const std::size_t want = (items + knobs.block - 1) / knobs.block;
    const std::size_t cap =
        std::size_t(detail::cuda::sm_count()) * std::max(1, knobs.blocks_per_sm);
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min(want, cap)));
  }

  template <int K, class Op, class T>
  void launch_fold(const Op& op, T* dst, const detail::cuda::source_list<T>& src,
                   std::size_t n) const {
    // the vector path needs every pointer at the same offset modulo 16
    const std::uintptr_t mis = detail::cuda::addr(dst) % 16;
    bool same = true;
    for (int j = 0; j < src.k; ++j) same = same && detail::cuda::addr(src.p[j]) % 16 == mis;
    const auto s = detail::cuda::make_split<T>(same, detail::cuda::addr(dst), n);
    detail::cuda::fold_kernel<K><<<grid<T>(s), knobs.block, 0, stream>>>(op, dst, src, s);
    detail::cuda::check(cudaGetLastError(), "cuda_reducer::reduce (kernel launch)");
  }
};

static_assert(check_reducer<cuda_reducer>());

} // namespace tcoll
