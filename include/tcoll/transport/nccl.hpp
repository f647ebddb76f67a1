#pragma once
/// \file
/// `nccl_transport`: tcoll's transport concept on an NCCL communicator the user creates and
/// owns (tcoll never initialises NCCL). Point-to-point transfers are `ncclSend`/`ncclRecv`
/// on the user's stream; all transfers posted between two waits form one
/// `ncclGroupStart/End` group, which NCCL needs so a ring's send to the right and receive
/// from the left cannot deadlock. The executor posts a whole round before waiting, so every
/// round is exactly one group (GradientFlow Sec. 2.4 runs its ring on NCCL).
///
/// Stream ordered (`transport_is_stream_ordered`), as NCCL itself is: a receive-and-reduce
/// lands in the executor's device staging slice and its consumer (the reducer's kernel) is
/// enqueued on the same stream right after the group. A request completes when its group has
/// been issued (`ncclGroupEnd` returned), so a collective enqueues every round and returns
/// without waiting for the GPU, and can be captured in a CUDA graph. The host waits only
/// where it must: for a non-blocking communicator's group launch (`ncclInProgress`), and in
/// `synchronize()`; both poll against the deadline and the communicator's asynchronous
/// error, never block unbounded.
///
/// `native_allreduce` is `ncclAllReduce` (used by the `passthrough` algorithm) for the
/// element types and ops NCCL has built in, including `avg` as `ncclAvg`.
///
/// Restrictions: the reducer must use the same stream (`cuda_reducer{t.stream()}`); tags
/// are not sent (NCCL matches per pair in posting order, which is what tcoll's collectives
/// rely on); `abort()` calls `ncclCommAbort` (the only way to release kernels stuck on a dead
/// peer) unless `nccl_options::abort_communicator` is false, after which the communicator is
/// unusable.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
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
struct nccl_options {
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

/// A consumer to enqueue after the open group ends.
struct pending_consumer {
  consumer use;
  const void* staging;
  std::size_t bytes;
};

} // namespace detail::nccl

/// tcoll transport over an NCCL communicator + stream owned by the caller.
class nccl_transport {
public:
  static constexpr bool zero_copy = false;
  static constexpr std::string_view name = "nccl";

  /// A posted transfer; complete once its group has been issued on the stream.
  class request {
  public:
    request() = default;
    bool done() const noexcept { return done_; }

  private:
    friend class nccl_transport;
    int peer_ = -1;
    bool done_ = true;
  };

  /// Stream ordered: completion means enqueued (see the file comment).
  static constexpr bool stream_ordered = true;

  nccl_transport(ncclComm_t comm, cudaStream_t stream, nccl_options knobs = {})
      : comm_(comm), stream_(stream), knobs_(knobs) {
    if (!comm) throw invalid_argument("nccl_transport: communicator is null");
    detail::nccl::check(ncclCommUserRank(comm, &rank_), "ncclCommUserRank", comm, -1);
    detail::nccl::check(ncclCommCount(comm, &size_), "ncclCommCount", comm, rank_);
    if (knobs.timeout.count() <= 0)
      throw invalid_argument("nccl_transport: timeout must be positive", rank_);
    detail::nccl::check(ncclGetVersion(&version_), "ncclGetVersion", comm, rank_);
  }
  nccl_transport(const nccl_transport&) = delete;
  nccl_transport& operator=(const nccl_transport&) = delete;
  ~nccl_transport() {
    context_.detach();                            // stop the engine first
    if (open_ && !aborted_) (void)ncclGroupEnd(); // never leave NCCL inside a group
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
    auto r = post(peer, "isend");
    if (bytes)
      detail::nccl::check(ncclSend(data, bytes, ncclUint8, peer, comm_, stream_), "ncclSend", comm_,
                          rank_, peer);
    return r;
  }
  request irecv(int peer, void* dst, std::size_t bytes, int /*tag*/) {
    auto r = post(peer, "irecv");
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
    consumers_.push_back({use, staging, bytes});
    return r;
  }

  /// Issues the open group (if any); true: `r` is enqueued on the stream.
  bool test(request& r) {
    wait(r, clock::now() + knobs_.timeout);
    return true;
  }

  /// Issues the open group; the host waits (until `when`) only while a non-blocking
  /// communicator is still launching it.
  void wait(request& r, deadline when) {
    if (r.done_) return;
    if (aborted_) throw aborted_error("NCCL transport was aborted", rank_, r.peer_);
    close_group(when, r.peer_);
    check_async(r.peer_);
    r.done_ = true;
  }

  /// Waits (polling, with the transport's timeout) until everything enqueued on the stream
  /// has run; throws `timeout_error` at the deadline (a peer that never posts its side leaves
  /// NCCL's kernels waiting: `abort()` releases them) and `transport_error` on the
  /// communicator's asynchronous error.
  void synchronize() {
    close_group(clock::now() + knobs_.timeout, -1);
    const deadline when = clock::now() + knobs_.timeout;
    for (int spin = 0;; ++spin) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady)
        detail::cuda::check(e, "nccl synchronize (cudaStreamQuery)", rank_);
      check_async(-1);
      if (clock::now() >= when)
        throw timeout_error("nccl stream did not complete within " +
                                std::to_string(knobs_.timeout.count()) + " ms",
                            rank_);
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

  /// `ncclAllReduce` enqueued on the transport's stream (stream ordered, like the rest).
  template <class T, class Op>
  requires(detail::nccl::data_type<T>().has_value() &&
           detail::nccl::red_op<Op>().has_value()) void native_allreduce(const T* send, T* recv,
                                                                         std::size_t count,
                                                                         const Op&) {
    if (aborted_) throw aborted_error("NCCL transport was aborted", rank_);
    const deadline when = clock::now() + knobs_.timeout;
    close_group(when, -1);
    if (size_ == 1 && std::is_same_v<Op, avg_op> && version_ < one_rank_avg_fixed) {
      // NCCL before 2.29.7 leaves the last count % blocks elements of a one-rank ncclAvg
      // unwritten (NVIDIA/nccl#1950, seen here with 2.28.9: double, 65537 elements). The
      // average over one rank is its input, bit for bit: copy it instead.
      if (send != recv && count)
        detail::cuda::check(
            cudaMemcpyAsync(recv, send, count * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
            "one-rank ncclAvg (cudaMemcpyAsync)", rank_);
      return;
    }
    detail::nccl::check(ncclAllReduce(send, recv, count, *detail::nccl::data_type<T>(),
                                      *detail::nccl::red_op<Op>(), comm_, stream_),
                        "ncclAllReduce", comm_, rank_);
    wait_launched(when, -1);
  }

private:
  request post(int peer, const char* what) {
    if (aborted_) throw aborted_error("NCCL transport was aborted", rank_, peer);
    if (peer < 0 || peer >= size_)
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size_) + ")",
                             rank_);
    if (!open_) {
      detail::nccl::check(ncclGroupStart(), "ncclGroupStart", comm_, rank_);
      open_ = true;
    }
    request r;
    r.peer_ = peer;
    r.done_ = false;
    return r;
  }
  /// Ends the open group and enqueues its consumers after it.
  void close_group(deadline when, int peer) {
    if (!open_) return;
    open_ = false;
    detail::nccl::check(ncclGroupEnd(), "ncclGroupEnd", comm_, rank_, peer);
    wait_launched(when, peer);
    for (auto& c : consumers_) c.use(c.staging, c.bytes);
    consumers_.clear();
  }
  /// A non-blocking communicator reports `ncclInProgress` until the last call's kernels are
  /// launched; a blocking one returns at once.
  void wait_launched(deadline when, int peer) {
    for (int spin = 0;; ++spin) {
      ncclResult_t state = ncclSuccess;
      detail::nccl::check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_,
                          rank_, peer);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        detail::nccl::check(state, "NCCL communicator (asynchronous error)", comm_, rank_, peer);
      if (clock::now() >= when)
        throw timeout_error("NCCL did not finish launching within " +
                                std::to_string(knobs_.timeout.count()) + " ms",
                            rank_, peer);
      if (spin > 1000) std::this_thread::sleep_for(std::chrono::microseconds(2));
    }
  }
  void check_async(int peer) {
    ncclResult_t async = ncclSuccess;
    detail::nccl::check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_,
                        rank_);
    if (async != ncclSuccess && async != ncclInProgress)
      detail::nccl::check(async, "NCCL communicator (asynchronous error)", comm_, rank_, peer);
  }

  /// NCCL_VERSION(2, 29, 7): the first release whose one-rank ncclAvg writes every element.
  static constexpr int one_rank_avg_fixed = 22907;

  ncclComm_t comm_;
  cudaStream_t stream_;
  nccl_options knobs_;
  int rank_ = -1;
  int size_ = 0;
  int version_ = 0; ///< ncclGetVersion of the library loaded at run time
  bool open_ = false;
  bool aborted_ = false;
  std::vector<detail::nccl::pending_consumer> consumers_; // of the open group
  collective_context context_;
};

static_assert(check_transport<nccl_transport>());

} // namespace tcoll
