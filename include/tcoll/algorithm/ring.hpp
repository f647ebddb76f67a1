#pragma once
/// \file
/// Ring allreduce = ring reduce-scatter + ring allgather (Patarasuk & Yuan; GradientFlow
/// Sec. 2.4; MXNET-MPI Sec. 6.2 "bucket" algorithm). The buffer is cut into P chunks; in
/// P-1 steps each rank passes one chunk to its right neighbour and reduces the one arriving
/// from its left, then P-1 steps pass the finished chunks around. Chunks larger than
/// `max_segment_bytes` travel as several messages, so the reduction of one segment overlaps
/// the transfer of the next.
/// Cost: 2(P-1) alpha + 2(P-1)/P n beta + (P-1)/P n gamma.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/traffic.hpp"
#include "../detail/schedule.hpp"

namespace tcoll {

namespace detail {
/// The ring's traffic, 2 (P-1)/P count bytes per rank, rounded to nearest (a plain
/// function, not a lambda: nvcc treats constexpr lambdas as device code and warns about
/// long double). What prepared allreduces report where their steps are not recorded.
inline std::size_t ring_bytes_estimate(int P, std::size_t count, std::size_t element_bytes) {
  if (P <= 1) return 0;
  const long double b = 2.0L * (P - 1) / P * static_cast<long double>(count) * element_bytes;
  return static_cast<std::size_t>(std::llround(b));
}
} // namespace detail

/// Ring allreduce and its building blocks. Tuning knobs are the members.
struct ring {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "ring";
  /// Ring reorders operands (each chunk starts at a different rank): commutative ops only.
  static constexpr bool keeps_operand_order = false;

  /// The busiest rank's traffic (core/traffic.hpp) as `c`, `bytes` its size measure.
  /// allreduce: reduce-scatter ring + allgather ring, any P: 2(P-1) full-duplex rounds of a
  /// chunk of n/P each way, P-1 of them reduced. reduce_scatter(v) and allgather(v): P-1
  /// full-duplex rounds of one block of n/P, reduced for reduce_scatter.
  static constexpr rank_traffic traffic(collective c, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double p = ranks, moved = (p - 1) / p * bytes;
    if (c == collective::allreduce) {
      const double both = 2.0 * (p - 1) / p * bytes;
      return {2.0 * (p - 1), 2.0 * (p - 1), both, both, moved, 2.0 * (p - 1), both};
    }
    const bool reduces = c == collective::reduce_scatter || c == collective::reduce_scatterv;
    return {p - 1, p - 1, moved, moved, reduces ? moved : 0.0, p - 1, moved};
  }

  /// Largest message; a chunk larger than this is sent as several segments.
  std::size_t max_segment_bytes = std::size_t{256} << 10;

  /// Allreduce of `L.count` elements from input into output.
  template <class Sink>
  void allreduce(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const int P = L.size, r = L.rank;
    const std::size_t n = L.count;
    if (P == 1 || n == 0) return local_allreduce(s, n);
    const std::size_t seg = segment_elems(L);
    s.reserve(0, chunk_size(n, P, 0));
    auto chunk = [&](buffer_id b, int c) {
      return region{b, chunk_begin(n, P, c), chunk_size(n, P, c)};
    };
    // Reduce-scatter: in step k rank r sends chunk r-k-1 and reduces chunk r-k-2, so after
    // P-1 steps it holds the finished chunk r. Step 0 reads the input (no initial copy).
    for (int k = 0; k < P - 1; ++k) {
      const int out_c = mod(r - k - 1, P), in_c = mod(r - k - 2, P);
      const buffer_id from = k == 0 ? buffer_id::input : buffer_id::output;
      s.round_begin();
      segments(chunk(from, out_c), seg, [&](region g) { s.send(mod(r + 1, P), g); });
      segments(chunk(buffer_id::output, in_c), seg, [&](region g) {
        s.recv_reduce(mod(r - 1, P), g, region{buffer_id::input, g.offset, g.count}, true);
      });
      if (k == P - 2) s.finalize(chunk(buffer_id::output, r));
      s.round_end();
    }
    // Allgather: in step k rank r sends chunk r-k and receives chunk r-k-1.
    allgather_steps(
        s, P, r, [&](int c) { return chunk(buffer_id::output, c); }, seg);
  }

  /// Reduce-scatter: input holds P blocks (`L.block`: of `L.count` each, or of their own
  /// sizes one after another); rank r's output receives block r.
  template <class Sink>
  void reduce_scatter(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const int P = L.size, r = L.rank;
    const std::size_t seg = segment_elems(L);
    const region last = L.block(buffer_id::input, P - 1);
    const std::size_t all = last.offset + last.count, mine = L.block_count(r);
    std::size_t largest = 0; // the staging space of a received block
    for (int q = 0; q < P; ++q) largest = std::max(largest, L.block_count(q));
    s.reserve(P > 2 ? all : 0, largest);
    auto work = [&](int c, int k) {
      // the block finished in the last step lands in the output, others in scratch
      return k == P - 2 ? region{buffer_id::output, 0, L.block_count(c)}
                        : L.block(buffer_id::scratch, c);
    };
    if (P == 1 || all == 0) {
      s.round_begin();
      s.copy({buffer_id::output, 0, mine}, L.block(buffer_id::input, r));
      s.finalize({buffer_id::output, 0, mine});
      s.round_end();
      return;
    }
    for (int k = 0; k < P - 1; ++k) {
      const int out_c = mod(r - k - 1, P), in_c = mod(r - k - 2, P);
      const region from = k == 0 ? L.block(buffer_id::input, out_c) : work(out_c, k - 1);
      const region to = work(in_c, k);
      const std::size_t in_at = L.block(buffer_id::input, in_c).offset;
      s.round_begin();
      segments(from, seg, [&](region g) { s.send(mod(r + 1, P), g); });
      segments(to, seg, [&](region g) {
        const std::size_t within = g.offset - to.offset;
        s.recv_reduce(mod(r - 1, P), g, region{buffer_id::input, in_at + within, g.count}, true);
      });
      if (k == P - 2) s.finalize(to);
      s.round_end();
    }
  }

  /// Allgather: rank r's input (`L.block_count(r)` elements) lands in block r of every
  /// output (`L.block`). In place when the input is block r of the output itself.
  template <class Sink>
  void allgather(Sink& s, const detail::layout& L) const {
    using namespace detail;
    const int P = L.size, r = L.rank;
    s.reserve(0, 0);
    auto block = [&](int c) { return L.block(buffer_id::output, c); };
    const region own{buffer_id::input, 0, L.block_count(r)};
    if (P == 1) {
      s.round_begin();
      s.copy(block(r), own);
      s.round_end();
      return;
    }
    // Step k sends block r-k and receives block r-k-1. The first send reads the input itself
    // (memory the caller wrote long ago, not a block this rank has just copied, which a
    // single-copy peer would then read out of this core's cache), and the copy of the own
    // block joins that round as a local step, run once the transfers are done.
    const std::size_t seg = segment_elems(L);
    for (int k = 0; k < P - 1; ++k) {
      s.round_begin();
      segments(k == 0 ? own : block(mod(r - k, P)), seg,
               [&](region g) { s.send(mod(r + 1, P), g); });
      segments(block(mod(r - k - 1, P)), seg, [&](region g) { s.recv(mod(r - 1, P), g); });
      if (k == 0) s.copy(block(r), own);
      s.round_end();
    }
  }

  std::size_t segment_elems(const detail::layout& L) const {
    return std::max<std::size_t>(1, max_segment_bytes / std::max<std::size_t>(1, L.elem_bytes));
  }

  /// Calls f(region) for each piece of at most `seg` elements of g (nothing if g is empty).
  template <class F>
  static void segments(detail::region g, std::size_t seg, F&& f) {
    for (std::size_t off = 0; off < g.count; off += seg)
      f(detail::region{g.buf, g.offset + off, std::min(seg, g.count - off)});
  }

  /// P-1 steps; in step k rank r sends where(r-k) and receives where(r-k-1).
  template <class Sink, class Where>
  static void allgather_steps(Sink& s, int P, int r, Where where, std::size_t seg) {
    using detail::mod;
    for (int k = 0; k < P - 1; ++k) {
      s.round_begin();
      segments(where(mod(r - k, P)), seg, [&](detail::region g) { s.send(mod(r + 1, P), g); });
      segments(where(mod(r - k - 1, P)), seg, [&](detail::region g) { s.recv(mod(r - 1, P), g); });
      s.round_end();
    }
  }
};

} // namespace tcoll
