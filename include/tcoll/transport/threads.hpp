#pragma once
/// \file
/// `threads`: N ranks as threads of one process. A send posts a descriptor of the sender's
/// own memory; the receiver copies or reduces straight from it (zero copy, no staging) and
/// then releases the sender. Every wait has a deadline; a failing rank aborts the team so
/// the others throw `aborted_error` instead of hanging.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "detail/rendezvous.hpp"

namespace tcoll {

namespace detail::threads {

/// A posted send: the sender's memory, owned by the sender's request until `done`.
struct send_slot {
  const void* data = nullptr;
  std::size_t bytes = 0;
  int tag = 0;
  // 0 queued, 1 being consumed by the receiver, 2 done, 3 done with a size mismatch
  std::atomic<int> state{0};
};

using doorbell = detail::doorbell;
using mailbox = detail::mailbox<send_slot>;

struct shared_state {
  explicit shared_state(int n, std::chrono::milliseconds t)
      : nranks(n), timeout(t), boxes(static_cast<std::size_t>(n) * n), bells(n),
        spin_allowed(static_cast<unsigned>(n) <= std::max(1u, std::thread::hardware_concurrency())),
        sync(n) {}
  int nranks;
  std::chrono::milliseconds timeout;
  std::vector<mailbox> boxes; // [src * nranks + dst]
  std::vector<doorbell> bells;
  std::atomic<bool> aborted{false};
  bool spin_allowed;
  std::barrier<> sync;
  mailbox& box(int src, int dst) { return boxes[static_cast<std::size_t>(src) * nranks + dst]; }
};

} // namespace detail::threads

/// One rank's endpoint of a `thread_team`; satisfies `tcoll::transport`.
class thread_transport {
public:
  static constexpr bool zero_copy = true;
  static constexpr std::string_view name = "threads";

  /// A pending transfer. Destroying a pending send withdraws it (or waits for a receiver
  /// that is copying from it), so unwinding after an error never leaves a dangling pointer.
  class request {
  public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      withdraw();
      slot_ = std::move(o.slot_);
      state_ = o.state_;
      kind_ = o.kind_;
      owner_ = o.owner_;
      peer_ = o.peer_;
      tag_ = o.tag_;
      dst_ = o.dst_;
      bytes_ = o.bytes_;
      use_ = o.use_;
      done_ = o.done_;
      return *this;
    }
    ~request() { withdraw(); }
    bool done() const noexcept { return done_; }

  private:
    friend class thread_transport;
    enum class kind : unsigned char { none, send, recv, consume };
    void withdraw() noexcept {
      if (!slot_ || done_) return;
      auto& box = state_->box(owner_, peer_);
      {
        std::lock_guard lock(box.mutex);
        auto it = std::find(box.queue.begin(), box.queue.end(), slot_.get());
        if (it != box.queue.end()) {
          box.queue.erase(it);
          return;
        }
      }
      while (slot_->state.load(std::memory_order_acquire) == 1) std::this_thread::yield();
    }
    std::unique_ptr<detail::threads::send_slot> slot_;
    detail::threads::shared_state* state_ = nullptr;
    kind kind_ = kind::none;
    int owner_ = -1;
    int peer_ = -1;
    int tag_ = 0;
    void* dst_ = nullptr;
    std::size_t bytes_ = 0;
    consumer use_{};
    bool done_ = true;
  };

  thread_transport(detail::threads::shared_state& s, int rank) : state_(&s), rank_(rank) {}
  thread_transport(const thread_transport&) = delete;
  thread_transport& operator=(const thread_transport&) = delete;
  /// Stops this rank's communication engine (if one was started) before the endpoint goes.
  ~thread_transport() { context_.detach(); }

  /// Message spaces, broken state and engine of this rank's collectives.
  collective_context& collectives() noexcept { return context_; }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return state_->nranks; }
  std::chrono::milliseconds timeout() const noexcept { return state_->timeout; }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    check_peer(peer, "isend");
    request r = make(request::kind::send, peer, tag, bytes);
    r.slot_ = std::make_unique<detail::threads::send_slot>();
    r.slot_->data = data;
    r.slot_->bytes = bytes;
    r.slot_->tag = tag;
    auto& box = state_->box(rank_, peer);
    {
      std::lock_guard lock(box.mutex);
      box.queue.push_back(r.slot_.get());
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

  /// Progresses `r` once; true when complete.
  bool test(request& r) {
    if (r.done_) return true;
    if (state_->aborted.load(std::memory_order_relaxed))
      throw aborted_error("operation aborted because another rank failed", rank_, r.peer_);
    return r.kind_ == request::kind::send ? test_send(r) : test_recv(r);
  }

  /// Blocks until `r` completes; throws `timeout_error` at `when`.
  void wait(request& r, deadline when) {
    if (!state_->bells[rank_].wait([&] { return test(r); }, when, state_->aborted,
                                   state_->spin_allowed ? 20000 : 0))
      throw detail::rendezvous_timeout(r.kind_ == request::kind::send, r.bytes_, r.tag_,
                                       state_->timeout, rank_, r.peer_);
  }

  /// Makes every pending and future wait of every rank of the team throw `aborted_error`.
  void abort() noexcept {
    state_->aborted.store(true);
    for (auto& b : state_->bells) b.ring();
  }

  /// Team-wide barrier (for benchmarks and tests; algorithms never need it).
  void barrier() { state_->sync.arrive_and_wait(); }

private:
  request make(request::kind k, int peer, int tag, std::size_t bytes) {
    request r;
    r.state_ = state_;
    r.kind_ = k;
    r.owner_ = rank_;
    r.peer_ = peer;
    r.tag_ = tag;
    r.bytes_ = bytes;
    r.done_ = false;
    return r;
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= state_->nranks)
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(state_->nranks) + ")",
                             rank_);
  }
  bool test_send(request& r) {
    const int s = r.slot_->state.load(std::memory_order_acquire);
    if (s < 2) return false;
    r.done_ = true;
    if (s == 3)
      throw transport_error("send of " + std::to_string(r.bytes_) +
                                " bytes did not match the receiver's size",
                            rank_, r.peer_);
    return true;
  }
  bool test_recv(request& r) {
    detail::threads::send_slot* slot = nullptr;
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
      if (r.kind_ == request::kind::recv) {
        if (r.bytes_) std::memcpy(r.dst_, slot->data, r.bytes_);
      } else {
        r.use_(slot->data, r.bytes_);
      }
    } catch (...) {
      release(slot, 2, r.peer_);
      throw;
    }
    release(slot, 2, r.peer_);
    return true;
  }
  void release(detail::threads::send_slot* slot, int final_state, int sender) {
    slot->state.store(final_state, std::memory_order_release);
    state_->bells[sender].ring();
  }

  detail::threads::shared_state* state_;
  int rank_;
  collective_context context_; // last: destroyed first
};

static_assert(check_transport<thread_transport>());

/// N ranks as threads of this process. `run(f)` calls `f(thread_transport&)` on every rank
/// concurrently, joins them and rethrows the first root-cause error (a rank's own failure
/// is preferred over the `aborted_error` it caused elsewhere).
class thread_team {
public:
  explicit thread_team(int nranks, std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : nranks_(nranks), timeout_(timeout) {
    if (nranks < 1)
      throw invalid_argument("thread_team: nranks must be >= 1, got " + std::to_string(nranks));
    if (timeout.count() <= 0) throw invalid_argument("thread_team: timeout must be positive");
  }
  int size() const noexcept { return nranks_; }

  template <class F>
  void run(F&& f) {
    detail::threads::shared_state state(nranks_, timeout_);
    std::vector<std::exception_ptr> errors(nranks_);
    std::vector<char> was_abort(nranks_, 0);
    auto body = [&](int rank) {
      thread_transport t(state, rank);
      try {
        f(t);
      } catch (const aborted_error&) {
        errors[rank] = std::current_exception();
        was_abort[rank] = 1;
        t.abort();
      } catch (...) {
        errors[rank] = std::current_exception();
        t.abort();
      }
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
};

} // namespace tcoll
