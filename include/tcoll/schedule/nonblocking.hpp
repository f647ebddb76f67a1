#pragma once
/// \file
/// Non-blocking collectives: `iallreduce`, `ireduce_scatter`, `iallgather`, `ibroadcast`.
/// Each checks its arguments at once (throwing like the blocking call), draws the next
/// message space of the transport, queues the collective on the transport's engine
/// (`engine.hpp`) and returns a `request`. Every algorithm works (flat, `multi_ring`,
/// `automatic`, `passthrough`, and hierarchical through the `hierarchical` overload) on
/// every transport. Rules: every rank queues in the same order (MPI's), the buffers stay
/// valid and untouched until the request completes, and the transport object outlives the
/// request. See `engine.hpp` for the thread-safety contract.
#include <cstddef>
#include <span>
#include <string>

#include "../algorithm/hierarchical.hpp"
#include "../collectives.hpp"
#include "engine.hpp"

namespace tcoll {

/// Non-blocking `allreduce` (same arguments, same checks).
template <transport Tr, class T, class Op = sum_op, class Algo = automatic, reducer R = cpu_reducer>
[[nodiscard]] request iallreduce(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const Op& op = {}, const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_allreduce_args(sendbuf, recvbuf, count, t.rank());
  return request(
      detail::submit_collective(t, [&t, sendbuf, recvbuf, count, op, algo, red](int tag) mutable {
        detail::allreduce_tagged(t, tag, sendbuf, recvbuf, count, op, algo, red);
      }));
}

/// Non-blocking in-place allreduce over a span.
template <transport Tr, class T, class Op = sum_op, class Algo = automatic, reducer R = cpu_reducer>
[[nodiscard]] request iallreduce(Tr& t, std::span<T> data, const Op& op = {}, const Algo& algo = {},
                                 R red = {}) {
  return iallreduce(t, data.data(), data.data(), data.size(), op, algo, red);
}

/// Non-blocking hierarchical allreduce; it runs on the engine of the group transport and
/// draws its message spaces on both transports when queued.
template <transport Intra, transport Inter, class T, class Op = sum_op, class InterAlgo = ring,
          reducer R = cpu_reducer>
[[nodiscard]] request iallreduce(hierarchical<Intra, Inter>& h, const T* sendbuf, T* recvbuf,
                                 std::size_t count, const Op& op = {},
                                 const hierarchical_options<InterAlgo>& opt = {}, R red = {}) {
  static_assert(commutative_op<Op>, "tcoll: hierarchical allreduce reorders operands; it "
                                    "needs a commutative op");
  detail::check_support<R, Op, T>();
  detail::check_allreduce_args(sendbuf, recvbuf, count, h.rank());
  return request(detail::submit_hierarchical(
      h, [&h, sendbuf, recvbuf, count, op, opt, red](int intra_tag, int inter_tag) mutable {
        h.allreduce_tagged(intra_tag, inter_tag, sendbuf, recvbuf, count, op, opt, red);
      }));
}

/// Non-blocking `reduce_scatter` (ring).
template <transport Tr, class T, class Op = sum_op, reducer R = cpu_reducer>
[[nodiscard]] request ireduce_scatter(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
                                      const Op& op = {}, const ring& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  detail::check_reduce_scatter_args(sendbuf, recvbuf, count, t.rank(), t.size());
  return request(
      detail::submit_collective(t, [&t, sendbuf, recvbuf, count, op, algo, red](int tag) mutable {
        detail::reduce_scatter_tagged(t, tag, sendbuf, recvbuf, count, op, algo, red);
      }));
}

/// Non-blocking `allgather` (ring).
template <transport Tr, class T, reducer R = cpu_reducer>
[[nodiscard]] request iallgather(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
                                 const ring& algo = {}, R red = {}) {
  detail::check_allgather_args(sendbuf, recvbuf, count, t.rank(), t.size());
  return request(
      detail::submit_collective(t, [&t, sendbuf, recvbuf, count, algo, red](int tag) mutable {
        detail::allgather_tagged(t, tag, sendbuf, recvbuf, count, algo, red);
      }));
}

/// Non-blocking `broadcast` (binomial tree).
template <transport Tr, class T, reducer R = cpu_reducer>
[[nodiscard]] request ibroadcast(Tr& t, T* buffer, std::size_t count, int root,
                                 const binomial_tree& algo = {}, R red = {}) {
  detail::check_broadcast_args(buffer, count, root, t.rank(), t.size());
  return request(
      detail::submit_collective(t, [&t, buffer, count, root, algo, red](int tag) mutable {
        detail::broadcast_tagged(t, tag, buffer, count, root, algo, red);
      }));
}

} // namespace tcoll
