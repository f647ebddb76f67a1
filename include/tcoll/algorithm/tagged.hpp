#pragma once
/// \file
/// Every collective on one transport in a given message space, arguments already checked:
/// the step descriptions of the algorithms run by the generic executor (all-to-all: the
/// pairwise exchange's own sends and receives). The entry points (collectives.hpp) check
/// arguments, draw the message space and call these; composed machines (hierarchical) run
/// them inside their phases.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../detail/executor.hpp"
#include "binomial_tree.hpp"
#include "in_segment.hpp"
#include "pairwise_exchange.hpp"
#include "passthrough.hpp"
#include "ring.hpp"
#include "select.hpp"
#include "table.hpp"
#include "visit.hpp"

namespace tcoll {

/// An algorithm that can describe an allreduce as steps (see detail/schedule.hpp).
template <class A>
concept allreduce_algorithm = requires(const A& a, detail::step_recorder& s, detail::layout L) {
  {A::name};
  {A::keeps_operand_order};
  a.allreduce(s, L);
};

namespace detail {
template <class Op, class Algo>
constexpr void check_order() {
  static_assert(commutative_op<Op> || Algo::keeps_operand_order,
                "tcoll: this algorithm reorders operands; a non-commutative op needs "
                "recursive_doubling, recursive_halving_doubling or binomial_tree");
}
/// The op of the data-movement collectives (allgather, broadcast). They never reduce, but the
/// executor still instantiates the reducer's reduce for their op; this one is valid for every
/// element type (sum_op is not: symbolic::rank_set has no operator+).
struct no_reduce_op {
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "none";
  template <class A>
  constexpr A operator()(A a, A) const {
    return a;
  }
};
template <class R, class Op, class T>
constexpr void check_support() {
  static_assert(reducer_supports<R, Op, T>(), "tcoll: the reducer does not support this op "
                                              "on this element type");
}
} // namespace detail

namespace detail {
/// Algorithms that describe a collective as steps (detail/schedule.hpp) for the executor: the
/// generic forms below run any such algorithm the table lists for the collective.
template <class A>
concept describes_broadcast = requires(const A& a, step_recorder& s, layout L) {
  a.broadcast(s, L);
};
template <class A>
concept describes_reduce = requires(const A& a, step_recorder& s, layout L) {
  a.reduce(s, L);
};
template <class A>
concept describes_allgather = requires(const A& a, step_recorder& s, layout L) {
  a.allgather(s, L);
};
template <class A>
concept describes_reduce_scatter = requires(const A& a, step_recorder& s, layout L) {
  a.reduce_scatter(s, L);
};

/// The allreduce itself, arguments already checked, in the message space `tag`.
template <transport Tr, class T, class Op, class Algo, reducer R>
void allreduce_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                      const Algo& algo, R& red) {
  if constexpr (std::is_same_v<Algo, automatic>) {
    constexpr algorithm_support can{commutative_op<Op>, has_native_allreduce<Tr, T, Op>};
    visit_algorithm<can>(
        algo.template choose_for<Tr>(count * sizeof(T), t.size(), can.commutative, can.native),
        algo, [&](const auto& chosen) {
          allreduce_tagged(t, tag, sendbuf, recvbuf, count, op, chosen, red);
        });
  } else if constexpr (std::is_same_v<Algo, passthrough>) {
    static_assert(has_native_allreduce<Tr, T, Op>,
                  "tcoll: passthrough needs a transport with a vendor allreduce (mpi, nccl)");
    t.native_allreduce(sendbuf, recvbuf, count, op);
  } else if constexpr (std::is_same_v<Algo, in_segment>) {
    in_segment_allreduce_on(t, tag, sendbuf, recvbuf, count, op, algo, red);
  } else {
    static_assert(allreduce_algorithm<Algo>, "tcoll: not an allreduce algorithm");
    check_order<Op, Algo>();
    layout L{t.rank(), t.size(), count, sizeof(T), 0, sendbuf == recvbuf};
    executor<Tr, R, T, Op> ex(t, red, op, sendbuf, count, recvbuf, count, tag);
    algo.allreduce(ex, L);
  }
}

/// Reduce-scatter in the message space `tag`, arguments already checked, by an algorithm
/// that describes it as steps (the ring).
template <transport Tr, class T, class Op, class Algo, reducer R>
requires describes_reduce_scatter<Algo>
void reduce_scatter_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                           const Op& op, const Algo& algo, R& red) {
  check_order<Op, Algo>();
  const int P = t.size();
  layout L{t.rank(), P, count, sizeof(T), 0, false};
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, count * P, recvbuf, count, tag);
  algo.reduce_scatter(ex, L);
}

/// Allgather in the message space `tag`, arguments already checked, by an algorithm that
/// describes it as steps (the ring).
template <transport Tr, class T, class Algo, reducer R>
requires describes_allgather<Algo>
void allgather_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                      const Algo& algo, R& red) {
  const int P = t.size();
  layout L{t.rank(), P, count, sizeof(T), 0, false};
  executor<Tr, R, T, no_reduce_op> ex(t, red, no_reduce_op{}, sendbuf, count, recvbuf, count * P,
                                      tag);
  algo.allgather(ex, L);
}

/// Reduce-scatter in the message space `tag`, arguments already checked: in the collective
/// area (`in_segment`, where the transport has one and may use it here), else the ring.
template <transport Tr, class T, class Op, reducer R>
void reduce_scatter_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                           const Op& op, const in_segment& algo, R& red) {
  if (!try_in_segment_reduce_scatter(t, sendbuf, recvbuf, count, op, algo, red))
    reduce_scatter_tagged(t, tag, sendbuf, recvbuf, count, op, ring{}, red);
}

/// Allgather in the message space `tag`, arguments already checked: in the collective area
/// (`in_segment`, where the transport has one and may use it here), else the ring.
template <transport Tr, class T, reducer R>
void allgather_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                      const in_segment& algo, R& red) {
  if (!try_in_segment_allgather<Tr, T, R>(t, sendbuf, recvbuf, count, algo))
    allgather_tagged(t, tag, sendbuf, recvbuf, count, ring{}, red);
}

/// Reduce-scatter of blocks of their own sizes (`counts`, one after another in `sendbuf`;
/// `offsets` their starts) in the message space `tag`, arguments already checked.
template <transport Tr, class T, class Op, reducer R>
void reduce_scatterv_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf,
                            std::span<const std::size_t> counts,
                            std::span<const std::size_t> offsets, const Op& op, const ring& algo,
                            R& red) {
  const int P = t.size(), r = t.rank();
  const auto last = static_cast<std::size_t>(P - 1);
  layout L{r, P, 0, sizeof(T), 0, false, counts.data(), offsets.data()};
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, offsets[last] + counts[last], recvbuf,
                            counts[static_cast<std::size_t>(r)], tag);
  algo.reduce_scatter(ex, L);
}

/// Allgather of blocks of their own sizes (`counts`, at `displs` of `recvbuf`) in the
/// message space `tag`, arguments already checked; `extent` is the end of the last block.
template <transport Tr, class T, reducer R>
void allgatherv_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf,
                       std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                       std::size_t extent, const ring& algo, R& red) {
  const int P = t.size(), r = t.rank();
  layout L{r, P, 0, sizeof(T), 0, false, counts.data(), displs.data()};
  executor<Tr, R, T, no_reduce_op> ex(t, red, no_reduce_op{}, sendbuf,
                                      counts[static_cast<std::size_t>(r)], recvbuf, extent, tag);
  algo.allgather(ex, L);
}

/// Broadcast in the message space `tag`, arguments already checked, by an algorithm that
/// describes it as steps (the binomial tree).
template <transport Tr, class T, class Algo, reducer R>
requires describes_broadcast<Algo>
void broadcast_tagged(Tr& t, int tag, T* buffer, std::size_t count, int root, const Algo& algo,
                      R& red) {
  layout L{t.rank(), t.size(), count, sizeof(T), root, true};
  executor<Tr, R, T, no_reduce_op> ex(t, red, no_reduce_op{}, buffer, count, buffer, count, tag);
  algo.broadcast(ex, L);
}

/// Broadcast in the message space `tag`, arguments already checked: in the collective area
/// (`in_segment`, where the transport has one and may use it here), else the binomial tree.
template <transport Tr, class T, reducer R>
void broadcast_tagged(Tr& t, int tag, T* buffer, std::size_t count, int root,
                      const in_segment& algo, R& red) {
  if (!try_in_segment_broadcast<Tr, T, R>(t, buffer, count, root, algo))
    broadcast_tagged(t, tag, buffer, count, root, binomial_tree{}, red);
}

/// Reduce in the message space `tag`, arguments already checked (see `reduce`), by an
/// algorithm that describes it as steps (the binomial tree). A non-commutative op needs one
/// that keeps operand order with root 0.
template <transport Tr, class T, class Op, class Algo, reducer R>
requires describes_reduce<Algo>
void reduce_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                   const Op& op, const Algo& algo, R& red) {
  check_order<Op, Algo>();
  const int rank = t.rank(), P = t.size();
  const bool is_root = rank == root;
  // A non-commutative op is reduced in rank order at rank 0 (tree rooted at 0 keeps order)
  // and forwarded; rank 0 then accumulates in a temporary unless it is the root.
  const int tree_root = commutative_op<Op> ? root : 0;
  const bool holds = rank == tree_root;
  auto forward_space = red.template allocate<T>(holds && !is_root ? count : 0);
  T* acc = is_root ? recvbuf : holds ? forward_space.data() : nullptr;
  layout L{rank, P, count, sizeof(T), tree_root, sendbuf == acc};
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, count, acc, acc ? count : 0, tag);
  algo.reduce(ex, L);
  if (tree_root != root && (holds || is_root)) {
    ex.round_begin();
    if (holds)
      ex.send(root, region{buffer_id::output, 0, count});
    else
      ex.recv(tree_root, region{buffer_id::output, 0, count});
    ex.round_end();
  }
}

/// Reduce in the message space `tag`, arguments already checked: in the collective area
/// (`in_segment`, where the transport has one and may use it here), else the binomial tree.
template <transport Tr, class T, class Op, reducer R>
void reduce_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                   const Op& op, const in_segment& algo, R& red) {
  if (!try_in_segment_reduce(t, sendbuf, recvbuf, count, root, op, algo, red))
    reduce_tagged(t, tag, sendbuf, recvbuf, count, root, op, binomial_tree{}, red);
}

/// The counts and displacements of `P` equal blocks of `count` elements, back to back (the
/// equal-count collectives as their v-forms).
inline std::pair<std::vector<std::size_t>, std::vector<std::size_t>>
equal_blocks(int P, std::size_t count) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(P), count), displs(counts.size());
  for (std::size_t q = 0; q < displs.size(); ++q) displs[q] = q * count;
  return {std::move(counts), std::move(displs)};
}

/// The exchange of alltoall (`count` elements per pair), arguments checked, in the message
/// space `tag`, by `algo` (`alltoall_by_size` chooses by the block's size), its local copies
/// and scratch from `red`. In place, the pairwise exchange copies aside only the blocks it
/// would overwrite before they leave; Bruck stages every block anyway, and so does the collective
/// area (`in_segment`, the pairwise exchange where the transport has none or may not use it here).
template <transport Tr, class T, alltoall_algorithm A, reducer R>
void alltoall_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, bool in_place,
                     const A& algo, R& red) {
  const std::size_t block_bytes = count * sizeof(T);
  if constexpr (std::is_same_v<A, alltoall_by_size>) {
    algorithm_id a = algo.choose(block_bytes, t.size(), has_segment_area<Tr>);
    if (a == algorithm_id::in_segment) {
      if (try_in_segment_alltoall<Tr, T, R>(t, sendbuf, recvbuf, count, algo.in_segment_knobs))
        return;
      a = algo.choose(block_bytes, t.size()); // off the area: Bruck or the exchange
    }
    if (a == algorithm_id::bruck)
      alltoall_tagged(t, tag, sendbuf, recvbuf, count, in_place, algo.bruck_knobs, red);
    else
      alltoall_tagged(t, tag, sendbuf, recvbuf, count, in_place, algo.exchange, red);
  } else if constexpr (std::is_same_v<A, in_segment>) {
    if (!try_in_segment_alltoall<Tr, T, R>(t, sendbuf, recvbuf, count, algo))
      alltoall_tagged(t, tag, sendbuf, recvbuf, count, in_place, pairwise_exchange{}, red);
  } else if constexpr (std::is_same_v<A, bruck>) {
    algo.exchange(t, tag, sendbuf, recvbuf, block_bytes, red);
  } else if (in_place) {
    algo.exchange_equal_in_place(t, tag, recvbuf, block_bytes, red);
  } else {
    algo.exchange_equal(t, tag, sendbuf, recvbuf, block_bytes, red);
  }
}

/// The pairwise exchange `algo` runs where the blocks are uneven (a hierarchy's leaders
/// exchange whole groups' blocks): its own, or the default for Bruck.
template <alltoall_algorithm A>
pairwise_exchange uneven_exchange_of(const A& algo) {
  if constexpr (std::is_same_v<A, pairwise_exchange>)
    return algo;
  else if constexpr (std::is_same_v<A, alltoall_by_size>)
    return algo.exchange;
  else
    return {};
}

/// The exchange of alltoallv, arguments checked, in the message space `tag`, its local
/// copies and scratch from `red`. In place with one layout for both sides (MPI_IN_PLACE's
/// form), the exchange copies aside only the blocks it would overwrite before they leave;
/// with two layouts the send side is read from a copy of the buffer's extent.
template <transport Tr, class T, reducer R>
void alltoallv_tagged(Tr& t, int tag, const T* sendbuf, std::span<const std::size_t> send_counts,
                      std::span<const std::size_t> send_displs, T* recvbuf,
                      std::span<const std::size_t> recv_counts,
                      std::span<const std::size_t> recv_displs, bool in_place,
                      const pairwise_exchange& algo, R& red) {
  const int P = t.size();
  std::vector<exchange_block> blocks(static_cast<std::size_t>(P));
  if (in_place && std::ranges::equal(send_counts, recv_counts) &&
      std::ranges::equal(send_displs, recv_displs)) {
    for (int q = 0; q < P; ++q)
      blocks[q] = {recvbuf + recv_displs[q], recv_counts[q] * sizeof(T), recvbuf + recv_displs[q],
                   recv_counts[q] * sizeof(T)};
    algo.exchange_in_place(t, tag, std::span<const exchange_block>(blocks), red);
    return;
  }
  std::size_t extent = 0;
  if (in_place)
    for (int q = 0; q < P; ++q)
      if (send_counts[q]) extent = std::max(extent, send_displs[q] + send_counts[q]);
  auto copy = red.template allocate<T>(extent);
  if (in_place) {
    red.copy(copy.data(), sendbuf, extent);
    sendbuf = copy.data();
  }
  for (int q = 0; q < P; ++q)
    blocks[q] = {sendbuf + send_displs[q], send_counts[q] * sizeof(T), recvbuf + recv_displs[q],
                 recv_counts[q] * sizeof(T)};
  algo.exchange(t, tag, std::span<const exchange_block>(blocks), red);
}
} // namespace detail

} // namespace tcoll
