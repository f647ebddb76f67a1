#pragma once
/// \file
/// The device-memory `Buffers` policy of tests/common/collective_cases.hpp, and helpers of the
/// GPU suite. Every allocation is poisoned (0xA5 bytes) so an element the collective fails to
/// write shows up as a wrong value; allocations are offset by 0..2 elements (varying per
/// allocation and per rank) so the kernels' vector path, its scalar head/tail and the
/// all-scalar path for pointers that disagree modulo 16 all run; guard elements before and
/// after each buffer must still hold the poison when it is downloaded (no stray writes).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tcoll/detail/cuda.hpp>

namespace tcoll::testing {

inline constexpr unsigned char poison_byte = 0xA5;
inline constexpr std::size_t guard_elems = 4;

/// Timeout of every blocking wait in the GPU suite.
inline constexpr std::chrono::milliseconds gpu_timeout{30000};

/// `n` elements of device memory at `d`, copied to the host on stream `s` (waited for).
template <class T>
std::vector<T> download_array(const T* d, std::size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  if (n == 0) return h;
  detail::cuda::check(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDefault, s),
                      "test download");
  detail::cuda::synchronize(s, clock::now() + gpu_timeout);
  return h;
}

/// Device array at a deliberately varied offset inside a poisoned allocation.
template <class T>
class offset_buffer {
public:
  offset_buffer(std::size_t n, std::size_t offset, cudaStream_t s)
      : raw_(n + offset + 2 * guard_elems, s), n_(n), offset_(offset + guard_elems), stream_(s) {
    detail::cuda::check(cudaMemsetAsync(raw_.data(), poison_byte, raw_.size() * sizeof(T), s),
                        "test poison (cudaMemsetAsync)");
  }
  T* data() const noexcept { return n_ ? raw_.data() + offset_ : nullptr; }
  std::size_t size() const noexcept { return n_; }
  /// Every byte outside [data, data + n) still poisoned?
  bool guards_intact() const {
    std::vector<unsigned char> all(raw_.size() * sizeof(T));
    if (all.empty()) return true;
    detail::cuda::check(
        cudaMemcpyAsync(all.data(), raw_.data(), all.size(), cudaMemcpyDefault, stream_),
        "test guard download");
    detail::cuda::synchronize(stream_, clock::now() + gpu_timeout);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const bool inside = i >= offset_ * sizeof(T) && i < (offset_ + n_) * sizeof(T);
      if (!inside && all[i] != poison_byte) return false;
    }
    return true;
  }

private:
  device_buffer<T> raw_;
  std::size_t n_, offset_;
  cudaStream_t stream_;
};

/// `Buffers` policy: device memory on the rank's stream and reducer `Red{stream}`.
template <class Red>
struct device_buffers {
  cudaStream_t stream = nullptr;
  int rank = 0;
  mutable unsigned counter = 0;

  template <class T>
  using buffer = offset_buffer<T>;

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n, (counter++ + static_cast<unsigned>(rank)) % 3, stream);
  }
  template <class T>
  void upload(buffer<T>& dst, const std::vector<T>& src) const {
    REQUIRE(src.size() <= dst.size());
    if (src.empty()) return;
    detail::cuda::check(
        cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(T), cudaMemcpyDefault, stream),
        "test upload");
    detail::cuda::synchronize(stream, clock::now() + gpu_timeout);
  }
  template <class T>
  std::vector<T> download(const buffer<T>& src, std::size_t n) const {
    std::vector<T> out(n);
    if (n) {
      detail::cuda::check(
          cudaMemcpyAsync(out.data(), src.data(), n * sizeof(T), cudaMemcpyDefault, stream),
          "test download");
      detail::cuda::synchronize(stream, clock::now() + gpu_timeout);
    }
    CHECK_MESSAGE(src.guards_intact(),
                  "bytes outside a " << src.size() << "-element device buffer were written");
    return out;
  }
  Red reducer() const { return Red{stream}; }
};

} // namespace tcoll::testing
