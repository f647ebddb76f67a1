#pragma once
/// \file
/// The execution layer's public interface for integrations (the MPI preload, the PyTorch
/// backend) and for code that builds its own collectives: run a collective body here or
/// queue it on the communicator's engine with its message spaces drawn at once, the
/// collectives in given message spaces, and the engine's state. Everything the
/// integrations need is here, so none reaches into `tcoll::detail` (DESIGN.md).
///
///   tcoll::queue_collective(comm, [&](const auto& tags) {
///     tcoll::allreduce_in(comm, tags, grad, grad, n, tcoll::sum_op{},
///                         tcoll::default_algorithm_t<Comm>{}, red);
///   }, [](std::exception_ptr error) { /* on the engine thread, once it is over */ });
#include <chrono>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "../collectives.hpp"
#include "../communicator.hpp"
#include "engine.hpp"

namespace tcoll {

/// The message spaces of one collective on communicator `C`: one `int` on a transport, one
/// per level on a composed machine. Collective bodies receive them.
template <class C>
using collective_tags = detail::collective_tags_t<C>;

/// The algorithm-knob type of an allreduce on `C` when the caller names none (`automatic`
/// on a transport, `hierarchical_options<ring>` on a hierarchical machine).
template <class C>
using default_algorithm_t = detail::default_algorithm_t<C>;

/// Runs `body(tags)` here, now, as one collective on `c`: draws its message spaces (in the
/// order every rank starts collectives; throws the cause if `c` is broken) and runs the
/// body; an exception from it breaks every transport of `c` and is rethrown.
template <communicator C, class Body>
void run_collective(C& c, Body&& body) {
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] { body(tags); });
}

/// Queues `body(tags)` on the engine of `c` (its `engine_transport()`'s on a composed
/// machine): the message spaces are drawn now, so queued and run collectives keep the
/// order they were started in; the body runs on the engine thread under the same failure
/// rule as `run_collective`. `done(error)` runs on the engine thread once it is over, in
/// every outcome (succeeded, failed, skipped because `c` broke or went away): that is how
/// the caller learns of it (the non-blocking entry points hand out a `request` instead).
/// Throws without queueing if `c` is broken.
template <communicator C, class Body, class Done>
void queue_collective(C& c, Body body, Done done) {
  (void)detail::submit_collective(c, std::move(body), std::move(done));
}

/// Whether nothing is queued or running on the engine of `c`; true when it has none. Starts
/// no engine. A collective run here while this holds cannot overtake a queued one.
template <communicator C>
bool engine_is_idle(C& c) {
  return detail::engine_idle(c);
}

/// Whether the calling thread is the engine thread of `c` (a completion callback runs
/// there).
template <communicator C>
bool called_from_engine(C& c) {
  return detail::on_engine_thread(c);
}

/// From a completion callback (the engine thread of `c`): runs every collective queued on
/// `c`'s engine here, in queue order, so a call the callback makes next does not wait for
/// its own thread. Does nothing elsewhere; returns whether it ran them.
template <communicator C>
bool run_queued_here(C& c) {
  if (!detail::on_engine_thread(c)) return false;
  detail::started_engine(c)->run_queued_here();
  return true;
}

/// Waits until every collective queued on the engine attached to `context` (a transport's
/// `collectives()`) has finished, giving up after `no_progress` without one finishing
/// (MPI_Comm_free lets pending operations complete). True when idle or without an engine.
inline bool wait_engine_idle(collective_context& context, std::chrono::milliseconds no_progress) {
  auto* e = dynamic_cast<detail::engine*>(context.attached());
  return !e || e->wait_idle(no_progress);
}

// The collectives in message spaces a body received, on a transport or a composed machine;
// the caller has checked the arguments (`check_allreduce_arguments`, or the entry point's
// rules). These are what the entry points run after their checks.

template <communicator C, class T, class Op, class Algo, reducer R>
void allreduce_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                  std::size_t count, const Op& op, const Algo& algo, R& red) {
  detail::allreduce_on(c, tags, sendbuf, recvbuf, count, op, algo, red);
}
template <communicator C, class T, class Op, block_algorithm Algo, reducer R>
void reduce_scatter_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                       std::size_t count, const Op& op, const Algo& algo, R& red) {
  detail::reduce_scatter_on(c, tags, sendbuf, recvbuf, count, op, algo, red);
}
template <communicator C, class T, block_algorithm Algo, reducer R>
void allgather_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                  std::size_t count, const Algo& algo, R& red) {
  detail::allgather_on(c, tags, sendbuf, recvbuf, count, algo, red);
}
/// `reduce_scatterv` in `tags`: `offsets[q]` is where block q starts in `sendbuf` (the
/// blocks one after another, `counts[q]` elements each).
template <communicator C, class T, class Op, reducer R>
void reduce_scatterv_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                        std::span<const std::size_t> counts, std::span<const std::size_t> offsets,
                        const Op& op, const ring& algo, R& red) {
  detail::reduce_scatterv_on(c, tags, sendbuf, recvbuf, counts, offsets, op, algo, red);
}
/// `allgatherv` in `tags`: `extent` is the end of the last block of `recvbuf` (elements).
template <communicator C, class T, reducer R>
void allgatherv_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                   std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                   std::size_t extent, const ring& algo, R& red) {
  detail::allgatherv_on(c, tags, sendbuf, recvbuf, counts, displs, extent, algo, red);
}
template <communicator C, class T, broadcast_algorithm Algo, reducer R>
void broadcast_in(C& c, const collective_tags<C>& tags, T* buffer, std::size_t count, int root,
                  const Algo& algo, R& red) {
  detail::broadcast_on(c, tags, buffer, count, root, algo, red);
}
template <communicator C, class T, class Op, reduce_algorithm Algo, reducer R>
void reduce_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
               std::size_t count, int root, const Op& op, const Algo& algo, R& red) {
  detail::reduce_on(c, tags, sendbuf, recvbuf, count, root, op, algo, red);
}
/// `barrier` in `tags` (its tokens from `red`, see `barrier`).
template <communicator C, barrier_algorithm Algo, reducer R>
void barrier_in(C& c, const collective_tags<C>& tags, const Algo& algo, R& red) {
  detail::barrier_on(c, tags, algo, red);
}
/// `alltoall` in `tags` (`count` elements per pair; `in_place` when sendbuf == recvbuf).
template <communicator C, class T, alltoall_algorithm A, reducer R>
void alltoall_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                 std::size_t count, bool in_place, const A& algo, R& red) {
  detail::alltoall_on(c, tags, sendbuf, recvbuf, count, in_place, algo, red);
}

/// `alltoallv` in `tags` (`in_place` as `check_alltoallv_arguments` says).
template <communicator C, class T, reducer R>
void alltoallv_in(C& c, const collective_tags<C>& tags, const T* sendbuf,
                  std::span<const std::size_t> send_counts,
                  std::span<const std::size_t> send_displs, T* recvbuf,
                  std::span<const std::size_t> recv_counts,
                  std::span<const std::size_t> recv_displs, bool in_place,
                  const pairwise_exchange& algo, R& red) {
  detail::alltoallv_on(c, tags, sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                       recv_displs, in_place, algo, red);
}
/// `gather` in `tags` (`count` elements per rank); `blocks` are the root's, from
/// `check_gather_arguments` (empty elsewhere).
template <communicator C, class T, reducer R>
void gather_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
               std::size_t count, int root, const std::vector<root_block>& blocks,
               const linear& algo, R& red) {
  detail::gather_on(c, tags, sendbuf, recvbuf, count, root, blocks, algo, red);
}
/// `scatter` in `tags` (`count` elements per rank); `blocks` are the root's, from
/// `check_scatter_arguments` (empty elsewhere).
template <communicator C, class T, reducer R>
void scatter_in(C& c, const collective_tags<C>& tags, const T* sendbuf, T* recvbuf,
                std::size_t count, int root, const std::vector<root_block>& blocks,
                const linear& algo, R& red) {
  detail::scatter_on(c, tags, sendbuf, recvbuf, count, root, blocks, algo, red);
}

/// `gatherv` in `tags`; `blocks` are the root's, from `check_gatherv_arguments` (empty
/// elsewhere, where `recv_counts` and `recv_displs` may be empty too).
template <communicator C, class T, reducer R>
void gatherv_in(C& c, const collective_tags<C>& tags, const T* sendbuf, std::size_t send_count,
                T* recvbuf, std::span<const std::size_t> recv_counts,
                std::span<const std::size_t> recv_displs, int root,
                const std::vector<root_block>& blocks, const linear& algo, R& red) {
  detail::gatherv_on(c, tags, sendbuf, send_count, recvbuf, recv_counts, recv_displs, root, blocks,
                     algo, red);
}
/// `scatterv` in `tags`; `blocks` as for `gatherv_in` (`check_scatterv_arguments`).
template <communicator C, class T, reducer R>
void scatterv_in(C& c, const collective_tags<C>& tags, const T* sendbuf,
                 std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 T* recvbuf, std::size_t recv_count, int root,
                 const std::vector<root_block>& blocks, const linear& algo, R& red) {
  detail::scatterv_on(c, tags, sendbuf, send_counts, send_displs, recvbuf, recv_count, root, blocks,
                      algo, red);
}

/// The argument checks of `allreduce` (they name the argument and `rank`).
template <class T>
void check_allreduce_arguments(const T* sendbuf, T* recvbuf, std::size_t count, int rank) {
  detail::check_allreduce_args(sendbuf, recvbuf, count, rank);
}
/// The argument checks of `alltoallv` on rank `rank` of `size` (they name the argument and
/// `rank`); returns whether the call is in place.
template <class T>
bool check_alltoallv_arguments(const T* sendbuf, std::span<const std::size_t> send_counts,
                               std::span<const std::size_t> send_displs, T* recvbuf,
                               std::span<const std::size_t> recv_counts,
                               std::span<const std::size_t> recv_displs, int rank, int size) {
  return detail::check_alltoallv_args(sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                                      recv_displs, rank, size);
}
/// The argument checks of `reduce_scatterv` on rank `rank` of `size` (they name the argument
/// and `rank`); returns where each block begins in `sendbuf`, for `reduce_scatterv_in`.
template <class T>
std::vector<std::size_t> check_reduce_scatterv_arguments(const T* sendbuf, T* recvbuf,
                                                         std::span<const std::size_t> recv_counts,
                                                         int rank, int size) {
  return detail::check_reduce_scatterv_args(sendbuf, recvbuf, recv_counts, rank, size);
}
/// The argument checks of `allgatherv` on rank `rank` of `size` (they name the argument and
/// `rank`); returns the end of the last block of `recvbuf`, for `allgatherv_in`.
template <class T>
std::size_t check_allgatherv_arguments(const T* sendbuf, std::size_t send_count, T* recvbuf,
                                       std::span<const std::size_t> recv_counts,
                                       std::span<const std::size_t> recv_displs, int rank,
                                       int size) {
  return detail::check_allgatherv_args(sendbuf, send_count, recvbuf, recv_counts, recv_displs, rank,
                                       size);
}
/// The argument checks of `gather` on rank `rank` of `size` (they name the argument and
/// `rank`); returns the root's blocks for `gather_in` (empty elsewhere).
template <class T>
std::vector<root_block> check_gather_arguments(const T* sendbuf, T* recvbuf, std::size_t count,
                                               int root, int rank, int size) {
  return detail::check_gather_args(sendbuf, recvbuf, count, root, rank, size);
}
/// The argument checks of `gatherv`, as `check_gather_arguments`.
template <class T>
std::vector<root_block>
check_gatherv_arguments(const T* sendbuf, std::size_t send_count, T* recvbuf,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs, int root, int rank, int size) {
  return detail::check_gatherv_args(sendbuf, send_count, recvbuf, recv_counts, recv_displs, root,
                                    rank, size);
}
/// The argument checks of `scatterv`, as `check_gather_arguments`.
template <class T>
std::vector<root_block>
check_scatterv_arguments(const T* sendbuf, std::span<const std::size_t> send_counts,
                         std::span<const std::size_t> send_displs, T* recvbuf,
                         std::size_t recv_count, int root, int rank, int size) {
  return detail::check_scatterv_args(sendbuf, send_counts, send_displs, recvbuf, recv_count, root,
                                     rank, size);
}
/// The argument checks of `scatter`, as `check_gather_arguments`.
template <class T>
std::vector<root_block> check_scatter_arguments(const T* sendbuf, T* recvbuf, std::size_t count,
                                                int root, int rank, int size) {
  return detail::check_scatter_args(sendbuf, recvbuf, count, root, rank, size);
}

} // namespace tcoll
