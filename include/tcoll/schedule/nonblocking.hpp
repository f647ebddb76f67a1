#pragma once
/// \file
/// Non-blocking collectives: `iallreduce`, `ireduce_scatter`, `ireduce_scatterv`,
/// `iallgather`, `iallgatherv`, `ibroadcast`, `ireduce`, `ialltoall`, `ialltoallv`, `igather`,
/// `igatherv`, `iscatter`, `iscatterv`, `ibarrier` (MPI's `MPI_I*`).
/// Each checks its arguments at once (throwing like the blocking call), draws the next
/// message space of the transport, queues the collective on the transport's engine
/// (`engine.hpp`) and returns a `request`. Every algorithm works (flat, `multi_ring`,
/// `automatic`, `passthrough`) on every transport, and each on every communicator
/// (hierarchical too). Rules: every rank queues in the same order (MPI's), the buffers stay
/// valid and untouched until the request completes, and the transport object outlives the
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

/// Non-blocking `allreduce` (same arguments, same checks) on any communicator: a transport
/// or a composed machine such as `hierarchical<Intra, Inter>` (which runs on its group
/// transport's engine and draws its message spaces on both levels when queued).
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
[[nodiscard]] request iallreduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const Op& op = {}, const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_allreduce_args(sendbuf, recvbuf, count, comm.rank());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, op, algo, red](const auto& tags) mutable {
        detail::allreduce_on(comm, tags, sendbuf, recvbuf, count, op, algo, red);
      }));
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
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  detail::check_reduce_scatter_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, op, algo, red](const auto& tags) mutable {
        detail::reduce_scatter_on(comm, tags, sendbuf, recvbuf, count, op, algo, red);
      }));
}

/// Non-blocking `allgather` (ring or `in_segment` on a transport) on any communicator.
template <communicator C, class T, block_algorithm Algo = ring, reducer R = cpu_reducer>
[[nodiscard]] request iallgather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const Algo& algo = {}, R red = {}) {
  detail::check_allgather_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, algo, red](const auto& tags) mutable {
        detail::allgather_on(comm, tags, sendbuf, recvbuf, count, algo, red);
      }));
}

namespace detail {
/// A copy of a span of counts or displacements, owned by a queued collective.
using owned_counts = std::vector<std::size_t>;
} // namespace detail

/// Non-blocking `reduce_scatterv` (ring on a transport) on any communicator.
template <communicator C, class T, class Op = sum_op, reducer R = cpu_reducer>
[[nodiscard]] request ireduce_scatterv(C& comm, const T* sendbuf, T* recvbuf,
                                       std::span<const std::size_t> recv_counts, const Op& op = {},
                                       const ring& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  detail::owned_counts offsets =
      detail::check_reduce_scatterv_args(sendbuf, recvbuf, recv_counts, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf,
             counts = detail::owned_counts(recv_counts.begin(), recv_counts.end()),
             offsets = std::move(offsets), op, algo, red](const auto& tags) mutable {
        detail::reduce_scatterv_on(comm, tags, sendbuf, recvbuf,
                                   std::span<const std::size_t>(counts),
                                   std::span<const std::size_t>(offsets), op, algo, red);
      }));
}

/// Non-blocking `allgatherv` (ring on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iallgatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                                  std::span<const std::size_t> recv_counts,
                                  std::span<const std::size_t> recv_displs, const ring& algo = {},
                                  R red = {}) {
  const std::size_t extent = detail::check_allgatherv_args(
      sendbuf, send_count, recvbuf, recv_counts, recv_displs, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, extent, algo, red,
             counts = detail::owned_counts(recv_counts.begin(), recv_counts.end()),
             displs = detail::owned_counts(recv_displs.begin(), recv_displs.end())](
                const auto& tags) mutable {
        detail::allgatherv_on(comm, tags, sendbuf, recvbuf, std::span<const std::size_t>(counts),
                              std::span<const std::size_t>(displs), extent, algo, red);
      }));
}

/// Non-blocking `alltoall` (`alltoall_by_size` by default) on any communicator.
template <communicator C, class T, alltoall_algorithm A = alltoall_by_size, reducer R = cpu_reducer>
[[nodiscard]] request ialltoall(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                const A& algo = {}, R red = {}) {
  const bool in_place =
      detail::check_alltoall_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, in_place, algo, red](const auto& tags) mutable {
        detail::alltoall_on(comm, tags, sendbuf, recvbuf, count, in_place, algo, red);
      }));
}

/// Non-blocking `alltoallv` (pairwise exchange on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request
ialltoallv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
           std::span<const std::size_t> send_displs, T* recvbuf,
           std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
           const pairwise_exchange& algo = {}, R red = {}) {
  const bool in_place =
      detail::check_alltoallv_args(sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                                   recv_displs, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, in_place, algo, red,
             sc = detail::owned_counts(send_counts.begin(), send_counts.end()),
             sd = detail::owned_counts(send_displs.begin(), send_displs.end()),
             rc = detail::owned_counts(recv_counts.begin(), recv_counts.end()),
             rd = detail::owned_counts(recv_displs.begin(), recv_displs.end())](
                const auto& tags) mutable {
        detail::alltoallv_on(comm, tags, sendbuf, std::span<const std::size_t>(sc),
                             std::span<const std::size_t>(sd), recvbuf,
                             std::span<const std::size_t>(rc), std::span<const std::size_t>(rd),
                             in_place, algo, red);
      }));
}

/// Non-blocking `gather` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request igather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                              const linear& algo = {}, R red = {}) {
  std::vector<root_block> blocks =
      detail::check_gather_args(sendbuf, recvbuf, count, root, comm.rank(), comm.size());
  return request(
      detail::submit_collective(comm, [&comm, sendbuf, recvbuf, count, root, algo, red,
                                       blocks = std::move(blocks)](const auto& tags) mutable {
        detail::gather_on(comm, tags, sendbuf, recvbuf, count, root, blocks, algo, red);
      }));
}

/// Non-blocking `gatherv` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request igatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                               std::span<const std::size_t> recv_counts,
                               std::span<const std::size_t> recv_displs, int root,
                               const linear& algo = {}, R red = {}) {
  std::vector<root_block> blocks = detail::check_gatherv_args(
      sendbuf, send_count, recvbuf, recv_counts, recv_displs, root, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, send_count, recvbuf, root, algo, red, blocks = std::move(blocks),
             counts = detail::owned_counts(recv_counts.begin(), recv_counts.end()),
             displs = detail::owned_counts(recv_displs.begin(), recv_displs.end())](
                const auto& tags) mutable {
        detail::gatherv_on(comm, tags, sendbuf, send_count, recvbuf,
                           std::span<const std::size_t>(counts),
                           std::span<const std::size_t>(displs), root, blocks, algo, red);
      }));
}

/// Non-blocking `scatter` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iscatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                               const linear& algo = {}, R red = {}) {
  std::vector<root_block> blocks =
      detail::check_scatter_args(sendbuf, recvbuf, count, root, comm.rank(), comm.size());
  return request(
      detail::submit_collective(comm, [&comm, sendbuf, recvbuf, count, root, algo, red,
                                       blocks = std::move(blocks)](const auto& tags) mutable {
        detail::scatter_on(comm, tags, sendbuf, recvbuf, count, root, blocks, algo, red);
      }));
}

/// Non-blocking `scatterv` (linear on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iscatterv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
                                std::span<const std::size_t> send_displs, T* recvbuf,
                                std::size_t recv_count, int root, const linear& algo = {},
                                R red = {}) {
  std::vector<root_block> blocks = detail::check_scatterv_args(
      sendbuf, send_counts, send_displs, recvbuf, recv_count, root, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, recv_count, root, algo, red, blocks = std::move(blocks),
             counts = detail::owned_counts(send_counts.begin(), send_counts.end()),
             displs = detail::owned_counts(send_displs.begin(), send_displs.end())](
                const auto& tags) mutable {
        detail::scatterv_on(comm, tags, sendbuf, std::span<const std::size_t>(counts),
                            std::span<const std::size_t>(displs), recvbuf, recv_count, root, blocks,
                            algo, red);
      }));
}

/// Non-blocking `broadcast` (binomial tree or `in_segment` on a transport) on any
/// communicator.
template <communicator C, class T, broadcast_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
[[nodiscard]] request ibroadcast(C& comm, T* buffer, std::size_t count, int root,
                                 const Algo& algo = {}, R red = {}) {
  detail::check_broadcast_args(buffer, count, root, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, buffer, count, root, algo, red](const auto& tags) mutable {
        detail::broadcast_on(comm, tags, buffer, count, root, algo, red);
      }));
}

/// Non-blocking `reduce` to `root` (binomial tree or `in_segment` on a transport) on any
/// communicator; `recvbuf` is read at the root only.
template <communicator C, class T, class Op = sum_op, reduce_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
[[nodiscard]] request ireduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                              const Op& op = {}, const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_reduce_args(sendbuf, recvbuf, count, root, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, root, op, algo, red](const auto& tags) mutable {
        detail::reduce_on(comm, tags, sendbuf, recvbuf, count, root, op, algo, red);
      }));
}

/// Non-blocking `barrier` on any communicator: completes once every rank has started it;
/// ordered with the collectives queued before it on the same communicator.
template <communicator C, barrier_algorithm Algo = dissemination, reducer R = cpu_reducer>
[[nodiscard]] request ibarrier(C& comm, const Algo& algo = {}, R red = {}) {
  return request(detail::submit_collective(comm, [&comm, algo, red](const auto& tags) mutable {
    detail::barrier_on(comm, tags, algo, red);
  }));
}

} // namespace tcoll
