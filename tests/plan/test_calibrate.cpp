// Least-squares fits against hand-solved systems and exact recovery, and the reader of
// bench/allreduce_perf --json output.
#include <doctest/doctest.h>

#include <random>

#if TCOLL_HAVE_NLOHMANN_JSON // the JSON reader is optional (nlohmann/json)
#include "tcoll/plan/bench_records.hpp"
#endif
#include "tcoll/plan/calibrate.hpp"
#include "tcoll/plan/replan.hpp"

using namespace tcoll::plan;
using tcoll::algorithm_id;

TEST_CASE("ordinary least squares by hand") {
  // (1,1), (2,2), (3,2): slope = sxy/sxx = 1/2, intercept = 5/3 - 2 * 1/2 = 2/3
  const std::vector<sample> s{{1, 1}, {2, 2}, {3, 2}};
  const auto fit = fit_linear(s, {fit_weighting::absolute});
  CHECK(fit.per_byte_us == doctest::Approx(0.5));
  CHECK(fit.startup_us == doctest::Approx(2.0 / 3.0));
  const auto e = evaluate_fit(fit, s);
  // residuals +2/3-... : model 7/6, 5/3, 13/6 against 1, 2, 2
  CHECK(e.max_relative == doctest::Approx(1.0 / 6.0));
  CHECK(e.rms_us == doctest::Approx(std::sqrt((1.0 / 36 + 1.0 / 9 + 1.0 / 36) / 3)));
  CHECK(e.count == 3);
}

TEST_CASE("relative weighting by hand") {
  // weights 1/t^2 = 1, 1/4, 1/4 on (1,1), (2,2), (3,2): sw = 1.5, mean x = (1 + .5 + .75)/1.5
  // = 1.5, mean y = (1 + .5 + .5)/1.5 = 4/3; sxx = .25 + .25*.25 + .25*2.25 = .875, sxy =
  // (-.5)(-1/3) + .25(.5)(2/3) + .25(1.5)(2/3) = 1/6 + 1/12 + 1/4 = .5
  const std::vector<sample> s{{1, 1}, {2, 2}, {3, 2}};
  const auto fit = fit_linear(s, {fit_weighting::relative});
  CHECK(fit.per_byte_us == doctest::Approx(0.5 / 0.875));
  CHECK(fit.startup_us == doctest::Approx(4.0 / 3.0 - 1.5 * 0.5 / 0.875));
}

TEST_CASE("exact recovery of linear and piecewise models") {
  const linear_cost truth{45.0, 0.0016};
  std::vector<sample> s;
  for (int e = 3; e <= 28; ++e) s.push_back({static_cast<double>(1 << e), truth(1 << e)});
  const auto fit = fit_linear(s);
  CHECK(fit.startup_us == doctest::Approx(45.0).epsilon(1e-9));
  CHECK(fit.per_byte_us == doctest::Approx(0.0016).epsilon(1e-9));
  CHECK(evaluate_fit(fit, s).max_relative < 1e-9);

  const piecewise_cost pw{3.5, 20.0, 0.0008, 60.0, 45000.0};
  std::vector<sample> p;
  for (int e = 0; e <= 30; ++e)
    p.push_back({static_cast<double>(1ull << e), pw(static_cast<double>(1ull << e))});
  const auto given = fit_piecewise(p, 45000.0);
  CHECK(given.log_slope_us == doctest::Approx(3.5));
  CHECK(given.log_offset_us == doctest::Approx(20.0));
  CHECK(given.linear_slope_us == doctest::Approx(0.0008));
  CHECK(given.linear_offset_us == doctest::Approx(60.0));
  // searched threshold: only the true cut (first size >= 45000 = 65536) fits exactly
  const auto searched = fit_piecewise_auto(p);
  CHECK(searched.threshold_bytes == 65536.0);
  CHECK(evaluate_fit(searched, p).max_relative < 1e-9);
}

TEST_CASE("a noisy fit reports its error and recovers the parameters roughly") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(1.0, 0.02);
  const linear_cost truth{30.0, 0.001};
  std::vector<sample> s;
  for (int rep = 0; rep < 5; ++rep)
    for (int e = 0; e <= 26; ++e) s.push_back({double(1 << e), truth(1 << e) * noise(rng)});
  const auto fit = fit_linear(s);
  CHECK(fit.startup_us == doctest::Approx(30.0).epsilon(0.02));
  CHECK(fit.per_byte_us == doctest::Approx(0.001).epsilon(0.05));
  const auto e = evaluate_fit(fit, s);
  CHECK(e.rms_relative > 0.01);
  CHECK(e.rms_relative < 0.04);
}

TEST_CASE("degenerate inputs are rejected") {
  const std::vector<sample> one_size{{8, 1}, {8, 2}};
  CHECK_THROWS_AS(fit_linear(one_size), tcoll::invalid_argument);
  CHECK_THROWS_AS(fit_linear(std::vector<sample>{}), tcoll::invalid_argument);
  const std::vector<sample> s{{1, 1}, {2, 2}, {4, 3}, {8, 4}};
  CHECK_THROWS_AS(fit_piecewise(s, 2.0), tcoll::invalid_argument); // one size below the cut
  CHECK_THROWS_AS(fit_piecewise_auto(std::vector<sample>{{1, 1}, {2, 2}, {4, 3}}),
                  tcoll::invalid_argument);
}

TEST_CASE("alpha and beta of every flat algorithm from a linear fit") {
  for (auto a : {algorithm_id::ring, algorithm_id::recursive_doubling,
                 algorithm_id::recursive_halving_doubling, algorithm_id::binomial_tree}) {
    for (int ranks : {2, 5, 8, 12}) {
      const link_params truth{12.0, 0.002, 0.0001};
      const auto model = flat_allreduce(a, ranks, truth);
      std::vector<sample> s;
      for (int e = 0; e <= 24; e += 2) s.push_back({double(1 << e), model(1 << e)});
      const auto l = link_from_linear_fit(a, ranks, fit_linear(s), truth.gamma_us_per_byte);
      CAPTURE(tcoll::to_string(a));
      CAPTURE(ranks);
      CHECK(l.alpha_us == doctest::Approx(12.0));
      CHECK(l.beta_us_per_byte == doctest::Approx(0.002));
    }
  }
}

#if TCOLL_HAVE_NLOHMANN_JSON
TEST_CASE("allreduce_perf --json records: extra fields, filters, fit") {
  const char* json = R"([
    {"algorithm":"ring","transport":"threads","ranks":4,"dtype":"float32","op":"sum","bytes":1024,
     "inplace":false,"time_us":12.5,"algbw_gbs":0.08,"busbw_gbs":0.12,"wrong":0,"host":"x","extra":{"a":[1,2,{"b":null}]}},
    {"algorithm":"ring","transport":"threads","ranks":4,"dtype":"float32","op":"sum","bytes":1048576,
     "inplace":true,"time_us":512.5,"algbw_gbs":2.0,"busbw_gbs":3.0,"wrong":0},
    {"algorithm":"ring","transport":"threads","ranks":4,"dtype":"float32","op":"sum","bytes":2048,
     "inplace":false,"time_us":13,"wrong":3},
    {"algorithm":"passthrough","transport":"mpi","ranks":4,"bytes":4096,"time_us":1e1,"note":"caf\u00e9 \"q\""},
    {"algorithm":"ring","ranks":8,"bytes":1024,"time_us":20}
  ])";
  const auto records = to_allreduce_records(parse_json_records(json));
  REQUIRE(records.size() == 5);
  CHECK(records[0].algorithm == "ring");
  CHECK(records[1].inplace);
  CHECK(records[3].time_us == 10.0);
  record_filter f;
  f.algorithm = "ring";
  f.ranks = 4;
  const auto s = select_samples(records, f); // the wrong record is dropped
  REQUIRE(s.size() == 2);
  const auto fit = fit_linear(s);
  // two points determine the line: slope (512.5 - 12.5) / (1048576 - 1024)
  CHECK(fit.per_byte_us == doctest::Approx(500.0 / 1047552.0));
  f.inplace = 0;
  CHECK(select_samples(records, f).size() == 1);
  f = {};
  f.algorithm = "passthrough";
  CHECK(select_samples(records, f).size() == 1);

  CHECK(parse_json_records("[]").empty());
  CHECK_THROWS_AS(
      to_allreduce_records(parse_json_records(R"([{"algorithm":"ring","bytes":1,"time_us":1}])")),
      std::runtime_error); // no ranks
  CHECK_THROWS_AS(to_allreduce_records(parse_json_records(
                      R"([{"algorithm":"ring","ranks":"4","bytes":1,"time_us":1}])")),
                  std::runtime_error);
}

TEST_CASE("fuzz: the JSON reader throws runtime_error on garbage, never anything else") {
  std::mt19937_64 rng(99);
  const std::string valid =
      R"([{"algorithm":"ring","ranks":4,"bytes":1024,"time_us":12.5,"x":[1,{"y":true}]}])";
  const std::string alphabet = "[]{}\",:.-+eE0123456789tfnul \\";
  int ok = 0, bad = 0;
  for (int round = 0; round < 5000; ++round) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t at = rng() % text.size();
      if (rng() % 2)
        text[at] = alphabet[rng() % alphabet.size()];
      else
        text.erase(at, 1);
    }
    try {
      parse_json_records(text);
      ++ok;
    } catch (const std::runtime_error&) {
      ++bad;
    }
  }
  CHECK(ok > 50);
  CHECK(bad > 2000);
  // not an array of objects, with the reason
  CHECK_THROWS_WITH_AS(parse_json_records(R"({"algorithm":"ring"})"),
                       doctest::Contains("expected an array"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_json_records(R"([{"a":1}, 3])"),
                       doctest::Contains("element 1 is not an object"), std::runtime_error);
  // the 0-based offset of the offending character (the second comma)
  CHECK_THROWS_WITH_AS(parse_json_records(R"([{"a":1},, ])"), doctest::Contains("offset 9:"),
                       std::runtime_error);
  // scalars kept with their types, nested values skipped, \u escapes decoded
  const auto r =
      parse_json_records(R"([{"n":null,"b":true,"x":-2.5e1,"s":"caf\u00e9","o":{"p":1}}])");
  REQUIRE(r.size() == 1);
  CHECK(std::holds_alternative<std::monostate>(r[0].at("n")));
  CHECK(std::get<bool>(r[0].at("b")));
  CHECK(std::get<double>(r[0].at("x")) == -25.0);
  CHECK(std::get<std::string>(r[0].at("s")) == "caf\xc3\xa9");
  CHECK(r[0].count("o") == 0);
  // nesting up to the bound is fine
  CHECK(
      parse_json_records("[{\"a\":" + std::string(60, '[') + std::string(60, ']') + "}]").size() ==
      1);
  // deep nesting is bounded
  CHECK_THROWS_AS(
      parse_json_records("[{\"a\":" + std::string(1000, '[') + std::string(1000, ']') + "}]"),
      std::runtime_error);
}
#endif // TCOLL_HAVE_NLOHMANN_JSON

TEST_CASE("autotune's cost line: a fit, or through the origin when every sample has one size") {
  using namespace tcoll::plan;
  const std::vector<sample> two_sizes{{1000, 12}, {2000, 22}, {1000, 12}};
  const linear_cost fit = fit_autotune_cost(two_sizes);
  CHECK(fit.startup_us == doctest::Approx(2.0));
  CHECK(fit.per_byte_us == doctest::Approx(0.01));
  // one size (a model whose buckets are all alike): least squares cannot separate a and b
  const std::vector<sample> one_size{{1000, 10}, {1000, 14}};
  const linear_cost origin = fit_autotune_cost(one_size);
  CHECK(origin.startup_us == 0.0);
  CHECK(origin.per_byte_us == doctest::Approx(0.012));
  // nothing measured (one rank: no communication): a free link
  const linear_cost none = fit_autotune_cost(std::vector<sample>{});
  CHECK(none.startup_us == 0.0);
  CHECK(none.per_byte_us == 0.0);
  // a replan callback runs the planner on the measured workload with that line
  const measured_iterations m{{{4000, 4000, 4000}, {10, 10, 10}}, one_size};
  const replan_result r = replan_with(single_planner{})(m);
  CHECK(r.plan.ends == std::vector<std::size_t>{3});
  CHECK(r.cost.per_byte_us == doctest::Approx(0.012));
}
