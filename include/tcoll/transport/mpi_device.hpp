#pragma once
/// \file
/// `mpi_device_transport`: the MPI transport for device buffers.
///
/// - CUDA-aware MPI (OpenMPI's `MPIX_Query_cuda_support()` says so at run time, or
///   `mpi_device_options::mode = cuda_aware`): device pointers go straight to the wrapped
///   `mpi_transport`.
/// - Otherwise staged through page-locked host memory, pipelined in segments of
///   `segment_bytes` (MXNET-MPI Sec. 6.3 runs its rings through host buffers the same way):
///   a send enqueues the device-to-host copy of every segment on the stream with an event
///   after each, and posts `MPI_Isend` for segment i as soon as its copy is done, so copies
///   overlap the transfers of earlier segments; a receive posts `MPI_Irecv` for every segment
///   at once and enqueues each segment's host-to-device copy as soon as it arrived.
///   Segments of different messages to one peer are posted in message order (per-peer FIFO),
///   which keeps MPI's in-order matching intact. Receive-and-reduce copies into the
///   executor's device staging slice and then enqueues the consumer on the same stream.
///
/// Completion is stream-ordered like the other device transports: a receive is complete
/// when its host-to-device copies (and consumer) are enqueued on `stream`; the executor's
/// per-round `reducer.synchronize()` makes them visible to the host. Data a send reads must
/// be complete on the stream when it is posted (the executor's rounds guarantee that).
/// Host-memory buffers bypass the staging (tests send host fingerprints).
///
/// Status: compiled against OpenMPI 4.1 and CUDA 13; not yet run (no machine with both a GPU
/// and MPI was available). See docs/gpu.md.
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#include <cuda_runtime_api.h>

#include <deque>
#include <memory>
#include <vector>

#include "../detail/cuda.hpp"
#include "mpi.hpp"

namespace tcoll {

/// Knobs of the device MPI transport.
struct mpi_device_options {
  enum class path { automatic, cuda_aware, staged };
  /// automatic: CUDA-aware when MPI reports it at run time, staged otherwise.
  path mode = path::automatic;
  /// Pipelining granularity of the staged path.
  std::size_t segment_bytes = std::size_t{1} << 20;
};

/// Does this MPI library handle device pointers (run-time check where MPI offers one)?
inline bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

namespace detail::mpi_device {

/// One staged message: pinned copy, per-segment events and MPI requests.
struct staged {
  bool send = false;
  bool cancelled = false;
  int peer = -1, tag = 0;
  std::size_t bytes = 0, seg = 0, nseg = 0;
  char* dev = nullptr;            // device source (send) or destination (receive)
  std::size_t pool_slot = 0;      // pinned buffer in the transport's pool
  char* host = nullptr;           // that buffer's memory
  std::vector<cudaEvent_t> ready; // send: D2H of segment i done
  std::vector<mpi_transport::request> mpi;
  std::size_t progressed = 0; // send: segments posted; receive: segments copied to the device
  std::size_t len(std::size_t i) const { return std::min(seg, bytes - i * seg); }
};

} // namespace detail::mpi_device

/// tcoll transport over MPI for device (or host) buffers; satisfies `tcoll::transport`.
class mpi_device_transport {
public:
  static constexpr bool zero_copy = false;
  static constexpr std::string_view name = "mpi_device";

  class request {
  public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&&) noexcept = default;
    ~request() {
      if (st_) st_->cancelled = true; // the per-peer FIFO drops it; pool slot is fenced
    }

  private:
    friend class mpi_device_transport;
    mpi_transport::request base_;
    std::shared_ptr<detail::mpi_device::staged> st_;
    consumer use_{};
    bool direct_ = true;
    bool done_ = false;
  };

  /// Duplicates `comm` (through `mpi_transport`); all copies are ordered on `stream`.
  mpi_device_transport(MPI_Comm comm, cudaStream_t stream, mpi_options options = {},
                       mpi_device_options knobs = {})
      : base_(comm, options), stream_(stream), knobs_(knobs) {
    if (knobs.segment_bytes == 0)
      throw invalid_argument("mpi_device_transport: segment_bytes must be positive", rank());
    cuda_aware_ = knobs.mode == mpi_device_options::path::cuda_aware ||
                  (knobs.mode == mpi_device_options::path::automatic && mpi_is_cuda_aware());
    sends_.resize(static_cast<std::size_t>(base_.size()));
  }
  mpi_device_transport(const mpi_device_transport&) = delete;
  mpi_device_transport& operator=(const mpi_device_transport&) = delete;
  ~mpi_device_transport() {
    base_.collectives().detach(); // stop the engine first
    for (auto& q : sends_) q.clear();
    (void)cudaStreamQuery(stream_);
    for (auto& p : pool_)
      if (p.fence) (void)cudaEventDestroy(p.fence);
    for (auto e : events_) (void)cudaEventDestroy(e);
  }

  /// The host transport's collective context (same communicator, same message spaces).
  collective_context& collectives() noexcept { return base_.collectives(); }
  /// MPI_THREAD_MULTIPLE check of the host transport (non-blocking collectives).
  void check_concurrent_use() const { base_.check_concurrent_use(); }
  int rank() const noexcept { return base_.rank(); }
  int size() const noexcept { return base_.size(); }
  std::chrono::milliseconds timeout() const noexcept { return base_.timeout(); }
  cudaStream_t stream() const noexcept { return stream_; }
  /// True when device pointers go to MPI directly.
  bool cuda_aware() const noexcept { return cuda_aware_; }
  mpi_transport& base() noexcept { return base_; }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    request r;
    if (direct(data, bytes)) {
      r.base_ = base_.isend(peer, data, bytes, tag);
      return r;
    }
    check_peer(peer, "isend");
    auto st =
        make_staged(true, peer, tag, bytes, const_cast<char*>(static_cast<const char*>(data)));
    for (std::size_t i = 0; i < st->nseg; ++i) {
      detail::cuda::check(cudaMemcpyAsync(st->host + i * st->seg, st->dev + i * st->seg, st->len(i),
                                          cudaMemcpyDeviceToHost, stream_),
                          "mpi_device isend (cudaMemcpyAsync D2H)", rank(), peer);
      st->ready.push_back(take_event());
      detail::cuda::check(cudaEventRecord(st->ready.back(), stream_),
                          "mpi_device isend (cudaEventRecord)", rank(), peer);
    }
    sends_[peer].push_back(st);
    r.st_ = st;
    r.direct_ = false;
    progress();
    return r;
  }

  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    return post_recv(peer, dst, bytes, tag, consumer{});
  }

  /// Receives into `staging` (device memory) and enqueues `use(staging)` after the copies.
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    if (bytes && !staging)
      throw invalid_argument("mpi_device irecv_consume: staging is null", rank(), peer);
    return post_recv(peer, staging, bytes, tag, use);
  }

  bool test(request& r) {
    if (r.done_) return true;
    if (r.direct_) return r.done_ = base_.test(r.base_);
    progress();
    auto& st = *r.st_;
    if (st.send) {
      if (st.progressed < st.nseg) return false;
      for (auto& q : st.mpi)
        if (!base_.test(q)) return false;
      finish(r);
      return true;
    }
    while (st.progressed < st.nseg && base_.test(st.mpi[st.progressed])) {
      const std::size_t i = st.progressed++;
      detail::cuda::check(cudaMemcpyAsync(st.dev + i * st.seg, st.host + i * st.seg, st.len(i),
                                          cudaMemcpyHostToDevice, stream_),
                          "mpi_device receive (cudaMemcpyAsync H2D)", rank(), st.peer);
    }
    if (st.progressed < st.nseg) return false;
    if (r.use_.fn) r.use_(st.dev, st.bytes);
    finish(r);
    return true;
  }

  void wait(request& r, deadline when) {
    for (int polls = 1;; ++polls) {
      if (test(r)) return;
      if ((polls & 63) == 0) {
        if (clock::now() >= when)
          throw timeout_error("mpi_device transfer timed out after " +
                                  std::to_string(timeout().count()) + " ms",
                              rank(), r.st_ ? r.st_->peer : -1);
        std::this_thread::yield();
      }
    }
  }

  void abort() noexcept { base_.abort(); }

private:
  struct pool_entry {
    std::shared_ptr<pinned_buffer<char>> buf;
    cudaEvent_t fence = nullptr; ///< recorded after the last copy that used the buffer
    bool in_use = false;
  };

  bool direct(const void* p, std::size_t bytes) const {
    if (cuda_aware_ || bytes == 0) return true;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return true;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size()) + ")",
                             rank());
  }
  request post_recv(int peer, void* dst, std::size_t bytes, int tag, consumer use) {
    request r;
    r.use_ = use;
    if (direct(dst, bytes)) {
      r.base_ = use.fn ? base_.irecv_consume(peer, bytes, tag, use, dst)
                       : base_.irecv(peer, dst, bytes, tag);
      return r;
    }
    check_peer(peer, "irecv");
    auto st = make_staged(false, peer, tag, bytes, static_cast<char*>(dst));
    for (std::size_t i = 0; i < st->nseg; ++i)
      st->mpi.push_back(base_.irecv(peer, st->host + i * st->seg, st->len(i), tag));
    r.st_ = st;
    r.direct_ = false;
    return r;
  }
  std::shared_ptr<detail::mpi_device::staged> make_staged(bool send, int peer, int tag,
                                                          std::size_t bytes, char* dev) {
    auto st = std::make_shared<detail::mpi_device::staged>();
    st->send = send;
    st->peer = peer;
    st->tag = tag;
    st->bytes = bytes;
    st->dev = dev;
    st->seg = knobs_.segment_bytes;
    st->nseg = (bytes + st->seg - 1) / st->seg;
    st->pool_slot = take_pinned(bytes);
    st->host = pool_[st->pool_slot].buf->data();
    return st;
  }
  /// Posts the MPI sends of every segment whose copy finished, in per-peer message order.
  void progress() {
    for (auto& q : sends_) {
      while (!q.empty()) {
        auto& st = *q.front();
        if (st.cancelled) {
          release(st);
          q.pop_front();
          continue;
        }
        while (st.progressed < st.nseg) {
          const cudaError_t e = cudaEventQuery(st.ready[st.progressed]);
          if (e == cudaErrorNotReady) break;
          detail::cuda::check(e, "mpi_device isend (segment copy)", rank(), st.peer);
          const std::size_t i = st.progressed++;
          st.mpi.push_back(base_.isend(st.peer, st.host + i * st.seg, st.len(i), st.tag));
        }
        if (st.progressed < st.nseg) break; // later messages to this peer wait their turn
        q.pop_front();
      }
    }
  }
  void finish(request& r) {
    r.done_ = true;
    release(*r.st_);
    r.st_.reset();
  }
  /// Returns events and the pinned buffer (fenced behind the copies that still use it).
  void release(detail::mpi_device::staged& st) {
    for (auto e : st.ready) free_events_.push_back(e);
    st.ready.clear();
    auto& p = pool_[st.pool_slot];
    if (!p.fence)
      detail::cuda::check(cudaEventCreateWithFlags(&p.fence, cudaEventDisableTiming),
                          "mpi_device (cudaEventCreate)", rank());
    (void)cudaEventRecord(p.fence, stream_);
    p.in_use = false;
  }
  std::size_t take_pinned(std::size_t bytes) {
    for (std::size_t i = 0; i < pool_.size(); ++i) {
      auto& p = pool_[i];
      if (!p.in_use && p.buf->size() >= bytes &&
          (!p.fence || cudaEventQuery(p.fence) == cudaSuccess)) {
        p.in_use = true;
        return i;
      }
    }
    pool_.push_back(
        {std::make_shared<pinned_buffer<char>>(std::max<std::size_t>(bytes, 1)), nullptr, true});
    return pool_.size() - 1;
  }
  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      auto e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    detail::cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                        "mpi_device (cudaEventCreate)", rank());
    events_.push_back(e);
    return e;
  }

  mpi_transport base_;
  cudaStream_t stream_;
  mpi_device_options knobs_;
  bool cuda_aware_ = false;
  std::vector<std::deque<std::shared_ptr<detail::mpi_device::staged>>> sends_;
  std::vector<pool_entry> pool_;
  std::vector<cudaEvent_t> free_events_;
  std::vector<cudaEvent_t> events_;
};

static_assert(check_transport<mpi_device_transport>());

} // namespace tcoll
