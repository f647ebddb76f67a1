#pragma once
/// \file
/// The loops of `mpi_transport::native_allreduce`: the vendor `MPI_Allreduce` called as it
/// is, and `MPI_Iallreduce` on a call-owned copy polled against a timeout and an abort check.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>

#include "../../core/concepts.hpp"
#include "../../detail/mpi_error.hpp"
#include "datatypes.hpp"

namespace tcoll::detail::mpi {

/// `MPI_Allreduce` of `count` elements (MPI_IN_PLACE when `send == recv`), as several
/// allreduces of at most INT_MAX elements where `count` is larger (the operation is
/// element-wise). Blocking: no timeout, no failure announcements.
template <class T>
void blocking_allreduce(const T* send, T* recv, std::size_t count, datatype_and_op with,
                        MPI_Comm comm, int rank) {
  const bool in_place = static_cast<const void*>(send) == static_cast<void*>(recv);
  for (std::size_t off = 0; off < count; off += INT_MAX) {
    const int n = static_cast<int>(std::min<std::size_t>(INT_MAX, count - off));
    const void* s = in_place ? MPI_IN_PLACE : static_cast<const void*>(send + off);
    check(MPI_Allreduce(s, recv + off, n, with.type, with.op, comm), "MPI_Allreduce", rank);
  }
}

/// How a `polled_allreduce` ended.
enum class polled_end { completed, aborted, timed_out };

/// `MPI_Iallreduce` of `count` elements on a buffer owned by the call (pieces of at most
/// INT_MAX elements), polled against `timeout` and the peers' failure announcements:
/// every `polls_per_yield` unfinished polls it calls `aborted()`, which checks the
/// announcements and says whether the transport has aborted. A collective request cannot
/// be cancelled: on time-out or abort it is left to MPI together with its buffer (leaked,
/// so a late completion never writes freed or user memory), `broken` is set and the end is
/// returned for the caller to throw.
template <class T, class Aborted>
[[nodiscard]] polled_end polled_allreduce(const T* send, T* recv, std::size_t count,
                                          datatype_and_op with, MPI_Comm comm, int rank,
                                          std::chrono::milliseconds timeout, int polls_per_yield,
                                          std::atomic<bool>& broken, Aborted&& aborted) {
  constexpr std::size_t step = INT_MAX;
  const std::size_t chunk = std::min(step, count);
  std::unique_ptr<T[]> work(new T[chunk]);
  for (std::size_t off = 0; off < count; off += step) {
    const std::size_t n = std::min(step, count - off);
    std::memcpy(static_cast<void*>(work.get()), send + off, n * sizeof(T));
    MPI_Request q = MPI_REQUEST_NULL;
    check(
        MPI_Iallreduce(MPI_IN_PLACE, work.get(), static_cast<int>(n), with.type, with.op, comm, &q),
        "MPI_Iallreduce", rank);
    const auto started = clock::now();
    const deadline when = started + timeout;
    for (int polls = 1;; ++polls) {
      int flag = 0;
      check(MPI_Test(&q, &flag, MPI_STATUS_IGNORE), "MPI_Test(MPI_Iallreduce)", rank);
      if (flag) break;
      if (polls % polls_per_yield != 0) continue;
      const bool was_aborted = aborted();
      const auto now = clock::now();
      if (was_aborted || now >= when) {
        (void)work.release(); // MPI may still write it
        broken.store(true);
        return was_aborted ? polled_end::aborted : polled_end::timed_out;
      }
      // Spin like MPI's own blocking loop for the first millisecond (libnbc progresses
      // only inside MPI_Test; a yield under load costs a time slice per round), then let
      // an oversubscribed peer run.
      if (now - started > std::chrono::milliseconds(1)) std::this_thread::yield();
    }
    std::memcpy(static_cast<void*>(recv + off), work.get(), n * sizeof(T));
  }
  return polled_end::completed;
}

} // namespace tcoll::detail::mpi
