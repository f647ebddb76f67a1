// Bad input and failures: null pointers, overlapping ranges, overflowing counts, roots out of
// range, span size mismatch, malformed selection strings, a peer that never answers (timeout
// within the configured team timeout, no hang), a failing rank aborting the others.
// Every error must name the argument and the rank, and leave an out-of-place input untouched.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>

#include "common/collective_cases.hpp"
#include "common/threads_team.hpp"

using namespace tcoll::testing;
using namespace std::chrono_literals;

TEST_CASE("bad arguments: clear invalid_argument naming argument and rank, input untouched") {
  for (int P : {1, 2, 3, 4}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      bad_input_cases(t);
      // the team is still usable afterwards (nothing was left half-posted)
      allreduce_case<tcoll::thread_transport, float>(
          t, tcoll::ring{}, tcoll::sum_op{}, op_kind::sum, 5, false,
          case_id{"ring", "float", "sum", 5, t.size(), t.rank(), false}, 3, true);
    });
  }
}

TEST_CASE("malformed selection strings for parse_selection") {
  bad_selection_cases();
}

TEST_CASE("thread_team rejects bad sizes and timeouts") {
  expect_error<tcoll::invalid_argument>([] { tcoll::thread_team(0); }, {"nranks"}, "nranks = 0");
  expect_error<tcoll::invalid_argument>([] { tcoll::thread_team(2, 0ms); }, {"timeout"},
                                        "timeout = 0");
  on_team(2, [](tcoll::thread_transport& t) {
    char c = 0;
    expect_error<tcoll::invalid_argument>([&] { (void)t.isend(2, &c, 1, 0); },
                                          {"peer 2", "[rank " + std::to_string(t.rank()) + "]"},
                                          "isend to peer 2 of 2");
    expect_error<tcoll::invalid_argument>([&] { (void)t.irecv(-1, &c, 1, 0); }, {"peer -1"},
                                          "irecv from peer -1");
  });
}

TEST_CASE("a peer that never answers: timeout_error within the team timeout, input untouched") {
  constexpr auto timeout = 200ms;
  for (int P : {2, 3, 4, 5}) {
    for (int absent : {0, P - 1}) {
      CAPTURE(P);
      CAPTURE(absent);
      auto run = [&](auto algo) {
        tcoll::thread_team(P, timeout).run([&](tcoll::thread_transport& t) {
          absent_peer_case(t, absent, algo);
        });
      };
      run(tcoll::ring{});
      run(tcoll::recursive_doubling{});
      run(tcoll::recursive_halving_doubling{});
      run(tcoll::binomial_tree{});
    }
  }
}

TEST_CASE("a peer that never answers: thread_team::run rethrows the timeout, not an abort") {
  std::vector<float> in(100, 1.0f), out(100);
  const auto start = tcoll::clock::now();
  try {
    tcoll::thread_team(4, 200ms).run([&](tcoll::thread_transport& t) {
      if (t.rank() == 2) return; // never calls the collective
      std::vector<float> mine(in), res(out);
      tcoll::allreduce(t, mine.data(), res.data(), mine.size(), tcoll::sum_op{}, tcoll::ring{});
    });
    FAIL_CHECK("no exception");
  } catch (const tcoll::timeout_error& e) {
    CHECK(std::string(e.what()).find("timed out after 200 ms") != std::string::npos);
    CHECK(e.rank() >= 0);
    CHECK(e.peer() >= 0);
  }
  const auto elapsed = tcoll::clock::now() - start;
  CHECK(elapsed >= 200ms);
  CHECK(elapsed < 2s);
}

TEST_CASE("a failing rank aborts the others instead of letting them hang") {
  // rank 1 throws before the collective; the others must leave long before the 30 s timeout
  const auto start = tcoll::clock::now();
  std::atomic<int> aborted{0};
  CHECK_THROWS_WITH_AS(on_team(4,
                               [&](tcoll::thread_transport& t) {
                                 if (t.rank() == 1) throw std::runtime_error("rank 1 failed");
                                 std::vector<float> v(1000, 1.0f);
                                 try {
                                   tcoll::allreduce(t, v.data(), v.data(), v.size());
                                 } catch (const tcoll::aborted_error&) {
                                   ++aborted;
                                   throw;
                                 }
                               }),
                       "rank 1 failed", std::runtime_error);
  CHECK(aborted.load() == 3);
  CHECK(tcoll::clock::now() - start < 5s);
}

TEST_CASE("a size mismatch between sender and receiver is a transport_error, not UB") {
  CHECK_THROWS_AS(on_team(2,
                          [](tcoll::thread_transport& t) {
                            // ranks disagree on the count: rank 0 sends 8 floats, 1 expects 4
                            std::vector<float> v(t.rank() == 0 ? 8 : 4, 1.0f);
                            tcoll::allreduce(t, v.data(), v.data(), v.size(), tcoll::sum_op{},
                                             tcoll::recursive_doubling{});
                          }),
                  tcoll::transport_error);
}
