#pragma once
/// \file
/// `shaped<Transport>`: a decorator that makes a fast transport behave like a slower
/// network, deterministically and without root. Every message that leaves a node is charged
/// `alpha + bytes / bytes_per_second` before the receiver can see it:
///  - the bytes occupy the sending node's egress link for `bytes / bytes_per_second`
///    (messages of one node queue behind each other, as on one NIC), and
///  - `alpha` (the wire and software latency) is added after serialization, pipelined:
///    it does not occupy the link.
/// Ranks `[k*group_size, (k+1)*group_size)` are one node; messages inside a node pass
/// free of charge, so one thread team can emulate "N nodes x G devices".
///
/// Implementation: a send is held back (not posted to the inner transport) until its
/// delivery time; every `test`/`wait` of the rank posts the sends that are due. The
/// receiver needs nothing special. A waiting thread's timer slack is set to 1 us (Linux)
/// so that sleeping until a delivery time wakes on time. The egress clocks of one emulated network
/// live in a `shaped_network` that every rank of a node shares (one per process for MPI, one per
/// team for threads).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"

namespace tcoll {

/// What `shaped` charges per message. An aggregate: `shaping{.alpha = 20us, .gbit_per_s = 10}`.
struct shaping {
  /// Latency of one message (after its bytes are on the wire).
  std::chrono::nanoseconds alpha{0};
  /// Link rate in Gbit/s (10 = 1.25e9 bytes/s); 0 or less means unlimited.
  double gbit_per_s = 0.0;
  /// Ranks per node (of the decorated transport's numbering); messages between ranks of one
  /// node are free. 1 (or less) charges every message.
  int group_size = 1;

  /// Seconds per byte (beta).
  constexpr double beta_s_per_byte() const {
    return gbit_per_s > 0 ? 8.0 / (gbit_per_s * 1e9) : 0.0;
  }
  /// Node of `rank`.
  constexpr int node_of(int rank) const { return group_size > 1 ? rank / group_size : rank; }
};

/// The emulated network: the shaping parameters and one egress clock per node, shared by
/// every `shaped` endpoint of this process. Thread-safe.
class shaped_network {
public:
  explicit shaped_network(shaping s) : params_(s) {
    if (s.alpha.count() < 0) throw invalid_argument("shaped_network: alpha must be >= 0");
  }
  const shaping& params() const noexcept { return params_; }

  /// Reserves the egress link of `node` for `bytes` from `now` on and returns when the
  /// message is visible to its receiver.
  clock::time_point schedule(int node, std::size_t bytes, clock::time_point now) {
    const auto wire = std::chrono::duration_cast<clock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) * params_.beta_s_per_byte()));
    std::lock_guard lock(mutex_);
    if (static_cast<std::size_t>(node) >= egress_free_.size())
      egress_free_.resize(static_cast<std::size_t>(node) + 1, clock::time_point{});
    auto& free_at = egress_free_[static_cast<std::size_t>(node)];
    const auto start = std::max(now, free_at);
    free_at = start + wire;
    return free_at + std::chrono::duration_cast<clock::duration>(params_.alpha);
  }

private:
  shaping params_;
  std::mutex mutex_;
  std::vector<clock::time_point> egress_free_;
};

namespace detail::shaped_impl {
/// A send waiting for its delivery time. Shared by the caller's request (which may be
/// destroyed early, e.g. while unwinding) and the endpoint's pending list.
template <class Inner>
struct held_send {
  clock::time_point due{};
  int peer = -1;
  const void* data = nullptr;
  std::size_t bytes = 0;
  int tag = 0;
  bool for_irecv = false; ///< posted with the inner transport's `isend_for_irecv`
  bool posted = false;
  bool cancelled = false;
  typename Inner::request inner{};
};
} // namespace detail::shaped_impl

/// One rank's endpoint of a shaped network over transport `Tr` (held by reference).
/// Satisfies `tcoll::transport`; zero copy if `Tr` is.
template <transport Tr>
class shaped {
  using held = detail::shaped_impl::held_send<Tr>;

public:
  static constexpr bool zero_copy = transport_is_zero_copy<Tr>();
  static constexpr std::string_view name = "shaped";

  /// A pending transfer: a held or posted send, or an inner receive.
  class request {
  public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&&) noexcept = default;
    ~request() {
      // a send still held back must never be posted after its buffer may be gone
      if (send_ && !send_->posted) send_->cancelled = true;
    }

  private:
    friend class shaped;
    std::shared_ptr<held> send_;
    typename Tr::request recv_{};
  };

  /// Decorates `inner`; `net` must outlive this endpoint.
  shaped(Tr& inner, shaped_network& net) : inner_(&inner), net_(&net) {}

  int rank() const { return inner_->rank(); }
  int size() const { return inner_->size(); }
  std::chrono::milliseconds timeout() const { return inner_->timeout(); }
  const shaping& params() const noexcept { return net_->params(); }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    return send(peer, data, bytes, tag, false, "isend");
  }
  /// `isend` of a message whose receiver posts `irecv` for it, posted (now or when it falls
  /// due) with the inner transport's `isend_for_irecv` where it takes that hint.
  request isend_for_irecv(int peer, const void* data, std::size_t bytes,
                          int tag) requires takes_irecv_hint<Tr> {
    return send(peer, data, bytes, tag, true, "isend_for_irecv");
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    request r;
    r.recv_ = inner_->irecv(peer, dst, bytes, tag);
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    request r;
    r.recv_ = inner_->irecv_consume(peer, bytes, tag, use, staging);
    return r;
  }

  /// Posts the sends that are due, then tests `r` once.
  bool test(request& r) {
    progress(clock::now());
    if (!r.send_) return inner_->test(r.recv_);
    if (!r.send_->posted) return false;
    return inner_->test(r.send_->inner);
  }

  /// Blocks until `r` completes, posting held sends as they fall due; `timeout_error` at
  /// `when`. While sends are held it blocks in the inner transport's own wait with the next
  /// delivery time as deadline (so an arriving message still wakes it at once), then posts.
  void wait(request& r, deadline when) {
    precise_sleeps();
    for (;;) {
      if (test(r)) return;
      const auto next = next_due();
      if (clock::now() >= when) {
        const int peer = r.send_ ? r.send_->peer : -1;
        throw timeout_error(std::string(r.send_ ? "send" : "receive") + " timed out after " +
                                std::to_string(timeout().count()) + " ms (shaped)",
                            rank(), peer);
      }
      const deadline until = next ? std::min(*next, when) : when;
      if (r.send_ && !r.send_->posted) { // nothing to block on before it is posted
        std::this_thread::sleep_until(until);
        continue;
      }
      auto& inner = r.send_ ? r.send_->inner : r.recv_;
      if (until == when) return inner_->wait(inner, when);
      try {
        inner_->wait(inner, until);
        return;
      } catch (const timeout_error&) {
        // the deadline was the next delivery time, not the caller's: post and go on
        if (clock::now() >= when) throw;
      }
    }
  }

  void abort() noexcept { inner_->abort(); }

  /// The inner transport's collective context (same ranks, same message spaces).
  collective_context& collectives() noexcept requires has_collective_context<Tr> {
    return inner_->collectives();
  }
  /// Forwards the inner transport's check that it may be driven from the engine thread.
  void check_concurrent_use() const requires requires(const Tr& i) { i.check_concurrent_use(); }
  { inner_->check_concurrent_use(); }

  /// Forwards the inner transport's barrier (benchmarks and tests).
  void barrier() requires requires(Tr& t) { t.barrier(); }
  {
    flush_all();
    inner_->barrier();
  }

  /// The decorated transport.
  Tr& inner() noexcept { return *inner_; }

private:
  /// Delivery times are honoured by sleeping; Linux's default timer slack (50 us) would
  /// make every wake-up late, so the waiting thread's slack is set to 1 us (once per thread).
  static void precise_sleeps() noexcept {
#if defined(__linux__)
    thread_local bool done = false;
    if (!done) {
      prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
      done = true;
    }
#endif
  }
  /// `isend` (`for_irecv`: `isend_for_irecv`, named `what` in errors): posted at once inside
  /// a node, held until its delivery time across nodes.
  request send(int peer, const void* data, std::size_t bytes, int tag, bool for_irecv,
               const char* what) {
    if (peer < 0 || peer >= size())
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size()) + ")",
                             rank());
    request r;
    r.send_ = std::make_shared<held>();
    auto& h = *r.send_;
    h.peer = peer;
    h.data = data;
    h.bytes = bytes;
    h.tag = tag;
    h.for_irecv = for_irecv;
    const shaping& p = net_->params();
    const auto now = clock::now();
    const int me = p.node_of(rank());
    if (me == p.node_of(peer) && p.group_size > 1) {
      h.posted = true; // inside a node: free
      h.inner = post(h);
    } else {
      h.due = net_->schedule(me, bytes, now);
      held_.push_back(r.send_);
      progress(now);
    }
    return r;
  }
  /// Hands `h` to the inner transport (with the hint where it was sent with one).
  typename Tr::request post(const held& h) {
    return h.for_irecv ? tcoll::isend_for_irecv(*inner_, h.peer, h.data, h.bytes, h.tag)
                       : inner_->isend(h.peer, h.data, h.bytes, h.tag);
  }
  void progress(clock::time_point now) {
    if (held_.empty()) return;
    // Sends to one peer fall due in posting order (one egress clock per node), so posting
    // every due send in list order keeps the per-pair order the transport concept promises.
    std::size_t keep = 0;
    for (std::size_t i = 0; i < held_.size(); ++i) {
      auto& h = held_[i];
      if (h->cancelled) continue;
      if (h->due <= now && !blocked_before(i, h->peer)) {
        h->inner = post(*h);
        h->posted = true;
        continue;
      }
      held_[keep++] = std::move(h);
    }
    held_.resize(keep);
  }
  // true if an earlier held send to the same peer is still waiting (keeps pair order even
  // if a clock adjustment made a later one due first)
  bool blocked_before(std::size_t i, int peer) const {
    for (std::size_t j = 0; j < i; ++j)
      if (held_[j] && !held_[j]->posted && !held_[j]->cancelled && held_[j]->peer == peer)
        return true;
    return false;
  }
  std::optional<clock::time_point> next_due() const {
    std::optional<clock::time_point> t;
    for (const auto& h : held_)
      if (!h->cancelled && (!t || h->due < *t)) t = h->due;
    return t;
  }
  void flush_all() {
    while (!held_.empty()) {
      progress(clock::now());
      std::this_thread::yield();
    }
  }

  Tr* inner_;
  shaped_network* net_;
  std::vector<std::shared_ptr<held>> held_;
};

} // namespace tcoll
