#pragma once
/// \file
/// Entry points: `allreduce`, `reduce_scatter`, `reduce_scatterv`, `allgather`, `allgatherv`,
/// `broadcast`, `reduce`, `alltoall`, `alltoallv`, `gather`, `gatherv`, `scatter`,
/// `scatterv`, `barrier` (the table of collectives, core/collective_table.hpp, and of algorithms,
/// algorithm/table.hpp).
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
#include "algorithm/bruck.hpp"
#include "algorithm/dissemination.hpp"
#include "algorithm/linear.hpp"
#include "algorithm/pairwise_exchange.hpp"
#include "algorithm/passthrough.hpp"
#include "algorithm/recursive_doubling.hpp"
#include "algorithm/recursive_halving_doubling.hpp"
#include "algorithm/ring.hpp"
#include "algorithm/select.hpp"
#include "algorithm/tagged.hpp"
#include "algorithm/visit.hpp"
#include "communicator.hpp"
#include "core/concepts.hpp"
#include "core/ops.hpp"
#include "detail/collective_scope.hpp"
#include "detail/executor.hpp"
#include "detail/validate.hpp"
#include "reduce/cpu.hpp"
#include "reduce/runtime.hpp"

namespace tcoll {

namespace detail {

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
void check_reduce_args(const T* sendbuf, const T* recvbuf, std::size_t count, int root, int rank,
                       int P) {
  check_root(root, P, "reduce", rank);
  check_count(count, 1, sizeof(T), "reduce", rank);
  check_pointer(sendbuf, count, "sendbuf", "reduce", rank);
  if (rank == root) {
    check_pointer(recvbuf, count, "recvbuf", "reduce", rank);
    check_overlap(sendbuf, count * sizeof(T), recvbuf, count * sizeof(T), recvbuf, "reduce", rank);
  }
}

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

/// The blocks of a reduce_scatterv, checked: `counts` has one entry per rank and the blocks
/// (one after another in `sendbuf`) fit in memory; returns where each block starts.
template <class T>
std::vector<std::size_t> check_reduce_scatterv_args(const T* sendbuf, T* recvbuf,
                                                    std::span<const std::size_t> counts, int rank,
                                                    int P) {
  if (counts.size() != static_cast<std::size_t>(P))
    throw invalid_argument("reduce_scatterv: recv_counts has " + std::to_string(counts.size()) +
                               " entries, the group has " + std::to_string(P) + " ranks",
                           rank);
  const std::size_t limit =
      static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / sizeof(T);
  std::vector<std::size_t> offsets(counts.size());
  std::size_t total = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    if (counts[q] > limit - total)
      throw invalid_argument("reduce_scatterv: recv_counts[0.." + std::to_string(q) +
                                 "] add up to more elements than memory can hold",
                             rank);
    offsets[q] = total;
    total += counts[q];
  }
  const std::size_t mine = counts[static_cast<std::size_t>(rank)];
  check_pointer(sendbuf, total, "sendbuf", "reduce_scatterv", rank);
  check_pointer(recvbuf, mine, "recvbuf", "reduce_scatterv", rank);
  check_overlap(sendbuf, total * sizeof(T), recvbuf, mine * sizeof(T), nullptr, "reduce_scatterv",
                rank);
  return offsets;
}

/// The blocks of an allgatherv, checked: one count and displacement per rank, this rank's
/// count equal to `send_count`, no two blocks overlapping; `sendbuf` may only be this rank's
/// own block (the in-place form). Returns the end of the last block (elements).
template <class T>
std::size_t check_allgatherv_args(const T* sendbuf, std::size_t send_count, T* recvbuf,
                                  std::span<const std::size_t> counts,
                                  std::span<const std::size_t> displs, int rank, int P) {
  const std::size_t extent =
      check_blocks(counts, displs, sizeof(T), "recv_counts", "recv_displs", rank, P, "allgatherv");
  const auto own = static_cast<std::size_t>(rank);
  if (counts[own] != send_count)
    throw invalid_argument("allgatherv: recv_counts[" + std::to_string(rank) + "] is " +
                               std::to_string(counts[own]) + " but send_count is " +
                               std::to_string(send_count),
                           rank);
  std::vector<int> by_start;
  for (int q = 0; q < P; ++q)
    if (counts[static_cast<std::size_t>(q)]) by_start.push_back(q);
  std::sort(by_start.begin(), by_start.end(), [&](int a, int b) {
    return displs[static_cast<std::size_t>(a)] < displs[static_cast<std::size_t>(b)];
  });
  for (std::size_t i = 1; i < by_start.size(); ++i) {
    const auto a = static_cast<std::size_t>(by_start[i - 1]),
               b = static_cast<std::size_t>(by_start[i]);
    if (displs[a] + counts[a] > displs[b])
      throw invalid_argument("allgatherv: the blocks of ranks " + std::to_string(a) + " and " +
                                 std::to_string(b) + " overlap in recvbuf",
                             rank, static_cast<int>(b));
  }
  check_pointer(sendbuf, send_count, "sendbuf", "allgatherv", rank);
  check_pointer(recvbuf, extent, "recvbuf", "allgatherv", rank);
  check_overlap(sendbuf, send_count * sizeof(T), recvbuf, extent * sizeof(T),
                recvbuf ? recvbuf + displs[own] : nullptr, "allgatherv", rank);
  return extent;
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

/// Checks of alltoall; returns whether it is the in-place form (sendbuf == recvbuf, the only
/// overlap allowed).
template <class T>
bool check_alltoall_args(const T* sendbuf, const T* recvbuf, std::size_t count, int rank, int P) {
  const auto all = static_cast<std::size_t>(P) * count;
  check_count(count, static_cast<std::size_t>(P), sizeof(T), "alltoall", rank);
  check_pointer(sendbuf, all, "sendbuf", "alltoall", rank);
  check_pointer(recvbuf, all, "recvbuf", "alltoall", rank);
  const bool in_place = sendbuf == recvbuf && all;
  if (!in_place)
    check_overlap(sendbuf, all * sizeof(T), recvbuf, all * sizeof(T), nullptr, "alltoall", rank);
  return in_place;
}

/// Checks of gatherv; returns the root's blocks (empty elsewhere).
template <class T>
std::vector<root_block> check_gatherv_args(const T* sendbuf, std::size_t send_count, T* recvbuf,
                                           std::span<const std::size_t> recv_counts,
                                           std::span<const std::size_t> recv_displs, int root,
                                           int rank, int P) {
  check_root(root, P, "gatherv", rank);
  check_count(send_count, 1, sizeof(T), "gatherv", rank);
  check_pointer(sendbuf, send_count, "sendbuf", "gatherv", rank);
  if (rank != root) return {};
  return root_blocks(static_cast<const T*>(recvbuf), recv_counts, recv_displs, "recv_counts",
                     "recv_displs", send_count, sendbuf, "gatherv", rank, P);
}

/// Checks of gather; returns the root's blocks (empty elsewhere).
template <class T>
std::vector<root_block> check_gather_args(const T* sendbuf, T* recvbuf, std::size_t count, int root,
                                          int rank, int P) {
  check_root(root, P, "gather", rank);
  check_count(count, static_cast<std::size_t>(P), sizeof(T), "gather", rank);
  check_pointer(sendbuf, count, "sendbuf", "gather", rank);
  if (rank != root) return {};
  const auto [counts, displs] = equal_blocks(P, count);
  return root_blocks(static_cast<const T*>(recvbuf), counts, displs, "recv_counts", "recv_displs",
                     count, sendbuf, "gather", rank, P);
}

/// Checks of scatterv; returns the root's blocks (empty elsewhere).
template <class T>
std::vector<root_block> check_scatterv_args(const T* sendbuf,
                                            std::span<const std::size_t> send_counts,
                                            std::span<const std::size_t> send_displs, T* recvbuf,
                                            std::size_t recv_count, int root, int rank, int P) {
  check_root(root, P, "scatterv", rank);
  check_count(recv_count, 1, sizeof(T), "scatterv", rank);
  check_pointer(recvbuf, recv_count, "recvbuf", "scatterv", rank);
  if (rank != root) return {};
  return root_blocks(sendbuf, send_counts, send_displs, "send_counts", "send_displs", recv_count,
                     recvbuf, "scatterv", rank, P);
}

/// Checks of scatter; returns the root's blocks (empty elsewhere).
template <class T>
std::vector<root_block> check_scatter_args(const T* sendbuf, T* recvbuf, std::size_t count,
                                           int root, int rank, int P) {
  check_root(root, P, "scatter", rank);
  check_count(count, static_cast<std::size_t>(P), sizeof(T), "scatter", rank);
  check_pointer(recvbuf, count, "recvbuf", "scatter", rank);
  if (rank != root) return {};
  const auto [counts, displs] = equal_blocks(P, count);
  return root_blocks(sendbuf, counts, displs, "send_counts", "send_displs", count, recvbuf,
                     "scatter", rank, P);
}
} // namespace detail

// Every entry point takes a `communicator` (communicator.hpp): a transport, or a machine
// composed of transports such as `hierarchical<Intra, Inter>`. It checks the arguments,
// draws the collective's message spaces (`begin_on`) and runs it with `guarded_on` (a
// failure breaks every transport the communicator uses).

/// Allreduce of `count` elements: every rank's `recvbuf` receives op over all ranks'
/// `sendbuf`. `sendbuf == recvbuf` is the in-place form. `algo` is an algorithm tuning
/// struct (`ring{}`, `recursive_doubling{}`, ..., `passthrough{}`) or `automatic{}` on a
/// transport, `hierarchical_options<...>` on a hierarchical machine.
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
void allreduce(C& c, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op = {},
               const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_allreduce_args(sendbuf, recvbuf, count, c.rank());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(
      c, [&] { detail::allreduce_on(c, tags, sendbuf, recvbuf, count, op, algo, red); });
}

/// In-place allreduce over a span.
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
void allreduce(C& c, std::span<T> data, const Op& op = {}, const Algo& algo = {}, R red = {}) {
  allreduce(c, data.data(), data.data(), data.size(), op, algo, red);
}

/// Out-of-place allreduce over spans of equal size.
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
void allreduce(C& c, std::span<const T> in, std::span<T> out, const Op& op = {},
               const Algo& algo = {}, R red = {}) {
  if (in.size() != out.size())
    throw invalid_argument("allreduce: sendbuf has " + std::to_string(in.size()) +
                               " elements but recvbuf has " + std::to_string(out.size()),
                           c.rank());
  allreduce(c, in.data(), out.data(), in.size(), op, algo, red);
}

/// Reduce-scatter (MPI_Reduce_scatter_block): `sendbuf` holds size() blocks of `count`;
/// rank r's `recvbuf` (count elements) receives op over block r of every rank. Ring, or
/// `in_segment` (the shared segment's collective area, algorithm/in_segment.hpp; the ring
/// where the transport has none); on a hierarchical machine through the group leaders.
template <communicator C, class T, class Op = sum_op, block_algorithm Algo = ring,
          reducer R = cpu_reducer>
void reduce_scatter(C& c, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op = {},
                    const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  detail::check_reduce_scatter_args(sendbuf, recvbuf, count, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(
      c, [&] { detail::reduce_scatter_on(c, tags, sendbuf, recvbuf, count, op, algo, red); });
}

/// Allgather: rank r's `sendbuf` (count elements) lands in block r of every `recvbuf`
/// (size() * count). In place when `sendbuf == recvbuf + rank * count`. Ring, or
/// `in_segment` (the collective area; the ring where the transport has none).
template <communicator C, class T, block_algorithm Algo = ring, reducer R = cpu_reducer>
void allgather(C& c, const T* sendbuf, T* recvbuf, std::size_t count, const Algo& algo = {},
               R red = {}) {
  detail::check_allgather_args(sendbuf, recvbuf, count, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] { detail::allgather_on(c, tags, sendbuf, recvbuf, count, algo, red); });
}

/// Reduce-scatter with a block of its own size per rank (MPI_Reduce_scatter): `sendbuf`
/// holds the P blocks one after another, block q of `recv_counts[q]` elements; rank r's
/// `recvbuf` (`recv_counts[r]` elements) receives op over block r of every rank.
/// `recv_counts` is the same on every rank (a mismatch fails in the transport). Ring on a
/// transport; through the group leaders on a hierarchical machine.
template <communicator C, class T, class Op = sum_op, reducer R = cpu_reducer>
void reduce_scatterv(C& c, const T* sendbuf, T* recvbuf, std::span<const std::size_t> recv_counts,
                     const Op& op = {}, const ring& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_order<Op, ring>();
  const std::vector<std::size_t> offsets =
      detail::check_reduce_scatterv_args(sendbuf, recvbuf, recv_counts, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] {
    detail::reduce_scatterv_on(c, tags, sendbuf, recvbuf, recv_counts,
                               std::span<const std::size_t>(offsets), op, algo, red);
  });
}

/// Allgather with a block of its own size per rank (MPI_Allgatherv): rank q's `send_count`
/// elements land at [recv_displs[q], + recv_counts[q]) of every `recvbuf` (recv_counts[q]
/// is q's send_count: checked on this rank for its own, a mismatch elsewhere fails in the
/// transport). Blocks may not overlap; elements of `recvbuf` outside every block are not
/// written. In place when `sendbuf == recvbuf + recv_displs[rank]`. Ring on a transport;
/// through the group leaders on a hierarchical machine.
template <communicator C, class T, reducer R = cpu_reducer>
void allgatherv(C& c, const T* sendbuf, std::size_t send_count, T* recvbuf,
                std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                const ring& algo = {}, R red = {}) {
  const std::size_t extent = detail::check_allgatherv_args(
      sendbuf, send_count, recvbuf, recv_counts, recv_displs, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] {
    detail::allgatherv_on(c, tags, sendbuf, recvbuf, recv_counts, recv_displs, extent, algo, red);
  });
}

/// Broadcast of `count` elements of `buffer` from `root`: binomial tree, or `in_segment`
/// (the shared segment's collective area, algorithm/in_segment.hpp).
template <communicator C, class T, broadcast_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
void broadcast(C& c, T* buffer, std::size_t count, int root, const Algo& algo = {}, R red = {}) {
  detail::check_broadcast_args(buffer, count, root, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] { detail::broadcast_on(c, tags, buffer, count, root, algo, red); });
}

/// Reduce to `root`: root's `recvbuf` receives op over every rank's `sendbuf`; `recvbuf`
/// is ignored (may be null) elsewhere. Binomial tree (a non-commutative op is reduced in
/// rank order to rank 0 and forwarded to the root), or `in_segment` (the collective area,
/// in rank order; the tree where the transport has none).
template <communicator C, class T, class Op = sum_op, reduce_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
void reduce(C& c, const T* sendbuf, T* recvbuf, std::size_t count, int root, const Op& op = {},
            const Algo& algo = {}, R red = {}) {
  detail::check_support<R, Op, T>();
  detail::check_reduce_args(sendbuf, recvbuf, count, root, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(
      c, [&] { detail::reduce_on(c, tags, sendbuf, recvbuf, count, root, op, algo, red); });
}

/// All-to-all with a block of its own size for every pair (MPI_Alltoallv): elements
/// [send_displs[q], + send_counts[q]) of `sendbuf` go to rank q, which receives them at
/// [recv_displs[r], + recv_counts[r]) of its `recvbuf` (r this rank); the two sides' counts
/// of a pair must agree (a mismatch fails in the transport, naming the peer). Elements of
/// `recvbuf` outside every block are not written. `sendbuf == recvbuf` is the in-place
/// form (the send side is read from a copy); other overlap is an error. Memory: see
/// `alltoall`. Pairwise exchange on a transport. On a hierarchical machine as `alltoall`
/// goes there (through the peers where the groups have one size, else through the group
/// leaders); the counts travel with the data there, and a mismatch throws
/// `invalid_argument` naming the peer.
template <communicator C, class T, reducer R = cpu_reducer>
void alltoallv(C& c, const T* sendbuf, std::span<const std::size_t> send_counts,
               std::span<const std::size_t> send_displs, T* recvbuf,
               std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
               const pairwise_exchange& algo = {}, R red = {}) {
  const bool in_place = detail::check_alltoallv_args(sendbuf, send_counts, send_displs, recvbuf,
                                                     recv_counts, recv_displs, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] {
    detail::alltoallv_on(c, tags, sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                         recv_displs, in_place, algo, red);
  });
}

/// All-to-all (MPI_Alltoall): block q of `sendbuf` (`count` elements) goes to rank q, which
/// receives it as block r of its `recvbuf` (r this rank; size() * count elements each).
/// `sendbuf == recvbuf` is the in-place form; other overlap is an error.
/// On a transport `algo` runs: by default `alltoall_by_size` (Bruck for short blocks on
/// many ranks, the pairwise exchange otherwise; `TCOLL_ALLTOALL_ALGO`), or `bruck` or
/// `pairwise_exchange` by name. On a hierarchical machine through the peers where every
/// group has the same size (algorithm/via_peers.hpp), else through the group leaders, which
/// exchange uneven group blocks pairwise (`hierarchical_machine_options::alltoall`).
/// Memory: `red` makes the local copies and scratch, as for allgather: host memory with the
/// CPU reducer; device memory on a stream-ordered transport (NCCL, device_team) with a
/// device reducer on the transport's stream (`cuda_reducer{t.stream()}`), where the call
/// enqueues its work and returns. A hierarchical machine stages blocks in host memory and
/// takes a host reducer only (a compile-time error otherwise).
template <communicator C, class T, alltoall_algorithm A = alltoall_by_size, reducer R = cpu_reducer>
void alltoall(C& c, const T* sendbuf, T* recvbuf, std::size_t count, const A& algo = {},
              R red = {}) {
  const bool in_place = detail::check_alltoall_args(sendbuf, recvbuf, count, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(
      c, [&] { detail::alltoall_on(c, tags, sendbuf, recvbuf, count, in_place, algo, red); });
}

/// Gather with a block of its own size per rank (MPI_Gatherv): every rank's `send_count`
/// elements of `sendbuf` land at [recv_displs[q], + recv_counts[q]) of the root's `recvbuf`
/// (rank q's, recv_counts[q] == q's send_count; a mismatch fails in the transport). The
/// receive arguments are read at the root only. In place at the root when `sendbuf ==
/// recvbuf + recv_displs[root]`. Memory: see `alltoall`. Linear on a transport; through
/// the group leaders on a hierarchical machine (the counts travel with the data there; the
/// root checks them, naming the peer of a mismatch).
template <communicator C, class T, reducer R = cpu_reducer>
void gatherv(C& c, const T* sendbuf, std::size_t send_count, T* recvbuf,
             std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
             int root, const linear& algo = {}, R red = {}) {
  const std::vector<root_block> blocks = detail::check_gatherv_args(
      sendbuf, send_count, recvbuf, recv_counts, recv_displs, root, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] {
    detail::gatherv_on(c, tags, sendbuf, send_count, recvbuf, recv_counts, recv_displs, root,
                       blocks, algo, red);
  });
}

/// Gather (MPI_Gather): every rank's `count` elements land in block r of the root's
/// `recvbuf` (size() * count; read at the root only). In place at the root when `sendbuf ==
/// recvbuf + root * count`. Memory: see `alltoall`. Linear on a transport; through the
/// group leaders on a hierarchical machine.
template <communicator C, class T, reducer R = cpu_reducer>
void gather(C& c, const T* sendbuf, T* recvbuf, std::size_t count, int root,
            const linear& algo = {}, R red = {}) {
  const std::vector<root_block> blocks =
      detail::check_gather_args(sendbuf, recvbuf, count, root, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(
      c, [&] { detail::gather_on(c, tags, sendbuf, recvbuf, count, root, blocks, algo, red); });
}

/// Scatter with a block of its own size per rank (MPI_Scatterv): the root sends
/// [send_displs[q], + send_counts[q]) of its `sendbuf` to rank q, which receives
/// `recv_count` elements into `recvbuf` (send_counts[q] == q's recv_count; a mismatch fails
/// in the transport). The send arguments are read at the root only. In place at the root
/// when `recvbuf == sendbuf + send_displs[root]`. Memory: see `alltoall`. Linear on a
/// transport; through the group leaders on a hierarchical machine (the counts travel with
/// the data there; each rank checks its own, naming the root on a mismatch).
template <communicator C, class T, reducer R = cpu_reducer>
void scatterv(C& c, const T* sendbuf, std::span<const std::size_t> send_counts,
              std::span<const std::size_t> send_displs, T* recvbuf, std::size_t recv_count,
              int root, const linear& algo = {}, R red = {}) {
  const std::vector<root_block> blocks = detail::check_scatterv_args(
      sendbuf, send_counts, send_displs, recvbuf, recv_count, root, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] {
    detail::scatterv_on(c, tags, sendbuf, send_counts, send_displs, recvbuf, recv_count, root,
                        blocks, algo, red);
  });
}

/// Scatter (MPI_Scatter): block q (`count` elements) of the root's `sendbuf` (size() *
/// count; read at the root only) goes to rank q's `recvbuf`. In place at the root when
/// `recvbuf == sendbuf + root * count`. Memory: see `alltoall`. Linear on a transport;
/// through the group leaders on a hierarchical machine.
template <communicator C, class T, reducer R = cpu_reducer>
void scatter(C& c, const T* sendbuf, T* recvbuf, std::size_t count, int root,
             const linear& algo = {}, R red = {}) {
  const std::vector<root_block> blocks =
      detail::check_scatter_args(sendbuf, recvbuf, count, root, c.rank(), c.size());
  const auto tags = detail::begin_on(c);
  detail::guarded_on(
      c, [&] { detail::scatter_on(c, tags, sendbuf, recvbuf, count, root, blocks, algo, red); });
}

/// Barrier (MPI_Barrier): returns on a rank only after every rank of `c` has called it.
/// A collective like the others: it takes the next message space of `c`, so it is ordered
/// with them. Dissemination (ceil(log2 P) rounds of one-byte messages), or `in_segment`
/// (one flag per rank in the collective area; dissemination where the transport has none);
/// on a hierarchical machine inside the groups, among the leaders, inside the groups again.
/// The one-byte tokens live where `red` keeps memory: on NCCL pass the device reducer
/// (`cuda_reducer{t.stream()}`), as for every collective there. On a stream-ordered
/// transport the barrier ends by synchronizing `red`'s stream, so it also waits for the
/// work this rank enqueued before it.
template <communicator C, barrier_algorithm Algo = dissemination, reducer R = cpu_reducer>
void barrier(C& c, const Algo& algo = {}, R red = {}) {
  const auto tags = detail::begin_on(c);
  detail::guarded_on(c, [&] { detail::barrier_on(c, tags, algo, red); });
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
template <class Comm, block_algorithm Algo = ring>
void reduce_scatter(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count,
                    scalar_type type, reduce_kind kind, const Algo& algo = {}) {
  const runtime_op op(type, kind, t.rank());
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    reduce_scatter(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, op, algo);
  });
  if (kind == reduce_kind::avg) finalize_average(type, recvbuf, count, t.size());
}

/// Reduce of `count` elements of `type` under `kind` to `root` (see the typed one).
template <class Comm, reduce_algorithm Algo = binomial_tree>
void reduce(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, int root,
            scalar_type type, reduce_kind kind, const Algo& algo = {}) {
  const runtime_op op(type, kind, t.rank());
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    reduce(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, root, op, algo);
  });
  if (kind == reduce_kind::avg && t.rank() == root)
    finalize_average(type, recvbuf, count, t.size());
}

// The data-movement collectives take no op: their runtime-typed forms are the typed calls on
// the element size of `type` (any type; counts in elements, as NCCL's and MPI's).

/// Allgather of blocks of `count` elements of `type` (see the typed one).
template <class Comm, block_algorithm Algo = ring>
void allgather(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, scalar_type type,
               const Algo& algo = {}) {
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    allgather(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, algo);
  });
}

/// Broadcast of `count` elements of `type` from `root` (see the typed one).
template <class Comm, broadcast_algorithm Algo = binomial_tree>
void broadcast(Comm& t, void* buffer, std::size_t count, int root, scalar_type type,
               const Algo& algo = {}) {
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    broadcast(t, static_cast<E*>(buffer), count, root, algo);
  });
}

/// All-to-all of blocks of `count` elements of `type` (see the typed one).
template <class Comm, alltoall_algorithm A = alltoall_by_size>
void alltoall(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, scalar_type type,
              const A& algo = {}) {
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    alltoall(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, algo);
  });
}

/// Gather of `count` elements of `type` per rank to `root` (see the typed one).
template <class Comm>
void gather(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, int root,
            scalar_type type) {
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    gather(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, root);
  });
}

/// Scatter of `count` elements of `type` per rank from `root` (see the typed one).
template <class Comm>
void scatter(Comm& t, const void* sendbuf, void* recvbuf, std::size_t count, int root,
             scalar_type type) {
  visit_element_size(size_of(type), [&]<class E>(type_tag<E>) {
    scatter(t, static_cast<const E*>(sendbuf), static_cast<E*>(recvbuf), count, root);
  });
}

} // namespace tcoll
