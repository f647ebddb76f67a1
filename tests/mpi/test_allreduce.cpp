// tcoll allreduce on mpi_transport: every algorithm and passthrough (MPI_Allreduce) against
// expectations computed here in wide integer/double arithmetic, over element types, ops,
// counts and in/out of place; bitwise identical results on every rank; bad input.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <tcoll/tcoll.hpp>
#include <tcoll/transport/mpi.hpp>
#include <type_traits>
#include <vector>

#include "mpi_util.hpp"

using namespace std::chrono_literals;
using mpi_test::world_rank;
using mpi_test::world_size;

namespace {

// Small integer inputs so every partial result is exact in every type (also half/bfloat16):
// sums stay below 8 * 7 = 56, products are powers of two up to 2^8 (int8 wraps, which the
// expectation models with modular arithmetic).
template <class Op>
long long input_value(int rank, std::size_t i) {
  if constexpr (std::is_same_v<Op, tcoll::prod_op>)
    return (rank + i) % 3 == 0 ? 2 : 1;
  else
    return static_cast<long long>((rank * 5 + i * 3) % 7) + 1;
}

template <class T>
T from_ll(long long v) {
  if constexpr (tcoll::is_reduced_precision_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Expected result of element i over P ranks, folded in wide arithmetic independent of tcoll.
template <class T, class Op>
T expected(int P, std::size_t i) {
  if constexpr (std::is_same_v<Op, tcoll::min_op> || std::is_same_v<Op, tcoll::max_op>) {
    long long m = input_value<Op>(0, i);
    for (int r = 1; r < P; ++r) {
      const long long v = input_value<Op>(r, i);
      m = std::is_same_v<Op, tcoll::min_op> ? std::min(m, v) : std::max(m, v);
    }
    return from_ll<T>(m);
  } else if constexpr (std::is_same_v<Op, tcoll::prod_op>) {
    std::uint64_t p = 1;
    for (int r = 0; r < P; ++r) p *= static_cast<std::uint64_t>(input_value<Op>(r, i));
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(p); // modular, as the wrapping product
    else
      return from_ll<T>(static_cast<long long>(p));
  } else {
    long long s = 0;
    for (int r = 0; r < P; ++r) s += input_value<Op>(r, i);
    if constexpr (std::is_same_v<Op, tcoll::avg_op>) {
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(s / P);
      else if constexpr (std::is_same_v<T, double>)
        return static_cast<double>(s) / P;
      else // float, half, bfloat16 divide in float
        return T(static_cast<float>(s) / static_cast<float>(P));
    } else {
      return from_ll<T>(s);
    }
  }
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// The typed call for float (MPI_FLOAT with the built-in ops) and half (a byte datatype
/// with a user op); the runtime-typed call, with its own MPI mapping, for the other types
/// (one instantiation per element size: see tests/threads_runtime_types.cpp).
template <class T, class Op, class Algo>
void run_allreduce(tcoll::mpi_transport& t, const T* in, T* out, std::size_t count,
                   const Algo& algo) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, tcoll::half>)
    tcoll::allreduce(t, in, out, count, Op{}, algo);
  else
    tcoll::allreduce(t, static_cast<const void*>(in), static_cast<void*>(out), count,
                     tcoll::scalar_type_of<T>(), tcoll::reduce_kind_of<Op>(), algo);
}

/// The allreduce of one algorithm as a plain function of the algorithm's address: the case
/// body below is compiled once per (type, op), not once per algorithm too.
template <class T>
using allreduce_call = void (*)(tcoll::mpi_transport&, const T*, T*, std::size_t, const void*);

template <class T, class Op, class Algo>
void call_allreduce(tcoll::mpi_transport& t, const T* in, T* out, std::size_t count,
                    const void* algo) {
  run_allreduce<T, Op>(t, in, out, count, *static_cast<const Algo*>(algo));
}

template <class T, class Op>
void check_case_with(tcoll::mpi_transport& t, std::size_t count, bool in_place,
                     allreduce_call<T> call, const void* algo, std::string_view algo_name) {
  const int P = t.size(), r = t.rank();
  std::vector<T> in(count), out(count, from_ll<T>(-3));
  for (std::size_t i = 0; i < count; ++i) in[i] = from_ll<T>(input_value<Op>(r, i));
  const std::vector<T> original = in;
  if (in_place)
    call(t, in.data(), in.data(), count, algo);
  else
    call(t, in.data(), out.data(), count, algo);
  const std::vector<T>& got = in_place ? in : out;
  std::size_t wrong = 0, first = count;
  for (std::size_t i = 0; i < count; ++i)
    if (!same_bits(got[i], expected<T, Op>(P, i)) && wrong++ == 0) first = i;
  CAPTURE(std::string(algo_name));
  CAPTURE(std::string(tcoll::type_name<T>()));
  CAPTURE(std::string(Op::name));
  CAPTURE(count);
  CAPTURE(in_place);
  CAPTURE(first);
  CHECK(wrong == 0);
  if (!in_place) {
    bool untouched = true;
    for (std::size_t i = 0; i < count; ++i) untouched = untouched && same_bits(in[i], original[i]);
    CHECK(untouched);
  }
  CHECK(mpi_test::identical_on_all_ranks(got.data(), count * sizeof(T)));
}

template <class T, class Op, class Algo>
void check_case(tcoll::mpi_transport& t, std::size_t count, bool in_place, const Algo& algo) {
  check_case_with<T, Op>(t, count, in_place, &call_allreduce<T, Op, Algo>, &algo, Algo::name);
}

template <class T, class Op>
void each_algorithm(tcoll::mpi_transport& t, std::size_t count, bool in_place) {
  check_case<T, Op>(t, count, in_place, tcoll::ring{});
  check_case<T, Op>(t, count, in_place, tcoll::recursive_doubling{});
  check_case<T, Op>(t, count, in_place, tcoll::recursive_halving_doubling{});
  check_case<T, Op>(t, count, in_place, tcoll::binomial_tree{});
  check_case<T, Op>(t, count, in_place, tcoll::automatic{});
  check_case<T, Op>(t, count, in_place, tcoll::passthrough{});
}

template <class T>
void each_op(tcoll::mpi_transport& t, std::size_t count, bool in_place) {
  each_algorithm<T, tcoll::sum_op>(t, count, in_place);
  each_algorithm<T, tcoll::prod_op>(t, count, in_place);
  each_algorithm<T, tcoll::min_op>(t, count, in_place);
  each_algorithm<T, tcoll::max_op>(t, count, in_place);
  each_algorithm<T, tcoll::avg_op>(t, count, in_place);
}

// An associative, non-commutative element-wise op: composition of affine maps x -> m x + c
// modulo 2^64. The result depends on the rank order, so an algorithm (or MPI) that reorders
// operands gets a different answer.
struct affine {
  std::uint64_t m = 1, c = 0;
};
// (f then g)(x) = g.m (f.m x + f.c) + g.c: earlier ranks' maps are applied first.
struct compose_fn {
  affine operator()(affine f, affine g) const { return {g.m * f.m, g.m * f.c + g.c}; }
};
using compose_op = tcoll::user_op<compose_fn, false>;

affine rank_map(int r, std::size_t i) {
  return {static_cast<std::uint64_t>(2 * r + 3 + i % 5), static_cast<std::uint64_t>(r * 7 + i)};
}

template <class Algo>
void check_compose(tcoll::mpi_transport& t, std::size_t count, bool in_place, const Algo& algo) {
  const int P = t.size(), r = t.rank();
  std::vector<affine> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = rank_map(r, i);
  if (in_place)
    tcoll::allreduce(t, in.data(), in.data(), count, compose_op{}, algo);
  else
    tcoll::allreduce(t, in.data(), out.data(), count, compose_op{}, algo);
  const auto& got = in_place ? in : out;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    // apply rank 0's map first, then rank 1's, ...
    std::uint64_t m = 1, c = 0;
    for (int q = 0; q < P; ++q) {
      const affine g = rank_map(q, i);
      m = g.m * m;
      c = g.m * c + g.c;
    }
    if (got[i].m != m || got[i].c != c) ++wrong;
  }
  CAPTURE(std::string(Algo::name));
  CAPTURE(count);
  CHECK(wrong == 0);
}

} // namespace

TEST_CASE("allreduce on MPI: every algorithm and MPI_Allreduce, types x ops") {
  auto t = mpi_test::make();
  const std::size_t odd = 3 * static_cast<std::size_t>(t.size()) + 1;
  for (std::size_t count : {std::size_t{1}, odd}) {
    const bool in_place = count == 1;
    each_op<float>(t, count, in_place);
    each_op<double>(t, count, !in_place);
    each_op<std::int32_t>(t, count, in_place);
    each_op<std::int64_t>(t, count, !in_place);
    each_op<std::uint8_t>(t, count, in_place);
    each_op<std::int8_t>(t, count, !in_place);
    each_op<tcoll::half>(t, count, in_place);
    each_op<tcoll::bfloat16>(t, count, !in_place);
  }
}

TEST_CASE("allreduce on MPI: zero, small, uneven and segmented counts") {
  auto t = mpi_test::make();
  for (std::size_t count : {std::size_t{0}, std::size_t{7}, std::size_t{1000}})
    for (bool in_place : {false, true}) each_algorithm<float, tcoll::sum_op>(t, count, in_place);
  // ~1.6 MiB with 256 KiB segments: several segments per ring chunk
  const std::size_t big = (std::size_t{400} << 10) + 3;
  check_case<float, tcoll::sum_op>(t, big, false, tcoll::ring{.max_segment_bytes = 256 << 10});
  check_case<float, tcoll::sum_op>(t, big, true, tcoll::recursive_halving_doubling{});
  check_case<float, tcoll::sum_op>(t, big, false, tcoll::passthrough{});
  check_case<tcoll::half, tcoll::avg_op>(t, big, true, tcoll::passthrough{});
}

TEST_CASE("passthrough with blocking_native_allreduce (MPI_Allreduce itself) is checked too") {
  tcoll::mpi_transport t(MPI_COMM_WORLD,
                         tcoll::mpi_options{.timeout = 30s, .blocking_native_allreduce = true});
  for (bool in_place : {false, true}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{7}, std::size_t{4099}})
      check_case<float, tcoll::sum_op>(t, count, in_place, tcoll::passthrough{});
    check_case<double, tcoll::avg_op>(t, 1000, in_place, tcoll::passthrough{});
  }
}

TEST_CASE("allreduce on MPI: transfers split into many MPI messages") {
  tcoll::mpi_transport t(MPI_COMM_WORLD, tcoll::mpi_options{30s, 4096});
  check_case<float, tcoll::sum_op>(t, 100003, false, tcoll::ring{});
  check_case<double, tcoll::max_op>(t, 50001, true, tcoll::recursive_halving_doubling{});
  check_case<std::int32_t, tcoll::sum_op>(t, 30011, false, tcoll::binomial_tree{});
}

TEST_CASE("allreduce on MPI: non-commutative user op keeps rank order, also in MPI_Allreduce") {
  auto t = mpi_test::make();
  for (std::size_t count : {std::size_t{1}, std::size_t{13}, std::size_t{301}})
    for (bool in_place : {false, true}) {
      check_compose(t, count, in_place, tcoll::recursive_doubling{});
      check_compose(t, count, in_place, tcoll::recursive_halving_doubling{});
      check_compose(t, count, in_place, tcoll::binomial_tree{});
      check_compose(t, count, in_place, tcoll::automatic{});
      check_compose(t, count, in_place, tcoll::passthrough{});
    }
}

TEST_CASE("allreduce on MPI: stateful user op reaches MPI_Allreduce") {
  auto t = mpi_test::make();
  const int P = t.size();
  const float weight = 0.5f; // captured state: sum of weighted values
  auto op = tcoll::make_op<true>([weight](auto a, auto b) { return a + b * weight * 2.0f; });
  std::vector<float> v(9, float(t.rank() + 1));
  tcoll::allreduce(t, v.data(), v.data(), v.size(), op, tcoll::passthrough{});
  for (float x : v) CHECK(x == float(P * (P + 1) / 2));
}

TEST_CASE("allreduce on MPI: symbolic rank sets prove each contribution arrives once") {
  using tcoll::symbolic::rank_set;
  auto t = mpi_test::make();
  const int P = t.size(), r = t.rank();
  auto run = [&](const auto& algo) {
    for (std::size_t count :
         {std::size_t{1}, std::size_t{5}, static_cast<std::size_t>(3 * P + 2)}) {
      std::vector<rank_set> in(count, rank_set::of(r)), out(count);
      tcoll::allreduce(t, in.data(), out.data(), count, tcoll::symbolic::disjoint_union{}, algo);
      bool ok = true;
      for (const auto& s : out) ok = ok && s == rank_set::all(P);
      CAPTURE(std::string(std::decay_t<decltype(algo)>::name));
      CAPTURE(count);
      CHECK(ok);
    }
  };
  run(tcoll::ring{});
  run(tcoll::recursive_doubling{});
  run(tcoll::recursive_halving_doubling{});
  run(tcoll::binomial_tree{});
  run(tcoll::passthrough{});
}

TEST_CASE("allreduce on MPI: bad input is invalid_argument naming argument and rank") {
  auto t = mpi_test::make(5s);
  std::vector<float> buf(8, 1.0f);
  try {
    tcoll::allreduce(t, static_cast<const float*>(nullptr), buf.data(), 8, tcoll::sum_op{},
                     tcoll::passthrough{});
    FAIL("null sendbuf accepted");
  } catch (const tcoll::invalid_argument& e) {
    CHECK(std::string(e.what()).find("sendbuf") != std::string::npos);
    CHECK(e.rank() == t.rank());
  }
  try {
    tcoll::allreduce(t, buf.data(), buf.data() + 1, 4, tcoll::sum_op{}, tcoll::ring{});
    FAIL("overlap accepted");
  } catch (const tcoll::invalid_argument& e) {
    CHECK(std::string(e.what()).find("overlap") != std::string::npos);
  }
  for (float x : buf) CHECK(x == 1.0f); // nothing was written
  // every rank rejected locally; the transport is still usable
  tcoll::allreduce(t, std::span<float>(buf), tcoll::sum_op{}, tcoll::ring{});
  for (float x : buf) CHECK(x == float(t.size()));
}
