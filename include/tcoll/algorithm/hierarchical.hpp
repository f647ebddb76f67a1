#pragma once
/// \file
/// Hierarchical allreduce over two transports: `Intra` joins the ranks of one group (the
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
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../detail/executor.hpp"
#include "../detail/schedule.hpp"
#include "../detail/validate.hpp"
#include "binomial_tree.hpp"
#include "detail/phase_op.hpp"
#include "ring.hpp"
#include "tagged.hpp"
#include "via_leaders.hpp"

namespace tcoll {

/// Which hierarchical allreduce to run.
enum class hierarchical_form {
  leader,  ///< reduce to the group leader, allreduce among leaders, broadcast (GradientFlow)
  sharded, ///< reduce-scatter in the group, allreduce each shard across groups, allgather
};

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

/// Where this rank sits in the two-level machine (what the transports cannot tell).
struct hierarchy_shape {
  int world_rank = 0; ///< rank among all ranks (for error messages and tests)
  int world_size = 1; ///< number of ranks of all groups (avg divides by it)
  int shards = 1;     ///< smallest group size; local ranks below it have an inter transport
  /// World rank of each rank of the group transport, and of the transport across groups
  /// (empty on a rank without one). Given, an error either transport raises in its own
  /// ranks is raised again (same class) naming world ranks, the transport's own ranks
  /// quoted in the message. Leave them empty for transports that name world ranks already
  /// (the `subgroup` views of `split_groups`).
  std::vector<int> intra_world_ranks{};
  std::vector<int> inter_world_ranks{};
  /// The world ranks of every group in local-rank order, group i being the one whose leader
  /// (local rank 0) is rank i of the leaders' transport across groups (`hierarchy_map`).
  /// Every collective but allreduce needs it (they place blocks by world rank); without it
  /// they throw `invalid_argument`. `split_groups` returns it as `group_views::groups`;
  /// `mpi_node_hierarchy` fills it.
  std::vector<std::vector<int>> groups{};
};

/// Two transports composed into one two-level machine. `inter` may be null on ranks whose
/// local index is >= `shape.shards` (they never talk across groups).
template <transport Intra, transport Inter>
class hierarchical {
public:
  static constexpr std::string_view name = "hierarchical";
  /// Its algorithm knobs when a caller names none (it is a `communicator`, see
  /// communicator.hpp).
  using default_algorithm = hierarchical_options<ring>;

  hierarchical(Intra& intra, Inter* inter, hierarchy_shape shape)
      : intra_(&intra), inter_(inter), shape_(shape) {
    const int l = intra.rank();
    if (shape.shards < 1 || shape.shards > intra.size())
      throw invalid_argument("hierarchical: shards " + std::to_string(shape.shards) +
                                 " is outside [1, group size " + std::to_string(intra.size()) + "]",
                             shape.world_rank);
    if (shape.world_size < intra.size())
      throw invalid_argument("hierarchical: world_size " + std::to_string(shape.world_size) +
                                 " is smaller than the group",
                             shape.world_rank);
    if (l < shape.shards && inter == nullptr)
      throw invalid_argument("hierarchical: local rank " + std::to_string(l) + " is below shards " +
                                 std::to_string(shape.shards) + " but has no inter transport",
                             shape.world_rank);
    check_world_ranks(shape.intra_world_ranks, intra.size(), l, "intra_world_ranks");
    if (inter)
      check_world_ranks(shape.inter_world_ranks, inter->size(), inter->rank(), "inter_world_ranks");
    if (!shape_.groups.empty()) build_map();
  }

  int rank() const noexcept { return shape_.world_rank; }
  int size() const noexcept { return shape_.world_size; }
  const hierarchy_shape& shape() const noexcept { return shape_; }
  Intra& intra() noexcept { return *intra_; }
  Inter* inter() noexcept { return inter_; }

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

  /// Draws the message spaces of one hierarchical collective on both transports, before
  /// anything moves, so its place in the start order of each transport does not depend on
  /// how its phases interleave. Throws the cause if either transport is broken.
  std::pair<int, int> begin() {
    const int intra_tag = detail::begin_collective(*intra_);
    const int inter_tag = inter_ ? detail::begin_collective(*inter_) : 0;
    return {intra_tag, inter_tag};
  }

  /// Calls `f(transport&)` for the group transport and, on ranks that have one, the
  /// transport across groups.
  template <class F>
  void for_each_transport(F&& f) {
    f(*intra_);
    if (inter_) f(*inter_);
  }
  /// Queued collectives run on the group transport's engine.
  Intra& engine_transport() noexcept { return *intra_; }

  /// Where every world rank sits (from `hierarchy_shape::groups`); throws
  /// `invalid_argument` naming `what` when the shape did not give the groups.
  const hierarchy_map& group_map(const char* what) const {
    if (map_.groups.empty())
      throw invalid_argument(std::string(what) +
                                 " on a hierarchical machine needs "
                                 "hierarchy_shape::groups (the world ranks of every group)",
                             shape_.world_rank);
    return map_;
  }

  // The other collectives in the message spaces `begin()` drew, arguments already checked
  // (the `communicator` forms; see via_leaders.hpp for the algorithms).
  template <class T, class Op, reducer R>
  void reduce_scatter_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                             std::size_t count, const Op& op, const ring&, R& red) {
    via_leaders{}.reduce_scatter(*this, tags, sendbuf, recvbuf, count, op, binomial_tree{}, red);
  }
  /// Without the group map (`hierarchy_shape::groups`), a sum allreduce of a table that is
  /// zero but for this rank's block: twice the traffic, the same bits on every rank (a -0.0
  /// element arrives as +0.0), what machines built before the map existed get.
  template <class T, reducer R>
  void allgather_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                        const ring&, R& red) {
    if (!map_.groups.empty())
      return via_leaders{}.allgather(*this, tags, sendbuf, recvbuf, count, binomial_tree{}, red);
    const std::size_t all = count * static_cast<std::size_t>(size());
    const std::vector<T> zeros(all, T(0));
    if constexpr (host_device_copies<R>) // a device reducer's copy may not read host memory
      red.copy_from_host(recvbuf, zeros.data(), all);
    else
      red.copy(recvbuf, zeros.data(), all);
    red.copy(recvbuf + count * static_cast<std::size_t>(rank()), sendbuf, count);
    red.synchronize();
    allreduce_tagged(tags, recvbuf, recvbuf, all, sum_op{}, hierarchical_options<ring>{}, red);
  }
  template <class T, reducer R>
  void broadcast_tagged(std::pair<int, int> tags, T* buffer, std::size_t count, int root,
                        const binomial_tree& tree, R& red) {
    via_leaders{}.broadcast(*this, tags, buffer, count, root, tree, red);
  }
  template <class T, class Op, reducer R>
  void reduce_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                     int root, const Op& op, const binomial_tree& tree, R& red) {
    via_leaders{}.reduce(*this, tags, sendbuf, recvbuf, count, root, op, tree, red);
  }
  template <class T>
  void alltoall_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                       bool in_place, const pairwise_exchange& exchange) {
    via_leaders{}.alltoall(*this, tags, sendbuf, recvbuf, count, in_place, exchange);
  }
  template <class T>
  void alltoallv_tagged(std::pair<int, int> tags, const T* sendbuf,
                        std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, T* recvbuf,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs, bool,
                        const pairwise_exchange& exchange) {
    via_leaders{}.alltoallv(*this, tags, sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                            recv_displs, exchange);
  }
  template <class T>
  void gather_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                     int root, const linear& algo) {
    via_leaders{}.gather(*this, tags, sendbuf, recvbuf, count, root, algo);
  }
  template <class T>
  void scatter_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                      int root, const linear& algo) {
    via_leaders{}.scatter(*this, tags, sendbuf, recvbuf, count, root, algo);
  }
  template <class T>
  void gatherv_tagged(std::pair<int, int> tags, const T* sendbuf, std::size_t send_count,
                      T* recvbuf, std::span<const std::size_t> recv_counts,
                      std::span<const std::size_t> recv_displs, int root, const linear& algo) {
    via_leaders{}.gatherv(*this, tags, sendbuf, send_count, recvbuf, recv_counts, recv_displs, root,
                          algo);
  }
  template <class T>
  void scatterv_tagged(std::pair<int, int> tags, const T* sendbuf,
                       std::span<const std::size_t> send_counts,
                       std::span<const std::size_t> send_displs, T* recvbuf, std::size_t recv_count,
                       int root, const linear& algo) {
    via_leaders{}.scatterv(*this, tags, sendbuf, send_counts, send_displs, recvbuf, recv_count,
                           root, algo);
  }
  void barrier_tagged(std::pair<int, int> tags, const dissemination& algo) {
    via_leaders{}.barrier(*this, tags, algo);
  }

  /// `f()`, with an error the group transport raises in its own ranks named in world ranks
  /// (see hierarchy_shape::intra_world_ranks).
  template <class F>
  void in_group(F&& f) {
    naming_world_ranks(*intra_, shape_.intra_world_ranks, "inside the group", f);
  }
  /// `f()`, with an error the transport across groups raises named in world ranks.
  template <class F>
  void across_groups(F&& f) {
    naming_world_ranks(*inter_, shape_.inter_world_ranks, "across groups", f);
  }

  /// The allreduce in the message spaces `begin()` drew (the `communicator` form).
  template <class T, class Op, class InterAlgo, reducer R>
  void allreduce_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                        const Op& op, const hierarchical_options<InterAlgo>& opt, R& red) {
    static_assert(commutative_op<Op>, "tcoll: hierarchical allreduce reorders operands; it "
                                      "needs a commutative op");
    detail::check_support<R, Op, T>();
    allreduce_tagged(tags.first, tags.second, sendbuf, recvbuf, count, op, opt, red);
  }

  /// The allreduce in message spaces drawn by `begin()`, arguments already checked (the
  /// non-blocking entry points draw the tags when the call is queued).
  template <class T, class Op, class InterAlgo, reducer R>
  void allreduce_tagged(int intra_tag, int inter_tag, const T* sendbuf, T* recvbuf,
                        std::size_t count, const Op& op, const hierarchical_options<InterAlgo>& opt,
                        R& red) {
    const auto pop = detail::phase_op(op);
    using PhaseOp = std::remove_cv_t<decltype(pop)>;
    const int g = intra_->size(), l = intra_->rank(), m = shape_.shards;
    try {
      detail::executor<Intra, R, T, PhaseOp> ex(*intra_, red, pop, sendbuf, count, recvbuf, count,
                                                intra_tag);
      if (opt.form == hierarchical_form::leader) {
        in_group([&] { leader_phase1(ex, g, l, count); });
        if (l == 0) {
          across_groups([&] {
            detail::allreduce_tagged(*inter_, inter_tag, recvbuf, recvbuf, count, pop, opt.inter,
                                     red);
          });
          red.finalize(op, recvbuf, count, shape_.world_size);
          red.synchronize();
        }
        in_group([&] { leader_phase3(ex, g, l, count); });
        return;
      }
      if constexpr (allreduce_algorithm<InterAlgo>) {
        sharded_pipelined(sendbuf, recvbuf, count, op, pop, opt, red, intra_tag, inter_tag);
      } else {
        in_group([&] { sharded_phase1(ex, g, l, m, count, opt.intra, sizeof(T)); });
        if (l < m) {
          T* shard = recvbuf + detail::chunk_begin(count, m, l);
          const std::size_t n = detail::chunk_size(count, m, l);
          across_groups([&] {
            detail::allreduce_tagged(*inter_, inter_tag, shard, shard, n, pop, opt.inter, red);
          });
          red.finalize(op, shard, n, shape_.world_size);
          red.synchronize();
        }
        in_group([&] { sharded_phase3(ex, g, l, m, count, opt.intra, sizeof(T)); });
      }
    } catch (...) {
      const auto cause = std::current_exception();
      detail::fail_transport(*intra_, cause);
      if (inter_) detail::fail_transport(*inter_, cause);
      throw;
    }
  }

private:
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
  template <class T, class Op, class PhaseOp, class InterAlgo, reducer R>
  void sharded_pipelined(const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                         const PhaseOp& pop, const hierarchical_options<InterAlgo>& opt, R& red,
                         int intra_tag, int inter_tag) {
    using namespace detail;
    const int g = intra_->size(), l = intra_->rank(), m = shape_.shards;
    const std::size_t bytes = count * sizeof(T);
    std::size_t S = opt.pipeline_bytes ? (bytes + opt.pipeline_bytes - 1) / opt.pipeline_bytes : 1;
    S = std::clamp<std::size_t>(S, 1, 64);
    std::deque<step_recorder> recs;
    std::deque<executor<Intra, R, T, PhaseOp>> intra_ex;
    std::deque<executor<Inter, R, T, PhaseOp>> inter_ex;
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
      add_rounds(
          intra_ex.emplace_back(*intra_, red, pop, sendbuf + off, n, recvbuf + off, n, intra_tag),
          rec, lane);
    };
    auto inter_phase = [&](std::size_t seg, std::vector<lane_round>& lane) {
      const std::size_t off = chunk_begin(count, static_cast<int>(S), static_cast<int>(seg));
      const std::size_t n = chunk_size(count, static_cast<int>(S), static_cast<int>(seg));
      T* shard = recvbuf + off + chunk_begin(n, m, l);
      const std::size_t sn = chunk_size(n, m, l);
      auto& rec = recs.emplace_back();
      opt.inter.allreduce(rec, layout{inter_->rank(), inter_->size(), sn, sizeof(T), 0, true});
      add_rounds(inter_ex.emplace_back(*inter_, red, pop, shard, sn, shard, sn, inter_tag), rec,
                 lane);
      // the shard is final once its last round is done: finalize avg with the total count
      auto done = [this, &red, &op, shard, sn] {
        red.finalize(op, shard, sn, shape_.world_size);
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
        if (i < a.size()) in_group(a[i].post);
        if (i < b.size()) across_groups(b[i].post);
        if (i < a.size()) in_group(a[i].finish);
        if (i < b.size()) across_groups(b[i].finish);
      }
      // every round of this stage has completed: its executors can go
      intra_ex.clear();
      inter_ex.clear();
      recs.clear();
    }
  }

  template <class Tr, class F>
  void naming_world_ranks(Tr& t, const std::vector<int>& world_of, const char* where, F& f) {
    if (world_of.empty()) return f();
    try {
      f();
    } catch (const error& e) {
      if (e.rank() != t.rank()) throw; // not raised in the transport's own ranks
      const auto world = [&](int r) {
        return r >= 0 && r < static_cast<int>(world_of.size())
                   ? world_of[static_cast<std::size_t>(r)]
                   : -1;
      };
      std::string own = " (" + std::string(where) + ": rank " + std::to_string(e.rank());
      if (e.peer() >= 0) own += ", peer " + std::to_string(e.peer());
      detail::throw_like(e, e.message() + own + ")", shape_.world_rank, world(e.peer()));
    }
  }

  /// A world-rank map of hierarchy_shape: empty, or one distinct rank in [0, world_size)
  /// per rank of its transport, this rank's own world rank at `own`.
  void check_world_ranks(const std::vector<int>& ranks, int size, int own, const char* what) const {
    if (ranks.empty()) return;
    const int wr = shape_.world_rank;
    if (static_cast<int>(ranks.size()) != size)
      throw invalid_argument("hierarchical: " + std::string(what) + " has " +
                                 std::to_string(ranks.size()) + " entries for a transport of " +
                                 std::to_string(size) + " ranks",
                             wr);
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] < 0 || ranks[i] >= shape_.world_size ||
          std::count(ranks.begin(), ranks.end(), ranks[i]) != 1)
        throw invalid_argument("hierarchical: " + std::string(what) + "[" + std::to_string(i) +
                                   "] = " + std::to_string(ranks[i]) +
                                   " is outside [0, world_size) or listed twice",
                               wr);
    if (ranks[static_cast<std::size_t>(own)] != wr)
      throw invalid_argument("hierarchical: " + std::string(what) + "[" + std::to_string(own) +
                                 "] is " + std::to_string(ranks[static_cast<std::size_t>(own)]) +
                                 ", not this rank's world rank",
                             wr);
  }

  /// Checks `shape_.groups` against the transports and fills `map_`.
  void build_map() {
    const int wr = shape_.world_rank, P = shape_.world_size;
    auto bad = [&](const std::string& why) {
      return invalid_argument("hierarchical: hierarchy_shape::groups " + why, wr);
    };
    map_.group_of.assign(static_cast<std::size_t>(P), -1);
    map_.local_of.assign(static_cast<std::size_t>(P), -1);
    int smallest = P;
    for (std::size_t gi = 0; gi < shape_.groups.size(); ++gi) {
      const auto& members = shape_.groups[gi];
      if (members.empty()) throw bad("has an empty group " + std::to_string(gi));
      smallest = std::min(smallest, static_cast<int>(members.size()));
      for (std::size_t li = 0; li < members.size(); ++li) {
        const int w = members[li];
        if (w < 0 || w >= P || map_.group_of[static_cast<std::size_t>(w)] != -1)
          throw bad("lists rank " + std::to_string(w) + ", outside [0, world_size) or twice");
        map_.group_of[static_cast<std::size_t>(w)] = static_cast<int>(gi);
        map_.local_of[static_cast<std::size_t>(w)] = static_cast<int>(li);
      }
    }
    if (std::count(map_.group_of.begin(), map_.group_of.end(), -1))
      throw bad("leaves out some of the " + std::to_string(P) + " world ranks");
    const auto g = static_cast<std::size_t>(map_.group_of[static_cast<std::size_t>(wr)]);
    if (map_.local_of[static_cast<std::size_t>(wr)] != intra_->rank() ||
        shape_.groups[g].size() != static_cast<std::size_t>(intra_->size()))
      throw bad("does not place this rank at its place in the group transport");
    if (smallest != shape_.shards)
      throw bad("has a smallest group of " + std::to_string(smallest) + " ranks but shards is " +
                std::to_string(shape_.shards));
    if (intra_->rank() == 0 && inter_ &&
        (inter_->size() != static_cast<int>(shape_.groups.size()) ||
         inter_->rank() != static_cast<int>(g)))
      throw bad("does not match the leaders' transport across groups");
    map_.groups = shape_.groups;
  }

  static std::size_t segment(const ring& knobs, std::size_t elem_bytes) {
    return knobs.segment_elems(detail::layout{0, 1, 0, elem_bytes, 0, false});
  }

  Intra* intra_;
  Inter* inter_;
  hierarchy_shape shape_;
  hierarchy_map map_;
};

} // namespace tcoll
