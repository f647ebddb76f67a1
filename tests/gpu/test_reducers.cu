// Direct tests of the cuda and thrust reducers: every op x element type of the core against
// a host loop, odd sizes, pointers at every offset modulo 16 (vector path, scalar head and
// tail, all-scalar path), the aliasing forms dst == a and dst == b, poisoned outputs with
// guards, the fused k-source form, the mixed-precision casts, and the mixed-precision
// adaptor on device_team.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/compress/mixed_precision.hpp>
#include <tcoll/reduce/cuda.cuh>
#include <tcoll/reduce/thrust.cuh>
#include <tcoll/transport/device_team.hpp>

#include "../common/collective_cases.hpp"
#include "device_buffers.hpp"

using namespace tcoll;
using namespace tcoll::testing;

namespace {

/// Stream owned by one test.
struct stream_guard {
  cudaStream_t s = nullptr;
  stream_guard() {
    detail::cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~stream_guard() { (void)cudaStreamDestroy(s); }
};

/// Small integer-valued inputs whose op results are exact in every type (prod in {1, 2} / {-1,
/// 1}, so products stay exact; the rest in [-6, 6], or [0, 12] for unsigned types).
template <class T>
std::vector<T> inputs(std::size_t n, std::uint64_t salt, op_kind k) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t h = mix(salt * 1000003 + i);
    long long x;
    if (k == op_kind::prod)
      x = std::is_signed_v<T> && std::is_integral_v<T> ? (h % 2 ? 1 : -1) : 1 + long(h % 2);
    else if (k == op_kind::noncommutative)
      x = static_cast<long long>(h & 0x7f);
    else
      x = std::is_unsigned_v<T> ? long(h % 13) : long(h % 13) - 6;
    if constexpr (is_reduced_precision_v<T>)
      v[i] = T(static_cast<float>(x));
    else
      v[i] = static_cast<T>(x);
  }
  return v;
}

/// Host reference of a k-source fold, accumulating like the fused kernel (in
/// accumulator_t<T>, rounded once); for k == 2 this is exactly apply_op.
template <class Op, class T>
std::vector<T> host_fold(const Op& op, const std::vector<std::vector<T>>& src) {
  using A = accumulator_t<T>;
  std::vector<T> out(src[0].size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    A acc = static_cast<A>(src[0][i]);
    for (std::size_t j = 1; j < src.size(); ++j)
      acc = static_cast<A>(op(acc, static_cast<A>(src[j][i])));
    if constexpr (std::is_same_v<A, T>)
      out[i] = acc;
    else
      out[i] = T(static_cast<float>(acc));
  }
  return out;
}

template <class Red, class T, class Op>
void reduce_case(const Op& op, op_kind k, std::size_t n, std::size_t off_d, std::size_t off_a,
                 std::size_t off_b, int alias) {
  stream_guard sg;
  device_buffers<Red> b{sg.s, 0};
  const auto a = inputs<T>(n, 11 + n, k), bb = inputs<T>(n, 29 + n, k);
  offset_buffer<T> da(n, off_a, sg.s), db(n, off_b, sg.s), dd(n, off_d, sg.s);
  b.upload(da, a);
  b.upload(db, bb);
  auto red = b.reducer();
  std::string what = std::string(type_name<T>()) + " " + std::string(op_name(k)) +
                     " n=" + std::to_string(n) + " offsets " + std::to_string(off_d) + "/" +
                     std::to_string(off_a) + "/" + std::to_string(off_b);
  std::vector<T> want = host_fold(op, std::vector<std::vector<T>>{a, bb});
  if (alias == 0) {
    red.reduce(op, dd.data(), static_cast<const T*>(da.data()), db.data(), n);
    red.synchronize();
    check_equal(b.download(dd, n), want, what + " (dst separate)");
    check_equal(b.download(da, n), a, what + " (a untouched)");
    check_equal(b.download(db, n), bb, what + " (b untouched)");
  } else if (alias == 1) {
    red.reduce(op, da.data(), static_cast<const T*>(da.data()), db.data(), n);
    red.synchronize();
    check_equal(b.download(da, n), want, what + " (dst == a)");
  } else {
    red.reduce(op, db.data(), static_cast<const T*>(da.data()), db.data(), n);
    red.synchronize();
    check_equal(b.download(db, n), want, what + " (dst == b)");
  }
  if constexpr (finalizing_op<Op>) {
    offset_buffer<T> df(n, off_d, sg.s);
    b.upload(df, want);
    red.finalize(op, df.data(), n, 3);
    red.synchronize();
    std::vector<T> fin(n);
    for (std::size_t i = 0; i < n; ++i) fin[i] = finalize_op(op, want[i], 3);
    check_equal(b.download(df, n), fin, what + " (finalize / 3)");
  }
}

template <class Red>
void every_op_every_type(const std::vector<std::size_t>& sizes) {
  for_each_type({}, [&]<class T>(type_tag<T>) {
    constexpr bool nc = std::is_integral_v<T>;
    for_each_op<nc>({}, [&]<class Op>(const Op& op, op_kind k) {
      for (std::size_t n : sizes) {
        reduce_case<Red, T>(op, k, n, 0, 0, 0, 0); // all aligned
        reduce_case<Red, T>(op, k, n, 1, 1, 1, 0); // same misalignment: head + vectors
        reduce_case<Red, T>(op, k, n, 0, 1, 2, 0); // disagree modulo 16: all scalar
        reduce_case<Red, T>(op, k, n, 3, 3, 0, 1); // dst == a
        reduce_case<Red, T>(op, k, n, 2, 1, 2, 2); // dst == b
      }
    });
  });
}

} // namespace

TEST_CASE("cuda reducer: every op x every type, odd sizes, misaligned, aliased, poisoned") {
  every_op_every_type<cuda_reducer>({0, 1, 7, 8, 33, 1000, 65537});
}

TEST_CASE("thrust reducer: every op x every type, odd sizes, misaligned, aliased, poisoned") {
  every_op_every_type<thrust_reducer>({0, 1, 33, 4099});
}

TEST_CASE("cuda reducer: large buffer (grid-stride loop over more than one grid)") {
  reduce_case<cuda_reducer, float>(sum_op{}, op_kind::sum, (std::size_t{1} << 26) + 5, 1, 1, 1, 0);
  reduce_case<cuda_reducer, tcoll::half>(max_op{}, op_kind::max, (std::size_t{1} << 25) + 3, 0, 0,
                                         0, 1);
}

namespace {
template <class Red, class T>
void fused_case(std::size_t k, std::size_t n, int dst_is) {
  stream_guard sg;
  device_buffers<Red> b{sg.s, 0};
  std::vector<std::vector<T>> host;
  std::vector<offset_buffer<T>> dev;
  for (std::size_t j = 0; j < k; ++j) {
    host.push_back(inputs<T>(n, 101 + j, op_kind::sum));
    dev.emplace_back(n, j % 3, sg.s);
    b.upload(dev.back(), host.back());
  }
  offset_buffer<T> out(n, 1, sg.s);
  std::vector<const T*> ptrs;
  for (auto& d : dev) ptrs.push_back(d.data());
  T* dst = dst_is < 0 ? out.data() : dev[dst_is].data();
  Red{sg.s}.reduce_many(sum_op{}, dst, std::span<const T* const>(ptrs), n);
  Red{sg.s}.synchronize();
  const std::string what = std::string(type_name<T>()) + " k=" + std::to_string(k) +
                           " n=" + std::to_string(n) + " dst=" + std::to_string(dst_is);
  // integer-valued sums stay exact, so one rounding (fused) and k-1 roundings (pairwise) agree
  check_equal(b.download(dst_is < 0 ? out : dev[dst_is], n), host_fold(sum_op{}, host), what);
}
} // namespace

TEST_CASE("fused k-source reduce: k = 1..19, dst separate or equal to a source") {
  for (std::size_t k : {1, 2, 3, 8, 9, 16, 19})
    for (std::size_t n : {1, 31, 4099}) {
      fused_case<cuda_reducer, float>(k, n, -1);
      fused_case<cuda_reducer, tcoll::half>(k, n, 0);
      fused_case<cuda_reducer, std::int32_t>(k, n, static_cast<int>(k - 1));
      fused_case<thrust_reducer, bfloat16>(k, n, static_cast<int>(k / 2));
    }
}

TEST_CASE("fused reduce of 16-bit floats rounds once (float accumulation)") {
  // 2048 + 1 + 1 in half: pairwise rounds 2049 -> 2048 twice, fused gives 2050
  stream_guard sg;
  device_buffers<cuda_reducer> b{sg.s, 0};
  offset_buffer<tcoll::half> x(1, 0, sg.s), y(1, 0, sg.s), z(1, 0, sg.s), out(1, 0, sg.s);
  b.upload(x, std::vector<tcoll::half>{tcoll::half(2048.0f)});
  b.upload(y, std::vector<tcoll::half>{tcoll::half(1.0f)});
  b.upload(z, std::vector<tcoll::half>{tcoll::half(1.0f)});
  const tcoll::half* src[] = {x.data(), y.data(), z.data()};
  cuda_reducer{sg.s}.reduce_many(sum_op{}, out.data(), std::span<const tcoll::half* const>(src), 1);
  CHECK(static_cast<float>(b.download(out, 1)[0]) == 2050.0f);
}

TEST_CASE("convert: float <-> half/bfloat16 with scale, round to nearest even like the host") {
  stream_guard sg;
  device_buffers<cuda_reducer> b{sg.s, 0};
  const std::size_t n = 100003;
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i)
    f[i] = static_cast<float>(static_cast<std::int64_t>(mix(i) % 2000001) - 1000000) / 997.0f;
  offset_buffer<float> df(n, 1, sg.s), back(n, 2, sg.s);
  offset_buffer<tcoll::half> dh(n, 0, sg.s);
  offset_buffer<bfloat16> db(n, 1, sg.s);
  b.upload(df, f);
  cuda_reducer red{sg.s};
  red.convert(dh.data(), static_cast<const float*>(df.data()), n, 0.5f);
  red.convert(db.data(), static_cast<const float*>(df.data()), n, 1.0f);
  red.convert(back.data(), static_cast<const tcoll::half*>(dh.data()), n, 2.0f);
  red.synchronize();
  std::vector<tcoll::half> wh(n);
  std::vector<bfloat16> wb(n);
  std::vector<float> wback(n);
  for (std::size_t i = 0; i < n; ++i) {
    wh[i] = tcoll::half(f[i] * 0.5f);
    wb[i] = bfloat16(f[i]);
    wback[i] = static_cast<float>(wh[i]) * 2.0f;
  }
  check_equal(b.download(dh, n), wh, "float -> half (scale 0.5)");
  check_equal(b.download(db, n), wb, "float -> bfloat16");
  check_equal(b.download(back, n), wback, "half -> float (scale 2)");
}

TEST_CASE("convert: the vector path, its head and its tail at every pair of pointer offsets") {
  stream_guard sg;
  device_buffers<cuda_reducer> b{sg.s, 0};
  cuda_reducer red{sg.s};
  auto one_direction = [&]<class To, class From>(const std::vector<From>& src, float scale,
                                                 const char* what) {
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                          std::size_t{1000}, std::size_t{4099}})
      for (std::size_t so : {0, 1, 2, 3})
        for (std::size_t dof : {0, 1, 2, 3}) {
          offset_buffer<From> in(n, so, sg.s);
          offset_buffer<To> out(n, dof, sg.s);
          b.upload(in, std::vector<From>(src.begin(), src.begin() + n));
          red.convert(out.data(), static_cast<const From*>(in.data()), n, scale);
          std::vector<To> want(n);
          for (std::size_t i = 0; i < n; ++i) want[i] = To(static_cast<float>(src[i]) * scale);
          check_equal(b.download(out, n), want,
                      std::string(what) + " n=" + std::to_string(n) + " offsets " +
                          std::to_string(so) + "/" + std::to_string(dof));
        }
  };
  std::vector<float> f(4099);
  for (std::size_t i = 0; i < f.size(); ++i)
    f[i] = static_cast<float>(static_cast<std::int64_t>(mix(i + 7) % 2000001) - 1000000) / 991.0f;
  std::vector<tcoll::half> h(f.size());
  std::vector<bfloat16> bf(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    h[i] = tcoll::half(f[i] / 64.0f);
    bf[i] = bfloat16(f[i]);
  }
  one_direction.template operator()<tcoll::half, float>(f, 1.0f / 64.0f, "float -> half");
  one_direction.template operator()<float, tcoll::half>(h, 64.0f, "half -> float");
  one_direction.template operator()<bfloat16, float>(f, 0.25f, "float -> bfloat16");
  one_direction.template operator()<float, bfloat16>(bf, 4.0f, "bfloat16 -> float");
  one_direction.template operator()<float, float>(f, 0.5f, "float -> float");
}

TEST_CASE("mixed precision: float gradients as half / bfloat16 over device_team, error bounded") {
  for (int P : {1, 3, 8}) {
    CAPTURE(P);
    const std::size_t n = 10007;
    auto value = [](int r, std::size_t i) {
      return static_cast<float>(
                 static_cast<std::int64_t>(mix((std::uint64_t(r) << 32) ^ i) % 20001) - 10000) /
             4096.0f;
    };
    std::vector<std::vector<float>> results(P);
    device_team(P, gpu_timeout).run([&](device_transport& t) {
      device_buffers<cuda_reducer> b{t.stream(), t.rank()};
      std::vector<float> mine(n);
      for (std::size_t i = 0; i < n; ++i) mine[i] = value(t.rank(), i);
      auto in = b.allocate<float>(n);
      auto out = b.allocate<float>(n);
      b.upload(in, mine);
      const auto rep =
          allreduce_mixed<tcoll::half>(t, static_cast<const float*>(in.data()), out.data(), n,
                                       sum_op{}, ring{}, b.reducer(), {.scale = 4.0f});
      CHECK(rep.wire == "half");
      CHECK(rep.roundings == P + 1);
      const auto got = b.download(out, n);
      check_equal(b.download(in, n), mine, "mixed precision input untouched");
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < P; ++r) {
          exact += value(r, i);
          mag += std::abs(value(r, i));
        }
        if (!(std::abs(got[i] - exact) <= rep.bound(mag) * 1.0001)) ++bad;
      }
      CHECK_MESSAGE(bad == 0,
                    bad << " elements outside the reported bound (rank " << t.rank() << ")");
      check_identical_across_ranks(t, got.data(), n * sizeof(float), "mixed precision half");
      results[t.rank()] = got;

      // bfloat16 wire with avg over recursive doubling
      auto out2 = b.allocate<float>(n);
      const auto rep2 =
          allreduce_mixed<bfloat16>(t, static_cast<const float*>(in.data()), out2.data(), n,
                                    avg_op{}, recursive_doubling{}, b.reducer());
      const auto got2 = b.download(out2, n);
      std::size_t bad2 = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < P; ++r) {
          exact += value(r, i);
          mag += std::abs(value(r, i));
        }
        if (!(std::abs(got2[i] - exact / P) <= rep2.bound(mag / P) * 1.0001)) ++bad2;
      }
      CHECK_MESSAGE(bad2 == 0, bad2 << " bfloat16 avg elements outside the reported bound");
    });
    // and the error is real: half cannot carry value()'s 12 fractional bits for every element
    if (P == 8) {
      std::size_t inexact = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double exact = 0;
        for (int r = 0; r < P; ++r) exact += value(r, i);
        inexact += results[0][i] != static_cast<float>(exact);
      }
      CHECK(inexact > 0);
    }
  }
}

TEST_CASE("device_team transport: size mismatch and bad peer are reported, not hung") {
  device_team(2, std::chrono::milliseconds(2000)).run([](device_transport& t) {
    CHECK_THROWS_AS(t.isend(2, nullptr, 0, 1), invalid_argument);
    CHECK_THROWS_AS(t.irecv(-1, nullptr, 0, 1), invalid_argument);
    stream_guard sg;
    offset_buffer<float> buf(16, 0, t.stream());
    if (t.rank() == 0) {
      auto s = t.isend(1, buf.data(), 16 * sizeof(float), 5);
      CHECK_THROWS_AS(t.wait(s, clock::now() + t.timeout()), transport_error);
    } else {
      auto r = t.irecv(0, buf.data(), 8 * sizeof(float), 5);
      CHECK_THROWS_AS(t.wait(r, clock::now() + t.timeout()), transport_error);
    }
  });
}
