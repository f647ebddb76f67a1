#pragma once
/// \file
/// `in_segment`: the allreduce (and the broadcast, `in_segment_broadcast` below) of the
/// processes of one node through the collective area of their shared segment
/// (`shm_segment_area`, transport/shm/area.hpp) instead of messages, for any number of ranks
/// (DeepSpeed's shm.cpp, MPICH's release_gather and Open MPI's xhc move data the same way). Every
/// rank copies its input into its own part of the area once; then, by size:
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
/// On a transport without a collective area, on a thread where the area may not be used
/// (`shm_segment_area::usable_here`: another thread than a transport's engine; see also
/// `caller_orders`), and for element types that are not trivially copyable (symbolic
/// proofs), it runs `recursive_doubling` (the broadcast: `binomial_tree`) instead.
/// Cost: one copy in, P reads of n bytes and P - 1 reductions (lines, whole); one copy in,
/// n (P - 1) / P + n bytes read and n / P reduced (slices).
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../detail/executor.hpp"
#include "binomial_tree.hpp"
#include "recursive_doubling.hpp"

namespace tcoll {

/// The in-segment allreduce (see the file comment).
struct in_segment {
  static constexpr std::string_view name = "in_segment";
  static constexpr bool keeps_operand_order = true;
  /// From this many bytes each rank reduces a slice instead of the whole vector.
  std::size_t slices_from_bytes = 16 * 1024;
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

/// The in-segment allreduce on area `a`, arguments already checked (see the file comment).
template <segment_area Area, class T, class Op, reducer R>
void in_segment_allreduce(Area& a, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                          const in_segment& algo, R& red) {
  const int P = a.size(), me = a.rank();
  const std::size_t bytes = count * sizeof(T);
  const std::uint64_t sig = Area::signature(bytes, sizeof(T), 1);
  typename Area::session s(a);
  auto fold = [&](T* dst, auto&& operand, std::size_t n) {
    // dst[0, n) = operand(0) op operand(1) op ... op operand(P - 1), each operand(q) the
    // start of rank q's n elements
    const T* first = operand(0);
    if (first != dst) red.copy(dst, first, n);
    for (int q = 1; q < P; ++q) red.reduce(op, dst, dst, operand(q), n);
    if constexpr (finalizing_op<Op>) red.finalize(op, dst, n, P);
  };
  // This rank's own operand comes from its input, which is still intact, except in place
  // on a rank after the first, where the fold overwrites it before reaching it.
  const bool own_from_input = sendbuf != recvbuf || me == 0;
  if (bytes <= a.line_capacity()) {
    const std::uint64_t n = s.next();
    a.publish_lines(n, sig, sendbuf, bytes);
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
      thread_local std::vector<unsigned char> scratch;
      const std::size_t stride = (a.line_capacity() + 63) / 64 * 64;
      scratch.resize(static_cast<std::size_t>(P) * stride + alignof(std::max_align_t));
      unsigned char* base = scratch.data();
      base += (alignof(std::max_align_t) -
               reinterpret_cast<std::uintptr_t>(base) % alignof(std::max_align_t)) %
              alignof(std::max_align_t);
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
      fold(
          recvbuf + lo + mine_lo, [&](int q) { return copy_of(q) + mine_lo; }, mine_n);
      // Only this rank reads its own copy's slice: the result replaces it.
      std::memcpy(a.bulk(me, n) + mine_lo * sizeof(T), recvbuf + lo + mine_lo, mine_n * sizeof(T));
    }
    a.publish(Area::reduced, n, sig);
    for (int q = 0; q < P; ++q) {
      if (q == me) continue;
      const std::size_t qlo = slice_lo(q), qn = slice_hi(q) - qlo;
      a.wait_for(q, Area::reduced, n, sig);
      if (qn) std::memcpy(recvbuf + lo + qlo, a.bulk(q, n) + qlo * sizeof(T), qn * sizeof(T));
    }
  }
}

/// The in-segment broadcast on area `a`, arguments already checked: the root copies the
/// data into its lines (small) or, piece by piece, into its bulk buffer, and every other
/// rank copies it out; the root fills one area while the others read the other.
template <segment_area Area, class T>
void in_segment_broadcast(Area& a, T* buffer, std::size_t count, int root) {
  const bool is_root = a.rank() == root;
  const std::size_t bytes = count * sizeof(T);
  auto* data = reinterpret_cast<unsigned char*>(buffer);
  const std::uint64_t sig = Area::signature(bytes, sizeof(T), 2);
  typename Area::session s(a);
  if (bytes <= a.line_capacity()) {
    const std::uint64_t n = s.next(is_root);
    if (is_root)
      a.publish_lines(n, sig, data, bytes);
    else
      a.read_lines(root, n, sig, data, bytes);
    return;
  }
  for (std::size_t lo = 0; lo < bytes; lo += a.bulk_capacity()) {
    const std::size_t m = std::min(a.bulk_capacity(), bytes - lo);
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

/// Whether the collective area of `t` may run a collective of `T` with reducer `R` on the
/// calling thread (see the file comment, and `in_segment::caller_orders`); where false,
/// callers take messages instead.
template <class Tr, class T, class R>
bool segment_usable(Tr& t, const in_segment& algo) {
  if constexpr (has_segment_area<Tr> && std::is_trivially_copyable_v<T> &&
                requires { R::host_memory; }) {
    if constexpr (R::host_memory) return algo.caller_orders || t.segment_area().usable_here();
  }
  return false;
}

/// The in-segment broadcast on transport `t` where its area may be used: true when done
/// (the caller runs the binomial tree otherwise).
template <transport Tr, class T, reducer R>
bool try_in_segment_broadcast(Tr& t, T* buffer, std::size_t count, int root,
                              const in_segment& algo) {
  if constexpr (has_segment_area<Tr>) {
    if (!segment_usable<Tr, T, R>(t, algo)) return false;
    if (t.size() > 1 && count > 0) in_segment_broadcast(t.segment_area(), buffer, count, root);
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
