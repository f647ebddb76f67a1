// Cost formulas against hand computations, MG-WFBP Table II and MG-WFBP's published
// 10 GbE ring startup measurements.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "../../bench/common/perf_options.hpp"
#include "tcoll/algorithm/hierarchical_allreduce.hpp"
#include "tcoll/algorithm/select.hpp"

#include "tcoll/plan/calibrate.hpp"
#include "tcoll/plan/cost_model.hpp"

using namespace tcoll::plan;
using tcoll::algorithm_id;

TEST_CASE("ring allreduce by hand") {
  // p = 4, n = 1000: 2*3*1 + 2*3/4*1000*0.01 + 3/4*1000*0.001 = 6 + 15 + 0.75
  CHECK(ring_allreduce_us(1000, 4, {1.0, 0.01, 0.001}) == doctest::Approx(21.75));
  // non-power-of-two ranks need no fold: p = 3, n = 300: 4 + 2*2/3*300*1 = 404
  CHECK(ring_allreduce_us(300, 3, {1.0, 1.0, 0.0}) == doctest::Approx(404.0));
  CHECK(ring_allreduce_us(12345, 1, {1, 1, 1}) == 0.0);
}

TEST_CASE("MG-WFBP Table II for power-of-two N") {
  const double alpha = 3.0, beta = 0.02, gamma = 0.005;
  const link_params l{alpha, beta, gamma};
  for (int N : {2, 4, 8, 16, 64, 1024}) {
    const double lg = std::log2(N);
    struct row {
      algorithm_id algorithm;
      double a, b;
    };
    const row rows[] = {
        {algorithm_id::binomial_tree, 2 * alpha * lg, (2 * beta + gamma) * lg},
        {algorithm_id::recursive_doubling, alpha * lg, (beta + gamma) * lg},
        {algorithm_id::recursive_halving_doubling, 2 * alpha * lg,
         2 * beta - (2 * beta + gamma) / N + gamma},
        {algorithm_id::ring, 2 * (N - 1) * alpha, 2.0 * (N - 1) / N * beta + (N - 1.0) / N * gamma},
    };
    for (const auto& r : rows) {
      CAPTURE(N);
      CAPTURE(tcoll::to_string(r.algorithm));
      const auto cost = flat_allreduce(r.algorithm, N, l);
      for (double M : {0.0, 1.0, 4096.0, 1e8})
        CHECK(cost(M) == doctest::Approx(r.a + r.b * M).epsilon(1e-12));
    }
  }
}

TEST_CASE("non-power-of-two folds (MPICH) by hand") {
  const link_params unit{1.0, 1.0, 0.0};
  // p = 6: core 4 -> 2 rounds of (1 + 10) = 22; fold: 2 messages + 2 whole vectors = 22
  CHECK(recursive_doubling_allreduce_us(10, 6, unit) == doctest::Approx(44.0));
  // halving-doubling p = 6, n = 8: core 4: 2*2*1 + 2*3/4*8 = 16; fold 2 + 16 = 18
  CHECK(recursive_halving_doubling_allreduce_us(8, 6, unit) == doctest::Approx(34.0));
  // with gamma: fold reduces the whole vector once: p = 3, n = 10, gamma = 0.5:
  // core 2: 1*(1 + 10 + 5) = 16; fold 2 + 20 + 5 = 27
  CHECK(recursive_doubling_allreduce_us(10, 3, {1.0, 1.0, 0.5}) == doctest::Approx(43.0));
  // binomial tree: ceil(lg 5) = 3 rounds of reduce (1 + 10 + 5) and broadcast (1 + 10)
  CHECK(binomial_tree_allreduce_us(10, 5, {1.0, 1.0, 0.5}) == doctest::Approx(3 * 16 + 3 * 11));
  // the fold is what separates p = 2^k + 1 from p = 2^k
  CHECK(recursive_doubling_allreduce_us(10, 9, unit) -
            recursive_doubling_allreduce_us(10, 8, unit) ==
        doctest::Approx(22.0));
}

TEST_CASE("hierarchical forms by hand and their flat limits") {
  const hierarchy_params h{4, {1.0, 0.1, 0.01}, {10.0, 1.0, 0.01}};
  const double n = 1000;
  // leader form, 8 ranks = 2 groups of 4: reduce 2*(1 + 100 + 10), ring over 2 leaders
  // 2*10 + 1000 + 5, broadcast 2*(1 + 100)
  CHECK(hierarchical_leader_allreduce_us(n, 8, h) == doctest::Approx(222 + 1025 + 202));
  // sharded form: RS 3 + 750*(0.11), ring of 250 bytes over 2 groups 20 + 250 + 1.25,
  // AG 3 + 75
  CHECK(hierarchical_sharded_allreduce_us(n, 8, h) == doctest::Approx(3 + 82.5 + 271.25 + 3 + 75));
  // one group: leader form is the binomial tree, sharded form is the ring
  const hierarchy_params whole{8, {2.0, 0.3, 0.05}, {99, 99, 99}};
  CHECK(hierarchical_leader_allreduce_us(n, 8, whole) ==
        doctest::Approx(binomial_tree_allreduce_us(n, 8, whole.intra)));
  CHECK(hierarchical_sharded_allreduce_us(n, 8, whole) ==
        doctest::Approx(ring_allreduce_us(n, 8, whole.intra)));
  // groups of one: both forms are the inter-group ring
  const hierarchy_params singles{1, {99, 99, 99}, {2.0, 0.3, 0.05}};
  CHECK(hierarchical_leader_allreduce_us(n, 8, singles) ==
        doctest::Approx(ring_allreduce_us(n, 8, singles.inter)));
  CHECK(hierarchical_sharded_allreduce_us(n, 8, singles) ==
        doctest::Approx(ring_allreduce_us(n, 8, singles.inter)));
  CHECK_THROWS_AS(hierarchical_leader_allreduce_us(n, 10, h), tcoll::invalid_argument);
  CHECK_THROWS_AS(hierarchical_sharded_allreduce_us(n, 6, h), tcoll::invalid_argument);
}

TEST_CASE("the planner speaks the table's algorithm_id, the hierarchical form a knob") {
  using tcoll::hierarchical_form;
  const hierarchy_params h{4, {1.0, 0.1, 0.01}, {10.0, 1.0, 0.01}};
  const double n = 1000;
  // the form defaults to the hierarchical allreduce's own default, sharded
  CHECK(tcoll::hierarchical_options<>{}.form == hierarchical_form::sharded);
  CHECK(allreduce_us(algorithm_id::hierarchical, n, 8, h) ==
        hierarchical_sharded_allreduce_us(n, 8, h));
  CHECK(allreduce_us(algorithm_id::hierarchical, n, 8, h, hierarchical_form::leader) ==
        hierarchical_leader_allreduce_us(n, 8, h));
  CHECK(allreduce_us(algorithm_id::hierarchical, n, 8, h, hierarchical_form::sharded) ==
        hierarchical_sharded_allreduce_us(n, 8, h));
  const allreduce_cost leader{algorithm_id::hierarchical, 8, h, hierarchical_form::leader};
  CHECK(leader(n) == hierarchical_leader_allreduce_us(n, 8, h));
  const allreduce_cost sharded{algorithm_id::hierarchical, 8, h};
  CHECK(sharded(n) == hierarchical_sharded_allreduce_us(n, 8, h));
  // flat algorithms ignore the form
  CHECK(allreduce_us(algorithm_id::ring, n, 8, h, hierarchical_form::leader) ==
        ring_allreduce_us(n, 8, h.inter));
  // names: the table's, the hierarchical forms as bench/hier prints them
  CHECK(allreduce_name(algorithm_id::ring) == "ring");
  CHECK(allreduce_name(algorithm_id::hierarchical) == "hierarchical_sharded");
  CHECK(allreduce_name(algorithm_id::hierarchical, hierarchical_form::leader) ==
        "hierarchical_leader");
  CHECK(tcoll::to_string(hierarchical_form::leader) == "leader");
  CHECK(tcoll::to_string(hierarchical_form::sharded) == "sharded");
  // an id that is not an allreduce algorithm is refused by every allreduce cost function
  for (auto a : {algorithm_id::pairwise_exchange, algorithm_id::linear, algorithm_id::dissemination,
                 algorithm_id::bruck}) {
    CAPTURE(tcoll::to_string(a));
    CHECK_THROWS_WITH_AS((void)allreduce_us(a, n, 8, h),
                         doctest::Contains("is not an allreduce algorithm"),
                         tcoll::invalid_argument);
    CHECK_THROWS_WITH_AS((void)allreduce_traffic(a, n, 8),
                         doctest::Contains("is not an allreduce algorithm"),
                         tcoll::invalid_argument);
    CHECK_THROWS_AS((void)flat_allreduce(a, 8, h.inter), tcoll::invalid_argument);
    const allreduce_cost not_allreduce{a, 8, h};
    CHECK_THROWS_AS((void)not_allreduce(n), tcoll::invalid_argument);
    CHECK_THROWS_AS((void)link_from_linear_fit(a, 8, {10.0, 1.0}), tcoll::invalid_argument);
    CHECK_FALSE(has_flat_allreduce_cost(a));
  }
  // allreduce algorithms with no formula say so
  for (auto a : {algorithm_id::passthrough, algorithm_id::multi_ring}) {
    CAPTURE(tcoll::to_string(a));
    CHECK_THROWS_WITH_AS((void)allreduce_us(a, n, 8, h), doctest::Contains("has no cost formula"),
                         tcoll::invalid_argument);
    CHECK_FALSE(has_flat_allreduce_cost(a));
  }
  // the hierarchical one has two link classes: no flat traffic, no flat model
  CHECK_THROWS_WITH_AS((void)allreduce_traffic(algorithm_id::hierarchical, n, 8),
                       doctest::Contains("two link classes"), tcoll::invalid_argument);
  CHECK_THROWS_AS((void)flat_allreduce(algorithm_id::hierarchical, 8, h.inter),
                  tcoll::invalid_argument);
  CHECK_FALSE(has_flat_allreduce_cost(algorithm_id::hierarchical));
  // the flat ones, and constexpr as before
  for (auto a : {algorithm_id::ring, algorithm_id::recursive_doubling,
                 algorithm_id::recursive_halving_doubling, algorithm_id::binomial_tree})
    CHECK(has_flat_allreduce_cost(a));
  static_assert(flat_allreduce(algorithm_id::ring, 4, {1.0, 0.01, 0.0})(1000) == 6.0 + 15.0);
  static_assert(allreduce_us(algorithm_id::hierarchical, 1000, 8,
                             {4, {1.0, 0.1, 0.01}, {10.0, 1.0, 0.01}},
                             hierarchical_form::leader) > 0);
}

TEST_CASE("MG-WFBP's measured 10 GbE ring startup gives one alpha") {
  // Sec. V-A: startup 2(N-1) alpha = 90.52, 271.56, 633.64 us at N = 2, 4, 8.
  const std::pair<int, double> published[] = {{2, 90.52}, {4, 271.56}, {8, 633.64}};
  for (auto [N, startup] : published) {
    const auto l = link_from_linear_fit(algorithm_id::ring, N, {startup, 0.0});
    CHECK(l.alpha_us == doctest::Approx(45.26).epsilon(0.003));
  }
}

TEST_CASE("piecewise model (OSF Eq. 18)") {
  const piecewise_cost m{2.0, 5.0, 0.001, 30.0, 1024.0};
  CHECK(m(256) == doctest::Approx(2.0 * 8 + 5.0));
  CHECK(m(1023.0) == doctest::Approx(2.0 * std::log2(1023.0) + 5.0));
  CHECK(m(1024) == doctest::Approx(0.001 * 1024 + 30.0));
  CHECK(m(0) == doctest::Approx(5.0)); // sizes below a byte are one byte
  CHECK(startup_cost_us(m) == doctest::Approx(5.0));
  // bandwidth-delay product: 25 Gb/s with a 14.4 us round trip is OSF's 45 KB
  CHECK(bandwidth_delay_product_bytes({7.2, 8.0 / 25e3, 0}) == doctest::Approx(45000.0));
}

TEST_CASE("constexpr log2 and sqrt match <cmath>") {
  for (double x = 1e-6; x < 1e12; x *= 1.37) {
    CHECK(tcoll::plan::detail::log2(x) == doctest::Approx(std::log2(x)).epsilon(1e-14));
    CHECK(tcoll::plan::detail::sqrt(x) == doctest::Approx(std::sqrt(x)).epsilon(1e-14));
  }
  static_assert(tcoll::plan::detail::log2(1024.0) == 10.0);
  static_assert(tcoll::plan::detail::ceil_log2(5) == 3 && tcoll::plan::detail::floor_log2(5) == 2);
  static_assert(ring_allreduce_us(1000, 4, {1.0, 0.01, 0.0}) == 6.0 + 15.0);
}

TEST_CASE("one name per algorithm: the planner's names are the library's and the benchmark's") {
  // every flat algorithm the planner models is a selectable algorithm of the same name
  // and an allreduce_perf -a name (issue 11: the planner said "halving_doubling")
  for (auto a : {algorithm_id::ring, algorithm_id::recursive_doubling,
                 algorithm_id::recursive_halving_doubling, algorithm_id::binomial_tree}) {
    const std::string_view name = tcoll::to_string(a);
    CAPTURE(name);
    CHECK(tcoll::to_string(tcoll::parse_algorithm(name)) == name);
    const auto& bench = tcoll::bench::all_algorithms();
    CHECK(std::find(bench.begin(), bench.end(), name) != bench.end());
  }
  CHECK(tcoll::to_string(algorithm_id::recursive_halving_doubling) == "recursive_halving_doubling");
  // every selectable algorithm is an allreduce_perf -a name
  for (auto id :
       {tcoll::algorithm_id::ring, tcoll::algorithm_id::recursive_doubling,
        tcoll::algorithm_id::recursive_halving_doubling, tcoll::algorithm_id::binomial_tree,
        tcoll::algorithm_id::passthrough, tcoll::algorithm_id::multi_ring}) {
    const auto& bench = tcoll::bench::all_algorithms();
    CHECK(std::find(bench.begin(), bench.end(), tcoll::to_string(id)) != bench.end());
  }
  // the deprecated spellings still compile and mean the same
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK(halving_doubling_allreduce_us(1000, 6, {1, 0.01, 0.001}) ==
        recursive_halving_doubling_allreduce_us(1000, 6, {1, 0.01, 0.001}));
#pragma GCC diagnostic pop
  CHECK_THROWS_AS(tcoll::parse_algorithm("halving_doubling"), tcoll::invalid_argument);
}

TEST_CASE("multi_ring in selection strings and automatic") {
  using tcoll::algorithm_id;
  const auto rules = tcoll::parse_selection("multi_ring:1M-max;ring:0-64K");
  REQUIRE(rules.size() == 2);
  CHECK(rules[0].algorithm == algorithm_id::multi_ring);
  CHECK(tcoll::parse_algorithm("multi_ring") == algorithm_id::multi_ring);
  CHECK_THROWS_WITH_AS(tcoll::parse_algorithm("multiring"), doctest::Contains("'multiring'"),
                       tcoll::invalid_argument);
  tcoll::automatic a{};
  a.rules = rules;
  CHECK(a.choose(2 << 20, true) == algorithm_id::multi_ring);
  CHECK(a.choose(1024, true) == algorithm_id::ring);
  // non-commutative ops never get a ring of any kind
  CHECK(a.choose(2 << 20, false) == algorithm_id::recursive_halving_doubling);
  // the built-in choice never picks multi_ring
  a.rules.clear();
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1} << 10, std::size_t{1} << 20, std::size_t{1} << 30})
    CHECK(a.choose(bytes, true) != algorithm_id::multi_ring);
}

namespace {
struct shm_like {
  static constexpr bool shared_memory = true;
};
struct plain {};
} // namespace

TEST_CASE("automatic on a shared-memory transport: its own choice, rules still first") {
  using tcoll::algorithm_id;
  tcoll::automatic a{.rules = {}};
  CHECK(a.choose_shared_memory(8, 2, true) == algorithm_id::in_segment);
  CHECK(a.choose_shared_memory(16 << 10, 2, true) == algorithm_id::in_segment);
  CHECK(a.choose_shared_memory((16 << 10) + 1, 2, true) ==
        algorithm_id::recursive_halving_doubling); // 2 ranks: ring is the slowest there
  CHECK(a.choose_shared_memory(1 << 20, 3, true) == algorithm_id::in_segment);
  CHECK(a.choose_shared_memory((1 << 20) + 1, 3, true) == algorithm_id::recursive_halving_doubling);
  a.shared_memory.in_segment_up_to_bytes_many = 0; // without it: ring to 1 MiB on 3 ranks
  CHECK(a.choose_shared_memory(512 << 10, 3, true) == algorithm_id::ring);
  a.shared_memory.in_segment_up_to_bytes = 0; // and recursive doubling to 16 KiB on 2
  CHECK(a.choose_shared_memory(8, 2, true) == algorithm_id::recursive_doubling);
  // a non-commutative op keeps the in-segment choice (it folds ranks in order)
  CHECK(tcoll::automatic{.rules = {}}.choose_shared_memory(8, 2, false) ==
        algorithm_id::in_segment);
  CHECK(a.choose_shared_memory(8 << 20, 4, true) == algorithm_id::recursive_halving_doubling);
  // the dispatch by transport: shm_transport declares shared_memory, the thread transport not
  CHECK(a.choose_for<shm_like>(8 << 20, 2, true, false) ==
        algorithm_id::recursive_halving_doubling);
  CHECK(a.choose_for<plain>(8 << 20, 2, true, false) == algorithm_id::ring);
  // a TCOLL_ALLREDUCE_ALGO-style rule wins over the built-in choice
  a.rules = tcoll::parse_selection("ring:1M-max");
  CHECK(a.choose_shared_memory(8 << 20, 2, true) == algorithm_id::ring);
  CHECK(a.choose_shared_memory(8 << 20, 2, false) == algorithm_id::recursive_halving_doubling);
}

TEST_CASE("alltoall_by_size: the collective area on a transport with one, Bruck on many ranks, "
          "rules first") {
  using tcoll::algorithm_id;
  const tcoll::alltoall_by_size a{.rules = {}};
  // blocks of 16 KiB on 2 ranks: a 32 KiB send buffer, the area's 2-rank bound
  CHECK(a.choose(16 << 10, 2, true) == algorithm_id::in_segment);
  CHECK(a.choose((16 << 10) + 1, 2, true) == algorithm_id::pairwise_exchange);
  CHECK(a.choose(4096, 2) == algorithm_id::pairwise_exchange);    // no area: the exchange
  CHECK(a.choose(16 << 10, 4, true) == algorithm_id::in_segment); // 64 KiB on more ranks
  CHECK(a.choose((16 << 10) + 1, 4, true) == algorithm_id::pairwise_exchange);
  CHECK(a.choose(64, 16) == algorithm_id::bruck);
  CHECK(a.choose(64, 16, true) == algorithm_id::in_segment);
  const tcoll::alltoall_by_size ruled{
      .rules = tcoll::parse_selection("bruck:0-1K;in_segment:1K-64K", tcoll::collective::alltoall)};
  CHECK(ruled.choose(64, 2, true) == algorithm_id::bruck);
  CHECK(ruled.choose(2048, 2) == algorithm_id::in_segment); // a rule names it anywhere
  CHECK(ruled.choose(1 << 20, 2, true) == algorithm_id::pairwise_exchange);
}
