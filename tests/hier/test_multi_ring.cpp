// multi_ring: bit-exact sums, symbolic proof, rank identity, counts from the step recorder
// against the ring formula, and tensor_allreduce (several local buffers per rank).
#include <doctest/doctest.h>

#include <random>
#include <tcoll/algorithm/multi_ring.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/core/symbolic.hpp>
#include <tcoll/tensor_allreduce.hpp>
#include <tcoll/transport/threads.hpp>
#include <vector>

#include "common.hpp"

using namespace tcoll;
using namespace hier_test;

TEST_CASE("multi_ring: sums, symbolic proof and identity for K rings, both orders") {
  for (int P : {1, 2, 3, 4, 5})
    for (int K : {1, 2, 3})
      for (auto order : {ring_order::forward, ring_order::alternate})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1003}}) {
          CAPTURE(P);
          CAPTURE(K);
          CAPTURE(n);
          CAPTURE(order == ring_order::forward);
          const multi_ring algo{K, order, 16}; // 4-float segments: several per chunk
          results<float> sums(P), rnd(P);
          std::atomic<int> wrong_sets{0}, touched{0};
          thread_team(P).run([&](thread_transport& t) {
            std::vector<float> in(n), out(n);
            for (std::size_t i = 0; i < n; ++i) in[i] = value(t.rank(), i);
            const auto original = in;
            tcoll::allreduce(t, in.data(), out.data(), n, sum_op{}, algo);
            if (in != original) touched += 1;
            sums.per_rank[std::size_t(t.rank())] = out;
            std::mt19937 gen(unsigned(t.rank() + 3));
            std::uniform_real_distribution<float> d(-1, 1);
            for (auto& e : in) e = d(gen);
            tcoll::allreduce(t, in.data(), in.data(), n, sum_op{}, algo); // in place
            rnd.per_rank[std::size_t(t.rank())] = in;
            using symbolic::rank_set;
            std::vector<rank_set> s(n, rank_set::of(t.rank())), so(n);
            tcoll::allreduce(t, s.data(), so.data(), n, symbolic::disjoint_union{}, algo);
            for (auto e : so)
              if (e != rank_set::all(P)) wrong_sets += 1;
          });
          CHECK(touched == 0);
          CHECK(wrong_sets == 0);
          CHECK(sums.identical());
          CHECK(rnd.identical());
          for (std::size_t i = 0; i < n; ++i)
            if (sums.per_rank[0][i] != expected_sum(P, i)) {
              FAIL_CHECK("element " << i);
              break;
            }
        }
}

TEST_CASE("multi_ring: rounds, messages and bytes from the step recorder") {
  using namespace tcoll::detail;
  for (int P : {2, 3, 4, 7})
    for (int K : {1, 2, 4})
      for (std::size_t n : {std::size_t{1000}, std::size_t{4096 + 3}}) {
        CAPTURE(P);
        CAPTURE(K);
        CAPTURE(n);
        std::size_t total_elems = 0, total_msgs = 0;
        const std::size_t seg_elems = 64;
        for (int r = 0; r < P; ++r) {
          step_recorder rec;
          multi_ring{K, ring_order::alternate, seg_elems * sizeof(float)}.allreduce(
              rec, layout{r, P, n, sizeof(float), 0, false});
          CHECK(rec.rounds.size() == std::size_t(2 * (P - 1)));
          for (const auto& round : rec.rounds)
            for (const auto& s : round)
              if (s.kind == step_kind::send) {
                total_elems += s.src.count;
                total_msgs += 1;
                CHECK(s.src.count <= seg_elems);
              }
        }
        // each ring k over n_k elements moves 2(P-1) n_k in total: sum over rings 2(P-1) n
        CHECK(total_elems == 2 * std::size_t(P - 1) * n);
        // messages: each chunk sent 2(P-1) times in total... count it independently:
        std::size_t expect_msgs = 0;
        for (int k = 0; k < K; ++k) {
          const std::size_t nk = n / K + (std::size_t(k) < n % K ? 1 : 0);
          for (int c = 0; c < P; ++c) {
            const std::size_t ck = nk / P + (std::size_t(c) < nk % P ? 1 : 0);
            // chunk c is sent by P-1 ranks in the reduce-scatter and P-1 in the allgather
            expect_msgs += 2 * std::size_t(P - 1) * ((ck + seg_elems - 1) / seg_elems);
          }
        }
        CHECK(total_msgs == expect_msgs);
      }
}

TEST_CASE("tensor_allreduce: several local buffers per rank act as one member") {
  for (int P : {1, 2, 3})
    for (int B : {1, 2, 3})
      for (std::size_t n : {std::size_t{1}, std::size_t{10}, std::size_t{1000}}) {
        CAPTURE(P);
        CAPTURE(B);
        CAPTURE(n);
        const tensor_options opt{64}; // 16 floats per segment: the pipeline runs
        std::atomic<int> wrong{0}, wrong_sets{0}, mismatch{0};
        results<float> first(P);
        thread_team(P).run([&](thread_transport& t) {
          std::vector<std::vector<float>> bufs(static_cast<std::size_t>(B), std::vector<float>(n));
          std::vector<float*> ptrs;
          for (int b = 0; b < B; ++b) {
            for (std::size_t i = 0; i < n; ++i)
              bufs[std::size_t(b)][i] = value(t.rank() * B + b, i);
            ptrs.push_back(bufs[std::size_t(b)].data());
          }
          tensor_allreduce(t, std::span<float* const>(ptrs), n, sum_op{}, opt);
          for (int b = 0; b < B; ++b) {
            for (std::size_t i = 0; i < n; ++i)
              if (bufs[std::size_t(b)][i] != expected_sum(P * B, i)) wrong += 1;
            if (bufs[std::size_t(b)] != bufs[0]) mismatch += 1;
          }
          first.per_rank[std::size_t(t.rank())] = bufs[0];
          using symbolic::rank_set;
          std::vector<std::vector<rank_set>> s(static_cast<std::size_t>(B));
          std::vector<rank_set*> sp;
          for (int b = 0; b < B; ++b) {
            s[std::size_t(b)].assign(n, rank_set::of(t.rank() * B + b));
            sp.push_back(s[std::size_t(b)].data());
          }
          tensor_allreduce(t, std::span<rank_set* const>(sp), n, symbolic::disjoint_union{}, opt);
          for (const auto& v : s)
            for (auto e : v)
              if (e != rank_set::all(P * B)) wrong_sets += 1;
          // avg over P*B members
          std::vector<std::vector<double>> d(static_cast<std::size_t>(B),
                                             std::vector<double>(n, 6.0));
          std::vector<double*> dp;
          for (auto& v : d) dp.push_back(v.data());
          tensor_allreduce(t, std::span<double* const>(dp), n, avg_op{}, opt);
          for (auto& v : d)
            for (double x : v)
              if (x != 6.0) wrong += 1;
        });
        CHECK(wrong == 0);
        CHECK(wrong_sets == 0);
        CHECK(mismatch == 0);
        CHECK(first.identical());
      }
}

TEST_CASE("tensor_allreduce: argument errors") {
  thread_team(2).run([&](thread_transport& t) {
    std::vector<float> a(10), b(10);
    std::vector<float*> none;
    CHECK_THROWS_WITH_AS(tensor_allreduce(t, std::span<float* const>(none), 10),
                         doctest::Contains("buffers is empty"), invalid_argument);
    std::vector<float*> overlap{a.data(), a.data() + 5};
    CHECK_THROWS_WITH_AS(tensor_allreduce(t, std::span<float* const>(overlap), 10),
                         doctest::Contains("buffers[1] overlaps buffers[0]"), invalid_argument);
    std::vector<float*> null{a.data(), nullptr};
    CHECK_THROWS_WITH_AS(tensor_allreduce(t, std::span<float* const>(null), 10),
                         doctest::Contains("buffers[1] is null"), invalid_argument);
  });
}

TEST_CASE("tensor_allreduce: avg divides by the buffers of all ranks when ranks own different "
          "numbers (issue 11)") {
  // rank r owns r + 1 buffers; buffer b of rank r holds 0.25 (member + 1) + 0.5 i with
  // member = its index over all ranks' buffers: sums of quarters are exact, so the
  // expected mean is the exact sum divided once by the member count.
  for (int P : {1, 2, 3, 4})
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{100}}) {
      CAPTURE(P);
      CAPTURE(n);
      const int members = P * (P + 1) / 2;
      double member_sum = 0; // sum over members of 0.25 (member + 1)
      for (int m = 0; m < members; ++m) member_sum += 0.25 * (m + 1);
      std::atomic<int> wrong{0};
      results<double> first(P);
      thread_team(P).run([&](thread_transport& t) {
        const int B = t.rank() + 1, first_member = t.rank() * (t.rank() + 1) / 2;
        std::vector<std::vector<double>> bufs(static_cast<std::size_t>(B), std::vector<double>(n));
        std::vector<double*> ptrs;
        for (int b = 0; b < B; ++b) {
          for (std::size_t i = 0; i < n; ++i)
            bufs[std::size_t(b)][i] = 0.25 * (first_member + b + 1) + 0.5 * double(i);
          ptrs.push_back(bufs[std::size_t(b)].data());
        }
        tensor_allreduce(t, std::span<double* const>(ptrs), n, avg_op{}, tensor_options{64});
        for (const auto& v : bufs)
          for (std::size_t i = 0; i < n; ++i)
            if (v[i] != (member_sum + 0.5 * double(i) * members) / members) wrong += 1;
        first.per_rank[std::size_t(t.rank())] = bufs[0];
        // sum needs no exchange and sums every buffer of every rank
        for (auto& v : bufs) std::fill(v.begin(), v.end(), 1.5);
        tensor_allreduce(t, std::span<double* const>(ptrs), n, sum_op{}, tensor_options{64});
        for (const auto& v : bufs)
          for (double x : v)
            if (x != 1.5 * members) wrong += 1;
      });
      CHECK(wrong == 0);
      CHECK(first.identical());
    }
}

TEST_CASE("tensor_allreduce: avg with different element counts fails on every rank, naming the "
          "rank that differs, and leaves the transport usable") {
  std::atomic<int> thrown{0}, wrong{0};
  thread_team(3).run([&](thread_transport& t) {
    const std::size_t n = t.rank() == 2 ? 12 : 10; // rank 2 passes a different count
    std::vector<double> a(12, 1.0);
    std::vector<double*> ptrs{a.data()};
    try {
      tensor_allreduce(t, std::span<double* const>(ptrs), n, avg_op{});
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      if (what.find("rank 0 passed 10, rank 2 passed 12") != std::string::npos && e.peer() == 2)
        thrown += 1;
    }
    // nothing broke: the next collective runs
    std::fill(a.begin(), a.end(), 0.5 * (t.rank() + 1));
    tensor_allreduce(t, std::span<double* const>(ptrs), 12, avg_op{});
    for (double x : a)
      if (x != 1.0) wrong += 1;
  });
  CHECK(thrown == 3);
  CHECK(wrong == 0);
}
