#pragma once
/// \file
/// `device_team`: N virtual ranks on one GPU. Each rank is a host thread with its own
/// non-blocking CUDA stream; its buffers are ordinary device memory of the same GPU. It lets
/// every generic algorithm, with the `cuda` or `thrust` reducer, run end to end on a single
/// GPU (tests, `allreduce_perf -t device_team`).
///
/// Zero copy, ordered by events, never by host waits on the GPU:
///  - `isend` records a *ready* event on the sender's stream after the work that produced the
///    data and posts a descriptor (device pointer, size, tag, events).
///  - The receiver, when it matches the descriptor, makes its stream wait on *ready*, then
///    enqueues the copy (`irecv`) or the consumer's reduce kernel (`irecv_consume`, reading
///    the sender's device memory directly) on its stream, and records a *done* event.
///  - The sender's request completes when the receiver has recorded *done*; the sender's
///    stream then waits on *done*, so nothing the sender enqueues later can overwrite data
///    that is still being read.
/// Consumers must enqueue their work on this rank's `stream()` (use
/// `cuda_reducer{t.stream()}`); work on another stream would escape the ordering.
/// Host memory may be sent and received with `isend`/`irecv` (tests exchange fingerprints
/// that way): such a request completes only after the copy has, since the host touches the
/// memory next. `irecv_consume` needs device-accessible sender memory.
/// Stream ordered (`transport_is_stream_ordered`): a collective on device memory enqueues all
/// its rounds and returns; the host waits only to match a send with its receive (the
/// descriptor exchange between the ranks' threads), never for the GPU, so a whole team's
/// collective can be captured in one CUDA graph (each rank's stream joined to the capture).
/// Every host-side wait has a deadline; a failing rank aborts the team.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../detail/cuda.hpp"
#include "detail/rendezvous.hpp"

namespace tcoll {

namespace detail::devteam {

/// A posted send. Owned by the sender (recycled through its free list, so its two events
/// are created once).
struct send_slot {
  const void* data = nullptr;
  std::size_t bytes = 0;
  int tag = 0;
  bool host = false;           ///< data is host memory: completion needs a host wait
  cudaEvent_t ready = nullptr; ///< recorded by the sender at isend
  cudaEvent_t done = nullptr;  ///< recorded by the receiver after enqueuing its read
  // 0 queued, 1 being consumed, 2 done, 3 done with a size mismatch, 4 receiver failed
  std::atomic<int> state{0};
  ~send_slot() {
    if (ready) (void)cudaEventDestroy(ready);
    if (done) (void)cudaEventDestroy(done);
  }
};

using doorbell = tcoll::detail::doorbell;
using mailbox = tcoll::detail::mailbox<send_slot>;

struct shared_state {
  shared_state(int n, std::chrono::milliseconds t, int dev)
      : nranks(n), timeout(t), device(dev), boxes(static_cast<std::size_t>(n) * n), bells(n) {}
  int nranks;
  std::chrono::milliseconds timeout;
  int device;
  std::vector<mailbox> boxes; // [src * nranks + dst]
  std::vector<doorbell> bells;
  std::atomic<bool> aborted{false};
  // barrier with a deadline (std::barrier has none)
  std::mutex bar_mutex;
  std::condition_variable bar_cv;
  int bar_count = 0;
  std::uint64_t bar_generation = 0;
  mailbox& box(int src, int dst) { return boxes[static_cast<std::size_t>(src) * nranks + dst]; }
};

} // namespace detail::devteam

/// One virtual rank of a `device_team`; satisfies `tcoll::transport`.
class device_transport {
public:
  static constexpr bool zero_copy = true;
  /// Requests complete once their GPU work is enqueued and ordered (see the file comment):
  /// a collective returns without waiting for the GPU.
  static constexpr bool stream_ordered = true;
  static constexpr std::string_view name = "device_team";

  /// A pending transfer. Destroying a pending send withdraws it, or, if a receiver already
  /// read it, makes this rank's stream wait for that read, so unwinding after an error
  /// never lets later work overwrite memory a peer's kernel still reads.
  class request {
  public:
    request() = default;
    request(request&& o) noexcept { *this = std::move(o); }
    request& operator=(request&& o) noexcept {
      if (this == &o) return *this;
      release();
      owner_ = std::exchange(o.owner_, nullptr);
      slot_ = std::exchange(o.slot_, nullptr);
      kind_ = o.kind_;
      peer_ = o.peer_;
      tag_ = o.tag_;
      dst_ = o.dst_;
      bytes_ = o.bytes_;
      use_ = o.use_;
      done_ = std::exchange(o.done_, true);
      return *this;
    }
    ~request() { release(); }
    bool done() const noexcept { return done_; }

  private:
    friend class device_transport;
    enum class kind : unsigned char { none, send, recv, consume };
    void release() noexcept {
      if (slot_ && owner_) owner_->retire(*this);
      slot_ = nullptr;
    }
    device_transport* owner_ = nullptr;
    detail::devteam::send_slot* slot_ = nullptr;
    kind kind_ = kind::none;
    int peer_ = -1;
    int tag_ = 0;
    void* dst_ = nullptr;
    std::size_t bytes_ = 0;
    consumer use_{};
    bool done_ = true;
  };

  device_transport(detail::devteam::shared_state& s, int rank, cudaStream_t stream)
      : state_(&s), rank_(rank), stream_(stream) {}
  device_transport(const device_transport&) = delete;
  device_transport& operator=(const device_transport&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return state_->nranks; }
  std::chrono::milliseconds timeout() const noexcept { return state_->timeout; }
  /// The stream all of this rank's transfers and reductions are ordered on.
  cudaStream_t stream() const noexcept { return stream_; }
  /// The GPU the team runs on.
  int device() const noexcept { return state_->device; }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    check_peer(peer, "isend");
    request r = make(request::kind::send, peer, tag, bytes);
    auto* slot = take_slot();
    slot->data = data;
    slot->bytes = bytes;
    slot->tag = tag;
    slot->host = bytes && is_host(data);
    slot->state.store(0, std::memory_order_relaxed);
    r.slot_ = slot;
    detail::cuda::check(cudaEventRecord(slot->ready, stream_),
                        "device_team isend (cudaEventRecord)", rank_, peer);
    auto& box = state_->box(rank_, peer);
    {
      std::lock_guard lock(box.mutex);
      box.queue.push_back(slot);
    }
    state_->bells[peer].ring();
    return r;
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    check_peer(peer, "irecv");
    request r = make(request::kind::recv, peer, tag, bytes);
    r.dst_ = dst;
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* /*staging*/) {
    check_peer(peer, "irecv_consume");
    request r = make(request::kind::consume, peer, tag, bytes);
    r.use_ = use;
    return r;
  }

  /// Progresses `r` once; true when complete (its GPU work is enqueued and ordered).
  bool test(request& r) {
    if (r.done_) return true;
    if (state_->aborted.load(std::memory_order_relaxed))
      throw aborted_error("operation aborted because another rank failed", rank_, r.peer_);
    return r.kind_ == request::kind::send ? test_send(r) : test_recv(r);
  }

  /// Blocks until `r` completes; throws `timeout_error` at `when`.
  void wait(request& r, deadline when) {
    if (!state_->bells[rank_].wait([&] { return test(r); }, when, state_->aborted, 4000))
      throw tcoll::detail::rendezvous_timeout(r.kind_ == request::kind::send, r.bytes_, r.tag_,
                                              state_->timeout, rank_, r.peer_);
  }

  /// Makes every pending and future wait of every rank of the team throw `aborted_error`.
  void abort() noexcept {
    state_->aborted.store(true);
    for (auto& b : state_->bells) b.ring();
    std::lock_guard lock(state_->bar_mutex);
    state_->bar_cv.notify_all();
  }

  /// Team-wide host barrier with the team's timeout (benchmarks and tests; algorithms never
  /// need it). Does not order GPU work: synchronize streams first if that is what you need.
  void barrier() {
    std::unique_lock lock(state_->bar_mutex);
    const auto gen = state_->bar_generation;
    if (++state_->bar_count == state_->nranks) {
      state_->bar_count = 0;
      ++state_->bar_generation;
      state_->bar_cv.notify_all();
      return;
    }
    const auto when = clock::now() + state_->timeout;
    while (state_->bar_generation == gen) {
      if (state_->aborted.load())
        throw aborted_error("barrier aborted because another rank failed", rank_);
      if (state_->bar_cv.wait_until(lock, when) == std::cv_status::timeout &&
          state_->bar_generation == gen)
        throw timeout_error(
            "barrier timed out after " + std::to_string(state_->timeout.count()) + " ms", rank_);
    }
  }

  /// Waits (with the team's timeout) until everything enqueued on this rank's stream is done.
  void synchronize() {
    detail::cuda::synchronize(stream_, clock::now() + state_->timeout, "device_team synchronize",
                              rank_);
  }

  ~device_transport() {
    context_.detach(); // stop the engine before the slots go
    for (auto* s : free_) delete s;
  }

  /// Message spaces, broken state and engine of this rank's collectives.
  collective_context& collectives() noexcept { return context_; }

private:
  request make(request::kind k, int peer, int tag, std::size_t bytes) {
    request r;
    r.owner_ = this;
    r.kind_ = k;
    r.peer_ = peer;
    r.tag_ = tag;
    r.bytes_ = bytes;
    r.done_ = false;
    return r;
  }
  /// Host memory (pageable or pinned) as opposed to device or managed memory. Memory the
  /// driver does not know is pageable host memory, except while this rank's stream is being
  /// captured into a CUDA graph: then it is device memory the graph allocates
  /// (`cudaMallocAsync` during capture, e.g. an executor's scratch, only reserves an address
  /// the driver maps at launch), and pageable memory could not be used by a captured stream
  /// anyway. Found on an H100: a captured recursive doubling took its scratch for host memory
  /// and queried a captured event (cudaErrorCapturedEvent).
  bool is_host(const void* p) const {
    cudaPointerAttributes a{};
    const bool known = cudaPointerGetAttributes(&a, p) == cudaSuccess;
    if (!known) (void)cudaGetLastError(); // older runtimes report unregistered memory as an error
    if (known && a.type != cudaMemoryTypeUnregistered) return a.type == cudaMemoryTypeHost;
    return !detail::cuda::is_capturing(stream_); // a failed query counts as host memory
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= state_->nranks)
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(state_->nranks) + ")",
                             rank_);
  }
  detail::devteam::send_slot* take_slot() {
    if (!free_.empty()) {
      auto* s = free_.back();
      free_.pop_back();
      return s;
    }
    auto owned = std::make_unique<detail::devteam::send_slot>();
    detail::cuda::check(cudaEventCreateWithFlags(&owned->ready, cudaEventDisableTiming),
                        "device_team (cudaEventCreate)", rank_);
    detail::cuda::check(cudaEventCreateWithFlags(&owned->done, cudaEventDisableTiming),
                        "device_team (cudaEventCreate)", rank_);
    return owned.release();
  }
  /// Gives a send slot back; see `request`'s class comment for the pending cases.
  void retire(request& r) noexcept {
    auto* slot = r.slot_;
    if (!r.done_) {
      auto& box = state_->box(rank_, r.peer_);
      bool withdrawn = false;
      {
        std::lock_guard lock(box.mutex);
        auto it = std::find(box.queue.begin(), box.queue.end(), slot);
        if (it != box.queue.end()) {
          box.queue.erase(it);
          withdrawn = true;
        }
      }
      if (!withdrawn) {
        // a receiver matched it: wait (bounded) until it has enqueued its read, then order
        // this rank's stream after that read
        const auto when = clock::now() + state_->timeout;
        while (slot->state.load(std::memory_order_acquire) == 1 && clock::now() < when)
          std::this_thread::yield();
        if (slot->state.load(std::memory_order_acquire) == 1) return; // leak: still in use
        if (slot->state.load() == 2) (void)cudaStreamWaitEvent(stream_, slot->done, 0);
      }
    }
    free_.push_back(slot);
  }
  bool test_send(request& r) {
    const int s = r.slot_->state.load(std::memory_order_acquire);
    if (s < 2) return false;
    r.done_ = true;
    if (s == 3)
      throw transport_error("send of " + std::to_string(r.bytes_) +
                                " bytes did not match the receiver's size",
                            rank_, r.peer_);
    if (s == 4) throw transport_error("the receiver failed to read this send", rank_, r.peer_);
    if (r.slot_->host) // the host may reuse its memory once wait returns: wait for the read
      detail::cuda::wait_event(r.slot_->done, clock::now() + state_->timeout,
                               "device_team send of host memory", rank_, r.peer_);
    detail::cuda::check(cudaStreamWaitEvent(stream_, r.slot_->done, 0),
                        "device_team send completion (cudaStreamWaitEvent)", rank_, r.peer_);
    return true;
  }
  bool test_recv(request& r) {
    detail::devteam::send_slot* slot = nullptr;
    {
      auto& box = state_->box(r.peer_, rank_);
      std::lock_guard lock(box.mutex);
      for (auto it = box.queue.begin(); it != box.queue.end(); ++it)
        if ((*it)->tag == r.tag_) {
          slot = *it;
          box.queue.erase(it);
          slot->state.store(1, std::memory_order_relaxed);
          break;
        }
    }
    if (!slot) return false;
    r.done_ = true;
    if (slot->bytes != r.bytes_) {
      const auto sent = slot->bytes;
      release(slot, 3, r.peer_);
      throw transport_error("receive of " + std::to_string(r.bytes_) + " bytes (tag " +
                                std::to_string(r.tag_) + ") matched a send of " +
                                std::to_string(sent) + " bytes",
                            rank_, r.peer_);
    }
    try {
      detail::cuda::check(cudaStreamWaitEvent(stream_, slot->ready, 0),
                          "device_team receive (cudaStreamWaitEvent)", rank_, r.peer_);
      if (r.kind_ == request::kind::recv) {
        if (r.bytes_)
          detail::cuda::check(
              cudaMemcpyAsync(r.dst_, slot->data, r.bytes_, cudaMemcpyDefault, stream_),
              "device_team receive (cudaMemcpyAsync)", rank_, r.peer_);
      } else {
        r.use_(slot->data, r.bytes_);
      }
      detail::cuda::check(cudaEventRecord(slot->done, stream_),
                          "device_team receive (cudaEventRecord)", rank_, r.peer_);
      // host memory on either side: the caller reads (or the sender frees) it on the host
      // right after the request completes, so complete only once the copy has
      if (r.kind_ == request::kind::recv && r.bytes_ && (slot->host || is_host(r.dst_)))
        detail::cuda::wait_event(slot->done, clock::now() + state_->timeout,
                                 "device_team receive into host memory", rank_, r.peer_);
    } catch (...) {
      // the read may be partly enqueued; make the sender wait for whatever was
      (void)cudaEventRecord(slot->done, stream_);
      release(slot, 4, r.peer_);
      throw;
    }
    release(slot, 2, r.peer_);
    return true;
  }
  void release(detail::devteam::send_slot* slot, int final_state, int sender) {
    slot->state.store(final_state, std::memory_order_release);
    state_->bells[sender].ring();
  }

  detail::devteam::shared_state* state_;
  int rank_;
  cudaStream_t stream_;
  std::vector<detail::devteam::send_slot*> free_;
  collective_context context_;
};

static_assert(check_transport<device_transport>());

/// N virtual ranks on one GPU. `run(f)` calls `f(device_transport&)` on every rank in its own
/// host thread (each with its own stream on `device`), waits (bounded) for each rank's stream,
/// joins, and rethrows the first root-cause error like `thread_team`.
class device_team {
public:
  explicit device_team(int nranks, std::chrono::milliseconds timeout = std::chrono::seconds(60),
                       int device = 0)
      : nranks_(nranks), timeout_(timeout), device_(device) {
    if (nranks < 1)
      throw invalid_argument("device_team: nranks must be >= 1, got " + std::to_string(nranks));
    if (timeout.count() <= 0) throw invalid_argument("device_team: timeout must be positive");
    int count = 0;
    detail::cuda::check(cudaGetDeviceCount(&count), "device_team: cudaGetDeviceCount");
    if (device < 0 || device >= count)
      throw invalid_argument("device_team: device " + std::to_string(device) + " is outside [0, " +
                             std::to_string(count) + ")");
  }
  int size() const noexcept { return nranks_; }

  template <class F>
  void run(F&& f) {
    detail::devteam::shared_state state(nranks_, timeout_, device_);
    std::vector<std::exception_ptr> errors(nranks_);
    std::vector<char> was_abort(nranks_, 0);
    auto body = [&](int rank) {
      cudaStream_t stream = nullptr;
      try {
        detail::cuda::check(cudaSetDevice(device_), "device_team: cudaSetDevice", rank);
        detail::cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                            "device_team: cudaStreamCreate", rank);
        device_transport t(state, rank, stream);
        try {
          f(t);
          t.synchronize();
        } catch (const aborted_error&) {
          errors[rank] = std::current_exception();
          was_abort[rank] = 1;
          t.abort();
        } catch (...) {
          errors[rank] = std::current_exception();
          t.abort();
        }
        // bounded drain before the slots' events and the stream go away
        try {
          t.synchronize();
        } catch (...) {
        }
      } catch (...) {
        if (!errors[rank]) errors[rank] = std::current_exception();
        state.aborted.store(true);
        for (auto& b : state.bells) b.ring();
      }
      if (stream) (void)cudaStreamDestroy(stream);
    };
    {
      std::vector<std::jthread> threads;
      threads.reserve(nranks_ - 1);
      for (int r = 1; r < nranks_; ++r) threads.emplace_back(body, r);
      body(0);
    }
    for (int r = 0; r < nranks_; ++r)
      if (errors[r] && !was_abort[r]) std::rethrow_exception(errors[r]);
    for (int r = 0; r < nranks_; ++r)
      if (errors[r]) std::rethrow_exception(errors[r]);
  }

private:
  int nranks_;
  std::chrono::milliseconds timeout_;
  int device_;
};

} // namespace tcoll
