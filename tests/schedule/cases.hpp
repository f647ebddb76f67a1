#pragma once
// Rank-level bodies of the execution-layer suite (non-blocking collectives, prepared
// allreduce, gradient pool, overlap scheduler), written once over any transport and
// instantiated for the threads transport (test_threads.cpp) and MPI (test_mpi.cpp).
// Expectations never come from the code path under test: a scheduled iteration is compared
// with blocking allreduces of copies of the same inputs, and identity across ranks with an
// allgather of hashes.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <tcoll/compress/mixed_precision.hpp>
#include <tcoll/plan.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/tcoll.hpp>

#include "../common/identical_on_ranks.hpp"

namespace schedule_test {

using namespace std::chrono_literals;

/// Fractional input of rank r, stream s, element i: sums round differently in different
/// orders, so they expose any drift between ranks or between algorithms.
inline float fractional(int r, int s, std::size_t i) {
  const std::uint32_t h =
      static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(r * 40503 + s * 977);
  return 0.1f + static_cast<float>(h % 100003) / 7919.0f * (r % 2 ? -1.0f : 1.0f) + 0.01f * r;
}
/// Integer-valued input (exact in any order).
inline float integral(int r, int s, std::size_t i) {
  return static_cast<float>((r + 1) * (1 + int((i + s) % 13)));
}

using tcoll_test::identical_on_all_ranks;

inline tcoll::plan::bucket_plan plan_with_ends(std::vector<std::size_t> ends) {
  tcoll::plan::bucket_plan p;
  p.ends = std::move(ends);
  return p;
}

inline bool same_bits(const std::vector<float>& a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---------------------------------------------------------------------------------------
// Non-blocking collectives.

/// `count` requests of mixed sizes and algorithms in flight at once, issued by `threads`
/// threads of this rank taking turns in a fixed order (the same on every rank); each
/// result must equal, bit for bit, a blocking allreduce of a copy of its input with the
/// same algorithm, and be identical on every rank.
template <class Tr>
void many_in_flight_case(Tr& t, int requests, int threads) {
  const int r = t.rank();
  const std::size_t sizes[] = {0, 1, 7, 1000, 4099, 30000};
  std::vector<std::vector<float>> data(static_cast<std::size_t>(requests));
  for (int k = 0; k < requests; ++k) {
    auto& d = data[static_cast<std::size_t>(k)];
    d.resize(sizes[k % 6]);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = fractional(r, k, i);
  }
  const auto inputs = data;
  std::vector<tcoll::request> reqs(static_cast<std::size_t>(requests));
  std::atomic<int> turn{0};
  auto issue = [&](int k) {
    auto& d = data[static_cast<std::size_t>(k)];
    std::span<float> s(d);
    switch (k % 4) {
    case 0:
      return tcoll::iallreduce(t, s, tcoll::sum_op{}, tcoll::ring{});
    case 1:
      return tcoll::iallreduce(t, s, tcoll::sum_op{}, tcoll::recursive_doubling{});
    case 2:
      return tcoll::iallreduce(t, s, tcoll::avg_op{}, tcoll::recursive_halving_doubling{});
    default:
      return tcoll::iallreduce(t, s, tcoll::sum_op{}, tcoll::multi_ring{});
    }
  };
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int j = 0; j < threads; ++j)
    pool.emplace_back([&, j] {
      try {
        for (int k = j; k < requests; k += threads) {
          while (turn.load() != k) std::this_thread::yield();
          reqs[static_cast<std::size_t>(k)] = issue(k);
          turn.store(k + 1);
        }
      } catch (...) {
        std::lock_guard lock(error_mutex);
        error = std::current_exception();
        turn.store(requests + 1000); // let the others run out
      }
    });
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  // completion in reverse order: waiting must not depend on the start order
  for (int k = requests - 1; k >= 0; --k) reqs[static_cast<std::size_t>(k)].wait();
  for (int k = 0; k < requests; ++k) {
    auto expect = inputs[static_cast<std::size_t>(k)];
    std::span<float> s(expect);
    switch (k % 4) {
    case 0:
      tcoll::allreduce(t, s, tcoll::sum_op{}, tcoll::ring{});
      break;
    case 1:
      tcoll::allreduce(t, s, tcoll::sum_op{}, tcoll::recursive_doubling{});
      break;
    case 2:
      tcoll::allreduce(t, s, tcoll::avg_op{}, tcoll::recursive_halving_doubling{});
      break;
    default:
      tcoll::allreduce(t, s, tcoll::sum_op{}, tcoll::multi_ring{});
    }
    CHECK_MESSAGE(same_bits(expect, data[static_cast<std::size_t>(k)]),
                  "request " << k << " rank " << r);
    CHECK(identical_on_all_ranks(t, data[static_cast<std::size_t>(k)].data(),
                                 data[static_cast<std::size_t>(k)].size() * sizeof(float)));
  }
}

/// ireduce_scatter, iallgather, ibroadcast, iallreduce and ireduce in flight together,
/// checked against exact (integer-valued) expectations.
template <class Tr>
void mixed_collectives_case(Tr& t) {
  const int P = t.size(), r = t.rank();
  const std::size_t n = 37;
  std::vector<double> rs_in(n * P), rs_out(n);
  for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = double(r + 1) * double(i % 11);
  std::vector<std::int32_t> ag_out(n * P), ag_in(n);
  for (std::size_t i = 0; i < n; ++i) ag_in[i] = r * 1000 + int(i);
  std::vector<float> bc(n, r == P - 1 ? 2.5f : -1.0f);
  std::vector<float> ar(n, 0.5f * float(r + 1));
  auto q1 = tcoll::ireduce_scatter(t, rs_in.data(), rs_out.data(), n);
  auto q2 = tcoll::iallgather(t, ag_in.data(), ag_out.data(), n);
  auto q3 = tcoll::ibroadcast(t, bc.data(), n, P - 1);
  auto q4 = tcoll::iallreduce(t, std::span<float>(ar));
  // ireduce to rank 0 (its recvbuf only), in flight with the others
  const std::vector<std::int64_t> rd_in(n, std::int64_t{r + 1} << 33);
  std::vector<std::int64_t> rd_out(n, -1);
  auto q5 = tcoll::ireduce(t, rd_in.data(), r == 0 ? rd_out.data() : nullptr, n, 0);
  int spins = 0;
  while (!q4.test()) ++spins, std::this_thread::yield();
  q5.wait();
  CHECK(q3.wait_for(30s));
  q2.wait();
  q1.wait();
  const double ranks_sum = double(P) * double(P + 1) / 2;
  for (std::size_t i = 0; i < n; ++i)
    CHECK(rs_out[i] == ranks_sum * double((std::size_t(r) * n + i) % 11));
  for (int q = 0; q < P; ++q)
    for (std::size_t i = 0; i < n; ++i) CHECK(ag_out[std::size_t(q) * n + i] == q * 1000 + int(i));
  for (float v : bc) CHECK(v == 2.5f);
  for (float v : ar) CHECK(v == 0.5f * float(ranks_sum));
  for (std::int64_t v : rd_out)
    CHECK(v == (r == 0 ? static_cast<std::int64_t>(ranks_sum) << 33 : -1));
}

/// Uneven blocks of P ranks, packed in rank order: rank q's is n + q elements.
struct packed_blocks {
  std::vector<std::size_t> counts, displs;
  std::size_t total = 0;
};
inline packed_blocks uneven_blocks(std::size_t p, std::size_t n) {
  packed_blocks b{std::vector<std::size_t>(p), std::vector<std::size_t>(p), 0};
  for (std::size_t q = 0; q < p; ++q) {
    b.counts[q] = n + q;
    b.displs[q] = b.total;
    b.total += b.counts[q];
  }
  return b;
}

/// The non-blocking forms of the other collectives (ialltoall, ialltoallv, igather,
/// igatherv, iscatter, iscatterv, ireduce_scatterv, iallgatherv) in flight together, every
/// result compared bit for bit with the blocking call on the same fractional inputs. The
/// counts and displacements of the v forms live in vectors that are overwritten right after
/// the calls start: the requests must have copied them.
template <class Tr>
void other_nonblocking_collectives_case(Tr& t) {
  const int P = t.size(), r = t.rank(), root = P - 1;
  const auto p = static_cast<std::size_t>(P);
  const std::size_t n = 5;
  auto value = [](int from, int to, std::size_t k) {
    return 0.25 + from + 0.125 * to + static_cast<double>(k) / 512.0;
  };
  auto [counts, displs, total] = uneven_blocks(p, n);
  const std::size_t mine = counts[std::size_t(r)];
  std::vector<double> a2a_in(n * p), rs_in(total), mine_in(mine), all_in(n * p);
  for (std::size_t q = 0; q < p; ++q)
    for (std::size_t k = 0; k < n; ++k) a2a_in[q * n + k] = value(r, int(q), k);
  for (std::size_t i = 0; i < total; ++i) rs_in[i] = value(r, 0, i);
  for (std::size_t k = 0; k < mine; ++k) mine_in[k] = value(r, r, k);
  for (std::size_t i = 0; i < all_in.size(); ++i) all_in[i] = value(root, r, i);
  // the blocking references first
  std::vector<double> a2a_want(n * p), a2av_want(total), g_want(n * p), gv_want(total), s_want(n),
      sv_want(mine), rsv_want(mine), agv_want(total);
  tcoll::alltoall(t, a2a_in.data(), a2a_want.data(), n);
  tcoll::gather(t, a2a_in.data(), g_want.data(), n, root);
  tcoll::gatherv(t, mine_in.data(), mine, gv_want.data(), counts, displs, root);
  tcoll::scatter(t, all_in.data(), s_want.data(), n, root);
  tcoll::scatterv(t, rs_in.data(), counts, displs, sv_want.data(), mine, root);
  tcoll::reduce_scatterv(t, rs_in.data(), rsv_want.data(), counts);
  tcoll::allgatherv(t, mine_in.data(), mine, agv_want.data(), counts, displs);
  // alltoallv with every pair's count n: the blocks of the packed layout's first n each
  std::vector<std::size_t> same(p, n), same_displs(p);
  for (std::size_t q = 0; q < p; ++q) same_displs[q] = displs[q];
  tcoll::alltoallv(t, rs_in.data(), same, same_displs, a2av_want.data(), same, same_displs);
  // the same calls, non-blocking, all in flight
  std::vector<double> a2a(n * p), a2av(total), g(n * p), gv(total), sc(n), sv(mine), rsv(mine),
      agv(total);
  std::vector<tcoll::request> qs;
  qs.push_back(tcoll::ialltoall(t, a2a_in.data(), a2a.data(), n));
  qs.push_back(
      tcoll::ialltoallv(t, rs_in.data(), same, same_displs, a2av.data(), same, same_displs));
  qs.push_back(tcoll::igather(t, a2a_in.data(), g.data(), n, root));
  qs.push_back(tcoll::igatherv(t, mine_in.data(), mine, gv.data(), counts, displs, root));
  qs.push_back(tcoll::iscatter(t, all_in.data(), sc.data(), n, root));
  qs.push_back(tcoll::iscatterv(t, rs_in.data(), counts, displs, sv.data(), mine, root));
  qs.push_back(tcoll::ireduce_scatterv(t, rs_in.data(), rsv.data(), counts));
  qs.push_back(tcoll::iallgatherv(t, mine_in.data(), mine, agv.data(), counts, displs));
  std::fill(counts.begin(), counts.end(), std::size_t{999999}); // copied at the start
  std::fill(displs.begin(), displs.end(), std::size_t{999999});
  std::fill(same.begin(), same.end(), std::size_t{999999});
  for (auto& q : qs) CHECK(q.wait_for(60s));
  CHECK(same_bits(a2a, a2a_want));
  CHECK(same_bits(a2av, a2av_want));
  CHECK(same_bits(sc, s_want));
  CHECK(same_bits(sv, sv_want));
  CHECK(same_bits(rsv, rsv_want));
  CHECK(same_bits(agv, agv_want));
  if (r == root) {
    CHECK(same_bits(g, g_want));
    CHECK(same_bits(gv, gv_want));
  }
  // and the references are right (so a wrong blocking call cannot hide a wrong one here)
  for (std::size_t q = 0; q < p; ++q)
    for (std::size_t k = 0; k < n; ++k) CHECK(a2a_want[q * n + k] == value(int(q), r, k));
  for (std::size_t k = 0; k < n; ++k) CHECK(s_want[k] == value(root, root, std::size_t(r) * n + k));
  // bad input (alike on every rank) throws at the start and queues nothing
  CHECK_THROWS_AS((void)tcoll::iscatterv(t, rs_in.data(), counts, displs, sv.data(), mine, P),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS((void)tcoll::ialltoall(t, a2a.data(), a2a.data() + 1, n),
                  tcoll::invalid_argument);
  auto q = tcoll::ialltoall(t, a2a_in.data(), a2a.data(), n); // still working
  q.wait();
  CHECK(same_bits(a2a, a2a_want));
}

/// The prepared form of every collective of the table (`prepare_*`), on any communicator:
/// each bound once to its buffers, then three rounds with new fractional inputs written into
/// the bound buffers, the prepared calls run one by one (rounds 0 and 2) or all started and
/// in flight together (round 1), every result compared bit for bit with the blocking call
/// on copies of the same inputs. The counts and displacements given to the v forms are
/// overwritten right after preparing: the prepared calls must have copied them.
template <class C>
void prepared_collectives_case(C& t) {
  const int P = t.size(), r = t.rank(), root = P - 1;
  const auto p = static_cast<std::size_t>(P);
  const std::size_t n = 5;
  auto [counts, displs, total] = uneven_blocks(p, n);
  const std::size_t mine = counts[std::size_t(r)];
  std::vector<std::size_t> same(p, n); // alltoallv: n to and from every peer
  // the bound buffers
  std::vector<double> ar_in(n), ar_out(n), rs_in(n * p), rs_out(n), rsv_in(total), rsv_out(mine),
      ag_in(n), ag_out(n * p), agv_in(mine), agv_out(total), bc(n), rd_in(n), rd_out(n),
      a2a_in(n * p), a2a_out(n * p), a2av_in(total), a2av_out(total), g_in(n), g_out(n * p),
      gv_in(mine), gv_out(total), s_in(n * p), s_out(n), sv_in(total), sv_out(mine);
  auto prepared = std::make_tuple(
      tcoll::prepare_allreduce(t, ar_in.data(), ar_out.data(), n),
      tcoll::prepare_reduce_scatter(t, rs_in.data(), rs_out.data(), n),
      tcoll::prepare_reduce_scatterv(t, rsv_in.data(), rsv_out.data(), counts),
      tcoll::prepare_allgather(t, ag_in.data(), ag_out.data(), n),
      tcoll::prepare_allgatherv(t, agv_in.data(), mine, agv_out.data(), counts, displs),
      tcoll::prepare_broadcast(t, bc.data(), n, root),
      tcoll::prepare_reduce(t, rd_in.data(), rd_out.data(), n, 0),
      tcoll::prepare_alltoall(t, a2a_in.data(), a2a_out.data(), n),
      tcoll::prepare_alltoallv(t, a2av_in.data(), same, displs, a2av_out.data(), same, displs),
      tcoll::prepare_gather(t, g_in.data(), g_out.data(), n, root),
      tcoll::prepare_gatherv(t, gv_in.data(), mine, gv_out.data(), counts, displs, root),
      tcoll::prepare_scatter(t, s_in.data(), s_out.data(), n, root),
      tcoll::prepare_scatterv(t, sv_in.data(), counts, displs, sv_out.data(), mine, root),
      tcoll::prepare_barrier(t));
  const auto kept_counts = counts, kept_displs = displs;
  std::fill(counts.begin(), counts.end(), std::size_t{999999}); // copied when prepared
  std::fill(displs.begin(), displs.end(), std::size_t{999999});
  std::fill(same.begin(), same.end(), std::size_t{999999});
  const std::vector<std::size_t> n_each(p, n);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    auto fill = [&](std::vector<double>& v, int stream) {
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = double(fractional(r, 10 * round + stream, i));
    };
    int stream = 0;
    for (auto* v : {&ar_in, &rs_in, &rsv_in, &ag_in, &agv_in, &bc, &rd_in, &a2a_in, &a2av_in, &g_in,
                    &gv_in, &s_in, &sv_in})
      fill(*v, stream++);
    // the blocking references, on copies of the inputs
    std::vector<double> ar(n), rs(n), rsv(mine), ag(n * p), agv(total),
        b = bc, rd(n), a2a(n * p), a2av(total), g(n * p), gv(total), sc(n), sv(mine);
    tcoll::allreduce(t, ar_in.data(), ar.data(), n);
    tcoll::reduce_scatter(t, rs_in.data(), rs.data(), n);
    tcoll::reduce_scatterv(t, rsv_in.data(), rsv.data(), kept_counts);
    tcoll::allgather(t, ag_in.data(), ag.data(), n);
    tcoll::allgatherv(t, agv_in.data(), mine, agv.data(), kept_counts, kept_displs);
    tcoll::broadcast(t, b.data(), n, root);
    tcoll::reduce(t, rd_in.data(), rd.data(), n, 0);
    tcoll::alltoall(t, a2a_in.data(), a2a.data(), n);
    tcoll::alltoallv(t, a2av_in.data(), n_each, kept_displs, a2av.data(), n_each, kept_displs);
    tcoll::gather(t, g_in.data(), g.data(), n, root);
    tcoll::gatherv(t, gv_in.data(), mine, gv.data(), kept_counts, kept_displs, root);
    tcoll::scatter(t, s_in.data(), sc.data(), n, root);
    tcoll::scatterv(t, sv_in.data(), kept_counts, kept_displs, sv.data(), mine, root);
    // the prepared calls
    if (round == 1) {
      std::apply([](auto&... c) { (c.start(), ...); }, prepared);
      std::apply([](auto&... c) { ([&] { CHECK(c.pending().wait_for(60s)); }(), ...); }, prepared);
    } else {
      std::apply([](auto&... c) { (c.run(), ...); }, prepared);
    }
    CHECK(same_bits(ar_out, ar));
    CHECK(same_bits(rs_out, rs));
    CHECK(same_bits(rsv_out, rsv));
    CHECK(same_bits(ag_out, ag));
    CHECK(same_bits(agv_out, agv));
    CHECK(same_bits(bc, b));
    CHECK(same_bits(a2a_out, a2a));
    CHECK(same_bits(a2av_out, a2av));
    CHECK(same_bits(s_out, sc));
    CHECK(same_bits(sv_out, sv));
    if (r == 0) CHECK(same_bits(rd_out, rd));
    if (r == root) {
      CHECK(same_bits(g_out, g));
      CHECK(same_bits(gv_out, gv));
    }
    // the broadcast reached every rank (a reference that is itself wrong cannot hide it)
    std::vector<double> from_root(n);
    for (std::size_t i = 0; i < n; ++i) from_root[i] = double(fractional(root, 10 * round + 5, i));
    CHECK(same_bits(bc, from_root));
  }
  // bad input (alike on every rank) throws when preparing, before anything is queued
  CHECK_THROWS_AS((void)tcoll::prepare_scatterv(t, sv_in.data(), kept_counts, kept_displs,
                                                sv_out.data(), mine, P),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS((void)tcoll::prepare_alltoall(t, a2a_out.data(), a2a_out.data() + 1, n),
                  tcoll::invalid_argument);
  // a start whose request was moved out is still waited for by the next run (integer sums:
  // the second allreduce must see the first one's result)
  std::vector<double> twice(n, double(r + 1));
  auto again = tcoll::prepare_allreduce(t, twice.data(), twice.data(), n);
  tcoll::request moved = std::move(again.start());
  again.run();
  CHECK(moved.wait_for(60s));
  const double ranks_sum = double(P) * double(P + 1) / 2;
  for (double v : twice) CHECK(v == double(P) * ranks_sum);
}

/// A prepared collective's completion (`prepared_collective(comm, body, done)`, what an
/// integration completes its own request with): `done` runs once per started run, on the
/// engine thread, after the data is in place, never for `run()`; and it may destroy the
/// prepared object itself (a persistent MPI request freed while active goes when its run
/// ends), which must neither wait for its own thread nor throw. Fractional inputs, checked
/// bit for bit against the blocking allreduce.
template <class Tr>
void prepared_completion_case(Tr& t) {
  const int r = t.rank();
  const std::size_t n = 37;
  std::vector<double> in(n), out(n), want(n);
  struct seen {
    std::atomic<int> calls{0}, off_engine{0}, errors{0};
    std::vector<double> at_completion; // the result as `done` saw it
  };
  auto s = std::make_shared<seen>();
  auto body = [&](const tcoll::collective_tags<Tr>& tags) {
    tcoll::cpu_reducer red;
    tcoll::allreduce_in(t, tags, in.data(), out.data(), n, tcoll::sum_op{},
                        tcoll::default_algorithm_t<Tr>{}, red);
  };
  auto done = [&t, &out, s](std::exception_ptr e) noexcept {
    if (!tcoll::called_from_engine(t)) ++s->off_engine;
    if (e) ++s->errors;
    s->at_completion = out;
    ++s->calls;
  };
  tcoll::prepared_collective prepared(t, body, done);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    for (std::size_t i = 0; i < n; ++i) in[i] = double(fractional(r, 40 + round, i));
    tcoll::allreduce(t, in.data(), want.data(), n);
    std::fill(out.begin(), out.end(), -1.0);
    if (round == 2) {
      prepared.run(); // here: no completion
      CHECK(s->calls.load() == 2);
    } else {
      CHECK(prepared.start().wait_for(60s));
      CHECK(s->calls.load() == (round < 2 ? round + 1 : round));
      CHECK(same_bits(s->at_completion, want));
    }
    CHECK(same_bits(out, want));
  }
  CHECK(s->off_engine.load() == 0);
  CHECK(s->errors.load() == 0);

  // destroyed by its own completion, on the engine thread, once the start that queued the
  // run has returned (the body waits for that: MPI_Request_free comes after MPI_Start)
  auto start_returned = std::make_shared<std::atomic<bool>>(false);
  auto gated = [&body, start_returned](const tcoll::collective_tags<Tr>& tags) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!start_returned->load() && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    body(tags);
  };
  struct holder {
    using completion = std::function<void(std::exception_ptr)>;
    std::optional<tcoll::prepared_collective<Tr, decltype(gated), completion>> p;
    std::promise<void> gone;
  };
  auto h = std::make_shared<holder>();
  std::future<void> gone = h->gone.get_future();
  h->p.emplace(t, gated, [h](std::exception_ptr) noexcept {
    h->p.reset();
    h->gone.set_value();
  });
  for (std::size_t i = 0; i < n; ++i) in[i] = double(fractional(r, 50, i));
  tcoll::allreduce(t, in.data(), want.data(), n);
  h->p->start();
  start_returned->store(true);
  REQUIRE_MESSAGE(gone.wait_for(30s) == std::future_status::ready,
                  "the prepared collective destroyed by its own completion never let go");
  tcoll::wait_engine_idle(t.collectives(), 30s);
  CHECK(same_bits(out, want));
}

/// A request destroyed before it completes waits for it: the data is final afterwards.
template <class Tr>
void destroyed_request_waits_case(Tr& t) {
  const int P = t.size();
  std::vector<float> v(5000, 1.0f);
  { auto q = tcoll::iallreduce(t, std::span<float>(v), tcoll::sum_op{}, tcoll::ring{}); }
  for (float x : v) REQUIRE(x == float(P));
  // a moved-over request waits for the one it replaces
  std::vector<float> a(100, 1.0f), b(100, 2.0f);
  auto q = tcoll::iallreduce(t, std::span<float>(a));
  q = tcoll::iallreduce(t, std::span<float>(b));
  for (float x : a) REQUIRE(x == float(P));
  q.wait();
  for (float x : b) REQUIRE(x == 2.0f * float(P));
}

/// The completion callback of a queued collective (run on the engine thread) may drop the
/// last handle of that same collective, as MPI's free_fn does inside
/// MPI_Grequest_complete: the handle's destructor must not wait for the task that is
/// completing, and an explicit wait there throws instead of hanging. The collective only
/// starts once the handle is stored, so the callback always finds it.
template <class Tr>
void request_released_by_its_completion_case(Tr& t) {
  const int P = t.size();
  struct shared {
    std::optional<tcoll::request> handle;
    std::atomic<bool> stored{false};
    std::string wait_error;
    std::promise<void> released;
  };
  for (bool explicit_wait : {false, true}) {
    CAPTURE(explicit_wait);
    auto s = std::make_shared<shared>();
    std::future<void> released = s->released.get_future();
    std::vector<float> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = 0.25f * float(t.rank() + 1) + 0.1f * float(i % 7);
    auto body = [&t, &v, s](int tag) {
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!s->stored.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      tcoll::cpu_reducer red;
      tcoll::detail::allreduce_tagged(t, tag, v.data(), v.data(), v.size(), tcoll::sum_op{},
                                      tcoll::ring{}, red);
    };
    auto done = [s, explicit_wait](std::exception_ptr) noexcept {
      if (explicit_wait) {
        try {
          s->handle->wait();
        } catch (const std::exception& e) {
          s->wait_error = e.what();
        }
      }
      s->handle.reset(); // the last handle, destroyed on the engine thread
      s->released.set_value();
    };
    s->handle.emplace(tcoll::detail::submit_collective(t, body, done));
    s->stored = true;
    if (released.wait_for(20s) != std::future_status::ready) {
      FAIL_CHECK("the completion callback that released its own request never returned "
                 "(the engine thread waits for itself)");
      std::fflush(nullptr);
      std::_Exit(1); // the engine thread is stuck: no orderly teardown is possible
    }
    if (explicit_wait) CHECK(s->wait_error.find("own engine thread") != std::string::npos);
    tcoll::detail::engine_of(t).wait_idle(20s);
    for (std::size_t i = 0; i < v.size(); ++i) {
      float want = 0;
      for (int r = 0; r < P; ++r) want += 0.25f * float(r + 1) + 0.1f * float(i % 7);
      REQUIRE(v[i] == doctest::Approx(want).epsilon(1e-5));
    }
  }
}

/// wait_for reports false while a peer has not joined yet, then true.
template <class Tr>
void wait_for_case(Tr& t) {
  if (t.size() < 2) return;
  std::vector<float> v(64, 1.0f);
  if (t.rank() == 1) std::this_thread::sleep_for(300ms);
  auto q = tcoll::iallreduce(t, std::span<float>(v));
  if (t.rank() == 0) CHECK_FALSE(q.wait_for(50ms));
  CHECK(q.wait_for(30s));
  for (float x : v) CHECK(x == float(t.size()));
  CHECK(q.test());
}

/// Arguments are checked when the call is made, not on the engine.
template <class Tr>
void nonblocking_bad_arguments_case(Tr& t) {
  std::vector<float> v(10);
  CHECK_THROWS_AS((void)tcoll::iallreduce(t, static_cast<const float*>(nullptr), v.data(), 10),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS((void)tcoll::ibroadcast(t, v.data(), 10, t.size()), tcoll::invalid_argument);
  CHECK_THROWS_AS((void)tcoll::ireduce(t, static_cast<const float*>(v.data()), v.data(), 10, -1),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS((void)tcoll::iallgather(t, v.data(), static_cast<float*>(nullptr), 10),
                  tcoll::invalid_argument);
  // the transport is still fine (nothing was queued)
  auto q = tcoll::iallreduce(t, std::span<float>(v));
  q.wait();
}

// ---------------------------------------------------------------------------------------
// Prepared allreduce.

template <class Tr, class Algo>
void prepared_case(Tr& t, const Algo& algo, std::size_t n) {
  const int r = t.rank();
  tcoll::prepared_allreduce<Tr, float, tcoll::sum_op, Algo> in_place(t, n, true, {}, algo);
  tcoll::prepared_allreduce<Tr, float, tcoll::sum_op, Algo> out_of_place(t, n, false, {}, algo);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> a(n), out(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = fractional(r, rep, i);
    const auto input = a;
    auto expect = a;
    tcoll::allreduce(t, expect.data(), expect.data(), n, tcoll::sum_op{}, algo);
    if (rep == 1) {
      in_place.start(a.data()).wait();
    } else {
      in_place.run(a.data());
    }
    CHECK(same_bits(expect, a));
    out_of_place.run(input.data(), out.data());
    CHECK(same_bits(expect, out));
  }
  std::vector<float> a(n), b(n);
  if (n) {
    CHECK_THROWS_AS(in_place.run(a.data(), b.data()), tcoll::invalid_argument);
    CHECK_THROWS_AS(out_of_place.run(a.data()), tcoll::invalid_argument);
  }
}

// ---------------------------------------------------------------------------------------
// The overlap scheduler.

/// A random plan over `L` tensors.
inline tcoll::plan::bucket_plan random_plan(std::size_t L, std::mt19937& rng) {
  tcoll::plan::bucket_plan p;
  std::bernoulli_distribution close(0.4);
  for (std::size_t k = 0; k < L; ++k)
    if (k + 1 == L || close(rng)) p.ends.push_back(k + 1);
  return p;
}

/// Random tensor sizes (empty ones included).
inline std::vector<std::size_t> random_sizes(std::mt19937& rng, std::size_t max_tensors) {
  std::uniform_int_distribution<std::size_t> count(1, max_tensors);
  std::uniform_int_distribution<int> kind(0, 5);
  std::vector<std::size_t> sizes(count(rng));
  for (auto& s : sizes) {
    const int k = kind(rng);
    s = k == 0 ? 0 : k == 1 ? 1 + rng() % 3 : k < 5 ? rng() % 500 : 1000 + rng() % 20000;
  }
  return sizes;
}

/// Marks every tensor of a pool in a random order that releases buckets in plan order.
/// Tensors of one bucket are marked in random order, and the next bucket's tensors may be
/// interleaved with the current one's (a bucket waits for the one before it anyway).
template <class S>
void mark_all_random(S& s, std::size_t L, std::mt19937& rng) {
  std::vector<std::size_t> order(L);
  for (std::size_t i = 0; i < L; ++i) order[i] = i;
  // local shuffles in windows of 5 keep it backward-like but out of order
  for (std::size_t i = 0; i < L; i += 5)
    std::shuffle(order.begin() + i, order.begin() + std::min(L, i + 5), rng);
  for (auto i : order) s.mark_ready(i);
}

/// Algorithms whose result does not depend on how the data is cut into buckets (they
/// combine every element in the same rank order): a scheduled iteration equals one
/// allreduce of the whole pool bit for bit, with fractional inputs.
template <class Algo>
constexpr bool bucketing_invariant = Algo::keeps_operand_order;

/// One scheduled iteration with a random plan, sizes and ready order (the same on every
/// rank: `seed` is shared), compared with (a) one allreduce of the whole pool when the
/// algorithm is bucketing-invariant, (b) one blocking allreduce per bucket otherwise; and
/// identical on every rank. `integer_inputs` uses exact integer-valued inputs, for which
/// every algorithm must also match the whole-pool allreduce.
template <class Tr, class Algo, class Op = tcoll::sum_op>
void scheduler_random_case(Tr& t, const Algo& algo, unsigned seed, bool integer_inputs,
                           tcoll::gradient_pool_options pool_options = {}) {
  const int r = t.rank();
  std::mt19937 rng(seed);
  const auto sizes = random_sizes(rng, 24);
  const auto plan = random_plan(sizes.size(), rng);
  tcoll::gradient_pool<float> pool(sizes, pool_options);
  tcoll::overlap_scheduler<Tr, float, Op, Algo> s(pool, t, plan, Op{}, algo);
  for (int it = 0; it < 2; ++it) {
    for (std::size_t i = 0; i < pool.tensor_count(); ++i) {
      auto g = pool.tensor(i);
      for (std::size_t j = 0; j < g.size(); ++j)
        g[j] = integer_inputs ? integral(r, int(i) + it, j) : fractional(r, int(i) + it, j);
    }
    const std::vector<float> input(pool.all().begin(), pool.all().end());
    std::mt19937 order_rng(seed * 31 + it);
    mark_all_random(s, pool.tensor_count(), order_rng);
    const auto& timing = s.finish();
    REQUIRE(timing.buckets.size() == plan.bucket_count());
    for (const auto& b : timing.buckets) {
      CHECK(b.started >= b.ready);
      CHECK(b.finished >= b.started);
    }
    const std::string what = std::string(Algo::name) + " seed " + std::to_string(seed) +
                             " iteration " + std::to_string(it) + " rank " + std::to_string(r);
    if (bucketing_invariant<Algo> || integer_inputs) {
      auto whole = input;
      tcoll::allreduce(t, std::span<float>(whole), Op{}, algo);
      CHECK_MESSAGE(same_bits(whole, pool.all()), what << ": differs from a whole-pool allreduce");
    }
    if (!bucketing_invariant<Algo>) {
      auto per_bucket = input;
      for (std::size_t k = 0; k < plan.bucket_count(); ++k) {
        const std::size_t off = pool.range_offset(plan.begin(k), plan.end(k));
        const std::size_t n = pool.range_size(plan.begin(k), plan.end(k));
        tcoll::allreduce(t, std::span<float>(per_bucket.data() + off, n), Op{}, algo);
      }
      CHECK_MESSAGE(same_bits(per_bucket, pool.all()),
                    what << ": differs from a blocking allreduce per bucket");
    }
    CHECK_MESSAGE(identical_on_all_ranks(t, pool.data(), pool.bytes()), what);
  }
}

/// Mixed-precision wire: a float pool whose buckets travel as `Wire` equals, bit for bit,
/// `allreduce_mixed<Wire>` of each bucket's range with the same algorithm and scale; it is
/// within the adaptor's stated error bound of the float sum; identical on every rank; the
/// timings count wire bytes; a bad scale is refused.
template <class Wire, class Tr, class Algo>
void scheduler_mixed_case(Tr& t, const Algo& algo, unsigned seed, float scale) {
  const int r = t.rank();
  std::mt19937 rng(seed);
  const auto sizes = random_sizes(rng, 16);
  const auto plan = random_plan(sizes.size(), rng);
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::scheduler_options options;
  options.wire_scale = scale;
  tcoll::mixed_precision_scheduler<Wire, Tr, tcoll::sum_op, Algo> s(pool, t, plan, {}, algo,
                                                                    options);
  for (std::size_t i = 0; i < pool.tensor_count(); ++i) {
    auto g = pool.tensor(i);
    for (std::size_t j = 0; j < g.size(); ++j) g[j] = fractional(r, int(i), j) / 64.0f;
  }
  const std::vector<float> input(pool.all().begin(), pool.all().end());
  std::mt19937 order_rng(seed * 7 + 1);
  mark_all_random(s, pool.tensor_count(), order_rng);
  const auto& timing = s.finish();
  for (std::size_t k = 0; k < plan.bucket_count(); ++k)
    CHECK(timing.buckets[k].bytes == pool.range_size(plan.begin(k), plan.end(k)) * sizeof(Wire));

  std::vector<float> reference(input.size());
  tcoll::mixed_precision_report report;
  for (std::size_t k = 0; k < plan.bucket_count(); ++k) {
    const std::size_t off = pool.range_offset(plan.begin(k), plan.end(k));
    const std::size_t n = pool.range_size(plan.begin(k), plan.end(k));
    if (n == 0) continue;
    report =
        tcoll::allreduce_mixed<Wire>(t, input.data() + off, reference.data() + off, n,
                                     tcoll::sum_op{}, algo, tcoll::cpu_reducer{}, {.scale = scale});
  }
  const std::string what =
      std::string(Algo::name) + " seed " + std::to_string(seed) + " rank " + std::to_string(r);
  CHECK_MESSAGE(same_bits(reference, pool.all()),
                what << ": differs from allreduce_mixed of each bucket");
  // against the float sum, within the adaptor's first-order bound
  std::vector<float> exact = input, magnitude(input.size());
  for (std::size_t i = 0; i < input.size(); ++i) magnitude[i] = std::fabs(input[i]);
  tcoll::allreduce(t, std::span<float>(exact), tcoll::sum_op{}, tcoll::recursive_doubling{});
  tcoll::allreduce(t, std::span<float>(magnitude), tcoll::sum_op{}, tcoll::recursive_doubling{});
  if (report.roundings == 0) report.roundings = t.size() + 1; // only empty buckets
  std::size_t outside = 0;
  for (std::size_t i = 0; i < input.size(); ++i)
    if (std::fabs(double(pool.all()[i]) - exact[i]) > report.bound(magnitude[i]) * 1.01 + 1e-6)
      ++outside;
  CHECK_MESSAGE(outside == 0, what << ": " << outside << " elements outside the error bound");
  CHECK_MESSAGE(identical_on_all_ranks(t, pool.data(), pool.bytes()), what);

  tcoll::scheduler_options bad;
  bad.wire_scale = 0.0f;
  CHECK_THROWS_AS((tcoll::mixed_precision_scheduler<Wire, Tr, tcoll::sum_op, Algo>(pool, t, plan,
                                                                                   {}, algo, bad)),
                  tcoll::invalid_argument);
}

/// Autotune: measures two iterations, re-plans, and every rank adopts the same plan;
/// results stay correct across the switch.
template <class Tr>
void autotune_case(Tr& t) {
  const int P = t.size(), r = t.rank();
  std::vector<std::size_t> sizes{4000, 10, 8000, 300, 20000, 50, 1000};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::scheduler_options opt;
  opt.autotune_iterations = 2;
  opt.autotune_replan = tcoll::plan::replan_with(tcoll::plan::mgwfbp_planner{});
  tcoll::overlap_scheduler<Tr, float> s(pool, t, plan_with_ends({1, 2, 3, 4, 5, 6, 7}),
                                        tcoll::sum_op{}, tcoll::automatic{}, opt);
  for (int it = 0; it < 4; ++it) {
    for (std::size_t i = 0; i < pool.tensor_count(); ++i) {
      for (auto& x : pool.tensor(i)) x = float(r + 1);
      std::this_thread::sleep_for(std::chrono::microseconds(200 * (r + 1)));
      s.mark_ready(i);
    }
    s.finish();
    for (float x : pool.all()) REQUIRE(x == float(P * (P + 1) / 2));
    CHECK(s.autotuned() == (it >= 1));
  }
  REQUIRE(s.fitted_cost().has_value());
  const auto& ends = s.plan().ends;
  CHECK(identical_on_all_ranks(t, ends.data(), ends.size() * sizeof(std::size_t)));
  CHECK(tcoll::plan::is_valid(s.plan(), sizes.size()));
  // autotune without a way to re-plan is refused before anything is exchanged
  tcoll::scheduler_options no_replan;
  no_replan.autotune_iterations = 2;
  CHECK_THROWS_WITH_AS(
      (tcoll::overlap_scheduler<Tr, float>(pool, t, plan_with_ends({7}), tcoll::sum_op{},
                                           tcoll::automatic{}, no_replan)),
      doctest::Contains("options.autotune_replan is empty"), tcoll::invalid_argument);
}

/// Plans that differ across ranks: every rank throws, naming the first differing rank.
template <class Tr>
void plan_mismatch_case(Tr& t) {
  if (t.size() < 2) return;
  const int odd = t.size() - 1;
  std::vector<std::size_t> sizes{10, 20, 30};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::plan::bucket_plan p = t.rank() == odd ? plan_with_ends({1, 3}) : plan_with_ends({2, 3});
  try {
    tcoll::overlap_scheduler<Tr, float> s(pool, t, p);
    FAIL_CHECK("a plan that differs across ranks was accepted");
  } catch (const tcoll::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("rank " + std::to_string(odd) + " runs a different plan") !=
                      std::string::npos,
                  msg);
    CHECK(e.peer() == odd);
  }
  // invalid plans are rejected locally, before any communication
  CHECK_THROWS_AS((tcoll::overlap_scheduler<Tr, float>(pool, t, plan_with_ends({1, 2}))),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS((tcoll::overlap_scheduler<Tr, float>(pool, t, plan_with_ends({2, 2, 3}))),
                  tcoll::invalid_argument);
}

/// Marking twice or out of range is a local invalid_argument; the iteration still works.
template <class Tr>
void bad_marks_case(Tr& t) {
  std::vector<std::size_t> sizes{5, 6};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::overlap_scheduler<Tr, float> s(pool, t, plan_with_ends({1, 2}));
  for (auto& x : pool.all()) x = 1.0f;
  s.mark_ready(1);
  try {
    s.mark_ready(1);
    FAIL_CHECK("a tensor marked twice was accepted");
  } catch (const tcoll::invalid_argument& e) {
    CHECK(std::string(e.what()).find("tensor 1 was already marked") != std::string::npos);
    CHECK(e.rank() == t.rank());
  }
  CHECK_THROWS_AS(s.mark_ready(2), tcoll::invalid_argument);
  s.mark_ready(0);
  s.finish();
  for (float x : pool.all()) CHECK(x == float(t.size()));
}

/// `finish()` on `early` before its last tensor is marked: that rank gets invalid_argument
/// naming the tensor, its unsent bucket is untouched, and the other ranks fail (aborted or
/// timed out) well within the transport timeout, without hanging.
template <class Tr>
void finish_early_case(Tr& t, int early) {
  if (t.size() < 2) return;
  std::vector<std::size_t> sizes{100, 200, 300};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::overlap_scheduler<Tr, float> s(pool, t, plan_with_ends({1, 2, 3}));
  for (auto& x : pool.all()) x = 0.75f;
  const auto start = tcoll::clock::now();
  if (t.rank() == early) {
    s.mark_ready(0);
    try {
      s.finish();
      FAIL_CHECK("finish() with an unmarked tensor did not throw");
    } catch (const tcoll::invalid_argument& e) {
      CHECK(std::string(e.what()).find("tensor 1 was never marked") != std::string::npos);
    } catch (const tcoll::error& e) {
      // a peer's failure may surface first through bucket 0
      CHECK(std::string(e.what()).find("[rank " + std::to_string(t.rank()) + "]") !=
            std::string::npos);
    }
    for (std::size_t i = 1; i < 3; ++i)
      for (float x : pool.tensor(i)) REQUIRE(x == 0.75f); // never sent
  } else {
    for (std::size_t i = 0; i < 3; ++i) s.mark_ready(i);
    CHECK_THROWS_AS(s.finish(), tcoll::error);
  }
  CHECK(tcoll::clock::now() - start < t.timeout() * 2 + 1s);
}

/// A peer that never marks its last tensor (and never calls finish): the others' last
/// bucket fails within the transport timeout with a clear error.
template <class Tr>
void silent_peer_case(Tr& t, int silent) {
  if (t.size() < 2) return;
  std::vector<std::size_t> sizes{64, 64};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::overlap_scheduler<Tr, float> s(pool, t, plan_with_ends({1, 2}));
  for (auto& x : pool.all()) x = 1.0f;
  const auto start = tcoll::clock::now();
  s.mark_ready(0);
  if (t.rank() == silent) {
    // leaves without marking tensor 1; its scheduler waits for bucket 0 on destruction
    return;
  }
  s.mark_ready(1);
  try {
    s.finish();
    FAIL_CHECK("a bucket without one rank completed");
  } catch (const tcoll::timeout_error& e) {
    CHECK(e.rank() == t.rank());
  } catch (const tcoll::aborted_error& e) {
    CHECK(e.rank() == t.rank());
  }
  CHECK(tcoll::clock::now() - start < t.timeout() * 3 + 1s);
}

/// A transport broken before the buckets start (a peer's failure announced, a failed
/// collective): every `mark_ready` returns normally, `finish()` throws the cause, and the
/// pool keeps its unreduced values. Never a success with buckets left unreduced.
template <class Tr>
void broken_transport_case(Tr& t) {
  std::vector<std::size_t> sizes{8, 16, 24};
  tcoll::gradient_pool<float> pool(sizes);
  tcoll::overlap_scheduler<Tr, float> s(pool, t, plan_with_ends({1, 2, 3}));
  for (auto& x : pool.all()) x = 0.25f;
  // broken on this rank only (no abort, which would reach peers still constructing)
  tcoll::collective_context* context = tcoll::detail::context_of(t);
  REQUIRE(context != nullptr);
  context->fail(
      std::make_exception_ptr(tcoll::aborted_error("broken on purpose by the test", t.rank())));
  for (std::size_t i = 0; i < pool.tensor_count(); ++i) CHECK_NOTHROW(s.mark_ready(i));
  CHECK_THROWS_WITH_AS(s.finish(), doctest::Contains("broken on purpose by the test"),
                       tcoll::aborted_error);
  for (float x : pool.all()) REQUIRE(x == 0.25f);
  // the next iteration fails the same way: the transport stays broken, never confused
  for (std::size_t i = 0; i < pool.tensor_count(); ++i) CHECK_NOTHROW(s.mark_ready(i));
  CHECK_THROWS_AS(s.finish(), tcoll::aborted_error);
}

} // namespace schedule_test
