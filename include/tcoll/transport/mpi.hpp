#pragma once
/// \file
/// `mpi_transport`: tcoll's transport over MPI point-to-point messages, plus the vendor
/// `MPI_Allreduce` as `native_allreduce` (which makes `tcoll::passthrough` available).
///
/// The library never owns `MPI_Init`: the user initialises MPI and hands in a communicator,
/// which the transport duplicates, so tcoll's messages can never match the user's (same tags
/// or not). The duplicate gets `MPI_ERRORS_RETURN`; every MPI return code is checked and
/// turned into `tcoll::transport_error` carrying MPI's error string, the rank and the peer.
///
/// Include it explicitly (`#include <tcoll/transport/mpi.hpp>`) and link MPI; the umbrella
/// header `tcoll.hpp` does not pull it in. Its pieces are in `mpi/`: the element types and
/// ops as MPI's (`datatypes.hpp`), the retirement of the failure announcements' control
/// communicators (`control.hpp`), and the vendor collective's loops (`native.hpp`).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/tags.hpp"
#include "../core/types.hpp"
#include "../detail/mpi_error.hpp"
#include "mpi/check.hpp"
#include "mpi/control.hpp"
#include "mpi/datatypes.hpp"
#include "mpi/native.hpp"

namespace tcoll {

/// Tuning knobs of `mpi_transport`.
struct mpi_options {
  /// Longest any blocking wait may take before it throws `timeout_error`.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  /// Largest single MPI message in bytes; a larger transfer travels as several messages of
  /// at most this size (MPI counts are `int`). Must be in [1, INT_MAX].
  std::size_t max_message_bytes = std::size_t{1} << 30;
  /// `MPI_Test` polls between two yields of the CPU inside `wait`. Polling without yielding
  /// is fastest when every rank has a core; with more ranks than cores, yielding lets the
  /// peer that holds the data run.
  int polls_per_yield = 64;
  /// `native_allreduce` (`tcoll::passthrough`) calls `MPI_Allreduce` itself instead of
  /// polling `MPI_Iallreduce` on a copy: no copy and MPI's own progress loop, but no
  /// timeout and no failure announcements (a peer that dies hangs the call). Benchmarks
  /// set it to measure the vendor collective as it is.
  bool blocking_native_allreduce = false;
};

/// tcoll transport over a duplicate of an MPI communicator; satisfies `tcoll::transport`.
/// Receive-and-reduce lands in the caller's staging buffer first (`zero_copy` is false);
/// plain receives go straight into their destination. Non-copyable, movable.
class mpi_transport {
  /// State that requests share with their transport (heap-held so moves keep it in place).
  struct shared {
    std::atomic<bool> aborted{false};
    /// Set when a pending request had to be handed back to MPI unfinished (a send nobody
    /// received): MPI may still read that buffer, so the communicator is not reused.
    std::atomic<bool> broken{false};
    /// Message spaces and broken state of the collectives (created with the communicator,
    /// whose MPI_TAG_UB bounds the tags).
    std::unique_ptr<collective_context> context;
    /// A second duplicate that carries only failure announcements. Freed only once every
    /// rank has destroyed its transport and agreed that none saw a failure: Open MPI reuses
    /// the context id of a freed communicator, and a message that arrives for a freed one
    /// is delivered to its successor and desynchronises that one's message ordering (its
    /// next messages are never matched). An announcement may arrive after its receiver has
    /// destroyed the transport, so after a failure it must land on a communicator that
    /// stays (kept until MPI_Finalize). See `detail::mpi::retire_control`.
    MPI_Comm control = MPI_COMM_NULL;
    /// Rank whose failure announcement aborted this one (-1: none, or a local abort).
    std::atomic<int> failed_peer{-1};
    /// abort() was called where MPI may not be called (another thread below
    /// MPI_THREAD_MULTIPLE): the announcement goes out with this rank's next MPI call.
    std::atomic<bool> announce_pending{false};
    std::atomic<bool> announced{false};
    /// The thread that posted this transport's latest operation: at MPI_THREAD_SERIALIZED
    /// the thread calling MPI now, whichever it is (the main one or not), so an abort()
    /// from it (a collective failing on it) announces at once.
    std::atomic<std::thread::id> caller{};
    /// Sends given up on with `abandon`: MPI still owns them, `keep` their buffers.
    struct abandoned_send {
      std::vector<MPI_Request> pieces;
      std::shared_ptr<const void> keep;
    };
    std::mutex abandoned_mutex;
    std::vector<abandoned_send> abandoned;
    std::atomic<int> abandoned_count{0};
  };

public:
  static constexpr bool zero_copy = false;
  static constexpr std::string_view name = "mpi";

  /// A pending transfer: one MPI request per piece of at most `max_message_bytes`.
  /// Destroying a pending request cancels it (MPI_Cancel) and polls until MPI has let go of
  /// the buffer, so unwinding after an error never leaves MPI writing into freed memory. A
  /// receive that was already matched has its data in flight and is waited for (up to the
  /// timeout). A send cannot be cancelled by every MPI (Open MPI ignores it); if nobody
  /// receives it within a short grace period it is handed back to MPI (MPI_Request_free)
  /// and the transport is marked broken: later operations throw `aborted_error` rather than
  /// risk a late receiver matching a message whose buffer is gone.
  class request {
  public:
    request() = default;
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    request(request&& o) noexcept { take(o); }
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        release();
        take(o);
      }
      return *this;
    }
    ~request() { release(); }
    /// True once the transfer has completed (or was never posted).
    bool done() const noexcept { return remaining_ == 0; }

  private:
    friend class mpi_transport;
    enum class kind : unsigned char { send, recv, consume };

    MPI_Request* reqs() noexcept { return count_ <= 1 ? &one_ : many_.get(); }
    void take(request& o) noexcept {
      one_ = std::exchange(o.one_, MPI_REQUEST_NULL);
      many_ = std::move(o.many_);
      count_ = std::exchange(o.count_, 0);
      remaining_ = std::exchange(o.remaining_, 0);
      kind_ = o.kind_;
      rank_ = o.rank_;
      peer_ = o.peer_;
      tag_ = o.tag_;
      bytes_ = o.bytes_;
      received_ = o.received_;
      staging_ = o.staging_;
      use_ = o.use_;
      grace_ = o.grace_;
      state_ = std::move(o.state_);
    }
    /// Cancels what is still pending. A receive that was already matched cannot be
    /// cancelled; its data is in flight, so wait (bounded) for it to land.
    void release() noexcept {
      if (remaining_ == 0 || count_ == 0) return;
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) return;
      MPI_Request* r = reqs();
      for (int i = 0; i < count_; ++i)
        if (r[i] != MPI_REQUEST_NULL) MPI_Cancel(&r[i]);
      const auto grace = kind_ == kind::send ? std::min(grace_, send_grace) : grace_;
      const deadline until = clock::now() + grace;
      for (int i = 0; i < count_; ++i) {
        while (r[i] != MPI_REQUEST_NULL) {
          int flag = 0;
          if (MPI_Test(&r[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) break;
          if (clock::now() >= until) {
            // Waiting longer could block forever (the peer stopped progressing).
            MPI_Request_free(&r[i]);
            if (state_) state_->broken.store(true);
            break;
          }
          std::this_thread::yield();
        }
        r[i] = MPI_REQUEST_NULL;
      }
      remaining_ = 0;
    }

    MPI_Request one_ = MPI_REQUEST_NULL;
    std::unique_ptr<MPI_Request[]> many_;
    int count_ = 0;     // pieces posted
    int remaining_ = 0; // pieces not yet complete (0: done)
    kind kind_ = kind::send;
    int rank_ = -1;
    int peer_ = -1;
    int tag_ = 0;
    std::size_t bytes_ = 0;
    std::size_t received_ = 0;
    void* staging_ = nullptr;
    consumer use_{};
    std::chrono::milliseconds grace_{0};
    std::shared_ptr<shared> state_;
    static constexpr std::chrono::milliseconds send_grace{200};
  };

  /// Duplicates `comm` (the user keeps ownership of `comm`). Throws `transport_error` if
  /// MPI is not initialised, `invalid_argument` for bad options.
  explicit mpi_transport(MPI_Comm comm, mpi_options options = {})
      : state_(std::make_shared<shared>()), options_(options) {
    check_options();
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
      throw transport_error("mpi_transport: MPI is not initialised (tcoll never calls MPI_Init; "
                            "call it before creating the transport)");
    if (comm == MPI_COMM_NULL) throw invalid_argument("mpi_transport: comm is MPI_COMM_NULL");
    int world_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    detail::mpi::check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", world_rank);
    adopt_setup();
  }
  /// Same with only the timeout changed.
  mpi_transport(MPI_Comm comm, std::chrono::milliseconds timeout)
      : mpi_transport(comm, mpi_options{timeout}) {}

  mpi_transport(const mpi_transport&) = delete;
  mpi_transport& operator=(const mpi_transport&) = delete;
  mpi_transport(mpi_transport&& o) noexcept
      : state_(std::move(o.state_)), options_(o.options_),
        comm_(std::exchange(o.comm_, MPI_COMM_NULL)), rank_(o.rank_), size_(o.size_) {}
  mpi_transport& operator=(mpi_transport&& o) noexcept {
    if (this != &o) {
      if (state_ && state_->context) state_->context->detach();
      retire_control();
      free_comm();
      state_ = std::move(o.state_);
      options_ = o.options_;
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      rank_ = o.rank_;
      size_ = o.size_;
    }
    return *this;
  }
  /// Frees the duplicate communicator (requests still pending on it were cancelled by their
  /// own destructors; they must not outlive the transport). Sends given up on with `abandon`
  /// that no receiver has taken stay with MPI, their buffers kept to the end of the process,
  /// and the communicator then stays to MPI_Finalize.
  ~mpi_transport() {
    if (state_ && state_->context) state_->context->detach(); // stop the engine first
    const bool abandoned_left = state_ && reap_abandoned(true);
    retire_control();
    if (!abandoned_left) free_comm();
  }

  /// Gives up on the pending send `r` without breaking the transport, for a receiver that
  /// may never take it (an elastic client that was dropped): MPI keeps the send (a send
  /// cannot be cancelled on every MPI), and `keep`, which must own the send's buffer, keeps
  /// that buffer alive until MPI has completed it (checked by later operations here), so a
  /// late receiver still reads valid data and the transport stays usable. Destroying a
  /// pending send request instead marks the transport broken.
  void abandon(request&& r, std::shared_ptr<const void> keep) {
    if (r.remaining_ == 0 || r.count_ == 0) return;
    if (r.kind_ != request::kind::send || r.staging_ != nullptr) { // not a plain send
      request drop = std::move(r);
      return;
    }
    typename shared::abandoned_send a;
    MPI_Request* q = r.reqs();
    for (int i = r.count_ - r.remaining_; i < r.count_; ++i)
      if (q[i] != MPI_REQUEST_NULL) a.pieces.push_back(std::exchange(q[i], MPI_REQUEST_NULL));
    r.remaining_ = 0;
    a.keep = std::move(keep);
    std::lock_guard lock(state_->abandoned_mutex);
    state_->abandoned.push_back(std::move(a));
    state_->abandoned_count.fetch_add(1, std::memory_order_relaxed);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return options_.timeout; }
  const mpi_options& options() const noexcept { return options_; }
  /// Message spaces, broken state and engine of the collectives on this transport.
  collective_context& collectives() noexcept { return *state_->context; }
  /// Non-blocking collectives run on tcoll's engine thread while the application may call
  /// MPI too: throws `transport_error` unless MPI runs at `MPI_THREAD_MULTIPLE`.
  void check_concurrent_use() const {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level != MPI_THREAD_MULTIPLE)
      throw transport_error(
          std::string("mpi_transport: non-blocking collectives (iallreduce, the overlap "
                      "scheduler) run on tcoll's communication thread and need "
                      "MPI_THREAD_MULTIPLE; MPI was initialised at ") +
              (level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
               : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
               : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                                                : "an unknown level") +
              " (call MPI_Init_thread with MPI_THREAD_MULTIPLE)",
          rank_);
  }
  /// The communicator failure announcements travel on (tag `announce_tag`); see `shared::control`.
  MPI_Comm control_comm() const noexcept { return state_->control; }
  static constexpr int announce_tag = tags::announce;
  /// The duplicate communicator tcoll talks on (for barriers or user-side diagnostics; do
  /// not free it).
  MPI_Comm comm() const noexcept { return comm_; }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    request r = make(request::kind::send, peer, tag, bytes);
    post(r, [&](std::size_t off, int n, MPI_Request* q) {
      // MPI_Isend takes a non-const pointer only in MPI-2 headers; the data is not written.
      return MPI_Isend(const_cast<char*>(static_cast<const char*>(data)) + off, n, MPI_BYTE, peer,
                       tag, comm_, q);
    });
    return r;
  }

  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    request r = make(request::kind::recv, peer, tag, bytes);
    post(r, [&](std::size_t off, int n, MPI_Request* q) {
      return MPI_Irecv(static_cast<char*>(dst) + off, n, MPI_BYTE, peer, tag, comm_, q);
    });
    return r;
  }

  /// Receives into `staging` (at least `bytes` large) and calls `use(staging, bytes)` in the
  /// `test`/`wait` that sees the receive complete.
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    if (bytes != 0 && staging == nullptr)
      throw invalid_argument("irecv_consume: staging is null but bytes is " +
                                 std::to_string(bytes) + " (mpi_transport is not zero-copy)",
                             rank_, peer);
    request r = make(request::kind::consume, peer, tag, bytes);
    r.staging_ = staging;
    r.use_ = use;
    post(r, [&](std::size_t off, int n, MPI_Request* q) {
      return MPI_Irecv(static_cast<char*>(staging) + off, n, MPI_BYTE, peer, tag, comm_, q);
    });
    return r;
  }

  /// Local (MPI_Iprobe): whether a message from `peer` with `tag` has arrived that no
  /// receive posted before this call takes. Nothing is received.
  bool probe(int peer, int tag) {
    int flag = 0;
    const int rc = MPI_Iprobe(peer, tag, comm_, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      throw transport_error("MPI_Iprobe failed (tag " + std::to_string(tag) + ")", rank_, peer);
    return flag != 0;
  }

  /// Progresses `r` once (MPI_Test); true when complete. Throws `aborted_error` after
  /// `abort()`, `transport_error` on an MPI error or a size mismatch.
  bool test(request& r) {
    if (r.remaining_ == 0) return true;
    if (state_->aborted.load(std::memory_order_relaxed)) {
      flush_announcement(); // deferred by an abort() from a thread that may not call MPI
      throw_aborted(describe(r), r.peer_);
    }
    MPI_Request* q = r.reqs();
    for (int i = r.count_ - r.remaining_; i < r.count_; ++i) {
      int flag = 0;
      MPI_Status st;
      const int rc = MPI_Test(&q[i], &flag, &st);
      if (rc != MPI_SUCCESS) {
        q[i] = MPI_REQUEST_NULL; // a failed request is freed by MPI
        --r.remaining_;
        throw transport_error(describe(r) + " failed: " + detail::mpi::error_string(rc), rank_,
                              r.peer_);
      }
      if (!flag) return false;
      --r.remaining_;
      if (r.kind_ != request::kind::send) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        r.received_ += static_cast<std::size_t>(got);
      }
    }
    if (r.kind_ != request::kind::send && r.received_ != r.bytes_)
      throw transport_error(describe(r) + " matched a shorter send: got " +
                                std::to_string(r.received_) + " bytes",
                            rank_, r.peer_);
    if (r.kind_ == request::kind::consume) r.use_(r.staging_, r.bytes_);
    return true;
  }

  /// Polls `r` until it completes; throws `timeout_error` at `when` (the request is then
  /// cancelled when it is destroyed) and `aborted_error` after `abort()`.
  void wait(request& r, deadline when) {
    for (int polls = 1;; ++polls) {
      if (test(r)) return;
      if (polls % options_.polls_per_yield == 0) {
        poll_announcements();
        if (clock::now() >= when)
          throw timeout_error(describe(r) + " timed out after " +
                                  std::to_string(options_.timeout.count()) + " ms",
                              rank_, r.peer_);
        std::this_thread::yield();
      }
    }
  }

  /// Makes every pending and future `test`/`wait` of this rank throw `aborted_error` and
  /// announces the failure to every other rank of the communicator (a one-int message on
  /// `announce_tag` of `control_comm()`), whose waits then throw `aborted_error` naming this rank
  /// within a few polls instead of running into their timeout. Safe to call from another thread:
  /// below MPI_THREAD_MULTIPLE, outside the main thread, the announcement goes out with
  /// this rank's next MPI call. Never calls MPI_Abort: the job is the user's.
  void abort() noexcept {
    if (!state_) return;
    state_->aborted.store(true);
    if (state_->failed_peer.load() >= 0) return; // a peer failed first: it told everyone
    state_->announce_pending.store(true);
    if (may_call_mpi_here()) flush_announcement();
  }

  /// Has this transport aborted (abort() here, or a peer's failure announcement received)?
  bool aborted() const noexcept { return state_ && state_->aborted.load(); }
  /// The rank whose failure announcement aborted this transport, or -1.
  int failed_peer() const noexcept { return state_ ? state_->failed_peer.load() : -1; }

  /// Receives a pending failure announcement of a peer, if any, and aborts this rank with
  /// it. Several threads may poll at once (MPI_THREAD_MULTIPLE): a matched probe gives the
  /// announcement to one of them. `wait` calls it between polls; call it from an idle loop to
  /// notice failures early.
  void poll_announcements() {
    if (!state_ || comm_ == MPI_COMM_NULL) return;
    flush_announcement();
    if (state_->aborted.load(std::memory_order_relaxed)) return; // nothing more to learn
    // A matched probe: the announcement is this thread's from the probe on, so two threads
    // polling at once cannot both see it and leave the loser blocked in a receive
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, announce_tag, state_->control, &flag, &message, &st) !=
            MPI_SUCCESS ||
        !flag)
      return;
    int code = 0;
    MPI_Mrecv(&code, 1, MPI_INT, &message, MPI_STATUS_IGNORE);
    int expected = -1;
    state_->failed_peer.compare_exchange_strong(expected, st.MPI_SOURCE);
    state_->aborted.store(true);
  }

  /// MPI_Barrier on the duplicate communicator (benchmarks, tests). Blocking, no timeout.
  void barrier() { detail::mpi::check(MPI_Barrier(comm_), "MPI_Barrier", rank_); }

  /// The vendor allreduce: `MPI_Allreduce` (MPI_IN_PLACE when `send == recv`). Built-in
  /// types and sum/prod/min/max map to MPI's own; half, bfloat16, other trivially copyable
  /// types and user ops go through a cached `MPI_Op_create` op (commutativity from the op's
  /// trait) on a contiguous byte datatype; avg is a sum divided afterwards. Counts above
  /// INT_MAX elements run as several allreduces (the operation is element-wise).
  /// Runs as `MPI_Iallreduce` on a copy, polled: `timeout()` and failure announcements
  /// apply as to every other call (the copy keeps a timed-out request away from the
  /// caller's memory).
  template <class T, class Op>
  requires element<T>
  void native_allreduce(const T* send, T* recv, std::size_t count, const Op& op) {
    if (count == 0) return;
    state_->caller.store(std::this_thread::get_id(), std::memory_order_relaxed);
    if (state_->aborted.load())
      throw aborted_error("native_allreduce after abort() on this rank", rank_);
    const detail::mpi::datatype_and_op with = detail::mpi::native_datatype_and_op<T>(op, rank_);
    const Op* saved = detail::mpi::current_op<Op>;
    detail::mpi::current_op<Op> = &op;
    struct restore {
      const Op* saved;
      ~restore() { detail::mpi::current_op<Op> = saved; }
    } guard{saved};
    if (options_.blocking_native_allreduce) {
      detail::mpi::blocking_allreduce(send, recv, count, with, comm_, rank_);
    } else {
      const auto aborted_after_poll = [this] {
        poll_announcements();
        return state_->aborted.load(std::memory_order_relaxed);
      };
      const detail::mpi::polled_end end = detail::mpi::polled_allreduce(
          send, recv, count, with, comm_, rank_, options_.timeout, options_.polls_per_yield,
          state_->broken, aborted_after_poll);
      if (end == detail::mpi::polled_end::aborted)
        throw_aborted("native_allreduce of " + std::to_string(count) + " elements", -1);
      if (end == detail::mpi::polled_end::timed_out)
        throw timeout_error("native_allreduce (MPI_Iallreduce) of " + std::to_string(count) +
                                " elements timed out after " +
                                std::to_string(options_.timeout.count()) + " ms",
                            rank_);
    }
    if constexpr (finalizing_op<Op>)
      for (std::size_t i = 0; i < count; ++i) recv[i] = finalize_op(op, recv[i], size_);
  }

  /// A transport over the ranks that share memory with this one
  /// (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`), ranks ordered as in this transport.
  /// Collective over this transport's ranks.
  mpi_transport split_shared() const {
    MPI_Comm c = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &c),
                       "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", rank_);
    return mpi_transport(adopt, c, options_);
  }

  /// A transport over the ranks that pass the same `color` (>= 0), ordered by `key` then
  /// by rank (`MPI_Comm_split`). Collective over this transport's ranks.
  mpi_transport split(int color, int key) const {
    if (color < 0)
      throw invalid_argument("split: color must be >= 0, got " + std::to_string(color), rank_);
    MPI_Comm c = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split", rank_);
    return mpi_transport(adopt, c, options_);
  }

private:
  struct adopt_t {};
  static constexpr adopt_t adopt{};
  /// Takes ownership of a communicator MPI just created for tcoll (no second dup).
  mpi_transport(adopt_t, MPI_Comm c, mpi_options options)
      : state_(std::make_shared<shared>()), options_(options), comm_(c) {
    adopt_setup();
  }

  void check_options() const {
    if (options_.timeout.count() <= 0)
      throw invalid_argument("mpi_transport: options.timeout must be positive, got " +
                             std::to_string(options_.timeout.count()) + " ms");
    if (options_.max_message_bytes == 0 ||
        options_.max_message_bytes > static_cast<std::size_t>(INT_MAX))
      throw invalid_argument("mpi_transport: options.max_message_bytes must be in [1, INT_MAX], "
                             "got " +
                             std::to_string(options_.max_message_bytes));
    if (options_.polls_per_yield < 1)
      throw invalid_argument("mpi_transport: options.polls_per_yield must be >= 1");
  }

  void adopt_setup() {
    int world_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    try {
      detail::mpi::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN),
                         "MPI_Comm_set_errhandler", world_rank);
      detail::mpi::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", world_rank);
      detail::mpi::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", world_rank);
      int* tag_ub = nullptr;
      int has_ub = 0;
      detail::mpi::check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &has_ub),
                         "MPI_Comm_get_attr(MPI_TAG_UB)", world_rank);
      // MPI guarantees at least 32767.
      const int ub = has_ub && tag_ub ? *tag_ub : 32767;
      const int first = collective_context::default_first_tag;
      state_->context = std::make_unique<collective_context>(
          first, std::min(collective_context::default_tag_count, ub - first + 1));
      detail::mpi::check(MPI_Comm_dup(comm_, &state_->control), "MPI_Comm_dup(control)",
                         world_rank);
      detail::mpi::controls().live.fetch_add(1, std::memory_order_relaxed);
      detail::mpi::reap_controls(false); // earlier transports' agreements, where finished
      detail::mpi::check(MPI_Comm_set_errhandler(state_->control, MPI_ERRORS_RETURN),
                         "MPI_Comm_set_errhandler(control)", world_rank);
    } catch (...) {
      free_comm();
      throw;
    }
  }

  /// Did this rank see a failure on the transport (abort, a peer's announcement, a send
  /// handed back unfinished, a broken collective)?
  bool saw_failure() const noexcept {
    return state_ && (state_->aborted.load() || state_->broken.load() || state_->announced.load() ||
                      (state_->context && state_->context->broken()));
  }

  /// Hands the control communicator to the retirement agreement (collective, non-blocking:
  /// `detail::mpi::retire_control`). Where this thread may not call MPI, or MPI is gone, it
  /// stays to MPI_Finalize.
  void retire_control() noexcept {
    if (!state_ || state_->control == MPI_COMM_NULL || !may_call_mpi_here()) return;
    detail::mpi::retire_control(std::exchange(state_->control, MPI_COMM_NULL), saw_failure(),
                                options_.timeout);
  }

  /// Frees the communicator, unless this rank saw a failure on it: then peers may still
  /// send to it (messages of the failed collective), and a message arriving for a freed
  /// communicator would land in the next one MPI creates with the same context id (see
  /// `shared::control`). Such a communicator is left to MPI_Finalize. So is one that still
  /// holds a message nobody received, which a rank that saw no failure has when its peers
  /// failed without it (it never joined their collective): MPICH 5 aborts the program in
  /// MPI_Comm_free for such a communicator ("being freed has 1 unmatched message(s)").
  void free_comm() noexcept {
    if (comm_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !saw_failure()) {
      int unmatched = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &unmatched, MPI_STATUS_IGNORE);
      if (!unmatched) MPI_Comm_free(&comm_);
    }
    comm_ = MPI_COMM_NULL;
  }

  /// Throws the `aborted_error` of an aborted transport: naming the peer whose
  /// announcement aborted it, or saying that abort() was called here.
  [[noreturn]] void throw_aborted(const std::string& what, int peer) const {
    const int failed = state_->failed_peer.load();
    if (failed >= 0)
      throw aborted_error(what + " aborted: rank " + std::to_string(failed) +
                              " announced a failure (timeout or error of a collective, or "
                              "abort())",
                          rank_, failed);
    throw aborted_error(what + " aborted (abort() was called on this rank, or a collective "
                               "of it failed)",
                        rank_, peer);
  }

  /// May this thread call MPI now? Always with MPI_THREAD_MULTIPLE; at SERIALIZED the
  /// thread that runs this transport's operations (`shared::caller`) or the main one;
  /// below, only the main thread (FUNNELED's rule).
  bool may_call_mpi_here() const noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || comm_ == MPI_COMM_NULL) return false;
    int level = MPI_THREAD_SINGLE, is_main = 0;
    MPI_Query_thread(&level);
    if (level == MPI_THREAD_MULTIPLE) return true;
    if (level == MPI_THREAD_SERIALIZED &&
        state_->caller.load(std::memory_order_relaxed) == std::this_thread::get_id())
      return true;
    MPI_Is_thread_main(&is_main);
    return is_main != 0;
  }

  /// Sends the failure announcement to every peer, once, on the control communicator. The
  /// message is one int from static storage, so it may outlive this transport; the
  /// requests are freed (an announcement nobody receives stays on the control
  /// communicator, which is never freed).
  void flush_announcement() noexcept {
    if (!state_->announce_pending.load(std::memory_order_relaxed)) return;
    if (state_->announced.exchange(true)) return;
    static const int code = 1;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      MPI_Request q = MPI_REQUEST_NULL;
      if (MPI_Isend(const_cast<int*>(&code), 1, MPI_INT, peer, announce_tag, state_->control, &q) ==
          MPI_SUCCESS)
        MPI_Request_free(&q);
    }
  }

  request make(request::kind k, int peer, int tag, std::size_t bytes) const {
    request r;
    r.kind_ = k;
    r.rank_ = rank_;
    r.peer_ = peer;
    r.tag_ = tag;
    r.bytes_ = bytes;
    r.grace_ = options_.timeout;
    r.state_ = state_;
    return r;
  }

  /// Completes what it can of the sends given up on with `abandon` and releases their
  /// buffers; with `at_end`, hands the rest to MPI (MPI_Request_free) and keeps their buffers
  /// for the rest of the process. Returns whether some were still pending.
  bool reap_abandoned(bool at_end) noexcept {
    if (state_->abandoned_count.load(std::memory_order_relaxed) == 0) return false;
    int finalized = 0;
    MPI_Finalized(&finalized);
    std::lock_guard lock(state_->abandoned_mutex);
    auto& list = state_->abandoned;
    bool pending = false;
    for (auto it = list.begin(); it != list.end();) {
      bool done = true;
      for (MPI_Request& q : it->pieces) {
        int flag = 0;
        if (!finalized && q != MPI_REQUEST_NULL &&
            MPI_Test(&q, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag)
          done = false;
      }
      if (!done && at_end) {
        for (MPI_Request& q : it->pieces)
          if (q != MPI_REQUEST_NULL && !finalized) MPI_Request_free(&q);
        static std::mutex kept_mutex;
        static auto* kept_forever = new std::vector<std::shared_ptr<const void>>();
        std::lock_guard kept_lock(kept_mutex);
        kept_forever->push_back(std::move(it->keep)); // MPI may read it until it ends
      }
      if (done || at_end) {
        pending |= !done;
        it = list.erase(it);
        state_->abandoned_count.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++it;
      }
    }
    return pending;
  }

  /// Posts the pieces of `r` (one empty message for zero bytes, so sizes still match up).
  template <class Post>
  void post(request& r, Post&& post_one) {
    state_->caller.store(std::this_thread::get_id(), std::memory_order_relaxed);
    reap_abandoned(false);
    flush_announcement();
    if (state_->aborted.load(std::memory_order_relaxed))
      throw_aborted(describe(r) + " posted after the transport", r.peer_);
    if (state_->broken.load(std::memory_order_relaxed))
      throw aborted_error(describe(r) + ": an earlier send on this transport was never "
                                        "received (after a timeout); create a new mpi_transport",
                          rank_, r.peer_);
    const std::size_t piece = options_.max_message_bytes;
    const std::size_t pieces = r.bytes_ == 0 ? 1 : (r.bytes_ + piece - 1) / piece;
    if (pieces > static_cast<std::size_t>(INT_MAX))
      throw invalid_argument(describe(r) + " needs too many messages", rank_, r.peer_);
    if (pieces > 1) r.many_ = std::make_unique<MPI_Request[]>(pieces);
    r.count_ = static_cast<int>(pieces);
    MPI_Request* q = r.reqs();
    for (std::size_t i = 0; i < pieces; ++i) q[i] = MPI_REQUEST_NULL;
    for (std::size_t i = 0; i < pieces; ++i) {
      const std::size_t off = i * piece;
      const int n = static_cast<int>(std::min(piece, r.bytes_ - std::min(off, r.bytes_)));
      const int rc = post_one(off, n, &q[i]);
      if (rc != MPI_SUCCESS) {
        r.remaining_ = static_cast<int>(i); // cancel the pieces already posted
        throw transport_error(describe(r) + ": posting failed: " + detail::mpi::error_string(rc),
                              rank_, r.peer_);
      }
      r.remaining_ = static_cast<int>(i) + 1;
    }
  }

  static std::string describe(const request& r) {
    const char* what = r.kind_ == request::kind::send ? "send" : "receive";
    return std::string(what) + " of " + std::to_string(r.bytes_) + " bytes (tag " +
           std::to_string(r.tag_) + ")";
  }

  std::shared_ptr<shared> state_;
  mpi_options options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  int size_ = 0;
};

static_assert(check_transport<mpi_transport>());

} // namespace tcoll
