// Hierarchical allreduce (both forms) over one thread team cut into groups: bit-exact sums,
// symbolic exactly-once proof, rank-identical results, avg, uneven counts, unequal groups,
// message/byte counts against the cost formulas, argument errors and timeouts.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/core/symbolic.hpp>
#include <tcoll/transport/subgroup.hpp>
#include <tcoll/transport/threads.hpp>
#include <vector>

#include "common.hpp"

using namespace tcoll;
using namespace hier_test;

namespace {

std::vector<shape_case> shapes() {
  return {
      {"1 node x 3", {0, 0, 0}},
      {"2 nodes x 2", consecutive(4, 2)},
      {"3 nodes x 2", consecutive(6, 2)},
      {"2 nodes x 3", consecutive(6, 3)},
      {"4 nodes x 1", consecutive(4, 1)},
      {"unequal 2,2,1", consecutive(5, 2)},
      {"unequal 3,3,1", consecutive(7, 3)},
      {"unequal 1,3 interleaved", {1, 0, 1, 1}},
      {"unequal 3,2,2 interleaved", {0, 1, 2, 0, 1, 2, 0}},
  };
}

const std::size_t counts[] = {0, 1, 2, 3, 5, 17, 1000, 4099};

template <class InterAlgo>
void check_sums(const shape_case& sc, hierarchical_form form, InterAlgo inter, bool in_place,
                std::size_t seg_bytes, std::size_t pipeline_bytes = std::size_t{4} << 20) {
  const int P = static_cast<int>(sc.group_of.size());
  for (std::size_t n : counts) {
    CAPTURE(n);
    results<float> out(P);
    std::atomic<int> bad_input{0};
    thread_team(P, std::chrono::seconds(20)).run([&](thread_transport& t) {
      auto v = split_groups(t, std::span<const int>(sc.group_of));
      hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
      std::vector<float> in(n), res(n, -1.0f);
      for (std::size_t i = 0; i < n; ++i) in[i] = value(t.rank(), i);
      const auto original = in;
      hierarchical_options<InterAlgo> opt{form, inter, ring{seg_bytes}, pipeline_bytes};
      if (in_place) {
        allreduce(h, in.data(), in.data(), n, sum_op{}, opt);
        res = in;
      } else {
        allreduce(h, in.data(), res.data(), n, sum_op{}, opt);
        if (in != original) bad_input += 1;
      }
      out.per_rank[static_cast<std::size_t>(t.rank())] = res;
    });
    CHECK(bad_input == 0);
    CHECK(out.identical());
    for (std::size_t i = 0; i < n; ++i)
      if (out.per_rank[0][i] != expected_sum(P, i)) {
        FAIL_CHECK("element " << i << ": got " << out.per_rank[0][i] << " expected "
                              << expected_sum(P, i));
        break;
      }
  }
}

} // namespace

TEST_CASE("hierarchical: bit-exact sums, every shape, both forms, in and out of place") {
  for (const auto& sc : shapes())
    for (auto form : {hierarchical_form::leader, hierarchical_form::sharded})
      for (bool in_place : {false, true}) {
        CAPTURE(sc.name);
        CAPTURE(form == hierarchical_form::leader ? "leader" : "sharded");
        CAPTURE(in_place);
        check_sums(sc, form, ring{}, in_place, std::size_t{1} << 20);
        // pipeline of 48-byte segments (up to 64 of them): every stage overlap exercised
        if (form == hierarchical_form::sharded)
          check_sums(sc, form, ring{}, in_place, std::size_t{1} << 20, 48);
      }
}

TEST_CASE("hierarchical: other inner algorithms and small segments") {
  const shape_case sc{"3 nodes x 2", consecutive(6, 2)};
  for (auto form : {hierarchical_form::leader, hierarchical_form::sharded}) {
    check_sums(sc, form, recursive_doubling{}, false, 64);
    check_sums(sc, form, recursive_halving_doubling{}, true, 64);
    check_sums(sc, form, binomial_tree{}, false, 12);
    check_sums(sc, form, recursive_doubling{}, true, 64, 100);
    check_sums(sc, form, automatic{}, false, 64, 100); // not describable: phases in turn
  }
}

TEST_CASE("hierarchical: symbolic proof, every rank's contribution exactly once") {
  using symbolic::rank_set;
  for (const auto& sc : shapes())
    for (auto form : {hierarchical_form::leader, hierarchical_form::sharded}) {
      CAPTURE(sc.name);
      const int P = static_cast<int>(sc.group_of.size());
      for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
        std::atomic<int> wrong{0};
        thread_team(P, std::chrono::seconds(20)).run([&](thread_transport& t) {
          auto v = split_groups(t, std::span<const int>(sc.group_of));
          hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
          std::vector<rank_set> in(n, rank_set::of(t.rank())), res(n);
          // 1-element ring segments, 3-element pipeline segments
          hierarchical_options<ring> opt{form, ring{}, ring{8}, 12};
          allreduce(h, in.data(), res.data(), n, symbolic::disjoint_union{}, opt);
          for (const auto& e : res)
            if (e != rank_set::all(P)) wrong += 1;
        });
        CHECK(wrong == 0);
      }
    }
}

TEST_CASE("hierarchical: avg divides by the total rank count; rank-identical random floats") {
  for (const auto& sc : shapes()) {
    CAPTURE(sc.name);
    const int P = static_cast<int>(sc.group_of.size());
    const std::size_t n = 777;
    for (auto form : {hierarchical_form::leader, hierarchical_form::sharded}) {
      results<double> avg(P);
      results<float> rnd(P);
      thread_team(P, std::chrono::seconds(20)).run([&](thread_transport& t) {
        auto v = split_groups(t, std::span<const int>(sc.group_of));
        hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
        hierarchical_options<ring> opt{form};
        std::vector<double> in(n, double(t.rank() + 1) * 4.0), out(n);
        allreduce(h, in.data(), out.data(), n, avg_op{}, opt);
        avg.per_rank[std::size_t(t.rank())] = out;
        std::mt19937 gen(static_cast<unsigned>(t.rank() * 7919 + 1));
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        std::vector<float> x(n);
        for (auto& e : x) e = d(gen);
        allreduce(h, x.data(), x.data(), n, sum_op{}, opt);
        rnd.per_rank[std::size_t(t.rank())] = x;
      });
      CHECK(avg.identical());
      CHECK(rnd.identical());
      // sum of 4(r+1) over r < P is 2P(P+1); divided by P: 2(P+1), exact in double
      CHECK(avg.per_rank[0][0] == 2.0 * (P + 1));
      CHECK(avg.per_rank[0][n - 1] == 2.0 * (P + 1));
    }
  }
}

TEST_CASE("hierarchical: message and byte counts match the cost formulas") {
  // Equal groups, ring across groups: across the network the total is 2(M-1) N elements
  // for both forms (leader: one ring of N among M leaders; sharded: g rings of N/g), which
  // is what makes hierarchical cheaper than the flat ring's 2(P-1) N with P = M g ranks
  // (of which 2(M-1) N ... cross the boundary links as well).
  for (auto [M, g] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}, std::pair{3, 3}}) {
    const int P = M * g;
    const std::size_t N = 1001;
    const auto group_of = consecutive(P, g);
    for (auto form : {hierarchical_form::leader, hierarchical_form::sharded}) {
      CAPTURE(M);
      CAPTURE(g);
      CAPTURE(form == hierarchical_form::leader ? "leader" : "sharded");
      traffic intra, inter;
      thread_team(P, std::chrono::seconds(20)).run([&](thread_transport& t) {
        classify<thread_transport> c(t, group_of, intra, inter);
        auto v = split_groups(c, std::span<const int>(group_of));
        hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
        std::vector<float> in(N, 1.0f), out(N);
        allreduce(h, in.data(), out.data(), N, sum_op{}, hierarchical_options<ring>{form});
      });
      const long E = sizeof(float);
      CHECK(inter.bytes == 2L * (M - 1) * long(N) * E);
      // inside each group both forms move (g-1) N elements up and (g-1) N back down
      CHECK(intra.bytes == long(M) * 2L * (g - 1) * long(N) * E);
      // messages: leader: M rings of 2(M-1) steps each among leaders... one ring of M ranks,
      // each rank 2(M-1) messages; sharded: g such rings
      const long rings = form == hierarchical_form::leader ? 1 : g;
      CHECK(inter.messages == rings * M * 2L * (M - 1));
      // intra: leader: binomial reduce (g-1 messages) + broadcast (g-1) per group;
      // sharded: ring reduce-scatter + allgather, 2(g-1) messages per rank
      const long intra_msgs = form == hierarchical_form::leader ? 2L * (g - 1) : 2L * g * (g - 1);
      CHECK(intra.messages == M * intra_msgs);
    }
  }
  // flat ring over the same machine for comparison: 2(P-1) N elements in total, of which
  // the boundary links carry 2(P-1)/P N per boundary-crossing rank
  {
    const int M = 2, g = 2, P = 4;
    const std::size_t N = 1000;
    const auto group_of = consecutive(P, g);
    traffic intra, inter;
    thread_team(P).run([&](thread_transport& t) {
      classify<thread_transport> c(t, group_of, intra, inter);
      std::vector<float> in(N, 1.0f), out(N);
      tcoll::allreduce(c, in.data(), out.data(), N, sum_op{}, ring{});
    });
    CHECK(inter.bytes == long(M) * 2L * (P - 1) * long(N) / P * long(sizeof(float)));
  }
}

TEST_CASE("hierarchical: the pipeline moves the same bytes in S times the messages") {
  const int M = 2, g = 2, P = 4;
  const std::size_t N = 4000; // 16000 bytes, pipeline of 4000 bytes: S = 4 segments
  const auto group_of = consecutive(P, g);
  traffic intra, inter;
  thread_team(P).run([&](thread_transport& t) {
    classify<thread_transport> c(t, group_of, intra, inter);
    auto v = split_groups(c, std::span<const int>(group_of));
    hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
    std::vector<float> in(N, 1.0f), out(N);
    allreduce(h, in.data(), out.data(), N, sum_op{},
              hierarchical_options<ring>{hierarchical_form::sharded, ring{}, ring{}, 4000});
    for (float x : out) CHECK(x == 4.0f);
  });
  const long S = 4, E = sizeof(float);
  CHECK(inter.bytes == 2L * (M - 1) * long(N) * E);
  CHECK(intra.bytes == long(M) * 2L * (g - 1) * long(N) * E);
  CHECK(inter.messages == S * g * M * 2L * (M - 1));
  CHECK(intra.messages == S * M * 2L * g * (g - 1));
}

TEST_CASE("hierarchical: unequal groups fold the extra ranks (counts)") {
  // groups {0,1,2}, {3,4}: shards = 2; local rank 2 of group 0 folds onto local rank 0
  const std::vector<int> group_of{0, 0, 0, 1, 1};
  const std::size_t N = 100;
  traffic intra, inter;
  thread_team(5).run([&](thread_transport& t) {
    classify<thread_transport> c(t, group_of, intra, inter);
    auto v = split_groups(c, std::span<const int>(group_of));
    CHECK(v.shards == 2);
    CHECK(v.groups == 2);
    CHECK((v.inter.has_value() == (v.local < 2)));
    hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
    std::vector<float> in(N, 1.0f), out(N);
    allreduce(h, in.data(), out.data(), N);
    for (float x : out) CHECK(x == 5.0f);
  });
  // across: 2 shards of 50, each a ring of 2: 2 * 2(2-1) * 50
  CHECK(inter.bytes == 2L * 2 * 50 * long(sizeof(float)));
  // inside: group 0: fold N + RS/AG among 2 (2 * 50 each way... (2-1) N up + (2-1) N down)
  // + unfold N; group 1: 2 (2-1) N
  CHECK(intra.bytes == (N + 2 * N + N + 2 * N) * sizeof(float));
}

TEST_CASE("hierarchical: argument errors name the argument and the rank") {
  thread_team(4).run([&](thread_transport& t) {
    auto v = split_groups(t, 2);
    hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
    std::vector<float> a(8), b(8);
    CHECK_THROWS_WITH_AS(allreduce(h, static_cast<const float*>(nullptr), b.data(), 8),
                         doctest::Contains("sendbuf is null"), invalid_argument);
    CHECK_THROWS_WITH_AS(allreduce(h, a.data(), a.data() + 1, 4), doctest::Contains("overlap"),
                         invalid_argument);
    // a core rank without an inter transport
    if (v.local == 0) {
      try {
        hierarchical<decltype(v.intra), decltype(v.intra)> bad(v.intra, nullptr,
                                                               {v.world_rank, 4, 2});
        FAIL("expected invalid_argument");
      } catch (const invalid_argument& e) {
        CHECK(std::string(e.what()).find("no inter transport") != std::string::npos);
        CHECK(e.rank() == v.world_rank);
      }
    }
    CHECK_THROWS_AS(split_groups(t, 0), invalid_argument);
    // world-rank maps: one entry per rank of the transport, this rank's own at its place
    using H = hierarchical<decltype(v.intra), decltype(v.intra)>;
    const int wr = v.world_rank;
    CHECK_THROWS_WITH_AS(H(v.intra, v.inter_ptr(), {wr, 4, v.shards, {wr}}),
                         doctest::Contains("intra_world_ranks has 1 entries"), invalid_argument);
    CHECK_THROWS_WITH_AS(H(v.intra, v.inter_ptr(), {wr, 4, v.shards, {(wr + 1) % 4, (wr + 2) % 4}}),
                         doctest::Contains("not this rank's world rank"), invalid_argument);
    CHECK_THROWS_WITH_AS(H(v.intra, v.inter_ptr(), {wr, 4, v.shards, {wr, wr}}),
                         doctest::Contains("listed twice"), invalid_argument);
  });
}

TEST_CASE("hierarchical: a missing rank gives timeout_error, not a hang") {
  for (auto form : {hierarchical_form::leader, hierarchical_form::sharded}) {
    thread_team team(4, std::chrono::milliseconds(300));
    CHECK_THROWS_AS(team.run([&](thread_transport& t) {
      auto v = split_groups(t, 2);
      hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
      if (t.rank() == 3) return; // never joins
      std::vector<float> a(64, 1.0f), b(64);
      allreduce(h, a.data(), b.data(), 64, sum_op{}, hierarchical_options<ring>{form});
    }),
                    timeout_error);
  }
}
