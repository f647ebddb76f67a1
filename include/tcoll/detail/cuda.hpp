#pragma once
/// \file
/// Host-side CUDA runtime helpers shared by the device reducers and transports: error
/// checks that throw tcoll errors, bounded waits on events and streams (never an unbounded
/// cudaStreamSynchronize), and owning device / pinned host buffers. Needs only
/// `cuda_runtime_api.h`, so it compiles with a plain C++ compiler as well as with nvcc.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "../core/concepts.hpp"
#include "../core/error.hpp"

namespace tcoll::detail::cuda {

/// Throws `transport_error` naming the call, the CUDA error and the rank.
inline void check(cudaError_t e, const char* what, int rank = -1, int peer = -1) {
  if (e != cudaSuccess)
    throw transport_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" +
                              cudaGetErrorString(e) + ")",
                          rank, peer);
}

/// Polls `query()` (a cudaEventQuery/cudaStreamQuery) until it reports success; throws
/// `timeout_error` at `when` and `transport_error` on any error other than cudaErrorNotReady.
/// Spins briefly, then yields, then sleeps in short steps so many waiting ranks do not starve
/// the threads that still have work to submit.
template <class Query>
void wait_until(Query query, deadline when, const char* what, int rank = -1, int peer = -1) {
  for (int spin = 0;; ++spin) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check(e, what, rank, peer);
    if ((spin & 255) == 255 && clock::now() >= when)
      throw timeout_error(std::string(what) + " did not complete before the deadline", rank, peer);
    if (spin < 2000)
      continue;
    else if (spin < 20000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

/// Waits for everything enqueued on `s` so far, with a deadline.
inline void synchronize(cudaStream_t s, deadline when, const char* what = "stream synchronize",
                        int rank = -1) {
  wait_until([s] { return cudaStreamQuery(s); }, when, what, rank);
}

/// Waits for the last record of `e`, with a deadline.
inline void wait_event(cudaEvent_t e, deadline when, const char* what = "event wait", int rank = -1,
                       int peer = -1) {
  wait_until([e] { return cudaEventQuery(e); }, when, what, rank, peer);
}

/// Streaming multiprocessor count of the current device (cached per device).
inline int sm_count() {
  static int cache[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev >= 0 && dev < 64 && cache[dev] > 0) return cache[dev];
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  if (dev >= 0 && dev < 64) cache[dev] = sms; // benign race: every writer stores the same value
  return sms;
}

/// Is `s` being captured into a CUDA graph? (An error counts as no; it is cleared.)
inline bool is_capturing(cudaStream_t s) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

/// Held around stream-ordered allocations and frees made while their stream is being
/// captured, so graph memory nodes are created one at a time. Found on an H100 (driver of
/// CUDA 13.0): when the eight rank threads of a `device_team` allocated scratch into one
/// capture at once, the graph's allocations landed in four separate address ranges
/// (`cudaGraphDebugDotPrint`) and the graph's first launch failed with
/// `cudaErrorIllegalAddress`; one at a time, they share one range and the graph runs.
inline std::mutex& capture_allocation_mutex() {
  static std::mutex m;
  return m;
}

/// `cudaMallocAsync` / `cudaFreeAsync`, serialised while `s` is being captured.
inline cudaError_t malloc_async(void** p, std::size_t bytes, cudaStream_t s) {
  if (!is_capturing(s)) return cudaMallocAsync(p, bytes, s);
  std::lock_guard lock(capture_allocation_mutex());
  return cudaMallocAsync(p, bytes, s);
}
inline cudaError_t free_async(void* p, cudaStream_t s) {
  if (!is_capturing(s)) return cudaFreeAsync(p, s);
  std::lock_guard lock(capture_allocation_mutex());
  return cudaFreeAsync(p, s);
}

} // namespace tcoll::detail::cuda

namespace tcoll {

/// Owning device array, allocated and freed stream-ordered (cudaMallocAsync/cudaFreeAsync) on
/// the stream it was made for, so scratch space costs no device-wide synchronisation.
/// Must be destroyed before its stream.
template <class T>
class device_buffer {
public:
  device_buffer() = default;
  device_buffer(std::size_t n, cudaStream_t stream) : size_(n), stream_(stream) {
    if (n == 0) return;
    void* p = nullptr;
    detail::cuda::check(detail::cuda::malloc_async(&p, n * sizeof(T), stream),
                        ("cudaMallocAsync of " + std::to_string(n * sizeof(T)) + " bytes").c_str());
    data_ = static_cast<T*>(p);
  }
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        stream_(o.stream_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(stream_, o.stream_);
    return *this;
  }
  ~device_buffer() {
    if (data_) (void)detail::cuda::free_async(data_, stream_); // a destructor cannot report
  }
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  cudaStream_t stream() const noexcept { return stream_; }

private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
};

/// Owning page-locked host array (staging space for copies that overlap transfers).
template <class T>
class pinned_buffer {
public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t n) : size_(n) {
    if (n == 0) return;
    void* p = nullptr;
    detail::cuda::check(cudaMallocHost(&p, n * sizeof(T)),
                        ("cudaMallocHost of " + std::to_string(n * sizeof(T)) + " bytes").c_str());
    data_ = static_cast<T*>(p);
  }
  pinned_buffer(pinned_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~pinned_buffer() {
    if (data_) (void)cudaFreeHost(data_);
  }
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

} // namespace tcoll
