// shm_transport (processes of one node over a POSIX shared-memory segment): the shared
// rank-level bodies of tests/common/collective_cases.hpp (the same ones the threads, MPI and
// GPU suites run), plus what is particular to it: fragments and lanes, tag matching with
// several messages in flight, concurrent collectives from the engine, errors, abort, an
// absent peer, and no file left in /dev/shm.
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <string>
#include <tcoll/node_hierarchy.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/transport/composed.hpp>
#include <tcoll/transport/counting.hpp>
#include <tcoll/transport/shaped.hpp>
#include <tcoll/transport/shm.hpp>
#include <tcoll/transport/subgroup.hpp>
#include <tcoll/transport/threads.hpp>
#include <thread>
#include <vector>

#include "dev_shm.hpp"
#include "shm_cases.hpp"

using namespace tcoll::testing;
using namespace std::chrono_literals;

namespace {
/// Allocations made by this thread (the replaced global operator new below counts them).
thread_local std::size_t allocations = 0;
} // namespace

// GCC sees malloc/free through the inlined replacements and takes them for a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t bytes) {
  ++allocations;
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void* operator new(std::size_t bytes, std::align_val_t alignment) {
  ++allocations;
  const auto a = static_cast<std::size_t>(alignment);
  if (void* p = std::aligned_alloc(a, (std::max<std::size_t>(bytes, 1) + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace {

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// Small slots and lanes, so the tests cross fragment and lane boundaries at small counts.
tcoll::shm_options small_slots(std::chrono::milliseconds timeout = 30s) {
  tcoll::shm_options o;
  o.timeout = timeout;
  o.slot_bytes = 256;
  o.slots = 2;
  o.lanes = 2;
  o.single_copy_min_bytes = std::numeric_limits<std::size_t>::max();
  return o;
}

/// Tiny slots with single copy from 512 bytes in 128-byte pieces: the cross-memory-attach
/// path (where permitted) at small counts, across piece boundaries.
tcoll::shm_options small_single_copy(std::chrono::milliseconds timeout = 30s) {
  tcoll::shm_options o = small_slots(timeout);
  o.single_copy_min_bytes = 512;
  o.single_copy_piece_bytes = 128;
  return o;
}

/// A collective area of two flagged lines (96 bytes) and 256-byte bulk buffers, so the
/// in-segment allreduce crosses its lines, whole, slice and piece paths at small counts.
tcoll::shm_options tiny_area(std::chrono::milliseconds timeout = 30s) {
  tcoll::shm_options o;
  o.timeout = timeout;
  o.area_lines = 2;
  o.area_bulk_bytes = 256;
  return o;
}

/// The last rank aborts `t` after 100 ms; every other rank's allreduce by `algo` must fail
/// with `aborted_error` at once (within 2 s), not wait for the timeout.
template <class Algo>
void abort_from_last_rank(tcoll::shm_transport& t, const Algo& algo) {
  std::vector<float> data(1000, 0.5f);
  const auto start = tcoll::clock::now();
  if (t.rank() == t.size() - 1) {
    std::this_thread::sleep_for(100ms);
    t.abort();
  } else {
    CHECK_THROWS_AS(tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, algo),
                    tcoll::aborted_error);
    CHECK(tcoll::clock::now() - start < 2s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/// Same answer on every rank (they must all send the same way).
bool single_copy_agreed(const tcoll::shm_transport& t) {
  int mine = t.single_copy() ? 1 : 0, low = 0, high = 0;
  MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &high, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return low == high;
}

} // namespace

TEST_CASE("shm: allreduce float sum, every algorithm and count, default and tiny slots") {
  for (const auto& options : {tcoll::shm_options{}, small_slots(), small_single_copy()}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    CHECK(single_copy_agreed(t));
    const int P = t.size();
    matrix_options opt;
    opt.types = {"float"};
    opt.ops = {"sum"};
    opt.counts = {0, 1, std::size_t(P + 1), 1000, (std::size_t{1} << 16) + 3};
    allreduce_matrix(t, opt);
  }
}

TEST_CASE("shm: allreduce every type x op at a few counts") {
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots());
  matrix_options opt;
  opt.counts = {std::size_t(t.size() + 1), 257};
  allreduce_matrix(t, opt);
}

TEST_CASE("shm: fractional rounding, non-commutative order, the other collectives, alltoall, "
          "gather, scatter") {
  for (const auto& options : {small_slots(), small_single_copy()}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    const int P = t.size();
    reduced_precision_rounding(t, {1, std::size_t(P + 1), 1000});
    noncommutative_cases(t, {1, std::size_t(P + 1), 257});
    collectives_values(t, {1, std::size_t(P + 1), 1000});
    collectives_values(t, {std::size_t(P + 2), 41}, 8);
    alltoall_values(t, {0, 1, std::size_t(P + 1), 1000});
    gather_scatter_values(t, {1, std::size_t(P + 1), 1000});
    uneven_block_values(t, {0, 1, std::size_t(P + 1), 1000});
    barrier_waits_for_every_rank(t);
  }
}

TEST_CASE("shm: in_segment allreduce: lines, whole, slices and pieces, every type and op, "
          "bitwise identical on every rank") {
  for (const auto& options : {tcoll::shm_options{}, tiny_area()}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    const int P = t.size();
    const std::uint64_t before = t.segment_area().collectives();
    matrix_options opt;
    opt.algorithms = {"in_segment"};
    opt.types = {"float"};
    opt.ops = {"sum"};
    // 96 B of lines in the tiny area: 24 floats; 256 B pieces: 64 floats
    opt.counts = {0, 1, 24, 25, 64, 65, std::size_t(P + 1), 897, 1000, 70003};
    allreduce_matrix(t, opt);
    opt.types = {};
    opt.ops = {};
    opt.counts = {std::size_t(P + 1), 29, 257};
    allreduce_matrix(t, opt);
    reduced_precision_rounding(t, {1, 29, 1000}, {"in_segment"});
    // it ran in the segment (no engine here), not the recursive-doubling fallback
    if (P > 1) CHECK(t.segment_area().collectives() - before >= 100);
    // the slices path at small sizes: slices from 128 bytes
    const tcoll::in_segment slices{.slices_from_bytes = 128};
    for (std::size_t n : {std::size_t{32}, std::size_t{33}, std::size_t{63}, std::size_t{1000},
                          std::size_t{(1 << 16) + 3}})
      for (int ip = 0; ip < 2; ++ip) {
        const case_id id{"in_segment{slices}", "float", "sum", n, P, t.rank(), ip == 1};
        allreduce_case<tcoll::shm_transport, float>(t, slices, tcoll::sum_op{}, op_kind::sum, n,
                                                    ip == 1, id, 11 + n, true);
        const case_id avg{"in_segment{slices}", "double", "avg", n, P, t.rank(), ip == 1};
        allreduce_case<tcoll::shm_transport, double>(t, slices, tcoll::avg_op{}, op_kind::avg, n,
                                                     ip == 1, avg, 13 + n, true);
      }
    // operand order is kept: a non-commutative op folds ranks 0, 1, ..., P-1
    for (std::size_t n : {std::size_t{1}, std::size_t{29}, std::size_t{1000}})
      for (int ip = 0; ip < 2; ++ip) {
        const case_id id{"in_segment", "uint32", "noncommutative", n, P, t.rank(), ip == 1};
        allreduce_case<tcoll::shm_transport, std::uint32_t>(
            t, tcoll::in_segment{}, noncommutative_op, op_kind::noncommutative, n, ip == 1, id,
            77 + n, true);
        allreduce_case<tcoll::shm_transport, std::uint32_t>(
            t, slices, noncommutative_op, op_kind::noncommutative, n, ip == 1, id, 79 + n, true);
      }
  }
}

TEST_CASE("shm: in_segment reuses its two areas safely over hundreds of calls of mixed sizes") {
  tcoll::shm_transport t(MPI_COMM_WORLD, tiny_area());
  const int P = t.size();
  const std::size_t sizes[] = {1, 24, 25, 200, 3, 64, 1000, 2};
  for (int k = 0; k < 240; ++k) {
    const std::size_t n = sizes[k % 8];
    // a rank that sleeps now and then lets the others run ahead into the next area
    if (k % 37 == t.rank()) std::this_thread::sleep_for(2ms);
    const case_id id{"in_segment", "float", "sum", n, P, t.rank(), k % 2 == 1};
    allreduce_case<tcoll::shm_transport, float>(t, tcoll::in_segment{}, tcoll::sum_op{},
                                                op_kind::sum, n, k % 2 == 1, id, 1000 + k, true);
  }
}

TEST_CASE("shm: in_segment runs on the engine; a blocking call beside it takes messages") {
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int P = t.size();
  const float frac = 0.1f + 0.01f * static_cast<float>(t.rank());
  std::vector<std::vector<float>> bufs(5, std::vector<float>(300, frac));
  const std::uint64_t before = t.segment_area().collectives();
  std::vector<tcoll::request> pending;
  for (auto& b : bufs)
    pending.push_back(
        tcoll::iallreduce(t, std::span<float>(b), tcoll::sum_op{}, tcoll::in_segment{}));
  std::vector<float> blocking(300, frac);
  tcoll::allreduce(t, std::span<float>(blocking), tcoll::sum_op{}, tcoll::in_segment{});
  for (auto& q : pending) q.wait();
  // the five on the engine ran in the segment, the blocking one beside them did not
  CHECK(t.segment_area().collectives() - before == (P > 1 ? 5u : 0u));
  float expect = 0;
  for (int q = 0; q < P; ++q) expect += 0.1f + 0.01f * static_cast<float>(q);
  for (auto& b : bufs) CHECK(std::abs(b[17] - expect) < 1e-5f * P);
  CHECK(std::abs(blocking[17] - expect) < 1e-5f * P);
  // a prepared in_segment allreduce started on the engine runs in the segment too
  tcoll::prepared_allreduce<tcoll::shm_transport, float, tcoll::sum_op, tcoll::in_segment> prepared(
      t, 300);
  prepared.start(bufs[0].data()).wait();
  CHECK(t.segment_area().collectives() - before == (P > 1 ? 6u : 0u));
  CHECK(std::abs(bufs[0][3] - expect * P) < 1e-4f * P * P);
  // one thread of a rank at a time: a second session while one is open is refused
  {
    tcoll::shm_segment_area::session open(t.segment_area());
    CHECK_THROWS_WITH_AS(tcoll::shm_segment_area::session(t.segment_area()),
                         doctest::Contains("another thread of this rank"), tcoll::invalid_argument);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("shm: in_segment broadcast from every root, lines and pieces, areas reused") {
  for (const auto& options : {tcoll::shm_options{}, tiny_area()}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    const int P = t.size(), rank = t.rank();
    const std::uint64_t before = t.segment_area().collectives();
    auto value = [](int root, std::size_t i, int k) {
      return 1000.0 * root + 0.001 * static_cast<double>(i) + 0.37 * k;
    };
    int k = 0, bad = 0;
    // 96 B of lines in the tiny area: 12 doubles; 256 B pieces: 32 doubles
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{12}, std::size_t{13},
                          std::size_t{32}, std::size_t{33}, std::size_t{1000}, std::size_t{70003}})
      for (int root = 0; root < P; ++root)
        for (int rep = 0; rep < 3; ++rep, ++k) {
          std::vector<double> buf(n, -1.0);
          if (rank == root)
            for (std::size_t i = 0; i < n; ++i) buf[i] = value(root, i, k);
          tcoll::broadcast(t, buf.data(), n, root, tcoll::in_segment{});
          for (std::size_t i = 0; i < n; ++i)
            if (buf[i] != value(root, i, k)) ++bad;
        }
    CHECK(bad == 0);
    if (P > 1) CHECK(t.segment_area().collectives() - before >= std::uint64_t(7 * 3 * P));
    // on the engine, several in flight, mixed with allreduces
    std::vector<std::vector<double>> bufs(4, std::vector<double>(300, -1.0));
    std::vector<float> sum(29, 0.5f);
    std::vector<tcoll::request> pending;
    for (int b = 0; b < 4; ++b) {
      const int root = b % P;
      if (rank == root)
        for (std::size_t i = 0; i < 300; ++i) bufs[b][i] = value(root, i, b);
      pending.push_back(tcoll::ibroadcast(t, bufs[b].data(), 300, root, tcoll::in_segment{}));
      pending.push_back(
          tcoll::iallreduce(t, std::span<float>(sum), tcoll::sum_op{}, tcoll::in_segment{}));
    }
    for (auto& q : pending) q.wait();
    for (int b = 0; b < 4; ++b) CHECK(bufs[b][123] == value(b % P, 123, b));
    CHECK(sum[7] == doctest::Approx(0.5 * std::pow(static_cast<double>(P), 4)));
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("shm: in_segment broadcast in pieces: one ordinal a piece where the ranks have a CPU "
          "each, every piece size and remainder") {
  tcoll::shm_transport t(MPI_COMM_WORLD, tcoll::shm_options{});
  const int P = t.size(), rank = t.rank();
  const bool pieces = tcoll::shm_transport::ranks_have_cpus(P);
  CHECK(t.segment_area().ranks_have_cpus() == pieces);
  int k = 0, bad = 0;
  // piece sizes: 100 rounds down to 64 bytes (whole lines), 8 KiB (the default) and more
  // than the bulk buffer (its size); counts with and without a remainder
  for (std::size_t piece : {std::size_t{100}, std::size_t{8192}, std::size_t{1} << 30})
    for (std::size_t n : {std::size_t{1000}, std::size_t{1024}, std::size_t{40001}})
      for (int root = 0; root < P; ++root, ++k) {
        std::vector<double> buf(n, -1.0);
        auto value = [&](std::size_t i) { return 0.1 * root + 0.37 * k + 1e-3 * double(i); };
        if (rank == root)
          for (std::size_t i = 0; i < n; ++i) buf[i] = value(i);
        const std::uint64_t before = t.segment_area().collectives();
        tcoll::broadcast(t, buf.data(), n, root, tcoll::in_segment{.broadcast_piece_bytes = piece});
        const std::uint64_t ordinals = t.segment_area().collectives() - before;
        for (std::size_t i = 0; i < n; ++i) bad += buf[i] != value(i);
        if (P == 1) continue;
        const std::size_t bytes = n * sizeof(double);
        const std::size_t bulk = t.segment_area().bulk_capacity();
        const std::size_t step = pieces ? std::min(piece / 64 * 64, bulk) : bulk;
        CAPTURE(piece);
        CAPTURE(n);
        CHECK(ordinals == (bytes + step - 1) / step);
      }
  CHECK(bad == 0);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("shm: in_segment reduce in pieces: one ordinal a piece where they are on, every "
          "root, in place, fractional values folded in rank order") {
  tcoll::shm_transport t(MPI_COMM_WORLD, tcoll::shm_options{});
  const int P = t.size(), rank = t.rank();
  const bool own_cpus = tcoll::shm_transport::ranks_have_cpus(P);
  int k = 0, bad = 0;
  // piece sizes: 100 rounds down to 64 bytes (whole lines), 8 KiB (the default), more than
  // the bulk buffer (its size) and 0 (off: whole copies or slices); counts with and without
  // a remainder, from just above the flagged lines (25 doubles) to more than the bulk buffer
  for (std::size_t piece :
       {std::size_t{100}, std::size_t{8192}, std::size_t{1} << 30, std::size_t{0}})
    for (std::size_t n : {std::size_t{25}, std::size_t{1024}, std::size_t{40001}})
      for (int root = 0; root < P; ++root)
        for (int ip = 0; ip < 2; ++ip, ++k) {
          auto value = [&](int q, std::size_t i) {
            return 0.1 * q + 0.37 * k + 1e-3 * double(i % 977) + 1.0 / 3.0;
          };
          std::vector<double> in(n), out(n, -1.0);
          for (std::size_t i = 0; i < n; ++i) in[i] = value(rank, i);
          const std::vector<double> kept = in, sentinel = out;
          const bool in_place = ip == 1 && rank == root;
          const tcoll::in_segment knobs{.reduce_piece_bytes = piece};
          const std::uint64_t before = t.segment_area().collectives();
          double* result = in_place ? in.data() : out.data();
          tcoll::reduce(t, in.data(), result, n, root, tcoll::sum_op{}, knobs);
          const std::uint64_t ordinals = t.segment_area().collectives() - before;
          for (std::size_t i = 0; i < n; ++i) {
            double want = value(0, i);
            for (int q = 1; q < P; ++q) want += value(q, i);
            if (rank == root)
              bad += result[i] != want;
            else
              bad += out[i] != sentinel[i];
            if (!in_place) bad += in[i] != kept[i];
          }
          const bool pieces = piece > 0 && (!own_cpus || P <= knobs.reduce_in_pieces_up_to_ranks);
          if (P == 1 || !pieces) continue;
          const std::size_t bytes = n * sizeof(double);
          const std::size_t bulk = t.segment_area().bulk_capacity();
          const std::size_t step =
              own_cpus ? std::min(std::max<std::size_t>(64, piece / 64 * 64), bulk) : bulk;
          CAPTURE(piece);
          CAPTURE(n);
          CHECK(ordinals == (bytes + step - 1) / step);
        }
  CHECK(bad == 0);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("shm: in_segment: ranks that disagree on the count or type fail at once, naming "
          "the peer") {
  const int P = world_size();
  if (P < 2) return;
  struct disagreement {
    std::size_t mine, rank1; // float counts: lines (48 floats) or bulk
    bool doubles_on_rank1;
  };
  for (const disagreement d : {disagreement{5, 6, false}, disagreement{100, 101, false},
                               disagreement{20, 2000, false}, disagreement{100, 100, true}}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, tiny_area(20s));
    const int rank = t.rank();
    const auto start = tcoll::clock::now();
    std::string error;
    try {
      if (rank == 1 && d.doubles_on_rank1) {
        std::vector<double> x(d.rank1, 0.5);
        tcoll::allreduce(t, std::span<double>(x), tcoll::sum_op{}, tcoll::in_segment{});
      } else {
        std::vector<float> x(rank == 1 ? d.rank1 : d.mine, 0.5f);
        tcoll::allreduce(t, std::span<float>(x), tcoll::sum_op{}, tcoll::in_segment{});
      }
    } catch (const tcoll::transport_error& e) {
      error = e.what();
    } catch (const tcoll::aborted_error& e) {
      error = e.what();
    }
    CAPTURE(d.mine);
    CAPTURE(d.rank1);
    if (rank <= 1) { // the two that disagree both fail, well before the timeout
      CHECK_MESSAGE(!error.empty(), "no error");
      CHECK(tcoll::clock::now() - start < 10s);
    }
    if (error.find("every rank must pass the same") != std::string::npos)
      CHECK(error.find(rank == 1 ? "rank 0 passed" : "rank 1 passed") != std::string::npos);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

namespace {
/// A fractional input of rank `r` at element `i` (its sums round: integer-valued inputs
/// would give the same bits in any order).
template <class T>
T fractional(int r, std::size_t i) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(1000003 * (r + 1) + 7 * static_cast<T>(i % 100000));
  else
    return static_cast<T>(0.1 + 0.37 * r + 0.0013 * static_cast<double>(i % 7919));
}
/// ranks 0, 1, ..., P-1's inputs at element `i` under `op`, folded in rank order in T.
template <class T, class Op>
T rank_order_fold(int P, std::size_t i, const Op& op) {
  T acc = fractional<T>(0, i);
  for (int q = 1; q < P; ++q) acc = op(acc, fractional<T>(q, i));
  return acc;
}

/// Every in-segment collective but allreduce and broadcast on `t` for `counts`, checked
/// bitwise against references folded in rank order from every rank's fractional inputs;
/// `knobs` run the reduce and the alltoall (`in_segment` knobs).
template <class T>
void segment_collectives_case(tcoll::shm_transport& t, const std::vector<std::size_t>& counts,
                              const tcoll::in_segment& knobs) {
  const int P = t.size(), rank = t.rank();
  const auto Pz = static_cast<std::size_t>(P), me = static_cast<std::size_t>(rank);
  const std::string type = std::is_integral_v<T> ? "int32" : sizeof(T) == 4 ? "float" : "double";
  const tcoll::sum_op add{};
  for (std::size_t n : counts) {
    // allgather, out of place and in place
    for (int ip = 0; ip < 2; ++ip) {
      std::vector<T> mine(n), out(n * Pz, T(-1)), want(n * Pz);
      for (std::size_t k = 0; k < n; ++k) mine[k] = fractional<T>(rank, k);
      for (std::size_t q = 0; q < Pz; ++q)
        for (std::size_t k = 0; k < n; ++k) want[q * n + k] = fractional<T>(int(q), k);
      const case_id id{"in_segment allgather", type, "-", n, P, rank, ip == 1};
      if (ip) {
        std::copy(mine.begin(), mine.end(), out.begin() + std::ptrdiff_t(me * n));
        tcoll::allgather(t, out.data() + me * n, out.data(), n, tcoll::in_segment{});
      } else {
        const std::vector<T> kept = mine;
        tcoll::allgather(t, mine.data(), out.data(), n, tcoll::in_segment{});
        check_equal(mine, kept, id.str() + " (input must stay untouched)");
      }
      check_equal(out, want, id.str());
    }
    // alltoall, out of place and in place: rank q's block for rank j is fractional(q, j n + k)
    for (int ip = 0; ip < 2; ++ip) {
      std::vector<T> input(n * Pz), out(n * Pz, T(-1)), want(n * Pz);
      for (std::size_t i = 0; i < n * Pz; ++i) input[i] = fractional<T>(rank, i);
      for (std::size_t q = 0; q < Pz; ++q)
        for (std::size_t k = 0; k < n; ++k) want[q * n + k] = fractional<T>(int(q), me * n + k);
      const case_id id{"in_segment alltoall", type, "-", n, P, rank, ip == 1};
      if (ip) {
        tcoll::alltoall(t, input.data(), input.data(), n, knobs);
        check_equal(input, want, id.str());
      } else {
        const std::vector<T> kept = input;
        tcoll::alltoall(t, input.data(), out.data(), n, knobs);
        check_equal(out, want, id.str());
        check_equal(input, kept, id.str() + " (input must stay untouched)");
      }
    }
    // reduce_scatter: block j of rank q's input is fractional(q, j n + k)
    {
      std::vector<T> input(n * Pz), out(n, T(-1)), want(n);
      for (std::size_t i = 0; i < n * Pz; ++i) input[i] = fractional<T>(rank, i);
      for (std::size_t k = 0; k < n; ++k) want[k] = rank_order_fold<T>(P, me * n + k, add);
      const std::vector<T> kept = input;
      tcoll::reduce_scatter(t, input.data(), out.data(), n, add, tcoll::in_segment{});
      const case_id id{"in_segment reduce_scatter", type, "sum", n, P, rank, false};
      check_equal(out, want, id.str());
      check_equal(input, kept, id.str() + " (input must stay untouched)");
    }
    // reduce to every root, sum and a non-commutative op; in place at the root too
    for (int root = 0; root < P; ++root)
      for (int ip = 0; ip < 2; ++ip) {
        std::vector<T> input(n), out(n, T(-7)), want(n);
        for (std::size_t k = 0; k < n; ++k) {
          input[k] = fractional<T>(rank, k);
          want[k] = rank_order_fold<T>(P, k, add);
        }
        const std::vector<T> kept = input, sentinel = out;
        const bool in_place = ip == 1 && rank == root;
        const case_id id{"in_segment reduce(root=" + std::to_string(root) + ")",
                         type,
                         "sum",
                         n,
                         P,
                         rank,
                         in_place};
        if (in_place) {
          tcoll::reduce(t, input.data(), input.data(), n, root, add, knobs);
          check_equal(input, want, id.str());
        } else {
          tcoll::reduce(t, input.data(), out.data(), n, root, add, knobs);
          check_equal(out, rank == root ? want : sentinel, id.str());
          check_equal(input, kept, id.str() + " (input must stay untouched)");
        }
      }
    if constexpr (std::is_same_v<T, std::uint32_t>) {
      const int root = int(n % Pz);
      std::vector<T> input(n), out(n, T(0)), want(n);
      for (std::size_t k = 0; k < n; ++k) {
        input[k] = fractional<T>(rank, k);
        want[k] = rank_order_fold<T>(P, k, noncommutative_op);
      }
      tcoll::reduce(t, input.data(), out.data(), n, root, noncommutative_op, knobs);
      if (rank == root)
        check_equal(
            out, want,
            case_id{"in_segment reduce", "uint32", "noncommutative", n, P, rank, false}.str());
    }
  }
}
} // namespace

TEST_CASE("shm: in_segment allgather, alltoall, reduce_scatter, reduce and barrier: lines, bulk, "
          "slices and pieces, fractional values folded in rank order, bitwise") {
  for (const auto& options : {tcoll::shm_options{}, tiny_area()}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    const int P = t.size();
    const std::uint64_t before = t.segment_area().collectives();
    // tiny area: 96 B of lines and 256 B of bulk; default: 192 B and 256 KiB
    const std::vector<std::size_t> counts = {0, 1, 5, 12, 13, 24, 25, 64, 65, 1000, 20011};
    segment_collectives_case<float>(t, counts, tcoll::in_segment{});
    segment_collectives_case<double>(t, {1, 12, 13, 33, 1000}, tcoll::in_segment{});
    segment_collectives_case<std::int32_t>(t, {3, 48, 1000}, tcoll::in_segment{});
    segment_collectives_case<std::uint32_t>(t, {1, 29, 1000}, tcoll::in_segment{});
    // the reduce's slices (every rank reduces one, the root copies them out) from 128 B,
    // its pieces off; and its pieces of 64 B (whole lines) where they are on
    segment_collectives_case<float>(
        t, {32, 33, 1000, 70003},
        tcoll::in_segment{.slices_from_bytes = 128, .reduce_piece_bytes = 0});
    segment_collectives_case<std::uint32_t>(t, {33, 1000, 20011},
                                            tcoll::in_segment{.reduce_piece_bytes = 100});
    // it ran in the segment (no engine here), not the ring, tree or exchange fallbacks: at
    // least one ordinal per call, 2 allgathers, 2 alltoalls, a reduce_scatter and 2 P reduces
    // per non-zero count
    if (P > 1) CHECK(t.segment_area().collectives() - before >= std::uint64_t(25 * (5 + 2 * P)));
    // all-to-all blocks read straight from their senders where the ranks may (from 32 KiB a
    // block by default, so not 8191 floats; from 1 byte, and never, below): P - 1 reads a
    // call, in and out of place, the same values
    if (P > 1 && t.single_copy()) {
      const std::uint64_t reads = t.segment_area().peer_reads();
      segment_collectives_case<float>(t, {8191, 8192, 20011}, tcoll::in_segment{});
      CHECK(t.segment_area().peer_reads() - reads == std::uint64_t(2 * 2 * (P - 1)));
      const std::uint64_t all = t.segment_area().peer_reads();
      segment_collectives_case<double>(t, {1, 13},
                                       tcoll::in_segment{.alltoall_single_copy_from_bytes = 1});
      CHECK(t.segment_area().peer_reads() - all == std::uint64_t(2 * 2 * (P - 1)));
      const std::uint64_t none = t.segment_area().peer_reads();
      segment_collectives_case<float>(
          t, {20011}, tcoll::in_segment{.alltoall_single_copy_from_bytes = std::size_t(-1)});
      CHECK(t.segment_area().peer_reads() == none);
    } else {
      MESSAGE("single copy not allowed here: the all-to-all's reads from the senders not run");
    }
    const std::uint64_t barriers_from = t.segment_area().collectives();
    barrier_waits_for_every_rank(t, tcoll::in_segment{});
    if (P > 1) CHECK(t.segment_area().collectives() - barriers_from >= std::uint64_t(P));
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("shm: alltoall's default takes the collective area up to its bound, the exchange "
          "above") {
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int P = t.size(), rank = t.rank();
  const auto Pz = static_cast<std::size_t>(P);
  tcoll::alltoall_by_size by_size{.rules = {}};
  by_size.in_segment_up_to_bytes = by_size.in_segment_up_to_bytes_many = 1024 * Pz;
  for (std::size_t n : {std::size_t{1}, std::size_t{256}, std::size_t{257}}) {
    std::vector<float> input(n * Pz), out(n * Pz, -1.0f), want(n * Pz);
    for (std::size_t i = 0; i < n * Pz; ++i) input[i] = fractional<float>(rank, i);
    for (std::size_t q = 0; q < Pz; ++q)
      for (std::size_t k = 0; k < n; ++k)
        want[q * n + k] = fractional<float>(int(q), std::size_t(rank) * n + k);
    const std::uint64_t before = t.segment_area().collectives();
    tcoll::alltoall(t, input.data(), out.data(), n, by_size);
    check_equal(out, want, case_id{"alltoall automatic", "float", "-", n, P, rank, false}.str());
    CAPTURE(n);
    if (P > 1) CHECK(t.segment_area().collectives() - before == (n <= 256 ? 1u : 0u));
  }
}

TEST_CASE("shm: in_segment allgather, alltoall, reduce_scatter and barrier on the engine, in "
          "order with allreduces; a blocking call beside them takes messages") {
  tcoll::shm_transport t(MPI_COMM_WORLD, tiny_area());
  const int P = t.size(), rank = t.rank();
  const auto Pz = static_cast<std::size_t>(P);
  const std::uint64_t before = t.segment_area().collectives();
  const std::size_t n = 100;
  std::vector<std::vector<float>> gathered(3, std::vector<float>(n * Pz, -1.0f)),
      scattered(3, std::vector<float>(n, -1.0f)), exchanged(3, std::vector<float>(n * Pz, -1.0f));
  std::vector<float> mine(n), input(n * Pz), sum(n);
  for (std::size_t k = 0; k < n; ++k) mine[k] = sum[k] = fractional<float>(rank, k);
  for (std::size_t i = 0; i < n * Pz; ++i) input[i] = fractional<float>(rank, i);
  std::vector<tcoll::request> pending;
  for (int b = 0; b < 3; ++b) {
    pending.push_back(
        tcoll::iallgather(t, mine.data(), gathered[b].data(), n, tcoll::in_segment{}));
    pending.push_back(tcoll::ireduce_scatter(t, input.data(), scattered[b].data(), n,
                                             tcoll::sum_op{}, tcoll::in_segment{}));
    pending.push_back(tcoll::ibarrier(t, tcoll::in_segment{}));
    pending.push_back(
        tcoll::ialltoall(t, input.data(), exchanged[b].data(), n, tcoll::in_segment{}));
  }
  pending.push_back(
      tcoll::iallreduce(t, std::span<float>(sum), tcoll::sum_op{}, tcoll::in_segment{}));
  // beside the engine: the ring and the exchange, not the area
  std::vector<float> blocking(n * Pz, -1.0f), blocking_exchanged(n * Pz, -1.0f);
  tcoll::allgather(t, mine.data(), blocking.data(), n, tcoll::in_segment{});
  tcoll::alltoall(t, input.data(), blocking_exchanged.data(), n, tcoll::in_segment{});
  tcoll::barrier(t, tcoll::in_segment{});
  for (auto& q : pending) q.wait();
  // allgather 3 * pieces, reduce_scatter and alltoall 3 * pieces each, 3 barriers, the
  // allreduce's pieces: ordinals from the engine only; the blocking ones would add more
  // (counted exactly here)
  const std::size_t block_pieces = (n * 4 + 255) / 256;
  const std::size_t scatter_pieces = (n + 256 / (Pz * 4) - 1) / (256 / (Pz * 4));
  const std::size_t allreduce_pieces = (n * 4 + 255) / 256;
  if (P > 1)
    CHECK(t.segment_area().collectives() - before ==
          3 * block_pieces + 6 * scatter_pieces + 3 + allreduce_pieces);
  std::vector<float> want_gather(n * Pz), want_exchange(n * Pz), want_scatter(n), want_sum(n);
  for (std::size_t q = 0; q < Pz; ++q)
    for (std::size_t k = 0; k < n; ++k) {
      want_gather[q * n + k] = fractional<float>(int(q), k);
      want_exchange[q * n + k] = fractional<float>(int(q), std::size_t(rank) * n + k);
    }
  for (std::size_t k = 0; k < n; ++k) {
    want_scatter[k] = rank_order_fold<float>(P, std::size_t(rank) * n + k, tcoll::sum_op{});
    want_sum[k] = rank_order_fold<float>(P, k, tcoll::sum_op{});
  }
  for (int b = 0; b < 3; ++b) {
    check_equal(gathered[b], want_gather, "iallgather in_segment");
    check_equal(scattered[b], want_scatter, "ireduce_scatter in_segment");
    check_equal(exchanged[b], want_exchange, "ialltoall in_segment");
  }
  check_equal(blocking, want_gather, "allgather beside the engine");
  check_equal(blocking_exchanged, want_exchange, "alltoall beside the engine");
  check_equal(sum, want_sum, "iallreduce in_segment");
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("shm: in_segment: ranks in different collectives fail at once, naming the peer") {
  const int P = world_size();
  if (P < 2) return;
  for (int which = 0; which < 4; ++which) {
    tcoll::shm_transport t(MPI_COMM_WORLD, tiny_area(20s));
    const int rank = t.rank();
    const auto start = tcoll::clock::now();
    std::string error;
    try {
      std::vector<float> x(8 * P, 0.5f), y(8 * P, 0.0f);
      if (rank != 1) {
        tcoll::allgather(t, x.data(), y.data(), 8, tcoll::in_segment{});
      } else if (which == 0) {
        tcoll::barrier(t, tcoll::in_segment{});
      } else if (which == 1) {
        tcoll::reduce_scatter(t, x.data(), y.data(), 8, tcoll::sum_op{}, tcoll::in_segment{});
      } else if (which == 2) {
        tcoll::alltoall(t, x.data(), y.data(), 8, tcoll::in_segment{});
      } else {
        tcoll::allreduce(t, x.data(), y.data(), 8, tcoll::sum_op{}, tcoll::in_segment{});
      }
    } catch (const tcoll::transport_error& e) {
      error = e.what();
    } catch (const tcoll::aborted_error& e) {
      error = e.what();
    }
    CAPTURE(which);
    if (rank <= 1) {
      CHECK_MESSAGE(!error.empty(), "no error");
      CHECK(tcoll::clock::now() - start < 10s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("shm: in_segment fails at once on abort and times out on an absent peer") {
  const int P = world_size();
  if (P < 2) return;
  {
    tcoll::shm_transport t(MPI_COMM_WORLD, tiny_area(20s));
    abort_from_last_rank(t, tcoll::in_segment{});
  }
  for (int absent : {0, P - 1})
    for (std::size_t n : {std::size_t{3}, std::size_t{1000}}) {
      tcoll::shm_transport t(MPI_COMM_WORLD, tiny_area(300ms));
      absent_peer_case(t, absent, tcoll::in_segment{}, n);
      MPI_Barrier(MPI_COMM_WORLD);
    }
}

TEST_CASE("shm: single copy is probed once, agreed by every rank, and off on request") {
  {
    tcoll::shm_transport t(MPI_COMM_WORLD, small_slots());
    CHECK_FALSE(t.single_copy()); // turned off by single_copy_min_bytes = SIZE_MAX
  }
  tcoll::shm_transport t(MPI_COMM_WORLD, small_single_copy());
  CHECK(single_copy_agreed(t));
  if (t.size() > 1 && !t.single_copy())
    MESSAGE("process_vm_readv between these processes is not permitted: single copy is off "
            "and the slots carry every message (the single-copy cases ran through the slots)");
  // Plain receives (no consumer) of single-copy length, several in flight, both directions.
  const int P = t.size(), r = t.rank();
  if (P < 2) return;
  const int to = (r + 1) % P, from = (r + P - 1) % P;
  std::vector<std::vector<unsigned char>> out(3), in(3);
  std::vector<tcoll::shm_transport::request> sends, recvs;
  for (int k = 0; k < 3; ++k) {
    out[k].resize(1000 + 517 * k);
    for (std::size_t i = 0; i < out[k].size(); ++i)
      out[k][i] = static_cast<unsigned char>(r * 13 + k * 5 + i);
    in[k].assign(out[k].size(), 0xee);
    recvs.push_back(t.irecv(from, in[k].data(), in[k].size(), 3));
    sends.push_back(t.isend(to, out[k].data(), out[k].size(), 3));
  }
  const auto when = tcoll::clock::now() + t.timeout();
  for (auto& q : recvs) t.wait(q, when);
  for (auto& q : sends) t.wait(q, when);
  for (int k = 0; k < 3; ++k)
    for (std::size_t i = 0; i < in[k].size(); ++i)
      CHECK(in[k][i] == static_cast<unsigned char>(from * 13 + k * 5 + i));
}

TEST_CASE("shm: a send for a plain receive goes single copy from its own threshold on") {
  // default slots (32 KiB) and thresholds: single copy from 64 KiB for a plain isend, from
  // single_copy_irecv_min_bytes (8 KiB) for isend_for_irecv, received either way
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int P = t.size(), r = t.rank();
  const std::size_t from_size = tcoll::shm_options{}.single_copy_irecv_min_bytes;
  REQUIRE(from_size == 8192);
  if (t.single_copy()) { // a consumer needs staging where a message may come single copy
    std::vector<float> sink(1);
    auto consume = [](void*, const void*, std::size_t) {};
    CHECK_THROWS_AS(t.irecv_consume((r + 1) % P, 20000, 4, {consume, sink.data()}, nullptr),
                    tcoll::invalid_argument);
  }
  if (P < 2) return;
  const int to = (r + 1) % P, from = (r + P - 1) % P;
  struct sent_case {
    std::size_t bytes;
    bool hinted, consumed;
  };
  const sent_case cases[] = {{33, true, false},     {8191, true, false},  {8192, true, false},
                             {20000, true, false},  {32768, true, false}, {40000, true, true},
                             {20000, false, false}, {20000, true, true},  {65536, false, false}};
  for (const sent_case& c : cases) {
    CAPTURE(c.bytes);
    CAPTURE(c.hinted);
    CAPTURE(c.consumed);
    std::vector<unsigned char> out(c.bytes), got(c.bytes, 0xEE), staging(c.bytes);
    for (std::size_t i = 0; i < c.bytes; ++i)
      out[i] = static_cast<unsigned char>(i * 11 + static_cast<std::size_t>(r) * 3);
    const std::uint64_t before = t.single_copy_messages();
    struct copy_out {
      unsigned char* dst;
      static void whole(void* self, const void* data, std::size_t n) {
        std::memcpy(static_cast<copy_out*>(self)->dst, data, n);
      }
      static void piece(void* self, std::size_t offset, const void* data, std::size_t n) {
        std::memcpy(static_cast<copy_out*>(self)->dst + offset, data, n);
      }
    } sink{got.data()};
    auto recv = c.consumed
                    ? t.irecv_consume(from, c.bytes, 5, {&copy_out::whole, &sink, &copy_out::piece},
                                      staging.data())
                    : t.irecv(from, got.data(), c.bytes, 5);
    auto send = c.hinted ? tcoll::isend_for_irecv(t, to, out.data(), c.bytes, 5)
                         : t.isend(to, out.data(), c.bytes, 5);
    const auto when = tcoll::clock::now() + t.timeout();
    t.wait(recv, when);
    t.wait(send, when);
    const bool single = t.single_copy() && c.bytes >= (c.hinted ? from_size : 65536);
    CHECK(t.single_copy_messages() == before + (single ? 1 : 0));
    bool same = true;
    for (std::size_t i = 0; i < c.bytes; ++i)
      same =
          same && got[i] == static_cast<unsigned char>(i * 11 + static_cast<std::size_t>(from) * 3);
    CHECK(same);
  }
}

TEST_CASE("shm: the views pass the single-copy hint on") {
  // a subgroup (ranks in reverse order), the counting decorator, a shaped network (inside a
  // node, and across nodes, where the send is held until it falls due) and a composed world
  // (nodes of one rank, so every peer is across) each send `isend_for_irecv` single copy
  // from the shm transport's own threshold, and a plain `isend` of that size through the slots
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int P = t.size();
  if (P < 2 || !t.single_copy()) {
    MESSAGE("SKIP: needs 2 ranks and single copy (cross-memory attach) between them");
    return;
  }
  const std::size_t bytes = 20000; // above single_copy_irecv_min_bytes, below a slot
  REQUIRE(bytes >= tcoll::shm_options{}.single_copy_irecv_min_bytes);
  std::vector<int> reversed(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q) reversed[static_cast<std::size_t>(q)] = P - 1 - q;
  tcoll::subgroup<tcoll::shm_transport> backwards(t, reversed, tcoll::intra_tag_offset);
  tcoll::counting<tcoll::shm_transport> counted(t);
  tcoll::shaped_network one_node(tcoll::shaping{std::chrono::nanoseconds(0), 0.0, P});
  tcoll::shaped_network apart(tcoll::shaping{std::chrono::nanoseconds(0), 0.0, 1});
  tcoll::shaped<tcoll::shm_transport> inside(t, one_node), across(t, apart);
  auto nodes = tcoll::split_groups(t, 1);
  tcoll::composed<tcoll::subgroup<tcoll::shm_transport>, tcoll::subgroup<tcoll::shm_transport>>
      world(nodes.intra, *nodes.inter);
  // one send to the next rank of the view and one receive from the previous, hinted or not:
  // the data arrives whole and the transport counts a single-copy message for the hint only
  auto exchange = [&](auto& v, bool hinted, int tag) {
    const int vr = v.rank(), vp = v.size();
    const int to = (vr + 1) % vp, from = (vr + vp - 1) % vp;
    std::vector<unsigned char> out(bytes), got(bytes, 0xEE);
    for (std::size_t i = 0; i < bytes; ++i)
      out[i] = static_cast<unsigned char>(i * 7 + static_cast<std::size_t>(vr) * 5);
    const std::uint64_t before = t.single_copy_messages();
    auto recv = v.irecv(from, got.data(), bytes, tag);
    auto send = hinted ? tcoll::isend_for_irecv(v, to, out.data(), bytes, tag)
                       : v.isend(to, out.data(), bytes, tag);
    const auto when = tcoll::clock::now() + t.timeout();
    v.wait(recv, when);
    v.wait(send, when);
    CHECK(t.single_copy_messages() == before + (hinted ? 1 : 0));
    bool same = true;
    for (std::size_t i = 0; i < bytes; ++i)
      same =
          same && got[i] == static_cast<unsigned char>(i * 7 + static_cast<std::size_t>(from) * 5);
    CHECK(same);
  };
  auto both = [&](auto& v, int tag) {
    for (const bool hinted : {true, false}) {
      CAPTURE(hinted);
      exchange(v, hinted, tag);
    }
  };
  SUBCASE("subgroup") {
    both(backwards, 6);
  }
  SUBCASE("counting") {
    both(counted, 7);
    CHECK(counted.counts().messages_sent == 2);
  }
  SUBCASE("shaped, inside a node") {
    both(inside, 8);
  }
  SUBCASE("shaped, across nodes") {
    both(across, 9);
  }
  SUBCASE("composed") {
    both(world, 10);
  }
  static_assert(tcoll::takes_irecv_hint<tcoll::subgroup<tcoll::shm_transport>>);
  static_assert(tcoll::takes_irecv_hint<decltype(world)>);
  static_assert(!tcoll::takes_irecv_hint<tcoll::subgroup<tcoll::thread_transport>>);
}

TEST_CASE("shm: symbolic proof and traffic closed forms") {
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int P = t.size();
  for (std::size_t n : {std::size_t{1}, std::size_t(P + 1), std::size_t(2 * P + 3)})
    symbolic_all(t, n);
  traffic_cases(t, {1, std::size_t(P + 1), 1000});
}

TEST_CASE("shm: bad input names argument and rank; transport still usable") {
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots(10s));
  bad_input_cases(t);
  matrix_options opt;
  opt.counts = {5};
  opt.types = {"float"};
  opt.ops = {"sum"};
  allreduce_matrix(t, opt);
  CHECK_THROWS_AS(t.isend(t.size(), nullptr, 0, 1), tcoll::invalid_argument);
  CHECK_THROWS_AS(t.irecv(-1, nullptr, 0, 1), tcoll::invalid_argument);
  CHECK_THROWS_AS(t.irecv(0, nullptr, 8, 1), tcoll::invalid_argument);
}

TEST_CASE("shm: bad options are invalid_argument") {
  auto with = [](auto change) {
    tcoll::shm_options o;
    change(o);
    return o;
  };
  CHECK_THROWS_AS(tcoll::shm_transport(MPI_COMM_WORLD, with([](auto& o) { o.lanes = 0; })),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::shm_transport(MPI_COMM_WORLD, with([](auto& o) { o.slots = 0; })),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::shm_transport(MPI_COMM_WORLD, with([](auto& o) { o.slot_bytes = 8; })),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::shm_transport(MPI_COMM_WORLD, with([](auto& o) { o.timeout = 0ms; })),
                  tcoll::invalid_argument);
  CHECK_THROWS_WITH_AS(tcoll::shm_transport(MPI_COMM_WORLD, with([](auto& o) {
                                              o.single_copy_irecv_min_bytes = 8;
                                            })),
                       doctest::Contains("single_copy_irecv_min_bytes"), tcoll::invalid_argument);
  if (world_size() < 2) return;
  // options that differ between ranks, or are invalid on one rank only, fail on every rank
  // (before, the others built a segment laid out differently, or waited for the one)
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK_THROWS_WITH_AS(
      tcoll::shm_transport(MPI_COMM_WORLD, with([&](auto& o) { o.slots = rank == 1 ? 3 : 2; })),
      doctest::Contains("options.slots differs between ranks"), tcoll::invalid_argument);
  CHECK_THROWS_AS(
      tcoll::shm_transport(MPI_COMM_WORLD, with([&](auto& o) { o.lanes = rank == 0 ? 0 : 4; })),
      tcoll::invalid_argument);
}

template <class Algo>
void no_allocation_case(tcoll::shm_transport& t, std::size_t n) {
  tcoll::prepared_allreduce<tcoll::shm_transport, float, tcoll::sum_op, Algo> prepared(t, n);
  std::vector<float> data(n);
  auto refill = [&] {
    for (std::size_t i = 0; i < n; ++i) data[i] = 0.25f + 0.001f * static_cast<float>(i % 7);
  };
  refill();
  prepared.run(data.data()); // the transport's state pools and lists grow here
  refill();
  const std::size_t before = allocations;
  for (int k = 0; k < 5; ++k) prepared.run(data.data());
  CHECK(allocations - before == 0);
  // A plain call borrows the thread's cached workspace when it is small (below 64 KiB of
  // scratch and staging), so it allocates nothing either.
  if (n <= 1000) {
    std::vector<float> plain(n, 0.5f);
    tcoll::allreduce(t, std::span<float>(plain), tcoll::sum_op{}, Algo{});
    const std::size_t plain_before = allocations;
    for (int k = 0; k < 3; ++k)
      tcoll::allreduce(t, std::span<float>(plain), tcoll::sum_op{}, Algo{});
    CHECK(allocations - plain_before == 0);
    CHECK(plain[n / 2] == doctest::Approx(0.5 * std::pow(static_cast<double>(t.size()), 4)));
  }
  // still right: 5 in-place sums of identical inputs multiply by P^5
  const double factor = std::pow(static_cast<double>(t.size()), 5);
  for (std::size_t i = 0; i < n; i += 97)
    CHECK(data[i] ==
          doctest::Approx((0.25 + 0.001 * static_cast<double>(i % 7)) * factor).epsilon(1e-5));
}

TEST_CASE(
    "shm: a repeated prepared or small plain allreduce allocates nothing (slots and single copy)") {
  for (const auto& options : {tcoll::shm_options{}, small_slots(), small_single_copy()})
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{70000}}) {
      tcoll::shm_transport t(MPI_COMM_WORLD, options);
      CAPTURE(n);
      no_allocation_case<tcoll::ring>(t, n);
      no_allocation_case<tcoll::recursive_doubling>(t, n);
      no_allocation_case<tcoll::recursive_halving_doubling>(t, n);
      no_allocation_case<tcoll::in_segment>(t, n);
    }
}

TEST_CASE("shm: many messages in flight between a pair match by tag, in posting order") {
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots());
  const int P = t.size(), r = t.rank();
  if (P < 2) return;
  const int to = (r + 1) % P, from = (r + P - 1) % P;
  // 6 messages to the right neighbour: tags 5,6,5,6,5,6 of sizes spanning 0..3 fragments;
  // the receiver posts them tag 6 first, then tag 5 (more messages than lanes: the
  // sender's later ones wait for lanes the receiver frees).
  const std::size_t sizes[6] = {0, 100, 256, 300, 513, 700};
  std::vector<std::vector<unsigned char>> out(6), in(6);
  std::vector<tcoll::shm_transport::request> sends, recvs;
  for (int k = 0; k < 6; ++k) {
    out[k].resize(sizes[k]);
    for (std::size_t i = 0; i < sizes[k]; ++i)
      out[k][i] = static_cast<unsigned char>(r * 31 + k * 7 + i);
    sends.push_back(t.isend(to, out[k].data(), sizes[k], 5 + k % 2));
  }
  for (int k : {1, 3, 5, 0, 2, 4}) {
    in[k].assign(sizes[k], 0xee);
    recvs.push_back(t.irecv(from, in[k].data(), sizes[k], 5 + k % 2));
  }
  const auto when = tcoll::clock::now() + t.timeout();
  for (auto& q : recvs) t.wait(q, when);
  for (auto& q : sends) t.wait(q, when);
  for (int k = 0; k < 6; ++k)
    for (std::size_t i = 0; i < sizes[k]; ++i)
      CHECK(in[k][i] == static_cast<unsigned char>(from * 31 + k * 7 + i));
}

TEST_CASE("shm: a size mismatch is a transport_error naming the peer") {
  for (const auto& options : {small_slots(5s), small_single_copy(5s)}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    const int P = t.size(), r = t.rank();
    if (P < 2) return;
    std::vector<float> data(1000, 1.0f);
    if (r == 0) {
      auto s = t.isend(1, data.data(), 4000, 9);
      t.wait(s, tcoll::clock::now() + t.timeout());
    } else if (r == 1) {
      auto q = t.irecv(0, data.data(), 2000, 9);
      try {
        t.wait(q, tcoll::clock::now() + t.timeout());
        FAIL_CHECK("mismatched receive did not throw");
      } catch (const tcoll::transport_error& e) {
        CHECK(e.peer() == 0);
        CHECK(std::string(e.what()).find("matched a send of 4000 bytes") != std::string::npos);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("shm: non-blocking collectives from the engine overlap blocking ones") {
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int P = t.size();
  const float frac = 0.1f + 0.01f * static_cast<float>(t.rank());
  std::vector<std::vector<float>> bufs(6, std::vector<float>(5000, frac));
  std::vector<tcoll::request> pending;
  for (int k = 0; k < 5; ++k)
    pending.push_back(
        tcoll::iallreduce(t, std::span<float>(bufs[k]), tcoll::sum_op{}, tcoll::ring{}));
  std::vector<float> blocking(5000, frac);
  tcoll::allreduce(t, std::span<float>(blocking), tcoll::sum_op{}, tcoll::ring{});
  for (auto& q : pending) q.wait();
  for (int k = 0; k < 5; ++k)
    CHECK(std::memcmp(bufs[k].data(), blocking.data(), blocking.size() * sizeof(float)) == 0);
  float expect = 0;
  for (int q = 0; q < P; ++q) expect += 0.1f + 0.01f * static_cast<float>(q);
  CHECK(std::abs(blocking[0] - expect) < 1e-4f * P);
}

TEST_CASE("shm: abort on one rank makes every other rank fail at once") {
  const int P = world_size();
  if (P < 2) return;
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots(20s));
  abort_from_last_rank(t, tcoll::ring{});
}

TEST_CASE("shm: an absent peer makes the others time out or abort, input untouched") {
  const int P = world_size();
  if (P < 2) return;
  for (int absent : {0, P - 1}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, small_slots(300ms));
    absent_peer_case(t, absent, tcoll::ring{});
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("shm: the segment leaves no file in /dev/shm") {
  MPI_Barrier(MPI_COMM_WORLD);
  tcoll::shm_transport t(MPI_COMM_WORLD);
  CHECK(t.segment_bytes() > 0);
  CHECK(tcoll_files_in_dev_shm() == 0);
}

TEST_CASE("shm: barrier holds every rank until the last arrives, and times out alone") {
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots(2s));
  const int r = t.rank(), P = t.size();
  for (int round = 0; round < 3; ++round) {
    // ranks arrive 15 ms apart (the order changes with the round)
    std::this_thread::sleep_for(std::chrono::milliseconds(15 * ((r + round) % P)));
    const double entered =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    t.barrier();
    const double left =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    double last_entry = 0, first_exit = 0;
    MPI_Allreduce(&entered, &last_entry, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&left, &first_exit, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    CHECK_MESSAGE(first_exit >= last_entry, "a rank left the barrier before the last arrived");
  }
  if (P > 1) {
    tcoll::shm_transport lone(MPI_COMM_WORLD, small_slots(300ms));
    if (r == 0) CHECK_THROWS_AS(lone.barrier(), tcoll::timeout_error);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("shm: hierarchical<shm, mpi> (mpi_node_hierarchy) equals MPI_Allreduce, both forms") {
  const int P = world_size();
  for (int per_node : {0, 1, 2, 3}) {
    if (per_node > P) continue;
    CAPTURE(per_node);
    tcoll::mpi_node_hierarchy machine(MPI_COMM_WORLD, {.ranks_per_node = per_node});
    const int r = machine.rank();
    CHECK(machine.size() == P);
    if (per_node > 0)
      CHECK(machine.intra().size() == std::min(per_node, P - r / per_node * per_node));
    for (auto form : {tcoll::hierarchical_form::leader, tcoll::hierarchical_form::sharded})
      for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{10000}}) {
        CAPTURE(n);
        // integer-valued inputs: any order gives the same bits, so MPI is an exact reference
        std::vector<float> in(n), out(n, -1.0f), want(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = float((r + 1) * 3 + int(i % 13));
        const auto before = in;
        tcoll::hierarchical_options<tcoll::ring> opt;
        opt.form = form;
        tcoll::allreduce(machine.get(), in.data(), out.data(), n, tcoll::sum_op{}, opt);
        MPI_Allreduce(in.data(), want.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(in == before);
        CHECK(out == want);
        // fractional inputs: bitwise identical on every rank
        for (std::size_t i = 0; i < n; ++i) in[i] = 0.1f * float(r + 1) + 1e-3f * float(i % 97);
        tcoll::allreduce(machine.get(), in.data(), in.data(), n, tcoll::sum_op{}, opt);
        std::vector<float> first(n);
        if (r == 0) first = in;
        MPI_Bcast(first.data(), int(n * sizeof(float)), MPI_BYTE, 0, MPI_COMM_WORLD);
        CHECK(std::memcmp(first.data(), in.data(), n * sizeof(float)) == 0);
      }
  }
  CHECK_THROWS_AS(tcoll::mpi_node_hierarchy(MPI_COMM_WORLD, {.ranks_per_node = -1}),
                  tcoll::invalid_argument);
}

TEST_CASE("shm: every collective on mpi_node_hierarchy equals MPI's") {
  const int P = world_size();
  for (int per_node : {0, 1, 2, 3}) {
    if (per_node > P) continue;
    CAPTURE(per_node);
    tcoll::mpi_node_hierarchy machine(MPI_COMM_WORLD, {.ranks_per_node = per_node});
    auto& h = machine.get();
    const int r = machine.rank();
    const int root = P - 1; // a leader only when nodes have one rank
    // 1000 doubles: the all-to-all's blocks go one message each, group by group (via_peers)
    for (std::size_t n : {std::size_t{1}, std::size_t{300}, std::size_t{1000}}) {
      CAPTURE(n);
      const std::size_t all = n * std::size_t(P);
      // data movement: fractional values, compared bit for bit
      std::vector<double> mine(n), rows(all), got(all, -1.0), want(all, -2.0);
      for (std::size_t i = 0; i < n; ++i) mine[i] = r + 0.1 + double(i) / 7.0;
      for (std::size_t k = 0; k < all; ++k) rows[k] = r * 1000 + double(k) / 9.0;
      const int cn = int(n);
      tcoll::allgather(h, mine.data(), got.data(), n);
      MPI_Allgather(mine.data(), cn, MPI_DOUBLE, want.data(), cn, MPI_DOUBLE, MPI_COMM_WORLD);
      CHECK(got == want);
      tcoll::alltoall(h, rows.data(), got.data(), n);
      MPI_Alltoall(rows.data(), cn, MPI_DOUBLE, want.data(), cn, MPI_DOUBLE, MPI_COMM_WORLD);
      CHECK(got == want);
      std::fill(got.begin(), got.end(), -1.0);
      std::fill(want.begin(), want.end(), -1.0);
      tcoll::gather(h, mine.data(), got.data(), n, root);
      MPI_Gather(mine.data(), cn, MPI_DOUBLE, want.data(), cn, MPI_DOUBLE, root, MPI_COMM_WORLD);
      CHECK(got == want);
      std::vector<double> part(n, -1.0), want_part(n, -2.0);
      tcoll::scatter(h, rows.data(), part.data(), n, root);
      MPI_Scatter(rows.data(), cn, MPI_DOUBLE, want_part.data(), cn, MPI_DOUBLE, root,
                  MPI_COMM_WORLD);
      CHECK(part == want_part);
      std::vector<double> b = mine, wb = mine;
      tcoll::broadcast(h, b.data(), n, root);
      MPI_Bcast(wb.data(), cn, MPI_DOUBLE, root, MPI_COMM_WORLD);
      CHECK(b == wb);
      // uneven blocks: rank x sends rank y (x + 2y + n) % 5 elements
      {
        const auto cnt = [&](int x, int y) { return int((std::size_t(x + 2 * y) + n) % 5); };
        std::vector<int> sc(P), sd(P), rc(P), rd(P);
        int s_at = 0, r_at = 0;
        for (int q = 0; q < P; ++q) {
          sc[q] = cnt(r, q), sd[q] = s_at, s_at += sc[q];
          rc[q] = cnt(q, r), rd[q] = r_at, r_at += rc[q];
        }
        std::vector<double> sv(std::size_t(s_at) + 1), rv(std::size_t(r_at) + 1, -1.0),
            wv(std::size_t(r_at) + 1, -1.0);
        for (std::size_t k = 0; k < sv.size(); ++k) sv[k] = r * 100 + double(k) / 3.0;
        const std::vector<std::size_t> scz(sc.begin(), sc.end()), sdz(sd.begin(), sd.end()),
            rcz(rc.begin(), rc.end()), rdz(rd.begin(), rd.end());
        using span = std::span<const std::size_t>;
        tcoll::alltoallv(h, sv.data(), span(scz), span(sdz), rv.data(), span(rcz), span(rdz));
        MPI_Alltoallv(sv.data(), sc.data(), sd.data(), MPI_DOUBLE, wv.data(), rc.data(), rd.data(),
                      MPI_DOUBLE, MPI_COMM_WORLD);
        CHECK(rv == wv);
        // gatherv/scatterv: rank q's block has cnt(q, 0) elements
        const std::vector<std::size_t> gc(rcz.begin(), rcz.end()), gd(rdz.begin(), rdz.end());
        std::vector<double> gv(std::size_t(r_at) + 1, -1.0), gw(gv.size(), -1.0);
        const int mine_n = cnt(r, 0);
        if (r == 0) {
          tcoll::gatherv(h, sv.data(), std::size_t(mine_n), gv.data(), span(gc), span(gd), 0);
          MPI_Gatherv(sv.data(), mine_n, MPI_DOUBLE, gw.data(), rc.data(), rd.data(), MPI_DOUBLE, 0,
                      MPI_COMM_WORLD);
          CHECK(gv == gw);
          // the root's blocks lie at gd with the counts gc: r_at elements (sv holds the
          // root's alltoallv send blocks, which need not be as many)
          std::vector<double> blocks(std::size_t(r_at) + 1);
          for (std::size_t k = 0; k < blocks.size(); ++k) blocks[k] = double(k) / 3.0;
          std::vector<double> part(std::size_t(mine_n) + 1, -1.0), want(part.size(), -1.0);
          tcoll::scatterv(h, blocks.data(), span(gc), span(gd), part.data(), std::size_t(mine_n),
                          0);
          MPI_Scatterv(blocks.data(), rc.data(), rd.data(), MPI_DOUBLE, want.data(), mine_n,
                       MPI_DOUBLE, 0, MPI_COMM_WORLD);
          CHECK(part == want);
        } else {
          tcoll::gatherv(h, sv.data(), std::size_t(mine_n), gv.data(), span{}, span{}, 0);
          MPI_Gatherv(sv.data(), mine_n, MPI_DOUBLE, nullptr, nullptr, nullptr, MPI_DOUBLE, 0,
                      MPI_COMM_WORLD);
          std::vector<double> part(std::size_t(mine_n) + 1, -1.0), want(part.size(), -1.0);
          tcoll::scatterv(h, sv.data(), span{}, span{}, part.data(), std::size_t(mine_n), 0);
          MPI_Scatterv(nullptr, nullptr, nullptr, MPI_DOUBLE, want.data(), mine_n, MPI_DOUBLE, 0,
                       MPI_COMM_WORLD);
          // against the reference built from the root's blocks (blocks[k] = k / 3, this rank's
          // at the sum of the counts before it), and MPI's too (when the root scattered from a
          // buffer shorter than its blocks, both read past it and differed now and then)
          std::vector<double> reference(part.size(), -1.0);
          int before = 0;
          for (int q = 0; q < r; ++q) before += cnt(q, 0);
          for (int k = 0; k < mine_n; ++k) reference[std::size_t(k)] = double(before + k) / 3.0;
          auto text = [](const std::vector<double>& v) {
            std::string t;
            for (double x : v) t += std::to_string(x) + " ";
            return t;
          };
          INFO("tcoll: " << text(part) << "| MPI: " << text(want)
                         << "| reference: " << text(reference));
          CHECK(part == reference);
          CHECK(want == reference);
        }
      }
      // reductions: integer-valued floats, exact in any order
      std::vector<float> in(all), out(all, -1.0f), ref(all, -2.0f);
      for (std::size_t k = 0; k < all; ++k) in[k] = float((r + 1) * (1 + int(k % 13)));
      tcoll::reduce(h, in.data(), out.data(), n, root);
      MPI_Reduce(in.data(), ref.data(), cn, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
      if (r == root)
        CHECK(std::vector<float>(out.begin(), out.begin() + cn) ==
              std::vector<float>(ref.begin(), ref.begin() + cn));
      tcoll::reduce_scatter(h, in.data(), out.data(), n);
      MPI_Reduce_scatter_block(in.data(), ref.data(), cn, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      CHECK(std::vector<float>(out.begin(), out.begin() + cn) ==
            std::vector<float>(ref.begin(), ref.begin() + cn));
      tcoll::barrier(h);
    }
  }
}

TEST_CASE("shm: hierarchical<shm, mpi> errors name world ranks, also once it is broken") {
  // 2 ranks per emulated node, the last rank never calls: its node peer times out inside
  // the node, the others across nodes or by abort; each names its world rank (the
  // transports' own ranks are local) and a peer of its node or of its local index
  const int P = world_size();
  if (P < 3) return;
  tcoll::node_hierarchy_options o{.ranks_per_node = 2};
  o.intra.timeout = 500ms;
  o.inter.timeout = 500ms;
  tcoll::mpi_node_hierarchy machine(MPI_COMM_WORLD, o);
  const int r = machine.rank();
  if (r != P - 1) {
    std::vector<float> in(1000, 0.25f), out(1000);
    const auto neighbour = [&](int q) { return q / 2 == r / 2 || q % 2 == r % 2; };
    try {
      tcoll::allreduce(machine.get(), in.data(), out.data(), in.size());
      FAIL_CHECK("no error without rank " << P - 1);
    } catch (const tcoll::error& e) {
      CHECK_MESSAGE(e.rank() == r, e.what());
      CHECK_MESSAGE(std::string(e.what()).find("[rank " + std::to_string(r) + "]") !=
                        std::string::npos,
                    e.what());
      if (e.peer() >= 0) CHECK_MESSAGE((e.peer() != r && neighbour(e.peer())), e.what());
      if (r == P - 2 && P % 2 == 0 && dynamic_cast<const tcoll::timeout_error*>(&e))
        CHECK_MESSAGE(e.peer() == P - 1, e.what());
    }
    try {
      tcoll::allreduce(machine.get(), in.data(), out.data(), in.size());
      FAIL_CHECK("no error on the broken machine");
    } catch (const tcoll::error& e) {
      CHECK_MESSAGE(e.rank() == r, e.what());
      CHECK_MESSAGE(std::string(e.what()).find("broken by an earlier failure") != std::string::npos,
                    e.what());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("shm: registered buffers are collective, zeroed, looked up, and leave no file") {
  MPI_Barrier(MPI_COMM_WORLD);
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots());
  const int r = t.rank();
  // counts differ by rank, one rank may ask for nothing
  auto a = t.allocate<double>(static_cast<std::size_t>(r) * 1000);
  auto b = t.allocate<float>(4097);
  CHECK(a.size() == static_cast<std::size_t>(r) * 1000);
  CHECK(b.size() == 4097);
  CHECK(std::all_of(b.begin(), b.end(), [](float x) { return x == 0.0f; }));
  CHECK(t.registered(b.data(), b.size_bytes()));
  CHECK(t.registered(b.data() + 100, 10 * sizeof(float)));
  CHECK_FALSE(t.registered(b.data() + 4000, 200 * sizeof(float))); // runs past its end
  std::vector<float> ordinary(100);
  CHECK_FALSE(t.registered(ordinary.data(), 100 * sizeof(float)));
  const float* old = b.data();
  b = tcoll::shm_buffer<float>{}; // freed here: no longer looked up
  CHECK_FALSE(t.registered(old, sizeof(float)));
  MPI_Barrier(MPI_COMM_WORLD); // each rank unlinks its own name as it leaves allocate
  CHECK(tcoll_files_in_dev_shm() == 0);
  CHECK_THROWS_AS(t.allocate<float>(std::numeric_limits<std::size_t>::max() / 2),
                  tcoll::invalid_argument);
}

namespace {

float fractional(int rank, std::size_t i) {
  return 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(i % 97) + 1e-7f;
}

/// Allreduce on registered buffers (out of place and in place) gives the bits the same
/// algorithm gives on ordinary buffers, on every rank, leaves the input untouched, and its
/// messages really were read in place.
template <class Algo>
void registered_allreduce_case(tcoll::shm_transport& t, std::size_t n) {
  const int r = t.rank(), P = t.size();
  CAPTURE(n);
  auto in = t.allocate<float>(n), out = t.allocate<float>(n);
  std::vector<float> plain_in(n), plain_out(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = plain_in[i] = fractional(r, i);
  const std::uint64_t before = t.registered_messages();
  tcoll::allreduce(t, in.data(), out.data(), n, tcoll::sum_op{}, Algo{});
  tcoll::allreduce(t, plain_in.data(), plain_out.data(), n, tcoll::sum_op{}, Algo{});
  CHECK(std::memcmp(out.data(), plain_out.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(in.data(), plain_in.data(), n * sizeof(float)) == 0); // input untouched
  // in place
  tcoll::allreduce(t, in.data(), in.data(), n, tcoll::sum_op{}, Algo{});
  CHECK(std::memcmp(in.data(), plain_out.data(), n * sizeof(float)) == 0);
  // bitwise identical on every rank
  std::vector<float> first(n);
  if (r == 0) std::memcpy(first.data(), out.data(), n * sizeof(float));
  MPI_Bcast(first.data(), static_cast<int>(n * sizeof(float)), MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(std::memcmp(first.data(), out.data(), n * sizeof(float)) == 0);
  // every algorithm sends at least one message longer than a tiny one once n / P is
  if (P > 1 && n / static_cast<std::size_t>(P) * sizeof(float) > 64)
    CHECK(t.registered_messages() > before);
}

} // namespace

TEST_CASE("shm: allreduce on registered buffers equals the ordinary path bit for bit") {
  for (const auto& options : {tcoll::shm_options{}, small_slots(), small_single_copy()}) {
    tcoll::shm_transport t(MPI_COMM_WORLD, options);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{9},
                          std::size_t(world_size() + 1), std::size_t{1000}, std::size_t{70003}}) {
      registered_allreduce_case<tcoll::ring>(t, n);
      registered_allreduce_case<tcoll::recursive_doubling>(t, n);
      registered_allreduce_case<tcoll::recursive_halving_doubling>(t, n);
      registered_allreduce_case<tcoll::binomial_tree>(t, n);
      registered_allreduce_case<tcoll::multi_ring>(t, n);
    }
  }
}

TEST_CASE("shm: a message from the middle of a registered buffer reaches an ordinary one") {
  tcoll::shm_transport t(MPI_COMM_WORLD, small_slots());
  const int P = t.size(), r = t.rank();
  auto source = t.allocate<unsigned char>(5000);
  for (std::size_t i = 0; i < source.size(); ++i)
    source[i] = static_cast<unsigned char>(i * 7 + static_cast<std::size_t>(r));
  if (P < 2) return;
  const int to = (r + 1) % P, from = (r + P - 1) % P;
  for (std::size_t offset : {std::size_t{0}, std::size_t{3}, std::size_t{1000}})
    for (std::size_t bytes : {std::size_t{33}, std::size_t{300}, std::size_t{4000}}) {
      CAPTURE(offset);
      CAPTURE(bytes);
      std::vector<unsigned char> got(bytes, 0xEE);
      const std::uint64_t before = t.registered_messages();
      auto recv = t.irecv(from, got.data(), bytes, 9);
      auto send = t.isend(to, source.data() + offset, bytes, 9);
      const auto when = tcoll::clock::now() + t.timeout();
      t.wait(recv, when);
      t.wait(send, when);
      CHECK(t.registered_messages() == before + 1);
      bool same = true;
      for (std::size_t i = 0; i < bytes; ++i)
        same = same && got[i] == static_cast<unsigned char>((offset + i) * 7 +
                                                            static_cast<std::size_t>(from));
      CHECK(same);
    }
}

TEST_CASE("shm: a gradient pool in registered memory is reduced in place by its peers") {
  tcoll::shm_transport t(MPI_COMM_WORLD);
  const int r = t.rank(), P = t.size();
  const std::vector<std::size_t> sizes = {3, 40000, 17, 5000};
  tcoll::gradient_pool<float> pool(sizes, {.alignment_bytes = 64}, {},
                                   [&](std::size_t n) { return t.allocate<float>(n); });
  CHECK(t.registered(pool.data(), pool.bytes()));
  for (std::size_t k = 0; k < pool.tensor_count(); ++k)
    for (float& x : pool.tensor(k)) x = fractional(r, k);
  std::vector<float> plain(pool.all().begin(), pool.all().end());
  const std::uint64_t before = t.registered_messages();
  tcoll::allreduce(t, pool.all(), tcoll::sum_op{}, tcoll::ring{});
  tcoll::allreduce(t, std::span<float>(plain), tcoll::sum_op{}, tcoll::ring{});
  CHECK(std::memcmp(pool.data(), plain.data(), pool.bytes()) == 0);
  if (P > 1) CHECK(t.registered_messages() > before);
  auto moved = std::move(pool); // the storage moves with the pool
  CHECK(t.registered(moved.data(), moved.bytes()));
}
