#pragma once
/// \file
/// Entry points: `allreduce`, `reduce_scatter`, `allgather`, `broadcast`, `reduce`,
/// `alltoall`, `alltoallv`, `gather`, `gatherv`, `scatter`, `scatterv`, `barrier`.
/// Each checks its arguments (errors name the argument and the rank) and forwards to an
/// algorithm's step description run by the generic executor (all-to-all, gather, scatter,
/// barrier: to their algorithm's own sends and receives). An out-of-place call never writes
/// its input, also when it fails.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "algorithm/binomial_tree.hpp"
#include "algorithm/dissemination.hpp"
#include "algorithm/linear.hpp"
#include "algorithm/pairwise_exchange.hpp"
#include "algorithm/passthrough.hpp"
#include "algorithm/recursive_doubling.hpp"
#include "algorithm/recursive_halving_doubling.hpp"
#include "algorithm/ring.hpp"
#include "algorithm/select.hpp"
#include "algorithm/visit.hpp"
#include "core/concepts.hpp"
#include "core/ops.hpp"
#include "detail/collective_scope.hpp"
#include "detail/executor.hpp"
#include "detail/validate.hpp"
#include "reduce/cpu.hpp"
#include "reduce/runtime.hpp"

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
  } else {
    static_assert(allreduce_algorithm<Algo>, "tcoll: not an allreduce algorithm");
    check_order<Op, Algo>();
    layout L{t.rank(), t.size(), count, sizeof(T), 0, sendbuf == recvbuf};
    executor<Tr, R, T, Op> ex(t, red, op, sendbuf, count, recvbuf, count, tag);
    algo.allreduce(ex, L);
  }
}

/// Reduce-scatter in the message space `tag`, arguments already checked.
template <transport Tr, class T, class Op, reducer R>
void reduce_scatter_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                           const Op& op, const ring& algo, R& red) {
  const int P = t.size();
  layout L{t.rank(), P, count, sizeof(T), 0, false};
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, count * P, recvbuf, count, tag);
  algo.reduce_scatter(ex, L);
}

/// Allgather in the message space `tag`, arguments already checked.
template <transport Tr, class T, reducer R>
void allgather_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                      const ring& algo, R& red) {
  const int P = t.size();
  layout L{t.rank(), P, count, sizeof(T), 0, false};
  executor<Tr, R, T, no_reduce_op> ex(t, red, no_reduce_op{}, sendbuf, count, recvbuf, count * P,
                                      tag);
  algo.allgather(ex, L);
}

/// Broadcast in the message space `tag`, arguments already checked.
template <transport Tr, class T, reducer R>
void broadcast_tagged(Tr& t, int tag, T* buffer, std::size_t count, int root,
                      const binomial_tree& algo, R& red) {
  layout L{t.rank(), t.size(), count, sizeof(T), root, true};
  executor<Tr, R, T, no_reduce_op> ex(t, red, no_reduce_op{}, buffer, count, buffer, count, tag);
  algo.broadcast(ex, L);
}

/// Reduce in the message space `tag`, arguments already checked (see `reduce`).
template <transport Tr, class T, class Op, reducer R>
void reduce_tagged(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                   const Op& op, const binomial_tree& algo, R& red) {
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

/// Argument checks of reduce_scatter.
template <class T>
void check_reduce_scatter_args(const T* sendbuf, T* recvbuf, std::size_t count, int rank, int P) {
  check_count(count, P, sizeof(T), "reduce_scatter", rank);
  check_pointer(sendbuf, count * P, "sendbuf", "reduce_scatter", rank);
  check_pointer(recvbuf, count, "recvbuf", "reduce_scatter", rank);
  check_overlap(sendbuf, count * P * sizeof(T), recvbuf, count * sizeof(T), nullptr,
                "reduce_scatter", rank);
}

/// Argument checks of allgather.
template <class T>
void check_allgather_args(const T* sendbuf, T* recvbuf, std::size_t count, int rank, int P) {
  check_count(count, P, sizeof(T), "allgather", rank);
  check_pointer(sendbuf, count, "sendbuf", "allgather", rank);
  check_pointer(recvbuf, count * P, "recvbuf", "allgather", rank);
  check_overlap(sendbuf, count * sizeof(T), recvbuf, count * P * sizeof(T),
                recvbuf ? recvbuf + std::size_t(rank) * count : nullptr, "allgather", rank);
}

/// Argument checks of broadcast.
template <class T>
void check_broadcast_args(const T* buffer, std::size_t count, int root, int rank, int P) {
  check_root(root, P, "broadcast", rank);
  check_count(count, 1, sizeof(T), "broadcast", rank);
  check_pointer(buffer, count, "buffer", "broadcast", rank);
}

/// Argument checks of allreduce (they name the argument and the rank).
template <class T>
void check_allreduce_args(const T* sendbuf, T* recvbuf, std::size_t count, int rank) {
  check_count(count, 1, sizeof(T), "allreduce", rank);
  check_pointer(sendbuf, count, "sendbuf", "allreduce", rank);
  check_pointer(recvbuf, count, "recvbuf", "allreduce", rank);
  check_overlap(sendbuf, count * sizeof(T), recvbuf, count * sizeof(T), recvbuf, "allreduce", rank);
}

/// Where each block of an all-to-all buffer lies: elements [displs[q], displs[q] + counts[q]).
/// Checks the spans' sizes and that no block runs past what a ptrdiff_t can address;
/// returns the buffer's extent in elements (the end of its last block).
inline std::size_t check_blocks(std::span<const std::size_t> counts,
                                std::span<const std::size_t> displs, std::size_t elem_bytes,
                                const char* counts_arg, const char* displs_arg, int rank, int P,
                                const char* what = "alltoallv") {
  auto size_error = [&](const char* arg, std::size_t n) {
    return invalid_argument(std::string(what) + ": " + arg + " has " + std::to_string(n) +
                                " entries, the group has " + std::to_string(P) + " ranks",
                            rank);
  };
  if (counts.size() != static_cast<std::size_t>(P)) throw size_error(counts_arg, counts.size());
  if (displs.size() != static_cast<std::size_t>(P)) throw size_error(displs_arg, displs.size());
  const std::size_t limit =
      static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / elem_bytes;
  std::size_t extent = 0;
  for (int q = 0; q < P; ++q) {
    const std::size_t c = counts[q], d = displs[q];
    if (c > limit || d > limit - c)
      throw invalid_argument(std::string(what) + ": " + counts_arg + "[" + std::to_string(q) +
                                 "] + " + displs_arg + "[" + std::to_string(q) +
                                 "] is more elements than memory can hold",
                             rank, q);
    if (c) extent = std::max(extent, d + c);
  }
  return extent;
}

/// Checks of alltoallv (named after MPI's arguments); sets `in_place` when sendbuf ==
/// recvbuf, the only overlap allowed.
template <class T>
bool check_alltoallv_args(const T* sendbuf, std::span<const std::size_t> send_counts,
                          std::span<const std::size_t> send_displs, const T* recvbuf,
                          std::span<const std::size_t> recv_counts,
                          std::span<const std::size_t> recv_displs, int rank, int P) {
  const std::size_t send_extent =
      check_blocks(send_counts, send_displs, sizeof(T), "send_counts", "send_displs", rank, P);
  const std::size_t recv_extent =
      check_blocks(recv_counts, recv_displs, sizeof(T), "recv_counts", "recv_displs", rank, P);
  check_pointer(sendbuf, send_extent, "sendbuf", "alltoallv", rank);
  check_pointer(recvbuf, recv_extent, "recvbuf", "alltoallv", rank);
  const auto own = static_cast<std::size_t>(rank);
  if (send_counts[own] != recv_counts[own])
    throw invalid_argument("alltoallv: send_counts[" + std::to_string(rank) + "] is " +
                               std::to_string(send_counts[own]) + " but recv_counts[" +
                               std::to_string(rank) + "] is " + std::to_string(recv_counts[own]) +
                               " (this rank's block to itself)",
                           rank);
  const bool in_place = sendbuf == recvbuf && send_extent && recv_extent;
  if (!in_place)
    check_overlap(sendbuf, send_extent * sizeof(T), recvbuf, recv_extent * sizeof(T), nullptr,
                  "alltoallv", rank);
  return in_place;
}

/// The exchange of alltoallv, arguments checked, in the message space `tag`. In place, the
/// send side is read from a copy of the buffer's extent.
template <transport Tr, class T>
void alltoallv_tagged(Tr& t, int tag, const T* sendbuf, std::span<const std::size_t> send_counts,
                      std::span<const std::size_t> send_displs, T* recvbuf,
                      std::span<const std::size_t> recv_counts,
                      std::span<const std::size_t> recv_displs, bool in_place,
                      const pairwise_exchange& algo) {
  const int P = t.size();
  std::unique_ptr<T[]> copy;
  if (in_place) {
    std::size_t extent = 0;
    for (int q = 0; q < P; ++q)
      if (send_counts[q]) extent = std::max(extent, send_displs[q] + send_counts[q]);
    copy.reset(new T[extent]);
    std::memcpy(copy.get(), sendbuf, extent * sizeof(T));
    sendbuf = copy.get();
  }
  std::vector<exchange_block> blocks(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q)
    blocks[q] = {sendbuf + send_displs[q], send_counts[q] * sizeof(T), recvbuf + recv_displs[q],
                 recv_counts[q] * sizeof(T)};
  algo.exchange(t, tag, std::span<const exchange_block>(blocks));
}

/// The root's blocks of a gatherv/scatterv, checked: `buffer` with `counts`/`displs`
/// (elements of T), one block per rank; `own_count` is what the root itself contributes
/// (gather) or takes (scatter), which must equal its own block's count. The root's other
/// buffer (`other`, `own_count` elements) may not overlap the blocks unless it is exactly
/// its own block (the in-place form).
template <class T>
std::vector<root_block> root_blocks(const T* buffer, std::span<const std::size_t> counts,
                                    std::span<const std::size_t> displs, const char* counts_arg,
                                    const char* displs_arg, std::size_t own_count,
                                    const void* other, const char* what, int rank, int P) {
  const std::size_t extent =
      check_blocks(counts, displs, sizeof(T), counts_arg, displs_arg, rank, P, what);
  check_pointer(buffer, extent, "the root's buffer", what, rank);
  const auto own = static_cast<std::size_t>(rank);
  if (counts[own] != own_count)
    throw invalid_argument(std::string(what) + ": " + counts_arg + "[" + std::to_string(rank) +
                               "] is " + std::to_string(counts[own]) + " but the root's own " +
                               "count is " + std::to_string(own_count),
                           rank);
  const T* own_at = buffer + displs[own];
  check_overlap(other, own_count * sizeof(T), buffer, extent * sizeof(T), own_at, what, rank);
  std::vector<root_block> blocks(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q)
    blocks[q] = {const_cast<T*>(buffer) + displs[q], counts[q] * sizeof(T)};
  return blocks;
}
} // namespace detail

/// Allreduce of `count` elements: every rank's `recvbuf` receives op over all ranks'
/// `sendbuf`. `sendbuf == recvbuf` is the in-place form. `algo` is an algorithm tuning
/// struct (`ring{}`, `recursive_doubling{}`, ..., `passthrough{}`) or `automatic{}`.
/// Runs in the next message space of `t`; a failure breaks `t` (see collective_context).
template <transport Tr, class T, class Op = sum_op, class Algo = automatic, reducer R = cpu_reducer>
void allreduce(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op = {},
               const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_allreduce_args(sendbuf, recvbuf, count, t.rank());
  const int tag = detail::begin_collective(t);
  detail::guarded(
      t, [&] { detail::allreduce_tagged(t, tag, sendbuf, recvbuf, count, op, algo, red); });
}

/// In-place allreduce over a span.
template <transport Tr, class T, class Op = sum_op, class Algo = automatic, reducer R = cpu_reducer>
void allreduce(Tr& t, std::span<T> data, const Op& op = {}, const Algo& algo = {}, R red = {}) {
  allreduce(t, data.data(), data.data(), data.size(), op, algo, red);
}

/// Out-of-place allreduce over spans of equal size.
template <transport Tr, class T, class Op = sum_op, class Algo = automatic, reducer R = cpu_reducer>
void allreduce(Tr& t, std::span<const T> in, std::span<T> out, const Op& op = {},
               const Algo& algo = {}, R red = {}) {
  if (in.size() != out.size())
    throw invalid_argument("allreduce: sendbuf has " + std::to_string(in.size()) +
                               " elements but recvbuf has " + std::to_string(out.size()),
                           t.rank());
  allreduce(t, in.data(), out.data(), in.size(), op, algo, red);
}

/// Reduce-scatter (MPI_Reduce_scatter_block): `sendbuf` holds size() blocks of `count`;
/// rank r's `recvbuf` (count elements) receives op over block r of every rank. Ring.
template <transport Tr, class T, class Op = sum_op, reducer R = cpu_reducer>
void reduce_scatter(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op = {},
                    const ring& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  detail::check_reduce_scatter_args(sendbuf, recvbuf, count, t.rank(), t.size());
  const int tag = detail::begin_collective(t);
  detail::guarded(
      t, [&] { detail::reduce_scatter_tagged(t, tag, sendbuf, recvbuf, count, op, algo, red); });
}

/// Allgather: rank r's `sendbuf` (count elements) lands in block r of every `recvbuf`
/// (size() * count). In place when `sendbuf == recvbuf + rank * count`. Ring.
template <transport Tr, class T, reducer R = cpu_reducer>
void allgather(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, const ring& algo = {},
               R red = {}) {
  detail::check_allgather_args(sendbuf, recvbuf, count, t.rank(), t.size());
  const int tag = detail::begin_collective(t);
  detail::guarded(t, [&] { detail::allgather_tagged(t, tag, sendbuf, recvbuf, count, algo, red); });
}

/// Broadcast of `count` elements of `buffer` from `root` (binomial tree).
template <transport Tr, class T, reducer R = cpu_reducer>
void broadcast(Tr& t, T* buffer, std::size_t count, int root, const binomial_tree& algo = {},
               R red = {}) {
  detail::check_broadcast_args(buffer, count, root, t.rank(), t.size());
  const int tag = detail::begin_collective(t);
  detail::guarded(t, [&] { detail::broadcast_tagged(t, tag, buffer, count, root, algo, red); });
}

/// Reduce to `root`: root's `recvbuf` receives op over every rank's `sendbuf`; `recvbuf`
/// is ignored (may be null) elsewhere. Binomial tree; a non-commutative op is reduced in
/// rank order to rank 0 and forwarded to the root.
template <transport Tr, class T, class Op = sum_op, reducer R = cpu_reducer>
void reduce(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, int root, const Op& op = {},
            const binomial_tree& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  const int rank = t.rank(), P = t.size();
  detail::check_root(root, P, "reduce", rank);
  detail::check_count(count, 1, sizeof(T), "reduce", rank);
  detail::check_pointer(sendbuf, count, "sendbuf", "reduce", rank);
  const bool is_root = rank == root;
  if (is_root) {
    detail::check_pointer(recvbuf, count, "recvbuf", "reduce", rank);
    detail::check_overlap(sendbuf, count * sizeof(T), recvbuf, count * sizeof(T), recvbuf, "reduce",
                          rank);
  }
  const int tag = detail::begin_collective(t);
  detail::guarded(
      t, [&] { detail::reduce_tagged(t, tag, sendbuf, recvbuf, count, root, op, algo, red); });
}

/// All-to-all with a block of its own size for every pair (MPI_Alltoallv): elements
/// [send_displs[q], + send_counts[q]) of `sendbuf` go to rank q, which receives them at
/// [recv_displs[r], + recv_counts[r]) of its `recvbuf` (r this rank); the two sides' counts
/// of a pair must agree (a mismatch fails in the transport, naming the peer). Elements of
/// `recvbuf` outside every block are not written. `sendbuf == recvbuf` is the in-place
/// form (the send side is read from a copy); other overlap is an error. Pairwise exchange.
template <transport Tr, class T>
void alltoallv(Tr& t, const T* sendbuf, std::span<const std::size_t> send_counts,
               std::span<const std::size_t> send_displs, T* recvbuf,
               std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
               const pairwise_exchange& algo = {}) {
  const bool in_place = detail::check_alltoallv_args(sendbuf, send_counts, send_displs, recvbuf,
                                                     recv_counts, recv_displs, t.rank(), t.size());
  const int tag = detail::begin_collective(t);
  detail::guarded(t, [&] {
    detail::alltoallv_tagged(t, tag, sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                             recv_displs, in_place, algo);
  });
}

/// All-to-all (MPI_Alltoall): block q of `sendbuf` (`count` elements) goes to rank q, which
/// receives it as block r of its `recvbuf` (r this rank; size() * count elements each).
/// `sendbuf == recvbuf` is the in-place form. Pairwise exchange.
template <transport Tr, class T>
void alltoall(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
              const pairwise_exchange& algo = {}) {
  const int P = t.size();
  detail::check_count(count, static_cast<std::size_t>(P), sizeof(T), "alltoall", t.rank());
  std::vector<std::size_t> counts(static_cast<std::size_t>(P), count), displs(counts.size());
  for (int q = 0; q < P; ++q) displs[q] = static_cast<std::size_t>(q) * count;
  alltoallv(t, sendbuf, counts, displs, recvbuf, counts, displs, algo);
}

/// Gather with a block of its own size per rank (MPI_Gatherv): every rank's `send_count`
/// elements of `sendbuf` land at [recv_displs[q], + recv_counts[q]) of the root's `recvbuf`
/// (rank q's, recv_counts[q] == q's send_count; a mismatch fails in the transport). The
/// receive arguments are read at the root only. In place at the root when `sendbuf ==
/// recvbuf + recv_displs[root]`. Linear.
template <transport Tr, class T>
void gatherv(Tr& t, const T* sendbuf, std::size_t send_count, T* recvbuf,
             std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
             int root, const linear& algo = {}) {
  const int rank = t.rank(), P = t.size();
  detail::check_root(root, P, "gatherv", rank);
  detail::check_count(send_count, 1, sizeof(T), "gatherv", rank);
  detail::check_pointer(sendbuf, send_count, "sendbuf", "gatherv", rank);
  std::vector<root_block> blocks;
  if (rank == root)
    blocks =
        detail::root_blocks(static_cast<const T*>(recvbuf), recv_counts, recv_displs, "recv_counts",
                            "recv_displs", send_count, sendbuf, "gatherv", rank, P);
  const int tag = detail::begin_collective(t);
  detail::guarded(t, [&] {
    algo.gather(t, tag, root, sendbuf, send_count * sizeof(T), std::span<const root_block>(blocks));
  });
}

/// Gather (MPI_Gather): every rank's `count` elements land in block r of the root's
/// `recvbuf` (size() * count; read at the root only). In place at the root when `sendbuf ==
/// recvbuf + root * count`. Linear.
template <transport Tr, class T>
void gather(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, int root,
            const linear& algo = {}) {
  const int P = t.size();
  detail::check_count(count, static_cast<std::size_t>(P), sizeof(T), "gather", t.rank());
  std::vector<std::size_t> counts(static_cast<std::size_t>(P), count), displs(counts.size());
  for (int q = 0; q < P; ++q) displs[q] = static_cast<std::size_t>(q) * count;
  gatherv(t, sendbuf, count, recvbuf, counts, displs, root, algo);
}

/// Scatter with a block of its own size per rank (MPI_Scatterv): the root sends
/// [send_displs[q], + send_counts[q]) of its `sendbuf` to rank q, which receives
/// `recv_count` elements into `recvbuf` (send_counts[q] == q's recv_count; a mismatch fails
/// in the transport). The send arguments are read at the root only. In place at the root
/// when `recvbuf == sendbuf + send_displs[root]`. Linear.
template <transport Tr, class T>
void scatterv(Tr& t, const T* sendbuf, std::span<const std::size_t> send_counts,
              std::span<const std::size_t> send_displs, T* recvbuf, std::size_t recv_count,
              int root, const linear& algo = {}) {
  const int rank = t.rank(), P = t.size();
  detail::check_root(root, P, "scatterv", rank);
  detail::check_count(recv_count, 1, sizeof(T), "scatterv", rank);
  detail::check_pointer(recvbuf, recv_count, "recvbuf", "scatterv", rank);
  std::vector<root_block> blocks;
  if (rank == root)
    blocks = detail::root_blocks(sendbuf, send_counts, send_displs, "send_counts", "send_displs",
                                 recv_count, recvbuf, "scatterv", rank, P);
  const int tag = detail::begin_collective(t);
  detail::guarded(t, [&] {
    algo.scatter(t, tag, root, recvbuf, recv_count * sizeof(T),
                 std::span<const root_block>(blocks));
  });
}

/// Scatter (MPI_Scatter): block q (`count` elements) of the root's `sendbuf` (size() *
/// count; read at the root only) goes to rank q's `recvbuf`. In place at the root when
/// `recvbuf == sendbuf + root * count`. Linear.
template <transport Tr, class T>
void scatter(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, int root,
             const linear& algo = {}) {
  const int P = t.size();
  detail::check_count(count, static_cast<std::size_t>(P), sizeof(T), "scatter", t.rank());
  std::vector<std::size_t> counts(static_cast<std::size_t>(P), count), displs(counts.size());
  for (int q = 0; q < P; ++q) displs[q] = static_cast<std::size_t>(q) * count;
  scatterv(t, sendbuf, counts, displs, recvbuf, count, root, algo);
}

/// Barrier (MPI_Barrier): returns on a rank only after every rank of `t` has called it.
/// A collective like the others: it takes the next message space of `t`, so it is ordered
/// with them. Dissemination (ceil(log2 P) rounds of one-byte messages).
template <transport Tr>
void barrier(Tr& t, const dissemination& algo = {}) {
  const int tag = detail::begin_collective(t);
  detail::guarded(t, [&] { algo.barrier(t, tag); });
}

// Runtime-typed entry points: the element type and the reduction are values (NCCL's
// ncclAllReduce, MPI_Allreduce). Each algorithm is instantiated once per element size on
// `raw_element<N>` and reduces through `runtime_op`'s kernels, with the typed path's results
// bit for bit; host memory and the CPU reducer only. `Comm` is a transport or a
// two-level machine (`hierarchical`), as for the typed calls.

/// Allreduce of `count` elements of `type` under `kind` (see the typed `allreduce`).
/// Throws `invalid_argument` where `kind` does not apply to `type`.
template <class Comm, class Algo = automatic>
void allreduce(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, scalar_type type,
               reduce_kind kind, const Algo& algo = {}) {
  const runtime_op op(type, kind, t.rank());
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    allreduce(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, op, algo);
  });
  if (kind == reduce_kind::avg) finalize_average(type, recvbuf, count, t.size());
}

/// Reduce-scatter of blocks of `count` elements of `type` under `kind` (see the typed one).
template <class Comm>
void reduce_scatter(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count,
                    scalar_type type, reduce_kind kind, const ring& algo = {}) {
  const runtime_op op(type, kind, t.rank());
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    reduce_scatter(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, op, algo);
  });
  if (kind == reduce_kind::avg) finalize_average(type, recvbuf, count, t.size());
}

/// Reduce of `count` elements of `type` under `kind` to `root` (see the typed one).
template <class Comm>
void reduce(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, int root,
            scalar_type type, reduce_kind kind, const binomial_tree& algo = {}) {
  const runtime_op op(type, kind, t.rank());
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    reduce(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, root, op, algo);
  });
  if (kind == reduce_kind::avg && t.rank() == root)
    finalize_average(type, recvbuf, count, t.size());
}

} // namespace tcoll
