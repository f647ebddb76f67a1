// Sufficient-factor reconstruction on the device: the cuBLAS GEMM policy on its own
// (against exact integer sums and against host_gemm within the reassociation bound, and
// deterministic), and sfb_allreduce on device_team with the cuda reducer and cublas_gemm
// (exact for integer-valued factors, bitwise identical on every rank for fractional ones).
// Expectations are computed here on the host in int64 / long double.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <tcoll/hybrid.hpp>
#include <tcoll/hybrid/cublas_gemm.hpp>
#include <tcoll/reduce/cuda.cuh>
#include <tcoll/transport/device_team.hpp>

#include "device_buffers.hpp"

namespace {

using tcoll::clock;
using tcoll::testing::download_array;

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/// Value i of stream `which` for rank r: integers in [-3, 3] or fractions in (-1, 1).
template <class T>
std::vector<T> values(std::size_t n, std::uint64_t seed, int r, int which, bool integral) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t h = mix(seed * 1000003ull + static_cast<std::uint64_t>(r) * 7919ull +
                                static_cast<std::uint64_t>(which) * 104729ull + i * 2654435761ull);
    v[i] = integral ? static_cast<T>(static_cast<int>(h % 7) - 3)
                    : static_cast<T>((static_cast<double>(h % 2000003) - 1000001.0) / 1000003.0);
  }
  return v;
}

template <class T>
tcoll::device_buffer<T> upload_matrix(const std::vector<T>& h, cudaStream_t s) {
  tcoll::device_buffer<T> d(h.size(), s);
  tcoll::detail::cuda::check(
      cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyDefault, s), "upload");
  tcoll::detail::cuda::synchronize(s, clock::now() + tcoll::testing::gpu_timeout);
  return d;
}

} // namespace

TEST_CASE("cublas_gemm: exact for integer factors, within gamma(rows) S of the exact sum for "
          "fractional ones, same bits on a second call") {
  cudaStream_t s = nullptr;
  tcoll::detail::cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  tcoll::hybrid::cublas_gemm gemm(s);
  struct shape {
    std::size_t rows, M, N;
  };
  for (shape sh : {shape{1, 1, 1}, shape{7, 13, 5}, shape{64, 300, 257}, shape{33, 1024, 96}}) {
    CAPTURE(sh.rows);
    CAPTURE(sh.M);
    CAPTURE(sh.N);
    for (bool integral : {true, false}) {
      const auto U = values<float>(sh.rows * sh.M, sh.M, 0, 1, integral);
      const auto V = values<float>(sh.rows * sh.N, sh.N, 0, 2, integral);
      auto dU = upload_matrix(U, s), dV = upload_matrix(V, s);
      tcoll::device_buffer<float> dG(sh.M * sh.N, s);
      gemm.sum_outer_products(dU.data(), dV.data(), sh.rows, sh.M, sh.N, dG.data());
      const auto G = download_array(dG.data(), sh.M * sh.N, s);
      gemm.sum_outer_products(dU.data(), dV.data(), sh.rows, sh.M, sh.N, dG.data());
      const auto again = download_array(dG.data(), sh.M * sh.N, s);
      CHECK(std::memcmp(G.data(), again.data(), G.size() * sizeof(float)) == 0);
      const double u = 0x1p-24, gamma = sh.rows * u / (1.0 - sh.rows * u);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < sh.M; ++i)
        for (std::size_t j = 0; j < sh.N; ++j) {
          long double exact = 0, mag = 0;
          for (std::size_t k = 0; k < sh.rows; ++k) {
            const long double p = static_cast<long double>(U[k * sh.M + i]) * V[k * sh.N + j];
            exact += p;
            mag += std::fabs(p);
          }
          const long double err = std::fabs(static_cast<long double>(G[i * sh.N + j]) - exact);
          if (integral ? err != 0 : err > gamma * 1.001 * mag) ++wrong;
        }
      CHECK(wrong == 0);
    }
  }
  tcoll::detail::cuda::check(cudaStreamDestroy(s), "stream destroy");
}

TEST_CASE("sfb_allreduce on device_team + cuda_reducer + cublas_gemm: exact for integer "
          "factors, identical bits on every rank for fractional ones") {
  const std::size_t K = 6, M = 70, N = 33;
  for (int P : {1, 2, 4}) {
    CAPTURE(P);
    std::vector<std::vector<float>> results(static_cast<std::size_t>(P));
    for (bool integral : {true, false}) {
      tcoll::device_team(P, tcoll::testing::gpu_timeout).run([&](tcoll::device_transport& t) {
        const int r = t.rank();
        tcoll::cuda_reducer red;
        red.stream = t.stream();
        tcoll::hybrid::cublas_gemm gemm(t.stream());
        auto dU = upload_matrix(values<float>(K * M, 5, r, 1, integral), t.stream());
        auto dV = upload_matrix(values<float>(K * N, 5, r, 2, integral), t.stream());
        tcoll::device_buffer<float> dG(M * N, t.stream());
        tcoll::hybrid::sfb_allreduce(t, dU.data(), dV.data(), K, M, N, dG.data(), tcoll::sum_op{},
                                     gemm, {}, red);
        results[static_cast<std::size_t>(r)] = download_array(dG.data(), M * N, t.stream());
      });
      // exact sums over every rank's samples (integers), identity across ranks (both)
      std::size_t wrong = 0;
      if (integral) {
        std::vector<std::int64_t> exact(M * N, 0);
        for (int q = 0; q < P; ++q) {
          const auto U = values<float>(K * M, 5, q, 1, true);
          const auto V = values<float>(K * N, 5, q, 2, true);
          for (std::size_t k = 0; k < K; ++k)
            for (std::size_t i = 0; i < M; ++i)
              for (std::size_t j = 0; j < N; ++j)
                exact[i * N + j] += static_cast<std::int64_t>(U[k * M + i]) *
                                    static_cast<std::int64_t>(V[k * N + j]);
        }
        for (std::size_t e = 0; e < M * N; ++e)
          if (results[0][e] != static_cast<float>(exact[e])) ++wrong;
      }
      CHECK(wrong == 0);
      for (int q = 1; q < P; ++q)
        CHECK(std::memcmp(results[0].data(), results[static_cast<std::size_t>(q)].data(),
                          M * N * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("hybrid_scheduler on device_team + cuda_reducer: factors given in device memory, the "
          "pool in device memory, same bits as the blocking calls") {
  using tcoll::hybrid::scheme;
  const std::size_t K = 4, M = 33, N = 17;
  for (int P : {1, 2, 3}) {
    CAPTURE(P);
    tcoll::device_team(P, tcoll::testing::gpu_timeout).run([&](tcoll::device_transport& t) {
      const int r = t.rank();
      tcoll::cuda_reducer red;
      red.stream = t.stream();
      const std::vector<std::size_t> sizes{M * N, M}; // W (SFB), then its bias (dense)
      tcoll::gradient_pool<float, tcoll::cuda_reducer> pool(sizes, {}, red);
      const tcoll::hybrid::hybrid_plan plan{K, {{scheme::sfb, M, N}, {scheme::dense, 0, 0}}};
      tcoll::hybrid::hybrid_scheduler<tcoll::device_transport, float, tcoll::sum_op, tcoll::ring,
                                      tcoll::hybrid::cublas_gemm, tcoll::cuda_reducer>
          sched(pool, t, plan, {}, {}, tcoll::hybrid::cublas_gemm(t.stream()));
      // a short shard (K - 1 samples): the scheduler pads it with a zero row
      const auto U = values<float>((K - 1) * M, 9, r, 1, false);
      const auto V = values<float>((K - 1) * N, 9, r, 2, false);
      const auto bias = values<float>(M, 9, r, 3, false);
      auto dU = upload_matrix(U, t.stream());
      auto dV = upload_matrix(V, t.stream());
      auto dBias = upload_matrix(bias, t.stream());
      red.copy(pool.tensor(1).data(), dBias.data(), M);
      red.synchronize();
      sched.mark_factors_ready(0, dU.data(), dV.data(), K - 1);
      sched.mark_ready(1);
      sched.finish();

      std::vector<float> Upad(K * M, 0.0f), Vpad(K * N, 0.0f);
      std::copy(U.begin(), U.end(), Upad.begin());
      std::copy(V.begin(), V.end(), Vpad.begin());
      auto dUpad = upload_matrix(Upad, t.stream());
      auto dVpad = upload_matrix(Vpad, t.stream());
      tcoll::device_buffer<float> want(M * N, t.stream());
      tcoll::hybrid::sfb_allreduce(t, dUpad.data(), dVpad.data(), K, M, N, want.data(),
                                   tcoll::sum_op{}, tcoll::hybrid::cublas_gemm(t.stream()), {},
                                   red);
      tcoll::allreduce(t, dBias.data(), dBias.data(), M, tcoll::sum_op{}, tcoll::ring{}, red);
      red.synchronize();
      const auto gotW = download_array(pool.tensor(0).data(), M * N, t.stream());
      const auto wantW = download_array(want.data(), M * N, t.stream());
      const auto gotB = download_array(pool.tensor(1).data(), M, t.stream());
      const auto wantB = download_array(dBias.data(), M, t.stream());
      CHECK(std::memcmp(gotW.data(), wantW.data(), M * N * sizeof(float)) == 0);
      CHECK(std::memcmp(gotB.data(), wantB.data(), M * sizeof(float)) == 0);
    });
  }
}
