// mpi_transport at the transport level: point-to-point, splitting, errors, timeout, abort,
// communicator duplication, splits.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <tcoll/schedule/nonblocking.hpp>
#include <tcoll/tcoll.hpp>
#include <tcoll/transport/mpi.hpp>
#include <thread>
#include <vector>

#include "mpi_util.hpp"

using namespace std::chrono_literals;
using mpi_test::world_rank;
using mpi_test::world_size;

namespace {
// Byte i of the message rank `from` sends: depends on both so a mix-up shows.
unsigned char pattern(int from, std::size_t i) {
  return static_cast<unsigned char>((from * 131 + i * 7 + i / 251) & 0xff);
}
} // namespace

TEST_CASE("mpi_transport: duplicates the communicator, reports rank and size") {
  auto t = mpi_test::make(5s);
  CHECK(t.rank() == world_rank());
  CHECK(t.size() == world_size());
  CHECK(t.timeout() == 5s);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(t.comm(), MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT); // same group, different context: a duplicate
  MPI_Errhandler eh;
  MPI_Comm_get_errhandler(t.comm(), &eh);
  CHECK(eh == MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&eh);

  // Moving keeps the communicator; the moved-from object frees nothing.
  MPI_Comm before = t.comm();
  tcoll::mpi_transport moved(std::move(t));
  CHECK(moved.comm() == before);
  CHECK(t.comm() == MPI_COMM_NULL);
  moved.barrier();
}

TEST_CASE("mpi_transport: bad options are rejected with invalid_argument") {
  CHECK_THROWS_AS(tcoll::mpi_transport(MPI_COMM_WORLD, tcoll::mpi_options{0ms}),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::mpi_transport(MPI_COMM_WORLD, tcoll::mpi_options{1s, 0}),
                  tcoll::invalid_argument);
  CHECK_THROWS_AS(
      tcoll::mpi_transport(MPI_COMM_WORLD, tcoll::mpi_options{1s, std::size_t{1} << 31}),
      tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::mpi_transport(MPI_COMM_NULL), tcoll::invalid_argument);
}

TEST_CASE("mpi_transport: ring exchange with irecv and irecv_consume, split messages") {
  const int P = world_size(), r = world_rank();
  const int right = (r + 1) % P, left = (r - 1 + P) % P;
  // max_message_bytes 1000 forces several MPI messages per transfer (the path counts
  // above INT_MAX take), including a short last piece.
  for (std::size_t limit : {std::size_t{1000}, std::size_t{1} << 30}) {
    tcoll::mpi_transport t(MPI_COMM_WORLD, tcoll::mpi_options{20s, limit});
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{1000},
                              std::size_t{10007}}) {
      CAPTURE(limit);
      CAPTURE(bytes);
      std::vector<unsigned char> out(bytes), in(bytes, 0), staging(bytes, 0);
      for (std::size_t i = 0; i < bytes; ++i) out[i] = pattern(r, i);
      // plain receive
      auto rq = t.irecv(left, in.data(), bytes, 11);
      auto sq = t.isend(right, out.data(), bytes, 11);
      const auto when = tcoll::clock::now() + t.timeout();
      t.wait(rq, when);
      t.wait(sq, when);
      CHECK(rq.done());
      bool ok = true;
      for (std::size_t i = 0; i < bytes; ++i) ok = ok && in[i] == pattern(left, i);
      CHECK(ok);
      // consuming receive: the consumer sees the staging buffer with the data
      struct seen_t {
        const void* data = nullptr;
        std::size_t bytes = ~std::size_t{0};
        bool ok = false;
        int left = 0;
      } seen;
      seen.left = left;
      tcoll::consumer use{[](void* ctx, const void* data, std::size_t n) {
                            auto& s = *static_cast<seen_t*>(ctx);
                            s.data = data;
                            s.bytes = n;
                            s.ok = true;
                            const auto* b = static_cast<const unsigned char*>(data);
                            for (std::size_t i = 0; i < n; ++i)
                              s.ok = s.ok && b[i] == pattern(s.left, i);
                          },
                          &seen};
      auto cq = t.irecv_consume(left, bytes, 12, use, staging.data());
      auto sq2 = t.isend(right, out.data(), bytes, 12);
      t.wait(cq, when);
      t.wait(sq2, when);
      CHECK(seen.bytes == bytes);
      CHECK(seen.data == static_cast<const void*>(staging.data()));
      CHECK(seen.ok);
    }
  }
}

TEST_CASE("mpi_transport: irecv_consume without staging is invalid_argument") {
  auto t = mpi_test::make();
  tcoll::consumer use{[](void*, const void*, std::size_t) {}, nullptr};
  CHECK_THROWS_AS(t.irecv_consume(0, 16, 5, use, nullptr), tcoll::invalid_argument);
}

TEST_CASE("mpi_transport: an MPI error becomes transport_error naming rank and peer") {
  auto t = mpi_test::make(10s);
  const int P = t.size();
  int payload = 42;
  // A peer outside the communicator: MPI itself rejects it (MPI_ERR_RANK).
  try {
    auto q = t.isend(P + 3, &payload, sizeof payload, 1);
    auto when = tcoll::clock::now() + t.timeout();
    t.wait(q, when);
    FAIL("send to an invalid peer did not throw");
  } catch (const tcoll::transport_error& e) {
    const std::string what = e.what();
    CHECK(e.rank() == t.rank());
    CHECK(e.peer() == P + 3);
    CHECK(what.find("rank " + std::to_string(t.rank())) != std::string::npos);
    CHECK(what.find("MPI_ERR") != std::string::npos);
  }
}

TEST_CASE("mpi_transport: size mismatches are transport_error on the receiver") {
  const int P = world_size(), r = world_rank();
  if (P < 2) return;
  auto t = mpi_test::make(10s);
  std::vector<char> big(100, 'x'), small(50, 0);
  const auto when = tcoll::clock::now() + t.timeout();
  // Receiver posts fewer bytes than sent: MPI reports truncation. MPICH raises errors found
  // while completing a request (MPI_Test, MPI_Wait) on MPI_COMM_WORLD's error handler, not on
  // the request's communicator whose handler the transport set to MPI_ERRORS_RETURN: with
  // world's default (fatal) the job aborts with MPICH's message. A program that wants the
  // exception there sets MPI_ERRORS_RETURN on world, as this test does (docs/preload.md).
#ifdef MPICH_VERSION
  MPI_Errhandler world_handler;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
#endif
  if (r == 0) {
    auto q = t.isend(1, big.data(), big.size(), 3);
    t.wait(q, when);
  } else if (r == 1) {
    auto q = t.irecv(0, small.data(), small.size(), 3);
    try {
      t.wait(q, when);
      FAIL("truncated receive did not throw");
    } catch (const tcoll::transport_error& e) {
      CHECK(e.peer() == 0);
      CHECK(std::string(e.what()).find("TRUNCATE") != std::string::npos);
    }
  }
#ifdef MPICH_VERSION
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_handler);
  MPI_Errhandler_free(&world_handler);
#endif
  // Receiver posts more bytes than sent: tcoll reports the short message.
  if (r == 0) {
    auto q = t.isend(1, small.data(), small.size(), 4);
    t.wait(q, when);
  } else if (r == 1) {
    auto q = t.irecv(0, big.data(), big.size(), 4);
    try {
      t.wait(q, when);
      FAIL("short message did not throw");
    } catch (const tcoll::transport_error& e) {
      CHECK(e.peer() == 0);
      CHECK(std::string(e.what()).find("got 50 bytes") != std::string::npos);
    }
  }
  t.barrier();
}

TEST_CASE("mpi_transport: wait times out, and the cancelled request is released cleanly") {
  tcoll::mpi_transport t(MPI_COMM_WORLD, 300ms);
  int x = 0;
  const auto start = tcoll::clock::now();
  {
    // Nobody sends tag 99: the receive must time out, then be cancelled when destroyed.
    auto q = t.irecv(t.rank(), &x, sizeof x, 99);
    CHECK_THROWS_AS(t.wait(q, start + t.timeout()), tcoll::timeout_error);
  }
  const auto took = tcoll::clock::now() - start;
  CHECK(took >= 300ms);
  CHECK(took < 5s);
  // The cancelled receive must not swallow a later message with the same tag.
  int y = 7, z = 0;
  auto rq = t.irecv(t.rank(), &z, sizeof z, 99);
  auto sq = t.isend(t.rank(), &y, sizeof y, 99);
  const auto when = tcoll::clock::now() + 5s;
  t.wait(rq, when);
  t.wait(sq, when);
  CHECK(z == 7);
  CHECK(x == 0);
}

TEST_CASE("mpi_transport: abort() from another thread makes a pending wait throw") {
  tcoll::mpi_transport t(MPI_COMM_WORLD, 20s);
  int x = 0;
  auto q = t.irecv(t.rank(), &x, sizeof x, 98);
  std::atomic<bool> waiting{false};
  std::thread killer([&] {
    while (!waiting.load()) std::this_thread::yield();
    std::this_thread::sleep_for(100ms);
    t.abort();
  });
  const auto start = tcoll::clock::now();
  waiting = true;
  CHECK_THROWS_AS(t.wait(q, start + t.timeout()), tcoll::aborted_error);
  killer.join();
  CHECK(tcoll::clock::now() - start < 10s);
  // Later operations fail fast too.
  CHECK_THROWS_AS(t.isend(t.rank(), &x, sizeof x, 1), tcoll::aborted_error);
  float v = 1;
  if (t.size() > 1) // one rank has nothing to send: the allreduce is a local copy
    CHECK_THROWS_AS(tcoll::allreduce(t, &v, &v, 1, tcoll::sum_op{}, tcoll::ring{}),
                    tcoll::aborted_error);
  CHECK_THROWS_AS(t.native_allreduce(&v, &v, 1, tcoll::sum_op{}), tcoll::aborted_error);
}

TEST_CASE("mpi_transport: the user's messages on the original communicator do not interfere") {
  const int P = world_size(), r = world_rank();
  auto t = mpi_test::make();
  const int right = (r + 1) % P, left = (r - 1 + P) % P;
  // The user posts messages with tcoll's own collective tag (and ANY_TAG receives) on
  // MPI_COMM_WORLD around a tcoll allreduce; neither may see the other's data.
  const int tag = t.collectives().next_tag();
  std::vector<float> user_out(64, -1.0f - r), user_in(64, 0.0f);
  MPI_Request user_recv, user_send;
  MPI_Irecv(user_in.data(), 64, MPI_FLOAT, left, MPI_ANY_TAG, MPI_COMM_WORLD, &user_recv);
  MPI_Isend(user_out.data(), 64, MPI_FLOAT, right, tag, MPI_COMM_WORLD, &user_send);
  std::vector<float> data(64, float(r + 1));
  tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{});
  MPI_Wait(&user_recv, MPI_STATUS_IGNORE);
  MPI_Wait(&user_send, MPI_STATUS_IGNORE);
  const float expect = float(P) * float(P + 1) / 2;
  for (float v : data) REQUIRE(v == expect);
  for (float v : user_in) REQUIRE(v == -1.0f - left);
}

TEST_CASE("mpi_transport: split_shared and split") {
  const int P = world_size(), r = world_rank();
  auto t = mpi_test::make();
  // One machine: every rank shares memory with every other.
  auto node = t.split_shared();
  CHECK(node.size() == P);
  CHECK(node.rank() == r);
  // Parity groups, ordered by descending world rank.
  auto half = t.split(r % 2, -r);
  int expect_size = 0, expect_rank = 0;
  for (int q = 0; q < P; ++q)
    if (q % 2 == r % 2) {
      ++expect_size;
      if (q > r) ++expect_rank;
    }
  CHECK(half.size() == expect_size);
  CHECK(half.rank() == expect_rank);
  // A collective inside the group sums only the group's ranks.
  std::vector<std::int64_t> v(10, r);
  tcoll::allreduce(half, std::span<std::int64_t>(v), tcoll::sum_op{},
                   tcoll::recursive_halving_doubling{});
  std::int64_t expect = 0;
  for (int q = r % 2; q < P; q += 2) expect += q;
  for (auto x : v) CHECK(x == expect);
  CHECK_THROWS_AS(t.split(-1, 0), tcoll::invalid_argument);
}

TEST_CASE("mpi_transport: a rank that skips the collective makes the others fail") {
  const int P = world_size(), r = world_rank();
  if (P < 2) return;
  const int skipper = P - 1;
  {
    tcoll::mpi_transport t(MPI_COMM_WORLD, 500ms);
    std::vector<float> data(16, 1.0f);
    if (r != skipper) {
      const auto start = tcoll::clock::now();
      // A rank next to the skipper times out; it announces the failure, so the others
      // may stop with aborted_error (naming the announcing rank) before their own timeout.
      try {
        tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{});
        FAIL("allreduce without one rank did not throw");
      } catch (const tcoll::timeout_error& e) {
        CHECK(e.rank() == r);
        CHECK(std::string(e.what()).find("timed out") != std::string::npos);
        CHECK(tcoll::clock::now() - start >= 500ms);
      } catch (const tcoll::aborted_error& e) {
        CHECK(e.rank() == r);
        CHECK(std::string(e.what()).find("announced a failure") != std::string::npos);
      }
      CHECK(tcoll::clock::now() - start < 10s);
      // The transport is broken: the next collective throws at once.
      const auto again = tcoll::clock::now();
      CHECK_THROWS(tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{}));
      CHECK(tcoll::clock::now() - again < 100ms);
    }
    // Clean up: everybody meets on the user's communicator, then the transport (and the
    // messages stranded in its duplicate) goes away.
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // A fresh transport works normally afterwards.
  auto t = mpi_test::make();
  std::vector<float> data(16, 1.0f);
  tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{});
  for (float v : data) CHECK(v == float(P));
}

TEST_CASE("mpi_transport: peers of a failed rank fail within a second, not after the timeout") {
  const int P = world_size(), r = world_rank();
  if (P < 2) return;
  const int failing = P / 2;
  {
    tcoll::mpi_transport t(MPI_COMM_WORLD, 20s);
    std::vector<float> data(1000, 0.25f);
    const auto start = tcoll::clock::now();
    if (r == failing) {
      // This rank's collective "fails" before it sends anything.
      std::this_thread::sleep_for(200ms);
      t.abort();
    } else {
      try {
        tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{});
        FAIL("allreduce with an aborted peer did not throw");
      } catch (const tcoll::aborted_error& e) {
        const std::string msg = e.what();
        CHECK_MESSAGE(
            msg.find("rank " + std::to_string(failing) + " announced") != std::string::npos, msg);
        CHECK(e.rank() == r);
      }
      const auto took = tcoll::clock::now() - start;
      CHECK_MESSAGE(took < 1200ms, "took " << std::chrono::duration<double>(took).count());
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  auto t = mpi_test::make();
  std::vector<float> data(16, 1.0f);
  tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{});
  for (float v : data) CHECK(v == float(P));
}

TEST_CASE("mpi_transport: non-blocking collectives below MPI_THREAD_MULTIPLE are a clear error") {
  int level = 0;
  MPI_Query_thread(&level);
  if (level == MPI_THREAD_MULTIPLE) return; // this suite initialises MPI without threads
  auto t = mpi_test::make();
  std::vector<float> v(8, 1.0f);
  try {
    auto q = tcoll::iallreduce(t, std::span<float>(v));
    FAIL("iallreduce without MPI_THREAD_MULTIPLE was accepted");
  } catch (const tcoll::transport_error& e) {
    CHECK(std::string(e.what()).find("MPI_THREAD_MULTIPLE") != std::string::npos);
  }
  // nothing was queued: blocking collectives still work
  tcoll::allreduce(t, std::span<float>(v));
  for (float x : v) CHECK(x == float(t.size()));
}

TEST_CASE("mpi_transport: transports made and destroyed in a loop leave no communicator behind") {
  // A program that builds a transport on a split or a duplicate every step must not leak
  // MPI communicators (MPICH-family MPIs run out of context ids after a few thousand). Each
  // transport owns two: its duplicate, freed at destruction, and the control communicator
  // of failure announcements, freed once every rank agreed that none saw a failure.
  const int P = world_size(), r = world_rank();
  const int cycles = P <= 2 ? 10000 : 400; // oversubscribed runs share two cores
  MPI_Barrier(MPI_COMM_WORLD);
  tcoll::detail::mpi::reap_controls(true);
  const long before = tcoll::live_control_communicators();
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half);
  long most = 0;
  for (int i = 0; i < cycles; ++i) {
    tcoll::mpi_transport t(i % 2 ? half : MPI_COMM_WORLD, 20s);
    if (i % 997 == 0) {
      std::vector<std::int32_t> v(5, r + 1);
      tcoll::allreduce(t, std::span<std::int32_t>(v), tcoll::sum_op{}, tcoll::ring{});
      std::int32_t want = 0;
      for (int q = 0; q < P; ++q)
        if (i % 2 == 0 || q % 2 == r % 2) want += q + 1;
      CHECK(v[0] == want);
    }
    most = std::max(most, tcoll::live_control_communicators() - before);
  }
  MPI_Comm_free(&half);
  MPI_Barrier(MPI_COMM_WORLD);
  tcoll::detail::mpi::reap_controls(true);
  CHECK(tcoll::live_control_communicators() == before);
  // bounded on the way: a few transports' agreements in flight at most
  CHECK_MESSAGE(most <= 8, "at most " << most << " control communicators alive at once");
}

TEST_CASE("mpi_transport: after a failure the control communicator stays until MPI_Finalize") {
  // An announcement may still be on its way to a rank that has destroyed its transport; it
  // must land on a communicator no successor reuses.
  const int P = world_size();
  if (P < 2) return;
  MPI_Barrier(MPI_COMM_WORLD);
  tcoll::detail::mpi::reap_controls(true);
  const long before = tcoll::live_control_communicators();
  {
    tcoll::mpi_transport t(MPI_COMM_WORLD, 20s);
    if (world_rank() == 0) t.abort(); // announces to every peer
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  tcoll::detail::mpi::reap_controls(true);
  CHECK(tcoll::live_control_communicators() == before + 1);
  // and the next transports work as before
  auto t = mpi_test::make();
  std::vector<float> data(16, 1.0f);
  tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::ring{});
  for (float v : data) CHECK(v == float(P));
}
