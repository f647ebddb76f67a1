#pragma once
/// \file
/// `nccl_transport`: tcoll's transport concept on an NCCL communicator the user creates and
/// owns (tcoll never initialises NCCL). Point-to-point transfers are `ncclSend`/`ncclRecv`
/// on the user's stream; all transfers posted between two waits form one
/// `ncclGroupStart/End` group, which NCCL needs so a ring's send to the right and receive
/// from the left cannot deadlock. The executor posts a whole round before waiting, so every
/// round is exactly one group (GradientFlow Sec. 2.4 runs its ring on NCCL).
///
/// Stream ordered: a receive-and-reduce lands in the executor's device staging slice and its
/// consumer (the reducer's kernel) is enqueued on the same stream right after the group, so
/// the host never waits between the transfer and the reduction. Requests complete when an
/// event recorded after the group (and its consumers) has completed; waits poll that event
/// against a deadline and the communicator's asynchronous error, never block unbounded.
///
/// `native_allreduce` is `ncclAllReduce` (used by the `passthrough` algorithm) for the
/// element types and ops NCCL has built in, including `avg` as `ncclAvg`.
///
/// Restrictions: the reducer must use the same stream (`cuda_reducer{t.stream()}`); tags
/// are not sent (NCCL matches per pair in posting order, which is what tcoll's collectives
/// rely on); `abort()` calls `ncclCommAbort` (the only way to release kernels stuck on a dead
/// peer) unless `nccl_knobs::abort_communicator` is false, after which the communicator is
/// unusable.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../detail/cuda.hpp"

namespace tcoll {

/// Knobs of the NCCL transport.
struct nccl_knobs {
  /// Deadline of each wait.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  /// `abort()` aborts the communicator (ncclCommAbort) so kernels waiting on a failed peer end.
  bool abort_communicator = true;
};

namespace detail::nccl {

inline void check(ncclResult_t r, const char* what, ncclComm_t comm, int rank, int peer = -1) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string msg = std::string(what) + " failed: " + ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) msg += std::string(" (") + last + ")";
  }
  throw transport_error(msg, rank, peer);
}

/// NCCL's data type for T, if it has one.
template <class T>
constexpr std::optional<ncclDataType_t> data_type() {
  if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, char>)
    return ncclInt8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return ncclUint8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return ncclInt32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return ncclUint32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return ncclInt64;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return ncclUint64;
  else if constexpr (std::is_same_v<T, half>)
    return ncclFloat16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return ncclBfloat16;
  else if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else
    return std::nullopt;
}

/// NCCL's built-in reduction for Op, if it has one.
template <class Op>
constexpr std::optional<ncclRedOp_t> red_op() {
  if constexpr (std::is_same_v<Op, sum_op>)
    return ncclSum;
  else if constexpr (std::is_same_v<Op, prod_op>)
    return ncclProd;
  else if constexpr (std::is_same_v<Op, min_op>)
    return ncclMin;
  else if constexpr (std::is_same_v<Op, max_op>)
    return ncclMax;
  else if constexpr (std::is_same_v<Op, avg_op>)
    return ncclAvg;
  else
    return std::nullopt;
}

/// One ncclGroupStart/End group: the event recorded after it and the consumers to enqueue.
struct group {
  cudaEvent_t done = nullptr;
  bool closed = false;
  struct pending_consumer {
    consumer use;
    const void* staging;
    std::size_t bytes;
  };
  std::vector<pending_consumer> consumers;
};

} // namespace detail::nccl

/// tcoll transport over an NCCL communicator + stream owned by the caller.
class nccl_transport {
public:
  static constexpr bool zero_copy = false;
  static constexpr std::string_view name = "nccl";

  /// A posted transfer; completes with its group.
  class request {
  public:
    request() = default;
    bool done() const noexcept { return done_; }

  private:
    friend class nccl_transport;
    std::shared_ptr<detail::nccl::group> group_;
    int peer_ = -1;
    std::size_t bytes_ = 0;
    bool send_ = false;
    bool done_ = true;
  };

  nccl_transport(ncclComm_t comm, cudaStream_t stream, nccl_knobs knobs = {})
      : comm_(comm), stream_(stream), knobs_(knobs) {
    if (!comm) throw invalid_argument("nccl_transport: communicator is null");
    detail::nccl::check(ncclCommUserRank(comm, &rank_), "ncclCommUserRank", comm, -1);
    detail::nccl::check(ncclCommCount(comm, &size_), "ncclCommCount", comm, rank_);
    if (knobs.timeout.count() <= 0)
      throw invalid_argument("nccl_transport: timeout must be positive", rank_);
  }
  nccl_transport(const nccl_transport&) = delete;
  nccl_transport& operator=(const nccl_transport&) = delete;
  ~nccl_transport() {
    context_.detach();                            // stop the engine first
    if (open_ && !aborted_) (void)ncclGroupEnd(); // never leave NCCL inside a group
    for (auto e : events_) (void)cudaEventDestroy(e);
  }

  /// Message spaces (NCCL ignores tags; the sequence still orders collectives), broken
  /// state and engine of this rank's collectives.
  collective_context& collectives() noexcept { return context_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return knobs_.timeout; }
  cudaStream_t stream() const noexcept { return stream_; }
  ncclComm_t comm() const noexcept { return comm_; }

  request isend(int peer, const void* data, std::size_t bytes, int /*tag*/) {
    auto r = post(peer, bytes, true, "isend");
    if (bytes)
      detail::nccl::check(ncclSend(data, bytes, ncclUint8, peer, comm_, stream_), "ncclSend", comm_,
                          rank_, peer);
    return r;
  }
  request irecv(int peer, void* dst, std::size_t bytes, int /*tag*/) {
    auto r = post(peer, bytes, false, "irecv");
    if (bytes)
      detail::nccl::check(ncclRecv(dst, bytes, ncclUint8, peer, comm_, stream_), "ncclRecv", comm_,
                          rank_, peer);
    return r;
  }
  /// Receives into `staging` (device memory, at least `bytes`) and enqueues `use(staging)`
  /// after the group on the same stream.
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    if (bytes && !staging)
      throw invalid_argument("nccl_transport::irecv_consume: staging buffer is null", rank_, peer);
    auto r = irecv(peer, staging, bytes, tag);
    current_->consumers.push_back({use, staging, bytes});
    return r;
  }

  bool test(request& r) {
    if (r.done_) return true;
    if (aborted_) throw aborted_error("NCCL transport was aborted", rank_, r.peer_);
    close_group();
    const cudaError_t e = cudaEventQuery(r.group_->done);
    if (e == cudaErrorNotReady) {
      check_async(r.peer_);
      return false;
    }
    detail::cuda::check(e, "nccl transfer completion (cudaEventQuery)", rank_, r.peer_);
    r.done_ = true;
    r.group_.reset();
    return true;
  }

  void wait(request& r, deadline when) {
    for (int spin = 0;; ++spin) {
      if (test(r)) return;
      if (clock::now() >= when)
        throw timeout_error(std::string(r.send_ ? "ncclSend" : "ncclRecv") + " of " +
                                std::to_string(r.bytes_) + " bytes timed out after " +
                                std::to_string(knobs_.timeout.count()) + " ms",
                            rank_, r.peer_);
      if (spin > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(spin > 10000 ? 50 : 2));
    }
  }

  /// Aborts the communicator (see the file comment); later waits throw `aborted_error`.
  void abort() noexcept {
    if (aborted_) return;
    aborted_ = true;
    if (knobs_.abort_communicator) (void)ncclCommAbort(comm_);
  }

  /// `ncclAllReduce` on the transport's stream, waited for with the deadline.
  template <class T, class Op>
  requires(detail::nccl::data_type<T>().has_value() &&
           detail::nccl::red_op<Op>().has_value()) void native_allreduce(const T* send, T* recv,
                                                                         std::size_t count,
                                                                         const Op&) {
    if (aborted_) throw aborted_error("NCCL transport was aborted", rank_);
    close_group();
    detail::nccl::check(ncclAllReduce(send, recv, count, *detail::nccl::data_type<T>(),
                                      *detail::nccl::red_op<Op>(), comm_, stream_),
                        "ncclAllReduce", comm_, rank_);
    auto g = std::make_shared<detail::nccl::group>();
    g->done = take_event();
    g->closed = true;
    detail::cuda::check(cudaEventRecord(g->done, stream_), "ncclAllReduce (cudaEventRecord)",
                        rank_);
    request r;
    r.group_ = g;
    r.bytes_ = count * sizeof(T);
    r.done_ = false;
    groups_.push_back(g);
    wait(r, clock::now() + knobs_.timeout);
  }

private:
  request post(int peer, std::size_t bytes, bool send, const char* what) {
    if (aborted_) throw aborted_error("NCCL transport was aborted", rank_, peer);
    if (peer < 0 || peer >= size_)
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size_) + ")",
                             rank_);
    if (!open_) {
      detail::nccl::check(ncclGroupStart(), "ncclGroupStart", comm_, rank_);
      open_ = true;
      current_ = std::make_shared<detail::nccl::group>();
      current_->done = take_event();
      groups_.push_back(current_);
    }
    request r;
    r.group_ = current_;
    r.peer_ = peer;
    r.bytes_ = bytes;
    r.send_ = send;
    r.done_ = false;
    return r;
  }
  /// Ends the open group, enqueues its consumers after it, and records its event.
  void close_group() {
    if (!open_) return;
    open_ = false;
    auto g = std::move(current_);
    g->closed = true;
    detail::nccl::check(ncclGroupEnd(), "ncclGroupEnd", comm_, rank_);
    for (auto& c : g->consumers) c.use(c.staging, c.bytes);
    g->consumers.clear();
    detail::cuda::check(cudaEventRecord(g->done, stream_), "nccl group (cudaEventRecord)", rank_);
  }
  void check_async(int peer) {
    ncclResult_t async = ncclSuccess;
    detail::nccl::check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_,
                        rank_);
    if (async != ncclSuccess && async != ncclInProgress)
      detail::nccl::check(async, "NCCL communicator (asynchronous error)", comm_, rank_, peer);
  }
  /// Events are recycled once no request references their group any more.
  cudaEvent_t take_event() {
    for (std::size_t i = 0; i < groups_.size();) {
      if (groups_[i].use_count() == 1 && groups_[i]->closed) {
        free_events_.push_back(groups_[i]->done);
        groups_[i] = std::move(groups_.back());
        groups_.pop_back();
      } else {
        ++i;
      }
    }
    if (!free_events_.empty()) {
      auto e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    detail::cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                        "nccl_transport (cudaEventCreate)", rank_);
    events_.push_back(e);
    return e;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  nccl_knobs knobs_;
  int rank_ = -1;
  int size_ = 0;
  bool open_ = false;
  bool aborted_ = false;
  std::shared_ptr<detail::nccl::group> current_;
  std::vector<std::shared_ptr<detail::nccl::group>> groups_;
  std::vector<cudaEvent_t> free_events_;
  collective_context context_;
  std::vector<cudaEvent_t> events_; // every event created, destroyed with the transport
};

static_assert(check_transport<nccl_transport>());

} // namespace tcoll
