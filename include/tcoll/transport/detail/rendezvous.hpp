#pragma once
/// \file
/// Pieces of the in-process rendezvous shared by the thread and device_team transports:
/// per-pair mailboxes of posted sends, and a per-rank doorbell that a waiting rank sleeps on
/// (with a deadline) until something it may wait for happens.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "../../core/concepts.hpp"
#include "../../core/error.hpp"

namespace tcoll::detail {

/// Posted sends from one rank to another, matched by the receiver in posting order.
template <class Slot>
struct mailbox {
  std::mutex mutex;
  std::deque<Slot*> queue;
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

/// The error of a rendezvous wait that ran out of time.
inline timeout_error rendezvous_timeout(bool is_send, std::size_t bytes, int tag,
                                        std::chrono::milliseconds timeout, int rank, int peer) {
  return timeout_error(std::string(is_send ? "send" : "receive") + " of " + std::to_string(bytes) +
                           " bytes (tag " + std::to_string(tag) + ") timed out after " +
                           std::to_string(timeout.count()) + " ms",
                       rank, peer);
}

} // namespace tcoll::detail
