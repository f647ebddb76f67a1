#pragma once
/// \file
/// Every collective but allreduce on a two-level machine, through the group leaders (local
/// rank 0 of each group): the data of a group meets at its leader (inside the group), the
/// leaders run the collective among themselves (across groups), and the leader hands the
/// group its part (inside the group). Each rank's data crosses the network once, in one
/// message per pair of leaders where the collective allows (all-to-all packs per group).
///
// clang-format off
/// | collective | inside the group | among the leaders | inside the group |
/// |---|---|---|---|
/// | barrier | dissemination | dissemination | dissemination |
/// | broadcast | root to its leader | the broadcast asked for (binomial by default) | binomial broadcast |
/// | reduce | binomial reduce | binomial reduce | leader to the root |
/// | allgather | gather to the leader | every group's blocks to every leader | binomial broadcast |
/// | allgatherv | gather, packed in rank order | runs of consecutive ranks | broadcast, then each rank places the blocks |
/// | reduce_scatter(v) | binomial reduce of all blocks | each group's blocks to its leader, reduced | scatter |
/// | alltoall | gather of every row | one packed block per pair of leaders | scatter of rows |
/// | gather | gather to the leader | linear gather to the root's leader | leader to the root |
/// | scatter | root to its leader | linear scatter from the root's leader | scatter |
// clang-format on
///
/// The machine runs all-to-all (and alltoallv) here only where its groups differ in size (or
/// when told to): with groups of one size it goes through the peers (via_peers.hpp).
///
/// Reductions need a commutative op (groups reorder operands); finalizing ops (avg) only
/// accumulate in the phases and are finalized once with the total rank count. All-to-all,
/// gather and scatter stage blocks in host vectors, so they take host memory and a host
/// reducer (checked at compile time); the others run the generic executor and so work on
/// any memory the reducer handles.
///
/// The machine `M` (hierarchical.hpp) provides `intra()`, `inter()` (null on ranks that never
/// talk across groups), `rank()`, `size()`, `group_map(what)` (where every world rank sits,
/// see `hierarchy_map`), and `in_group(f)` / `across_groups(f)`, which run `f` and name an
/// error in world ranks. `tags` are the message spaces of one collective: inside the group
/// and across groups. Phases that reuse a message space between the same two ranks send in
/// opposite directions or in posting order, which every transport matches in order.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/ops.hpp"
#include "../detail/executor.hpp"
#include "binomial_tree.hpp"
#include "detail/phase_op.hpp"
#include "dissemination.hpp"
#include "linear.hpp"
#include "pairwise_exchange.hpp"
#include "tagged.hpp"

namespace tcoll {

/// Where every rank of a two-level machine sits.
struct hierarchy_map {
  /// The world ranks of every group in local-rank order; group i is the one whose leader
  /// is rank i of the leaders' transport across groups.
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of; ///< group of each world rank
  std::vector<int> local_of; ///< local rank of each world rank inside its group
};

/// See the file comment.
struct via_leaders {
  static constexpr std::string_view name = "via_leaders";

  template <class M, reducer R>
  void barrier(M& m, std::pair<int, int> tags, const dissemination& algo, R& red) const {
    auto& intra = m.intra();
    m.in_group([&] { algo.barrier(intra, tags.first, red); });
    if (intra.rank() == 0 && m.inter() && m.inter()->size() > 1)
      m.across_groups([&] { algo.barrier(*m.inter(), tags.second, red); });
    m.in_group([&] { algo.barrier(intra, tags.first, red); });
  }

  /// `among_leaders`: the broadcast the leaders run, one of the table's (the binomial tree by
  /// default; scatter_allgather or chain for long vectors across slow links; in_segment runs
  /// the tree where the leaders' transport has no collective area); inside the groups, the
  /// binomial tree.
  template <class M, class T, class Algo, reducer R>
  void broadcast(M& m, std::pair<int, int> tags, T* buffer, std::size_t count, int root,
                 const Algo& among_leaders, R& red) const {
    const binomial_tree tree;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "broadcast", root);
    if (a == rg && rl != 0 && (l == 0 || l == rl))
      m.in_group([&] { move(intra, tags.first, l == rl, l == rl ? 0 : rl, buffer, count, red); });
    if (l == 0 && map.groups.size() > 1)
      m.across_groups([&] {
        detail::broadcast_tagged(*m.inter(), tags.second, buffer, count, rg, among_leaders, red);
      });
    m.in_group([&] { detail::broadcast_tagged(intra, tags.first, buffer, count, 0, tree, red); });
  }

  template <class M, class T, class Op, reducer R>
  void reduce(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
              int root, const Op& op, const binomial_tree& tree, R& red) const {
    static_assert(commutative_op<Op>, "tcoll: a hierarchical reduce reorders operands; it needs "
                                      "a commutative op");
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "reduce", root);
    const bool is_root = m.rank() == root;
    const auto pop = detail::phase_op(op);
    auto space = red.template allocate<T>(l == 0 && !is_root ? count : 0);
    T* acc = l != 0 ? nullptr : is_root ? recvbuf : space.data();
    m.in_group(
        [&] { detail::reduce_tagged(intra, tags.first, sendbuf, acc, count, 0, pop, tree, red); });
    if (l == 0 && map.groups.size() > 1)
      m.across_groups([&] {
        detail::reduce_tagged(*m.inter(), tags.second, acc, acc, count, rg, pop, tree, red);
      });
    if (a == rg && rl != 0 && (l == 0 || l == rl))
      m.in_group([&] {
        move(intra, tags.first, l == 0, l == 0 ? rl : 0, l == 0 ? acc : recvbuf, count, red);
      });
    if (is_root) {
      red.finalize(op, recvbuf, count, m.size());
      red.synchronize();
    }
  }

  template <class M, class T, reducer R>
  void allgather(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                 const binomial_tree& tree, R& red) const {
    using namespace detail;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "allgather");
    const auto all = static_cast<std::size_t>(m.size()) * count;
    const std::vector<int>& mine = map.groups[static_cast<std::size_t>(a)];
    m.in_group([&] {
      executor<std::remove_reference_t<decltype(intra)>, R, T, no_reduce_op> ex(
          intra, red, {}, sendbuf, count, recvbuf, all, tags.first);
      ex.round_begin();
      if (l == 0) {
        for (std::size_t j = 1; j < mine.size(); ++j) ex.recv(int(j), block(mine[j], count));
        if (sendbuf != recvbuf + static_cast<std::size_t>(me) * count)
          ex.copy(block(me, count), region{buffer_id::input, 0, count});
      } else {
        ex.send(0, region{buffer_id::input, 0, count});
      }
      ex.round_end();
    });
    if (l == 0 && map.groups.size() > 1)
      m.across_groups([&] {
        auto& inter = *m.inter();
        executor<std::remove_reference_t<decltype(inter)>, R, T, no_reduce_op> ex(
            inter, red, {}, recvbuf, all, recvbuf, all, tags.second);
        ex.round_begin();
        for (int c = 0; c < static_cast<int>(map.groups.size()); ++c) {
          if (c == a) continue;
          for (const auto& [first, n] : runs(map.groups[static_cast<std::size_t>(c)]))
            ex.recv(c, region{buffer_id::output, std::size_t(first) * count, n * count});
          for (const auto& [first, n] : runs(mine))
            ex.send(c, region{buffer_id::output, std::size_t(first) * count, n * count});
        }
        ex.round_end();
      });
    m.in_group([&] { detail::broadcast_tagged(intra, tags.first, recvbuf, all, 0, tree, red); });
  }

  template <class M, class T, class Op, reducer R>
  void reduce_scatter(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                      std::size_t count, const Op& op, const binomial_tree& tree, R& red) const {
    const auto P = static_cast<std::size_t>(m.size());
    std::vector<std::size_t> counts(P, count), offsets(P);
    for (std::size_t q = 0; q < P; ++q) offsets[q] = q * count;
    reduce_scatterv(m, tags, sendbuf, recvbuf, counts, offsets, op, tree, red);
  }

  /// Reduce-scatter of blocks of their own sizes: block q (`counts[q]` elements) starts at
  /// `offsets[q]`, the blocks one after another in world-rank order.
  template <class M, class T, class Op, reducer R>
  void reduce_scatterv(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                       std::span<const std::size_t> counts, std::span<const std::size_t> offsets,
                       const Op& op, const binomial_tree& tree, R& red) const {
    static_assert(commutative_op<Op>, "tcoll: a hierarchical reduce_scatter reorders operands; "
                                      "it needs a commutative op");
    using namespace detail;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "reduce_scatter");
    const int G = static_cast<int>(map.groups.size());
    const std::size_t all = offsets.back() + counts.back();
    const auto own = static_cast<std::size_t>(me);
    const std::vector<int>& mine = map.groups[static_cast<std::size_t>(a)];
    // consecutive world ranks' blocks lie one after another
    auto run_region = [&](int first, std::size_t n) {
      const auto f = static_cast<std::size_t>(first), last = f + n - 1;
      return region{buffer_id::output, offsets[f], offsets[last] + counts[last] - offsets[f]};
    };
    std::size_t mine_count = 0;
    for (int q : mine) mine_count += counts[static_cast<std::size_t>(q)];
    const auto pop = phase_op(op);
    using PhaseOp = std::remove_cv_t<decltype(pop)>;
    auto space = red.template allocate<T>(l == 0 ? all : 0);
    T* acc = l == 0 ? space.data() : nullptr;
    m.in_group([&] { reduce_tagged(intra, tags.first, sendbuf, acc, all, 0, pop, tree, red); });
    if (l == 0 && G > 1)
      m.across_groups([&] {
        // round k: the blocks of group a + k go to its leader, the partial sums of this
        // group's blocks come from group a - k and are reduced in: a fixed order per leader
        auto& inter = *m.inter();
        executor<std::remove_reference_t<decltype(inter)>, R, T, PhaseOp> ex(
            inter, red, pop, acc, all, acc, all, tags.second);
        ex.reserve(0, mine_count);
        for (int k = 1; k < G; ++k) {
          const int to = (a + k) % G, from = (a - k + G) % G;
          ex.round_begin();
          for (const auto& [first, n] : runs(map.groups[static_cast<std::size_t>(to)]))
            ex.send(to, run_region(first, n));
          for (const auto& [first, n] : runs(mine)) {
            const region r = run_region(first, n);
            ex.recv_reduce(from, r, r, true);
          }
          ex.round_end();
        }
      });
    m.in_group([&] {
      executor<std::remove_reference_t<decltype(intra)>, R, T, no_reduce_op> ex(
          intra, red, {}, acc, acc ? all : 0, recvbuf, counts[own], tags.first);
      ex.round_begin();
      if (l == 0) {
        for (std::size_t j = 1; j < mine.size(); ++j) {
          const auto q = static_cast<std::size_t>(mine[j]);
          ex.send(int(j), region{buffer_id::input, offsets[q], counts[q]});
        }
        ex.copy(region{buffer_id::output, 0, counts[own]},
                region{buffer_id::input, offsets[own], counts[own]});
      } else {
        ex.recv(0, region{buffer_id::output, 0, counts[own]});
      }
      ex.round_end();
    });
    red.finalize(op, recvbuf, counts[own], m.size());
    red.synchronize();
  }

  /// Allgather of blocks of their own sizes (block q: `counts[q]` elements at `displs[q]` of
  /// `recvbuf`, each rank its own displacements): the blocks travel packed in world-rank
  /// order (gather to the leader, runs of consecutive ranks among the leaders, broadcast in
  /// the group) and each rank then places them, so gaps of `recvbuf` stay unwritten.
  template <class M, class T, reducer R>
  void allgatherv(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                  std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                  const binomial_tree& tree, R& red) const {
    using namespace detail;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "allgatherv");
    const std::size_t P = counts.size(), own = static_cast<std::size_t>(me);
    std::vector<std::size_t> packed_at(P);
    std::size_t all = 0;
    for (std::size_t q = 0; q < P; ++q) {
      packed_at[q] = all;
      all += counts[q];
    }
    auto run_region = [&](int first, std::size_t n) {
      const auto f = static_cast<std::size_t>(first), last = f + n - 1;
      return region{buffer_id::output, packed_at[f], packed_at[last] + counts[last] - packed_at[f]};
    };
    auto space = red.template allocate<T>(all);
    T* packed = space.data();
    const std::vector<int>& mine = map.groups[static_cast<std::size_t>(a)];
    m.in_group([&] {
      executor<std::remove_reference_t<decltype(intra)>, R, T, no_reduce_op> ex(
          intra, red, {}, sendbuf, counts[own], packed, all, tags.first);
      ex.round_begin();
      if (l == 0) {
        for (std::size_t j = 1; j < mine.size(); ++j) {
          const auto q = static_cast<std::size_t>(mine[j]);
          ex.recv(int(j), region{buffer_id::output, packed_at[q], counts[q]});
        }
        ex.copy(region{buffer_id::output, packed_at[own], counts[own]},
                region{buffer_id::input, 0, counts[own]});
      } else {
        ex.send(0, region{buffer_id::input, 0, counts[own]});
      }
      ex.round_end();
    });
    if (l == 0 && map.groups.size() > 1)
      m.across_groups([&] {
        auto& inter = *m.inter();
        executor<std::remove_reference_t<decltype(inter)>, R, T, no_reduce_op> ex(
            inter, red, {}, packed, all, packed, all, tags.second);
        ex.round_begin();
        for (int c = 0; c < static_cast<int>(map.groups.size()); ++c) {
          if (c == a) continue;
          for (const auto& [first, n] : runs(map.groups[static_cast<std::size_t>(c)]))
            ex.recv(c, run_region(first, n));
          for (const auto& [first, n] : runs(mine)) ex.send(c, run_region(first, n));
        }
        ex.round_end();
      });
    m.in_group([&] { detail::broadcast_tagged(intra, tags.first, packed, all, 0, tree, red); });
    for (std::size_t q = 0; q < P; ++q)
      if (counts[q]) red.copy(recvbuf + displs[q], packed + packed_at[q], counts[q]);
    red.synchronize();
  }

  /// All-to-all of `count` elements per pair (host memory); the send side of an in-place
  /// call is read from a copy.
  template <class M, class T, reducer R>
  void alltoall(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                bool in_place, const pairwise_exchange& exchange, R& red) const {
    host_memory_only<R>();
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "alltoall");
    const auto G = map.groups.size();
    const std::size_t row = static_cast<std::size_t>(m.size()) * count;
    std::vector<T> copy;
    if (in_place) {
      copy.assign(sendbuf, sendbuf + row);
      sendbuf = copy.data();
    }
    // rows[j]: the send buffer of local rank j; then columns[j]: its receive buffer
    std::vector<T> rows(l == 0 ? g * row : 0), columns(l == 0 ? g * row : 0);
    m.in_group([&] {
      linear{}.gather(intra, tags.first, 0, sendbuf, row * sizeof(T),
                      blocks_of(rows.data(), g, row), red);
    });
    if (l == 0) {
      // packed[c]: this group's blocks for group c, [sender j][receiver k]; unpacked[c]:
      // group c's blocks for this group, [sender j][receiver k]
      std::vector<std::size_t> offset(G + 1, 0);
      for (std::size_t c = 0; c < G; ++c) offset[c + 1] = offset[c] + g * map.groups[c].size();
      std::vector<T> packed(offset[G] * count), unpacked(offset[G] * count);
      for (std::size_t c = 0; c < G; ++c)
        for (std::size_t j = 0; j < g; ++j)
          for (std::size_t k = 0; k < map.groups[c].size(); ++k)
            copy_block(packed.data() + (offset[c] + j * map.groups[c].size() + k) * count,
                       rows.data() + j * row + std::size_t(map.groups[c][k]) * count, count);
      std::vector<exchange_block> blocks(G);
      for (std::size_t c = 0; c < G; ++c) {
        const std::size_t bytes = (offset[c + 1] - offset[c]) * count * sizeof(T);
        blocks[c] = {packed.data() + offset[c] * count, bytes, unpacked.data() + offset[c] * count,
                     bytes};
      }
      across_or_here(m, exchange, tags.second, blocks, red);
      for (std::size_t c = 0; c < G; ++c)
        for (std::size_t j = 0; j < map.groups[c].size(); ++j)
          for (std::size_t k = 0; k < g; ++k)
            copy_block(columns.data() + k * row + std::size_t(map.groups[c][j]) * count,
                       unpacked.data() + (offset[c] + j * g + k) * count, count);
    }
    m.in_group([&] {
      linear{}.scatter(intra, tags.first, 0, recvbuf, row * sizeof(T),
                       blocks_of(columns.data(), g, row), red);
    });
  }

  /// All-to-all with a block of its own size for every pair (host memory; counts and
  /// displacements in elements, already checked on this rank). The counts travel with the
  /// data (the leaders pack by them), and each rank checks the counts that reach it
  /// against its own `recv_counts`, naming the peer of a mismatch.
  template <class M, class T, reducer R>
  void alltoallv(M& m, std::pair<int, int> tags, const T* sendbuf,
                 std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 T* recvbuf, std::span<const std::size_t> recv_counts,
                 std::span<const std::size_t> recv_displs, const pairwise_exchange& exchange,
                 R& red) const {
    host_memory_only<R>();
    using count_t = std::uint64_t;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "alltoallv");
    const auto P = static_cast<std::size_t>(m.size()), G = map.groups.size();
    // this rank's row: its counts to every rank, its blocks packed in world-rank order (a
    // copy, so an in-place call reads its send side before anything is written)
    std::vector<count_t> my_counts(send_counts.begin(), send_counts.end());
    std::vector<T> my_row;
    for (std::size_t y = 0; y < P; ++y)
      my_row.insert(my_row.end(), sendbuf + send_displs[y],
                    sendbuf + send_displs[y] + send_counts[y]);
    // 1: the leader gathers every member's counts, then its row
    std::vector<count_t> counts(l == 0 ? g * P : 0);
    m.in_group([&] {
      linear{}.gather(intra, tags.first, 0, my_counts.data(), P * sizeof(count_t),
                      blocks_of(counts.data(), g, P), red);
    });
    // start[j * (P + 1) + y]: where member j's block for world rank y begins in `rows`
    std::vector<std::size_t> start(l == 0 ? g * (P + 1) : 0);
    std::size_t at = 0;
    for (std::size_t j = 0; j < (l == 0 ? g : 0); ++j) {
      for (std::size_t y = 0; y < P; ++y) {
        start[j * (P + 1) + y] = at;
        at += counts[j * P + y];
      }
      start[j * (P + 1) + P] = at;
    }
    std::vector<T> rows(at);
    m.in_group([&] {
      std::vector<root_block> blocks;
      for (std::size_t j = 0; j < (l == 0 ? g : 0); ++j)
        blocks.push_back({rows.data() + start[j * (P + 1)],
                          (start[j * (P + 1) + P] - start[j * (P + 1)]) * sizeof(T)});
      linear{}.gather(intra, tags.first, 0, my_row.data(), my_row.size() * sizeof(T),
                      std::span<const root_block>(blocks), red);
    });
    // 2: the leaders exchange, per pair of groups, the counts [sender][receiver] and then
    // the blocks in that order; 3: each member's column (counts, then blocks in world order)
    std::vector<count_t> column_counts(l == 0 ? g * P : 0);
    std::vector<T> columns;
    std::vector<std::size_t> column_start(l == 0 ? g + 1 : 0);
    if (l == 0) {
      std::vector<std::size_t> offset(G + 1, 0); // g * g_c counts per group c, both ways
      for (std::size_t c = 0; c < G; ++c) offset[c + 1] = offset[c] + g * map.groups[c].size();
      std::vector<count_t> out_counts(offset[G]), in_counts(offset[G]);
      std::vector<std::size_t> out_start(G + 1, 0);
      std::vector<T> out_data;
      for (std::size_t c = 0; c < G; ++c) {
        const auto& to = map.groups[c];
        for (std::size_t j = 0; j < g; ++j)
          for (std::size_t k = 0; k < to.size(); ++k) {
            const auto y = static_cast<std::size_t>(to[k]);
            out_counts[offset[c] + j * to.size() + k] = counts[j * P + y];
            const T* from = rows.data() + start[j * (P + 1) + y];
            out_data.insert(out_data.end(), from, from + counts[j * P + y]);
          }
        out_start[c + 1] = out_data.size();
      }
      std::vector<exchange_block> blocks(G);
      for (std::size_t c = 0; c < G; ++c)
        blocks[c] = {out_counts.data() + offset[c], (offset[c + 1] - offset[c]) * sizeof(count_t),
                     in_counts.data() + offset[c], (offset[c + 1] - offset[c]) * sizeof(count_t)};
      across_or_here(m, exchange, tags.second, blocks, red);
      // in_counts of group c: [sender jx in c][receiver k in this group]
      std::vector<std::size_t> in_start(offset[G] + 1, 0);
      for (std::size_t i = 0; i < offset[G]; ++i) in_start[i + 1] = in_start[i] + in_counts[i];
      std::vector<T> in_data(in_start[offset[G]]);
      for (std::size_t c = 0; c < G; ++c)
        blocks[c] = {out_data.data() + out_start[c], (out_start[c + 1] - out_start[c]) * sizeof(T),
                     in_data.data() + in_start[offset[c]],
                     (in_start[offset[c + 1]] - in_start[offset[c]]) * sizeof(T)};
      across_or_here(m, exchange, tags.second, blocks, red);
      for (std::size_t k = 0; k < g; ++k) {
        column_start[k] = columns.size();
        for (std::size_t x = 0; x < P; ++x) {
          const auto c = static_cast<std::size_t>(map.group_of[x]);
          const auto jx = static_cast<std::size_t>(map.local_of[x]);
          const std::size_t i = offset[c] + jx * g + k;
          column_counts[k * P + x] = in_counts[i];
          columns.insert(columns.end(), in_data.begin() + std::ptrdiff_t(in_start[i]),
                         in_data.begin() + std::ptrdiff_t(in_start[i + 1]));
        }
      }
      column_start[g] = columns.size();
    }
    std::vector<count_t> arrived(P);
    m.in_group([&] {
      linear{}.scatter(intra, tags.first, 0, arrived.data(), P * sizeof(count_t),
                       blocks_of(column_counts.data(), g, P), red);
    });
    std::size_t total = 0;
    for (std::size_t x = 0; x < P; ++x) {
      if (arrived[x] != recv_counts[x])
        throw invalid_argument("alltoallv: rank " + std::to_string(x) + " sends this rank " +
                                   std::to_string(arrived[x]) + " elements but recv_counts[" +
                                   std::to_string(x) + "] is " + std::to_string(recv_counts[x]),
                               me, static_cast<int>(x));
      total += recv_counts[x];
    }
    std::vector<T> column(total);
    m.in_group([&] {
      std::vector<root_block> blocks;
      for (std::size_t k = 0; k < (l == 0 ? g : 0); ++k)
        blocks.push_back({columns.data() + column_start[k],
                          (column_start[k + 1] - column_start[k]) * sizeof(T)});
      linear{}.scatter(intra, tags.first, 0, column.data(), total * sizeof(T),
                       std::span<const root_block>(blocks), red);
    });
    std::size_t from = 0;
    for (std::size_t x = 0; x < P; ++x) {
      copy_block(recvbuf + recv_displs[x], column.data() + from, recv_counts[x]);
      from += recv_counts[x];
    }
  }

  /// Gather of `count` elements per rank to `root` (host memory).
  template <class M, class T, reducer R>
  void gather(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
              int root, const linear& algo, R& red) const {
    host_memory_only<R>();
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "gather", root);
    const auto all = static_cast<std::size_t>(m.size()) * count;
    std::vector<T> group(l == 0 ? g * count : 0);
    std::vector<T> world((l == 0 && a == rg) || me == root ? all : 0);
    m.in_group([&] {
      algo.gather(intra, tags.first, 0, sendbuf, count * sizeof(T),
                  blocks_of(group.data(), g, count), red);
    });
    if (l == 0) {
      if (map.groups.size() > 1)
        m.across_groups([&] {
          algo.gather(*m.inter(), tags.second, rg, group.data(), g * count * sizeof(T),
                      a == rg ? group_blocks(map, world.data(), count) : std::vector<root_block>{},
                      red);
        });
      else
        world = group;
    }
    if (a == rg && rl != 0 && (l == 0 || l == rl))
      m.in_group([&] {
        move_bytes(intra, tags.first, l == 0, l == 0 ? rl : 0, world.data(), all * sizeof(T));
      });
    if (me == root) {
      std::size_t at = 0;
      for (const auto& members : map.groups)
        for (int w : members)
          copy_block(recvbuf + std::size_t(w) * count, world.data() + (at++) * count, count);
    }
  }

  /// Scatter of `count` elements per rank from `root` (host memory).
  template <class M, class T, reducer R>
  void scatter(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
               int root, const linear& algo, R& red) const {
    host_memory_only<R>();
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "scatter", root);
    const auto all = static_cast<std::size_t>(m.size()) * count;
    std::vector<T> group(l == 0 ? g * count : 0);
    std::vector<T> world((l == 0 && a == rg) || me == root ? all : 0);
    if (me == root) {
      std::size_t at = 0;
      for (const auto& members : map.groups)
        for (int w : members)
          copy_block(world.data() + (at++) * count, sendbuf + std::size_t(w) * count, count);
    }
    if (a == rg && rl != 0 && (l == 0 || l == rl))
      m.in_group([&] {
        move_bytes(intra, tags.first, l == rl, l == rl ? 0 : rl, world.data(), all * sizeof(T));
      });
    if (l == 0) {
      if (map.groups.size() > 1)
        m.across_groups([&] {
          algo.scatter(*m.inter(), tags.second, rg, group.data(), g * count * sizeof(T),
                       a == rg ? group_blocks(map, world.data(), count) : std::vector<root_block>{},
                       red);
        });
      else
        group = world;
    }
    m.in_group([&] {
      algo.scatter(intra, tags.first, 0, recvbuf, count * sizeof(T),
                   blocks_of(group.data(), g, count), red);
    });
  }

  /// Gather with a block of its own size per rank (host memory; the receive arguments are
  /// read at the root only). The counts travel with the data; the root checks them against
  /// its `recv_counts`, naming the peer of a mismatch.
  template <class M, class T, reducer R>
  void gatherv(M& m, std::pair<int, int> tags, const T* sendbuf, std::size_t send_count, T* recvbuf,
               std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
               int root, const linear& algo, R& red) const {
    host_memory_only<R>();
    using count_t = std::uint64_t;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "gatherv", root);
    const auto P = static_cast<std::size_t>(m.size());
    const bool holder = (l == 0 && a == rg) || me == root; // ends with every rank's blocks
    // 1: counts, then blocks, to the leader
    count_t mine = send_count;
    std::vector<count_t> counts(l == 0 ? g : 0);
    m.in_group([&] {
      algo.gather(intra, tags.first, 0, &mine, sizeof(count_t), blocks_of(counts.data(), g, 1),
                  red);
    });
    std::vector<T> group(sum(counts));
    m.in_group([&] {
      algo.gather(intra, tags.first, 0, sendbuf, send_count * sizeof(T),
                  sized_blocks(group.data(), counts), red);
    });
    // 2: counts (one per rank, group order), then blocks, to the root's leader
    std::vector<count_t> world_counts(holder ? P : 0);
    std::vector<T> world;
    if (l == 0) {
      leaders_or_here(
          m,
          [&](auto& inter) {
            algo.gather(inter, tags.second, rg, counts.data(), g * sizeof(count_t),
                        a == rg ? group_blocks(map, world_counts.data(), 1)
                                : std::vector<root_block>{},
                        red);
          },
          world_counts, counts);
      if (a == rg) world.resize(sum(world_counts));
      leaders_or_here(
          m,
          [&](auto& inter) {
            algo.gather(inter, tags.second, rg, group.data(), group.size() * sizeof(T),
                        a == rg ? per_group_blocks(map, world.data(), world_counts)
                                : std::vector<root_block>{},
                        red);
          },
          world, group);
    }
    // 3: from the root's leader to the root
    if (a == rg && rl != 0 && (l == 0 || l == rl)) {
      m.in_group([&] {
        move_bytes(intra, tags.first, l == 0, l == 0 ? rl : 0, world_counts.data(),
                   P * sizeof(count_t));
      });
      if (me == root) world.resize(sum(world_counts));
      m.in_group([&] {
        move_bytes(intra, tags.first, l == 0, l == 0 ? rl : 0, world.data(),
                   world.size() * sizeof(T));
      });
    }
    if (me != root) return;
    std::size_t i = 0, from = 0;
    for (const auto& members : map.groups)
      for (int x : members) {
        check_count("gatherv", me, x, world_counts[i], recv_counts[std::size_t(x)], "recv_counts");
        copy_block(recvbuf + recv_displs[std::size_t(x)], world.data() + from, world_counts[i]);
        from += world_counts[i++];
      }
  }

  /// Scatter with a block of its own size per rank (host memory; the send arguments are
  /// read at the root only). The counts travel with the data; each rank checks its count
  /// against its `recv_count`, naming the root on a mismatch.
  template <class M, class T, reducer R>
  void scatterv(M& m, std::pair<int, int> tags, const T* sendbuf,
                std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                T* recvbuf, std::size_t recv_count, int root, const linear& algo, R& red) const {
    host_memory_only<R>();
    using count_t = std::uint64_t;
    auto& intra = m.intra();
    const auto [map, l, me, a, g, rg, rl] = seat_of(m, "scatterv", root);
    const auto P = static_cast<std::size_t>(m.size());
    const bool holder = (l == 0 && a == rg) || me == root;
    // 1: the root packs every block in group order (a copy, so an in-place call reads its
    // blocks before its own is written) and hands counts and blocks to its leader
    std::vector<count_t> world_counts(holder ? P : 0);
    std::vector<T> world;
    if (me == root) {
      std::size_t i = 0;
      for (const auto& members : map.groups)
        for (int x : members) {
          world_counts[i++] = send_counts[std::size_t(x)];
          const T* from = sendbuf + send_displs[std::size_t(x)];
          world.insert(world.end(), from, from + send_counts[std::size_t(x)]);
        }
    }
    if (a == rg && rl != 0 && (l == 0 || l == rl)) {
      m.in_group([&] {
        move_bytes(intra, tags.first, l == rl, l == rl ? 0 : rl, world_counts.data(),
                   P * sizeof(count_t));
      });
      if (l == 0) world.resize(sum(world_counts));
      m.in_group([&] {
        move_bytes(intra, tags.first, l == rl, l == rl ? 0 : rl, world.data(),
                   world.size() * sizeof(T));
      });
    }
    // 2: from the root's leader to every leader: counts, then blocks
    std::vector<count_t> counts(l == 0 ? g : 0);
    std::vector<T> group;
    if (l == 0) {
      leaders_or_here(
          m,
          [&](auto& inter) {
            algo.scatter(inter, tags.second, rg, counts.data(), g * sizeof(count_t),
                         a == rg ? group_blocks(map, world_counts.data(), 1)
                                 : std::vector<root_block>{},
                         red);
          },
          counts, world_counts);
      group.resize(sum(counts));
      leaders_or_here(
          m,
          [&](auto& inter) {
            algo.scatter(inter, tags.second, rg, group.data(), group.size() * sizeof(T),
                         a == rg ? per_group_blocks(map, world.data(), world_counts)
                                 : std::vector<root_block>{},
                         red);
          },
          group, world);
    }
    // 3: inside the group: this rank's count, then its block
    count_t arrived = 0;
    m.in_group([&] {
      algo.scatter(intra, tags.first, 0, &arrived, sizeof(count_t), blocks_of(counts.data(), g, 1),
                   red);
    });
    check_count("scatterv", me, root, arrived, recv_count, "recv_count");
    m.in_group([&] {
      algo.scatter(intra, tags.first, 0, recvbuf, recv_count * sizeof(T),
                   sized_blocks(group.data(), counts), red);
    });
  }

private:
  /// All-to-all, gather and scatter stage their blocks in host vectors.
  template <class R>
  static constexpr void host_memory_only() {
    static_assert(detail::reducer_uses_host_memory<R>(),
                  "tcoll: all-to-all, gather and scatter on a hierarchical machine move host "
                  "memory: pass a host reducer (cpu_reducer)");
  }
  /// Where this rank and the root of a collective sit.
  struct seat {
    const hierarchy_map& map;
    int local;              ///< this rank's local rank
    int world;              ///< this rank's world rank
    int group;              ///< this rank's group
    std::size_t group_size; ///< the size of this rank's group
    int root_group;         ///< the root's group (-1 without a root)
    int root_local;         ///< the root's local rank (-1 without a root)
  };
  template <class M>
  static seat seat_of(M& m, const char* what, int root = -1) {
    const hierarchy_map& map = m.group_map(what);
    const int me = m.rank(), a = map.group_of[static_cast<std::size_t>(me)];
    return {map,
            m.intra().rank(),
            me,
            a,
            map.groups[static_cast<std::size_t>(a)].size(),
            root < 0 ? -1 : map.group_of[static_cast<std::size_t>(root)],
            root < 0 ? -1 : map.local_of[static_cast<std::size_t>(root)]};
  }
  template <class C>
  static std::size_t sum(const std::vector<C>& v) {
    std::size_t total = 0;
    for (C x : v) total += static_cast<std::size_t>(x);
    return total;
  }
  /// A count that arrived from `peer` against the one this rank passed as `arg`.
  static void check_count(const char* what, int rank, int peer, std::uint64_t arrived,
                          std::size_t expected, const char* arg) {
    if (arrived != expected)
      throw invalid_argument(std::string(what) + ": rank " + std::to_string(peer) +
                                 "'s block for this rank has " + std::to_string(arrived) +
                                 " elements but " + arg + " says " + std::to_string(expected),
                             rank, peer);
  }
  /// Root blocks of `counts[j]` elements each, back to back at `base`.
  template <class T, class C>
  static std::vector<root_block> sized_blocks(T* base, const std::vector<C>& counts) {
    std::vector<root_block> out;
    std::size_t at = 0;
    for (C c : counts) {
      out.push_back({base + at, static_cast<std::size_t>(c) * sizeof(T)});
      at += static_cast<std::size_t>(c);
    }
    return out;
  }
  /// One root block per group at `base`: the sum of its members' `counts` (group order).
  template <class T, class C>
  static std::vector<root_block> per_group_blocks(const hierarchy_map& map, T* base,
                                                  const std::vector<C>& counts) {
    std::vector<root_block> out;
    std::size_t i = 0, at = 0;
    for (const auto& members : map.groups) {
      std::size_t n = 0;
      for (std::size_t k = 0; k < members.size(); ++k) n += static_cast<std::size_t>(counts[i++]);
      out.push_back({base + at, n * sizeof(T)});
      at += n;
    }
    return out;
  }
  /// `f(inter)` among the leaders, or, with one group, `to = from` (the leader is the root).
  template <class M, class F, class V>
  static void leaders_or_here(M& m, F&& f, V& to, const V& from) {
    if (m.inter() && m.inter()->size() > 1)
      m.across_groups([&] { f(*m.inter()); });
    else
      to = from;
  }
  /// Consecutive world ranks of a group as (first, how many) runs, in local order.
  static std::vector<std::pair<int, std::size_t>> runs(const std::vector<int>& members) {
    std::vector<std::pair<int, std::size_t>> out;
    for (int w : members)
      if (!out.empty() && out.back().first + int(out.back().second) == w)
        ++out.back().second;
      else
        out.emplace_back(w, 1);
    return out;
  }
  static detail::region block(int world_rank, std::size_t count) {
    return {detail::buffer_id::output, std::size_t(world_rank) * count, count};
  }
  template <class T>
  static void copy_block(T* dst, const T* src, std::size_t count) {
    if (count && dst != src) std::memcpy(dst, src, count * sizeof(T));
  }
  /// `n` blocks of `each` elements at `base`, as a gather's or scatter's root blocks.
  template <class T>
  static std::vector<root_block> blocks_of(T* base, std::size_t n, std::size_t each) {
    std::vector<root_block> out(n);
    for (std::size_t j = 0; j < n; ++j) out[j] = {base + j * each, each * sizeof(T)};
    return out;
  }
  /// One block per group (its members' blocks in local order), groups in order, at `base`.
  template <class T>
  static std::vector<root_block> group_blocks(const hierarchy_map& map, T* base,
                                              std::size_t count) {
    std::vector<root_block> out;
    std::size_t at = 0;
    for (const auto& members : map.groups) {
      out.push_back({base + at * count, members.size() * count * sizeof(T)});
      at += members.size();
    }
    return out;
  }
  /// One message of `count` elements between two ranks of `t`, run by the executor (any
  /// memory the reducer handles).
  template <class Tr, class T, reducer R>
  static void move(Tr& t, int tag, bool sending, int peer, T* data, std::size_t count, R& red) {
    using namespace detail;
    executor<Tr, R, T, no_reduce_op> ex(t, red, {}, data, count, data, count, tag);
    ex.round_begin();
    if (sending)
      ex.send(peer, region{buffer_id::output, 0, count});
    else
      ex.recv(peer, region{buffer_id::output, 0, count});
    ex.round_end();
  }
  /// The leaders' exchange of `blocks` (one per group), or this group's own block when
  /// there is one group.
  template <class M, reducer R>
  static void across_or_here(M& m, const pairwise_exchange& exchange, int tag,
                             const std::vector<exchange_block>& blocks, R& red) {
    if (blocks.size() > 1)
      m.across_groups([&] {
        exchange.exchange(*m.inter(), tag, std::span<const exchange_block>(blocks), red);
      });
    else if (blocks[0].send_bytes)
      std::memcpy(blocks[0].recv, blocks[0].send, blocks[0].send_bytes);
  }
  /// One message of host bytes between two ranks of `t`.
  template <class Tr>
  static void move_bytes(Tr& t, int tag, bool sending, int peer, void* data, std::size_t bytes) {
    auto r = sending ? t.isend(peer, data, bytes, tag) : t.irecv(peer, data, bytes, tag);
    t.wait(r, clock::now() + t.timeout());
  }
};

} // namespace tcoll
