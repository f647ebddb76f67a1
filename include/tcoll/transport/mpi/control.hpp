#pragma once
/// \file
/// Retirement of the control communicators that carry `mpi_transport`'s failure
/// announcements: freed only once every rank has agreed that none saw a failure on them.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/concepts.hpp"

namespace tcoll {
namespace detail::mpi {

/// The control communicator of a destroyed `mpi_transport` while its ranks agree (a
/// non-blocking MPI_MAX over "this rank saw a failure") whether it may be freed.
struct control_retirement {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request agreement = MPI_REQUEST_NULL;
  int mine = 0; ///< this rank saw a failure on the transport
  int any = 0;  ///< some rank did
  deadline until{};
};

/// Control communicators that exist, and those being retired. Process-wide.
struct control_registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<control_retirement>> retiring;
  std::atomic<long> live{0};
  int finalize_keyval = MPI_KEYVAL_INVALID;
};
inline control_registry& controls() {
  static control_registry r;
  return r;
}

/// Finishes the agreements that have finished: frees a control communicator on which no
/// rank saw a failure, and keeps one where some rank did (its announcements may still be on
/// the way, and a message that arrives for a freed communicator lands in the next one MPI
/// creates with the same context id), as it keeps one whose agreement failed. With `wait`,
/// waits for each until its deadline first (MPI_Finalize: no request may stay pending).
inline void reap_controls(bool wait) noexcept {
  auto& r = controls();
  std::lock_guard lock(r.mutex);
  for (auto it = r.retiring.begin(); it != r.retiring.end();) {
    control_retirement& c = **it;
    int done = 0;
    bool failed = false;
    for (;;) {
      if (MPI_Test(&c.agreement, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) failed = true;
      if (done || failed || !wait || clock::now() >= c.until) break;
      std::this_thread::yield();
    }
    if (!done && !failed) {
      ++it;
      continue;
    }
    if (done && c.any == 0 && MPI_Comm_free(&c.comm) == MPI_SUCCESS)
      r.live.fetch_sub(1, std::memory_order_relaxed);
    it = r.retiring.erase(it);
  }
}

/// MPI_Finalize deletes the attributes of MPI_COMM_SELF first, while MPI still works
/// (MPI-3.1 8.7.1): the last chance to finish the agreements.
inline int reap_controls_at_finalize(MPI_Comm, int, void*, void*) {
  reap_controls(true);
  return MPI_SUCCESS;
}

/// Hands a destroyed transport's control communicator to the retirement agreement.
/// `failed`: this rank saw a failure on the transport. Keeps the communicator where MPI
/// refuses a step (it is then left to MPI_Finalize, as before).
inline void retire_control(MPI_Comm comm, bool failed, std::chrono::milliseconds timeout) noexcept {
  auto& r = controls();
  auto c = std::make_unique<control_retirement>();
  c->comm = comm;
  c->mine = failed ? 1 : 0;
  c->until = clock::now() + timeout;
  {
    std::lock_guard lock(r.mutex);
    if (r.finalize_keyval == MPI_KEYVAL_INVALID) {
      if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &reap_controls_at_finalize,
                                 &r.finalize_keyval, nullptr) != MPI_SUCCESS ||
          MPI_Comm_set_attr(MPI_COMM_SELF, r.finalize_keyval, nullptr) != MPI_SUCCESS)
        return;
    }
    if (MPI_Iallreduce(&c->mine, &c->any, 1, MPI_INT, MPI_MAX, comm, &c->agreement) != MPI_SUCCESS)
      return;
    try {
      r.retiring.push_back(std::move(c));
    } catch (...) { // out of memory: wait for this one here
      MPI_Wait(&c->agreement, MPI_STATUS_IGNORE);
      return;
    }
  }
  reap_controls(false);
}

} // namespace detail::mpi

/// Control communicators of `mpi_transport`s that exist in this process: one per live
/// transport, plus those of destroyed transports whose ranks have not all agreed yet, plus
/// those kept because a rank saw a failure on them (see `detail::mpi::reap_controls`).
inline long live_control_communicators() noexcept {
  return detail::mpi::controls().live.load(std::memory_order_relaxed);
}

} // namespace tcoll
