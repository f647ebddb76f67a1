// The mixed-precision adaptor on host memory (threads transport, cpu reducer): runs in CI,
// where the GPU suite can only skip. Checks the casts, the reported error bound (against an
// independent double-precision sum), that the error is real, input untouched, identical ranks.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>

#include <tcoll/compress/mixed_precision.hpp>
#include <tcoll/tcoll.hpp>

#include "../common/collective_cases.hpp"

using namespace tcoll;
using namespace tcoll::testing;

namespace {
float value(int r, std::size_t i) {
  return static_cast<float>(static_cast<std::int64_t>(mix((std::uint64_t(r) << 32) ^ i) % 20001) -
                            10000) /
         4096.0f;
}

template <class Wire, class Op, class Algo>
void run_case(int P, const Op& op, const Algo& algo, float scale, bool avg) {
  const std::size_t n = 5003;
  thread_team(P, std::chrono::seconds(30)).run([&](thread_transport& t) {
    std::vector<float> in(n), out(n, -12345.0f);
    for (std::size_t i = 0; i < n; ++i) in[i] = value(t.rank(), i);
    const std::vector<float> copy = in;
    const auto rep = allreduce_mixed<Wire>(t, in.data(), out.data(), n, op, algo, cpu_reducer{},
                                           {.scale = scale});
    check_equal(in, copy, "input untouched");
    CHECK(rep.roundings == P + 1);
    std::size_t bad = 0, inexact = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double exact = 0, mag = 0;
      for (int r = 0; r < P; ++r) {
        exact += value(r, i);
        mag += std::abs(value(r, i));
      }
      if (avg) {
        exact /= P;
        mag /= P;
      }
      bad += !(std::abs(out[i] - exact) <= rep.bound(mag) * 1.0001);
      inexact += out[i] != static_cast<float>(exact);
    }
    CHECK_MESSAGE(bad == 0, bad << " elements outside the reported bound, wire " << rep.wire);
    if (P > 1) CHECK_MESSAGE(inexact > 0, "the wire type should have lost some bits");
    check_identical_across_ranks(t, out.data(), n * sizeof(float), "mixed precision");
  });
}
} // namespace

TEST_CASE("mixed precision on the CPU: half and bfloat16 wire, sum and avg, several algorithms") {
  for (int P : {1, 2, 5, 8}) {
    CAPTURE(P);
    run_case<half>(P, sum_op{}, ring{}, 4.0f, false);
    run_case<half>(P, avg_op{}, recursive_halving_doubling{}, 1.0f, true);
    run_case<bfloat16>(P, sum_op{}, binomial_tree{}, 1.0f, false);
    run_case<bfloat16>(P, avg_op{}, recursive_doubling{}, 0.5f, true);
  }
}

TEST_CASE("mixed precision: in place, zero count, bad scale and null pointers") {
  thread_team(2, std::chrono::seconds(30)).run([](thread_transport& t) {
    std::vector<float> v = {1.5f, -2.25f, 3.0f};
    allreduce_mixed<half>(t, v.data(), v.data(), v.size());
    CHECK(v == std::vector<float>{3.0f, -4.5f, 6.0f});
    allreduce_mixed<half>(t, static_cast<const float*>(nullptr), nullptr, 0);
    const std::string at = "[rank " + std::to_string(t.rank()) + "]";
    expect_error<invalid_argument>(
        [&] {
          allreduce_mixed<half>(t, v.data(), v.data(), 3, sum_op{}, ring{}, cpu_reducer{},
                                {.scale = 0.0f});
        },
        {"scale", at}, "zero scale");
    expect_error<invalid_argument>(
        [&] { allreduce_mixed<half>(t, static_cast<const float*>(nullptr), v.data(), 3); },
        {"sendbuf", "null", at}, "null sendbuf");
  });
}

TEST_CASE("mixed precision: values beyond half's range overflow unless scaled down") {
  thread_team(2, std::chrono::seconds(30)).run([](thread_transport& t) {
    std::vector<float> v(4, 40000.0f), out(4);
    allreduce_mixed<half>(t, v.data(), out.data(), 4);
    CHECK(std::isinf(out[0]));
    allreduce_mixed<half>(t, v.data(), out.data(), 4, sum_op{}, ring{}, cpu_reducer{},
                          {.scale = 1.0f / 64});
    CHECK(out[0] == 80000.0f);
  });
}
