// Two-level algorithms on threads+MPI: each MPI process plays a node, its threads the node's
// devices. Runs under plain mpirun (2 and 3 processes) and inside scripts/emulated_cluster.sh
// (network namespace with a rate-limited loopback). Checks: bit-exact integer-valued sums,
// symbolic exactly-once proof, avg over the total rank count, rank-identical results of
// random floats (hash compared across every rank), unequal thread counts per process, the
// flat ring and multi_ring over the composed world, tensor_allreduce.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/algorithm/multi_ring.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/core/symbolic.hpp>
#include <tcoll/tensor_allreduce.hpp>
#include <tcoll/transport/composed.hpp>
#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/subgroup.hpp>
#include <tcoll/transport/threads.hpp>
#include <vector>

#include "../common/identical_on_ranks.hpp"
#include "common.hpp"

using namespace tcoll;
using namespace hier_test;

namespace {

int mpi_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int mpi_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// Thread counts per process: equal (G) or unequal (2 + process % 2).
struct layout_case {
  bool unequal;
  int G;
  int threads_of(int process) const { return unequal ? 2 + process % 2 : G; }
};

/// Runs f(thread_transport&, hierarchical&, world_rank, world_size) on every thread of every
/// process; ranks are numbered process by process.
template <class F>
void run_hier(layout_case lc, F f) {
  const int me = mpi_rank(), np = mpi_size();
  int first = 0, total = 0, shards = 1 << 30;
  for (int p = 0; p < np; ++p) {
    if (p < me) first += lc.threads_of(p);
    total += lc.threads_of(p);
    shards = std::min(shards, lc.threads_of(p));
  }
  mpi_transport mpi(MPI_COMM_WORLD, std::chrono::seconds(30));
  std::vector<int> all(static_cast<std::size_t>(np));
  for (int p = 0; p < np; ++p) all[std::size_t(p)] = p;
  thread_team(lc.threads_of(me), std::chrono::seconds(30)).run([&](thread_transport& t) {
    std::optional<subgroup<mpi_transport>> inter;
    if (t.rank() < shards) inter.emplace(mpi, all, inter_tag_offset + 64 * t.rank());
    hierarchical h(t, inter ? &*inter : nullptr, {first + t.rank(), total, shards});
    f(t, h, first + t.rank(), total);
  });
}

/// min and max of a per-thread value over every thread of every process.
struct spread {
  std::mutex m;
  std::uint64_t lo = ~0ull, hi = 0;
  void add(std::uint64_t v) {
    std::lock_guard g(m);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool all_equal() {
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
  }
};

long long global_sum(long long v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

} // namespace

TEST_CASE("threads+mpi hierarchical: sums, symbolic proof, avg, identity, both forms") {
  for (layout_case lc : {layout_case{false, 2}, layout_case{true, 0}})
    for (auto form : {hierarchical_form::leader, hierarchical_form::sharded})
      for (std::size_t n :
           {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{70001}}) {
        CAPTURE(lc.unequal);
        CAPTURE(n);
        CAPTURE(form == hierarchical_form::leader);
        std::atomic<long long> wrong{0};
        spread hashes;
        run_hier(lc, [&](thread_transport&, auto& h, int wr, int P) {
          hierarchical_options<ring> opt{form, ring{}, ring{4096}};
          std::vector<float> in(n), out(n);
          for (std::size_t i = 0; i < n; ++i) in[i] = value(wr, i);
          const auto original = in;
          allreduce(h, in.data(), out.data(), n, sum_op{}, opt);
          for (std::size_t i = 0; i < n; ++i)
            if (out[i] != expected_sum(P, i)) wrong += 1;
          if (in != original) wrong += 1;
          using symbolic::rank_set;
          std::vector<rank_set> s(n, rank_set::of(wr));
          allreduce(h, s.data(), s.data(), n, symbolic::disjoint_union{}, opt);
          for (auto e : s)
            if (e != rank_set::all(P)) wrong += 1;
          std::vector<double> a(n, 3.0 * (wr + 1));
          allreduce(h, a.data(), a.data(), n, avg_op{}, opt);
          for (double x : a)
            if (x != 1.5 * (P + 1)) wrong += 1;
          std::mt19937 gen(unsigned(wr * 31 + 7));
          std::uniform_real_distribution<float> d(-1, 1);
          for (auto& e : in) e = d(gen);
          allreduce(h, in.data(), in.data(), n, sum_op{}, opt);
          hashes.add(tcoll_test::hash_bytes(in.data(), n * sizeof(float)));
        });
        CHECK(global_sum(wrong) == 0);
        CHECK(hashes.all_equal());
      }
}

TEST_CASE("threads+mpi flat ring and multi_ring over the composed world") {
  const int G = 2;
  const std::size_t n = 10007;
  mpi_transport mpi(MPI_COMM_WORLD, std::chrono::seconds(30));
  std::atomic<long long> wrong{0};
  spread h_ring, h_multi;
  thread_team(G, std::chrono::seconds(30)).run([&](thread_transport& t) {
    composed<thread_transport, mpi_transport> world(t, mpi);
    const int wr = world.rank(), P = world.size();
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = value(wr, i);
    tcoll::allreduce(world, in.data(), out.data(), n, sum_op{}, ring{256});
    for (std::size_t i = 0; i < n; ++i)
      if (out[i] != expected_sum(P, i)) wrong += 1;
    tcoll::allreduce(world, in.data(), out.data(), n, sum_op{}, multi_ring{2});
    for (std::size_t i = 0; i < n; ++i)
      if (out[i] != expected_sum(P, i)) wrong += 1;
    std::mt19937 gen(unsigned(wr + 1));
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& e : in) e = d(gen);
    tcoll::allreduce(world, in.data(), out.data(), n, sum_op{}, ring{});
    h_ring.add(tcoll_test::hash_bytes(out.data(), n * sizeof(float)));
    tcoll::allreduce(world, in.data(), out.data(), n, sum_op{}, multi_ring{3, ring_order::forward});
    h_multi.add(tcoll_test::hash_bytes(out.data(), n * sizeof(float)));
  });
  CHECK(global_sum(wrong) == 0);
  CHECK(h_ring.all_equal());
  CHECK(h_multi.all_equal());
}

TEST_CASE("threads+mpi tensor_allreduce: one member per process owning G buffers") {
  const int G = 3, me = mpi_rank(), np = mpi_size();
  mpi_transport mpi(MPI_COMM_WORLD, std::chrono::seconds(30));
  const std::size_t n = 5000;
  std::vector<std::vector<float>> bufs(G, std::vector<float>(n));
  std::vector<float*> ptrs;
  for (int b = 0; b < G; ++b) {
    for (std::size_t i = 0; i < n; ++i) bufs[std::size_t(b)][i] = value(me * G + b, i);
    ptrs.push_back(bufs[std::size_t(b)].data());
  }
  tensor_allreduce(mpi, std::span<float* const>(ptrs), n, sum_op{}, tensor_options{4096});
  long long wrong = 0;
  for (const auto& v : bufs)
    for (std::size_t i = 0; i < n; ++i)
      if (v[i] != expected_sum(np * G, i)) ++wrong;
  CHECK(global_sum(wrong) == 0);
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  if (provided < MPI_THREAD_MULTIPLE) {
    if (mpi_rank() == 0)
      std::fprintf(stderr, "hier_mpi: SKIP: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
    rc = 77;
  } else {
    doctest::Context ctx(argc, argv);
    if (mpi_rank() != 0) ctx.setOption("out", "/dev/null"); // one report
    rc = ctx.run();
    // every process must agree on the exit status
    MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return rc;
}
