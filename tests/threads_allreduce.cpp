// Allreduce value matrix on the threads transport: every algorithm x P x count x type x op,
// in place and out of place, bit-exact against independently computed results, every rank
// bitwise identical. The matrix shrinks under sanitizers (see testing::level()).
#include <doctest/doctest.h>

#include "common/collective_cases.hpp"
#include "common/threads_team.hpp"

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
