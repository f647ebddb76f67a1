// One set of cost formulas (issue 11): the traffic each flat algorithm's cost model
// assumes (plan::allreduce_traffic, from which plan::allreduce_us is computed) against
// what the real algorithm does, recorded by the counting transport (messages and bytes
// per rank) and a counting reducer (elements combined per rank) on the threads transport.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <vector>

#include "tcoll/collectives.hpp"
#include "tcoll/plan/cost_model.hpp"
#include "tcoll/transport/counting.hpp"
#include "tcoll/transport/threads.hpp"

using namespace tcoll;

namespace {

/// cpu_reducer that also counts the elements it combines (on this rank).
struct counting_reducer : cpu_reducer {
  std::atomic<std::size_t>* reduced = nullptr;
  template <class Op, class T>
  void reduce(const Op& op, T* dst, const T* a, const T* b, std::size_t n) const {
    *reduced += n;
    cpu_reducer::reduce(op, dst, a, b, n);
  }
};

/// The busiest rank's counts over all ranks: the max of each field, as the model states
/// them for the rank on its critical path.
struct observed {
  std::size_t messages_sent = 0, messages_received = 0, bytes_sent = 0, bytes_received = 0,
              bytes_reduced = 0;
};

template <class Algo>
observed run_counted(int P, std::size_t n, const Algo& algo) {
  std::vector<traffic> per_rank(static_cast<std::size_t>(P));
  std::vector<std::atomic<std::size_t>> reduced(static_cast<std::size_t>(P));
  thread_team(P).run([&](thread_transport& t) {
    counting<thread_transport> c(t);
    counting_reducer red;
    red.reduced = &reduced[std::size_t(t.rank())];
    std::vector<double> v(n, 0.5 + t.rank());
    allreduce(c, v.data(), v.data(), n, sum_op{}, algo, red);
    per_rank[std::size_t(t.rank())] = c.counts();
  });
  observed o;
  for (int r = 0; r < P; ++r) {
    const traffic& tr = per_rank[std::size_t(r)];
    o.messages_sent = std::max(o.messages_sent, tr.messages_sent);
    o.messages_received = std::max(o.messages_received, tr.messages_received);
    o.bytes_sent = std::max(o.bytes_sent, tr.bytes_sent);
    o.bytes_received = std::max(o.bytes_received, tr.bytes_received);
    o.bytes_reduced = std::max(o.bytes_reduced, reduced[std::size_t(r)].load() * sizeof(double));
  }
  return o;
}

template <class Algo>
void check_against_model(plan::modeled_algorithm a, const Algo& algo) {
  for (int P : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
    const int core = plan::power_of_two_core(P);
    // the model is exact when p | n and p' | n (even chunks and halving ranges) and every
    // chunk is one segment (256 KiB by default)
    for (std::size_t m : {1, 3, 7}) {
      const std::size_t n = std::size_t(P) * std::size_t(core) * m;
      const double bytes = double(n) * sizeof(double);
      const plan::rank_traffic model = plan::allreduce_traffic(a, bytes, P);
      const observed got = run_counted(P, n, algo);
      CAPTURE(plan::algorithm_name(a));
      CAPTURE(P);
      CAPTURE(n);
      CHECK(double(got.messages_sent) == model.messages_sent);
      CHECK(double(got.messages_received) == model.messages_received);
      CHECK(double(got.bytes_sent) == model.bytes_sent);
      CHECK(double(got.bytes_received) == model.bytes_received);
      CHECK(double(got.bytes_reduced) == model.bytes_reduced);
      // and the cost is the traffic priced by the link: alpha per non-overlapped message,
      // beta per non-overlapped byte, gamma per reduced byte
      const plan::link_params alpha{1, 0, 0}, beta{0, 1, 0}, gamma{0, 0, 1};
      CHECK(plan::allreduce_us(a, bytes, P, {1, alpha, alpha}) ==
            model.messages_sent + model.messages_received - model.duplex_rounds);
      CHECK(plan::allreduce_us(a, bytes, P, {1, beta, beta}) ==
            doctest::Approx(model.bytes_sent + model.bytes_received - model.duplex_bytes));
      CHECK(plan::allreduce_us(a, bytes, P, {1, gamma, gamma}) ==
            doctest::Approx(model.bytes_reduced));
    }
  }
}

} // namespace

TEST_CASE("ring: the cost model's traffic is the algorithm's") {
  check_against_model(plan::modeled_algorithm::ring, ring{});
}

TEST_CASE("recursive_doubling: the cost model's traffic is the algorithm's (with the fold)") {
  check_against_model(plan::modeled_algorithm::recursive_doubling, recursive_doubling{});
}

TEST_CASE("recursive_halving_doubling: the cost model's traffic is the algorithm's") {
  check_against_model(plan::modeled_algorithm::recursive_halving_doubling,
                      recursive_halving_doubling{});
}

TEST_CASE("binomial_tree: the cost model's traffic is the algorithm's") {
  check_against_model(plan::modeled_algorithm::binomial_tree, binomial_tree{});
}

TEST_CASE("the closed forms by hand (guards the model side of the comparison)") {
  // p = 6 (core 4, one fold): recursive doubling's busiest rank sends lg 4 + 1 = 3 vectors
  const auto rd = plan::allreduce_traffic(plan::modeled_algorithm::recursive_doubling, 80, 6);
  CHECK(rd.messages_sent == 3);
  CHECK(rd.bytes_sent == 240);
  CHECK(rd.duplex_rounds == 2);
  // halving-doubling, p = 8, n = 80: 6 rounds, 2 * 7/8 * 80 = 140 bytes each way, 70 reduced
  const auto hd =
      plan::allreduce_traffic(plan::modeled_algorithm::recursive_halving_doubling, 80, 8);
  CHECK(hd.messages_sent == 6);
  CHECK(hd.bytes_sent == 140);
  CHECK(hd.bytes_reduced == 70);
  CHECK_THROWS_AS(plan::allreduce_traffic(plan::modeled_algorithm::hierarchical_leader, 8, 4),
                  tcoll::invalid_argument);
}
