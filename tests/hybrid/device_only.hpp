#pragma once
// NCCL's rule without a GPU: `device_only<Inner>` forwards to a transport but rejects every
// send or receive buffer that a `pretend_device_reducer` did not allocate, as ncclSend and
// ncclRecv reject host memory. `pretend_device_reducer` is the CPU reducer with its buffers
// registered as "device memory" and the host <-> device copies of a real device reducer
// (`tcoll::host_device_copies`), counted. Together they check that a collective moves every
// message through the reducer's memory, on any machine.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tcoll/core/collective_context.hpp>
#include <tcoll/core/concepts.hpp>
#include <tcoll/core/error.hpp>
#include <tcoll/reduce/cpu.hpp>

namespace hybrid_test {

/// The address ranges allocated by `pretend_device_reducer` (shared by every rank thread).
class pretend_device_memory {
public:
  static void add(const void* p, std::size_t bytes) {
    std::lock_guard lock(mutex());
    ranges().push_back({reinterpret_cast<std::uintptr_t>(p), bytes});
  }
  static void remove(const void* p) {
    std::lock_guard lock(mutex());
    auto& r = ranges();
    r.erase(std::remove_if(
                r.begin(), r.end(),
                [&](const range& g) { return g.begin == reinterpret_cast<std::uintptr_t>(p); }),
            r.end());
  }
  /// Whether [p, p + bytes) lies in one allocation.
  static bool contains(const void* p, std::size_t bytes) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(mutex());
    for (const range& g : ranges())
      if (a >= g.begin && a + bytes <= g.begin + g.bytes) return true;
    return false;
  }

private:
  struct range {
    std::uintptr_t begin;
    std::size_t bytes;
  };
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<range>& ranges() {
    static std::vector<range> r;
    return r;
  }
};

/// An owning buffer registered as pretend device memory.
template <class T>
class pretend_device_buffer {
public:
  pretend_device_buffer() = default;
  explicit pretend_device_buffer(std::size_t n) : data_(n ? new T[n]() : nullptr), n_(n) {
    if (data_) pretend_device_memory::add(data_.get(), n * sizeof(T));
  }
  pretend_device_buffer(pretend_device_buffer&& o) noexcept
      : data_(std::move(o.data_)), n_(std::exchange(o.n_, 0)) {}
  pretend_device_buffer& operator=(pretend_device_buffer&& o) noexcept {
    release();
    data_ = std::move(o.data_);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  ~pretend_device_buffer() { release(); }
  T* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return n_; }

private:
  void release() noexcept {
    if (data_) pretend_device_memory::remove(data_.get());
    data_.reset();
    n_ = 0;
  }
  std::unique_ptr<T[]> data_;
  std::size_t n_ = 0;
};

/// The CPU reducer's arithmetic on pretend device memory, with a device reducer's host copies.
struct pretend_device_reducer {
  template <class T>
  using buffer = pretend_device_buffer<T>;
  static constexpr bool host_memory = false; // scratch comes from allocate(), as on a GPU

  std::shared_ptr<std::atomic<int>> host_copies = std::make_shared<std::atomic<int>>(0);

  template <class Op, class T>
  void reduce(const Op& op, T* dst, const T* a, const T* b, std::size_t n) const {
    tcoll::cpu_reducer{}.reduce(op, dst, a, b, n);
  }
  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    tcoll::cpu_reducer{}.copy(dst, src, n);
  }
  template <class T>
  void zero(T* dst, std::size_t n) const {
    tcoll::cpu_reducer{}.zero(dst, n);
  }
  template <class Op, class T>
  void finalize(const Op& op, T* dst, std::size_t n, int nranks) const {
    tcoll::cpu_reducer{}.finalize(op, dst, n, nranks);
  }
  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  void synchronize() const {}

  template <class T>
  void copy_from_host(T* dst, const T* host_src, std::size_t n) const {
    if (n && !pretend_device_memory::contains(dst, n * sizeof(T)))
      throw std::logic_error("copy_from_host: the destination is not device memory");
    ++*host_copies;
    if (n) std::memcpy(dst, host_src, n * sizeof(T));
  }
  template <class T>
  void copy_to_host(T* host_dst, const T* src, std::size_t n) const {
    if (n && !pretend_device_memory::contains(src, n * sizeof(T)))
      throw std::logic_error("copy_to_host: the source is not device memory");
    ++*host_copies;
    if (n) std::memcpy(host_dst, src, n * sizeof(T));
  }
};

/// `Inner` (held by reference) that refuses buffers outside pretend device memory, like NCCL.
template <tcoll::transport Inner>
class device_only {
public:
  using request = typename Inner::request;
  static constexpr bool zero_copy = tcoll::transport_is_zero_copy<Inner>();

  explicit device_only(Inner& inner) noexcept : inner_(&inner) {}

  int rank() const { return inner_->rank(); }
  int size() const { return inner_->size(); }
  std::chrono::milliseconds timeout() const { return inner_->timeout(); }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    require_device(data, bytes, "isend", peer);
    return inner_->isend(peer, data, bytes, tag);
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    require_device(dst, bytes, "irecv", peer);
    return inner_->irecv(peer, dst, bytes, tag);
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, tcoll::consumer use, void* staging) {
    if (staging) require_device(staging, bytes, "irecv_consume staging", peer);
    return inner_->irecv_consume(peer, bytes, tag, use, staging);
  }
  bool test(request& r) { return inner_->test(r); }
  void wait(request& r, tcoll::deadline when) { inner_->wait(r, when); }
  void abort() noexcept { inner_->abort(); }

  tcoll::collective_context& collectives() noexcept requires tcoll::has_collective_context<Inner> {
    return inner_->collectives();
  }
  void check_concurrent_use() const requires requires(const Inner& i) { i.check_concurrent_use(); }
  { inner_->check_concurrent_use(); }

private:
  void require_device(const void* p, std::size_t bytes, const char* what, int peer) const {
    if (bytes && !pretend_device_memory::contains(p, bytes))
      throw tcoll::invalid_argument(std::string("device_only::") + what + ": " +
                                        std::to_string(bytes) + " bytes in host memory",
                                    rank(), peer);
  }
  Inner* inner_;
};

} // namespace hybrid_test
