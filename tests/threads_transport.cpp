// The thread transport on its own: eager lanes and zero-copy sends match by tag in posting
// order (also when a pair's lanes are full and later sends go zero copy, and while the
// receiver polls as the sender publishes), a size mismatch on either path is a clear error,
// a consumer that throws frees its lane, two threads of one rank may send at once, and bad
// options are rejected. Also the executor's rule for stream-ordered transports (no host
// synchronization between rounds), which the GPU suite tests on a GPU.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tcoll/transport/counting.hpp>

#include "common/collective_cases.hpp"
#include "common/threads_team.hpp"

using namespace tcoll::testing;
using namespace std::chrono_literals;

namespace {

using request = tcoll::thread_transport::request;

/// Eager limits to run every case with: all zero copy, a tiny limit with two lanes (so lanes
/// run out and sizes straddle the limit), and the default.
std::vector<tcoll::thread_options> option_sets() {
  tcoll::thread_options none{.timeout = team_timeout, .eager_bytes = 0};
  tcoll::thread_options tiny{.timeout = team_timeout, .eager_bytes = 64, .eager_lanes = 2};
  tcoll::thread_options defaults{.timeout = team_timeout};
  return {none, tiny, defaults};
}

std::string describe(const tcoll::thread_options& o) {
  return "eager_bytes=" + std::to_string(o.eager_bytes) +
         " eager_lanes=" + std::to_string(o.eager_lanes);
}

void wait_all(tcoll::thread_transport& t, std::vector<request>& rs) {
  const auto when = tcoll::clock::now() + t.timeout();
  for (auto& q : rs) t.wait(q, when);
}

unsigned char pattern(int rank, int message, std::size_t i) {
  return static_cast<unsigned char>(rank * 31 + message * 7 + i);
}

} // namespace

TEST_CASE("threads: messages between a pair match by tag in posting order, on both paths") {
  // 8 messages to the right neighbour, tags 5,6,5,6,...; sizes from 0 to past every eager
  // limit; the receiver posts (and waits) tag 6 first, then tag 5.
  const std::size_t sizes[8] = {0, 4, 64, 65, 1024, 1025, 4081, 9000};
  for (const auto& options : option_sets()) {
    CAPTURE(describe(options));
    for (int P : {1, 2, 3}) {
      CAPTURE(P);
      tcoll::thread_team(P, options).run([&](tcoll::thread_transport& t) {
        const int r = t.rank(), to = (r + 1) % P, from = (r + P - 1) % P;
        std::vector<std::vector<unsigned char>> out(8), in(8);
        std::vector<request> sends, recvs;
        for (int k = 0; k < 8; ++k) {
          out[k].resize(sizes[k]);
          for (std::size_t i = 0; i < sizes[k]; ++i) out[k][i] = pattern(r, k, i);
          sends.push_back(t.isend(to, out[k].data(), sizes[k], 5 + k % 2));
        }
        for (int k : {1, 3, 5, 7, 0, 2, 4, 6}) {
          in[k].assign(sizes[k], 0xee);
          recvs.push_back(t.irecv(from, in[k].data(), sizes[k], 5 + k % 2));
        }
        wait_all(t, recvs);
        wait_all(t, sends);
        for (int k = 0; k < 8; ++k) {
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < sizes[k]; ++i) wrong += in[k][i] != pattern(from, k, i);
          CHECK_MESSAGE(wrong == 0, "message " << k << " of " << sizes[k] << " bytes");
        }
      });
    }
  }
}

TEST_CASE("threads: a stream of same-tag messages arrives in order while the receiver polls") {
  // Rank 0 posts numbered messages of one tag in bursts of 8; rank 1 receives them one at a
  // time, polling while rank 0 publishes. A receiver that takes a newer message of the tag
  // before an older one (say, because it read the lanes while the sender published) sees a
  // number out of order. With the tiny limit, sizes straddle it and lanes run out, so
  // sends fall back to zero copy in the middle of the stream.
  constexpr int messages = 40000, burst = 8;
  const std::size_t sizes[4] = {8, 60, 100, 24};
  for (const auto& options : option_sets()) {
    CAPTURE(describe(options));
    tcoll::thread_team(2, options).run([&](tcoll::thread_transport& t) {
      const auto when = tcoll::clock::now() + t.timeout();
      auto count = [&](int m) { return sizes[m % 4] / sizeof(std::uint32_t); };
      int out_of_order = 0;
      if (t.rank() == 0) {
        std::vector<std::vector<std::uint32_t>> out(burst);
        std::vector<request> sends(burst);
        for (int m = 0; m < messages; m += burst) {
          for (int k = 0; k < burst; ++k) {
            out[k].assign(count(m + k), static_cast<std::uint32_t>(m + k));
            sends[k] = t.isend(1, out[k].data(), out[k].size() * sizeof(std::uint32_t), 3);
          }
          wait_all(t, sends);
        }
      } else {
        std::vector<std::uint32_t> in;
        for (int m = 0; m < messages; ++m) {
          in.assign(count(m), 0xffffffffu);
          auto q = t.irecv(0, in.data(), in.size() * sizeof(std::uint32_t), 3);
          t.wait(q, when); // a size mismatch (out of order too) throws and fails the case
          for (std::uint32_t v : in) out_of_order += v != static_cast<std::uint32_t>(m);
        }
      }
      CHECK(out_of_order == 0);
    });
  }
}

TEST_CASE("threads: a size mismatch on either path is a transport_error naming the peer") {
  // {sent, expected}: both eager, eager sent but a longer receive, both zero copy
  const std::size_t cases[3][2] = {{8, 16}, {8, 8000}, {8000, 6000}};
  for (const auto& c : cases) {
    CAPTURE(c[0]);
    CAPTURE(c[1]);
    tcoll::thread_team(2, 5s).run([&](tcoll::thread_transport& t) {
      std::vector<unsigned char> buf(8000, 1);
      if (t.rank() == 0) {
        auto s = t.isend(1, buf.data(), c[0], 9);
        try {
          t.wait(s, tcoll::clock::now() + t.timeout());
        } catch (const tcoll::transport_error&) {
          // the zero-copy sender learns of the mismatch too; an eager one completed at once
        }
      } else {
        auto q = t.irecv(0, buf.data(), c[1], 9);
        try {
          t.wait(q, tcoll::clock::now() + t.timeout());
          FAIL_CHECK("mismatched receive did not throw");
        } catch (const tcoll::transport_error& e) {
          CHECK(e.peer() == 0);
          CHECK(e.rank() == 1);
          CHECK(std::string(e.what()).find("matched a send of " + std::to_string(c[0]) +
                                           " bytes") != std::string::npos);
        }
      }
    });
  }
}

TEST_CASE("threads: eager sends complete at once; a consumer that throws still frees its lane") {
  // One lane: rank 0's second eager send completes at once only if rank 1 freed the lane
  // when its consumer threw on the first message.
  tcoll::thread_options options{.timeout = 5s, .eager_bytes = 64, .eager_lanes = 1};
  tcoll::thread_team(2, options).run([&](tcoll::thread_transport& t) {
    const int peer = 1 - t.rank();
    float v = 1.5f, got = 0;
    if (t.rank() == 0) {
      auto first = t.isend(peer, &v, sizeof v, 11);
      CHECK(first.done());
      std::vector<unsigned char> big(65, 7);
      auto long_one = t.isend(peer, big.data(), big.size(), 12); // above the limit: zero copy
      CHECK_FALSE(long_one.done());
      t.barrier(); // rank 1 consumes the first message (and throws)
      t.barrier();
      auto second = t.isend(peer, &v, sizeof v, 13);
      CHECK(second.done());
      t.barrier();
      t.wait(long_one, tcoll::clock::now() + t.timeout());
      return;
    }
    t.barrier();
    auto fail = [](void*, const void*, std::size_t) { throw std::runtime_error("consumer"); };
    auto q = t.irecv_consume(peer, sizeof v, 11, tcoll::consumer{fail, nullptr, nullptr}, nullptr);
    CHECK_THROWS_WITH_AS(t.wait(q, tcoll::clock::now() + t.timeout()), "consumer",
                         std::runtime_error);
    t.barrier();
    t.barrier();
    auto r = t.irecv(peer, &got, sizeof got, 13);
    t.wait(r, tcoll::clock::now() + t.timeout());
    CHECK(got == 1.5f);
    std::vector<unsigned char> sink(65);
    auto l = t.irecv(peer, sink.data(), sink.size(), 12);
    t.wait(l, tcoll::clock::now() + t.timeout());
    CHECK(sink == std::vector<unsigned char>(65, 7));
  });
}

TEST_CASE("threads: two threads of one rank send and receive at once") {
  // rank 0's main thread and a helper thread each stream 2000 messages to rank 1 under their
  // own tag; rank 1 receives both streams, also from two threads. Every stream must arrive
  // whole and in order.
  constexpr int messages = 2000;
  for (const auto& options : option_sets()) {
    CAPTURE(describe(options));
    tcoll::thread_team(2, options).run([&](tcoll::thread_transport& t) {
      std::atomic<int> bad{0};
      auto stream = [&](int tag) {
        const auto when = tcoll::clock::now() + t.timeout();
        for (int m = 0; m < messages; ++m) {
          std::uint32_t v[3] = {static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(tag),
                                static_cast<std::uint32_t>(m * 7)};
          const std::size_t bytes = (m % 3 + 1) * sizeof(std::uint32_t);
          if (t.rank() == 0) {
            auto s = t.isend(1, v, bytes, tag);
            t.wait(s, when);
          } else {
            std::uint32_t got[3] = {~0u, ~0u, ~0u};
            auto q = t.irecv(0, got, bytes, tag);
            t.wait(q, when);
            if (std::memcmp(got, v, bytes) != 0) ++bad;
          }
        }
      };
      std::exception_ptr helper_error;
      std::thread helper([&] {
        try {
          stream(21);
        } catch (...) {
          helper_error = std::current_exception();
        }
      });
      try {
        stream(20);
      } catch (...) {
        helper.join();
        throw;
      }
      helper.join();
      if (helper_error) std::rethrow_exception(helper_error);
      CHECK(bad.load() == 0);
    });
  }
}

TEST_CASE("threads: bad eager options are invalid_argument") {
  expect_error<tcoll::invalid_argument>(
      [] { tcoll::thread_team(2, tcoll::thread_options{.eager_bytes = 65 * 1024}); },
      {"eager_bytes", "66560"}, "eager_bytes above 64 KiB");
  expect_error<tcoll::invalid_argument>(
      [] { tcoll::thread_team(2, tcoll::thread_options{.eager_lanes = 65}); }, {"eager_lanes"},
      "65 lanes");
  expect_error<tcoll::invalid_argument>(
      [] { tcoll::thread_team(2, tcoll::thread_options{.timeout = 0ms}); }, {"timeout"},
      "timeout 0");
}

namespace {

/// The thread transport, declared stream ordered or not (the executor reads only the trait).
template <bool Ordered>
struct ordering_probe : tcoll::counting<tcoll::thread_transport> {
  static constexpr bool stream_ordered = Ordered;
  using counting::counting;
};

/// The CPU reducer, counting its `synchronize()` calls.
struct sync_counting_reducer : tcoll::cpu_reducer {
  int* syncs = nullptr;
  void synchronize() const { ++*syncs; }
};

template <bool Ordered, class Algo>
int synchronizations_of_one_allreduce(const Algo& algo) {
  std::atomic<int> total{0};
  tcoll::thread_team(3, 30s).run([&](tcoll::thread_transport& inner) {
    ordering_probe<Ordered> t(inner);
    int syncs = 0;
    sync_counting_reducer red;
    red.syncs = &syncs;
    std::vector<float> in(1000), out(1000);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(inner.rank() + int(i % 7));
    tcoll::allreduce(t, in.data(), out.data(), in.size(), tcoll::sum_op{}, algo, red);
    for (std::size_t i = 0; i < out.size(); ++i)
      REQUIRE(out[i] == float(0 + 1 + 2 + 3 * int(i % 7)));
    total += syncs;
  });
  return total.load();
}

} // namespace

TEST_CASE("executor: a stream-ordered transport gets no host synchronization between rounds") {
  static_assert(tcoll::transport_is_stream_ordered<ordering_probe<true>>());
  static_assert(!tcoll::transport_is_stream_ordered<ordering_probe<false>>());
  static_assert(!tcoll::transport_is_stream_ordered<tcoll::thread_transport>());
  CHECK(synchronizations_of_one_allreduce<true>(tcoll::ring{}) == 0);
  CHECK(synchronizations_of_one_allreduce<true>(tcoll::recursive_doubling{}) == 0);
  // the other transports synchronize the reducer after every round (ring at 3 ranks: 4
  // rounds on each of the 3 ranks, at least)
  CHECK(synchronizations_of_one_allreduce<false>(tcoll::ring{}) >= 12);
  CHECK(synchronizations_of_one_allreduce<false>(tcoll::recursive_doubling{}) >= 3);
}
