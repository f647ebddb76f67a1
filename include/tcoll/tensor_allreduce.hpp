#pragma once
/// \file
/// Tensor allreduce (MXNET-MPI Sec. 6.1-6.3): a rank that owns several local buffers (one per
/// local device or thread) takes part as one member. Its buffers are reduced locally into
/// the first, the first buffers of all ranks are allreduced by a ring, and the result is
/// copied back to the other local buffers. The buffer is processed in segments so the local
/// reduction of segment s+1 (and the local broadcast of segment s-1) runs while the first
/// ring round of segment s is on the wire.
/// Cost per segment of n bytes, B local buffers, P ranks:
///   ring(P, n) + (B-1) n gamma_local + (B-1) n beta_local, with all but the first
///   segment's local reduction and the last segment's broadcast hidden behind transfers.
/// Ranks may own different numbers of buffers. A finalizing op (avg) divides by the total
/// number of buffers over all ranks, which a small allgather of every rank's (buffer count,
/// element count) finds first; that allgather also checks that every rank passed the
/// same element count (an invalid_argument on every rank naming the first rank that
/// differs from rank 0). Other ops need no exchange and do not check.
/// An entry point (it checks arguments and draws message spaces, and exchanges the counts
/// through the host reducer): the ring's steps are the algorithm's, run segment by segment.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "algorithm/detail/phase_op.hpp"
#include "algorithm/ring.hpp"
#include "algorithm/tagged.hpp"
#include "core/concepts.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "detail/collective_scope.hpp"
#include "detail/executor.hpp"
#include "detail/schedule.hpp"
#include "detail/validate.hpp"
#include "reduce/cpu.hpp"

namespace tcoll {

namespace detail {
template <class T>
bool ranges_overlap(const T* a, const T* b, std::size_t n) {
  const auto ia = reinterpret_cast<std::uintptr_t>(a), ib = reinterpret_cast<std::uintptr_t>(b);
  return ia < ib + n * sizeof(T) && ib < ia + n * sizeof(T);
}

/// The total number of local buffers over all ranks of `t`, from an allgather (in the
/// message space `tag`, host memory) of every rank's (buffer count, element count).
/// Throws invalid_argument, on every rank alike, when the element counts differ.
template <transport Tr>
int tensor_members(Tr& t, int tag, std::size_t buffers, std::size_t count, const ring& algo) {
  const int rank = t.rank(), P = t.size();
  const std::uint64_t mine[2] = {buffers, count};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(P));
  cpu_reducer host;
  guarded(t, [&] { allgather_tagged(t, tag, mine, all.data(), 2, algo, host); });
  std::uint64_t total = 0;
  for (int r = 0; r < P; ++r) {
    const std::size_t i = 2 * static_cast<std::size_t>(r);
    if (all[i + 1] != all[1])
      throw invalid_argument("tensor_allreduce: count differs across ranks: rank 0 passed " +
                                 std::to_string(all[1]) + ", rank " + std::to_string(r) +
                                 " passed " + std::to_string(all[i + 1]),
                             rank, r);
    total += all[i];
  }
  if (total > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw invalid_argument("tensor_allreduce: " + std::to_string(total) +
                               " buffers over all ranks is more than avg can divide by",
                           rank);
  return static_cast<int>(total);
}
} // namespace detail

/// Tuning knobs of `tensor_allreduce`.
struct tensor_options {
  static constexpr std::string_view name = "tensor";
  /// Pipeline segment: the local reduction of one segment overlaps the ring of the previous.
  std::size_t segment_bytes = std::size_t{4} << 20;
  /// The ring across ranks.
  ring inter{};
};

/// In-place allreduce of `count` elements over every local buffer of every rank: afterwards
/// each of `buffers` (on every rank) holds op over all ranks' buffers. The local buffers
/// must not overlap; the op must be commutative. `count` must be the same on every rank;
/// `buffers.size()` may differ. avg divides by the number of buffers over all ranks.
template <transport Tr, class T, class Op = sum_op, reducer R = cpu_reducer>
void tensor_allreduce(Tr& t, std::span<T* const> buffers, std::size_t count, const Op& op = {},
                      const tensor_options& opt = {}, R red = {}) {
  static_assert(commutative_op<Op>, "tcoll: tensor_allreduce reorders operands (ring); it needs "
                                    "a commutative op");
  detail::check_support<R, Op, T>();
  const int rank = t.rank(), P = t.size();
  const std::size_t B = buffers.size();
  if (B == 0) throw invalid_argument("tensor_allreduce: buffers is empty", rank);
  detail::check_count(count, 1, sizeof(T), "tensor_allreduce", rank);
  for (std::size_t b = 0; b < B; ++b) {
    const std::string arg = "buffers[" + std::to_string(b) + "]";
    detail::check_pointer(buffers[b], count, arg.c_str(), "tensor_allreduce", rank);
    for (std::size_t c = 0; c < b; ++c)
      if (count && detail::ranges_overlap(buffers[b], buffers[c], count))
        throw invalid_argument(
            "tensor_allreduce: " + arg + " overlaps buffers[" + std::to_string(c) + "]", rank);
  }
  int members = P * static_cast<int>(B); // every rank's buffers; exchanged for avg
  int tag = 0;
  if constexpr (finalizing_op<Op>) {
    tag = detail::begin_collective(t);
    members = detail::tensor_members(t, tag, B, count, opt.inter);
  }
  if (count == 0) return;
  if constexpr (!finalizing_op<Op>) tag = detail::begin_collective(t);
  const auto pop = detail::phase_op(op);
  using PhaseOp = std::remove_cv_t<decltype(pop)>;
  T* const acc = buffers[0];
  const std::size_t seg = std::max<std::size_t>(1, opt.segment_bytes / sizeof(T));
  const std::size_t nseg = (count + seg - 1) / seg;
  auto extent = [&](std::size_t s) {
    const std::size_t off = s * seg;
    return std::pair{off, std::min(seg, count - off)};
  };
  auto local_reduce = [&](std::size_t s) {
    const auto [off, n] = extent(s);
    for (std::size_t b = 1; b < B; ++b) red.reduce(pop, acc + off, acc + off, buffers[b] + off, n);
  };
  auto local_broadcast = [&](std::size_t s) {
    const auto [off, n] = extent(s);
    for (std::size_t b = 1; b < B; ++b) red.copy(buffers[b] + off, acc + off, n);
  };

  detail::guarded(t, [&] {
    local_reduce(0);
    red.synchronize();
    for (std::size_t s = 0; s < nseg; ++s) {
      const auto [off, n] = extent(s);
      detail::step_recorder rec;
      opt.inter.allreduce(rec, detail::layout{rank, P, n, sizeof(T), 0, true});
      detail::executor<Tr, R, T, PhaseOp> ex(t, red, pop, acc + off, n, acc + off, n, tag);
      ex.reserve(rec.scratch_count, rec.staging_count);
      // the ring records at least one round (one local copy round on a single rank)
      for (std::size_t i = 0; i < rec.rounds.size(); ++i) {
        ex.round_begin();
        for (const auto& st : rec.rounds[i]) ex.add(st);
        // local work on other segments while this round's transfers are in flight
        if (i == 0 && s + 1 < nseg) local_reduce(s + 1);
        if (i == 0 && s > 0) local_broadcast(s - 1);
        ex.round_end();
      }
      red.finalize(op, acc + off, n, members);
      red.synchronize();
    }
    local_broadcast(nseg - 1);
    red.synchronize();
  });
}

/// Overload for a braced list or vector of buffer pointers.
template <transport Tr, class T, class Op = sum_op, reducer R = cpu_reducer>
void tensor_allreduce(Tr& t, std::initializer_list<T*> buffers, std::size_t count,
                      const Op& op = {}, const tensor_options& opt = {}, R red = {}) {
  tensor_allreduce(t, std::span<T* const>(buffers.begin(), buffers.size()), count, op, opt, red);
}

} // namespace tcoll
