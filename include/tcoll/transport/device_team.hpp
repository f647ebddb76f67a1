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
#include <deque>
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
/// are created once). Its `state` adds 4: the receiver failed to read it.
struct send_slot : tcoll::detail::posted_send {
  bool host = false;           ///< data is host memory: completion needs a host wait
  cudaEvent_t ready = nullptr; ///< recorded by the sender at isend
  cudaEvent_t done = nullptr;  ///< recorded by the receiver after enqueuing its read
  ~send_slot() {
    if (ready) (void)cudaEventDestroy(ready);
    if (done) (void)cudaEventDestroy(done);
  }
};

/// The team's rendezvous (`team_state`) plus its GPU and a host barrier with a deadline.
struct shared_state : tcoll::detail::team_state<send_slot> {
  shared_state(int n, std::chrono::milliseconds t, int dev) : team_state(n, t), device(dev) {}
  int device;
  tcoll::detail::team_barrier barrier;
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
  class request : public detail::rendezvous_request {
  public:
    request() = default;
    request(request&& o) noexcept { *this = std::move(o); }
    request& operator=(request&& o) noexcept {
      if (this == &o) return *this;
      release();
      owner_ = std::exchange(o.owner_, nullptr);
      slot_ = std::exchange(o.slot_, nullptr);
      rendezvous_request::operator=(o);
      o.done_ = true;
      return *this;
    }
    ~request() { release(); }

  private:
    friend class device_transport;
    void release() noexcept {
      if (slot_ && owner_) owner_->retire(*this);
      slot_ = nullptr;
    }
    device_transport* owner_ = nullptr;
    detail::devteam::send_slot* slot_ = nullptr;
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
    request r = make(request::kind::send, peer, tag, bytes, "isend");
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
    request r = make(request::kind::recv, peer, tag, bytes, "irecv");
    r.dst_ = dst;
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* /*staging*/) {
    request r = make(request::kind::consume, peer, tag, bytes, "irecv_consume");
    r.use_ = use;
    return r;
  }

  /// Progresses `r` once; true when complete (its GPU work is enqueued and ordered).
  bool test(request& r) {
    if (r.done_) return true;
    state_->throw_if_aborted(rank_, r.peer_);
    return r.is_send() ? test_send(r) : test_recv(r);
  }

  /// Blocks until `r` completes; throws `timeout_error` at `when`.
  void wait(request& r, deadline when) {
    if (!state_->bells[rank_].wait([&] { return test(r); }, when, state_->aborted, 4000))
      throw r.timed_out(state_->timeout, rank_);
  }

  /// Makes every pending and future wait of every rank of the team throw `aborted_error`.
  void abort() noexcept {
    state_->abort();
    state_->barrier.wake();
  }

  /// Team-wide host barrier with the team's timeout (benchmarks and tests; algorithms never
  /// need it). Does not order GPU work: synchronize streams first if that is what you need.
  void barrier() { state_->barrier.wait(rank_, state_->nranks, state_->timeout, state_->aborted); }

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
  /// A pending request of this rank with `peer`; `call` names the entry point in the error
  /// for a peer outside the team.
  request make(request::kind k, int peer, int tag, std::size_t bytes, const char* call) {
    state_->check_peer(peer, call, rank_);
    request r;
    r.start(k, peer, tag, bytes);
    r.owner_ = this;
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
      if (!state_->box(rank_, r.peer_).withdraw(slot)) {
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
    if (!r.finish_send(s, rank_)) return false;
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
    r.accept(slot, *state_, rank_);
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
      state_->release(slot, 4, r.peer_);
      throw;
    }
    state_->release(slot, 2, r.peer_);
    return true;
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
    detail::check_team_arguments("device_team", nranks, timeout);
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
    detail::team_failures failures(nranks_);
    auto body = [&](int rank) {
      cudaStream_t stream = nullptr;
      try {
        detail::cuda::check(cudaSetDevice(device_), "device_team: cudaSetDevice", rank);
        detail::cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                            "device_team: cudaStreamCreate", rank);
        device_transport t(state, rank, stream);
        failures.guard(
            rank,
            [&] {
              f(t);
              t.synchronize();
            },
            [&] { t.abort(); });
        // bounded drain before the slots' events and the stream go away
        try {
          t.synchronize();
        } catch (...) {
        }
      } catch (...) {
        failures.keep_current(rank, false);
        state.abort();
      }
      if (stream) (void)cudaStreamDestroy(stream);
    };
    detail::run_ranks_on_threads(nranks_, body);
    failures.rethrow();
  }

private:
  int nranks_;
  std::chrono::milliseconds timeout_;
  int device_;
};

} // namespace tcoll
