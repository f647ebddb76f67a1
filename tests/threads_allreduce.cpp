// Allreduce value matrix on the threads transport: every algorithm x P x count x type x op,
// in place and out of place, bit-exact against independently computed results, every rank
// bitwise identical. The matrix shrinks under sanitizers (see testing::level()).
#include <doctest/doctest.h>

#include "common/collective_cases.hpp"
#include "common/threads_team.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace tcoll::testing;

namespace {

std::vector<int> all_p() {
  if (level() == test_level::quick) return {1, 2, 3, 4, 5, 7, 8, 16};
  std::vector<int> p;
  for (int i = 1; i <= 16; ++i) p.push_back(i);
  return p;
}

} // namespace

TEST_CASE("allreduce float sum: every algorithm, P = 1..16, every issue count") {
  const bool large = level() != test_level::quick;
  for (int P : all_p()) {
    CAPTURE(P);
    matrix_options opt;
    opt.types = {"float"};
    opt.ops = {"sum"};
    opt.counts = issue_counts(P, large);
    on_team(P, [&](tcoll::thread_transport& t) { allreduce_matrix(t, opt); });
  }
}

TEST_CASE("allreduce int32 prod, double max, half sum, bfloat16 avg: every P") {
  for (int P : all_p()) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      matrix_options opt; // per rank: each rank edits its own copy
      opt.counts = issue_counts(P, false);
      for (auto [type, op] : {std::pair{"int32", "prod"},
                              {"double", "max"},
                              {"half", "sum"},
                              {"bfloat16", "avg"},
                              {"uint8", "min"}}) {
        opt.types = {type};
        opt.ops = {op};
        allreduce_matrix(t, opt);
      }
    });
  }
}

TEST_CASE("allreduce every op x every type at selected (P, count) points") {
  std::vector<std::pair<int, std::vector<std::size_t>>> points;
  switch (level()) {
  case test_level::quick:
    points = {{3, {1000}}, {4, {5}}, {6, {7}}};
    break;
  case test_level::normal:
    points = {{1, {3}},       {2, {1, 1000}}, {3, {2, 1000}},  {6, {7}},
              {8, {9, 4099}}, {13, {12}},     {16, {17, 1000}}};
    break;
  case test_level::long_sweep:
    for (int P = 1; P <= 16; ++P) points.push_back({P, issue_counts(P, false)});
    break;
  }
  for (const auto& [P, counts] : points) {
    CAPTURE(P);
    matrix_options opt;
    opt.counts = counts;
    on_team(P, [&](tcoll::thread_transport& t) { allreduce_matrix(t, opt); });
  }
}

TEST_CASE("allreduce every type at 2^20+3 elements (sum)") {
  if (level() == test_level::quick) return;
  std::vector<int> ps = {3, 8};
  if (level() == test_level::long_sweep) ps = {2, 3, 5, 8, 12, 16};
  for (int P : ps) {
    CAPTURE(P);
    matrix_options opt;
    opt.counts = {(std::size_t{1} << 20) + 3};
    opt.ops = {"sum"};
    opt.algorithms = {"ring", "recursive_halving_doubling"};
    opt.in_place = false;
    on_team(P, [&](tcoll::thread_transport& t) { allreduce_matrix(t, opt); });
  }
}

TEST_CASE("ring with tiny segments (max_segment_bytes = 8 and 12): many messages per chunk") {
  std::vector<int> ps = {2, 3, 4, 5, 8, 16};
  if (level() == test_level::quick) ps = {2, 3, 5};
  for (int P : ps) {
    CAPTURE(P);
    matrix_options opt;
    opt.algorithms = {"ring", "automatic"};
    opt.counts = {1, std::size_t(P + 1), 37, 1000};
    opt.types = {"float", "int64", "half", "int8"};
    opt.ops = {"sum", "max", "avg"};
    for (std::size_t seg : {8, 12}) {
      opt.ring_segment_bytes = seg;
      on_team(P, [&](tcoll::thread_transport& t) { allreduce_matrix(t, opt); });
    }
  }
}

TEST_CASE("half and bfloat16 with rounding: within the log2(P) (ring: P-1) error bound") {
  std::vector<int> ps = {2, 3, 4, 7, 8, 16};
  if (level() == test_level::quick) ps = {3, 8};
  for (int P : ps) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      reduced_precision_rounding(t, {1, std::size_t(P + 1), 1000});
    });
  }
}

// ---------------------------------------------------------------------------------------
// Rank identity on fractional float and double inputs (issue 11). The value matrix above
// uses integer-valued floats, whose sums are exact in any order, so they cannot show two
// ranks reducing in different orders. These inputs have fractional parts over a range of
// magnitudes: every rounding depends on the order, and every rank must still end with
// the same bits.

namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Rank r's element i: a fraction in (-1, 1) with 52 random bits, scaled by 2^(-8..8).
template <class T>
T fractional_input(int r, std::size_t i) {
  const std::uint64_t h = splitmix((std::uint64_t(r) << 40) ^ i ^ 0x5eedull);
  const double frac = static_cast<double>(h >> 12) / 4503599627370496.0 * 2.0 - 1.0; // 2^52
  return static_cast<T>(std::ldexp(frac, static_cast<int>(h % 17) - 8));
}

/// Each flat algorithm (and automatic) by name, as the test runs it.
template <class F>
void with_flat_algorithm(std::string_view name, F&& f) {
  using namespace tcoll;
  if (name == "ring") return f(ring{});
  if (name == "ring{seg=256B}") return f(ring{256});
  if (name == "recursive_doubling") return f(recursive_doubling{});
  if (name == "recursive_halving_doubling") return f(recursive_halving_doubling{});
  if (name == "binomial_tree") return f(binomial_tree{});
  if (name == "multi_ring") return f(multi_ring{});
  if (name == "multi_ring{3,forward,seg=256B}") return f(multi_ring{3, ring_order::forward, 256});
  if (name == "automatic") {
    automatic a{};
    a.rules.clear(); // the built-in choice, whatever TCOLL_ALLREDUCE_ALGO says
    return f(a);
  }
  if (name == "automatic{multi_ring:1K-max}") {
    automatic a{};
    a.rules = parse_selection("multi_ring:1K-max");
    return f(a);
  }
  FAIL("unknown algorithm " << name);
}

const std::vector<std::string> flat_algorithm_names = {"ring",
                                                       "ring{seg=256B}",
                                                       "recursive_doubling",
                                                       "recursive_halving_doubling",
                                                       "binomial_tree",
                                                       "multi_ring",
                                                       "multi_ring{3,forward,seg=256B}",
                                                       "automatic",
                                                       "automatic{multi_ring:1K-max}"};

std::vector<std::size_t> identity_counts(int P) {
  std::vector<std::size_t> c = {1, std::size_t(P + 1), std::size_t(3 * P + 2), 1000, 4099};
  if (P > 1) c.push_back(std::size_t(P - 1));
  if (level() != test_level::quick) c.push_back(65537); // automatic takes the ring here
  return c;
}

/// Runs `algo` on fractional inputs on P ranks; checks every rank's result is bitwise
/// rank 0's and within the rounding bound of the exact sum (so identical garbage fails).
template <class T, class Algo, class Op>
void fractional_identity_case(int P, const Algo& algo, const Op& op, bool average, std::size_t n,
                              bool in_place, const std::string& label) {
  std::vector<std::vector<T>> out(static_cast<std::size_t>(P));
  on_team(P, [&](tcoll::thread_transport& t) {
    std::vector<T> in(n), res(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = fractional_input<T>(t.rank(), i);
    if (in_place) {
      res = in;
      tcoll::allreduce(t, res.data(), res.data(), n, op, algo);
    } else {
      tcoll::allreduce(t, static_cast<const T*>(in.data()), res.data(), n, op, algo);
    }
    out[std::size_t(t.rank())] = std::move(res);
  });
  std::size_t differ = 0, inaccurate = 0;
  for (int r = 1; r < P; ++r)
    if (std::memcmp(out[std::size_t(r)].data(), out[0].data(), n * sizeof(T)) != 0) ++differ;
  const double u = std::numeric_limits<T>::epsilon() / 2;
  for (std::size_t i = 0; i < n; ++i) {
    long double exact = 0, mag = 0;
    for (int r = 0; r < P; ++r) {
      exact += static_cast<long double>(fractional_input<T>(r, i));
      mag += std::fabs(static_cast<long double>(fractional_input<T>(r, i)));
    }
    if (average) {
      exact /= P;
      mag /= P;
    }
    // a chain of at most P - 1 additions (the ring), a fold and the division
    const long double bound = (P + 2) * u * mag * 1.001L;
    if (!(std::fabs(static_cast<long double>(out[0][i]) - exact) <= bound)) ++inaccurate;
  }
  INFO(label << " " << tcoll::type_name<T>() << (average ? " avg" : " sum") << " P=" << P
             << " n=" << n << (in_place ? " in-place" : " out-of-place"));
  CHECK(differ == 0);
  CHECK(inaccurate == 0);
}

} // namespace

TEST_CASE("fractional inputs change with the reduction order (guards the identity test)") {
  // If the inputs summed to the same bits in any order, the identity test below could not
  // see a rank that reduces in its own order. Forward and backward rank order must differ.
  for (int P : {3, 5, 9}) {
    std::size_t float_diff = 0, double_diff = 0;
    for (std::size_t i = 0; i < 1000; ++i) {
      float ff = 0, fb = 0;
      double df = 0, db = 0;
      for (int r = 0; r < P; ++r) {
        ff += fractional_input<float>(r, i);
        fb += fractional_input<float>(P - 1 - r, i);
        df += fractional_input<double>(r, i);
        db += fractional_input<double>(P - 1 - r, i);
      }
      float_diff += std::memcmp(&ff, &fb, sizeof ff) != 0;
      double_diff += std::memcmp(&df, &db, sizeof df) != 0;
    }
    CAPTURE(P);
    CHECK(float_diff > 100);
    CHECK(double_diff > 100);
  }
}

TEST_CASE("every flat algorithm: bitwise identical results on every rank for fractional float "
          "and double inputs, P = 1..9 (and 12, 16)") {
  std::vector<int> ps = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  if (level() != test_level::quick) ps.insert(ps.end(), {12, 16});
  for (const std::string& name : flat_algorithm_names)
    with_flat_algorithm(name, [&](const auto& algo) {
      for (int P : ps)
        for (std::size_t n : identity_counts(P)) {
          const bool in_place = n % 2 == 1;
          fractional_identity_case<float>(P, algo, tcoll::sum_op{}, false, n, in_place, name);
          fractional_identity_case<double>(P, algo, tcoll::sum_op{}, false, n, !in_place, name);
          fractional_identity_case<float>(P, algo, tcoll::avg_op{}, true, n, !in_place, name);
          fractional_identity_case<double>(P, algo, tcoll::avg_op{}, true, n, in_place, name);
        }
    });
}

TEST_CASE("automatic runs multi_ring for a multi_ring selection rule (traffic of K rings)") {
  // ring: 2(P-1) messages per rank for a count that needs no segmenting; multi_ring with
  // K rings: 2(P-1) K. The rule must reach the real multi_ring, not the ring.
  for (int P : {2, 3, 5}) {
    CAPTURE(P);
    std::atomic<int> wrong{0};
    on_team(P, [&](tcoll::thread_transport& t) {
      tcoll::counting<tcoll::thread_transport> c(t);
      tcoll::automatic a{};
      a.rules = tcoll::parse_selection("multi_ring:0-max");
      a.multi_ring_knobs.rings = 3;
      const std::size_t n = 1000;
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = fractional_input<double>(t.rank(), i);
      tcoll::allreduce(c, v.data(), v.data(), n, tcoll::sum_op{}, a);
      if (c.counts().messages_sent != std::size_t(2 * (P - 1) * 3)) wrong += 1;
      // and the same bits as multi_ring itself
      std::vector<double> w(n);
      for (std::size_t i = 0; i < n; ++i) w[i] = fractional_input<double>(t.rank(), i);
      tcoll::allreduce(t, w.data(), w.data(), n, tcoll::sum_op{}, a.multi_ring_knobs);
      if (std::memcmp(v.data(), w.data(), n * sizeof(double)) != 0) wrong += 1;
    });
    CHECK(wrong == 0);
  }
}
