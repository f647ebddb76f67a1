#pragma once
/// \file
/// Non-blocking collectives: `iallreduce`, `ireduce_scatter`, `iallgather`, `ibroadcast`,
/// `ibarrier`.
/// Each checks its arguments at once (throwing like the blocking call), draws the next
/// message space of the transport, queues the collective on the transport's engine
/// (`engine.hpp`) and returns a `request`. Every algorithm works (flat, `multi_ring`,
/// `automatic`, `passthrough`) on every transport, and each on every communicator
/// (hierarchical too). Rules: every rank queues in the same order (MPI's), the buffers stay
/// valid and untouched until the request completes, and the transport object outlives the
/// request. See `engine.hpp` for the thread-safety contract.
#include <cstddef>
#include <span>
#include <string>

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

/// Non-blocking `reduce_scatter` (ring on a transport) on any communicator.
template <communicator C, class T, class Op = sum_op, reducer R = cpu_reducer>
[[nodiscard]] request ireduce_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                      const Op& op = {}, const ring& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  detail::check_reduce_scatter_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, op, algo, red](const auto& tags) mutable {
        detail::reduce_scatter_on(comm, tags, sendbuf, recvbuf, count, op, algo, red);
      }));
}

/// Non-blocking `allgather` (ring on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request iallgather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const ring& algo = {}, R red = {}) {
  detail::check_allgather_args(sendbuf, recvbuf, count, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, sendbuf, recvbuf, count, algo, red](const auto& tags) mutable {
        detail::allgather_on(comm, tags, sendbuf, recvbuf, count, algo, red);
      }));
}

/// Non-blocking `broadcast` (binomial tree on a transport) on any communicator.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] request ibroadcast(C& comm, T* buffer, std::size_t count, int root,
                                 const binomial_tree& algo = {}, R red = {}) {
  detail::check_broadcast_args(buffer, count, root, comm.rank(), comm.size());
  return request(detail::submit_collective(
      comm, [&comm, buffer, count, root, algo, red](const auto& tags) mutable {
        detail::broadcast_on(comm, tags, buffer, count, root, algo, red);
      }));
}

/// Non-blocking `barrier` on any communicator: completes once every rank has started it;
/// ordered with the collectives queued before it on the same communicator.
template <communicator C>
[[nodiscard]] request ibarrier(C& comm, const dissemination& algo = {}) {
  return request(detail::submit_collective(
      comm, [&comm, algo](const auto& tags) { detail::barrier_on(comm, tags, algo); }));
}

} // namespace tcoll
