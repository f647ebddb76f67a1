#pragma once
// Rank-level bodies of the hybrid suite (sufficient-factor allreduce), written once over any
// transport and GEMM policy. Expectations never come from the code under test: exact sums
// are computed here in 64-bit integers, dense references by this file's own loops and a
// dense tcoll::allreduce, rounding bounds by this file's own formula, identity across ranks
// by an allgather of hashes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <tcoll/hybrid.hpp>
#include <tcoll/plan.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/tcoll.hpp>

#include "../common/identical_on_ranks.hpp"
#include "device_only.hpp"

namespace hybrid_test {

using tcoll::hybrid::host_gemm;

/// TCOLL_TEST_LEVEL=quick (or a sanitizer build) runs fewer rank counts and shapes.
inline bool quick() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  const char* env = std::getenv("TCOLL_TEST_LEVEL");
  return env && std::string_view(env) == "quick";
#endif
}

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/// A layer's factors on one rank: u is K x M, v is K x N (row k = sample k).
template <class T>
struct factors {
  std::vector<T> u, v;
};

/// Rank r's factors of case `seed`: integer-valued in [-3, 3] (`integral`), else fractional
/// in (-1, 1) with many mantissa bits set. Every rank can build every rank's factors.
template <class T>
factors<T> make_factors(std::uint64_t seed, int r, std::size_t K, std::size_t M, std::size_t N,
                        bool integral) {
  auto value = [&](std::uint64_t which, std::size_t i) {
    const std::uint64_t h = mix(seed * 1000003ull + static_cast<std::uint64_t>(r) * 7919ull +
                                which * 104729ull + i * 2654435761ull);
    if (integral) return static_cast<T>(static_cast<int>(h % 7) - 3);
    return static_cast<T>((static_cast<double>(h % 2000003) - 1000001.0) / 1000003.0 + 1e-7);
  };
  factors<T> f;
  f.u.resize(K * M);
  f.v.resize(K * N);
  for (std::size_t i = 0; i < f.u.size(); ++i) f.u[i] = value(1, i);
  for (std::size_t i = 0; i < f.v.size(); ++i) f.v[i] = value(2, i);
  return f;
}

using tcoll_test::identical_on_all_ranks;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// gamma(n) = n u / (1 - n u), this file's own copy of the standard bound.
inline double gamma_n(double n, double u) {
  return n * u / (1.0 - n * u);
}

template <class T>
constexpr double unit_roundoff() {
  return std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
}

/// Random shape of case `seed` (the same on every rank).
struct shape {
  std::size_t K, M, N;
};
inline shape random_shape(std::uint64_t seed, std::size_t max_mn, std::size_t max_k) {
  std::mt19937_64 g(seed);
  return {1 + g() % max_k, 1 + g() % max_mn, 1 + g() % max_mn};
}

// ---------------------------------------------------------------------------------------
// Reconstruction against references.

/// Integer-valued factors: every element of the SFB sum (and of avg, for P a power of two)
/// equals the exact sum over all ranks' samples, computed here in 64-bit integers.
template <class T, class Gemm = host_gemm, class Tr>
void exact_case(Tr& t, std::uint64_t seed, shape s, bool average = false) {
  const int P = t.size(), r = t.rank();
  const auto mine = make_factors<T>(seed, r, s.K, s.M, s.N, true);
  std::vector<T> grad(s.M * s.N, T(-77));
  if (average)
    tcoll::hybrid::sfb_allreduce(t, mine.u.data(), mine.v.data(), s.K, s.M, s.N, grad.data(),
                                 tcoll::avg_op{}, Gemm{});
  else
    tcoll::hybrid::sfb_allreduce(t, mine.u.data(), mine.v.data(), s.K, s.M, s.N, grad.data(),
                                 tcoll::sum_op{}, Gemm{});
  std::vector<std::int64_t> exact(s.M * s.N, 0);
  for (int q = 0; q < P; ++q) {
    const auto f = make_factors<T>(seed, q, s.K, s.M, s.N, true);
    for (std::size_t k = 0; k < s.K; ++k)
      for (std::size_t i = 0; i < s.M; ++i)
        for (std::size_t j = 0; j < s.N; ++j)
          exact[i * s.N + j] += static_cast<std::int64_t>(f.u[k * s.M + i]) *
                                static_cast<std::int64_t>(f.v[k * s.N + j]);
  }
  std::size_t wrong = 0;
  for (std::size_t e = 0; e < exact.size(); ++e) {
    const double want = average ? static_cast<double>(exact[e]) / P : static_cast<double>(exact[e]);
    if (static_cast<double>(grad[e]) != want) ++wrong;
  }
  CHECK(wrong == 0);
}

/// Fractional factors: the result is bitwise identical on every rank, within gamma(PK) S of
/// the exact sum (long double), and within
/// (gamma(PK) + gamma(K+P-1)) S of a dense allreduce of per-rank gradients that this file
/// computes with its own loop; for avg the bound is (gamma(PK+1) + gamma(K+P)) S / P.
template <class T, class Gemm = host_gemm, class Tr>
void fractional_case(Tr& t, std::uint64_t seed, shape s, bool average = false) {
  const int P = t.size(), r = t.rank();
  const std::size_t MN = s.M * s.N;
  const auto mine = make_factors<T>(seed, r, s.K, s.M, s.N, false);
  std::vector<T> grad(MN, T(-77));
  if (average)
    tcoll::hybrid::sfb_allreduce(t, mine.u.data(), mine.v.data(), s.K, s.M, s.N, grad.data(),
                                 tcoll::avg_op{}, Gemm{});
  else
    tcoll::hybrid::sfb_allreduce(t, mine.u.data(), mine.v.data(), s.K, s.M, s.N, grad.data(),
                                 tcoll::sum_op{}, Gemm{});
  CHECK(identical_on_all_ranks(t, grad.data(), MN * sizeof(T)));

  // Dense path: this rank's K-term gradient, then a dense allreduce (sum or avg).
  std::vector<T> local(MN, T(0));
  for (std::size_t i = 0; i < s.M; ++i)
    for (std::size_t j = 0; j < s.N; ++j) {
      T acc = 0;
      for (std::size_t k = 0; k < s.K; ++k) acc += mine.u[k * s.M + i] * mine.v[k * s.N + j];
      local[i * s.N + j] = acc;
    }
  std::vector<T> dense(MN);
  if (average)
    tcoll::allreduce(t, local.data(), dense.data(), MN, tcoll::avg_op{});
  else
    tcoll::allreduce(t, local.data(), dense.data(), MN, tcoll::sum_op{});

  // Exact sums and magnitudes over every rank's samples, in long double.
  std::vector<long double> exact(MN, 0.0L), mag(MN, 0.0L);
  for (int q = 0; q < P; ++q) {
    const auto f = make_factors<T>(seed, q, s.K, s.M, s.N, false);
    for (std::size_t k = 0; k < s.K; ++k)
      for (std::size_t i = 0; i < s.M; ++i)
        for (std::size_t j = 0; j < s.N; ++j) {
          const long double p = static_cast<long double>(f.u[k * s.M + i]) * f.v[k * s.N + j];
          exact[i * s.N + j] += p;
          mag[i * s.N + j] += std::fabs(p);
        }
  }
  const double u = unit_roundoff<T>();
  const double n = static_cast<double>(P) * static_cast<double>(s.K);
  const double to_exact = average ? gamma_n(n + 1, u) / P : gamma_n(n, u);
  const double to_dense = average ? (gamma_n(n + 1, u) + gamma_n(s.K + P, u)) / P
                                  : gamma_n(n, u) + gamma_n(s.K + P - 1, u);
  // A slack of 1e-3 relative to the bound absorbs the long double reference's own error.
  std::size_t beyond_exact = 0, beyond_dense = 0;
  for (std::size_t e = 0; e < MN; ++e) {
    const long double want = average ? exact[e] / P : exact[e];
    const long double err_exact = std::fabs(static_cast<long double>(grad[e]) - want);
    const long double err_dense =
        std::fabs(static_cast<long double>(grad[e]) - static_cast<long double>(dense[e]));
    if (err_exact > to_exact * 1.001 * mag[e]) ++beyond_exact;
    if (err_dense > to_dense * 1.001 * mag[e]) ++beyond_dense;
  }
  CHECK(beyond_exact == 0);
  CHECK(beyond_dense == 0);
  // The library states the same bound.
  CHECK(tcoll::hybrid::sfb_reassociation_bound(s.K, P, u, average) ==
        doctest::Approx(to_dense).epsilon(1e-12));
}

// ---------------------------------------------------------------------------------------
// Device-only transports (NCCL's rule).

/// SFB over a transport that accepts only device memory, with a device reducer: every
/// message, the shape records included, must travel in the reducer's memory, and the result
/// must be the host path's, bit for bit (blocking and non-blocking). On the code that sent
/// the records from host memory, `device_only` throws at 2 or more ranks.
template <class T, class Tr>
void device_only_case(Tr& t, std::uint64_t seed, shape s) {
  const std::size_t MN = s.M * s.N;
  const auto mine = make_factors<T>(seed, t.rank(), s.K, s.M, s.N, false);
  std::vector<T> want(MN, T(-77));
  tcoll::hybrid::sfb_allreduce(t, mine.u.data(), mine.v.data(), s.K, s.M, s.N, want.data());

  pretend_device_reducer red;
  auto u = red.allocate<T>(s.K * s.M), v = red.allocate<T>(s.K * s.N);
  auto grad = red.allocate<T>(MN), grad2 = red.allocate<T>(MN);
  std::copy(mine.u.begin(), mine.u.end(), u.data());
  std::copy(mine.v.begin(), mine.v.end(), v.data());
  device_only<Tr> device(t);
  tcoll::hybrid::sfb_allreduce(device, u.data(), v.data(), s.K, s.M, s.N, grad.data(),
                               tcoll::sum_op{}, host_gemm{}, {}, red);
  CHECK(same_bits(std::vector<T>(grad.data(), grad.data() + MN), want));
  CHECK(*red.host_copies == 2); // this rank's record in, the gathered table out

  auto q = tcoll::hybrid::isfb_allreduce(device, u.data(), v.data(), s.K, s.M, s.N, grad2.data(),
                                         tcoll::sum_op{}, host_gemm{}, {}, red);
  q.wait();
  CHECK(same_bits(std::vector<T>(grad2.data(), grad2.data() + MN), want));

  // The decorator itself refuses host memory (so the checks above can fail).
  if (t.size() > 1) {
    const int peer = (t.rank() + 1) % t.size();
    std::vector<T> host(1);
    CHECK_THROWS_AS(device.isend(peer, host.data(), sizeof(T), 0), tcoll::invalid_argument);
    CHECK_THROWS_AS(device.irecv(peer, host.data(), sizeof(T), 0), tcoll::invalid_argument);
  }
}

// ---------------------------------------------------------------------------------------
// Non-blocking.

/// Poseidon's Algorithm 2 shape: one SFB job per FC layer, started from the last layer to
/// the first as if backward produced them, a dense iallreduce of each layer's bias in
/// between, all in flight together, waited in another order (and one polled with test()).
/// Every result must equal, bit for bit, the blocking call on the same inputs.
template <class T, class Gemm = host_gemm, class Tr>
void nonblocking_case(Tr& t, std::uint64_t seed) {
  const int r = t.rank();
  const shape shapes[] = {{3, 17, 9}, {1, 1, 1}, {8, 40, 33}, {5, 64, 2}, {2, 6, 71}};
  constexpr std::size_t L = std::size(shapes);
  std::vector<factors<T>> f;
  std::vector<std::vector<T>> grad(L), bias(L), bias_blocking(L);
  for (std::size_t l = 0; l < L; ++l) {
    f.push_back(make_factors<T>(seed + l, r, shapes[l].K, shapes[l].M, shapes[l].N, false));
    grad[l].assign(shapes[l].M * shapes[l].N, T(-1));
    bias[l].resize(shapes[l].M);
    for (std::size_t i = 0; i < shapes[l].M; ++i)
      bias[l][i] = static_cast<T>(0.1 + 0.37 * static_cast<double>(r) + 0.013 * i);
    bias_blocking[l] = bias[l];
  }
  using handle = tcoll::hybrid::sfb_request<T, tcoll::avg_op, Gemm, tcoll::cpu_reducer>;
  std::vector<handle> sfb(L);
  std::vector<tcoll::request> dense(L);
  for (std::size_t l = L; l-- > 0;) {
    const shape& s = shapes[l];
    sfb[l] = tcoll::hybrid::isfb_allreduce(t, f[l].u.data(), f[l].v.data(), s.K, s.M, s.N,
                                           grad[l].data(), tcoll::avg_op{}, Gemm{});
    dense[l] = tcoll::iallreduce(t, std::span<T>(bias[l]), tcoll::avg_op{});
  }
  // poll one, wait the others in forward order
  while (!sfb[2].test()) std::this_thread::yield();
  for (std::size_t l = 0; l < L; ++l) {
    sfb[l].wait();
    dense[l].wait();
  }
  for (std::size_t l = 0; l < L; ++l) {
    const shape& s = shapes[l];
    std::vector<T> blocking(s.M * s.N, T(-2));
    tcoll::hybrid::sfb_allreduce(t, f[l].u.data(), f[l].v.data(), s.K, s.M, s.N, blocking.data(),
                                 tcoll::avg_op{}, Gemm{});
    CHECK(same_bits(grad[l], blocking));
    CHECK(identical_on_all_ranks(t, grad[l].data(), grad[l].size() * sizeof(T)));
    tcoll::allreduce(t, std::span<T>(bias_blocking[l]), tcoll::avg_op{});
    CHECK(same_bits(bias[l], bias_blocking[l]));
  }
}

/// avg is the sum divided by P, once per element: checked against this file's own division
/// of the blocking sum.
template <class T, class Tr>
void average_is_sum_over_p_case(Tr& t, std::uint64_t seed, shape s) {
  const int P = t.size();
  const auto f = make_factors<T>(seed, t.rank(), s.K, s.M, s.N, false);
  std::vector<T> sum(s.M * s.N), avg(s.M * s.N);
  tcoll::hybrid::sfb_allreduce(t, f.u.data(), f.v.data(), s.K, s.M, s.N, sum.data());
  tcoll::hybrid::sfb_allreduce(t, f.u.data(), f.v.data(), s.K, s.M, s.N, avg.data(),
                               tcoll::avg_op{});
  for (T& x : sum) x = x / static_cast<T>(P);
  CHECK(same_bits(sum, avg));
}

// ---------------------------------------------------------------------------------------
// Bad input.

/// Runs `f` and returns the invalid_argument it throws (its what() and peer()); fails the
/// test if it throws nothing.
struct caught {
  std::string what;
  int peer = -2;
  bool thrown = false;
};
/// Exceptions caught from non-blocking calls were created on the engine thread and are
/// shared with it through std::exception_ptr, whose reference count lives in uninstrumented
/// libstdc++: if the engine thread dropped the last reference, ThreadSanitizer would report
/// the destructor as racing with our what(). Keeping a reference until exit (after every
/// engine thread has been joined) makes the destruction ordered for TSan too.
inline void keep_until_exit(std::exception_ptr e) {
  static std::mutex m;
  static std::vector<std::exception_ptr> kept;
  std::lock_guard lock(m);
  kept.push_back(std::move(e));
}
template <class F>
caught catch_invalid(F&& f) {
  caught c;
  try {
    f();
  } catch (const tcoll::invalid_argument& e) {
    keep_until_exit(std::current_exception());
    c = {e.what(), e.peer(), true};
  }
  CHECK(c.thrown);
  return c;
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// One rank passes a bad argument or a different shape: every rank throws
/// tcoll::invalid_argument naming that rank and the argument, blocking and non-blocking,
/// and the transport stays usable (a correct call afterwards gives the exact result).
template <class Tr>
void bad_input_case(Tr& t) {
  const int P = t.size(), r = t.rank();
  const int bad = P - 1;
  const shape s{2, 3, 4};
  const auto f = make_factors<float>(5, r, s.K, s.M, s.N, true);
  std::vector<float> grad(s.M * s.N);
  auto expect_named = [&](const caught& c, const std::string& what) {
    CAPTURE(c.what);
    CHECK(contains(c.what, "sfb_allreduce: rank " + std::to_string(bad)));
    CHECK(contains(c.what, what));
    CHECK(c.peer == (r == bad ? -1 : bad));
  };
  auto sfb = [&](const float* u, const float* v, std::size_t K, std::size_t M, std::size_t N,
                 float* g) { tcoll::hybrid::sfb_allreduce(t, u, v, K, M, N, g); };
  auto isfb = [&](const float* u, const float* v, std::size_t K, std::size_t M, std::size_t N,
                  float* g) {
    auto q = tcoll::hybrid::isfb_allreduce(t, u, v, K, M, N, g);
    q.wait();
  };
  const bool me = r == bad;
  for (int nb = 0; nb < 2; ++nb) {
    auto call = [&](auto&&... a) { nb ? isfb(a...) : sfb(a...); };
    expect_named(
        catch_invalid([&] { call(f.u.data(), f.v.data(), me ? 0 : s.K, s.M, s.N, grad.data()); }),
        "K (samples per rank) is 0");
    expect_named(catch_invalid([&] {
                   call(me ? nullptr : f.u.data(), f.v.data(), s.K, s.M, s.N, grad.data());
                 }),
                 "u is null but K x M = 2 x 3 elements");
    expect_named(catch_invalid([&] {
                   call(f.u.data(), me ? nullptr : f.v.data(), s.K, s.M, s.N, grad.data());
                 }),
                 "v is null");
    expect_named(catch_invalid([&] {
                   call(f.u.data(), f.v.data(), s.K, s.M, s.N, me ? nullptr : grad.data());
                 }),
                 "grad is null but M x N = 3 x 4 elements");
    expect_named(
        catch_invalid([&] { call(f.u.data(), f.v.data(), s.K, me ? 0 : s.M, s.N, grad.data()); }),
        "M (rows of the gradient, length of u) is 0");
    expect_named(
        catch_invalid([&] { call(f.u.data(), f.v.data(), s.K, s.M, me ? 0 : s.N, grad.data()); }),
        "N (columns of the gradient, length of v) is 0");
    expect_named(catch_invalid([&] {
                   call(f.u.data(), f.v.data(), s.K, me ? std::size_t(1) << 62 : s.M, s.N,
                        grad.data());
                 }),
                 "overflows the address space");
    if (P > 1) {
      // shape mismatches: the rank that differs from rank 0 is named
      expect_named(catch_invalid([&] {
                     call(f.u.data(), f.v.data(), s.K, me ? s.M - 1 : s.M, s.N, grad.data());
                   }),
                   "has factor shapes K = 2, M = 2, N = 4 but rank 0 has K = 2, M = 3, N = 4");
      expect_named(
          catch_invalid([&] { call(f.u.data(), f.v.data(), me ? 1 : s.K, s.M, s.N, grad.data()); }),
          "K = 1, M = 3, N = 4 but rank 0 has K = 2");
    }
  }
  // The errors left the transport usable: a correct call gives the exact sum.
  exact_case<float>(t, 11, s);
}

// ---------------------------------------------------------------------------------------
// The hybrid scheduler (Poseidon's Algorithm 2 over a gradient pool).

/// The body of `scheduler_case`: the scheduler runs on `comm`, the references on `t`.
template <class T, class Red, class Comm, class Tr, class Algo>
void scheduler_case_on(Comm& comm, Tr& t, std::uint64_t seed, bool fuse_dense, int order,
                       const Algo& algo, const std::vector<std::size_t>& bucket_ends,
                       std::size_t want_jobs) {
  using tcoll::hybrid::scheme;
  const int r = t.rank();
  const std::size_t K = 5;
  struct tensor_shape {
    scheme how;
    std::size_t rows, cols;
  };
  const std::vector<tensor_shape> shapes{
      {scheme::sfb, 12, 7}, {scheme::dense, 12, 1}, {scheme::dense, 7, 9}, {scheme::dense, 7, 1},
      {scheme::sfb, 9, 30}, {scheme::dense, 9, 1},  {scheme::dense, 1, 37}};
  const std::size_t L = shapes.size();
  std::vector<std::size_t> sizes;
  tcoll::hybrid::hybrid_plan plan;
  plan.batch = K;
  for (const auto& s : shapes) {
    sizes.push_back(s.rows * s.cols);
    plan.tensors.push_back(
        {s.how, s.how == scheme::sfb ? s.rows : 0, s.how == scheme::sfb ? s.cols : 0});
  }
  tcoll::gradient_pool<T, Red> pool(sizes);
  tcoll::hybrid::hybrid_scheduler_options options;
  options.fuse_dense = fuse_dense;
  options.dense_buckets.ends = bucket_ends;
  tcoll::hybrid::hybrid_scheduler<Comm, T, tcoll::avg_op, Algo, host_gemm, Red> sched(
      pool, comm, plan, {}, algo, {}, options);
  CHECK(sched.job_count() == want_jobs);
  for (int it = 0; it < 3; ++it) {
    const std::uint64_t s0 = seed + 97 * static_cast<std::uint64_t>(it);
    // a full shard and a short one alternate, so stale rows of the last iteration would show
    const std::size_t samples = K - static_cast<std::size_t>((r + it) % 2);
    std::vector<factors<T>> f(L);
    std::vector<std::vector<T>> local(L);
    for (std::size_t i = 0; i < L; ++i) {
      if (shapes[i].how == scheme::sfb) {
        f[i] = make_factors<T>(s0 + i, r, samples, shapes[i].rows, shapes[i].cols, false);
      } else {
        const auto d = make_factors<T>(s0 + i, r, 1, sizes[i], 1, false);
        local[i] = d.u;
      }
    }
    // What backward leaves in the pool: dense gradients, and junk in SFB tensors (a model
    // that computes the dense weight gradient anyway), which the reconstruction overwrites.
    for (std::size_t i = 0; i < L; ++i) {
      auto dst = pool.tensor(i);
      if (shapes[i].how == scheme::sfb)
        std::fill(dst.begin(), dst.end(), T(1234.5));
      else
        std::copy(local[i].begin(), local[i].end(), dst.begin());
    }
    std::vector<std::size_t> marks(L);
    for (std::size_t i = 0; i < L; ++i) marks[i] = i;
    if (order == 1) std::reverse(marks.begin(), marks.end());
    if (order == 2) marks = {1, 0, 3, 2, 5, 4, 6};
    std::thread backward([&] {
      for (std::size_t i : marks) {
        if (shapes[i].how == scheme::sfb)
          sched.mark_factors_ready(i, f[i].u.data(), f[i].v.data(), samples);
        else
          sched.mark_ready(i);
      }
    });
    backward.join();
    const auto& timing = sched.finish();
    CHECK(timing.jobs.size() == sched.job_count());
    // references by blocking calls, job by job
    for (std::size_t i = 0; i < L;) {
      if (shapes[i].how == scheme::sfb) {
        std::vector<T> u(K * shapes[i].rows, T(0)), v(K * shapes[i].cols, T(0));
        std::copy(f[i].u.begin(), f[i].u.end(), u.begin());
        std::copy(f[i].v.begin(), f[i].v.end(), v.begin());
        std::vector<T> want(sizes[i], T(-3));
        tcoll::hybrid::sfb_allreduce(t, u.data(), v.data(), K, shapes[i].rows, shapes[i].cols,
                                     want.data(), tcoll::avg_op{});
        auto got = pool.tensor(i);
        CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)) == 0);
        ++i;
        continue;
      }
      std::size_t end = i + 1;
      if (fuse_dense)
        while (end < L && shapes[end].how == scheme::dense) ++end;
      if (!bucket_ends.empty()) { // dense tensors fuse up to the end of i's bucket
        std::size_t b = 0;
        while (bucket_ends[b] <= i) ++b;
        while (end < bucket_ends[b] && shapes[end].how == scheme::dense) ++end;
      }
      std::vector<T> want;
      for (std::size_t k = i; k < end; ++k)
        want.insert(want.end(), local[k].begin(), local[k].end());
      tcoll::allreduce(t, std::span<T>(want), tcoll::avg_op{}, algo);
      std::size_t at = 0;
      for (std::size_t k = i; k < end; ++k) {
        auto got = pool.tensor(k);
        CHECK(std::memcmp(got.data(), want.data() + at, got.size() * sizeof(T)) == 0);
        at += got.size();
      }
      i = end;
    }
    CHECK(identical_on_all_ranks(t, pool.data(), pool.size() * sizeof(T)));
  }
}

/// A three-layer model's pool in backward order: W2 (SFB), b2, W1 (dense), b1, W0 (SFB),
/// b0, W(-1) a dense weight of odd size; K = 5 rows per rank, rank r passing 5 - (r + it) % 2
/// samples in iteration it (a short shard, padded with zero rows). Backward runs on its own thread
/// and marks in `order` (0: backward order, 1: reversed, 2: interleaved), while this thread waits
/// in `finish()`. The pool must equal, bit for bit, what blocking calls on the same data give:
/// `sfb_allreduce(avg)` of the padded factors per SFB tensor, and `allreduce(avg, algo)` per
/// dense job (one per tensor, or per run of consecutive dense tensors with `fuse_dense`),
/// and be identical on every rank. Three iterations, so the scheduler is reused.
/// `Red = pretend_device_reducer` puts the pool in pretend device memory and runs the
/// scheduler over `device_only<Tr>` (NCCL's rule); the references stay on `t`.
template <class T, class Algo = tcoll::ring, class Red = tcoll::cpu_reducer, class Tr>
void scheduler_case(Tr& t, std::uint64_t seed, bool fuse_dense, int order, const Algo& algo = {}) {
  const std::size_t want_jobs = fuse_dense ? 4 : 7; // fused: W2 | b2 W1 b1 | W0 | b0 W-1
  if constexpr (std::is_same_v<Red, tcoll::cpu_reducer>) {
    scheduler_case_on<T, Red>(t, t, seed, fuse_dense, order, algo, {}, want_jobs);
  } else {
    device_only<Tr> device(t);
    scheduler_case_on<T, Red>(device, t, seed, fuse_dense, order, algo, {}, want_jobs);
  }
}

/// The same with a fusion planner's buckets (`dense_buckets`) over the 7 tensors
/// S d d d S d d: ends {2, 4, 7} make the jobs W2 | b2 | W1 b1 | W0 | b0 W-1 (5; the first
/// bucket's SFB tensor splits it); ends {7}, one bucket, fuse like `fuse_dense` (4); ends
/// {1, ..., 7} are one job per tensor (7).
template <class T, class Algo = tcoll::ring, class Tr>
void scheduler_buckets_case(Tr& t, std::uint64_t seed, int order, const Algo& algo = {}) {
  scheduler_case_on<T, tcoll::cpu_reducer>(t, t, seed, false, order, algo, {2, 4, 7}, 5);
  scheduler_case_on<T, tcoll::cpu_reducer>(t, t, seed + 1, false, order, algo, {7}, 4);
  scheduler_case_on<T, tcoll::cpu_reducer>(t, t, seed + 2, false, order, algo,
                                           {1, 2, 3, 4, 5, 6, 7}, 7);
}

/// Autotune: the 7-tensor model of `scheduler_case` with `autotune_iterations = 2` and
/// `planner`; 4 iterations. From the third on the jobs follow the re-plan: rank 0's, agreed
/// by every rank (`single`: one bucket, so the fused runs, 4 jobs, worked out by hand;
/// `want_jobs_after` 0: not checked, for planners that follow the measurements). Every
/// iteration's pool must equal the blocking calls over the jobs that ran (the partition
/// `finish()` reports), bit for bit, identical on every rank.
template <class T, class Tr, class Planner>
void scheduler_autotune_case(Tr& t, std::uint64_t seed, const Planner& planner,
                             std::size_t want_jobs_after) {
  using tcoll::hybrid::scheme;
  const int r = t.rank();
  const std::size_t K = 3;
  const std::vector<std::pair<std::size_t, std::size_t>> sfb_shape{{12, 7}, {0, 0}, {0, 0}, {0, 0},
                                                                   {9, 30}, {0, 0}, {0, 0}};
  const std::vector<std::size_t> sizes{84, 12, 63, 7, 270, 9, 37};
  const std::size_t L = sizes.size();
  tcoll::hybrid::hybrid_plan plan;
  plan.batch = K;
  for (const auto& [rows, cols] : sfb_shape)
    plan.tensors.push_back({rows ? scheme::sfb : scheme::dense, rows, cols});
  tcoll::gradient_pool<T> pool(sizes);
  tcoll::hybrid::hybrid_scheduler_options options;
  options.autotune_iterations = 2;
  options.autotune_replan = tcoll::plan::replan_with(planner);
  tcoll::hybrid::hybrid_scheduler<Tr, T, tcoll::sum_op, tcoll::ring> sched(pool, t, plan, {}, {},
                                                                           {}, options);
  CHECK(sched.job_count() == L); // no buckets yet: a job per tensor
  for (int it = 0; it < 4; ++it) {
    const std::uint64_t s0 = seed + 31 * static_cast<std::uint64_t>(it);
    std::vector<factors<T>> f(L);
    std::vector<std::vector<T>> local(L);
    for (std::size_t i = 0; i < L; ++i) {
      if (sfb_shape[i].first) {
        f[i] = make_factors<T>(s0 + i, r, K, sfb_shape[i].first, sfb_shape[i].second, false);
      } else {
        local[i] = make_factors<T>(s0 + i, r, 1, sizes[i], 1, false).u;
        std::copy(local[i].begin(), local[i].end(), pool.tensor(i).begin());
      }
    }
    for (std::size_t i = 0; i < L; ++i) {
      if (sfb_shape[i].first)
        sched.mark_factors_ready(i, f[i].u.data(), f[i].v.data(), K);
      else
        sched.mark_ready(i);
    }
    const auto& timing = sched.finish();
    CAPTURE(it);
    CHECK(sched.autotuned() == (it >= 1));
    CHECK(sched.fitted_cost().has_value() == (it >= 1));
    if (it >= 2 && want_jobs_after) CHECK(timing.jobs.size() == want_jobs_after);
    std::size_t covered = 0;
    for (const auto& job : timing.jobs) {
      REQUIRE(job.first_tensor == covered);
      covered = job.end_tensor;
      const std::size_t i = job.first_tensor;
      if (job.how == scheme::sfb) {
        REQUIRE(job.end_tensor == i + 1);
        std::vector<T> want(sizes[i]);
        tcoll::hybrid::sfb_allreduce(t, f[i].u.data(), f[i].v.data(), K, sfb_shape[i].first,
                                     sfb_shape[i].second, want.data());
        CHECK(std::memcmp(pool.tensor(i).data(), want.data(), want.size() * sizeof(T)) == 0);
        continue;
      }
      std::vector<T> want;
      for (std::size_t k = i; k < job.end_tensor; ++k) {
        REQUIRE(!sfb_shape[k].first); // a dense job never spans an SFB tensor
        want.insert(want.end(), local[k].begin(), local[k].end());
      }
      tcoll::allreduce(t, std::span<T>(want), tcoll::sum_op{}, tcoll::ring{});
      CHECK(std::memcmp(pool.tensor(i).data(), want.data(), want.size() * sizeof(T)) == 0);
    }
    CHECK(covered == L);
    CHECK(identical_on_all_ranks(t, pool.data(), pool.size() * sizeof(T)));
  }
}

/// Bad use of the hybrid scheduler: a plan that does not fit the pool, the wrong mark for a
/// tensor's scheme, a double mark, more samples than K; every error names the tensor. Then a
/// rank (`early`) that calls `finish()` before marking its last tensor gets invalid_argument
/// naming it, and the others fail (no hang) within the transport timeout.
template <class Tr>
void scheduler_bad_use_case(Tr& t) {
  using tcoll::hybrid::scheme;
  const std::vector<std::size_t> sizes{6, 3};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::hybrid::hybrid_plan plan{2, {{scheme::sfb, 3, 2}, {scheme::dense, 0, 0}}};
  {
    auto wrong = plan;
    wrong.tensors[0].cols = 3;
    const auto c =
        catch_invalid([&] { tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, wrong); });
    CHECK(contains(c.what, "tensor 0 is planned SFB 3 x 3 but the pool's tensor holds 6"));
    auto topk = plan; // a scheme of the registry that a hybrid plan does not run
    topk.tensors[1].how = tcoll::compression_scheme::topk;
    CHECK(contains(
        catch_invalid([&] { tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, topk); }).what,
        "tensor 1 is planned topk; a hybrid plan sends a tensor dense or sfb"));
    auto short_plan = plan;
    short_plan.tensors.pop_back();
    CHECK(contains(catch_invalid([&] {
                     tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, short_plan);
                   }).what,
                   "the plan has 1 tensors but the pool holds 2"));
    tcoll::hybrid::hybrid_scheduler_options buckets;
    buckets.dense_buckets.ends = {1}; // the pool has 2 tensors
    CHECK(contains(catch_invalid([&] {
                     tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, plan, {}, {}, {},
                                                                  buckets);
                   }).what,
                   "dense_buckets does not partition the pool's 2 tensors"));
    tcoll::hybrid::hybrid_scheduler_options tune;
    tune.autotune_iterations = 1;
    tune.fuse_dense = true;
    CHECK(contains(catch_invalid([&] {
                     tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, plan, {}, {}, {}, tune);
                   }).what,
                   "autotune_iterations re-plans the dense buckets and excludes"));
    buckets.dense_buckets.ends = {1, 2};
    buckets.fuse_dense = true;
    CHECK(contains(catch_invalid([&] {
                     tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, plan, {}, {}, {},
                                                                  buckets);
                   }).what,
                   "fuse_dense and options.dense_buckets both set"));
  }
  tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, plan);
  const std::vector<float> u(6, 1.0f), v(4, 1.0f);
  CHECK(contains(catch_invalid([&] { s.mark_ready(0); }).what,
                 "tensor 0 is planned sfb; call mark_factors_ready"));
  CHECK(contains(catch_invalid([&] { s.mark_factors_ready(1, u.data(), v.data(), 1); }).what,
                 "tensor 1 is planned dense; call mark_ready"));
  CHECK(contains(catch_invalid([&] { s.mark_factors_ready(0, u.data(), v.data(), 3); }).what,
                 "samples = 3 for tensor 0 exceeds the plan's batch K = 2"));
  CHECK(contains(catch_invalid([&] { s.mark_ready(2); }).what, "tensor 2 is out of range"));
  s.mark_factors_ready(0, u.data(), v.data(), 2);
  CHECK(contains(catch_invalid([&] { s.mark_factors_ready(0, u.data(), v.data(), 2); }).what,
                 "tensor 0 was already marked"));
  s.mark_ready(1);
  s.finish();
  // u = ones (2 x 3), v = ones (2 x 2) on every rank: every element is 2 P
  for (float x : pool.tensor(0)) CHECK(x == 2.0f * static_cast<float>(t.size()));
  if (t.size() < 2) return;
  const int early = t.size() - 1;
  const auto start = tcoll::clock::now();
  s.mark_factors_ready(0, u.data(), v.data(), 2);
  if (t.rank() == early) {
    try {
      s.finish();
      FAIL_CHECK("finish() with an unmarked tensor did not throw");
    } catch (const tcoll::invalid_argument& e) {
      keep_until_exit(std::current_exception());
      CHECK(contains(e.what(), "tensor 1 was never marked ready"));
    } catch (const tcoll::error& e) {
      keep_until_exit(std::current_exception()); // a peer's failure surfaced first
    }
  } else {
    s.mark_ready(1);
    CHECK_THROWS_AS(s.finish(), tcoll::error);
  }
  CHECK(tcoll::clock::now() - start < t.timeout() * 2 + std::chrono::seconds(1));
}

/// A transport broken before the jobs start: the marking calls return normally and
/// `finish()` throws the cause (never a success with jobs left unreduced).
template <class Tr>
void broken_transport_case(Tr& t) {
  using tcoll::hybrid::scheme;
  const std::vector<std::size_t> sizes{6, 3};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::hybrid::hybrid_plan plan{2, {{scheme::sfb, 3, 2}, {scheme::dense, 0, 0}}};
  tcoll::hybrid::hybrid_scheduler<Tr, float> s(pool, t, plan);
  for (auto& x : pool.all()) x = 0.25f;
  // broken on this rank only (no abort, which would reach peers still constructing)
  tcoll::collective_context* context = tcoll::detail::context_of(t);
  REQUIRE(context != nullptr);
  context->fail(
      std::make_exception_ptr(tcoll::aborted_error("broken on purpose by the test", t.rank())));
  const std::vector<float> u(6, 1.0f), v(4, 1.0f);
  for (int iteration = 0; iteration < 2; ++iteration) {
    CHECK_NOTHROW(s.mark_factors_ready(0, u.data(), v.data(), 2));
    CHECK_NOTHROW(s.mark_ready(1));
    CHECK_THROWS_WITH_AS(s.finish(), doctest::Contains("broken on purpose by the test"),
                         tcoll::aborted_error);
  }
  for (float x : pool.tensor(1)) CHECK(x == 0.25f);
}

/// `make_hybrid_plan` follows `best_schemes` tensor by tensor and keeps the FC shapes.
inline void make_plan_case() {
  using tcoll::hybrid::layer;
  const layer layers[] = {layer::fc(4096, 4096), layer::dense(4096), layer::fc(10, 20),
                          layer::dense(10)};
  tcoll::hybrid::sfb_costs costs;
  costs.machine.inter = {20.0, 8.0 / 1e3}; // 1 Gbit/s, 20 us
  const auto plan = tcoll::hybrid::make_hybrid_plan(layers, 8, 32, costs);
  const auto want = tcoll::hybrid::best_schemes(layers, 8, 32, costs);
  REQUIRE(plan.tensors.size() == 4);
  CHECK(plan.batch == 32);
  for (std::size_t i = 0; i < 4; ++i) CHECK(plan.tensors[i].how == want[i]);
  CHECK(plan.tensors[0].how == tcoll::hybrid::scheme::sfb); // 4096 x 4096 at K = 32: SFB
  CHECK(plan.tensors[0].rows == 4096);
  CHECK(plan.tensors[0].cols == 4096);
  CHECK(plan.tensors[1].how == tcoll::hybrid::scheme::dense);
}

} // namespace hybrid_test
