#pragma once
/// \file
/// Rank-level test bodies shared by every transport's suite (threads, MPI, GPU).
///
/// Every rank of a transport calls the same body with the same options; each body runs a
/// deterministic sequence of collectives, so all ranks stay in step. Failures are reported
/// with doctest's (thread-safe) CHECK family and name algorithm, type, op, count, P, rank.
///
/// Expectations are computed in the test, never through the collective under test:
///  - sum/avg/min/max inputs are x(r, i) = u(i) + v(r) with small integers, so every partial
///    result is exactly representable in every element type (the nccl-tests trick) and the
///    exact result has a closed form (sum = P u(i) + sum_r v(r), min = u(i) + min_r v(r));
///  - prod inputs are in {1, 2} (unsigned, float, double, bfloat16) or {-1, 1} (signed
///    integers, half), products are exact (or wrap identically for narrow unsigned types);
///  - the non-commutative op composes affine maps x -> m x + c (mod 2^h) packed into one
///    unsigned integer: associative but not commutative, so only the rank-order fold
///    x_0 . x_1 . ... . x_{P-1} is right (a * 3 + b is not associative, so no tree algorithm
///    could reproduce its left fold; MPI also requires user ops to be associative).
///  - cross-rank identity is checked with plain isend/irecv of a hash of the output bytes to
///    rank 0 (not through any collective).
///
/// Buffers go through a `Buffers` policy so the GPU suite can run the same bodies on device
/// memory: `allocate<T>(n)`, `upload(buf, host_vector)`, `download<T>(buf, n)`, `reducer()`.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <tcoll/tcoll.hpp>
#include <tcoll/transport/counting.hpp>

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Test level: how much of the matrix to run.

/// quick: sanitizer builds (chosen automatically) or TCOLL_TEST_LEVEL=quick;
/// normal: the default; long: TCOLL_TEST_LEVEL=long (meson option long_tests).
enum class test_level { quick, normal, long_sweep };

/// True when compiled with AddressSanitizer or ThreadSanitizer (GCC and Clang spellings).
constexpr bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

/// The level from TCOLL_TEST_LEVEL (quick|normal|long), defaulting to quick under a
/// sanitizer and normal otherwise.
inline test_level level() {
  if (const char* env = std::getenv("TCOLL_TEST_LEVEL")) {
    const std::string_view v(env);
    if (v == "quick") return test_level::quick;
    if (v == "long") return test_level::long_sweep;
    if (v == "normal") return test_level::normal;
  }
  return under_sanitizer() ? test_level::quick : test_level::normal;
}

// ---------------------------------------------------------------------------------------
// Buffer policy.

/// Host memory buffers and the CPU reducer (the default policy).
struct host_buffers {
  template <class T>
  using buffer = tcoll::host_buffer<T>;

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  template <class T>
  void upload(buffer<T>& dst, const std::vector<T>& src) const {
    if (!src.empty())
      std::memcpy(static_cast<void*>(dst.data()), src.data(), src.size() * sizeof(T));
  }
  template <class T>
  std::vector<T> download(const buffer<T>& src, std::size_t n) const {
    std::vector<T> out(n);
    if (n) std::memcpy(static_cast<void*>(out.data()), src.data(), n * sizeof(T));
    return out;
  }
  tcoll::cpu_reducer reducer() const { return {}; }
};

// ---------------------------------------------------------------------------------------
// Small utilities.

/// splitmix64: a cheap, well-mixed hash for deterministic inputs.
constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// FNV-1a style fingerprint over 8-byte words (then the tail bytes): cheap enough for
/// 2^20-element outputs on every rank.
inline std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return mix(h ^ bytes);
}

template <class T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// A printable value of any element type.
template <class T>
std::string show(const T& v) {
  std::ostringstream s;
  if constexpr (is_reduced_precision_v<T>)
    s << static_cast<float>(v) << " (0x" << std::hex << v.bits << ")";
  else if constexpr (std::is_same_v<T, symbolic::rank_set>)
    s << "rank_set{0x" << std::hex << v.bits << "}";
  else if constexpr (sizeof(T) == 1 && std::is_integral_v<T>)
    s << static_cast<int>(v);
  else if constexpr (std::is_arithmetic_v<T>)
    s << +v;
  else
    s << "?";
  return s.str();
}

/// Identifies one test case in failure messages.
struct case_id {
  std::string algorithm;
  std::string_view type;
  std::string_view op;
  std::size_t count = 0;
  int nranks = 0;
  int rank = 0;
  bool in_place = false;
  std::string str() const {
    std::ostringstream s;
    s << algorithm << " " << type << " " << op << " count=" << count << " P=" << nranks
      << " rank=" << rank << (in_place ? " in-place" : " out-of-place");
    return s.str();
  }
};

/// Compares `got` with `want` bitwise; reports the first mismatch and how many there are.
template <class T>
void check_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  std::size_t bad = 0, first = 0;
  const std::size_t n = std::min(got.size(), want.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!same_bytes(got[i], want[i]) && bad++ == 0) first = i;
  if (bad == 0 && got.size() == want.size()) {
    CHECK(true);
    return;
  }
  std::ostringstream s;
  s << what << ": " << bad << " of " << n << " elements wrong";
  if (bad)
    s << "; first at [" << first << "]: got " << show(got[first]) << ", want " << show(want[first]);
  if (got.size() != want.size()) s << "; size " << got.size() << " != " << want.size();
  FAIL_CHECK(s.str());
}

/// Tag of the test's own side-channel messages (distinct from detail::collective_tag).
inline constexpr int identity_tag = 0x7e57;

/// Every rank passes its output bytes; rank 0 receives every other rank's fingerprint by
/// plain isend/irecv and checks they equal its own. Collective over all ranks of `t`.
template <transport Tr>
void check_identical_across_ranks(Tr& t, const void* data, std::size_t bytes,
                                  const std::string& what) {
  const int P = t.size();
  if (P == 1) return;
  const std::uint64_t mine[2] = {fingerprint(data, bytes), bytes};
  const deadline when = clock::now() + t.timeout();
  if (t.rank() != 0) {
    auto req = t.isend(0, mine, sizeof mine, identity_tag);
    t.wait(req, when);
    return;
  }
  std::vector<std::uint64_t> theirs(2 * static_cast<std::size_t>(P));
  std::vector<typename Tr::request> reqs;
  reqs.reserve(P);
  for (int r = 1; r < P; ++r)
    reqs.push_back(t.irecv(r, theirs.data() + 2 * r, 2 * sizeof(std::uint64_t), identity_tag));
  for (auto& q : reqs) t.wait(q, when);
  for (int r = 1; r < P; ++r) {
    const bool same = theirs[2 * r] == mine[0] && theirs[2 * r + 1] == mine[1];
    if (same)
      CHECK(true);
    else
      FAIL_CHECK(what << ": rank " << r << "'s output differs from rank 0's (fingerprint "
                      << std::hex << theirs[2 * r] << " vs " << mine[0] << ")");
  }
}

// ---------------------------------------------------------------------------------------
// Element types and ops.

template <class T>
struct type_tag {
  using type = T;
};

/// Calls f(type_tag<T>{}) for every element type whose name is in `names` (all if empty).
template <class F>
void for_each_type(const std::vector<std::string>& names, F&& f) {
  auto one = [&]<class T>(type_tag<T> tag) {
    if (names.empty() || std::find(names.begin(), names.end(), type_name<T>()) != names.end())
      f(tag);
  };
  one(type_tag<std::int8_t>{});
  one(type_tag<std::uint8_t>{});
  one(type_tag<std::int16_t>{});
  one(type_tag<std::uint16_t>{});
  one(type_tag<std::int32_t>{});
  one(type_tag<std::uint32_t>{});
  one(type_tag<std::int64_t>{});
  one(type_tag<std::uint64_t>{});
  one(type_tag<float>{});
  one(type_tag<double>{});
  one(type_tag<half>{});
  one(type_tag<bfloat16>{});
}

/// Composition of affine maps packed into an integer: the high half of the bits is the
/// multiplier m, the low half the offset c (both mod 2^h); (a . b)(x) = b(a(x)), i.e.
/// m = m_a m_b, c = m_b c_a + c_b. Associative, not commutative; wraps (no UB).
struct affine_compose_fn {
  template <class A>
  constexpr A operator()(A a, A b) const {
    static_assert(std::is_integral_v<A>, "affine_compose works on integers");
    using U = std::make_unsigned_t<A>;
    using W = std::common_type_t<U, unsigned>; // no promotion to signed int
    constexpr int h = static_cast<int>(sizeof(U)) * 4;
    constexpr W mask = (W{1} << h) - 1;
    const W ua = static_cast<U>(a), ub = static_cast<U>(b);
    const W am = ua >> h, ac = ua & mask, bm = ub >> h, bc = ub & mask;
    const W m = (am * bm) & mask, c = (bm * ac + bc) & mask;
    return static_cast<A>(static_cast<U>((m << h) | c));
  }
};

/// The non-commutative user op of the tests.
inline constexpr auto noncommutative_op = make_op<false>(affine_compose_fn{});

/// Reference for `noncommutative_op`, written on separate (m, c) pairs in 64-bit arithmetic:
/// the rank-order fold of `xs`.
template <class T>
T affine_fold_reference(const std::vector<T>& xs) {
  using U = std::make_unsigned_t<T>;
  const int h = static_cast<int>(sizeof(U)) * 4;
  const std::uint64_t mask = (std::uint64_t{1} << h) - 1;
  std::uint64_t m = 1, c = 0; // identity map
  for (T x : xs) {
    const std::uint64_t u = static_cast<U>(x);
    const std::uint64_t xm = (u >> h) & mask, xc = u & mask;
    // apply the accumulated map, then x: x(acc(v)) = xm (m v + c) + xc
    m = (xm * m) & mask;
    c = (xm * c + xc) & mask;
  }
  return static_cast<T>(static_cast<U>((m << h) | c));
}

enum class op_kind { sum, prod, min, max, avg, noncommutative };

constexpr std::string_view op_name(op_kind k) {
  switch (k) {
  case op_kind::sum:
    return "sum";
  case op_kind::prod:
    return "prod";
  case op_kind::min:
    return "min";
  case op_kind::max:
    return "max";
  case op_kind::avg:
    return "avg";
  case op_kind::noncommutative:
    return "noncommutative";
  }
  return "?";
}

/// Calls f(op_object, op_kind) for each op in `names` (all if empty). The non-commutative op
/// only where `WithNoncommutative` (order-keeping algorithms, integer types).
template <bool WithNoncommutative, class F>
void for_each_op(const std::vector<std::string>& names, F&& f) {
  auto want = [&](op_kind k) {
    return names.empty() || std::find(names.begin(), names.end(), op_name(k)) != names.end();
  };
  if (want(op_kind::sum)) f(sum_op{}, op_kind::sum);
  if (want(op_kind::prod)) f(prod_op{}, op_kind::prod);
  if (want(op_kind::min)) f(min_op{}, op_kind::min);
  if (want(op_kind::max)) f(max_op{}, op_kind::max);
  if (want(op_kind::avg)) f(avg_op{}, op_kind::avg);
  if constexpr (WithNoncommutative)
    if (want(op_kind::noncommutative)) f(noncommutative_op, op_kind::noncommutative);
}

// ---------------------------------------------------------------------------------------
// Inputs with exactly known results.

/// Largest integer magnitude every partial sum may reach and stay exact in T.
template <class T>
constexpr std::int64_t exact_bound() {
  if constexpr (std::is_same_v<T, half>)
    return 2048;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return 256;
  else if constexpr (std::is_floating_point_v<T>)
    return std::int64_t{1} << 24;
  else if constexpr (sizeof(T) <= 2)
    return static_cast<std::int64_t>(std::numeric_limits<T>::max());
  else
    return std::int64_t{1} << 24;
}

template <class T>
constexpr bool is_signed_element = is_reduced_precision_v<T> || std::is_signed_v<T>;

/// Converts an exact integer to T.
template <class T>
T from_int(std::int64_t v) {
  if constexpr (is_reduced_precision_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

/// x(r, i) = u(i) + v(r) with |sums over any subset of ranks| <= exact_bound<T>().
template <class T>
struct additive_inputs {
  int P;
  std::uint64_t salt;
  std::int64_t a; // amplitude of u and v
  std::int64_t vsum = 0, vmin = 0, vmax = 0;

  additive_inputs(int nranks, std::uint64_t s)
      : P(nranks), salt(s), a(std::clamp<std::int64_t>(exact_bound<T>() / (2 * nranks), 1, 1000)) {
    vmin = std::numeric_limits<std::int64_t>::max();
    vmax = std::numeric_limits<std::int64_t>::min();
    for (int r = 0; r < P; ++r) {
      vsum += v(r);
      vmin = std::min(vmin, v(r));
      vmax = std::max(vmax, v(r));
    }
  }
  std::int64_t u(std::size_t i) const {
    const auto h =
        static_cast<std::int64_t>(mix(i ^ (salt << 40)) % static_cast<std::uint64_t>(2 * a + 1));
    return is_signed_element<T> ? h - a : h / 2; // unsigned: [0, a]
  }
  std::int64_t v(int r) const {
    return 1 + static_cast<std::int64_t>(mix(static_cast<std::uint64_t>(r) + salt * 977) %
                                         static_cast<std::uint64_t>(a));
  }
  T x(int r, std::size_t i) const { return from_int<T>(u(i) + v(r)); }
};

/// prod inputs: 2 (or -1 for signed types without room for 2^P) where (i + r) % 3 == 0.
template <class T>
constexpr bool prod_uses_sign() {
  return std::is_same_v<T, half> || (std::is_integral_v<T> && std::is_signed_v<T>);
}
template <class T>
T prod_input(int r, std::size_t i) {
  const bool special = (i + static_cast<std::size_t>(r)) % 3 == 0;
  return from_int<T>(special ? (prod_uses_sign<T>() ? -1 : 2) : 1);
}
template <class T>
T prod_expected(int P, std::size_t i) {
  // number of ranks r in [0, P) with (i + r) % 3 == 0
  const int r0 = static_cast<int>((3 - i % 3) % 3);
  const int k = r0 < P ? (P - 1 - r0) / 3 + 1 : 0;
  if constexpr (prod_uses_sign<T>()) {
    return from_int<T>(k % 2 ? -1 : 1);
  } else if constexpr (std::is_integral_v<T>) {
    std::uint64_t p = 1; // 2^k with the wrap of T's width
    for (int j = 0; j < k; ++j) p = static_cast<std::uint64_t>(static_cast<T>(p * 2));
    return static_cast<T>(p);
  } else {
    return T(static_cast<accumulator_t<T>>(std::ldexp(1.0, k)));
  }
}

/// Full-width pseudo-random integers for the non-commutative op.
template <class T>
T random_input(int r, std::size_t i, std::uint64_t salt) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(
      static_cast<U>(mix((static_cast<std::uint64_t>(r) << 48) ^ i ^ (salt << 32))));
}

/// Inputs and expected output of one (op, type, P, count) case.
template <class T>
struct case_data {
  std::vector<T> input;
  std::vector<T> expected;
};

template <class T>
case_data<T> make_case(op_kind k, int P, int rank, std::size_t n, std::uint64_t salt) {
  case_data<T> d;
  d.input.resize(n);
  d.expected.resize(n);
  switch (k) {
  case op_kind::sum:
  case op_kind::avg:
  case op_kind::min:
  case op_kind::max: {
    const additive_inputs<T> in(P, salt);
    const std::int64_t vr = in.v(rank);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t u = in.u(i);
      d.input[i] = from_int<T>(u + vr);
      if (k == op_kind::sum) {
        d.expected[i] = from_int<T>(P * u + in.vsum);
      } else if (k == op_kind::min) {
        d.expected[i] = from_int<T>(u + in.vmin);
      } else if (k == op_kind::max) {
        d.expected[i] = from_int<T>(u + in.vmax);
      } else { // avg: exact sum, then one division in the accumulator type
        using A = accumulator_t<T>;
        const std::int64_t s = P * u + in.vsum;
        if constexpr (std::is_integral_v<T>)
          d.expected[i] = static_cast<T>(s / P); // truncation toward zero, as ncclAvg
        else
          d.expected[i] = T(static_cast<A>(static_cast<A>(s) / static_cast<A>(P)));
      }
    }
    break;
  }
  case op_kind::prod:
    for (std::size_t i = 0; i < n; ++i) {
      d.input[i] = prod_input<T>(rank, i);
      d.expected[i] = prod_expected<T>(P, i);
    }
    break;
  case op_kind::noncommutative:
    if constexpr (std::is_integral_v<T>) {
      std::vector<T> xs(P);
      for (std::size_t i = 0; i < n; ++i) {
        for (int r = 0; r < P; ++r) xs[r] = random_input<T>(r, i, salt);
        d.input[i] = xs[rank];
        d.expected[i] = affine_fold_reference(xs);
      }
    }
    break;
  }
  return d;
}

// ---------------------------------------------------------------------------------------
// Algorithms.

/// The allreduce algorithms of the matrix, by name.
inline const std::vector<std::string>& all_algorithms() {
  static const std::vector<std::string> names = {
      "ring", "recursive_doubling", "recursive_halving_doubling", "binomial_tree", "automatic"};
  return names;
}

/// Calls f(algorithm_object) for the algorithm `name`; a non-zero `ring_segment_bytes`
/// overrides ring's (and automatic's ring's) max_segment_bytes.
template <class F>
void with_algorithm(std::string_view name, std::size_t ring_segment_bytes, F&& f) {
  ring rg{};
  if (ring_segment_bytes) rg.max_segment_bytes = ring_segment_bytes;
  if (name == "ring") {
    f(rg);
  } else if (name == "recursive_doubling") {
    f(recursive_doubling{});
  } else if (name == "recursive_halving_doubling") {
    f(recursive_halving_doubling{});
  } else if (name == "binomial_tree") {
    f(binomial_tree{});
  } else if (name == "automatic") {
    automatic a{};
    a.ring_knobs = rg;
    f(a);
  } else {
    FAIL("unknown algorithm name in test options: " << name);
  }
}

/// Does the algorithm accept non-commutative ops? (automatic routes them to one that does.)
template <class Algo>
constexpr bool accepts_noncommutative() {
  if constexpr (requires { Algo::keeps_operand_order; })
    return Algo::keeps_operand_order;
  else
    return true;
}

template <class Algo>
std::string algorithm_label(const Algo&, std::size_t ring_segment_bytes) {
  std::string s(Algo::name);
  if (ring_segment_bytes && (std::is_same_v<Algo, ring> || std::is_same_v<Algo, automatic>))
    s += "{seg=" + std::to_string(ring_segment_bytes) + "B}";
  return s;
}

// ---------------------------------------------------------------------------------------
// Allreduce matrix.

/// What `allreduce_matrix` sweeps. Empty name lists mean "all".
struct matrix_options {
  std::vector<std::size_t> counts;
  std::vector<std::string> algorithms = all_algorithms();
  std::vector<std::string> types;
  std::vector<std::string> ops;
  bool in_place = true;
  bool out_of_place = true;
  /// Non-zero: ring (and automatic's ring) use this max_segment_bytes.
  std::size_t ring_segment_bytes = 0;
  /// Check every rank's output against rank 0's by fingerprint (side channel).
  bool check_identity = true;
  /// Varies the inputs between calls.
  std::uint64_t salt = 1;
};

/// Runs one allreduce case and checks the result, the untouched input (out of place) and
/// the cross-rank identity.
template <transport Tr, class T, class Op, class Algo, class Buffers = host_buffers>
void allreduce_case(Tr& t, const Algo& algo, const Op& op, op_kind k, std::size_t n, bool in_place,
                    const case_id& id, std::uint64_t salt, bool identity, const Buffers& b = {}) {
  const case_data<T> d = make_case<T>(k, t.size(), t.rank(), n, salt);
  auto out = b.template allocate<T>(n);
  const std::string what = id.str();
  if (in_place) {
    b.upload(out, d.input);
    allreduce(t, out.data(), out.data(), n, op, algo, b.reducer());
  } else {
    auto in = b.template allocate<T>(n);
    b.upload(in, d.input);
    allreduce(t, static_cast<const T*>(in.data()), out.data(), n, op, algo, b.reducer());
    check_equal(b.download(in, n), d.input, what + " (input must stay untouched)");
  }
  const std::vector<T> got = b.download(out, n);
  check_equal(got, d.expected, what);
  if (identity) check_identical_across_ranks(t, got.data(), n * sizeof(T), what);
}

/// Every algorithm x type x op x count x {in place, out of place} of `opt` on transport `t`.
/// Every rank of `t` calls it with the same options.
template <transport Tr, class Buffers = host_buffers>
void allreduce_matrix(Tr& t, const matrix_options& opt, const Buffers& b = {}) {
  for (const std::string& name : opt.algorithms)
    with_algorithm(name, opt.ring_segment_bytes, [&]<class Algo>(const Algo& algo) {
      for_each_type(opt.types, [&]<class T>(type_tag<T>) {
        constexpr bool nc = accepts_noncommutative<Algo>() && std::is_integral_v<T>;
        for_each_op<nc>(opt.ops, [&]<class Op>(const Op& op, op_kind k) {
          if constexpr (commutative_op<Op> || accepts_noncommutative<Algo>()) {
            for (std::size_t n : opt.counts)
              for (int ip = 0; ip < 2; ++ip) {
                const bool in_place = ip == 1;
                if ((in_place && !opt.in_place) || (!in_place && !opt.out_of_place)) continue;
                const case_id id{algorithm_label(algo, opt.ring_segment_bytes),
                                 type_name<T>(),
                                 op_name(k),
                                 n,
                                 t.size(),
                                 t.rank(),
                                 in_place};
                allreduce_case<Tr, T>(t, algo, op, k, n, in_place, id, opt.salt + n,
                                      opt.check_identity, b);
              }
          }
        });
      });
    });
}

// ---------------------------------------------------------------------------------------
// Reduced precision with rounding: half/bfloat16 on fractional inputs.

/// Unit roundoff of T.
template <class T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, half>)
    return 1.0 / 2048; // 2^-11
  else if constexpr (std::is_same_v<T, bfloat16>)
    return 1.0 / 256; // 2^-8
  else
    return std::numeric_limits<T>::epsilon() / 2;
}

/// Largest number of roundings on any path from an input to the result: ring reduces each
/// chunk in a chain of P-1 steps; the tree algorithms in ceil(log2 P) levels, plus one for
/// the non-power-of-two fold of recursive doubling / halving-doubling.
/// `automatic` may pick either, so it gets the larger.
template <class Algo>
int rounding_depth(int P) {
  int lg = 0;
  while ((1 << lg) < P) ++lg;
  if constexpr (std::is_same_v<Algo, ring>)
    return P - 1;
  else if constexpr (std::is_same_v<Algo, automatic>)
    return std::max(P - 1, lg + 1);
  else
    return lg + 1;
}

/// half/bfloat16 sum and avg of fractional inputs (multiples of 1/64, |x| < 16): each
/// element must be within (depth + 1) u sum|x_r| of the exact sum of the (rounded) inputs,
/// and all ranks bitwise identical.
template <transport Tr, class Buffers = host_buffers>
void reduced_precision_rounding(Tr& t, const std::vector<std::size_t>& counts,
                                const std::vector<std::string>& algorithms = all_algorithms(),
                                const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  for (const std::string& name : algorithms)
    with_algorithm(name, 0, [&]<class Algo>(const Algo& algo) {
      auto run = [&]<class T, class Op>(type_tag<T>, const Op& op, op_kind k) {
        for (std::size_t n : counts) {
          auto value = [&](int r, std::size_t i) {
            const auto h =
                static_cast<std::int64_t>(mix((std::uint64_t(r) << 40) ^ i) % 2001) - 1000;
            return T(static_cast<float>(h) / 64.0f);
          };
          std::vector<T> input(n);
          for (std::size_t i = 0; i < n; ++i) input[i] = value(rank, i);
          auto buf = b.template allocate<T>(n);
          b.upload(buf, input);
          allreduce(t, buf.data(), buf.data(), n, op, algo, b.reducer());
          const std::vector<T> got = b.download(buf, n);
          const int depth = rounding_depth<Algo>(P) + (k == op_kind::avg ? 1 : 0);
          std::size_t bad = 0, first = 0;
          double first_err = 0, first_bound = 0;
          for (std::size_t i = 0; i < n; ++i) {
            double exact = 0, mag = 0;
            for (int r = 0; r < P; ++r) {
              const double x = static_cast<float>(value(r, i));
              exact += x;
              mag += std::abs(x);
            }
            if (k == op_kind::avg) {
              exact /= P;
              mag /= P;
            }
            const double err = std::abs(static_cast<double>(static_cast<float>(got[i])) - exact);
            const double bound = (depth + 1) * unit_roundoff<T>() * mag * 1.001 + 1e-30;
            if (!(err <= bound) && bad++ == 0) {
              first = i;
              first_err = err;
              first_bound = bound;
            }
          }
          const case_id id{algorithm_label(algo, 0), type_name<T>(), op_name(k), n, P, rank, true};
          if (bad == 0)
            CHECK(true);
          else
            FAIL_CHECK(id.str() << " (fractional inputs): " << bad << " elements outside the error "
                                << "bound; first [" << first << "] error " << first_err
                                << " > bound " << first_bound);
          check_identical_across_ranks(t, got.data(), n * sizeof(T), id.str() + " (fractional)");
        }
      };
      run(type_tag<half>{}, sum_op{}, op_kind::sum);
      run(type_tag<bfloat16>{}, sum_op{}, op_kind::sum);
      run(type_tag<half>{}, avg_op{}, op_kind::avg);
      run(type_tag<bfloat16>{}, avg_op{}, op_kind::avg);
    });
}

// ---------------------------------------------------------------------------------------
// Non-commutative op: allreduce of the order-keeping algorithms and reduce to every root.

template <transport Tr, class Buffers = host_buffers>
void noncommutative_cases(Tr& t, const std::vector<std::size_t>& counts, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  // allreduce through every order-keeping algorithm (and automatic, which must route the op
  // to one); instantiated for these types only, to keep the suites' compile time down
  for (const char* name :
       {"recursive_doubling", "recursive_halving_doubling", "binomial_tree", "automatic"})
    with_algorithm(name, 0, [&]<class Algo>(const Algo& algo) {
      if constexpr (accepts_noncommutative<Algo>()) {
        auto one = [&]<class T>(type_tag<T>) {
          for (std::size_t n : counts)
            for (int ip = 0; ip < 2; ++ip) {
              const case_id id{
                  algorithm_label(algo, 0), type_name<T>(), "noncommutative", n, P, rank, ip == 1};
              allreduce_case<Tr, T>(t, algo, noncommutative_op, op_kind::noncommutative, n, ip == 1,
                                    id, 77 + n, true, b);
            }
        };
        one(type_tag<std::uint8_t>{});
        one(type_tag<std::int16_t>{});
        one(type_tag<std::uint32_t>{});
        one(type_tag<std::int64_t>{});
        one(type_tag<std::uint64_t>{});
      }
    });

  // reduce: rank-order fold at every root, out of place and in place at the root
  auto one = [&]<class T>(type_tag<T>) {
    for (std::size_t n : counts)
      for (int root = 0; root < P; ++root)
        for (int ip = 0; ip < 2; ++ip) {
          const bool in_place = ip == 1;
          const case_data<T> d = make_case<T>(op_kind::noncommutative, P, rank, n, 91 + root);
          auto in = b.template allocate<T>(n);
          auto out = b.template allocate<T>(n);
          b.upload(in, d.input);
          const std::vector<T> sentinel(n, static_cast<T>(0x5a));
          b.upload(out, sentinel);
          T* recv = in_place && rank == root ? in.data() : out.data();
          reduce(t, static_cast<const T*>(in.data()), recv, n, root, noncommutative_op,
                 binomial_tree{}, b.reducer());
          const case_id id{"reduce(root=" + std::to_string(root) + ")",
                           type_name<T>(),
                           "noncommutative",
                           n,
                           P,
                           rank,
                           in_place && rank == root};
          if (rank == root) {
            check_equal(b.download(recv == in.data() ? in : out, n), d.expected, id.str());
            if (recv != in.data())
              check_equal(b.download(in, n), d.input, id.str() + " (input must stay untouched)");
          } else {
            check_equal(b.download(in, n), d.input, id.str() + " (input must stay untouched)");
            check_equal(b.download(out, n), sentinel, id.str() + " (non-root recvbuf untouched)");
          }
        }
  };
  one(type_tag<std::uint32_t>{});
  one(type_tag<std::int64_t>{});
}

// ---------------------------------------------------------------------------------------
// reduce_scatter, allgather, broadcast, reduce with values (float and int32 sum).

template <transport Tr, class Buffers = host_buffers>
void collectives_values(Tr& t, const std::vector<std::size_t>& counts,
                        std::size_t ring_segment_bytes = 0, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  ring rg{};
  if (ring_segment_bytes) rg.max_segment_bytes = ring_segment_bytes;
  auto one = [&]<class T>(type_tag<T>) {
    for (std::size_t n : counts) {
      const additive_inputs<T> in(P, 5 + n);
      // reduce_scatter: block j of rank r's input is x(r, j n + k)
      {
        std::vector<T> input(n * P), want(n);
        for (std::size_t i = 0; i < n * P; ++i) input[i] = in.x(rank, i);
        for (std::size_t k = 0; k < n; ++k) want[k] = from_int<T>(P * in.u(rank * n + k) + in.vsum);
        auto sb = b.template allocate<T>(n * P);
        auto rb = b.template allocate<T>(n);
        b.upload(sb, input);
        reduce_scatter(t, static_cast<const T*>(sb.data()), rb.data(), n, sum_op{}, rg,
                       b.reducer());
        const case_id id{"reduce_scatter", type_name<T>(), "sum", n, P, rank, false};
        check_equal(b.download(rb, n), want, id.str());
        check_equal(b.download(sb, n * P), input, id.str() + " (input must stay untouched)");
      }
      // allgather: rank r contributes x(r, k); out of place and in place
      for (int ip = 0; ip < 2; ++ip) {
        std::vector<T> mine(n), want(n * P);
        for (std::size_t k = 0; k < n; ++k) mine[k] = in.x(rank, k);
        for (int r = 0; r < P; ++r)
          for (std::size_t k = 0; k < n; ++k) want[r * n + k] = in.x(r, k);
        auto rb = b.template allocate<T>(n * P);
        auto sb = b.template allocate<T>(n);
        const case_id id{"allgather", type_name<T>(), "-", n, P, rank, ip == 1};
        if (ip == 1) {
          std::vector<T> init(n * P, from_int<T>(-1));
          std::copy(mine.begin(), mine.end(), init.begin() + rank * n);
          b.upload(rb, init);
          allgather(t, static_cast<const T*>(rb.data() + rank * n), rb.data(), n, rg, b.reducer());
        } else {
          b.upload(sb, mine);
          allgather(t, static_cast<const T*>(sb.data()), rb.data(), n, rg, b.reducer());
          check_equal(b.download(sb, n), mine, id.str() + " (input must stay untouched)");
        }
        const auto got = b.download(rb, n * P);
        check_equal(got, want, id.str());
        check_identical_across_ranks(t, got.data(), got.size() * sizeof(T), id.str());
      }
      // broadcast from every root
      for (int root = 0; root < P; ++root) {
        std::vector<T> want(n), init(n, from_int<T>(-3));
        for (std::size_t k = 0; k < n; ++k) want[k] = in.x(root, k);
        auto buf = b.template allocate<T>(n);
        b.upload(buf, rank == root ? want : init);
        broadcast(t, buf.data(), n, root, binomial_tree{}, b.reducer());
        const case_id id{
            "broadcast(root=" + std::to_string(root) + ")", type_name<T>(), "-", n, P, rank, true};
        check_equal(b.download(buf, n), want, id.str());
      }
      // reduce (sum) to every root; non-root recvbuf untouched
      for (int root = 0; root < P; ++root) {
        std::vector<T> input(n), want(n), sentinel(n, from_int<T>(-7));
        for (std::size_t k = 0; k < n; ++k) {
          input[k] = in.x(rank, k);
          want[k] = from_int<T>(P * in.u(k) + in.vsum);
        }
        auto sb = b.template allocate<T>(n);
        auto rb = b.template allocate<T>(n);
        b.upload(sb, input);
        b.upload(rb, sentinel);
        reduce(t, static_cast<const T*>(sb.data()), rb.data(), n, root, sum_op{}, binomial_tree{},
               b.reducer());
        const case_id id{
            "reduce(root=" + std::to_string(root) + ")", type_name<T>(), "sum", n, P, rank, false};
        check_equal(b.download(rb, n), rank == root ? want : sentinel, id.str());
        check_equal(b.download(sb, n), input, id.str() + " (input must stay untouched)");
      }
    }
  };
  one(type_tag<float>{});
  one(type_tag<std::int32_t>{});
}

// ---------------------------------------------------------------------------------------
// Symbolic proof: every output element holds every rank's contribution exactly once.

/// Runs every allreduce algorithm (in and out of place, ring also with 1-element segments),
/// reduce_scatter, allgather, broadcast and reduce (every root) on `symbolic::rank_set`
/// with `disjoint_union`, input = rank_set::of(rank). Needs P <= 63.
template <transport Tr, class Buffers = host_buffers>
void symbolic_all(Tr& t, std::size_t count, const Buffers& b = {}) {
  using symbolic::rank_set;
  const int P = t.size(), rank = t.rank();
  REQUIRE(P <= rank_set::max_ranks);
  const symbolic::disjoint_union op{};
  const std::size_t n = count;
  const rank_set me = rank_set::of(rank), all = rank_set::all(P);
  const std::vector<rank_set> mine(n, me), want_all(n, all);

  for (std::size_t seg : {std::size_t{0}, sizeof(rank_set)})
    for (const std::string& name : all_algorithms()) {
      if (seg && name != "ring") continue;
      with_algorithm(name, seg, [&]<class Algo>(const Algo& algo) {
        for (int ip = 0; ip < 2; ++ip) {
          const case_id id{
              algorithm_label(algo, seg), "rank_set", "disjoint_union", n, P, rank, ip == 1};
          auto out = b.template allocate<rank_set>(n);
          if (ip == 1) {
            b.upload(out, mine);
            allreduce(t, out.data(), out.data(), n, op, algo, b.reducer());
          } else {
            auto in = b.template allocate<rank_set>(n);
            b.upload(in, mine);
            allreduce(t, static_cast<const rank_set*>(in.data()), out.data(), n, op, algo,
                      b.reducer());
            check_equal(b.download(in, n), mine, id.str() + " (input must stay untouched)");
          }
          check_equal(b.download(out, n), want_all, id.str());
        }
      });
    }
  for (std::size_t seg : {std::size_t{0}, sizeof(rank_set)}) {
    ring rg{};
    if (seg) rg.max_segment_bytes = seg;
    const std::string label = seg ? "{seg=8B}" : "";
    { // reduce_scatter: all P blocks carry my contribution; my block must hold everyone's
      auto in = b.template allocate<rank_set>(n * P);
      auto out = b.template allocate<rank_set>(n);
      b.upload(in, std::vector<rank_set>(n * P, me));
      reduce_scatter(t, static_cast<const rank_set*>(in.data()), out.data(), n, op, rg,
                     b.reducer());
      check_equal(
          b.download(out, n), want_all,
          case_id{"reduce_scatter" + label, "rank_set", "disjoint_union", n, P, rank, false}.str());
    }
    { // allgather: block j must hold exactly rank j
      auto in = b.template allocate<rank_set>(n);
      auto out = b.template allocate<rank_set>(n * P);
      b.upload(in, mine);
      allgather(t, static_cast<const rank_set*>(in.data()), out.data(), n, rg, b.reducer());
      std::vector<rank_set> want(n * P);
      for (int j = 0; j < P; ++j)
        std::fill(want.begin() + j * n, want.begin() + (j + 1) * n, rank_set::of(j));
      check_equal(b.download(out, n * P), want,
                  case_id{"allgather" + label, "rank_set", "-", n, P, rank, false}.str());
    }
  }
  for (int root = 0; root < P; ++root) {
    { // broadcast: everyone ends with exactly the root's contribution
      auto buf = b.template allocate<rank_set>(n);
      b.upload(buf, std::vector<rank_set>(n, rank == root ? me : rank_set{}));
      broadcast(t, buf.data(), n, root, binomial_tree{}, b.reducer());
      check_equal(
          b.download(buf, n), std::vector<rank_set>(n, rank_set::of(root)),
          case_id{"broadcast(root=" + std::to_string(root) + ")", "rank_set", "-", n, P, rank, true}
              .str());
    }
    { // reduce: the root ends with every rank exactly once
      auto in = b.template allocate<rank_set>(n);
      auto out = b.template allocate<rank_set>(n);
      b.upload(in, mine);
      b.upload(out, std::vector<rank_set>(n));
      reduce(t, static_cast<const rank_set*>(in.data()), out.data(), n, root, op, binomial_tree{},
             b.reducer());
      if (rank == root)
        check_equal(b.download(out, n), want_all,
                    case_id{"reduce(root=" + std::to_string(root) + ")", "rank_set",
                            "disjoint_union", n, P, rank, false}
                        .str());
    }
  }
}

// ---------------------------------------------------------------------------------------
// Traffic: closed-form per-rank message and byte counts (see the formulas in
// tests/threads_traffic.cpp and docs/algorithms.md).

namespace traffic_model {

inline int ceil_log2(int P) {
  int lg = 0;
  while ((1 << lg) < P) ++lg;
  return lg;
}
inline std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}
inline std::size_t segment_elems(std::size_t max_segment_bytes, std::size_t elem) {
  return std::max<std::size_t>(1, max_segment_bytes / elem);
}

/// Both directions of `messages` transfers of `bytes` bytes each.
inline traffic symmetric(std::size_t messages, std::size_t bytes) {
  return traffic{messages, bytes, messages, bytes, 0};
}

/// Ring allreduce, rank r: sends every chunk but c_r (reduce-scatter) and every chunk but
/// c_{r+1} (allgather), receives every chunk but c_{r-1} and every chunk but c_r; chunk j
/// has c_j = chunk_size(n, P, j) elements and travels as ceil(c_j / s) messages,
/// s = max(1, max_segment_bytes / sizeof(T)).
inline traffic ring_allreduce(int P, int r, std::size_t n, std::size_t elem,
                              std::size_t max_segment_bytes) {
  traffic x{};
  if (P == 1 || n == 0) return x;
  const std::size_t s = segment_elems(max_segment_bytes, elem);
  auto c = [&](int j) { return detail::chunk_size(n, P, detail::mod(j, P)); };
  for (int j = 0; j < P; ++j) {
    const std::size_t msgs = ceil_div(c(j), s);
    if (j != r) { // reduce-scatter send
      x.messages_sent += msgs;
      x.bytes_sent += c(j) * elem;
    }
    if (j != detail::mod(r + 1, P)) { // allgather send
      x.messages_sent += msgs;
      x.bytes_sent += c(j) * elem;
    }
    if (j != detail::mod(r - 1, P)) { // reduce-scatter receive
      x.messages_received += msgs;
      x.bytes_received += c(j) * elem;
    }
    if (j != r) { // allgather receive
      x.messages_received += msgs;
      x.bytes_received += c(j) * elem;
    }
  }
  return x;
}

/// Recursive doubling, P' = floor_pow2(P), e = P - P': ranks >= 2e exchange the whole
/// buffer log2 P' times; odd ranks < 2e also absorb their even partner's buffer and send
/// the result back (log2 P' + 1 each way); even ranks < 2e send once and receive once.
inline traffic recursive_doubling(int P, int r, std::size_t n, std::size_t elem) {
  if (P == 1 || n == 0) return {};
  const int core = detail::floor_pow2(P), e = P - core, lg = ceil_log2(core);
  const std::size_t N = n * elem;
  if (r < 2 * e && r % 2 == 0) return symmetric(1, N);
  if (r < 2 * e) return symmetric(static_cast<std::size_t>(lg) + 1, (lg + 1) * N);
  return symmetric(static_cast<std::size_t>(lg), lg * N);
}

/// Recursive halving-doubling: core rank q (renumbered after the fold) halves its range
/// L_0 = n, L_{i+1} = bit_i(q) ? ceil(L_i / 2) : floor(L_i / 2) for i < log2 P'; step i
/// sends L_i - L_{i+1} and receives L_{i+1} (reduce-scatter), then the allgather reverses
/// it, so bytes each way = elem * sum_i L_i (= 2 (P'-1)/P' N when P' divides n); a message
/// per non-empty half. Fold as in recursive doubling (+1 message of N each way for odd
/// ranks < 2e; even ranks < 2e send and receive N once).
inline traffic recursive_halving_doubling(int P, int r, std::size_t n, std::size_t elem) {
  if (P == 1 || n == 0) return {};
  const int core = detail::floor_pow2(P), e = P - core;
  const std::size_t N = n * elem;
  if (r < 2 * e && r % 2 == 0) return symmetric(1, N);
  const int q = r < 2 * e ? r / 2 : r - e;
  traffic x{};
  std::size_t L = n;
  for (int i = 0; (1 << i) < core; ++i) {
    const std::size_t keep = ((q >> i) & 1) ? L - L / 2 : L / 2, give = L - keep;
    const std::size_t msgs = (keep ? 1 : 0) + (give ? 1 : 0);
    x.messages_sent += msgs;
    x.messages_received += msgs;
    x.bytes_sent += L * elem;
    x.bytes_received += L * elem;
    L = keep;
  }
  if (r < 2 * e) {
    x.messages_sent += 1;
    x.messages_received += 1;
    x.bytes_sent += N;
    x.bytes_received += N;
  }
  return x;
}

/// Children of virtual rank v in a binomial tree over P ranks: masks 2^j below v's lowest
/// set bit (all masks < P for v = 0) with v + 2^j < P.
inline int binomial_children(int v, int P) {
  int c = 0;
  for (int m = 1; m < P; m <<= 1) {
    if (v & m) break;
    if (v + m < P) ++c;
  }
  return c;
}

/// Binomial reduce to `root` (v = (r - root) mod P): receive N from each child, send N to
/// the parent unless v = 0.
inline traffic binomial_reduce(int P, int r, std::size_t n, std::size_t elem, int root) {
  if (P == 1 || n == 0) return {};
  const int v = detail::mod(r - root, P), kids = binomial_children(v, P);
  const std::size_t N = n * elem;
  return traffic{v ? 1u : 0u, v ? N : 0, static_cast<std::size_t>(kids), kids * N, 0};
}

/// Binomial broadcast from `root`: the mirror image of `binomial_reduce`.
inline traffic binomial_broadcast(int P, int r, std::size_t n, std::size_t elem, int root) {
  const traffic x = binomial_reduce(P, r, n, elem, root);
  return traffic{x.messages_received, x.bytes_received, x.messages_sent, x.bytes_sent, 0};
}

/// Binomial allreduce = reduce to 0 + broadcast from 0: children(r) + [r != 0] messages of
/// N each way (rank 0: ceil(log2 P) each way).
inline traffic binomial_allreduce(int P, int r, std::size_t n, std::size_t elem) {
  const traffic a = binomial_reduce(P, r, n, elem, 0), b = binomial_broadcast(P, r, n, elem, 0);
  return traffic{a.messages_sent + b.messages_sent, a.bytes_sent + b.bytes_sent,
                 a.messages_received + b.messages_received, a.bytes_received + b.bytes_received, 0};
}

/// Ring reduce-scatter and allgather of blocks of n: P-1 blocks each way, each block as
/// ceil(n / s) messages.
inline traffic ring_blocks(int P, std::size_t n, std::size_t elem, std::size_t max_segment_bytes) {
  if (P == 1 || n == 0) return {};
  const std::size_t s = segment_elems(max_segment_bytes, elem);
  return symmetric((P - 1) * ceil_div(n, s), (P - 1) * n * elem);
}

} // namespace traffic_model

/// Checks `got` against `want` field by field.
inline void check_traffic(const traffic& got, const traffic& want, const std::string& what) {
  if (got == want) {
    CHECK(true);
    return;
  }
  FAIL_CHECK(what << ": sent " << got.messages_sent << " msgs/" << got.bytes_sent << " B, received "
                  << got.messages_received << " msgs/" << got.bytes_received
                  << " B; closed form says sent " << want.messages_sent << "/" << want.bytes_sent
                  << ", received " << want.messages_received << "/" << want.bytes_received);
}

/// Runs each algorithm and collective under `counting<Tr>` and compares each rank's
/// traffic with the closed forms of `traffic_model` (float elements).
template <transport Tr>
void traffic_cases(Tr& t, const std::vector<std::size_t>& counts,
                   const std::vector<std::size_t>& ring_segments = {std::size_t{1} << 20, 8, 12}) {
  using T = float;
  namespace m = traffic_model;
  counting<Tr> c(t);
  const int P = t.size(), rank = t.rank();
  for (std::size_t n : counts) {
    std::vector<T> in(n * P, 1.0f), out(n * P, 0.0f);
    auto label = [&](std::string what) {
      return what + " count=" + std::to_string(n) + " P=" + std::to_string(P) +
             " rank=" + std::to_string(rank);
    };
    for (std::size_t seg : ring_segments) {
      ring rg{};
      rg.max_segment_bytes = seg;
      c.reset();
      allreduce(c, in.data(), out.data(), n, sum_op{}, rg);
      check_traffic(c.counts(), m::ring_allreduce(P, rank, n, sizeof(T), seg),
                    label("ring{seg=" + std::to_string(seg) + "B} allreduce"));
      c.reset();
      reduce_scatter(c, in.data(), out.data(), n, sum_op{}, rg);
      check_traffic(c.counts(), m::ring_blocks(P, n, sizeof(T), seg),
                    label("ring{seg=" + std::to_string(seg) + "B} reduce_scatter"));
      c.reset();
      allgather(c, in.data(), out.data(), n, rg);
      check_traffic(c.counts(), m::ring_blocks(P, n, sizeof(T), seg),
                    label("ring{seg=" + std::to_string(seg) + "B} allgather"));
    }
    for (int ip = 0; ip < 2; ++ip) {
      T* src = ip ? out.data() : in.data();
      c.reset();
      allreduce(c, src, out.data(), n, sum_op{}, recursive_doubling{});
      check_traffic(c.counts(), m::recursive_doubling(P, rank, n, sizeof(T)),
                    label("recursive_doubling"));
      c.reset();
      allreduce(c, src, out.data(), n, sum_op{}, recursive_halving_doubling{});
      check_traffic(c.counts(), m::recursive_halving_doubling(P, rank, n, sizeof(T)),
                    label("recursive_halving_doubling"));
      c.reset();
      allreduce(c, src, out.data(), n, sum_op{}, binomial_tree{});
      check_traffic(c.counts(), m::binomial_allreduce(P, rank, n, sizeof(T)),
                    label("binomial_tree"));
    }
    for (int root = 0; root < P; ++root) {
      c.reset();
      broadcast(c, out.data(), n, root);
      check_traffic(c.counts(), m::binomial_broadcast(P, rank, n, sizeof(T), root),
                    label("broadcast root=" + std::to_string(root)));
      c.reset();
      reduce(c, in.data(), out.data(), n, root, sum_op{});
      check_traffic(c.counts(), m::binomial_reduce(P, rank, n, sizeof(T), root),
                    label("reduce root=" + std::to_string(root)));
      // a non-commutative reduce goes to rank 0 in rank order, then 0 forwards to the root
      std::vector<std::uint32_t> ui(n, 1u), uo(n, 0u);
      c.reset();
      reduce(c, ui.data(), uo.data(), n, root, noncommutative_op);
      traffic want = m::binomial_reduce(P, rank, n, sizeof(std::uint32_t), 0);
      if (root != 0 && n != 0 && rank == 0) {
        want.messages_sent += 1;
        want.bytes_sent += n * sizeof(std::uint32_t);
      }
      if (root != 0 && n != 0 && rank == root) {
        want.messages_received += 1;
        want.bytes_received += n * sizeof(std::uint32_t);
      }
      check_traffic(c.counts(), want, label("reduce(noncommutative) root=" + std::to_string(root)));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Bad input.

/// Runs `f`, expects exception type E whose message contains every string of `needles`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& needles, const std::string& what) {
  try {
    f();
    FAIL_CHECK(what << ": no exception");
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& s : needles)
      if (msg.find(s) == std::string::npos)
        FAIL_CHECK(what << ": message '" << msg << "' does not mention '" << s << "'");
    CHECK(true);
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": wrong exception type: " << e.what());
  }
}

/// Argument errors every rank detects locally before any communication: null pointers with
/// non-zero count, overlapping but unequal ranges, overflowing counts, roots out of range,
/// span size mismatch. Each must throw `invalid_argument` naming the argument and the rank,
/// and leave the (out-of-place) input untouched. Every rank calls it.
template <transport Tr, class Buffers = host_buffers>
void bad_input_cases(Tr& t, const Buffers& b = {}) {
  using T = float;
  const int P = t.size(), rank = t.rank();
  const std::string at = "[rank " + std::to_string(rank) + "]";
  constexpr std::size_t n = 8;
  std::vector<T> init(2 * n * P);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<T>(i + 1);
  auto in = b.template allocate<T>(init.size());
  auto out = b.template allocate<T>(init.size());
  b.upload(in, init);
  T* const ip = in.data();
  T* const outp = out.data();
  auto untouched = [&](const std::string& what) {
    check_equal(b.download(in, init.size()), init, what + ": input must stay untouched");
  };
  auto red = b.reducer();
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;

  expect_error<invalid_argument>([&] { allreduce(t, static_cast<const T*>(nullptr), outp, n); },
                                 {"allreduce", "sendbuf", "null", at}, "allreduce null sendbuf");
  expect_error<invalid_argument>(
      [&] { allreduce(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n); },
      {"allreduce", "recvbuf", "null", at}, "allreduce null recvbuf");
  untouched("allreduce null recvbuf");
  expect_error<invalid_argument>(
      [&] { allreduce(t, static_cast<const T*>(ip), ip + 1, n, sum_op{}, ring{}, red); },
      {"allreduce", "overlap", at}, "allreduce overlapping ranges");
  untouched("allreduce overlapping ranges");
  expect_error<invalid_argument>(
      [&] {
        allreduce(t, static_cast<const T*>(ip + 3), ip, n, sum_op{}, recursive_doubling{}, red);
      },
      {"allreduce", "overlap", at}, "allreduce overlapping ranges (recv before send)");
  untouched("allreduce overlapping ranges (recv before send)");
  expect_error<invalid_argument>(
      [&] { allreduce(t, static_cast<const T*>(ip), outp, huge, sum_op{}, ring{}, red); },
      {"allreduce", "count", "overflows", at}, "allreduce count overflow");
  untouched("allreduce count overflow");
  expect_error<invalid_argument>(
      [&] {
        allreduce(t, std::span<const T>(ip, n), std::span<T>(outp, n - 1), sum_op{}, ring{}, red);
      },
      {"allreduce", "sendbuf", "recvbuf", std::to_string(n), std::to_string(n - 1), at},
      "allreduce span size mismatch");
  untouched("allreduce span size mismatch");

  expect_error<invalid_argument>(
      [&] { reduce_scatter(t, static_cast<const T*>(nullptr), outp, n); },
      {"reduce_scatter", "sendbuf", "null", at}, "reduce_scatter null sendbuf");
  expect_error<invalid_argument>(
      [&] { reduce_scatter(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n); },
      {"reduce_scatter", "recvbuf", "null", at}, "reduce_scatter null recvbuf");
  expect_error<invalid_argument>(
      [&] {
        reduce_scatter(t, static_cast<const T*>(ip), outp,
                       std::numeric_limits<std::size_t>::max() / 2 / P + 1, sum_op{}, ring{}, red);
      },
      {"reduce_scatter", "count", "overflows", at}, "reduce_scatter count x P overflow");
  expect_error<invalid_argument>(
      [&] { reduce_scatter(t, static_cast<const T*>(ip), ip + 1, n, sum_op{}, ring{}, red); },
      {"reduce_scatter", "overlap", at}, "reduce_scatter overlapping ranges");
  untouched("reduce_scatter errors");

  expect_error<invalid_argument>([&] { allgather(t, static_cast<const T*>(nullptr), outp, n); },
                                 {"allgather", "sendbuf", "null", at}, "allgather null sendbuf");
  expect_error<invalid_argument>(
      [&] { allgather(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n); },
      {"allgather", "recvbuf", "null", at}, "allgather null recvbuf");
  expect_error<invalid_argument>(
      [&] { allgather(t, static_cast<const T*>(ip + rank * n + 1), ip, n, ring{}, red); },
      {"allgather", "overlap", at}, "allgather overlap (not the in-place block)");
  untouched("allgather errors");

  for (int root : {-1, P, P + 5})
    expect_error<invalid_argument>([&] { broadcast(t, outp, n, root); },
                                   {"broadcast", "root " + std::to_string(root), at},
                                   "broadcast root out of range");
  expect_error<invalid_argument>([&] { broadcast(t, static_cast<T*>(nullptr), n, 0); },
                                 {"broadcast", "buffer", "null", at}, "broadcast null buffer");
  for (int root : {-1, P})
    expect_error<invalid_argument>([&] { reduce(t, static_cast<const T*>(ip), outp, n, root); },
                                   {"reduce", "root " + std::to_string(root), at},
                                   "reduce root out of range");
  expect_error<invalid_argument>([&] { reduce(t, static_cast<const T*>(nullptr), outp, n, 0); },
                                 {"reduce", "sendbuf", "null", at}, "reduce null sendbuf");
  expect_error<invalid_argument>(
      [&] { reduce(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n, rank); },
      {"reduce", "recvbuf", "null", at}, "reduce null recvbuf at the root");
  expect_error<invalid_argument>([&] { reduce(t, static_cast<const T*>(ip), outp, huge, 0); },
                                 {"reduce", "count", "overflows", at}, "reduce count overflow");
  untouched("reduce errors");

  // zero counts are valid with null pointers: every rank takes part, nothing moves
  allreduce(t, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), 0);
  broadcast(t, static_cast<T*>(nullptr), 0, 0);
  CHECK(true);
}

/// Malformed `parse_selection` strings (no transport needed).
inline void bad_selection_cases() {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ring", "ring"},            // no colon
      {"ring:1K", "ring:1K"},      // no range
      {"foo:0-8K", "foo"},         // unknown algorithm
      {"ring:8K-1K", "min > max"}, // reversed range
      {"ring:1X-2K", "1X"},        // bad suffix
      {"ring:1KB-2K", "1KB"},      // trailing garbage
      {"ring:-5", "bad size"},     // empty min
      {"ring:0-", "bad size"},     // empty max
      {"ring:99999999999999999999999-max", "too large"},
      {"ring:17179869184G-max", "too large"}, // overflows after the suffix
      {"recursive_doubling:0-8K;bogus", "bogus"},
  };
  for (const auto& [text, needle] : bad)
    expect_error<invalid_argument>([&] { (void)parse_selection(text); }, {needle},
                                   "parse_selection(\"" + text + "\")");
  // and well-formed ones parse to the documented rules
  const auto rules = parse_selection("ring:1M-max;recursive_doubling:0-8K;");
  REQUIRE(rules.size() == 2);
  CHECK(rules[0].algorithm == algorithm_id::ring);
  CHECK(rules[0].min_bytes == (std::size_t{1} << 20));
  CHECK(rules[0].max_bytes == std::numeric_limits<std::size_t>::max());
  CHECK(rules[1].algorithm == algorithm_id::recursive_doubling);
  CHECK(rules[1].min_bytes == 0);
  CHECK(rules[1].max_bytes == 8192);
}

/// A peer that never answers: every rank except `absent` calls an out-of-place allreduce
/// of `n` floats with `Algo`. Each must throw, naming its rank, well before 3x the transport
/// timeout, with its input untouched: `timeout_error` no sooner than the timeout (the rank
/// that gave up waiting), or `aborted_error` (a rank whose transport the first failure
/// broke: failed collectives abort their transport, so peers stop early). Meant for
/// transports whose timeout is short (e.g. 200 ms); `absent` just returns.
template <transport Tr, class Algo, class Buffers = host_buffers>
void absent_peer_case(Tr& t, int absent, const Algo& algo, std::size_t n = 1000,
                      const Buffers& b = {}) {
  using T = float;
  const int rank = t.rank();
  if (rank == absent) return;
  std::vector<T> init(n);
  for (std::size_t i = 0; i < n; ++i) init[i] = static_cast<T>(i % 17);
  auto in = b.template allocate<T>(n);
  auto out = b.template allocate<T>(n);
  b.upload(in, init);
  const std::string what = std::string(Algo::name) + " with rank " + std::to_string(absent) +
                           " absent, rank " + std::to_string(rank);
  const std::string rank_tag = "[rank " + std::to_string(rank) + "]";
  const auto start = clock::now();
  try {
    allreduce(t, static_cast<const T*>(in.data()), out.data(), n, sum_op{}, algo, b.reducer());
    FAIL_CHECK(what << ": no exception");
  } catch (const timeout_error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(rank_tag) != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(msg.find("timed out") != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(clock::now() - start >= t.timeout(), what << ": gave up before the timeout");
  } catch (const aborted_error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(rank_tag) != std::string::npos, what << ": " << msg);
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": wrong exception type: " << e.what());
  }
  const auto elapsed = clock::now() - start;
  CHECK_MESSAGE(elapsed < 3 * t.timeout() + std::chrono::seconds(1),
                what << ": took " << std::chrono::duration<double>(elapsed).count() << " s");
  check_equal(b.download(in, n), init, what + ": input must stay untouched");
}

} // namespace tcoll::testing
