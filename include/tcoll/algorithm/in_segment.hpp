#pragma once
/// \file
/// `in_segment`: the allreduce (and the broadcast, reduce, allgather, reduce-scatter and
/// barrier below) of the processes of one node through the collective area of their shared
/// segment (`shm_segment_area`, transport/shm/area.hpp) instead of messages, for any number
/// of ranks (DeepSpeed's shm.cpp, MPICH's release_gather and Open MPI's xhc move data the
/// same way). Every rank copies its input into its own part of the area once; then, by size:
///  - **lines** (up to `shm_options::area_lines` * 48 bytes): the copy goes into flagged
///    lines, data and ordinal in one cache line, so a reader needs no separate signal; every
///    rank reads every rank's lines and reduces them all.
///  - **whole** (up to `slices_from_bytes`): the copy goes into the bulk buffer, published
///    by one flag; every rank reduces every rank's whole copy.
///  - **slices** (above): every rank reduces one slice of all copies and publishes it in
///    place of its own copy's slice; every rank then copies the other slices out.
///    Calls larger than the bulk buffer go in pieces, one ordinal each.
/// Every result element is the reduction of ranks 0, 1, ..., P-1 in that order, computed
/// by the same code on every rank (lines, whole) or once (slices): results are bitwise
/// identical on every rank and operand order is kept (non-commutative ops are allowed).
/// The other collectives of the area, the same way (lines when the data fits them, the bulk
/// buffer, pieces beyond it):
///  - **reduce**: in pieces (`in_segment::reduce_piece_bytes`): every rank but the root copies
///    a piece in, and the root folds it from its own input and their copies while they copy
///    the next (lines when the data fits them); where the pieces are off, as the allreduce,
///    but only the root folds the lines or whole copies, and copies the slices the others
///    reduced into their own area;
///  - **allgather**: every rank copies its block in and every other block out;
///  - **reduce_scatter**: every rank copies its P blocks in and folds its own block of
///    every copy, in rank order;
///  - **alltoall**: every rank copies its P - 1 blocks for the others in and its own block
///    out of every other rank's copy (one copy in, one out, one flag per rank: no message
///    and no rendezvous per pair); blocks from `alltoall_single_copy_from_bytes` on, where
///    the ranks may read each other's memory, are read straight out of the senders'
///    buffers instead (one copy, one flagged line and one flag per rank);
///  - **barrier**: every rank sets one flag and waits for every other rank's.
/// On a transport without a collective area, on a thread where the area may not be used
/// (`shm_segment_area::usable_here`: another thread than a transport's engine; see also
/// `caller_orders`), and for element types that are not trivially copyable (symbolic
/// proofs), each runs its algorithm over messages instead: `recursive_doubling` (allreduce),
/// `binomial_tree` (broadcast, reduce), `ring` (allgather, reduce_scatter),
/// `dissemination` (barrier), `pairwise_exchange` (alltoall).
/// Cost: one copy in, P reads of n bytes and P - 1 reductions (lines, whole); one copy in,
/// n (P - 1) / P + n bytes read and n / P reduced (slices).
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/collective_table.hpp"
#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../detail/executor.hpp"
#include "binomial_tree.hpp"
#include "recursive_doubling.hpp"

namespace tcoll {

/// The in-segment collectives (see the file comment).
struct in_segment {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "in_segment";
  static constexpr bool keeps_operand_order = true;
  /// From this many bytes each rank reduces a slice instead of the whole vector.
  std::size_t slices_from_bytes = 16 * 1024;
  /// All-to-all blocks of at least this many bytes are read straight out of their sender's
  /// buffer where the area may read the peers' processes (`shm_segment_area::single_copy`):
  /// one copy a block instead of two (docs/benchmarks.md, "The in-segment all-to-all").
  /// Every rank must pass the same value.
  std::size_t alltoall_single_copy_from_bytes = 32 * 1024;
  /// The broadcast moves data larger than the flagged lines in pieces of at most this many
  /// bytes (and of the bulk buffer's size at most), each published on its own, so that the
  /// others copy one piece out while the root copies the next in; where ranks share CPUs
  /// (`ranks_have_cpus()` false) in pieces of the bulk buffer's size, as every hand-over
  /// then waits for a switch of process. 8 KiB: docs/benchmarks.md, "The broadcast in
  /// pieces". Every rank must pass the same value.
  std::size_t broadcast_piece_bytes = 8 * 1024;
  /// The reduce moves data larger than the flagged lines in pieces of at most this many
  /// bytes (and of the bulk buffer's size at most): every rank but the root copies a piece
  /// into its bulk buffer, and the root folds it straight from its own input and the
  /// others' copies into its output while they copy the next; the root copies nothing in.
  /// Where ranks share CPUs in pieces of the bulk buffer's size (as the broadcast's), and
  /// where they have a CPU each only up to `reduce_in_pieces_up_to_ranks` ranks. 0: the
  /// reduce runs as the allreduce does (whole copies, or every rank reducing a slice).
  /// docs/benchmarks.md, "The reduce in pieces". Every rank must pass the same value.
  std::size_t reduce_piece_bytes = 8 * 1024;
  /// The reduce in pieces where every rank has a CPU of its own, up to this many ranks:
  /// there the root alone folds P - 1 copies of every piece while the others wait, where
  /// the slices share the folding among all ranks; measured on 2 ranks only (a machine of
  /// 2 cores). Every rank must pass the same value.
  int reduce_in_pieces_up_to_ranks = 2;
  /// The caller guarantees that every rank runs this call, and every other in-segment
  /// collective of the transport, one at a time in start order on whatever thread it
  /// calls from (an integration that decides where its calls run by rules every rank
  /// shares, such as the PyTorch backend's calls in the caller's thread): the area is then
  /// used without `usable_here`'s engine check. Every rank must pass the same value.
  bool caller_orders = false;
};

/// A collective area (what `shm_transport::segment_area()` returns, transport/shm/area.hpp):
/// ordinals taken per rank through a `session`, flagged lines, bulk buffers and their flags.
// clang-format off
template <class A>
concept segment_area = requires(A& a, const A& ca, typename A::session& s, std::uint64_t n,
                                const void* src, void* dst, std::size_t bytes, int q) {
  typename A::session;
  { ca.rank() } -> std::convertible_to<int>;
  { ca.size() } -> std::convertible_to<int>;
  { ca.line_capacity() } -> std::convertible_to<std::size_t>;
  { ca.bulk_capacity() } -> std::convertible_to<std::size_t>;
  { ca.ranks_have_cpus() } -> std::convertible_to<bool>;
  { ca.usable_here() } -> std::convertible_to<bool>;
  { s.next() } -> std::convertible_to<std::uint64_t>;
  { s.next(false) } -> std::convertible_to<std::uint64_t>;
  { A::signature(bytes, bytes, 0u) } -> std::convertible_to<std::uint64_t>;
  a.publish_lines(n, n, src, bytes);
  a.read_lines(q, n, n, dst, bytes);
  { a.line(q, n, n, bytes) } -> std::convertible_to<const unsigned char*>;
  { A::line_bytes } -> std::convertible_to<std::size_t>;
  { a.bulk(q, n) } -> std::convertible_to<unsigned char*>;
  a.publish(A::ready, n, n);
  a.wait_for(q, A::reduced, n, n);
};
// clang-format on

/// Does transport `Tr` have a collective area (`shm_transport`)?
template <class Tr>
concept has_segment_area = requires(Tr& t) {
  t.segment_area();
  requires segment_area<std::remove_cvref_t<decltype(t.segment_area())>>;
};

namespace detail {

/// The kinds of in-segment calls, in their signatures (ranks that run different ones fail).
enum class segment_call : unsigned {
  allreduce = 1,
  broadcast,
  allgather,
  reduce_scatter,
  barrier,
  reduce,
  alltoall,
  alltoall_single_copy, ///< the all-to-all's blocks read from the senders' buffers
  reduce_in_pieces      ///< the reduce whose root folds the others' pieces as they come
};

/// dst[0, n) = operand(0) op operand(1) op ... op operand(P - 1), each operand(q) the start
/// of rank q's n elements (operand(0) may be dst itself, no other may), then finalized
/// (avg): the fold of every in-segment reduction, in rank order. The first step reads both
/// operands and writes dst in one pass (on 2 ranks the whole fold is one pass, not a copy
/// and a pass); the same operations in the same order, so the same bits.
template <class T, class Op, reducer R, class Operand>
void fold_in_rank_order(R& red, const Op& op, int P, T* dst, Operand&& operand, std::size_t n) {
  const T* first = operand(0);
  if (P == 1) {
    if (first != dst) red.copy(dst, first, n);
  } else {
    red.reduce(op, dst, first, operand(1), n);
    for (int q = 2; q < P; ++q) red.reduce(op, dst, dst, operand(q), n);
  }
  if constexpr (finalizing_op<Op>) red.finalize(op, dst, n, P);
}

/// This thread's scratch for P slots of `slot_bytes` each (`stride` apart, a multiple of 64),
/// aligned for any scalar type: where small data that straddles flagged lines is read into
/// before it is reduced.
inline unsigned char* rank_scratch(int P, std::size_t slot_bytes, std::size_t& stride) {
  thread_local std::vector<unsigned char> scratch;
  constexpr std::size_t align = alignof(std::max_align_t);
  stride = (slot_bytes + 63) / 64 * 64;
  scratch.resize(static_cast<std::size_t>(P) * stride + align);
  unsigned char* base = scratch.data();
  return base + (align - reinterpret_cast<std::uintptr_t>(base) % align) % align;
}

/// The in-segment allreduce on area `a`, arguments already checked (see the file comment);
/// with `root` >= 0 the reduce to `root` (`recvbuf` is read at the root only): the same
/// steps, but only the root folds the lines or whole copies and copies the reduced slices
/// out, and the other ranks reduce their slice into their own area.
template <segment_area Area, class T, class Op, reducer R>
void in_segment_allreduce(Area& a, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                          const in_segment& algo, R& red, int root = -1) {
  const int P = a.size(), me = a.rank();
  const bool all = root < 0, keeps = all || me == root;
  const std::size_t bytes = count * sizeof(T);
  const std::uint64_t sig =
      Area::signature(bytes, sizeof(T),
                      static_cast<unsigned>(all ? segment_call::allreduce : segment_call::reduce));
  typename Area::session s(a);
  auto fold = [&](T* dst, auto&& operand, std::size_t n) {
    fold_in_rank_order(red, op, P, dst, operand, n);
  };
  // This rank's own operand comes from its input, which is still intact, except in place
  // on a rank after the first, where the fold overwrites it before reaching it.
  const bool own_from_input = sendbuf != recvbuf || me == 0 || !keeps;
  if (bytes <= a.line_capacity()) {
    const std::uint64_t n = s.next();
    a.publish_lines(n, sig, sendbuf, bytes);
    if (!keeps) return;
    if constexpr (Area::line_bytes % sizeof(T) == 0) {
      // Whole elements per line: fold each line straight from the lines it is in.
      constexpr std::size_t per_line = Area::line_bytes / sizeof(T);
      for (std::size_t j = 0, lo = 0; lo < count; ++j, lo += per_line) {
        const std::size_t m = std::min(per_line, count - lo);
        fold(
            recvbuf + lo,
            [&](int q) {
              return q == me && own_from_input ? sendbuf + lo
                                               : reinterpret_cast<const T*>(a.line(q, n, sig, j));
            },
            m);
      }
    } else {
      // Elements straddle lines: every rank's copy into scratch in rank order, then reduced.
      std::size_t stride = 0;
      unsigned char* base = rank_scratch(P, a.line_capacity(), stride);
      for (int q = 0; q < P; ++q)
        a.read_lines(q, n, sig, base + static_cast<std::size_t>(q) * stride, bytes);
      fold(
          recvbuf, [&](int q) { return reinterpret_cast<const T*>(base + q * stride); }, count);
    }
    return;
  }
  const std::size_t piece = std::max<std::size_t>(1, a.bulk_capacity() / sizeof(T));
  const std::size_t align = std::max<std::size_t>(1, 64 / sizeof(T));
  for (std::size_t lo = 0; lo < count; lo += piece) {
    const std::size_t m = std::min(piece, count - lo);
    const std::uint64_t n = s.next();
    std::memcpy(a.bulk(me, n), sendbuf + lo, m * sizeof(T));
    a.publish(Area::ready, n, sig);
    auto copy_of = [&](int q) {
      return q == me && own_from_input ? sendbuf + lo : reinterpret_cast<const T*>(a.bulk(q, n));
    };
    if (m * sizeof(T) < algo.slices_from_bytes) {
      if (!keeps) continue;
      for (int q = 0; q < P; ++q) a.wait_for(q, Area::ready, n, sig);
      fold(recvbuf + lo, copy_of, m);
      continue;
    }
    // Slice q: [q * per, min(m, (q + 1) * per)), whole cache lines where the type allows.
    const std::size_t per = (m + static_cast<std::size_t>(P) - 1) / P;
    const std::size_t per_aligned = (per + align - 1) / align * align;
    auto slice_lo = [&](int q) { return std::min(m, static_cast<std::size_t>(q) * per_aligned); };
    auto slice_hi = [&](int q) {
      return std::min(m, static_cast<std::size_t>(q + 1) * per_aligned);
    };
    for (int q = 0; q < P; ++q) a.wait_for(q, Area::ready, n, sig);
    const std::size_t mine_lo = slice_lo(me), mine_n = slice_hi(me) - mine_lo;
    if (mine_n) {
      // Only this rank reads its own copy's slice: the result replaces it. A rank that
      // keeps no result folds into it directly (its own operand then comes from its input,
      // which a reduce never writes there).
      T* own_slice = reinterpret_cast<T*>(a.bulk(me, n)) + mine_lo;
      if (keeps) {
        fold(
            recvbuf + lo + mine_lo, [&](int q) { return copy_of(q) + mine_lo; }, mine_n);
        if (all) std::memcpy(own_slice, recvbuf + lo + mine_lo, mine_n * sizeof(T));
      } else {
        fold(
            own_slice, [&](int q) { return copy_of(q) + mine_lo; }, mine_n);
      }
    }
    a.publish(Area::reduced, n, sig);
    if (!keeps) continue;
    for (int q = 0; q < P; ++q) {
      if (q == me) continue;
      const std::size_t qlo = slice_lo(q), qn = slice_hi(q) - qlo;
      a.wait_for(q, Area::reduced, n, sig);
      if (qn) std::memcpy(recvbuf + lo + qlo, a.bulk(q, n) + qlo * sizeof(T), qn * sizeof(T));
    }
  }
}

/// The bytes of a piece on area `a` for a knob of `piece_bytes` (the broadcast's and the
/// reduce's): whole cache lines, at most the bulk buffer, where every rank has a CPU of its
/// own; the bulk buffer's size where ranks share CPUs, since every hand-over then waits for a
/// switch of process. The same answer on every rank.
template <segment_area Area>
std::size_t piece_bytes_on(const Area& a, std::size_t piece_bytes) {
  return a.ranks_have_cpus()
             ? std::max<std::size_t>(64, std::min(a.bulk_capacity(), piece_bytes / 64 * 64))
             : a.bulk_capacity();
}

/// Whether the reduce on area `a` goes in pieces (`in_segment::reduce_piece_bytes`), and of
/// how many bytes each (0: it does not); the same answer on every rank.
template <segment_area Area>
std::size_t reduce_piece_bytes_on(const Area& a, const in_segment& algo) {
  if (algo.reduce_piece_bytes == 0) return 0;
  if (a.ranks_have_cpus() && a.size() > algo.reduce_in_pieces_up_to_ranks) return 0;
  return piece_bytes_on(a, algo.reduce_piece_bytes);
}

/// The in-segment reduce to `root` in pieces of `piece_bytes` on area `a`, for data larger
/// than the flagged lines, arguments already checked: every other rank copies its input
/// piece by piece into its bulk buffer, and the root folds each piece in rank order from
/// its own input and the others' copies straight into `recvbuf` while they copy the next
/// (each rank has two areas, so they run at most one piece ahead). In place on a root
/// after the first rank, the root's own piece is read into scratch first: the fold writes
/// the output before it reaches the root's operand.
template <segment_area Area, class T, class Op, reducer R>
void in_segment_reduce_in_pieces(Area& a, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                                 const Op& op, std::size_t piece_bytes, R& red) {
  const int P = a.size(), me = a.rank();
  const std::uint64_t sig = Area::signature(count * sizeof(T), sizeof(T),
                                            static_cast<unsigned>(segment_call::reduce_in_pieces));
  const std::size_t piece = std::max<std::size_t>(1, piece_bytes / sizeof(T));
  typename Area::session s(a);
  if (me != root) {
    for (std::size_t lo = 0; lo < count; lo += piece) {
      const std::size_t m = std::min(piece, count - lo);
      const std::uint64_t n = s.next();
      std::memcpy(a.bulk(me, n), sendbuf + lo, m * sizeof(T));
      a.publish(Area::ready, n, sig);
    }
    return;
  }
  T* own_copy = nullptr; // in place after rank 0: the root's piece, read before the fold
  if (sendbuf == recvbuf && me != 0) {
    std::size_t stride = 0;
    own_copy = reinterpret_cast<T*>(rank_scratch(1, piece * sizeof(T), stride));
  }
  for (std::size_t lo = 0; lo < count; lo += piece) {
    const std::size_t m = std::min(piece, count - lo);
    const std::uint64_t n = s.next(false);
    if (own_copy) std::memcpy(own_copy, sendbuf + lo, m * sizeof(T));
    for (int i = 1; i < P; ++i) a.wait_for((me + i) % P, Area::ready, n, sig);
    fold_in_rank_order(
        red, op, P, recvbuf + lo,
        [&](int q) {
          return q != me ? reinterpret_cast<const T*>(a.bulk(q, n))
                         : (own_copy ? own_copy : sendbuf + lo);
        },
        m);
  }
}

/// The in-segment broadcast on area `a`, arguments already checked: the root copies the
/// data into its lines (small) or, piece by piece (`piece_bytes`, see
/// `in_segment::broadcast_piece_bytes`), into its bulk buffer, and every other rank copies
/// it out; the root fills one area while the others read the other.
template <segment_area Area, class T>
void in_segment_broadcast(Area& a, T* buffer, std::size_t count, int root,
                          std::size_t piece_bytes) {
  const bool is_root = a.rank() == root;
  const std::size_t bytes = count * sizeof(T);
  auto* data = reinterpret_cast<unsigned char*>(buffer);
  const std::uint64_t sig =
      Area::signature(bytes, sizeof(T), static_cast<unsigned>(segment_call::broadcast));
  typename Area::session s(a);
  if (bytes <= a.line_capacity()) {
    const std::uint64_t n = s.next(is_root);
    if (is_root)
      a.publish_lines(n, sig, data, bytes);
    else
      a.read_lines(root, n, sig, data, bytes);
    return;
  }
  // pieces overlap the root's copy with the others'
  const std::size_t piece = piece_bytes_on(a, piece_bytes);
  for (std::size_t lo = 0; lo < bytes; lo += piece) {
    const std::size_t m = std::min(piece, bytes - lo);
    const std::uint64_t n = s.next(is_root);
    if (is_root) {
      std::memcpy(a.bulk(root, n), data + lo, m);
      a.publish(Area::ready, n, sig);
    } else {
      a.wait_for(root, Area::ready, n, sig);
      std::memcpy(data + lo, a.bulk(root, n), m);
    }
  }
}

/// Copies `len` bytes from byte `from` of rank `q`'s flagged lines of ordinal `n` (waiting
/// for each line) into `dst`.
template <segment_area Area>
void read_line_range(Area& a, int q, std::uint64_t n, std::uint64_t sig, unsigned char* dst,
                     std::size_t from, std::size_t len) {
  for (std::size_t off = from, end = from + len; off < end;) {
    const std::size_t j = off / Area::line_bytes, within = off % Area::line_bytes;
    const std::size_t k = std::min(Area::line_bytes - within, end - off);
    std::memcpy(dst + (off - from), a.line(q, n, sig, j) + within, k);
    off += k;
  }
}

/// The in-segment allgather on area `a`, arguments already checked: every rank copies its
/// block into its lines (small) or, piece by piece, into its bulk buffer, and copies every
/// other rank's block out, starting with the next rank (so that P readers do not all poll
/// the same rank first). In place when `sendbuf` is this rank's block of `recvbuf`.
template <segment_area Area, class T>
void in_segment_allgather(Area& a, const T* sendbuf, T* recvbuf, std::size_t count) {
  const int P = a.size(), me = a.rank();
  const std::size_t bytes = count * sizeof(T);
  const std::uint64_t sig =
      Area::signature(bytes, sizeof(T), static_cast<unsigned>(segment_call::allgather));
  auto* out = reinterpret_cast<unsigned char*>(recvbuf);
  const auto* in = reinterpret_cast<const unsigned char*>(sendbuf);
  unsigned char* own = out + static_cast<std::size_t>(me) * bytes;
  typename Area::session s(a);
  if (bytes <= a.line_capacity()) {
    const std::uint64_t n = s.next();
    a.publish_lines(n, sig, in, bytes);
    if (own != in) std::memcpy(own, in, bytes);
    for (int i = 1; i < P; ++i) {
      const int q = (me + i) % P;
      a.read_lines(q, n, sig, out + static_cast<std::size_t>(q) * bytes, bytes);
    }
    return;
  }
  for (std::size_t lo = 0; lo < bytes; lo += a.bulk_capacity()) {
    const std::size_t m = std::min(a.bulk_capacity(), bytes - lo);
    const std::uint64_t n = s.next();
    std::memcpy(a.bulk(me, n), in + lo, m);
    a.publish(Area::ready, n, sig);
    if (own != in) std::memcpy(own + lo, in + lo, m);
    for (int i = 1; i < P; ++i) {
      const int q = (me + i) % P;
      a.wait_for(q, Area::ready, n, sig);
      std::memcpy(out + static_cast<std::size_t>(q) * bytes + lo, a.bulk(q, n), m);
    }
  }
}

/// The in-segment reduce-scatter on area `a`, arguments already checked: every rank copies
/// its P blocks into its lines (small) or bulk buffer (in pieces of the same part of every
/// block where they do not fit), and reduces its own block of every rank's copy, in rank
/// order (operand order is kept; each result is computed once).
template <segment_area Area, class T, class Op, reducer R>
void in_segment_reduce_scatter(Area& a, const T* sendbuf, T* recvbuf, std::size_t count,
                               const Op& op, R& red) {
  const int P = a.size(), me = a.rank();
  const auto Pz = static_cast<std::size_t>(P), mez = static_cast<std::size_t>(me);
  const std::size_t block_bytes = count * sizeof(T), total = Pz * block_bytes;
  const std::uint64_t sig =
      Area::signature(total, sizeof(T), static_cast<unsigned>(segment_call::reduce_scatter));
  typename Area::session s(a);
  auto fold = [&](T* dst, auto&& operand, std::size_t n) {
    fold_in_rank_order(red, op, P, dst, operand, n);
  };
  const T* own_input = sendbuf + mez * count;
  if (total <= a.line_capacity()) {
    const std::uint64_t n = s.next();
    a.publish_lines(n, sig, sendbuf, total);
    // Every rank's block `me` into scratch (a block may straddle lines), then reduced.
    std::size_t stride = 0;
    unsigned char* base = rank_scratch(P, block_bytes, stride);
    for (int i = 1; i < P; ++i) {
      const int q = (me + i) % P;
      read_line_range(a, q, n, sig, base + static_cast<std::size_t>(q) * stride, mez * block_bytes,
                      block_bytes);
    }
    fold(
        recvbuf,
        [&](int q) {
          return q == me ? own_input
                         : reinterpret_cast<const T*>(base + static_cast<std::size_t>(q) * stride);
        },
        count);
    return;
  }
  // Pieces of `piece` elements of every block: block b's part [lo, lo + m) at b * m.
  const std::size_t piece = std::max<std::size_t>(1, a.bulk_capacity() / (Pz * sizeof(T)));
  for (std::size_t lo = 0; lo < count; lo += piece) {
    const std::size_t m = std::min(piece, count - lo);
    const std::uint64_t n = s.next();
    T* mine = reinterpret_cast<T*>(a.bulk(me, n));
    if (m == count)
      std::memcpy(mine, sendbuf, total);
    else
      for (std::size_t b = 0; b < Pz; ++b)
        if (b != mez) std::memcpy(mine + b * m, sendbuf + b * count + lo, m * sizeof(T));
    a.publish(Area::ready, n, sig);
    for (int q = 0; q < P; ++q)
      if (q != me) a.wait_for(q, Area::ready, n, sig);
    fold(
        recvbuf + lo,
        [&](int q) {
          return q == me ? own_input + lo : reinterpret_cast<const T*>(a.bulk(q, n)) + mez * m;
        },
        m);
  }
}

/// The in-segment all-to-all on area `a`, arguments already checked (`count` elements per
/// pair): every rank copies its blocks for the other ranks into its lines (small) or bulk
/// buffer (in pieces of the same part of every block where they do not fit), publishes them,
/// copies its own block, and copies its block out of every other rank's copy, starting with
/// the next rank. In place when `sendbuf == recvbuf`: every part of every block is in the
/// area before the same part of any block is overwritten.
/// Blocks from `single_copy_from_bytes` on, where the area may read the peers' processes,
/// skip the area: every rank publishes where its blocks lie (one flagged line), reads its
/// block straight out of every other rank's buffer (cross-memory attach), then says it is
/// done reading and waits until every peer is, so that no buffer goes before it was read.
/// One copy a block instead of two, and one system call per peer. In place a rank lends
/// a copy of its blocks (its buffer fills while the peers read).
template <segment_area Area, class T>
void in_segment_alltoall(Area& a, const T* sendbuf, T* recvbuf, std::size_t count,
                         std::size_t single_copy_from_bytes) {
  const int P = a.size(), me = a.rank();
  const auto Pz = static_cast<std::size_t>(P), mez = static_cast<std::size_t>(me);
  const std::size_t block_bytes = count * sizeof(T), total = Pz * block_bytes;
  const auto* in = reinterpret_cast<const unsigned char*>(sendbuf);
  auto* out = reinterpret_cast<unsigned char*>(recvbuf);
  if constexpr (requires(std::uint64_t at) {
                  { a.single_copy() } -> std::convertible_to<bool>;
                  a.read_peer(me, out, at, block_bytes);
                }) {
    if (a.single_copy() && block_bytes >= single_copy_from_bytes) {
      const std::uint64_t sig = Area::signature(
          total, sizeof(T), static_cast<unsigned>(segment_call::alltoall_single_copy));
      std::unique_ptr<unsigned char[]> lent; // in place: the blocks the peers read
      if (in == out) {
        lent.reset(new unsigned char[total]);
        std::memcpy(lent.get(), in, total);
      }
      typename Area::session s(a);
      const std::uint64_t n = s.next();
      const auto where = reinterpret_cast<std::uint64_t>(lent ? lent.get() : in);
      a.publish_lines(n, sig, &where, sizeof where);
      if (in != out) std::memcpy(out + mez * block_bytes, in + mez * block_bytes, block_bytes);
      for (int i = 1; i < P; ++i) {
        const int q = (me + i) % P;
        std::uint64_t at = 0;
        a.read_lines(q, n, sig, &at, sizeof at);
        a.read_peer(q, out + static_cast<std::size_t>(q) * block_bytes, at + mez * block_bytes,
                    block_bytes);
      }
      a.publish(Area::reduced, n, sig); // read: the peers may let their blocks go
      for (int i = 1; i < P; ++i) a.wait_for((me + i) % P, Area::reduced, n, sig);
      return;
    }
  }
  const std::uint64_t sig =
      Area::signature(total, sizeof(T), static_cast<unsigned>(segment_call::alltoall));
  typename Area::session s(a);
  if (total <= a.line_capacity()) {
    const std::uint64_t n = s.next();
    a.publish_lines(n, sig, in, total);
    if (in != out) std::memcpy(out + mez * block_bytes, in + mez * block_bytes, block_bytes);
    for (int i = 1; i < P; ++i) {
      const int q = (me + i) % P;
      read_line_range(a, q, n, sig, out + static_cast<std::size_t>(q) * block_bytes,
                      mez * block_bytes, block_bytes);
    }
    return;
  }
  // Pieces of `piece` elements of every block: block b's part [lo, lo + m) at b * m.
  const std::size_t piece = std::max<std::size_t>(1, a.bulk_capacity() / (Pz * sizeof(T)));
  for (std::size_t lo = 0; lo < count; lo += piece) {
    const std::size_t m = std::min(piece, count - lo), part = m * sizeof(T);
    const std::size_t at = lo * sizeof(T);
    const std::uint64_t n = s.next();
    unsigned char* mine = a.bulk(me, n);
    for (std::size_t b = 0; b < Pz; ++b)
      if (b != mez) std::memcpy(mine + b * part, in + b * block_bytes + at, part);
    a.publish(Area::ready, n, sig);
    if (in != out) std::memcpy(out + mez * block_bytes + at, in + mez * block_bytes + at, part);
    for (int i = 1; i < P; ++i) {
      const int q = (me + i) % P;
      a.wait_for(q, Area::ready, n, sig);
      std::memcpy(out + static_cast<std::size_t>(q) * block_bytes + at, a.bulk(q, n) + mez * part,
                  part);
    }
  }
}

/// The in-segment barrier on area `a`: every rank sets its ready flag of the next ordinal
/// and waits for every other rank's (one flag per rank, no rounds).
template <segment_area Area>
void in_segment_barrier(Area& a) {
  const int P = a.size(), me = a.rank();
  const std::uint64_t sig = Area::signature(0, 0, static_cast<unsigned>(segment_call::barrier));
  typename Area::session s(a);
  const std::uint64_t n = s.next();
  a.publish(Area::ready, n, sig);
  for (int i = 1; i < P; ++i) a.wait_for((me + i) % P, Area::ready, n, sig);
}

/// Whether the collective area of `t` may be used on the calling thread for host memory
/// (see the file comment, and `in_segment::caller_orders`); where false, callers take
/// messages instead.
template <class Tr>
bool segment_usable_here(Tr& t, const in_segment& algo) {
  if constexpr (has_segment_area<Tr>) return algo.caller_orders || t.segment_area().usable_here();
  return false;
}

/// Whether the collective area of `t` may run a collective of `T` with reducer `R` on the
/// calling thread: `segment_usable_here`, for trivially copyable types in host memory.
template <class Tr, class T, class R>
bool segment_usable(Tr& t, const in_segment& algo) {
  if constexpr (has_segment_area<Tr> && std::is_trivially_copyable_v<T> &&
                requires { R::host_memory; }) {
    if constexpr (R::host_memory) return segment_usable_here(t, algo);
  }
  return false;
}

/// Whether a collective of P blocks of `T` (reduce-scatter, all-to-all) may run in the area
/// of `t` on the calling thread: `segment_usable`, and one element of every rank fits the
/// bulk buffer (its pieces hold a part of every block).
template <class Tr, class T, class R>
bool segment_takes_blocks(Tr& t, const in_segment& algo) {
  if constexpr (has_segment_area<Tr>)
    return segment_usable<Tr, T, R>(t, algo) &&
           static_cast<std::size_t>(t.size()) * sizeof(T) <= t.segment_area().bulk_capacity();
  return false;
}

/// The in-segment broadcast on transport `t` where its area may be used: true when done
/// (the caller runs the binomial tree otherwise).
template <transport Tr, class T, reducer R>
bool try_in_segment_broadcast(Tr& t, T* buffer, std::size_t count, int root,
                              const in_segment& algo) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_usable<Tr, T, R>(t, algo)) return false;
    if (t.size() > 1 && count > 0)
      in_segment_broadcast(t.segment_area(), buffer, count, root, algo.broadcast_piece_bytes);
    return true;
  }
  return false;
}

/// The in-segment allgather on transport `t` where its area may be used: true when done
/// (the caller runs the ring otherwise).
template <transport Tr, class T, reducer R>
bool try_in_segment_allgather(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
                              const in_segment& algo) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_usable<Tr, T, R>(t, algo)) return false;
    if (count == 0) return true;
    if (t.size() > 1) {
      in_segment_allgather(t.segment_area(), sendbuf, recvbuf, count);
    } else if (sendbuf != recvbuf) {
      std::memcpy(recvbuf, sendbuf, count * sizeof(T));
    }
    return true;
  }
  return false;
}

/// The in-segment reduce-scatter on transport `t` where its area may be used and one
/// element of every rank fits its bulk buffer: true when done (the caller runs the ring
/// otherwise).
template <transport Tr, class T, class Op, reducer R>
bool try_in_segment_reduce_scatter(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
                                   const Op& op, const in_segment& algo, R& red) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_takes_blocks<Tr, T, R>(t, algo)) return false;
    if (count == 0) return true;
    if (t.size() > 1) {
      in_segment_reduce_scatter(t.segment_area(), sendbuf, recvbuf, count, op, red);
    } else {
      red.copy(recvbuf, sendbuf, count);
      if constexpr (finalizing_op<Op>) red.finalize(op, recvbuf, count, 1);
    }
    return true;
  }
  return false;
}

/// The in-segment reduce to `root` on transport `t` where its area may be used: true when
/// done (the caller runs the binomial tree otherwise).
template <transport Tr, class T, class Op, reducer R>
bool try_in_segment_reduce(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count, int root,
                           const Op& op, const in_segment& algo, R& red) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_usable<Tr, T, R>(t, algo)) return false;
    if (count == 0) return true;
    if (t.size() > 1) {
      auto& area = t.segment_area();
      const std::size_t piece = count * sizeof(T) > area.line_capacity()
                                    ? reduce_piece_bytes_on(area, algo)
                                    : std::size_t{0};
      if (piece)
        in_segment_reduce_in_pieces(area, sendbuf, recvbuf, count, root, op, piece, red);
      else
        in_segment_allreduce(area, sendbuf, recvbuf, count, op, algo, red, root);
    } else {
      if (sendbuf != recvbuf) red.copy(recvbuf, sendbuf, count);
      if constexpr (finalizing_op<Op>) red.finalize(op, recvbuf, count, 1);
    }
    return true;
  }
  return false;
}

/// The in-segment all-to-all on transport `t` where its area may be used and one element of
/// every rank fits its bulk buffer: true when done (the caller runs the pairwise exchange
/// otherwise).
template <transport Tr, class T, reducer R>
bool try_in_segment_alltoall(Tr& t, const T* sendbuf, T* recvbuf, std::size_t count,
                             const in_segment& algo) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_takes_blocks<Tr, T, R>(t, algo)) return false;
    if (count == 0) return true;
    if (t.size() > 1) {
      in_segment_alltoall(t.segment_area(), sendbuf, recvbuf, count,
                          algo.alltoall_single_copy_from_bytes);
    } else if (sendbuf != recvbuf) {
      std::memcpy(recvbuf, sendbuf, count * sizeof(T));
    }
    return true;
  }
  return false;
}

/// The in-segment barrier on transport `t` where its area may be used: true when done (the
/// caller runs the dissemination barrier otherwise).
template <transport Tr>
bool try_in_segment_barrier(Tr& t, const in_segment& algo) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_usable_here(t, algo)) return false;
    if (t.size() > 1) in_segment_barrier(t.segment_area());
    return true;
  }
  return false;
}

/// The in-segment allreduce on transport `t` in message space `tag` (used only when it
/// falls back to recursive doubling).
template <transport Tr, class T, class Op, reducer R>
void in_segment_allreduce_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count,
                             const Op& op, const in_segment& algo, R& red) {
  if constexpr (has_segment_area<Tr>) {
    if (segment_usable<Tr, T, R>(t, algo)) {
      if (t.size() == 1 || count == 0) {
        if (count && sendbuf != recvbuf) red.copy(recvbuf, sendbuf, count);
        if constexpr (finalizing_op<Op>)
          if (count) red.finalize(op, recvbuf, count, 1);
        return;
      }
      return in_segment_allreduce(t.segment_area(), sendbuf, recvbuf, count, op, algo, red);
    }
  }
  layout L{t.rank(), t.size(), count, sizeof(T), 0, sendbuf == recvbuf};
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, count, recvbuf, count, tag);
  recursive_doubling{}.allreduce(ex, L);
}

} // namespace detail
} // namespace tcoll
