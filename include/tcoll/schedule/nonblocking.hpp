#pragma once
/// \file
/// Non-blocking collectives: `iallreduce`, `ireduce_scatter`, `ireduce_scatterv`,
/// `iallgather`, `iallgatherv`, `ibroadcast`, `ireduce`, `ialltoall`, `ialltoallv`, `igather`,
/// `igatherv`, `iscatter`, `iscatterv`, `ibarrier` (MPI's `MPI_I*`).
/// Each checks its arguments at once (throwing like the blocking call), draws the next
/// message space of the transport, queues the collective on the transport's engine
/// (`engine.hpp`) and returns a `request`. The checked call is `detail::checked_*`, which
/// the prepared forms (`prepare_*`, prepared.hpp) bind once and run many times. Every algorithm
/// works (flat, `multi_ring`, `automatic`, `passthrough`) on every transport, and each on every
/// communicator (hierarchical too). Rules: every rank queues in the same order (MPI's), the buffers
/// stay valid and untouched until the request completes, and the transport object outlives the
/// request. The counts and displacements of the v forms are copied at the start (MPI asks
/// that they stay valid; here they need not). See `engine.hpp` for the thread-safety contract.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "../collectives.hpp"
#include "../communicator.hpp"
#include "engine.hpp"

namespace tcoll {

namespace detail {
/// A copy of a span of counts or displacements, owned by a queued collective.
using owned_counts = std::vector<std::size_t>;

inline owned_counts own(std::span<const std::size_t> v) {
  return owned_counts(v.begin(), v.end());
}

// The checked calls: each checks its arguments (throwing like the blocking call), copies what
// must outlive the call (counts, displacements, the root's blocks) and returns the body that
// runs the collective in the message spaces it is given, `body(tags)`. The non-blocking forms
// queue it once; the prepared forms keep it and run it again at every start.

template <communicator C, class T, class Op, class Algo, reducer R>
auto checked_allreduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                       const Algo& algo, R red) {
  check_support<R, Op, T>();
  check_allreduce_args(sendbuf, recvbuf, count, comm.rank());
  return [&comm, sendbuf, recvbuf, count, op, algo, red](const auto& tags) mutable {
    allreduce_on(comm, tags, sendbuf, recvbuf, count, op, algo, red);
  };
}

template <communicator C, class T, class Op, block_algorithm Algo, reducer R>
auto checked_reduce_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                            const Algo& algo, R red) {
  check_support<R, Op, T>();
  check_order<Op, ring>();
  check_reduce_scatter_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, count, op, algo, red](const auto& tags) mutable {
    reduce_scatter_on(comm, tags, sendbuf, recvbuf, count, op, algo, red);
  };
}

template <communicator C, class T, block_algorithm Algo, reducer R>
auto checked_allgather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, const Algo& algo,
                       R red) {
  check_allgather_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, count, algo, red](const auto& tags) mutable {
    allgather_on(comm, tags, sendbuf, recvbuf, count, algo, red);
  };
}

template <communicator C, class T, class Op, reducer R>
auto checked_reduce_scatterv(C& comm, const T* sendbuf, T* recvbuf,
                             std::span<const std::size_t> recv_counts, const Op& op,
                             const ring& algo, R red) {
  check_support<R, Op, T>();
  check_order<Op, ring>();
  owned_counts offsets =
      check_reduce_scatterv_args(sendbuf, recvbuf, recv_counts, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, counts = own(recv_counts), offsets = std::move(offsets), op,
          algo, red](const auto& tags) mutable {
    reduce_scatterv_on(comm, tags, sendbuf, recvbuf, std::span<const std::size_t>(counts),
                       std::span<const std::size_t>(offsets), op, algo, red);
  };
}

template <communicator C, class T, reducer R>
auto checked_allgatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs, const ring& algo, R red) {
  const std::size_t extent = check_allgatherv_args(sendbuf, send_count, recvbuf, recv_counts,
                                                   recv_displs, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, extent, algo, red, counts = own(recv_counts),
          displs = own(recv_displs)](const auto& tags) mutable {
    allgatherv_on(comm, tags, sendbuf, recvbuf, std::span<const std::size_t>(counts),
                  std::span<const std::size_t>(displs), extent, algo, red);
  };
}

template <communicator C, class T, alltoall_algorithm A, reducer R>
auto checked_alltoall(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, const A& algo,
                      R red) {
  const bool in_place = check_alltoall_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, count, in_place, algo, red](const auto& tags) mutable {
    alltoall_on(comm, tags, sendbuf, recvbuf, count, in_place, algo, red);
  };
}

template <communicator C, class T, reducer R>
auto checked_alltoallv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
                       std::span<const std::size_t> send_displs, T* recvbuf,
                       std::span<const std::size_t> recv_counts,
                       std::span<const std::size_t> recv_displs, const pairwise_exchange& algo,
                       R red) {
  const bool in_place = check_alltoallv_args(sendbuf, send_counts, send_displs, recvbuf,
                                             recv_counts, recv_displs, comm.rank(), comm.size());
  return
      [&comm, sendbuf, recvbuf, in_place, algo, red, sc = own(send_counts), sd = own(send_displs),
       rc = own(recv_counts), rd = own(recv_displs)](const auto& tags) mutable {
        alltoallv_on(comm, tags, sendbuf, std::span<const std::size_t>(sc),
                     std::span<const std::size_t>(sd), recvbuf, std::span<const std::size_t>(rc),
                     std::span<const std::size_t>(rd), in_place, algo, red);
      };
}

template <communicator C, class T, reducer R>
auto checked_gather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                    const linear& algo, R red) {
  std::vector<root_block> blocks =
      check_gather_args(sendbuf, recvbuf, count, root, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, count, root, algo, red,
          blocks = std::move(blocks)](const auto& tags) mutable {
    gather_on(comm, tags, sendbuf, recvbuf, count, root, blocks, algo, red);
  };
}

template <communicator C, class T, reducer R>
auto checked_gatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs, int root, const linear& algo,
                     R red) {
  std::vector<root_block> blocks = check_gatherv_args(sendbuf, send_count, recvbuf, recv_counts,
                                                      recv_displs, root, comm.rank(), comm.size());
  return [&comm, sendbuf, send_count, recvbuf, root, algo, red, blocks = std::move(blocks),
          counts = own(recv_counts), displs = own(recv_displs)](const auto& tags) mutable {
    gatherv_on(comm, tags, sendbuf, send_count, recvbuf, std::span<const std::size_t>(counts),
               std::span<const std::size_t>(displs), root, blocks, algo, red);
  };
}

template <communicator C, class T, reducer R>
auto checked_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                     const linear& algo, R red) {
  std::vector<root_block> blocks =
      check_scatter_args(sendbuf, recvbuf, count, root, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, count, root, algo, red,
          blocks = std::move(blocks)](const auto& tags) mutable {
    scatter_on(comm, tags, sendbuf, recvbuf, count, root, blocks, algo, red);
  };
}

template <communicator C, class T, reducer R>
auto checked_scatterv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
                      std::span<const std::size_t> send_displs, T* recvbuf, std::size_t recv_count,
                      int root, const linear& algo, R red) {
  std::vector<root_block> blocks = check_scatterv_args(sendbuf, send_counts, send_displs, recvbuf,
                                                       recv_count, root, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, recv_count, root, algo, red, blocks = std::move(blocks),
          counts = own(send_counts), displs = own(send_displs)](const auto& tags) mutable {
    scatterv_on(comm, tags, sendbuf, std::span<const std::size_t>(counts),
                std::span<const std::size_t>(displs), recvbuf, recv_count, root, blocks, algo, red);
  };
}

template <communicator C, class T, broadcast_algorithm Algo, reducer R>
auto checked_broadcast(C& comm, T* buffer, std::size_t count, int root, const Algo& algo, R red) {
  check_broadcast_args(buffer, count, root, comm.rank(), comm.size());
  return [&comm, buffer, count, root, algo, red](const auto& tags) mutable {
    broadcast_on(comm, tags, buffer, count, root, algo, red);
  };
}

template <communicator C, class T, class Op, reduce_algorithm Algo, reducer R>
auto checked_reduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                    const Op& op, const Algo& algo, R red) {
  check_support<R, Op, T>();
  check_reduce_args(sendbuf, recvbuf, count, root, comm.rank(), comm.size());
  return [&comm, sendbuf, recvbuf, count, root, op, algo, red](const auto& tags) mutable {
    reduce_on(comm, tags, sendbuf, recvbuf, count, root, op, algo, red);
  };
}

template <communicator C, barrier_algorithm Algo, reducer R>
auto checked_barrier(C& comm, const Algo& algo, R red) {
  return [&comm, algo, red](const auto& tags) mutable { barrier_on(comm, tags, algo, red); };
}

/// Queues a checked call (`checked_*`) on the engine of `comm`.
template <communicator C, class Body>
request queued(C& comm, Body body) {
  return request(submit_collective(comm, std::move(body)));
}
} // namespace detail

/// Non-blocking `allreduce` (same arguments, same checks) on any communicator: a transport
/// or a composed machine such as `hierarchical<Intra, Inter>` (which runs on its group
/// transport's engine and draws its message spaces on both levels when queued).
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
[[nodiscard]] request iallreduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const Op& op = {}, const Algo& algo = {}, R red = {}) {
  return detail::queued(comm,
                        detail::checked_allreduce(comm, sendbuf, recvbuf, count, op, algo, red));
}

/// Non-blocking in-place allreduce over a span.
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
[[nodiscard]] request iallreduce(C& comm, std::span<T> data, const Op& op = {},
                                 const Algo& algo = {}, R red = {}) {
  return iallreduce(comm, data.data(), data.data(), data.size(), op, algo, red);
}

/// Non-blocking `reduce_scatter` (ring or `in_segment` on a transport) on any communicator.
template <communicator C, class T, class Op = sum_op, block_algorithm Algo = ring,
          reducer R = cpu_reducer>
[[nodiscard]] request ireduce_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                      const Op& op = {}, const Algo& algo = {}, R red = {}) {
  return detail::queued(
      comm, detail::checked_reduce_scatter(comm, sendbuf, recvbuf, count, op, algo, red));
}

/// Non-blocking `allgather` (ring or `in_segment` on a transport) on any communicator.
template <communicator C, class T, block_algorithm Algo = ring, reducer R = cpu_reducer>
[[nodiscard]] request iallgather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const Algo& algo = {}, R red = {}) {
  return detail::queued(comm, detail::checked_allgather(comm, sendbuf, recvbuf, count, algo, red));
}

/// Non-blocking `reduce_scatterv` (ring on a transport) on any communicator.
template <communicator C, class T, class Op = sum_op, reducer R = cpu_reducer>
[[nodiscard]] request ireduce_scatterv(C& comm, const T* sendbuf, T* recvbuf,
                                       std::span<const std::size_t> recv_counts, const Op& op = {},
                                       const ring& algo = {}, R red = {}) {
  return detail::queued(
      comm, detail::checked_reduce_scatterv(comm, sendbuf, recvbuf, recv_counts, op, algo, red));
}

/// Non-blocking `allgatherv` (ring on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iallgatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                                  std::span<const std::size_t> recv_counts,
                                  std::span<const std::size_t> recv_displs, const ring& algo = {},
                                  R red = {}) {
  return detail::queued(comm, detail::checked_allgatherv(comm, sendbuf, send_count, recvbuf,
                                                         recv_counts, recv_displs, algo, red));
}

/// Non-blocking `alltoall` (`alltoall_by_size` by default) on any communicator.
template <communicator C, class T, alltoall_algorithm A = alltoall_by_size, reducer R = cpu_reducer>
[[nodiscard]] request ialltoall(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                const A& algo = {}, R red = {}) {
  return detail::queued(comm, detail::checked_alltoall(comm, sendbuf, recvbuf, count, algo, red));
}

/// Non-blocking `alltoallv` (pairwise exchange on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request
ialltoallv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
           std::span<const std::size_t> send_displs, T* recvbuf,
           std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
           const pairwise_exchange& algo = {}, R red = {}) {
  return detail::queued(comm,
                        detail::checked_alltoallv(comm, sendbuf, send_counts, send_displs, recvbuf,
                                                  recv_counts, recv_displs, algo, red));
}

/// Non-blocking `gather` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request igather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                              const linear& algo = {}, R red = {}) {
  return detail::queued(comm,
                        detail::checked_gather(comm, sendbuf, recvbuf, count, root, algo, red));
}

/// Non-blocking `gatherv` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request igatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                               std::span<const std::size_t> recv_counts,
                               std::span<const std::size_t> recv_displs, int root,
                               const linear& algo = {}, R red = {}) {
  return detail::queued(comm, detail::checked_gatherv(comm, sendbuf, send_count, recvbuf,
                                                      recv_counts, recv_displs, root, algo, red));
}

/// Non-blocking `scatter` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iscatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                               const linear& algo = {}, R red = {}) {
  return detail::queued(comm,
                        detail::checked_scatter(comm, sendbuf, recvbuf, count, root, algo, red));
}

/// Non-blocking `scatterv` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iscatterv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
                                std::span<const std::size_t> send_displs, T* recvbuf,
                                std::size_t recv_count, int root, const linear& algo = {},
                                R red = {}) {
  return detail::queued(comm, detail::checked_scatterv(comm, sendbuf, send_counts, send_displs,
                                                       recvbuf, recv_count, root, algo, red));
}

/// Non-blocking `broadcast` (binomial tree or `in_segment` on a transport) on any
/// communicator.
template <communicator C, class T, broadcast_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
[[nodiscard]] request ibroadcast(C& comm, T* buffer, std::size_t count, int root,
                                 const Algo& algo = {}, R red = {}) {
  return detail::queued(comm, detail::checked_broadcast(comm, buffer, count, root, algo, red));
}

/// Non-blocking `reduce` to `root` (binomial tree or `in_segment` on a transport) on any
/// communicator; `recvbuf` is read at the root only.
template <communicator C, class T, class Op = sum_op, reduce_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
[[nodiscard]] request ireduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                              const Op& op = {}, const Algo& algo = {}, R red = {}) {
  return detail::queued(comm,
                        detail::checked_reduce(comm, sendbuf, recvbuf, count, root, op, algo, red));
}

/// Non-blocking `barrier` on any communicator: completes once every rank has started it;
/// ordered with the collectives queued before it on the same communicator.
template <communicator C, barrier_algorithm Algo = dissemination, reducer R = cpu_reducer>
[[nodiscard]] request ibarrier(C& comm, const Algo& algo = {}, R red = {}) {
  return detail::queued(comm, detail::checked_barrier(comm, algo, red));
}

} // namespace tcoll
