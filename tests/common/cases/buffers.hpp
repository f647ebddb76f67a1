#pragma once
/// \file
/// Shared rank-level test bodies, topic: Buffer policy.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "level.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Buffer policy.

/// Host memory buffers and the CPU reducer (the default policy).
struct host_buffers {
  template <class T>
  using buffer = tcoll::host_buffer<T>;

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  template <class T>
  void upload(buffer<T>& dst, const std::vector<T>& src) const {
    if (!src.empty())
      std::memcpy(static_cast<void*>(dst.data()), src.data(), src.size() * sizeof(T));
  }
  template <class T>
  std::vector<T> download(const buffer<T>& src, std::size_t n) const {
    std::vector<T> out(n);
    if (n) std::memcpy(static_cast<void*>(out.data()), src.data(), n * sizeof(T));
    return out;
  }
  tcoll::cpu_reducer reducer() const { return {}; }
};

} // namespace tcoll::testing
