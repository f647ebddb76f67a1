#pragma once
/// \file
/// The host reducer: plain loops the compiler vectorizes (SIMD for float sum at -O2 and up),
/// with each aliasing case spelled out so the `__restrict` promise is true.
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "../core/concepts.hpp"
#include "../core/ops.hpp"

namespace tcoll {

/// Owning, 64-byte aligned host array (scratch and staging space of the CPU reducer).
template <class T>
class host_buffer {
public:
  host_buffer() = default;
  explicit host_buffer(std::size_t n)
      : data_(n ? static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})) : nullptr),
        size_(n) {}
  host_buffer(host_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  host_buffer& operator=(host_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~host_buffer() {
    if (data_) ::operator delete (data_, std::align_val_t{64});
  }
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {
template <class Op, class T>
void reduce_inplace_left(const Op& op, T* __restrict dst, const T* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = apply_op(op, dst[i], src[i]);
}
template <class Op, class T>
void reduce_inplace_right(const Op& op, T* __restrict dst, const T* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = apply_op(op, src[i], dst[i]);
}
template <class Op, class T>
void reduce_three(const Op& op, T* __restrict dst, const T* __restrict a, const T* __restrict b,
                  std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = apply_op(op, a[i], b[i]);
}
} // namespace detail

/// Host-memory reducer. Supports every op of the core and every trivially copyable element
/// type the op can be applied to.
struct cpu_reducer {
  template <class T>
  using buffer = host_buffer<T>;
  /// Scratch lives in host memory: small collectives may borrow the calling thread's
  /// cached workspace instead of allocating (detail/executor.hpp).
  static constexpr bool host_memory = true;

  /// dst[i] = op(a[i], b[i]); dst may be a or b (exactly), otherwise no overlap.
  template <class Op, class T>
  void reduce(const Op& op, T* dst, const T* a, const T* b, std::size_t n) const {
    if (n == 0) return;
    if constexpr (array_op<Op>)
      op.reduce_arrays(dst, a, b, n);
    else if (dst == a)
      detail::reduce_inplace_left(op, dst, b, n);
    else if (dst == b)
      detail::reduce_inplace_right(op, dst, a, n);
    else
      detail::reduce_three(op, dst, a, b, n);
  }
  /// dst[0..n) = src[0..n) (non-overlapping).
  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    if (n && dst != src) std::memcpy(static_cast<void*>(dst), src, n * sizeof(T));
  }
  /// dst[0..n) = all-zero bytes (0 for every arithmetic type, half and bfloat16).
  template <class T>
  void zero(T* dst, std::size_t n) const {
    if (n) std::memset(static_cast<void*>(dst), 0, n * sizeof(T));
  }
  /// Final step of finalizing ops (avg divides by nranks); a no-op for the others.
  template <class Op, class T>
  void finalize(const Op& op, T* dst, std::size_t n, int nranks) const {
    if constexpr (finalizing_op<Op>)
      for (std::size_t i = 0; i < n; ++i) dst[i] = finalize_op(op, dst[i], nranks);
  }
  template <class T>
  host_buffer<T> allocate(std::size_t n) const {
    return host_buffer<T>(n);
  }
  void synchronize() const noexcept {}
};

static_assert(check_reducer<cpu_reducer>());

} // namespace tcoll
