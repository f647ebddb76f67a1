#pragma once
/// \file
/// The hierarchical allreduce on a two-level machine (`hierarchical<Intra, Inter>`,
/// hierarchical.hpp) of two transports: `Intra` joins the ranks of one group (the
/// devices or threads of a node: fast links), `Inter` joins groups (the network). Two forms:
///  - `leader` (GradientFlow Sec. 2.4, Fig. 7b): reduce to the group's local rank 0
///    (binomial tree), allreduce among the leaders with any inner algorithm (message size
///    K*M/N per GradientFlow: the whole buffer), broadcast in the group.
///  - `sharded` (bandwidth-optimal): ring reduce-scatter inside the group, allreduce of shard
///    l across groups by the ranks of local index l (all shards in parallel), ring
///    allgather inside the group. Each node sends one buffer across the network instead of
///    the flat ring's 2(P-1)/P buffers per rank on the node's boundary links.
/// Groups may have unequal sizes: with m = the smallest group size ("shards"), local ranks
/// l >= m first fold their vector onto local rank l mod m, the m core ranks run the
/// sharded form, and the folded ranks receive the result at the end. Counts need not
/// divide: shards are the near-equal chunks of `chunk_begin`.
/// Finalizing ops (avg) only accumulate inside the phases and are finalized once with the
/// total rank count, so every rank ends with bitwise identical results.
/// Costs: see docs/hierarchical.md (and plan/cost_model.hpp `hierarchical_*_allreduce_us`).
#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/collective_table.hpp" // hierarchical_form: which hierarchical allreduce
#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../detail/collective_scope.hpp"
#include "../detail/executor.hpp"
#include "../detail/schedule.hpp"
#include "binomial_tree.hpp"
#include "detail/phase_op.hpp"
#include "ring.hpp"
#include "tagged.hpp"

namespace tcoll {

/// Tuning knobs of the hierarchical allreduce. `InterAlgo` is the algorithm across groups:
/// any allreduce algorithm of tcoll (ring, recursive_doubling, ..., automatic, passthrough).
template <class InterAlgo = ring>
struct hierarchical_options {
  static constexpr std::string_view name = "hierarchical";
  hierarchical_form form = hierarchical_form::sharded;
  /// The algorithm across groups (among leaders, or per shard).
  InterAlgo inter{};
  /// Segmenting of the ring reduce-scatter/allgather inside a group (sharded form).
  ring intra{};
  /// Sharded form: the buffer is cut into pipeline segments of about this size (at most
  /// 64); segment s+1 is reduce-scattered inside the group (and s-1 allgathered) while
  /// segment s crosses the network. 0 disables the pipeline. Needs an `InterAlgo` that
  /// describes its steps (not `automatic` or `passthrough`, which run the phases in turn).
  /// 1 MiB: best of 1/4 MiB on the quiet 2-node x 2-thread shaped 10 Gbit/s run
  /// (docs/hierarchical.md); 4 MiB leaves a 4 MiB message unpipelined.
  std::size_t pipeline_bytes = std::size_t{1} << 20;
};

/// The algorithm (see the file comment). `M` is the machine: `intra()`, `inter()` (null on
/// ranks that never talk across groups), `shape().shards`, `size()`, and `in_group(f)` /
/// `across_groups(f)`, which run `f` naming an error in world ranks.
struct hierarchical_allreduce {
  static constexpr std::string_view name = "hierarchical";

  /// The step descriptions of the two intra phases, for counting and symbolic tests.
  /// Phase 1 (before the inter allreduce) and phase 3 (after it), sharded form.
  template <class Sink>
  static void sharded_phase1(Sink& s, int g, int l, int m, std::size_t n, const ring& knobs,
                             std::size_t elem_bytes) {
    using namespace detail;
    const std::size_t seg = segment(knobs, elem_bytes);
    const bool folding = g > m;
    s.reserve(0, l < m ? (folding ? n : chunk_size(n, m, 0)) : 0);
    buffer_id src = buffer_id::input;
    const region all_in{buffer_id::input, 0, n}, all_out{buffer_id::output, 0, n};
    if (folding) {
      if (l >= m) {
        s.round_begin();
        s.send(l % m, all_in);
        s.round_end();
        return;
      }
      for (int e = l + m; e < g; e += m) {
        s.round_begin();
        s.recv_reduce(e, all_out, src == buffer_id::input ? all_in : all_out, false);
        s.round_end();
        src = buffer_id::output;
      }
    }
    auto chunk = [&](buffer_id b, int c) {
      const int cc = mod(c, m);
      return region{b, chunk_begin(n, m, cc), chunk_size(n, m, cc)};
    };
    if (m == 1) {
      s.round_begin();
      s.copy(all_out, region{src, 0, n});
      s.round_end();
      return;
    }
    // ring reduce-scatter over the m core ranks; the local operand is `src` throughout
    for (int k = 0; k < m - 1; ++k) {
      s.round_begin();
      ring::segments(chunk(k == 0 ? src : buffer_id::output, l - k - 1), seg,
                     [&](region r) { s.send(mod(l + 1, m), r); });
      ring::segments(chunk(buffer_id::output, l - k - 2), seg, [&](region r) {
        s.recv_reduce(mod(l - 1, m), r, region{src, r.offset, r.count}, true);
      });
      s.round_end();
    }
  }
  template <class Sink>
  static void sharded_phase3(Sink& s, int g, int l, int m, std::size_t n, const ring& knobs,
                             std::size_t elem_bytes) {
    using namespace detail;
    const region all_out{buffer_id::output, 0, n};
    if (l < m && m > 1)
      ring::allgather_steps(
          s, m, l,
          [&](int c) {
            const int cc = mod(c, m);
            return region{buffer_id::output, chunk_begin(n, m, cc), chunk_size(n, m, cc)};
          },
          segment(knobs, elem_bytes));
    if (g > m) {
      s.round_begin();
      if (l >= m)
        s.recv(l % m, all_out);
      else
        for (int e = l + m; e < g; e += m) s.send(e, all_out);
      s.round_end();
    }
  }
  /// Leader form, phase 1: binomial reduce to local rank 0; phase 3: binomial broadcast.
  template <class Sink>
  static void leader_phase1(Sink& s, int g, int l, std::size_t n) {
    using namespace detail;
    s.reserve(l == 0 ? 0 : n, n);
    binomial_tree::reduce_steps(s, layout{l, g, n, 1, 0, false}, 0,
                                l == 0 ? buffer_id::output : buffer_id::scratch);
  }
  template <class Sink>
  static void leader_phase3(Sink& s, int g, int l, std::size_t n) {
    binomial_tree::broadcast_steps(s, detail::layout{l, g, n, 1, 0, true}, 0);
  }

  /// The allreduce on `machine` in its message spaces (inside the group, across groups),
  /// arguments already checked. A failure fails both transports and is rethrown.
  template <class M, class T, class Op, class InterAlgo, reducer R>
  static void run(M& machine, int intra_tag, int inter_tag, const T* sendbuf, T* recvbuf,
                  std::size_t count, const Op& op, const hierarchical_options<InterAlgo>& opt,
                  R& red) {
    const auto pop = detail::phase_op(op);
    using PhaseOp = std::remove_cv_t<decltype(pop)>;
    const int g = machine.intra().size(), l = machine.intra().rank(), m = machine.shape().shards;
    try {
      detail::executor<intra_t<M>, R, T, PhaseOp> ex(machine.intra(), red, pop, sendbuf, count,
                                                     recvbuf, count, intra_tag);
      if (opt.form == hierarchical_form::leader) {
        machine.in_group([&] { leader_phase1(ex, g, l, count); });
        if (l == 0) {
          machine.across_groups([&] {
            detail::allreduce_tagged(*machine.inter(), inter_tag, recvbuf, recvbuf, count, pop,
                                     opt.inter, red);
          });
          red.finalize(op, recvbuf, count, machine.size());
          red.synchronize();
        }
        machine.in_group([&] { leader_phase3(ex, g, l, count); });
        return;
      }
      if constexpr (allreduce_algorithm<InterAlgo>) {
        sharded_pipelined(machine, sendbuf, recvbuf, count, op, pop, opt, red, intra_tag,
                          inter_tag);
      } else {
        machine.in_group([&] { sharded_phase1(ex, g, l, m, count, opt.intra, sizeof(T)); });
        if (l < m) {
          T* shard = recvbuf + detail::chunk_begin(count, m, l);
          const std::size_t n = detail::chunk_size(count, m, l);
          machine.across_groups([&] {
            detail::allreduce_tagged(*machine.inter(), inter_tag, shard, shard, n, pop, opt.inter,
                                     red);
          });
          red.finalize(op, shard, n, machine.size());
          red.synchronize();
        }
        machine.in_group([&] { sharded_phase3(ex, g, l, m, count, opt.intra, sizeof(T)); });
      }
    } catch (...) {
      const auto cause = std::current_exception();
      detail::fail_transport(machine.intra(), cause);
      if (machine.inter()) detail::fail_transport(*machine.inter(), cause);
      throw;
    }
  }

private:
  static std::size_t segment(const ring& knobs, std::size_t elem_bytes) {
    return knobs.segment_elems(detail::layout{0, 1, 0, elem_bytes, 0, false});
  }
  template <class M>
  using intra_t = std::remove_reference_t<decltype(std::declval<M&>().intra())>;
  template <class M>
  using inter_t = std::remove_pointer_t<decltype(std::declval<M&>().inter())>;

  /// One round of one lane of the pipeline: post its transfers, later wait for them.
  struct lane_round {
    std::function<void()> post;
    std::function<void()> finish;
  };

  /// Sharded form as a software pipeline over S segments. Stage t runs, side by side, the
  /// intra lane (reduce-scatter of segment t, then allgather of segment t-2) and the inter
  /// lane (allreduce of segment t-1 across groups): round i of both lanes is posted before
  /// either is waited for, so the network transfer of one segment overlaps the work inside
  /// the group on others. The segments touch disjoint memory. S = 1 is the plain sequence.
  template <class M, class T, class Op, class PhaseOp, class InterAlgo, reducer R>
  static void sharded_pipelined(M& machine, const T* sendbuf, T* recvbuf, std::size_t count,
                                const Op& op, const PhaseOp& pop,
                                const hierarchical_options<InterAlgo>& opt, R& red, int intra_tag,
                                int inter_tag) {
    using namespace detail;
    const int g = machine.intra().size(), l = machine.intra().rank(), m = machine.shape().shards;
    const std::size_t bytes = count * sizeof(T);
    std::size_t S = opt.pipeline_bytes ? (bytes + opt.pipeline_bytes - 1) / opt.pipeline_bytes : 1;
    S = std::clamp<std::size_t>(S, 1, 64);
    std::deque<step_recorder> recs;
    std::deque<executor<intra_t<M>, R, T, PhaseOp>> intra_ex;
    std::deque<executor<inter_t<M>, R, T, PhaseOp>> inter_ex;
    auto add_rounds = [](auto& ex, const step_recorder& rec, std::vector<lane_round>& lane) {
      ex.reserve(rec.scratch_count, rec.staging_count);
      for (const auto& round : rec.rounds)
        lane.push_back({[&ex, &round] {
                          ex.round_begin();
                          for (const auto& st : round) ex.add(st);
                        },
                        [&ex] { ex.round_end(); }});
    };
    auto intra_phase = [&](std::size_t seg, bool gather, std::vector<lane_round>& lane) {
      const std::size_t off = chunk_begin(count, static_cast<int>(S), static_cast<int>(seg));
      const std::size_t n = chunk_size(count, static_cast<int>(S), static_cast<int>(seg));
      auto& rec = recs.emplace_back();
      if (gather)
        sharded_phase3(rec, g, l, m, n, opt.intra, sizeof(T));
      else
        sharded_phase1(rec, g, l, m, n, opt.intra, sizeof(T));
      add_rounds(intra_ex.emplace_back(machine.intra(), red, pop, sendbuf + off, n, recvbuf + off,
                                       n, intra_tag),
                 rec, lane);
    };
    auto inter_phase = [&](std::size_t seg, std::vector<lane_round>& lane) {
      const std::size_t off = chunk_begin(count, static_cast<int>(S), static_cast<int>(seg));
      const std::size_t n = chunk_size(count, static_cast<int>(S), static_cast<int>(seg));
      T* shard = recvbuf + off + chunk_begin(n, m, l);
      const std::size_t sn = chunk_size(n, m, l);
      auto& rec = recs.emplace_back();
      opt.inter.allreduce(
          rec, layout{machine.inter()->rank(), machine.inter()->size(), sn, sizeof(T), 0, true});
      add_rounds(inter_ex.emplace_back(*machine.inter(), red, pop, shard, sn, shard, sn, inter_tag),
                 rec, lane);
      // the shard is final once its last round is done: finalize avg with the total count
      auto done = [&machine, &red, &op, shard, sn] {
        red.finalize(op, shard, sn, machine.size());
        red.synchronize();
      };
      if (lane.empty())
        lane.push_back({[] {}, done});
      else
        lane.back().finish = [f = lane.back().finish, done] {
          f();
          done();
        };
    };
    for (std::size_t t = 0; t < S + 2; ++t) {
      std::vector<lane_round> a, b;
      if (t < S) intra_phase(t, false, a);
      if (t >= 2) intra_phase(t - 2, true, a);
      if (t >= 1 && t - 1 < S && l < m) inter_phase(t - 1, b);
      for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        if (i < a.size()) machine.in_group(a[i].post);
        if (i < b.size()) machine.across_groups(b[i].post);
        if (i < a.size()) machine.in_group(a[i].finish);
        if (i < b.size()) machine.across_groups(b[i].finish);
      }
      // every round of this stage has completed: its executors can go
      intra_ex.clear();
      inter_ex.clear();
      recs.clear();
    }
  }
};

} // namespace tcoll
