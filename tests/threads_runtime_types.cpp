// The runtime-typed entry points (reduce/runtime.hpp): runtime_op's kernel of every
// (scalar_type, reduce_kind) that applies is the typed op's loop bit for bit (fractional
// floats, random integer bits, every aliasing case); allreduce, reduce_scatter and reduce
// with the type and op as values give the typed calls' results bit for bit on every rank
// for every element size, and so do typed calls with the CPU reducer, which run on the same
// runtime-typed instantiations (communicator.hpp); kinds that do not apply are refused
// before any message.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tcoll/tcoll.hpp>

namespace {

using tcoll::reduce_kind;
using tcoll::scalar_type;

/// The typed op of `kind`: the test's own map, independent of tcoll::visit_reduce_kind, which
/// builds the kernel table under test.
template <class F>
void visit_op(reduce_kind kind, F&& f) {
  switch (kind) {
  case reduce_kind::sum:
    return f(tcoll::sum_op{});
  case reduce_kind::prod:
    return f(tcoll::prod_op{});
  case reduce_kind::min:
    return f(tcoll::min_op{});
  case reduce_kind::max:
    return f(tcoll::max_op{});
  case reduce_kind::avg:
    return f(tcoll::avg_op{});
  case reduce_kind::band:
    return f(tcoll::band_op{});
  case reduce_kind::bor:
    return f(tcoll::bor_op{});
  case reduce_kind::bxor:
    return f(tcoll::bxor_op{});
  case reduce_kind::land:
    return f(tcoll::land_op{});
  case reduce_kind::lor:
    return f(tcoll::lor_op{});
  case reduce_kind::lxor:
    return f(tcoll::lxor_op{});
  }
}

/// Inputs of `rank`: fractional floats of mixed magnitude (near 1 for prod, so products
/// stay finite), random integer bits (a quarter zeros, so the logical kinds see both).
template <class T>
std::vector<T> inputs(std::size_t n, int rank, reduce_kind kind) {
  std::mt19937_64 gen(1234 + 77 * rank);
  std::vector<T> v(n);
  for (auto& x : v) {
    const std::uint64_t bits = gen();
    if constexpr (std::is_integral_v<T>) {
      x = bits % 4 == 0 ? T(0) : static_cast<T>(bits >> 7);
    } else {
      const double frac = static_cast<double>(bits >> 11) * 0x1.0p-53; // [0, 1)
      const double value =
          kind == reduce_kind::prod ? 0.75 + 0.5 * frac : (frac - 0.3) * (1 + (bits % 7) * 97.3);
      x = T(static_cast<float>(value));
      if constexpr (sizeof(T) >= 8) x = static_cast<T>(value);
    }
  }
  return v;
}

bool same_bytes(const void* a, const void* b, std::size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

/// Do `a` and `b` hold the same value bits in each of `n` elements? x87's long double
/// stores 10 value bytes in 16; the other 6 are whatever the memory held before the store
/// (scratch buffers are not cleared), on the typed path as on the runtime one.
template <class T>
bool same_values(const T* a, const T* b, std::size_t n) {
  constexpr std::size_t value_bytes =
      std::is_same_v<T, long double> && std::numeric_limits<long double>::digits == 64 ? 10
                                                                                       : sizeof(T);
  for (std::size_t i = 0; i < n; ++i)
    if (!same_bytes(a + i, b + i, value_bytes)) return false;
  return true;
}

constexpr int ranks = 5;        // not a power of two
constexpr std::size_t n = 1003; // not divisible by the rank count

} // namespace

/// Is `Op` one of the bitwise or logical ops (integers only)?
template <class Op>
constexpr bool integer_only_op() {
  return std::is_same_v<Op, tcoll::band_op> || std::is_same_v<Op, tcoll::bor_op> ||
         std::is_same_v<Op, tcoll::bxor_op> || std::is_same_v<Op, tcoll::land_op> ||
         std::is_same_v<Op, tcoll::lor_op> || std::is_same_v<Op, tcoll::lxor_op>;
}

TEST_CASE("runtime_op reduces every (type, kind) with the typed op's loop, bit for bit") {
  int cases = 0;
  for (int ti = 0; ti < tcoll::scalar_type_count; ++ti)
    for (int ki = 0; ki < tcoll::reduce_kind_count; ++ki) {
      const auto type = static_cast<scalar_type>(ti);
      const auto kind = static_cast<reduce_kind>(ki);
      CAPTURE(std::string(tcoll::name_of(type)));
      CAPTURE(std::string(tcoll::name_of(kind)));
      if (!tcoll::reduces(type, kind)) {
        CHECK_THROWS_AS(tcoll::runtime_op(type, kind), tcoll::invalid_argument);
        continue;
      }
      ++cases;
      const tcoll::runtime_op rt(type, kind);
      CHECK(rt.type() == type);
      CHECK(rt.kind() == kind);
      tcoll::visit_scalar_type(type, [&]<class T>(tcoll::type_tag<T>) {
        REQUIRE(sizeof(T) == tcoll::size_of(type));
        REQUIRE(tcoll::scalar_type_of<T>() == type);
        visit_op(kind, [&]<class Op>(Op op) {
          if constexpr (std::is_integral_v<T> || !integer_only_op<Op>()) {
            const tcoll::cpu_reducer red;
            const auto a = inputs<T>(n, 1, kind), b = inputs<T>(n, 2, kind);
            std::vector<T> want(n), got(n);
            red.reduce(op, want.data(), a.data(), b.data(), n); // dst distinct
            rt.reduce_arrays(got.data(), a.data(), b.data(), n);
            CHECK(same_values(got.data(), want.data(), n));
            auto want_left = a, got_left = a; // dst == a
            red.reduce(op, want_left.data(), want_left.data(), b.data(), n);
            rt.reduce_arrays(got_left.data(), got_left.data(), b.data(), n);
            CHECK(same_values(got_left.data(), want_left.data(), n));
            auto want_right = b, got_right = b; // dst == b: op(a, b), not op(b, a)
            red.reduce(op, want_right.data(), a.data(), want_right.data(), n);
            rt.reduce_arrays(got_right.data(), a.data(), got_right.data(), n);
            CHECK(same_values(got_right.data(), want_right.data(), n));
            if constexpr (std::is_same_v<Op, tcoll::avg_op>) {
              red.finalize(op, want.data(), n, ranks);
              tcoll::finalize_average(type, got.data(), n, ranks);
              CHECK(same_values(got.data(), want.data(), n));
            }
          }
        });
      });
    }
  CHECK(cases == 8 * 11 + 5 * 5); // every (type, kind) that applies was run
}

namespace {

/// The CPU reducer under a name of its own: a typed call with it is not lowered to the
/// runtime-typed instantiations (communicator.hpp, `lowers_reduction`), so it runs the
/// algorithms' typed instantiations, the reference of these tests.
struct typed_reducer : tcoll::cpu_reducer {};

/// allreduce (ring), reduce_scatter and reduce of T under Op, typed (the reference), typed with
/// the CPU reducer (lowered to the runtime-typed path where T and Op allow) and runtime-typed,
/// on 5 threads: the same bits on every rank, inputs untouched.
template <class T, class Op>
void check_against_typed(reduce_kind kind) {
  const scalar_type type = tcoll::scalar_type_of<T>();
  const Op op{};
  CAPTURE(std::string(tcoll::name_of(type)));
  CAPTURE(std::string(tcoll::name_of(kind)));
  std::vector<std::vector<T>> typed(ranks), lowered(ranks), runtime(ranks), scattered(ranks),
      scattered_lowered(ranks), scattered_rt(ranks), reduced(ranks), reduced_lowered(ranks),
      reduced_rt(ranks);
  std::vector<int> input_kept(ranks, 0);
  tcoll::thread_team team(ranks);
  team.run([&](tcoll::thread_transport& t) {
    const int r = t.rank();
    const auto in = inputs<T>(n * ranks, r, kind);
    const auto copy = in;
    typed[r].resize(n);
    lowered[r].resize(n);
    runtime[r].resize(n);
    tcoll::allreduce(t, in.data(), typed[r].data(), n, op, tcoll::ring{}, typed_reducer{});
    tcoll::allreduce(t, in.data(), lowered[r].data(), n, op, tcoll::ring{});
    tcoll::allreduce(t, static_cast<const void*>(in.data()), runtime[r].data(), n, type, kind,
                     tcoll::ring{});
    scattered[r].resize(n / 4);
    scattered_lowered[r].resize(n / 4);
    scattered_rt[r].resize(n / 4);
    tcoll::reduce_scatter(t, in.data(), scattered[r].data(), n / 4, op, tcoll::ring{},
                          typed_reducer{});
    tcoll::reduce_scatter(t, in.data(), scattered_lowered[r].data(), n / 4, op);
    tcoll::reduce_scatter(t, static_cast<const void*>(in.data()), scattered_rt[r].data(), n / 4,
                          type, kind);
    reduced[r].resize(n);
    reduced_lowered[r].resize(n);
    reduced_rt[r].resize(n);
    tcoll::reduce(t, in.data(), reduced[r].data(), n, 2, op, tcoll::binomial_tree{},
                  typed_reducer{});
    tcoll::reduce(t, in.data(), reduced_lowered[r].data(), n, 2, op);
    tcoll::reduce(t, static_cast<const void*>(in.data()), reduced_rt[r].data(), n, 2, type, kind);
    input_kept[r] = in == copy;
  });
  for (int r = 0; r < ranks; ++r) {
    CAPTURE(r);
    CHECK(input_kept[r]);
    CHECK(same_values(runtime[r].data(), typed[r].data(), n));
    CHECK(same_values(lowered[r].data(), typed[r].data(), n));
    CHECK(same_values(runtime[r].data(), runtime[0].data(), n));
    CHECK(same_values(scattered_rt[r].data(), scattered[r].data(), n / 4));
    CHECK(same_values(scattered_lowered[r].data(), scattered[r].data(), n / 4));
  }
  CHECK(same_values(reduced_rt[2].data(), reduced[2].data(), n));
  CHECK(same_values(reduced_lowered[2].data(), reduced[2].data(), n));
}

} // namespace

TEST_CASE("runtime-typed allreduce, reduce_scatter and reduce: every element size matches the "
          "typed calls bit for bit") {
  // Algorithms see only the element size and the reducer's calls, and the kernels are the
  // typed loops (above): one (type, kind) per size, floats where the order shows. Each pair
  // is instantiated on its own (a visit over all of them would instantiate every pairing).
  check_against_typed<std::int8_t, tcoll::bxor_op>(reduce_kind::bxor);
  check_against_typed<tcoll::half, tcoll::sum_op>(reduce_kind::sum);
  check_against_typed<tcoll::bfloat16, tcoll::avg_op>(reduce_kind::avg);
  check_against_typed<float, tcoll::sum_op>(reduce_kind::sum);
  check_against_typed<float, tcoll::avg_op>(reduce_kind::avg);
  check_against_typed<std::int32_t, tcoll::min_op>(reduce_kind::min);
  check_against_typed<double, tcoll::prod_op>(reduce_kind::prod);
  check_against_typed<std::uint64_t, tcoll::land_op>(reduce_kind::land);
  check_against_typed<long double, tcoll::sum_op>(reduce_kind::sum);
}

namespace {

/// float under Op, in place with recursive halving-doubling and out of place with
/// automatic, typed and runtime-typed.
template <class Op>
void check_float_in_place(reduce_kind kind) {
  CAPTURE(std::string(tcoll::name_of(kind)));
  std::vector<std::vector<float>> typed(ranks), runtime(ranks), automatic(ranks),
      automatic_rt(ranks);
  tcoll::thread_team team(ranks);
  team.run([&](tcoll::thread_transport& t) {
    const int r = t.rank();
    typed[r] = runtime[r] = inputs<float>(n, r, kind);
    tcoll::allreduce(t, typed[r].data(), typed[r].data(), n, Op{},
                     tcoll::recursive_halving_doubling{}, typed_reducer{});
    tcoll::allreduce(t, runtime[r].data(), runtime[r].data(), n, scalar_type::float32, kind,
                     tcoll::recursive_halving_doubling{});
    const std::vector<float> a = inputs<float>(n, r, kind);
    automatic[r].resize(n);
    automatic_rt[r].resize(n);
    tcoll::allreduce(t, a.data(), automatic[r].data(), n, Op{}, tcoll::automatic{},
                     typed_reducer{});
    tcoll::allreduce(t, static_cast<const void*>(a.data()), automatic_rt[r].data(), n,
                     scalar_type::float32, kind);
  });
  for (int r = 0; r < ranks; ++r) {
    CAPTURE(r);
    CHECK(same_bytes(runtime[r].data(), typed[r].data(), n * sizeof(float)));
    CHECK(same_bytes(automatic_rt[r].data(), automatic[r].data(), n * sizeof(float)));
  }
}

} // namespace

TEST_CASE("runtime-typed allreduce over recursive halving-doubling and automatic, in place") {
  check_float_in_place<tcoll::sum_op>(reduce_kind::sum);
  check_float_in_place<tcoll::avg_op>(reduce_kind::avg);
  check_float_in_place<tcoll::max_op>(reduce_kind::max);
}

TEST_CASE("runtime-typed allgather, broadcast, alltoall, gather and scatter move what the typed "
          "calls move") {
  // fractional doubles and 2-byte halves (the element size decides the blocks' extents)
  constexpr std::size_t m = 7;
  const int P = ranks;
  const auto p = static_cast<std::size_t>(P);
  auto value = [](int rank, std::size_t i) { return 0.375 + rank + static_cast<double>(i) / 64; };
  std::vector<int> ok(static_cast<std::size_t>(P), 0);
  tcoll::thread_team team(P);
  team.run([&](tcoll::thread_transport& t) {
    const int r = t.rank(), root = P - 1;
    std::vector<double> blocks(m * p), mine(m);
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = value(r, i);
    for (std::size_t i = 0; i < m; ++i) mine[i] = value(r, i);
    bool same = true;
    auto check = [&](const auto& got, const auto& want) {
      same = same && got.size() == want.size() &&
             (got.empty() || same_bytes(got.data(), want.data(), got.size() * sizeof(got[0])));
    };
    { // allgather, and alltoall, of doubles
      std::vector<double> typed(m * p), runtime(m * p, -1.0);
      tcoll::allgather(t, mine.data(), typed.data(), m);
      tcoll::allgather(t, static_cast<const void*>(mine.data()), runtime.data(), m,
                       scalar_type::float64);
      check(runtime, typed);
      std::fill(runtime.begin(), runtime.end(), -1.0);
      tcoll::alltoall(t, blocks.data(), typed.data(), m);
      tcoll::alltoall(t, static_cast<const void*>(blocks.data()), runtime.data(), m,
                      scalar_type::float64);
      check(runtime, typed);
    }
    { // broadcast of halves (2-byte elements)
      std::vector<tcoll::half> typed(m), runtime(m);
      for (std::size_t i = 0; i < m; ++i)
        typed[i] = runtime[i] = tcoll::half(static_cast<float>(value(r, i)));
      tcoll::broadcast(t, typed.data(), m, root);
      tcoll::broadcast(t, static_cast<void*>(runtime.data()), m, root, scalar_type::float16);
      check(runtime, typed);
    }
    { // gather to and scatter from the last rank
      std::vector<double> typed(r == root ? m * p : 0), runtime(typed.size(), -1.0);
      tcoll::gather(t, mine.data(), typed.data(), m, root);
      tcoll::gather(t, static_cast<const void*>(mine.data()), runtime.data(), m, root,
                    scalar_type::float64);
      check(runtime, typed);
      std::vector<double> part(m), part_rt(m, -1.0);
      tcoll::scatter(t, blocks.data(), part.data(), m, root);
      tcoll::scatter(t, static_cast<const void*>(blocks.data()), part_rt.data(), m, root,
                     scalar_type::float64);
      check(part_rt, part);
      // and the typed results are the root's blocks: the comparison is not of two wrong ones
      same = same && part[0] == value(root, static_cast<std::size_t>(r) * m);
    }
    ok[static_cast<std::size_t>(r)] = same;
  });
  for (int r = 0; r < P; ++r) {
    CAPTURE(r);
    CHECK(ok[static_cast<std::size_t>(r)] == 1);
  }
}

TEST_CASE("a reduction that does not apply to the type is refused before any message") {
  CHECK_THROWS_WITH_AS(tcoll::runtime_op(scalar_type::float32, reduce_kind::band, 3),
                       doctest::Contains("op: band does not apply to float elements"),
                       tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::runtime_op(static_cast<scalar_type>(200), reduce_kind::sum),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::visit_element_size(3, [](auto) {}), tcoll::invalid_argument);
  std::vector<std::string> errors(3);
  std::vector<int> after(3, 0);
  tcoll::thread_team team(3);
  team.run([&](tcoll::thread_transport& t) {
    const int r = t.rank();
    std::vector<double> in(10, 0.25 * r), out(10, -1.0);
    try {
      tcoll::allreduce(t, static_cast<const void*>(in.data()), out.data(), in.size(),
                       scalar_type::float64, reduce_kind::lxor);
    } catch (const tcoll::invalid_argument& e) {
      errors[r] = e.what();
    }
    // Nothing was written and the transport still works (no message was sent).
    const bool untouched = in == std::vector<double>(10, 0.25 * r) && out[0] == -1.0;
    tcoll::allreduce(t, static_cast<const void*>(in.data()), out.data(), in.size(),
                     scalar_type::float64, reduce_kind::sum);
    after[r] = untouched && out[9] == 0.75;
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(errors[r].find("lxor does not apply to double") != std::string::npos);
    CHECK(errors[r].find("rank " + std::to_string(r)) != std::string::npos);
    CHECK(after[r]);
  }
}
