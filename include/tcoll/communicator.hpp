#pragma once
/// \file
/// A **communicator** is anything collectives run on: a transport, or a machine composed of
/// transports (`hierarchical<Intra, Inter>`). The execution layer and the adaptors take a
/// `communicator` and reach it only through the functions here, so none of them asks
/// which kind it holds (DESIGN.md).
///
/// A composed machine satisfies `composite_communicator` with these members:
///  - `rank()`, `size()`: this rank among all ranks, and their number;
///  - `begin()`: draws the message spaces of one collective on every transport it uses
///    (throwing the cause if one is broken) and returns them as one value, its *tags*;
///  - `for_each_transport(f)`: calls `f(transport&)` for every transport this rank uses;
///  - `engine_transport()`: the transport whose engine runs its queued collectives;
///  - `allreduce_tagged(tags, sendbuf, recvbuf, count, op, algo, red)`: an allreduce in the
///    message spaces `begin()` drew, arguments already checked; likewise
///    `reduce_scatter_tagged`, `reduce_scatterv_tagged`, `allgather_tagged`,
///    `allgatherv_tagged`, `broadcast_tagged`, `reduce_tagged`,
///    `alltoall_tagged`, `alltoallv_tagged`, `gather_tagged`, `gatherv_tagged`,
///    `scatter_tagged`, `scatterv_tagged` and `barrier_tagged` for the collectives it runs
///    (the `*_on` functions below give their arguments);
///  - `default_algorithm`: the algorithm-knob type used when a caller names none.
/// For a transport the tags are one `int` and the default algorithm is `automatic`.
#include <concepts>
#include <exception>
#include <span>
#include <utility>
#include <vector>

#include "algorithm/dissemination.hpp"
#include "algorithm/linear.hpp"
#include "algorithm/select.hpp"
#include "algorithm/tagged.hpp"
#include "core/concepts.hpp"
#include "core/scalar_type.hpp"
#include "detail/collective_scope.hpp"
#include "reduce/cpu.hpp"
#include "reduce/runtime.hpp"

namespace tcoll {

/// A machine composed of transports (see the file comment).
template <class C>
concept composite_communicator = !transport<C> && requires(C & c) {
  typename C::default_algorithm;
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.begin();
  c.engine_transport();
};

/// Anything collectives run on: a transport or a composed machine.
template <class C>
concept communicator = transport<C> || composite_communicator<C>;

namespace detail {

/// Draws the message spaces of one collective on `c` (throws, naming the cause, if `c` is broken).
template <transport Tr>
int begin_on(Tr& t) {
  return begin_collective(t);
}
template <composite_communicator C>
auto begin_on(C& c) {
  return c.begin();
}

/// What `begin_on` returns for `C`: the message spaces of one collective.
template <class C>
using collective_tags_t = decltype(begin_on(std::declval<C&>()));

/// Calls `f(transport&)` for every transport `c` uses on this rank.
template <transport Tr, class F>
void for_each_transport(Tr& t, F&& f) {
  f(t);
}
template <composite_communicator C, class F>
void for_each_transport(C& c, F&& f) {
  c.for_each_transport(f);
}

/// The transport whose engine runs the collectives queued on `c`.
template <transport Tr>
Tr& engine_transport(Tr& t) {
  return t;
}
template <composite_communicator C>
decltype(auto) engine_transport(C& c) {
  return c.engine_transport();
}

/// Throws the cause if any transport of `c` is broken.
template <communicator C>
void throw_if_broken(C& c) {
  const int rank = c.rank();
  for_each_transport(c, [rank](auto& t) {
    if (collective_context* x = context_of(t)) x->throw_if_broken(rank);
  });
}

/// Marks every transport of `c` broken by `cause` and aborts it (never throws).
template <communicator C>
void fail_communicator(C& c, std::exception_ptr cause) noexcept {
  for_each_transport(c, [&cause](auto& t) { fail_transport(t, cause); });
}

/// Runs `f()`; if it throws, every transport of `c` is failed with the exception, which is
/// rethrown.
template <communicator C, class F>
decltype(auto) guarded_on(C& c, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    fail_communicator(c, std::current_exception());
    throw;
  }
}

/// The algorithm-knob type of an allreduce on `C` when the caller names none.
template <class C>
struct default_algorithm {
  using type = automatic;
};
template <composite_communicator C>
struct default_algorithm<C> {
  using type = typename C::default_algorithm;
};
template <class C>
using default_algorithm_t = typename default_algorithm<C>::type;

// Host calls of scalar elements run on the runtime-typed instantiations: the algorithms see
// `raw_element<sizeof(T)>` and, for a predefined op, a `runtime_op`, whose kernels are the
// typed loops bit for bit (reduce/runtime.hpp). Every (type, op) of one element size then
// shares one instantiation of each algorithm, as the runtime-typed entry points and the
// integrations already did; a user op, another reducer or another element type runs typed.

/// Does a reduction of `T` under `Op` with reducer `R` run on the runtime-typed path?
template <class T, class Op, class R>
constexpr bool lowers_reduction() {
  if constexpr (std::is_same_v<R, cpu_reducer> && is_scalar_element<T> && is_predefined_op<Op>)
    return reduces(scalar_type_of<T>(), reduce_kind_of<Op>());
  else
    return false;
}

/// Does a collective that moves `T` elements with reducer `R` run on the raw elements?
template <class T, class R>
inline constexpr bool lowers_elements = std::is_same_v<R, cpu_reducer>&& is_scalar_element<T>;

/// `p` as the algorithms see it: the raw elements of its size where the call runs on them
/// (`lowers_elements`), itself otherwise.
template <class R, class T>
auto lowered(T* p) {
  using E = raw_element<sizeof(T)>;
  if constexpr (lowers_elements<std::remove_const_t<T>, R>)
    return reinterpret_cast<std::conditional_t<std::is_const_v<T>, const E, E>*>(p);
  else
    return p;
}

/// Runs `run(sendbuf, recvbuf, op)` as the algorithms see them: raw elements and the
/// `runtime_op` of (`T`, `Op`) where the reduction is lowered, then avg's division of the
/// `count` elements at `result` (null: no result on this rank) as the typed op finalizes;
/// the call's own otherwise.
template <class T, class Op, class R, class C, class Run>
void reduce_lowered(C& c, const T* sendbuf, T* recvbuf, const Op& op, T* result, std::size_t count,
                    Run&& run) {
  if constexpr (lowers_reduction<T, Op, R>()) {
    run(lowered<R>(sendbuf), lowered<R>(recvbuf), runtime_op::of<T, Op>());
    if constexpr (finalizing_op<Op>)
      if (result) cpu_reducer{}.finalize(op, result, count, c.size());
  } else {
    run(sendbuf, recvbuf, op);
  }
}

/// An allreduce on `c` in the message spaces `tags` drawn by `begin_on`, arguments already
/// checked (the caller runs it under `guarded_on`).
template <transport Tr, class T, class Op, class Algo, reducer R>
void allreduce_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                  const Algo& algo, R& red) {
  reduce_lowered<T, Op, R>(t, sendbuf, recvbuf, op, recvbuf, count,
                           [&](auto send, auto recv, const auto& o) {
                             allreduce_tagged(t, tag, send, recv, count, o, algo, red);
                           });
}
template <composite_communicator C, class T, class Op, class Algo, reducer R>
void allreduce_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                  std::size_t count, const Op& op, const Algo& algo, R& red) {
  reduce_lowered<T, Op, R>(c, sendbuf, recvbuf, op, recvbuf, count,
                           [&](auto send, auto recv, const auto& o) {
                             c.allreduce_tagged(tags, send, recv, count, o, algo, red);
                           });
}

// Every other collective on `c` in the message spaces `tags`, arguments already checked:
// on a transport its algorithm in the one message space, on a composed machine the
// machine's own form (its `*_tagged` member).

template <transport Tr, class T, class Op, block_algorithm Algo, reducer R>
void reduce_scatter_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                       const Op& op, const Algo& algo, R& red) {
  reduce_lowered<T, Op, R>(t, sendbuf, recvbuf, op, recvbuf, count,
                           [&](auto send, auto recv, const auto& o) {
                             reduce_scatter_tagged(t, tag, send, recv, count, o, algo, red);
                           });
}
template <composite_communicator C, class T, class Op, block_algorithm Algo, reducer R>
void reduce_scatter_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                       std::size_t count, const Op& op, const Algo&, R& red) {
  reduce_lowered<T, Op, R>(c, sendbuf, recvbuf, op, recvbuf, count,
                           [&](auto send, auto recv, const auto& o) {
                             c.reduce_scatter_tagged(tags, send, recv, count, o, ring{}, red);
                           });
}

template <transport Tr, class T, block_algorithm Algo, reducer R>
void allgather_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, const Algo& algo,
                  R& red) {
  allgather_tagged(t, tag, lowered<R>(sendbuf), lowered<R>(recvbuf), count, algo, red);
}
template <composite_communicator C, class T, block_algorithm Algo, reducer R>
void allgather_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                  std::size_t count, const Algo&, R& red) {
  c.allgather_tagged(tags, lowered<R>(sendbuf), lowered<R>(recvbuf), count, ring{}, red);
}

template <transport Tr, class T, class Op, reducer R>
void reduce_scatterv_on(Tr& t, int tag, const T* sendbuf, T* recvbuf,
                        std::span<const std::size_t> counts, std::span<const std::size_t> offsets,
                        const Op& op, const ring& algo, R& red) {
  reduce_lowered<T, Op, R>(
      t, sendbuf, recvbuf, op, recvbuf, counts[t.rank()], [&](auto send, auto recv, const auto& o) {
        reduce_scatterv_tagged(t, tag, send, recv, counts, offsets, o, algo, red);
      });
}
template <composite_communicator C, class T, class Op, reducer R>
void reduce_scatterv_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                        std::span<const std::size_t> counts, std::span<const std::size_t> offsets,
                        const Op& op, const ring& algo, R& red) {
  reduce_lowered<T, Op, R>(
      c, sendbuf, recvbuf, op, recvbuf, counts[c.rank()], [&](auto send, auto recv, const auto& o) {
        c.reduce_scatterv_tagged(tags, send, recv, counts, offsets, o, algo, red);
      });
}

template <transport Tr, class T, reducer R>
void allgatherv_on(Tr& t, int tag, const T* sendbuf, T* recvbuf,
                   std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                   std::size_t extent, const ring& algo, R& red) {
  allgatherv_tagged(t, tag, lowered<R>(sendbuf), lowered<R>(recvbuf), counts, displs, extent, algo,
                    red);
}
template <composite_communicator C, class T, reducer R>
void allgatherv_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                   std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                   std::size_t extent, const ring& algo, R& red) {
  c.allgatherv_tagged(tags, lowered<R>(sendbuf), lowered<R>(recvbuf), counts, displs, extent, algo,
                      red);
}

template <transport Tr, class T, broadcast_algorithm Algo, reducer R>
void broadcast_on(Tr& t, int tag, T* buffer, std::size_t count, int root, const Algo& algo,
                  R& red) {
  broadcast_tagged(t, tag, lowered<R>(buffer), count, root, algo, red);
}
template <composite_communicator C, class T, broadcast_algorithm Algo, reducer R>
void broadcast_on(C& c, const collective_tags_t<C>& tags, T* buffer, std::size_t count, int root,
                  const Algo& algo, R& red) {
  c.broadcast_tagged(tags, lowered<R>(buffer), count, root, algo, red);
}

template <transport Tr, class T, class Op, reduce_algorithm Algo, reducer R>
void reduce_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, int root,
               const Op& op, const Algo& algo, R& red) {
  reduce_lowered<T, Op, R>(t, sendbuf, recvbuf, op, t.rank() == root ? recvbuf : nullptr, count,
                           [&](auto send, auto recv, const auto& o) {
                             reduce_tagged(t, tag, send, recv, count, root, o, algo, red);
                           });
}
template <composite_communicator C, class T, class Op, reduce_algorithm Algo, reducer R>
void reduce_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
               std::size_t count, int root, const Op& op, const Algo&, R& red) {
  reduce_lowered<T, Op, R>(c, sendbuf, recvbuf, op, c.rank() == root ? recvbuf : nullptr, count,
                           [&](auto send, auto recv, const auto& o) {
                             c.reduce_tagged(tags, send, recv, count, root, o, binomial_tree{},
                                             red);
                           });
}

/// All-to-all of `count` elements per pair; `in_place` when sendbuf == recvbuf. `red` makes
/// the local copies and scratch (where the memory lives). A hierarchy's leaders exchange
/// uneven group blocks: the pairwise exchange there.
template <transport Tr, class T, alltoall_algorithm A, reducer R>
void alltoall_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, bool in_place,
                 const A& algo, R& red) {
  alltoall_tagged(t, tag, lowered<R>(sendbuf), lowered<R>(recvbuf), count, in_place, algo, red);
}
template <composite_communicator C, class T, alltoall_algorithm A, reducer R>
void alltoall_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                 std::size_t count, bool in_place, const A& algo, R& red) {
  c.alltoall_tagged(tags, lowered<R>(sendbuf), lowered<R>(recvbuf), count, in_place,
                    uneven_exchange_of(algo), red);
}

/// All-to-all with a block of its own size for every pair (see `alltoallv`).
template <transport Tr, class T, reducer R>
void alltoallv_on(Tr& t, int tag, const T* sendbuf, std::span<const std::size_t> send_counts,
                  std::span<const std::size_t> send_displs, T* recvbuf,
                  std::span<const std::size_t> recv_counts,
                  std::span<const std::size_t> recv_displs, bool in_place,
                  const pairwise_exchange& algo, R& red) {
  alltoallv_tagged(t, tag, lowered<R>(sendbuf), send_counts, send_displs, lowered<R>(recvbuf),
                   recv_counts, recv_displs, in_place, algo, red);
}
template <composite_communicator C, class T, reducer R>
void alltoallv_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf,
                  std::span<const std::size_t> send_counts,
                  std::span<const std::size_t> send_displs, T* recvbuf,
                  std::span<const std::size_t> recv_counts,
                  std::span<const std::size_t> recv_displs, bool in_place,
                  const pairwise_exchange& algo, R& red) {
  c.alltoallv_tagged(tags, lowered<R>(sendbuf), send_counts, send_displs, lowered<R>(recvbuf),
                     recv_counts, recv_displs, in_place, algo, red);
}

/// Gather of `count` elements per rank to `root`. `blocks`: the root's blocks, checked by
/// the entry point (empty elsewhere).
template <transport Tr, class T, reducer R>
void gather_on(Tr& t, int tag, const T* sendbuf, T*, std::size_t count, int root,
               const std::vector<root_block>& blocks, const linear& algo, R& red) {
  algo.gather(t, tag, root, sendbuf, count * sizeof(T), std::span<const root_block>(blocks), red);
}
template <composite_communicator C, class T, reducer R>
void gather_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
               std::size_t count, int root, const std::vector<root_block>&, const linear& algo,
               R& red) {
  c.gather_tagged(tags, lowered<R>(sendbuf), lowered<R>(recvbuf), count, root, algo, red);
}

/// Scatter of `count` elements per rank from `root` (`blocks` as for gather).
template <transport Tr, class T, reducer R>
void scatter_on(Tr& t, int tag, const T*, T* recvbuf, std::size_t count, int root,
                const std::vector<root_block>& blocks, const linear& algo, R& red) {
  algo.scatter(t, tag, root, recvbuf, count * sizeof(T), std::span<const root_block>(blocks), red);
}
template <composite_communicator C, class T, reducer R>
void scatter_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                std::size_t count, int root, const std::vector<root_block>&, const linear& algo,
                R& red) {
  c.scatter_tagged(tags, lowered<R>(sendbuf), lowered<R>(recvbuf), count, root, algo, red);
}

/// Gather with a block of its own size per rank (see `gatherv`). `blocks`: the root's
/// blocks, checked (empty elsewhere).
template <transport Tr, class T, reducer R>
void gatherv_on(Tr& t, int tag, const T* sendbuf, std::size_t send_count, T*,
                std::span<const std::size_t>, std::span<const std::size_t>, int root,
                const std::vector<root_block>& blocks, const linear& algo, R& red) {
  algo.gather(t, tag, root, sendbuf, send_count * sizeof(T), std::span<const root_block>(blocks),
              red);
}
template <composite_communicator C, class T, reducer R>
void gatherv_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, std::size_t send_count,
                T* recvbuf, std::span<const std::size_t> recv_counts,
                std::span<const std::size_t> recv_displs, int root, const std::vector<root_block>&,
                const linear& algo, R& red) {
  c.gatherv_tagged(tags, lowered<R>(sendbuf), send_count, lowered<R>(recvbuf), recv_counts,
                   recv_displs, root, algo, red);
}

/// Scatter with a block of its own size per rank (see `scatterv`).
template <transport Tr, class T, reducer R>
void scatterv_on(Tr& t, int tag, const T*, std::span<const std::size_t>,
                 std::span<const std::size_t>, T* recvbuf, std::size_t recv_count, int root,
                 const std::vector<root_block>& blocks, const linear& algo, R& red) {
  algo.scatter(t, tag, root, recvbuf, recv_count * sizeof(T), std::span<const root_block>(blocks),
               red);
}
template <composite_communicator C, class T, reducer R>
void scatterv_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf,
                 std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 T* recvbuf, std::size_t recv_count, int root, const std::vector<root_block>&,
                 const linear& algo, R& red) {
  c.scatterv_tagged(tags, lowered<R>(sendbuf), send_counts, send_displs, lowered<R>(recvbuf),
                    recv_count, root, algo, red);
}

template <transport Tr, reducer R>
void barrier_on(Tr& t, int tag, const dissemination& algo, R& red) {
  algo.barrier(t, tag, red);
}
template <transport Tr, reducer R>
void barrier_on(Tr& t, int tag, const in_segment& algo, R& red) {
  if (!try_in_segment_barrier(t, algo)) dissemination{}.barrier(t, tag, red);
}
template <composite_communicator C, barrier_algorithm Algo, reducer R>
void barrier_on(C& c, const collective_tags_t<C>& tags, const Algo&, R& red) {
  c.barrier_tagged(tags, dissemination{}, red);
}

} // namespace detail

} // namespace tcoll
