// The Eigen GEMM policy in the sufficient-factor allreduce (suite 'hybrid', built where
// Eigen 3 is found): exact for integer-valued factors, bitwise identical on every rank and
// within the reassociation bound for fractional ones, same bits blocking and non-blocking,
// and within the rounding bound of the host GEMM.
#include <doctest/doctest.h>

#include <tcoll/hybrid/eigen_gemm.hpp>

#include "cases.hpp"

using namespace hybrid_test;
using namespace std::chrono_literals;
using tcoll::hybrid::eigen_gemm;

TEST_CASE("SFB with the Eigen GEMM: exact, identical across ranks, within the bound") {
  for (int P : {1, 2, 3, 7}) {
    const shape s = random_shape(4242 + P, 80, 10);
    CAPTURE(P);
    CAPTURE(s.K);
    CAPTURE(s.M);
    CAPTURE(s.N);
    tcoll::thread_team(P, 30s).run([&](tcoll::thread_transport& t) {
      exact_case<float, eigen_gemm>(t, 50 + P, s);
      exact_case<double, eigen_gemm>(t, 60 + P, s);
      fractional_case<float, eigen_gemm>(t, 70 + P, s);
      fractional_case<float, eigen_gemm>(t, 70 + P, s, true);
      nonblocking_case<float, eigen_gemm>(t, 80 + P);
    });
  }
}

TEST_CASE("Eigen and host GEMM agree within gamma(rows) of each other's magnitudes") {
  const std::size_t rows = 96, M = 130, N = 77;
  const auto f = make_factors<float>(9, 0, rows, M, N, false);
  std::vector<float> host(M * N), eig(M * N);
  tcoll::hybrid::host_gemm{}.sum_outer_products(f.u.data(), f.v.data(), rows, M, N, host.data());
  eigen_gemm{}.sum_outer_products(f.u.data(), f.v.data(), rows, M, N, eig.data());
  const double g = 2 * gamma_n(static_cast<double>(rows), unit_roundoff<float>());
  std::size_t beyond = 0;
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double mag = 0;
      for (std::size_t k = 0; k < rows; ++k)
        mag += std::fabs(static_cast<double>(f.u[k * M + i]) * f.v[k * N + j]);
      if (std::fabs(static_cast<double>(host[i * N + j]) - eig[i * N + j]) > g * mag) ++beyond;
    }
  CHECK(beyond == 0);
}
