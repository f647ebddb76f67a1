// The sparse-chunk adaptor on device memory (suite 'gpu'): cuda_chunk_ops against
// host_chunk_ops on the same data, csc_allreduce end to end on device_team with the cuda
// reducer and cuda_chunk_ops, and the device-pointer check of the host policies.
//
// Expectations never come from the code under test: host_chunk_ops on the same inputs (the
// element-wise members must match bit for bit; the norms, summed in another order, within a
// stated tolerance), and a host simulation of Algorithm 1 written here with plain loops (the
// residual and the unsent chunks are exact float arithmetic, the reduced chunks a double
// sum over the ranks within a tolerance).
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tcoll/detail/memory_kind.hpp>
#include <tcoll/reduce/cuda.cuh>
#include <tcoll/sparse.hpp>
#include <tcoll/sparse/cuda_chunk_ops.cuh>
#include <tcoll/transport/device_team.hpp>

#include "device_buffers.hpp"

namespace sp = tcoll::sparse;
using tcoll::testing::gpu_timeout;

namespace {

/// Fractional input of rank r, iteration s, element i (sums round differently in different
/// orders; odd ranks negative, so sums cancel).
float sparse_fractional(int r, int s, std::size_t i) {
  const std::uint32_t h =
      static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(r * 40503 + s * 977);
  return 0.1f + static_cast<float>(h % 100003) / 7919.0f * (r % 2 ? -1.0f : 1.0f) + 0.01f * r;
}

template <class T>
std::vector<T> values(std::size_t n, int seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(sparse_fractional(seed, seed + 1, i));
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void sync(cudaStream_t s) {
  tcoll::detail::cuda::synchronize(s, tcoll::clock::now() + gpu_timeout, "test synchronize");
}

/// Device copy of `h` (stream-ordered allocation on `s`).
template <class T>
tcoll::device_buffer<T> upload(const std::vector<T>& h, cudaStream_t s) {
  tcoll::device_buffer<T> d(h.size(), s);
  if (!h.empty())
    tcoll::detail::cuda::check(
        cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyDefault, s), "upload");
  sync(s);
  return d;
}
template <class T>
void upload_to(T* d, const std::vector<T>& h, cudaStream_t s) {
  if (!h.empty())
    tcoll::detail::cuda::check(
        cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyDefault, s), "upload");
  sync(s);
}
template <class T>
std::vector<T> download(const T* d, std::size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  if (n)
    tcoll::detail::cuda::check(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDefault, s),
                               "download");
  sync(s);
  return h;
}

/// A non-blocking stream for the duration of a test.
struct stream_holder {
  cudaStream_t s = nullptr;
  stream_holder() {
    tcoll::detail::cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                               "cudaStreamCreateWithFlags");
  }
  ~stream_holder() {
    if (!s) return;
    try {
      sync(s); // buffers freed in order on it
    } catch (...) {
    }
    (void)cudaStreamDestroy(s);
  }
};

/// Relative tolerance of the device norms against the host's: both sum the same doubles
/// exactly rounded in different orders (relative error ~1e-16 for these non-negative
/// terms), then round to float, which may land one float apart (2^-23 relative).
constexpr double norm_rel_tol = 1e-6;

/// gather of `T` to `Wire` at `scale` and scatter back: device against host, bit for bit.
template <class Wire, class T>
void gather_scatter_case(const std::vector<T>& src, float scale, cudaStream_t s,
                         const sp::cuda_chunk_ops& dev) {
  CAPTURE(scale);
  const sp::host_chunk_ops host;
  const std::size_t n = src.size();
  std::vector<Wire> want(n);
  host.gather(want.data(), src.data(), n, scale);
  auto d_src = upload(src, s);
  tcoll::device_buffer<Wire> d_wire(n, s);
  // an interior range too: pointers off the 16-byte grid
  dev.gather(d_wire.data(), d_src.data(), n, scale);
  const auto got = download(d_wire.data(), n, s);
  CHECK(same_bits(got, want));
  std::vector<T> back(n), back_host(n);
  host.scatter(back_host.data(), want.data(), n, 1.0f / scale);
  tcoll::device_buffer<T> d_back(n, s);
  dev.scatter(d_back.data(), d_wire.data(), n, 1.0f / scale);
  back = download(d_back.data(), n, s);
  CHECK(same_bits(back, back_host));
  // odd offsets and lengths
  if (n > 8) {
    std::vector<Wire> part(n - 5);
    host.gather(part.data(), src.data() + 3, n - 5, scale);
    dev.gather(d_wire.data() + 1, d_src.data() + 3, n - 5, scale);
    auto g = download(d_wire.data() + 1, n - 5, s);
    CHECK(same_bits(g, part));
  }
}

/// Every member of cuda_chunk_ops against host_chunk_ops for pool type T.
template <class T>
void ops_case(const char* name) {
  CAPTURE(name);
  stream_holder st;
  const cudaStream_t s = st.s;
  sp::cuda_chunk_ops dev;
  dev.stream = s;
  dev.timeout = gpu_timeout;
  const sp::host_chunk_ops host;
  const std::size_t n = 10007;
  const sp::chunk_layout L{n, 257}; // 39 chunks, the last one short (240 elements)

  // accumulate_residual, important and not, momentum-scaled and error feedback
  for (bool important : {false, true})
    for (double factor : {0.9, 1.0}) {
      CAPTURE(important);
      CAPTURE(factor);
      auto g = values<T>(n, 1), r = values<T>(n, 2);
      auto d_g = upload(g, s), d_r = upload(r, s);
      host.accumulate_residual(g.data(), r.data(), n, important, factor);
      dev.accumulate_residual(d_g.data(), d_r.data(), n, important, factor);
      CHECK(same_bits(download(d_g.data(), n, s), g));
      CHECK(same_bits(download(d_r.data(), n, s), r));
    }

  // gather / scatter with the pool's own type, scaled and not
  const auto src = values<T>(n, 3);
  gather_scatter_case<T>(src, 1.0f, s, dev);
  gather_scatter_case<T>(src, 0.5f, s, dev);

  // momentum update, both signs
  for (bool descent : {true, false}) {
    CAPTURE(descent);
    auto w = values<T>(n, 4), u = values<T>(n, 5);
    const auto g = values<T>(n, 6);
    auto d_w = upload(w, s), d_u = upload(u, s), d_g = upload(g, s);
    host.momentum_update(w.data(), u.data(), g.data(), n, 0.0123, 0.9, descent);
    dev.momentum_update(d_w.data(), d_u.data(), d_g.data(), n, 0.0123, 0.9, descent);
    CHECK(same_bits(download(d_w.data(), n, s), w));
    CHECK(same_bits(download(d_u.data(), n, s), u));
  }

  // chunk norms: against the host within norm_rel_tol; bit-identical on a second run and on
  // a copy of the pool at another address
  const auto pool = values<T>(n, 7);
  std::vector<unsigned char> mask(L.count());
  for (std::size_t c = 0; c < mask.size(); ++c) mask[c] = (c * 7 + 3) % 5 < 2;
  std::vector<float> want(L.count());
  host.chunk_norms(pool.data(), L, mask.data(), 3.0, 2.0, want.data());
  auto d_pool = upload(pool, s);
  tcoll::device_buffer<float> d_norms(L.count(), s);
  dev.chunk_norms(d_pool.data(), L, mask.data(), 3.0, 2.0, d_norms.data());
  std::vector<float> got(L.count());
  dev.download(got.data(), d_norms.data(), got.size());
  for (std::size_t c = 0; c < L.count(); ++c) {
    CAPTURE(c);
    CHECK(std::fabs(double(got[c]) - double(want[c])) <= norm_rel_tol * std::fabs(double(want[c])));
  }
  dev.chunk_norms(d_pool.data(), L, mask.data(), 3.0, 2.0, d_norms.data());
  std::vector<float> again(L.count());
  dev.download(again.data(), d_norms.data(), again.size());
  CHECK(same_bits(again, got));
  tcoll::device_buffer<T> other(n + 3, s);
  dev.upload(other.data() + 3, pool.data(), n);
  dev.chunk_norms(other.data() + 3, L, mask.data(), 3.0, 2.0, d_norms.data());
  dev.download(again.data(), d_norms.data(), again.size());
  CHECK(same_bits(again, got));

  // upload / download round trip
  std::vector<T> round(n);
  tcoll::device_buffer<T> d_round(n, s);
  dev.upload(d_round.data(), pool.data(), n);
  dev.download(round.data(), d_round.data(), n);
  CHECK(same_bits(round, pool));
  dev.synchronize();
}

/// What one rank saw after one finish().
struct rank_record {
  std::vector<float> pool, residual, norms;
  std::vector<unsigned char> used, next; // last_important(), important()
};

/// Host simulation of Algorithm 1 on the recorded masks, compared with the device records.
/// `wire_tol`: relative tolerance of a reduced element against the double sum over ranks
/// (relative to the sum of the magnitudes).
void check_against_simulation(const std::vector<std::vector<rank_record>>& rec, int P,
                              const std::vector<std::size_t>& sizes, const sp::csc_options& o,
                              int iterations, double wire_tol) {
  std::size_t n = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  const sp::chunk_layout L{n, o.chunk_elements};
  const std::size_t C = L.count();
  std::vector<std::vector<float>> res(P, std::vector<float>(n, 0.0f)), g(P, std::vector<float>(n));
  const float f = o.residual == sp::residual_rule::momentum_scaled ? static_cast<float>(o.momentum)
                                                                   : 1.0f; // error feedback
  for (int it = 0; it < iterations; ++it) {
    CAPTURE(it);
    const auto& mask = rec[0][it].used;
    REQUIRE(mask.size() == C);
    if (it > 0) CHECK(mask == rec[0][it - 1].next); // the selection of the previous finish
    for (int r = 0; r < P; ++r) {
      CAPTURE(r);
      // every rank ran the same masks and holds the same norms
      CHECK(rec[r][it].used == mask);
      CHECK(rec[r][it].next == rec[0][it].next);
      CHECK(same_bits(rec[r][it].norms, rec[0][it].norms));
      for (std::size_t i = 0; i < n; ++i) {
        const float x = sparse_fractional(r, it, i);
        g[r][i] = x + res[r][i];
        res[r][i] = mask[L.chunk_of(i)] ? 0.0f : f * g[r][i];
      }
      // the residual is exact float arithmetic
      CHECK(same_bits(rec[r][it].residual, res[r]));
    }
    std::vector<double> want_norm(C, 0.0);
    std::size_t bad_local = 0, bad_reduced = 0, bad_identity = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t c = L.chunk_of(i);
      if (mask[c]) {
        double sum = 0.0, mag = 0.0;
        for (int r = 0; r < P; ++r) {
          sum += g[r][i];
          mag += std::fabs(g[r][i]);
        }
        const float v = rec[0][it].pool[i];
        if (std::fabs(double(v) - sum) > wire_tol * mag + 1e-6) ++bad_reduced;
        for (int r = 1; r < P; ++r)
          if (std::memcmp(&rec[r][it].pool[i], &v, sizeof(float)) != 0) ++bad_identity;
        want_norm[c] += std::fabs(double(v)); // P ranks, each |v| / P
      } else {
        for (int r = 0; r < P; ++r) {
          if (std::memcmp(&rec[r][it].pool[i], &g[r][i], sizeof(float)) != 0) ++bad_local;
          want_norm[c] += std::fabs(double(g[r][i]));
        }
      }
    }
    CHECK_MESSAGE(bad_identity == 0, "important elements that differ between ranks");
    CHECK_MESSAGE(bad_reduced == 0, "important elements off the reference sum");
    CHECK_MESSAGE(bad_local == 0, "unimportant elements that are not the rank's own gradient");
    // the next mask: the adaptor's count, the top chunks of the exchanged norms, and norms
    // near the reference ones
    const double next_density = sp::warmup_density(o.density, o.warmup_iterations, it + 1);
    const std::size_t k = sp::chunks_kept(next_density, C);
    const auto& next = rec[0][it].next;
    CHECK(static_cast<std::size_t>(std::count(next.begin(), next.end(), 1)) == k);
    const auto& norms = rec[0][it].norms;
    if (k == 0 || k == C) {
      CHECK(std::all_of(norms.begin(), norms.end(), [](float x) { return x == 0.0f; }));
    } else {
      CHECK(sp::select_top_chunks(norms, k) == next);
      for (std::size_t c = 0; c < C; ++c) {
        CAPTURE(c);
        CHECK(std::fabs(norms[c] - want_norm[c]) <= 1e-4 * want_norm[c] + 1e-6);
      }
    }
  }
}

/// csc_allreduce on device_team: P ranks, `iterations` iterations with warm-up, Wire on the
/// wire, every record checked against the host simulation; the momentum step of the last
/// iteration against host_chunk_ops on the downloaded pool.
template <class Wire>
void end_to_end_case(int P, sp::csc_options o, int iterations, double wire_tol) {
  CAPTURE(P);
  const std::vector<std::size_t> sizes{301, 0, 1000, 77, 2048, 513};
  const std::size_t n = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  std::vector<std::vector<rank_record>> rec(P, std::vector<rank_record>(iterations));
  std::vector<std::vector<float>> w_dev(P), u_dev(P), w_host(P), u_host(P);
  tcoll::device_team(P, gpu_timeout).run([&](tcoll::device_transport& t) {
    const int r = t.rank();
    const cudaStream_t s = t.stream();
    tcoll::gradient_pool<float, tcoll::cuda_reducer> pool(sizes, {}, tcoll::cuda_reducer{s});
    using adaptor = sp::csc_allreduce<tcoll::device_transport, float, tcoll::sum_op, tcoll::ring,
                                      tcoll::cuda_reducer, Wire, sp::cuda_chunk_ops>;
    adaptor a(pool, t, o, {}, {}, sp::cuda_chunk_ops::on(pool.reducer(), r));
    REQUIRE(a.pool().size() == n);
    for (int it = 0; it < iterations; ++it) {
      std::vector<float> in(n);
      for (std::size_t i = 0; i < n; ++i) in[i] = sparse_fractional(r, it, i);
      upload_to(pool.data(), in, s);
      // backward order, rank 1 marks in reverse (the order must not matter)
      for (std::size_t j = 0; j < pool.tensor_count(); ++j)
        a.mark_ready(r == 1 ? pool.tensor_count() - 1 - j : j);
      a.finish();
      auto& x = rec[r][it];
      x.pool = download(pool.data(), n, s);
      x.residual = download(a.residual().data(), n, s);
      x.norms.assign(a.last_norms().begin(), a.last_norms().end());
      x.used.assign(a.last_important().begin(), a.last_important().end());
      x.next.assign(a.important().begin(), a.important().end());
    }
    // momentum step on the reduced important chunks of the last iteration
    std::vector<float> w0(n), u0(n);
    for (std::size_t i = 0; i < n; ++i) {
      w0[i] = sparse_fractional(7, 7, i);
      u0[i] = sparse_fractional(8, 8, i) * 0.01f;
    }
    auto d_w = upload(w0, s), d_u = upload(u0, s);
    sp::csc_sgd_options so;
    so.learning_rate = 0.05;
    so.momentum = o.momentum;
    sp::csc_momentum_step(a, std::span<float>(d_w.data(), n), std::span<float>(d_u.data(), n), so);
    w_dev[r] = download(d_w.data(), n, s);
    u_dev[r] = download(d_u.data(), n, s);
    const auto g = download(pool.data(), n, s);
    w_host[r] = w0;
    u_host[r] = u0;
    sp::csc_momentum_step<float>(g, std::span<float>(w_host[r]), std::span<float>(u_host[r]),
                                 a.chunks(), a.last_important(), so, sp::host_chunk_ops{}, r);
  });
  check_against_simulation(rec, P, sizes, o, iterations, wire_tol);
  for (int r = 0; r < P; ++r) {
    CAPTURE(r);
    CHECK(same_bits(w_dev[r], w_host[r]));
    CHECK(same_bits(u_dev[r], u_host[r]));
    CHECK(same_bits(w_dev[r], w_dev[0])); // replicas do not drift
  }
}

/// Owning cudaMalloc'd storage for a pool's allocator constructor.
struct cuda_malloc_storage {
  float* p = nullptr;
  explicit cuda_malloc_storage(std::size_t n) {
    void* v = nullptr;
    tcoll::detail::cuda::check(cudaMalloc(&v, n * sizeof(float)), "cudaMalloc");
    p = static_cast<float*>(v);
  }
  cuda_malloc_storage(cuda_malloc_storage&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  cuda_malloc_storage& operator=(cuda_malloc_storage&&) = delete;
  ~cuda_malloc_storage() {
    if (p) (void)cudaFree(p);
  }
  float* data() const noexcept { return p; }
};

} // namespace

TEST_CASE("cuda_chunk_ops against host_chunk_ops: float, double and half pools") {
  ops_case<float>("float");
  ops_case<double>("double");
  ops_case<tcoll::half>("half");
  ops_case<tcoll::bfloat16>("bfloat16");
}

TEST_CASE("cuda_chunk_ops: half and bfloat16 wire for a float pool, scaled and not") {
  stream_holder st;
  sp::cuda_chunk_ops dev;
  dev.stream = st.s;
  dev.timeout = gpu_timeout;
  const auto src = values<float>(4099, 11);
  for (float scale : {1.0f, 1024.0f, 0.25f}) {
    gather_scatter_case<tcoll::half>(src, scale, st.s, dev);
    gather_scatter_case<tcoll::bfloat16>(src, scale, st.s, dev);
  }
}

TEST_CASE("csc_allreduce on device_team + cuda_chunk_ops: identical important chunks, host "
          "reference") {
  sp::csc_options o;
  o.chunk_elements = 97;
  o.density = 0.3;
  o.warmup_iterations = 2; // iteration 0 dense, 1 at density 0.65, then 0.3
  o.threshold_bytes = 1500;
  for (int P : {2, 3, 4}) end_to_end_case<float>(P, o, 5, 1e-5);
  // runs of important chunks reduced in place in the pool
  sp::csc_options in_place = o;
  in_place.in_place_min_bytes = 2 * 97 * sizeof(float);
  end_to_end_case<float>(3, in_place, 4, 1e-5);
  // error feedback and a half wire (scaled by a power of two)
  sp::csc_options half_wire = o;
  half_wire.residual = sp::residual_rule::error_feedback;
  half_wire.wire_scale = 4.0f;
  end_to_end_case<tcoll::half>(2, half_wire, 4, 4e-3);
  end_to_end_case<tcoll::bfloat16>(3, o, 3, 3e-2);
}

TEST_CASE("device-pointer check: device memory given to host code throws, naming it and the rank") {
  using tcoll::detail::memory_kind;
  using tcoll::detail::pointer_memory_kind;
  void *d = nullptr, *h = nullptr, *m = nullptr;
  REQUIRE(cudaMalloc(&d, 4096) == cudaSuccess);
  REQUIRE(cudaMallocHost(&h, 4096) == cudaSuccess);
  const bool managed = cudaMallocManaged(&m, 4096) == cudaSuccess;
  std::vector<float> plain(16);
  CHECK(pointer_memory_kind(d) == memory_kind::device);
  CHECK(pointer_memory_kind(static_cast<char*>(d) + 100) == memory_kind::device);
  CHECK(pointer_memory_kind(h) == memory_kind::host_registered);
  if (managed) CHECK(pointer_memory_kind(m) == memory_kind::managed);
  CHECK(pointer_memory_kind(plain.data()) == memory_kind::host);
  (void)cudaFree(d);
  (void)cudaFreeHost(h);
  if (managed) (void)cudaFree(m);
  (void)cudaGetLastError();

  const std::vector<std::size_t> sizes{300, 200};
  // a host reducer's pool in cudaMalloc'd storage is refused before it is written
  CHECK_THROWS_WITH_AS(
      (tcoll::gradient_pool<float>(sizes, {}, tcoll::cpu_reducer{},
                                   [](std::size_t n) { return cuda_malloc_storage(n); })),
      doctest::Contains("gradient_pool: the allocator's storage is CUDA device memory"),
      tcoll::invalid_argument);
  // a device pool (cudaMalloc'd, and the reducer's own allocation) given to the adaptor with
  // host_chunk_ops: every rank throws at construction, naming the pool and its rank
  for (bool own : {true, false}) {
    CAPTURE(own);
    tcoll::device_team(2, gpu_timeout).run([&](tcoll::device_transport& t) {
      const tcoll::cuda_reducer red{t.stream()};
      auto pool = own ? tcoll::gradient_pool<float, tcoll::cuda_reducer>(sizes, {}, red)
                      : tcoll::gradient_pool<float, tcoll::cuda_reducer>(
                            sizes, {}, red, [](std::size_t n) { return cuda_malloc_storage(n); });
      sp::csc_options o;
      o.chunk_elements = 64;
      using host_adaptor =
          sp::csc_allreduce<tcoll::device_transport, float, tcoll::sum_op, tcoll::ring,
                            tcoll::cuda_reducer>; // host_chunk_ops
      const std::string want = "tcoll [rank " + std::to_string(t.rank()) +
                               "]: csc_allreduce: the gradient pool (pool.data()) is CUDA device "
                               "memory, but it is used by host code";
      CHECK_THROWS_WITH_AS((host_adaptor(pool, t, o)), doctest::Contains(want.c_str()),
                           tcoll::invalid_argument);
      // the device policy accepts it
      sp::csc_allreduce<tcoll::device_transport, float, tcoll::sum_op, tcoll::ring,
                        tcoll::cuda_reducer, float, sp::cuda_chunk_ops>
          ok(pool, t, o, {}, {}, sp::cuda_chunk_ops::on(red, t.rank()));
      CHECK(ok.chunks().count() == 8);
    });
  }
}
