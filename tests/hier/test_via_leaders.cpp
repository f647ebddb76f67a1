// Every collective but allreduce on a hierarchical machine (via_leaders.hpp), over one thread
// team cut into groups of every shape: results against references built from all ranks'
// inputs (fractional values for data movement, integer-valued sums and the symbolic
// exactly-once proof for reductions), rank-identical results, in-place forms, untouched
// inputs, avg, traffic across groups, and the errors of a machine without its group map.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/core/symbolic.hpp>
#include <tcoll/schedule/nonblocking.hpp>
#include <tcoll/transport/counting.hpp>
#include <tcoll/transport/subgroup.hpp>
#include <tcoll/transport/threads.hpp>
#include <vector>

#include "../common/cases/uneven_blocks.hpp"
#include "common.hpp"

using namespace tcoll;
using namespace hier_test;

namespace {

std::vector<shape_case> leader_shapes() {
  return {
      {"1 rank", {0}},
      {"1 node x 3", {0, 0, 0}},
      {"2 nodes x 2", consecutive(4, 2)},
      {"3 nodes x 2", consecutive(6, 2)},
      {"4 nodes x 1", consecutive(4, 1)},
      {"unequal 3,3,1", consecutive(7, 3)},
      {"unequal 1,3 interleaved", {1, 0, 1, 1}},
      {"unequal 3,2,2 interleaved", {0, 1, 2, 0, 1, 2, 0}},
      {"2 nodes x 2 interleaved", {0, 1, 0, 1}},
      {"3 nodes x 2 shuffled", {2, 0, 1, 1, 0, 2}},
  };
}

/// A fractional input: the bits of a sum of these depend on the order of addition, and a
/// block placed at the wrong rank or offset shows.
double frac(int rank, std::size_t i) {
  return rank + 0.1 + static_cast<double>(i) / 7.0;
}

/// Runs `body(h, rank)` on every rank of a team of the shape, on its hierarchical machine.
template <class Body>
void on_machine(const shape_case& sc, Body body, hierarchical_machine_options options = {}) {
  const int P = static_cast<int>(sc.group_of.size());
  thread_team(P, std::chrono::seconds(20)).run([&](thread_transport& t) {
    auto v = split_groups(t, std::span<const int>(sc.group_of));
    hierarchical h(v.intra, v.inter_ptr(),
                   {v.world_rank, v.world_size, v.shards, {}, {}, v.group_members}, options);
    body(h, t.rank());
  });
}

/// Runs `body(h, rank)` on a team of P ranks in consecutive groups of g, on its hierarchical
/// machine over a transport that counts the messages and bytes inside and across groups.
template <class Body>
void on_counted_machine(int P, int g, hier_test::traffic& intra, hier_test::traffic& inter,
                        Body body, hierarchical_machine_options options = {}) {
  const auto group_of = consecutive(P, g);
  thread_team(P, std::chrono::seconds(20)).run([&](thread_transport& t) {
    classify<thread_transport> c(t, group_of, intra, inter);
    auto v = split_groups(c, std::span<const int>(group_of));
    hierarchical h(v.intra, v.inter_ptr(),
                   {v.world_rank, v.world_size, v.shards, {}, {}, v.group_members}, options);
    body(h, t.rank());
  });
}

std::vector<int> roots_of(int P) {
  std::vector<int> r{0, P - 1, P / 2};
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

const std::size_t leader_counts[] = {0, 1, 5};

} // namespace

TEST_CASE("via_leaders: a broadcast runs the algorithm it is given among the leaders") {
  // 4 groups of 2: the leaders' messages counted. Five doubles from root 0: the binomial tree
  // sends them in 2 messages from the root's leader; the chain in segments of two elements
  // sends 3 from every leader but the last.
  const std::vector<int> group_of{0, 0, 1, 1, 2, 2, 3, 3};
  std::vector<std::size_t> tree_sent(8), chain_sent(8);
  thread_team(8, std::chrono::seconds(20)).run([&](thread_transport& t) {
    auto v = split_groups(t, std::span<const int>(group_of));
    std::optional<counting<subgroup<thread_transport>>> leaders;
    if (v.inter_ptr()) leaders.emplace(*v.inter_ptr());
    hierarchical h(v.intra, leaders ? &*leaders : nullptr,
                   {v.world_rank, v.world_size, v.shards, {}, {}, v.group_members});
    const auto r = std::size_t(t.rank());
    std::vector<double> b(5);
    const auto sent = [&] { return leaders ? leaders->counts().messages_sent : 0; };
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = r == 0 ? frac(0, i) : -1.0;
    std::size_t before = sent();
    broadcast(h, b.data(), b.size(), 0, binomial_tree{});
    tree_sent[r] = sent() - before;
    for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == frac(0, i));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = r == 0 ? frac(0, i) : -1.0;
    before = sent();
    broadcast(h, b.data(), b.size(), 0, chain{.segment_bytes = 2 * sizeof(double)});
    chain_sent[r] = sent() - before;
    for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == frac(0, i));
  });
  // the leaders are world ranks 0, 2, 4, 6 (leader ranks 0-3): the tree sends 0 -> 2 and
  // 0 -> 1 (world 4 and 2), then 2 -> 3 (world 4 to 6); the chain 0 -> 1 -> 2 -> 3
  CHECK(tree_sent == std::vector<std::size_t>{2, 0, 0, 0, 1, 0, 0, 0});
  CHECK(chain_sent == std::vector<std::size_t>{3, 0, 3, 0, 3, 0, 0, 0});
}

TEST_CASE("via_leaders: broadcast, gather and scatter from every kind of root, every shape") {
  for (const auto& sc : leader_shapes()) {
    const int P = static_cast<int>(sc.group_of.size());
    for (int root : roots_of(P))
      for (std::size_t n : leader_counts)
        for (bool in_place : {false, true}) {
          CAPTURE(sc.name);
          CAPTURE(root);
          CAPTURE(n);
          CAPTURE(in_place);
          std::atomic<int> wrong{0};
          on_machine(sc, [&](auto& h, int r) {
            // broadcast: the root's fractional values everywhere, with every algorithm of the
            // table among the leaders (the chain in segments of two elements)
            std::vector<double> b(n);
            for (std::size_t i = 0; i < n; ++i) b[i] = r == root ? frac(root, i) : -1.0;
            broadcast(h, b.data(), n, root);
            for (std::size_t i = 0; i < n; ++i) wrong += b[i] != frac(root, i);
            for_each_algorithm<collective::broadcast>(
                [&](const auto& algo) {
                  for (std::size_t i = 0; i < n; ++i) b[i] = r == root ? frac(root, i) : -1.0;
                  broadcast(h, b.data(), n, root, algo);
                  for (std::size_t i = 0; i < n; ++i) wrong += b[i] != frac(root, i);
                },
                chain{.segment_bytes = 2 * sizeof(double)});
            // gather: block q of the root's buffer is rank q's input
            std::vector<double> mine(n), all(n * std::size_t(P), -1.0);
            for (std::size_t i = 0; i < n; ++i) mine[i] = frac(r, i);
            const double* send = mine.data();
            if (in_place && r == root) {
              std::copy(mine.begin(), mine.end(),
                        all.begin() + std::ptrdiff_t(r) * std::ptrdiff_t(n));
              send = all.data() + std::size_t(r) * n;
            }
            const auto before = mine;
            gather(h, send, all.data(), n, root);
            wrong += mine != before;
            if (r == root)
              for (int q = 0; q < P; ++q)
                for (std::size_t i = 0; i < n; ++i)
                  wrong += all[std::size_t(q) * n + i] != frac(q, i);
            // scatter: rank q receives block q of the root's buffer
            std::vector<double> table(r == root ? n * std::size_t(P) : 0), got(n, -1.0);
            for (std::size_t k = 0; k < table.size(); ++k)
              table[k] =
                  frac(int(k / std::max<std::size_t>(n, 1)), k % std::max<std::size_t>(n, 1)) +
                  1000;
            const auto table_before = table;
            double* recv = got.data();
            if (in_place && r == root) recv = table.data() + std::size_t(r) * n;
            scatter(h, table.data(), recv, n, root);
            if (r == root && !in_place) wrong += table != table_before;
            for (std::size_t i = 0; i < n; ++i) wrong += recv[i] != frac(r, i) + 1000;
          });
          CHECK(wrong == 0);
        }
  }
}

TEST_CASE("via_leaders: allgather and alltoall place every block by world rank, every shape") {
  for (const auto& sc : leader_shapes()) {
    const int P = static_cast<int>(sc.group_of.size());
    for (std::size_t n : leader_counts)
      for (bool in_place : {false, true}) {
        CAPTURE(sc.name);
        CAPTURE(n);
        CAPTURE(in_place);
        std::atomic<int> wrong{0};
        results<double> gathered(P);
        on_machine(sc, [&](auto& h, int r) {
          const std::size_t all = n * std::size_t(P);
          std::vector<double> mine(n), out(all, -1.0);
          for (std::size_t i = 0; i < n; ++i) mine[i] = frac(r, i);
          const auto before = mine;
          const double* send = mine.data();
          if (in_place) {
            std::copy(mine.begin(), mine.end(), out.begin() + std::ptrdiff_t(r * n));
            send = out.data() + std::size_t(r) * n;
          }
          allgather(h, send, out.data(), n);
          wrong += mine != before;
          for (int q = 0; q < P; ++q)
            for (std::size_t i = 0; i < n; ++i) wrong += out[std::size_t(q) * n + i] != frac(q, i);
          gathered.per_rank[std::size_t(r)] = out;
          // alltoall: block q of rank r's send buffer is (r, q, i); r receives (q, r, i) at q
          auto cell = [&](int from, int to, std::size_t i) {
            return from * 1000 + to + static_cast<double>(i) / 8.0 + 0.3;
          };
          std::vector<double> rows(all), cols(all, -1.0);
          for (int q = 0; q < P; ++q)
            for (std::size_t i = 0; i < n; ++i) rows[std::size_t(q) * n + i] = cell(r, q, i);
          const auto rows_before = rows;
          if (in_place) {
            alltoall(h, rows.data(), rows.data(), n);
            cols = rows;
          } else {
            alltoall(h, rows.data(), cols.data(), n);
            wrong += rows != rows_before;
          }
          for (int q = 0; q < P; ++q)
            for (std::size_t i = 0; i < n; ++i)
              wrong += cols[std::size_t(q) * n + i] != cell(q, r, i);
        });
        CHECK(wrong == 0);
        CHECK(gathered.identical());
      }
  }
}

TEST_CASE("via_peers and via_leaders: alltoallv, uneven and empty blocks, gaps, every shape") {
  // rank x sends rank y count(x, y) elements (0 for some pairs), laid out with a gap of one
  // element between blocks, which stays untouched. In place (one buffer, MPI's receive
  // layout) the counts are symmetric: x sends y what y sends x. `automatic` goes through
  // the peers where the groups have one size, through the leaders elsewhere.
  const auto cell = [](int x, int y, std::size_t i) {
    return x * 1000 + y + static_cast<double>(i) / 8.0 + 0.3;
  };
  // `scale` 500: blocks past the threads transport's eager bound (1 KiB), which it copies
  // in the receiver's wait, so a send completes only once its receiver waits
  // automatic, and again with every block across groups in a message of its own
  const hierarchical_machine_options routes[] = {{alltoall_route::automatic},
                                                 {alltoall_route::automatic, via_peers{4096, 0}},
                                                 {alltoall_route::via_leaders}};
  for (const auto& sc : leader_shapes())
    for (const auto& options : routes)
      for (bool in_place : {false, true})
        for (std::size_t scale : {1, 500}) {
          const alltoall_route route = options.alltoall;
          CAPTURE(sc.name);
          CAPTURE(static_cast<int>(route));
          CAPTURE(options.peers.each_block_across_from_bytes);
          CAPTURE(in_place);
          CAPTURE(scale);
          const int P = static_cast<int>(sc.group_of.size());
          const auto count_of = [in_place, scale](int x, int y) {
            return scale * std::size_t(in_place ? (x + y) % 3 : (x + 2 * y) % 4);
          };
          std::atomic<int> wrong{0};
          on_machine(
              sc,
              [&](auto& h, int r) {
                using counts = std::vector<std::size_t>;
                counts send_counts(P), send_displs(P), recv_counts(P), recv_displs(P);
                std::size_t send_at = 0, recv_at = 0;
                for (int q = 0; q < P; ++q) {
                  send_counts[q] = count_of(r, q);
                  send_displs[q] = send_at;
                  send_at += send_counts[q] + 1;
                  recv_counts[q] = count_of(q, r);
                  recv_displs[q] = recv_at;
                  recv_at += recv_counts[q] + 1;
                }
                std::vector<double> send(send_at, -7.0), recv(recv_at, -9.0);
                for (int q = 0; q < P; ++q)
                  for (std::size_t i = 0; i < send_counts[q]; ++i)
                    send[send_displs[q] + i] = cell(r, q, i);
                const auto before = send;
                using span = std::span<const std::size_t>;
                if (in_place) {
                  recv = send; // symmetric counts: the same layout both ways
                  alltoallv(h, recv.data(), span(send_counts), span(send_displs), recv.data(),
                            span(recv_counts), span(recv_displs));
                } else {
                  alltoallv(h, send.data(), span(send_counts), span(send_displs), recv.data(),
                            span(recv_counts), span(recv_displs));
                  wrong += send != before;
                }
                for (int q = 0; q < P; ++q) {
                  for (std::size_t i = 0; i < recv_counts[q]; ++i)
                    wrong += recv[recv_displs[q] + i] != cell(q, r, i);
                  wrong +=
                      recv[recv_displs[q] + recv_counts[q]] != (in_place ? -7.0 : -9.0); // the gap
                }
              },
              options);
          CHECK(wrong == 0);
        }
}

TEST_CASE("via_leaders: gatherv and scatterv, uneven and empty blocks, every kind of root") {
  const auto count_of = [](int x) { return std::size_t(x % 3); }; // rank 0's block is empty
  for (const auto& sc : leader_shapes()) {
    const int P = static_cast<int>(sc.group_of.size());
    for (int root : roots_of(P))
      for (bool in_place : {false, true}) {
        CAPTURE(sc.name);
        CAPTURE(root);
        CAPTURE(in_place);
        std::atomic<int> wrong{0};
        on_machine(sc, [&](auto& h, int r) {
          using span = std::span<const std::size_t>;
          // the root's layout: blocks in reverse rank order with a one-element gap each
          std::vector<std::size_t> counts(P), displs(P);
          std::size_t at = 0;
          for (int q = P - 1; q >= 0; --q) {
            counts[q] = count_of(q);
            displs[q] = at;
            at += counts[q] + 1;
          }
          std::vector<double> mine(count_of(r)), all(r == root ? at : 0, -9.0);
          for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = frac(r, i);
          const auto before = mine;
          const double* send = mine.data();
          if (in_place && r == root) {
            std::copy(mine.begin(), mine.end(), all.begin() + std::ptrdiff_t(displs[r]));
            send = all.data() + displs[r];
          }
          gatherv(h, send, mine.size(), all.data(), span(counts), span(displs), root);
          wrong += mine != before;
          if (r == root)
            for (int q = 0; q < P; ++q) {
              for (std::size_t i = 0; i < counts[q]; ++i) wrong += all[displs[q] + i] != frac(q, i);
              wrong += all[displs[q] + counts[q]] != -9.0;
            }
          // scatterv back, shifted by 1000, from the same layout
          std::vector<double> table(r == root ? at : 0, -5.0), got(count_of(r), -1.0);
          for (int q = 0; q < P && r == root; ++q)
            for (std::size_t i = 0; i < counts[q]; ++i) table[displs[q] + i] = frac(q, i) + 1000;
          const auto table_before = table;
          double* recv = got.data();
          if (in_place && r == root) recv = table.data() + displs[r];
          scatterv(h, table.data(), span(counts), span(displs), recv, got.size(), root);
          if (r == root && !in_place) wrong += table != table_before;
          for (std::size_t i = 0; i < got.size(); ++i) wrong += recv[i] != frac(r, i) + 1000;
        });
        CHECK(wrong == 0);
      }
  }
}

TEST_CASE("via_leaders: gatherv and scatterv name the rank whose count disagrees") {
  const shape_case sc{"2 nodes x 2", consecutive(4, 2)};
  std::atomic<int> named{0};
  on_machine(sc, [&](auto& h, int r) {
    // root 1 (not a leader) expects 2 elements from rank 2, which sends 1
    std::vector<std::size_t> counts{1, 1, 2, 1}, displs{0, 1, 2, 4};
    std::vector<float> in(2, 1.0f), out(5);
    try {
      gatherv(h, in.data(), 1, out.data(), std::span<const std::size_t>(counts),
              std::span<const std::size_t>(displs), 1);
    } catch (const invalid_argument& e) {
      named += r == 1 && e.peer() == 2 &&
               std::string(e.what()).find("recv_counts says 2") != std::string::npos;
    } catch (const error&) {
    }
  });
  on_machine(sc, [&](auto& h, int r) {
    // root 1 sends rank 2 two elements; rank 2 expects 1
    std::vector<std::size_t> counts{1, 1, 2, 1}, displs{0, 1, 2, 4};
    std::vector<float> in(5, 1.0f), out(2);
    try {
      scatterv(h, in.data(), std::span<const std::size_t>(counts),
               std::span<const std::size_t>(displs), out.data(), 1, 1);
    } catch (const invalid_argument& e) {
      named += r == 2 && e.peer() == 1 &&
               std::string(e.what()).find("recv_count says 1") != std::string::npos;
    } catch (const error&) {
    }
  });
  CHECK(named == 2);
}

TEST_CASE("via_peers and via_leaders: alltoallv names the peer whose count disagrees") {
  const shape_case sc{"2 nodes x 2", consecutive(4, 2)};
  // rank `at` expects 2 elements from rank 0, which sends 1: across groups (rank 3) and
  // inside the group (rank 1)
  for (auto route : {alltoall_route::via_peers, alltoall_route::via_leaders})
    for (int at : {3, 1}) {
      CAPTURE(static_cast<int>(route));
      CAPTURE(at);
      std::atomic<int> named{0};
      on_machine(sc,
                 [&](auto& h, int r) {
                   std::vector<std::size_t> counts(4, 1), displs{0, 2, 4, 6};
                   std::vector<std::size_t> recv_counts = counts;
                   if (r == at) recv_counts[0] = 2;
                   std::vector<float> in(8, 1.0f), out(8);
                   try {
                     alltoallv(h, in.data(), std::span<const std::size_t>(counts),
                               std::span<const std::size_t>(displs), out.data(),
                               std::span<const std::size_t>(recv_counts),
                               std::span<const std::size_t>(displs));
                   } catch (const invalid_argument& e) {
                     named +=
                         r == at && e.peer() == 0 && e.rank() == at &&
                         std::string(e.what()).find("recv_counts[0] is 2") != std::string::npos;
                   } catch (const error&) {
                   }
                 },
                 {route});
      CHECK(named == 1);
    }
}

TEST_CASE("via_leaders: reduce and reduce_scatter, exact sums and every rank exactly once") {
  using symbolic::rank_set;
  for (const auto& sc : leader_shapes()) {
    const int P = static_cast<int>(sc.group_of.size());
    for (int root : roots_of(P))
      for (std::size_t n : {std::size_t{1}, std::size_t{7}})
        for (bool in_place : {false, true}) {
          CAPTURE(sc.name);
          CAPTURE(root);
          CAPTURE(n);
          CAPTURE(in_place);
          std::atomic<int> wrong{0};
          on_machine(sc, [&](auto& h, int r) {
            // reduce: integer-valued floats sum exactly in any order
            std::vector<float> in(n), out(n, -1.0f);
            for (std::size_t i = 0; i < n; ++i) in[i] = value(r, i);
            const auto before = in;
            if (in_place && r == root) {
              reduce(h, in.data(), in.data(), n, root);
              out = in;
            } else {
              reduce(h, in.data(), out.data(), n, root);
              wrong += in != before;
            }
            if (r == root)
              for (std::size_t i = 0; i < n; ++i) wrong += out[i] != expected_sum(P, i);
            // reduce of rank sets: the root holds every rank exactly once
            std::vector<rank_set> s(n, rank_set::of(r)), so(n);
            reduce(h, s.data(), so.data(), n, root, symbolic::disjoint_union{});
            if (r == root)
              for (const auto& e : so) wrong += !(e == rank_set::all(P));
            // reduce_scatter: block r summed over all ranks; value() of (rank, block*n + i)
            const std::size_t all = n * std::size_t(P);
            std::vector<float> blocks(all), mine(n, -1.0f);
            for (std::size_t k = 0; k < all; ++k) blocks[k] = value(r, k);
            const auto blocks_before = blocks;
            reduce_scatter(h, blocks.data(), mine.data(), n);
            wrong += blocks != blocks_before;
            for (std::size_t i = 0; i < n; ++i)
              wrong += mine[i] != expected_sum(P, std::size_t(r) * n + i);
            std::vector<rank_set> sets(all, rank_set::of(r)), my_sets(n);
            reduce_scatter(h, sets.data(), my_sets.data(), n, symbolic::disjoint_union{});
            for (const auto& e : my_sets) wrong += !(e == rank_set::all(P));
          });
          CHECK(wrong == 0);
        }
  }
}

TEST_CASE("via_leaders: avg divides by the world size once; runtime-typed reduce on a hierarchy") {
  const shape_case sc{"unequal 3,2,2 interleaved", {0, 1, 2, 0, 1, 2, 0}};
  const int P = 7;
  std::atomic<int> wrong{0};
  on_machine(sc, [&](auto& h, int r) {
    std::vector<double> in(3, 7.0 * (r + 1)), out(3, -1.0);
    reduce(h, in.data(), out.data(), 3, 4, avg_op{});
    if (r == 4)
      for (double x : out) wrong += x != 28.0; // 7 * (1 + ... + 7) / 7
    std::vector<double> blocks(3 * std::size_t(P), 7.0 * (r + 1)), mine(3);
    reduce_scatter(h, blocks.data(), mine.data(), 3, avg_op{});
    for (double x : mine) wrong += x != 28.0;
    std::vector<float> f(2, float(r + 1)), g(2, -1.0f);
    reduce(h, static_cast<const void*>(f.data()), static_cast<void*>(g.data()), 2, 1,
           scalar_type::float32, reduce_kind::max);
    if (r == 1)
      for (float x : g) wrong += x != 7.0f;
  });
  CHECK(wrong == 0);
}

TEST_CASE("via_leaders: reduce_scatterv and allgatherv, uneven and empty blocks, every shape") {
  for (const auto& sc : leader_shapes()) {
    CAPTURE(sc.name);
    on_machine(sc, [&](auto& h, int) { tcoll::testing::uneven_block_values(h, {0, 1, 5}); });
  }
}

TEST_CASE("via_leaders: barrier holds every rank until all arrived") {
  for (const auto& sc : leader_shapes()) {
    CAPTURE(sc.name);
    const int P = static_cast<int>(sc.group_of.size());
    std::atomic<int> arrived{0}, early{0};
    on_machine(sc, [&](auto& h, int r) {
      if (r == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      arrived += 1;
      barrier(h);
      early += arrived.load() != P;
      barrier(h); // twice in a row: the message spaces keep the two apart
    });
    CHECK(early == 0);
  }
}

TEST_CASE("via_leaders: non-blocking forms on a hierarchy, queued together, in start order") {
  const shape_case sc{"unequal 3,2,2 interleaved", {0, 1, 2, 0, 1, 2, 0}};
  const int P = 7;
  const std::size_t n = 6;
  std::atomic<int> wrong{0};
  on_machine(sc, [&](auto& h, int r) {
    std::vector<double> b(n), mine(n), all(n * P), blocks(n * P), part(n), sum(n);
    for (std::size_t i = 0; i < n; ++i) {
      b[i] = r == 5 ? frac(5, i) : 0.0;
      mine[i] = frac(r, i);
      sum[i] = value(r, i);
    }
    for (std::size_t k = 0; k < blocks.size(); ++k) blocks[k] = value(r, k);
    // four collectives in flight on one machine, then a barrier ordered after them
    auto q1 = ibroadcast(h, b.data(), n, 5);
    auto q2 = iallgather(h, mine.data(), all.data(), n);
    auto q3 = ireduce_scatter(h, blocks.data(), part.data(), n);
    auto q4 = iallreduce(h, sum.data(), sum.data(), n);
    std::vector<double> rows(n * P), cols(n * P), gathered(n * P);
    for (int q = 0; q < P; ++q)
      for (std::size_t i = 0; i < n; ++i) rows[std::size_t(q) * n + i] = frac(r * P + q, i);
    auto q6 = ialltoall(h, rows.data(), cols.data(), n);
    auto q7 = igather(h, mine.data(), gathered.data(), n, 2);
    auto q5 = ibarrier(h);
    q5.wait();
    // the barrier ran after the others on this rank's engine: they are complete
    wrong += !q1.test() + !q2.test() + !q3.test() + !q4.test() + !q6.test() + !q7.test();
    q1.wait();
    q2.wait();
    q3.wait();
    q4.wait();
    q6.wait();
    q7.wait();
    for (int q = 0; q < P; ++q)
      for (std::size_t i = 0; i < n; ++i) {
        wrong += cols[std::size_t(q) * n + i] != frac(q * P + r, i);
        if (r == 2) wrong += gathered[std::size_t(q) * n + i] != frac(q, i);
      }
    for (std::size_t i = 0; i < n; ++i) {
      wrong += b[i] != frac(5, i);
      wrong += part[i] != expected_sum(P, std::size_t(r) * n + i);
      wrong += sum[i] != expected_sum(P, i);
      for (int q = 0; q < P; ++q) wrong += all[std::size_t(q) * n + i] != frac(q, i);
    }
  });
  CHECK(wrong == 0);
}

TEST_CASE("via_peers and via_leaders: all-to-all by either route places every block, every "
          "shape; via_peers refuses unequal groups on every rank") {
  for (const auto& sc : leader_shapes()) {
    const int P = static_cast<int>(sc.group_of.size());
    std::map<int, int> sizes; // group id: members
    for (int a : sc.group_of) sizes[a] += 1;
    bool equal = true;
    for (const auto& [id, members] : sizes) equal = equal && members == sizes.begin()->second;
    // the peers' ways inside the group: packed (short blocks), one message a block; and
    // across groups one message of g blocks, or one a block as each comes in
    const hierarchical_machine_options routes[] = {{alltoall_route::via_peers},
                                                   {alltoall_route::via_peers, via_peers{0}},
                                                   {alltoall_route::via_peers, via_peers{0, 0}},
                                                   {alltoall_route::via_leaders}};
    // 600 doubles: blocks past the threads transport's eager bound, and the group-by-group
    // way under the default via_peers
    for (const auto& options : routes)
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(5), std::size_t(600)})
        for (bool in_place : {false, true}) {
          const alltoall_route route = options.alltoall;
          CAPTURE(sc.name);
          CAPTURE(static_cast<int>(route));
          CAPTURE(options.peers.separate_blocks_from_bytes);
          CAPTURE(options.peers.each_block_across_from_bytes);
          CAPTURE(n);
          CAPTURE(in_place);
          std::atomic<int> wrong{0}, refused{0};
          on_machine(
              sc,
              [&](auto& h, int r) {
                // block q of rank r's send buffer is (r, q, i); r receives (q, r, i) at q
                auto cell = [&](int from, int to, std::size_t i) {
                  return from * 1000 + to + static_cast<double>(i) / 8.0 + 0.3;
                };
                const std::size_t all = n * std::size_t(P);
                std::vector<double> rows(all), cols(all, -1.0);
                for (int q = 0; q < P; ++q)
                  for (std::size_t i = 0; i < n; ++i) rows[std::size_t(q) * n + i] = cell(r, q, i);
                const auto rows_before = rows;
                try {
                  if (in_place) {
                    alltoall(h, rows.data(), rows.data(), n);
                    cols = rows;
                  } else {
                    alltoall(h, rows.data(), cols.data(), n);
                  }
                } catch (const invalid_argument& e) {
                  refused += std::string(e.what()).find("via_peers needs groups of one size") !=
                             std::string::npos;
                  return;
                }
                if (!in_place) wrong += rows != rows_before;
                for (int q = 0; q < P; ++q)
                  for (std::size_t i = 0; i < n; ++i)
                    wrong += cols[std::size_t(q) * n + i] != cell(q, r, i);
              },
              options);
          CHECK(wrong == 0);
          CHECK(refused == (route == alltoall_route::via_peers && !equal ? P : 0));
        }
  }
}

TEST_CASE("via_peers: all-to-all crosses the network in one message per pair of peers, or "
          "one a block from each_block_across_from_bytes") {
  // groups of g, M of them: inside each group every rank sends each other one M-block
  // message (packed) or M one-block messages; across groups every rank sends each peer one
  // g-block message, or g one-block messages (each_block)
  for (auto [M, g] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}})
    for (int way = 0; way < 3; ++way) {
      const bool packed = way == 0, each_block = way == 2;
      CAPTURE(M);
      CAPTURE(g);
      CAPTURE(packed);
      CAPTURE(each_block);
      const int P = M * g;
      const std::size_t n = 5;
      hier_test::traffic intra, inter;
      std::atomic<int> wrong{0};
      on_counted_machine(
          P, g, intra, inter,
          [&](auto& h, int r) {
            std::vector<float> in(n * std::size_t(P)), out(in.size());
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(r) + float(i) / 64.0f;
            alltoall(h, in.data(), out.data(), n);
            for (int q = 0; q < P; ++q)
              for (std::size_t i = 0; i < n; ++i)
                wrong +=
                    out[std::size_t(q) * n + i] != float(q) + float(std::size_t(r) * n + i) / 64.0f;
          },
          {alltoall_route::automatic, via_peers{packed ? 4096u : 0u, each_block ? 0u : 1u << 30}});
      const long E = sizeof(float);
      CHECK(wrong == 0);
      CHECK(inter.messages == long(P) * (M - 1) * (each_block ? g : 1));
      CHECK(inter.bytes == long(P) * (M - 1) * g * long(n) * E);
      CHECK(intra.messages == long(P) * (g - 1) * (packed ? 1 : M));
      CHECK(intra.bytes == long(P) * (g - 1) * M * long(n) * E);
    }
}

TEST_CASE("via_peers: alltoallv sends each peer its counts, then one message of blocks, or one "
          "a block from each_block_across_from_bytes") {
  // groups of g, M of them, rank x sends y count(x, y) > 0 elements. Inside the group every
  // rank sends each other its M counts for that rank's peers, then one message per block;
  // across groups every rank sends each peer g counts, then the g blocks in one message, or
  // one message each (each_block).
  const auto count = [](int x, int y) { return std::size_t(1 + (x + 2 * y) % 3); };
  for (auto [M, g] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}})
    for (bool each_block : {false, true}) {
      CAPTURE(M);
      CAPTURE(g);
      CAPTURE(each_block);
      const int P = M * g;
      hier_test::traffic intra, inter;
      std::atomic<int> wrong{0};
      on_counted_machine(P, g, intra, inter,
                         [&](auto& h, int r) {
                           std::vector<std::size_t> send_counts(P), send_displs(P), recv_counts(P),
                               recv_displs(P);
                           for (int q = 0, s = 0, d = 0; q < P; ++q) {
                             send_counts[q] = count(r, q);
                             recv_counts[q] = count(q, r);
                             send_displs[q] = std::size_t(s);
                             recv_displs[q] = std::size_t(d);
                             s += int(send_counts[q]);
                             d += int(recv_counts[q]);
                           }
                           std::vector<float> in(send_displs[P - 1] + send_counts[P - 1]);
                           std::vector<float> out(recv_displs[P - 1] + recv_counts[P - 1], -1.0f);
                           for (int q = 0; q < P; ++q)
                             for (std::size_t i = 0; i < send_counts[q]; ++i)
                               in[send_displs[q] + i] = float(r * 100 + q) + float(i) / 8.0f;
                           using span = std::span<const std::size_t>;
                           alltoallv(h, in.data(), span(send_counts), span(send_displs), out.data(),
                                     span(recv_counts), span(recv_displs));
                           for (int q = 0; q < P; ++q)
                             for (std::size_t i = 0; i < recv_counts[q]; ++i)
                               wrong +=
                                   out[recv_displs[q] + i] != float(q * 100 + r) + float(i) / 8.0f;
                         },
                         {alltoall_route::automatic, via_peers{4096, each_block ? 0u : 1u << 30}});
      const long E = sizeof(float), C = sizeof(std::uint64_t);
      long across = 0, inside = 0; // data bytes whose receiver has another group / local rank
      for (int x = 0; x < P; ++x)
        for (int y = 0; y < P; ++y) {
          across += x / g != y / g ? long(count(x, y)) * E : 0;
          inside += x % g != y % g ? long(count(x, y)) * E : 0;
        }
      CHECK(wrong == 0);
      CHECK(inter.messages == long(P) * (M - 1) * (each_block ? 1 + g : 2));
      CHECK(inter.bytes == long(P) * (M - 1) * g * C + across);
      CHECK(intra.messages == long(P) * (g - 1) * (1 + M));
      CHECK(intra.bytes == long(P) * (g - 1) * M * C + inside);
    }
}

TEST_CASE("via_peers: a transport across groups in another order than the groups, named by "
          "inter_world_ranks") {
  // groups {0, 3} and {1, 2}: local rank 1's transport across groups orders its ranks by
  // world rank (2 of group 1, then 3 of group 0), as MPI_Comm_split by world rank does
  const std::vector<std::vector<int>> groups{{0, 3}, {1, 2}};
  const std::size_t n = 3;
  std::atomic<int> wrong{0}, refused{0};
  for (bool named : {true, false})
    thread_team(4, std::chrono::seconds(20)).run([&](thread_transport& t) {
      const int r = t.rank(), a = r == 0 || r == 3 ? 0 : 1;
      const int l = r == 0 || r == 1 ? 0 : 1;
      subgroup<thread_transport> intra(t, groups[std::size_t(a)], intra_tag_offset);
      const std::vector<int> across = l == 0 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
      subgroup<thread_transport> inter(t, across, inter_tag_offset);
      hierarchy_shape shape{r, 4, 2, {}, named ? across : std::vector<int>{}, groups};
      if (!named) { // no collective: the ranks that accept the machine would wait for the others
        try {
          hierarchical h(intra, &inter, shape);
        } catch (const invalid_argument& e) {
          refused += std::string(e.what()).find("transport across groups") != std::string::npos;
        }
        return;
      }
      hierarchical h(intra, &inter, shape);
      std::vector<double> in(4 * n), out(4 * n, -1.0);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = r * 100 + double(i) + 0.25;
      alltoall(h, in.data(), out.data(), n);
      for (std::size_t q = 0; q < 4; ++q)
        for (std::size_t i = 0; i < n; ++i)
          wrong += out[q * n + i] != double(q) * 100 + double(std::size_t(r) * n + i) + 0.25;
    });
  CHECK(wrong == 0);
  CHECK(refused == 2); // unnamed: world ranks 2 and 3 (rank 1 of local rank 1's is in group 0)
}

TEST_CASE("via_leaders: all-to-all crosses the network once per pair of leaders") {
  // groups of g, M of them: each leader sends one packed message of g * g * n elements to
  // each other leader; inside each group g - 1 rows go up and g - 1 rows come down
  for (auto [M, g] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}}) {
    CAPTURE(M);
    CAPTURE(g);
    const int P = M * g;
    const std::size_t n = 5;
    hier_test::traffic intra, inter;
    on_counted_machine(P, g, intra, inter,
                       [&](auto& h, int) {
                         std::vector<float> in(n * std::size_t(P), 1.0f), out(in.size());
                         alltoall(h, in.data(), out.data(), n);
                       },
                       {alltoall_route::via_leaders});
    const long E = sizeof(float), row = long(P) * long(n) * E;
    CHECK(inter.messages == long(M) * (M - 1));
    CHECK(inter.bytes == long(M) * (M - 1) * g * g * long(n) * E);
    CHECK(intra.messages == long(M) * 2 * (g - 1));
    CHECK(intra.bytes == long(M) * 2 * (g - 1) * row);
  }
}

TEST_CASE("via_leaders: without the group map the collectives say what they need") {
  const auto group_of = consecutive(4, 2);
  std::atomic<int> named{0}, wrong{0};
  thread_team(4, std::chrono::seconds(20)).run([&](thread_transport& t) {
    auto v = split_groups(t, std::span<const int>(group_of));
    hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
    std::vector<float> x(8, float(t.rank()) + 0.5f), y(8);
    try {
      broadcast(h, x.data(), 2, 1);
    } catch (const invalid_argument& e) {
      named += std::string(e.what()).find("hierarchy_shape::groups") != std::string::npos;
    }
  });
  // allgather and barrier need no map (allgather: the allreduce of a zero table), in place too
  thread_team(4, std::chrono::seconds(20)).run([&](thread_transport& t) {
    auto v = split_groups(t, std::span<const int>(group_of));
    hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
    std::vector<float> x(2, float(t.rank()) + 0.5f), y(8);
    allgather(h, x.data(), y.data(), 2);
    for (int q = 0; q < 4; ++q) wrong += y[2 * std::size_t(q)] != float(q) + 0.5f;
    // in place: this rank's block already in the table (it was zeroed with the rest)
    std::fill(y.begin(), y.end(), -1.0f);
    y[2 * std::size_t(t.rank())] = y[2 * std::size_t(t.rank()) + 1] = float(t.rank()) + 0.25f;
    allgather(h, y.data() + 2 * t.rank(), y.data(), 2);
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 2; ++j)
        wrong += y[2 * std::size_t(q) + std::size_t(j)] != float(q) + 0.25f;
    barrier(h);
  });
  CHECK(named == 4);
  CHECK(wrong == 0);
}

TEST_CASE("via_leaders: a group map that contradicts the transports is refused") {
  const auto group_of = consecutive(4, 2);
  std::atomic<int> refused{0};
  thread_team(4, std::chrono::seconds(20)).run([&](thread_transport& t) {
    auto v = split_groups(t, std::span<const int>(group_of));
    const std::vector<std::vector<std::vector<int>>> wrong_maps{
        {{0, 1}, {2, 2}}, // a rank twice
        {{0, 1}, {2}},    // a rank missing
        {{1, 0}, {3, 2}}, // local order swapped
        {{2, 3}, {0, 1}}, // groups in the wrong order for the leaders' transport
        {{0, 1, 2, 3}},   // one group where the transports have two
    };
    for (const auto& groups : wrong_maps) {
      try {
        hierarchical h(v.intra, v.inter_ptr(),
                       {v.world_rank, v.world_size, v.shards, {}, {}, groups});
      } catch (const invalid_argument&) {
        refused += 1;
      }
    }
  });
  // every rank refuses all five: each transport across groups orders the groups as the map
  // (see hierarchy_shape::groups)
  CHECK(refused == 4 * 5);
}
