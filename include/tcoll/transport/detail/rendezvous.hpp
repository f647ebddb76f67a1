#pragma once
/// \file
/// The in-process rendezvous shared by the thread and device_team transports: per-pair
/// mailboxes of posted sends, a per-rank doorbell that a waiting rank sleeps on (with a
/// deadline), the state every rank of a team shares, what a request knows about its transfer,
/// a barrier with a deadline, and the running of a team's ranks on threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../../core/concepts.hpp"
#include "../../core/error.hpp"

namespace tcoll::detail {

/// A posted send as its receiver finds it in a mailbox; each transport's slot derives from it
/// and adds what else its receiver needs. `state`: 0 queued, 1 being read by the receiver,
/// 2 done, 3 done with a size mismatch (a transport may add failure states above these).
struct posted_send {
  const void* data = nullptr;
  std::size_t bytes = 0;
  int tag = 0;
  std::atomic<int> state{0};
};

/// Posted sends from one rank to another, matched by the receiver in posting order.
template <class Slot>
struct mailbox {
  std::mutex mutex;
  std::deque<Slot*> queue;

  /// Takes `slot` out of the queue; false when a receiver has already taken it.
  bool withdraw(Slot* slot) {
    std::lock_guard lock(mutex);
    auto it = std::find(queue.begin(), queue.end(), slot);
    if (it == queue.end()) return false;
    queue.erase(it);
    return true;
  }
};

/// Wakes a rank when something it may wait for happened (a send to it was posted, or one of
/// its sends was consumed). A sequence number prevents lost wake-ups.
struct doorbell {
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<std::uint64_t> sequence{0};
  std::atomic<int> sleepers{0};

  void ring() {
    sequence.fetch_add(1);
    if (sleepers.load() > 0) {
      std::lock_guard lock(mutex); // orders the notify after a sleeper's check
      cv.notify_all();
    }
  }

  /// Polls `done()` (`spins` times back to back first, for ranks that own a core), then sleeps
  /// between rings. True once `done()` holds; false when `when` passes first. Sleeps are
  /// capped at 20 ms so an abort flag is seen even without a ring.
  template <class Done>
  bool wait(Done&& done, deadline when, const std::atomic<bool>& aborted, int spins) {
    for (int spin = 0; spin < spins; ++spin) {
      if (done()) return true;
      if ((spin & 63) == 63) {
        // A near deadline (shaped<> waits for a delivery time) must not cost the whole spin.
        if (clock::now() >= when) return done();
        std::this_thread::yield();
      }
    }
    for (;;) {
      const auto seen = sequence.load();
      if (done()) return true;
      const auto now = clock::now();
      if (now >= when) return false;
      std::unique_lock lock(mutex);
      sleepers.fetch_add(1);
      if (sequence.load() == seen && !aborted.load())
        cv.wait_until(lock, std::min(when, now + std::chrono::milliseconds(20)));
      sleepers.fetch_sub(1);
    }
  }
};

/// What every rank of an in-process team shares: its size and timeout, the mailbox of each
/// ordered pair of ranks, each rank's doorbell and the abort flag. A transport's shared state
/// derives from it and adds its own.
template <class Slot>
struct team_state {
  team_state(int n, std::chrono::milliseconds t)
      : nranks(n), timeout(t), boxes(pairs(n)), bells(n) {}
  static std::size_t pairs(int n) { return static_cast<std::size_t>(n) * n; }

  int nranks;
  std::chrono::milliseconds timeout;
  std::vector<mailbox<Slot>> boxes; // [src * nranks + dst]
  std::vector<doorbell> bells;
  std::atomic<bool> aborted{false};

  std::size_t pair(int src, int dst) const {
    return static_cast<std::size_t>(src) * static_cast<std::size_t>(nranks) +
           static_cast<std::size_t>(dst);
  }
  mailbox<Slot>& box(int src, int dst) { return boxes[pair(src, dst)]; }

  /// Throws `invalid_argument` (on `rank`) unless `peer` is a rank of the team; `call` names
  /// the entry point.
  void check_peer(int peer, const char* call, int rank) const {
    if (peer < 0 || peer >= nranks)
      throw invalid_argument(std::string(call) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(nranks) + ")",
                             rank);
  }
  /// Throws `aborted_error` once a rank has aborted the team.
  void throw_if_aborted(int rank, int peer) const {
    if (aborted.load(std::memory_order_relaxed))
      throw aborted_error("operation aborted because another rank failed", rank, peer);
  }
  /// Makes every pending and future wait of every rank throw `aborted_error`.
  void abort() noexcept {
    aborted.store(true);
    for (auto& b : bells) b.ring();
  }
  /// Gives a posted send back to its `sender` in `final_state` (see `posted_send`).
  void release(Slot* slot, int final_state, int sender) {
    slot->state.store(final_state, std::memory_order_release);
    bells[sender].ring();
  }
};

/// What a request of an in-process rendezvous knows about its transfer; each transport's
/// request derives from it and adds how it holds its posted send (see `posted_send`).
class rendezvous_request {
public:
  bool done() const noexcept { return done_; }

protected:
  enum class kind : unsigned char { none, send, recv, consume };

  /// Describes a pending transfer with `peer`.
  void start(kind k, int peer, int tag, std::size_t bytes) noexcept {
    kind_ = k;
    peer_ = peer;
    tag_ = tag;
    bytes_ = bytes;
    done_ = false;
  }
  bool is_send() const noexcept { return kind_ == kind::send; }

  /// Completes a send once its slot's `state` reached 2 or more (`slot_state`); throws when the
  /// receiver expected another size. False while the receiver has not finished with it.
  bool finish_send(int slot_state, int rank) {
    if (slot_state < 2) return false;
    done_ = true;
    if (slot_state == 3)
      throw transport_error("send of " + std::to_string(bytes_) +
                                " bytes did not match the receiver's size",
                            rank, peer_);
    return true;
  }
  /// Completes a receive with the send it matched (`slot`, taken out of its mailbox). When
  /// the sizes differ, fails both: gives the slot back to its sender in state 3 and throws.
  template <class Slot>
  void accept(Slot* slot, team_state<Slot>& team, int rank) {
    done_ = true;
    if (slot->bytes == bytes_) return;
    const auto sent = slot->bytes;
    team.release(slot, 3, peer_);
    throw size_mismatch(sent, rank);
  }
  /// The error of a receive that matched a send of `sent` bytes (another size).
  transport_error size_mismatch(std::size_t sent, int rank) const {
    return transport_error("receive of " + std::to_string(bytes_) + " bytes (tag " +
                               std::to_string(tag_) + ") matched a send of " +
                               std::to_string(sent) + " bytes",
                           rank, peer_);
  }
  /// The error of a wait that ran out of time (`after`: the team's timeout).
  timeout_error timed_out(std::chrono::milliseconds after, int rank) const {
    return timeout_error(std::string(is_send() ? "send" : "receive") + " of " +
                             std::to_string(bytes_) + " bytes (tag " + std::to_string(tag_) +
                             ") timed out after " + std::to_string(after.count()) + " ms",
                         rank, peer_);
  }

  kind kind_ = kind::none;
  int peer_ = -1;
  int tag_ = 0;
  void* dst_ = nullptr; ///< a receive's destination
  std::size_t bytes_ = 0;
  consumer use_{}; ///< a consuming receive's consumer
  bool done_ = true;
};

/// A barrier of a team's ranks with a deadline and an abort check (std::barrier has
/// neither). `wake` lets waiting ranks see an abort at once.
struct team_barrier {
  std::mutex mutex;
  std::condition_variable cv;
  int count = 0;
  std::uint64_t generation = 0;

  /// Blocks `rank` until all `nranks` ranks arrived; throws `timeout_error` after `timeout`
  /// and `aborted_error` once `aborted` is set.
  void wait(int rank, int nranks, std::chrono::milliseconds timeout,
            const std::atomic<bool>& aborted) {
    std::unique_lock lock(mutex);
    const auto gen = generation;
    if (++count == nranks) {
      count = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const auto when = clock::now() + timeout;
    while (generation == gen) {
      if (aborted.load()) throw aborted_error("barrier aborted because another rank failed", rank);
      if (cv.wait_until(lock, when) == std::cv_status::timeout && generation == gen)
        throw timeout_error("barrier timed out after " + std::to_string(timeout.count()) + " ms",
                            rank);
    }
  }
  void wake() {
    std::lock_guard lock(mutex);
    cv.notify_all();
  }
};

/// Throws `invalid_argument` for a team of fewer than one rank or a timeout that is not
/// positive; `team` names the team's class in the message.
inline void check_team_arguments(std::string_view team, int nranks,
                                 std::chrono::milliseconds timeout) {
  if (nranks < 1)
    throw invalid_argument(std::string(team) + ": nranks must be >= 1, got " +
                           std::to_string(nranks));
  if (timeout.count() <= 0)
    throw invalid_argument(std::string(team) + ": timeout must be positive");
}

/// What the ranks of a team's run failed with. A rank's own failure is its root cause; the
/// `aborted_error` it causes on the other ranks is not.
class team_failures {
public:
  explicit team_failures(int nranks) : errors_(nranks), was_abort_(nranks, 0) {}

  /// Calls `f()`; if it throws, keeps the exception as `rank`'s failure and calls `abort()`
  /// so that the other ranks stop waiting for this one.
  template <class F, class Abort>
  void guard(int rank, F&& f, Abort&& abort) {
    try {
      f();
    } catch (const aborted_error&) {
      keep_current(rank, true);
      abort();
    } catch (...) {
      keep_current(rank, false);
      abort();
    }
  }
  /// Keeps the exception being handled as `rank`'s failure, unless it already has one.
  void keep_current(int rank, bool is_abort) noexcept {
    if (errors_[rank]) return;
    errors_[rank] = std::current_exception();
    was_abort_[rank] = is_abort ? 1 : 0;
  }
  /// Rethrows the first rank's root-cause failure, else the first `aborted_error`; returns
  /// when no rank failed.
  void rethrow() const {
    const int n = static_cast<int>(errors_.size());
    for (int r = 0; r < n; ++r)
      if (errors_[r] && !was_abort_[r]) std::rethrow_exception(errors_[r]);
    for (int r = 0; r < n; ++r)
      if (errors_[r]) std::rethrow_exception(errors_[r]);
  }

private:
  std::vector<std::exception_ptr> errors_;
  std::vector<char> was_abort_; // written by each rank's own thread only
};

/// Calls `body(rank)` for every rank of a team of `nranks`: rank 0 on this thread, each other
/// rank on a thread of its own. Returns once every rank's call has.
template <class Body>
void run_ranks_on_threads(int nranks, Body& body) {
  std::vector<std::jthread> others;
  others.reserve(nranks - 1);
  for (int r = 1; r < nranks; ++r) others.emplace_back(body, r);
  body(0);
}

} // namespace tcoll::detail
