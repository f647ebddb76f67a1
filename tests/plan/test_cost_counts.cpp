// One set of cost formulas (issue 11): the traffic each flat algorithm's cost model
// assumes (plan::allreduce_traffic, from which plan::allreduce_us is computed, and
// plan::collective_traffic for every line of the table of collectives) against what the
// real algorithm does, recorded by the counting transport (messages and bytes per rank)
// and a counting reducer (elements combined per rank) on the threads transport.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tcoll/algorithm/table.hpp"
#include "tcoll/algorithm/visit.hpp"
#include "tcoll/collectives.hpp"
#include "tcoll/core/collective_table.hpp"
#include "tcoll/plan/cost_model.hpp"
#include "tcoll/transport/counting.hpp"
#include "tcoll/transport/threads.hpp"

using namespace tcoll;

namespace {

/// cpu_reducer that also counts the elements it combines (on this rank).
struct counting_reducer : cpu_reducer {
  std::atomic<std::size_t>* reduced = nullptr;
  template <class Op, class T>
  void reduce(const Op& op, T* dst, const T* a, const T* b, std::size_t n) const {
    *reduced += n;
    cpu_reducer::reduce(op, dst, a, b, n);
  }
};

/// The busiest rank's counts over all ranks: the max of each field, as the model states
/// them for the rank on its critical path.
struct observed {
  std::size_t messages_sent = 0, messages_received = 0, bytes_sent = 0, bytes_received = 0,
              bytes_reduced = 0;
};

/// Runs `body(counting transport, counting reducer)` on P threads; the busiest rank's counts.
template <class Body>
observed run_counted_body(int P, Body&& body) {
  std::vector<traffic> per_rank(static_cast<std::size_t>(P));
  std::vector<std::atomic<std::size_t>> reduced(static_cast<std::size_t>(P));
  thread_team(P).run([&](thread_transport& t) {
    counting<thread_transport> c(t);
    counting_reducer red;
    red.reduced = &reduced[std::size_t(t.rank())];
    body(c, red);
    per_rank[std::size_t(t.rank())] = c.counts();
  });
  observed o;
  for (int r = 0; r < P; ++r) {
    const traffic& tr = per_rank[std::size_t(r)];
    o.messages_sent = std::max(o.messages_sent, tr.messages_sent);
    o.messages_received = std::max(o.messages_received, tr.messages_received);
    o.bytes_sent = std::max(o.bytes_sent, tr.bytes_sent);
    o.bytes_received = std::max(o.bytes_received, tr.bytes_received);
    o.bytes_reduced = std::max(o.bytes_reduced, reduced[std::size_t(r)].load() * sizeof(double));
  }
  return o;
}

/// Every field the counting transport and reducer observed equals the model's.
void check_traffic(const observed& got, const plan::rank_traffic& model) {
  CHECK(double(got.messages_sent) == model.messages_sent);
  CHECK(double(got.messages_received) == model.messages_received);
  CHECK(double(got.bytes_sent) == model.bytes_sent);
  CHECK(double(got.bytes_received) == model.bytes_received);
  CHECK(double(got.bytes_reduced) == model.bytes_reduced);
}

template <class Algo>
observed run_counted(int P, std::size_t n, const Algo& algo) {
  return run_counted_body(P, [&](auto& c, const counting_reducer& red) {
    std::vector<double> v(n, 0.5 + c.rank());
    allreduce(c, v.data(), v.data(), n, sum_op{}, algo, red);
  });
}

/// Collective `c` (not allreduce) with its flat algorithm `a` on a transport, blocks of `n`
/// doubles, root 0; its size measure in bytes (`collective_description::size_measure`).
double run_collective(collective c, algorithm_id a, counting<thread_transport>& t,
                      const counting_reducer& red, std::size_t n) {
  const int P = t.size(), r = t.rank();
  const std::size_t all = n * std::size_t(P);
  std::vector<double> in(all, 0.5 + r), out(all, 0.0);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(P), n);
  std::vector<std::size_t> displs(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q) displs[std::size_t(q)] = std::size_t(q) * n;
  const double blocks_bytes = double(all) * sizeof(double),
               vector_bytes = double(n) * sizeof(double);
  switch (c) {
  case collective::allreduce:
    break;
  case collective::reduce_scatter:
    visit_algorithm<collective::reduce_scatter>(a, [&](const auto& algo) {
      reduce_scatter(t, in.data(), out.data(), n, sum_op{}, algo, red);
    });
    return blocks_bytes;
  case collective::reduce_scatterv:
    reduce_scatterv(t, in.data(), out.data(), counts, sum_op{}, ring{}, red);
    return blocks_bytes;
  case collective::allgather:
    visit_algorithm<collective::allgather>(
        a, [&](const auto& algo) { allgather(t, in.data(), out.data(), n, algo); });
    return blocks_bytes;
  case collective::allgatherv:
    allgatherv<counting<thread_transport>, double>(t, in.data(), n, out.data(), counts, displs);
    return blocks_bytes;
  case collective::broadcast:
    // a vector of P blocks: scatter_allgather's formula is exact for equal pieces
    visit_algorithm<collective::broadcast>(
        a, [&](const auto& algo) { broadcast(t, in.data(), all, 0, algo); });
    return blocks_bytes;
  case collective::reduce:
    visit_algorithm<collective::reduce>(
        a, [&](const auto& algo) { reduce(t, in.data(), out.data(), n, 0, sum_op{}, algo, red); });
    return vector_bytes;
  case collective::alltoall:
    visit_algorithm<collective::alltoall>(
        a, [&](const auto& algo) { alltoall(t, in.data(), out.data(), n, algo); });
    return blocks_bytes;
  case collective::alltoallv:
    alltoallv<counting<thread_transport>, double>(t, in.data(), counts, displs, out.data(), counts,
                                                  displs);
    return blocks_bytes;
  case collective::gather:
    gather(t, in.data(), out.data(), n, 0);
    return blocks_bytes;
  case collective::gatherv:
    gatherv<counting<thread_transport>, double>(t, in.data(), n, out.data(), counts, displs, 0);
    return blocks_bytes;
  case collective::scatter:
    scatter(t, in.data(), out.data(), n, 0);
    return blocks_bytes;
  case collective::scatterv:
    scatterv<counting<thread_transport>, double>(t, in.data(), counts, displs, out.data(), n, 0);
    return blocks_bytes;
  case collective::barrier:
    visit_algorithm<collective::barrier>(a, [&](const auto& algo) { barrier(t, algo); });
    return 0;
  }
  FAIL("run_collective: no call for " << to_string(c));
  return 0;
}

template <class Algo>
void check_against_model(algorithm_id a, const Algo& algo) {
  for (int P : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
    const int core = plan::power_of_two_core(P);
    // the model is exact when p | n and p' | n (even chunks and halving ranges) and every
    // chunk is one segment (256 KiB by default)
    for (std::size_t m : {1, 3, 7}) {
      const std::size_t n = std::size_t(P) * std::size_t(core) * m;
      const double bytes = double(n) * sizeof(double);
      const plan::rank_traffic model = plan::allreduce_traffic(a, bytes, P);
      const observed got = run_counted(P, n, algo);
      CAPTURE(to_string(a));
      CAPTURE(P);
      CAPTURE(n);
      check_traffic(got, model);
      // and the cost is the traffic priced by the link: alpha per non-overlapped message,
      // beta per non-overlapped byte, gamma per reduced byte
      const plan::link_params alpha{1, 0, 0}, beta{0, 1, 0}, gamma{0, 0, 1};
      CHECK(plan::allreduce_us(a, bytes, P, {1, alpha, alpha}) ==
            model.messages_sent + model.messages_received - model.duplex_rounds);
      CHECK(plan::allreduce_us(a, bytes, P, {1, beta, beta}) ==
            doctest::Approx(model.bytes_sent + model.bytes_received - model.duplex_bytes));
      CHECK(plan::allreduce_us(a, bytes, P, {1, gamma, gamma}) ==
            doctest::Approx(model.bytes_reduced));
    }
  }
}

} // namespace

TEST_CASE("ring: the cost model's traffic is the algorithm's") {
  check_against_model(algorithm_id::ring, ring{});
}

TEST_CASE("recursive_doubling: the cost model's traffic is the algorithm's (with the fold)") {
  check_against_model(algorithm_id::recursive_doubling, recursive_doubling{});
}

TEST_CASE("recursive_halving_doubling: the cost model's traffic is the algorithm's") {
  check_against_model(algorithm_id::recursive_halving_doubling, recursive_halving_doubling{});
}

TEST_CASE("binomial_tree: the cost model's traffic is the algorithm's") {
  check_against_model(algorithm_id::binomial_tree, binomial_tree{});
}

TEST_CASE("the closed forms by hand (guards the model side of the comparison)") {
  // p = 6 (core 4, one fold): recursive doubling's busiest rank sends lg 4 + 1 = 3 vectors
  const auto rd = plan::allreduce_traffic(algorithm_id::recursive_doubling, 80, 6);
  CHECK(rd.messages_sent == 3);
  CHECK(rd.bytes_sent == 240);
  CHECK(rd.duplex_rounds == 2);
  // halving-doubling, p = 8, n = 80: 6 rounds, 2 * 7/8 * 80 = 140 bytes each way, 70 reduced
  const auto hd = plan::allreduce_traffic(algorithm_id::recursive_halving_doubling, 80, 8);
  CHECK(hd.messages_sent == 6);
  CHECK(hd.bytes_sent == 140);
  CHECK(hd.bytes_reduced == 70);
  CHECK_THROWS_AS(plan::allreduce_traffic(algorithm_id::hierarchical, 8, 4),
                  tcoll::invalid_argument);
}

TEST_CASE("every collective of the table: its cost formula's traffic is its algorithm's") {
  for (const collective_description& d : collective_table) {
    if (d.id == collective::allreduce) continue; // the cases above
    // every flat algorithm of the line (hierarchical has two link classes)
    for (algorithm_id a : algorithms_of(d.id)) {
      // hierarchical has two link classes, in_segment no messages
      if (a == algorithm_id::hierarchical || a == algorithm_id::in_segment) continue;
      for (int P : {1, 2, 3, 4, 5, 7, 8, 12}) {
        for (std::size_t n : {1, 5}) {
          double bytes = 0;
          const observed got = run_counted_body(P, [&](auto& c, const counting_reducer& red) {
            const double b = run_collective(d.id, a, c, red, n);
            if (c.rank() == 0) bytes = b;
          });
          const plan::rank_traffic model = plan::collective_traffic(d.id, a, bytes, P);
          CAPTURE(d.name);
          CAPTURE(to_string(a));
          CAPTURE(P);
          CAPTURE(n);
          check_traffic(got, model);
        }
      }
    }
  }
}

TEST_CASE("chain: the vector in segments down the chain, every root; the formula's counts") {
  // segments of 2 doubles: S = ceil(n / 2) messages per hop, pipelined over S + P - 2 rounds
  for (int P : {1, 2, 3, 4, 5, 7}) {
    for (std::size_t n : {1, 2, 5, 16, 37}) {
      for (int root = 0; root < P; root += 2) {
        std::vector<std::vector<double>> got(static_cast<std::size_t>(P));
        const observed counts = run_counted_body(P, [&](auto& c, const counting_reducer&) {
          std::vector<double> v(n, -1.0);
          if (c.rank() == root)
            for (std::size_t k = 0; k < n; ++k) v[k] = 0.25 + 0.5 * double(k) + root;
          broadcast(c, v.data(), n, root, chain{.segment_bytes = 2 * sizeof(double)});
          got[std::size_t(c.rank())] = v;
        });
        CAPTURE(P);
        CAPTURE(n);
        CAPTURE(root);
        for (int r = 0; r < P; ++r)
          for (std::size_t k = 0; k < n; ++k)
            CHECK(got[std::size_t(r)][k] == 0.25 + 0.5 * double(k) + root);
        const std::size_t S = P == 1 ? 0 : (n + 1) / 2;
        CHECK(counts.messages_sent == S);
        CHECK(counts.messages_received == S);
        CHECK(counts.bytes_sent == (P == 1 ? 0 : n * sizeof(double)));
        CHECK(counts.bytes_received == (P == 1 ? 0 : n * sizeof(double)));
      }
    }
  }
  // the formula at its own segment (1 MiB), over several segments and a short last one
  for (int P : {2, 3, 5}) {
    const std::size_t n = 3 * (chain::default_segment_bytes / sizeof(double)) + 5;
    const observed got = run_counted_body(P, [&](auto& c, const counting_reducer&) {
      std::vector<double> v(n, 0.5 + c.rank());
      broadcast(c, v.data(), n, 1, chain{});
    });
    CAPTURE(P);
    const plan::rank_traffic model =
        plan::collective_traffic(collective::broadcast, algorithm_id::chain, n * 8.0, P);
    CHECK(model.messages_sent == 4);
    check_traffic(got, model);
  }
}

namespace {
/// `visit_algorithm<C>` reaches, for every id, the object of that id where the table lists it
/// for `C` (but `hierarchical`, a communicator), and throws naming the id otherwise.
template <collective C>
void check_visits() {
  CAPTURE(to_string(C));
  for (algorithm_id a : all_algorithm_ids) {
    CAPTURE(to_string(a));
    if (implements(C, a) && a != algorithm_id::hierarchical) {
      algorithm_id reached = a == algorithm_id::ring ? algorithm_id::linear : algorithm_id::ring;
      visit_algorithm<C>(a, [&]<class A>(const A&) { reached = algorithm_id_of<A>; });
      CHECK(reached == a);
    } else {
      const std::string named = "visit_algorithm: " + std::string(to_string(a));
      CHECK_THROWS_WITH_AS(visit_algorithm<C>(a, [](const auto&) {}),
                           doctest::Contains(named.c_str()), tcoll::invalid_argument);
    }
  }
}
template <std::size_t... I>
void check_every_collective_visits(std::index_sequence<I...>) {
  (check_visits<all_collectives[I]>(), ...);
}
} // namespace

TEST_CASE("visit_algorithm: the one dispatch reaches the table's algorithms of every collective") {
  check_every_collective_visits(std::make_index_sequence<all_collectives.size()>{});
  // the knobs given travel with the object of their type; the others are defaults
  std::size_t all_posted = 0;
  visit_algorithm<collective::alltoall>(
      algorithm_id::pairwise_exchange,
      [&]<class A>(const A& algo) {
        if constexpr (std::is_same_v<A, pairwise_exchange>) all_posted = algo.all_posted_max_bytes;
      },
      bruck{}, pairwise_exchange{.all_posted_max_bytes = 7});
  CHECK(all_posted == 7);
  // allreduce's form steps past what the op or the transport cannot take
  const automatic knobs{.rules = {}};
  algorithm_id ran = algorithm_id::linear;
  const auto record = [&]<class A>(const A&) { ran = algorithm_id_of<A>; };
  visit_algorithm<algorithm_support{.commutative = false, .native = true}>(algorithm_id::ring,
                                                                           knobs, record);
  CHECK(ran == algorithm_id::recursive_halving_doubling);
  visit_algorithm<algorithm_support{.commutative = true, .native = false}>(
      algorithm_id::passthrough, knobs, record);
  CHECK(ran == algorithm_id::ring);
  visit_algorithm(algorithm_id::in_segment, knobs, record);
  CHECK(ran == algorithm_id::in_segment);
  CHECK_THROWS_AS(visit_algorithm(algorithm_id::bruck, knobs, record), tcoll::invalid_argument);
  CHECK_THROWS_AS(visit_algorithm(static_cast<algorithm_id>(99), knobs, record),
                  tcoll::invalid_argument);
  // the entry points' algorithm concepts are the table's lines
  static_assert(broadcast_algorithm<binomial_tree> && broadcast_algorithm<in_segment> &&
                !broadcast_algorithm<ring> && !broadcast_algorithm<passthrough>);
  static_assert(block_algorithm<ring> && block_algorithm<in_segment> &&
                !block_algorithm<binomial_tree>);
  static_assert(reduce_algorithm<binomial_tree> && !reduce_algorithm<recursive_doubling>);
  static_assert(barrier_algorithm<dissemination> && barrier_algorithm<in_segment> &&
                !barrier_algorithm<linear>);
  static_assert(alltoall_algorithm<bruck> && alltoall_algorithm<pairwise_exchange> &&
                alltoall_algorithm<alltoall_by_size> && !alltoall_algorithm<ring>);
  for (algorithm_id a : all_algorithm_ids) CHECK(parse_algorithm(to_string(a)) == a);
}

TEST_CASE("the table of collectives: names, algorithms and selection agree") {
  for (const collective_description& d : collective_table) {
    CAPTURE(d.name);
    CHECK(describe(d.id).name == d.name); // in the order of the enum
    CHECK(parse_collective(d.name) == d.id);
    REQUIRE_FALSE(algorithms_of(d.id).empty());
    for (algorithm_id a : algorithms_of(d.id)) {
      CHECK(implements(d.id, a));
      CHECK(selectable(d.id, a));
      CHECK(parse_algorithm(to_string(a), d.id) == a);
    }
    CHECK(selectable(d.id, algorithm_id::passthrough)); // the vendor's, for every collective
    // the flat algorithms have a formula; the others say why not
    for (algorithm_id a : all_algorithm_ids) {
      CAPTURE(to_string(a));
      const bool flat = implements(d.id, a) && a != algorithm_id::passthrough &&
                        a != algorithm_id::multi_ring && a != algorithm_id::hierarchical &&
                        a != algorithm_id::in_segment;
      if (flat)
        CHECK_NOTHROW((void)plan::collective_traffic(d.id, a, 64, 4));
      else
        CHECK_THROWS_AS((void)plan::collective_traffic(d.id, a, 64, 4), tcoll::invalid_argument);
    }
  }
  for (algorithm_id a : all_algorithm_ids) CHECK(parse_algorithm(to_string(a)) == a);
  // the one grammar: an algorithm of another collective is refused, naming the accepted ones
  CHECK_THROWS_WITH_AS((void)parse_algorithm("pairwise_exchange", collective::allreduce),
                       doctest::Contains("recursive_halving_doubling"), tcoll::invalid_argument);
  CHECK_THROWS_WITH_AS((void)parse_selection("pairwise_exchange:0-max"),
                       doctest::Contains("unknown algorithm 'pairwise_exchange' for allreduce"),
                       tcoll::invalid_argument);
  CHECK(parse_selection("pairwise_exchange:0-4K", collective::alltoall).at(0).algorithm ==
        algorithm_id::pairwise_exchange);
  CHECK(parse_selection("passthrough:0-4K", collective::broadcast).at(0).algorithm ==
        algorithm_id::passthrough);
  CHECK_THROWS_AS((void)parse_collective("all_reduce"), tcoll::invalid_argument);
  // `hierarchical` is a name of the grammar; on a single transport automatic passes over it
  const auto rules = parse_selection("hierarchical:0-1M;ring:0-max");
  CHECK(rules.at(0).algorithm == algorithm_id::hierarchical);
  automatic a;
  a.rules = rules;
  CHECK(a.choose(64, true) == algorithm_id::ring);
  // what a selection string chooses: the first rule covering the size
  CHECK(first_rule_covering(rules, 64) == &rules[0]);
  CHECK(first_rule_covering(rules, 2 << 20) == &rules[1]);
  const auto upper = parse_selection("ring:1K-8K");
  CHECK(first_rule_covering(upper, 1023) == nullptr);
  CHECK(first_rule_covering(upper, 8192) == &upper[0]);
  CHECK(first_rule_covering(upper, 8193) == nullptr);
}

TEST_CASE("selection: the collectives whose ranks move sizes of their own take rules of "
          "every size only") {
  for (const auto& d : collective_table) {
    CAPTURE(d.name);
    const bool shared = d.counts != count_rule::per_peer && d.counts != count_rule::none;
    CHECK(size_is_shared(d.id) == shared);
    const std::string name(to_string(algorithms_of(d.id).front()));
    CHECK(parse_selection(name + ":0-max", d.id).size() == 1);
    if (shared)
      CHECK(parse_selection(name + ":0-4K", d.id).at(0).max_bytes == 4096);
    else
      CHECK_THROWS_WITH_AS((void)parse_selection(name + ":0-4K", d.id),
                           doctest::Contains("so a rule must cover every size"),
                           tcoll::invalid_argument);
  }
  CHECK(!size_is_shared(collective::alltoallv));
  CHECK(!size_is_shared(collective::barrier));
  CHECK(size_is_shared(collective::alltoall));
}
